// What the learned policies' files share (fsm_file.cpp, imitation_file.cpp): the framing (format,
// version, content, checksum of the content), writing through ir/files.h's durable writer,
// parsing, and the one way a read or write fails. scheduler/ only.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "edbatch/errors.h"
#include "ir/checksum.h"
#include "ir/files.h"

namespace edb::scheduler::policy_file {

// ir::checksum of the content's compact dump, as 16 hex digits.
inline std::string checksum(const nlohmann::json& content) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(ir::checksum(content.dump())));
  return text;
}

[[noreturn]] inline void fail(const std::string& path, const std::string& what) {
  throw UsageError("edb::Engine: policy file '" + path + "': " + what);
}

// Writes {format, version, content, checksum} to `path` with ir::write_file: whole or not at all,
// nothing left behind on failure, writers of one path taking turns.
inline void write(const std::string& path, const char* format, int version, const nlohmann::json& content) {
  const nlohmann::json file = {{"format", format}, {"version", version}, {"content", content},
                               {"checksum", checksum(content)}};
  if (const std::string why = ir::write_file(path, file.dump(1) + "\n"); !why.empty()) fail(path, why);
}

// The file at `path` as JSON (its framing is the caller's to check).
inline nlohmann::json parse(const std::string& path) {
  if (const std::string why = ir::unreadable_file_reason(path, ir::kMaxModelFileBytes); !why.empty()) fail(path, why);
  std::ifstream in(path);
  if (!in) fail(path, std::string("cannot open: ") + std::strerror(errno));
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    fail(path, "not valid JSON (byte " + std::to_string(e.byte) + ")");
  } catch (const nlohmann::json::exception& e) {  // e.g. out_of_range: a number too large for a double
    fail(path, std::string("not valid JSON: ") + e.what());
  }
}

}  // namespace edb::scheduler::policy_file
