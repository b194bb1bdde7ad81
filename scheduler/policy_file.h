// What the learned policies' files share (fsm_file.cpp, imitation_file.cpp): the checksum of the
// content and the one way a read or write fails. scheduler/ only.
#pragma once

#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "edbatch/errors.h"

namespace edb::scheduler::policy_file {

// FNV-1a over the content's compact dump, as 16 hex digits.
inline std::string checksum(const nlohmann::json& content) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : content.dump()) h = (h ^ c) * 1099511628211ull;
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return text;
}

[[noreturn]] inline void fail(const std::string& path, const std::string& what) {
  throw UsageError("edb::Engine: policy file '" + path + "': " + what);
}

}  // namespace edb::scheduler::policy_file
