// Shared by the libFuzzer targets: a reader may throw edb::UsageError for a bad input and nothing
// else; any other exception escapes and aborts (a finding), as does a crash or a sanitizer report.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <edbatch/errors.h>

#include "ir/files.h"
#include "trace/binary_file.h"

namespace edb::fuzz {

// Runs `read`; true when it returned, false when it refused the input with a UsageError.
template <typename F>
bool accepts(F&& read) {
  try {
    read();
    return true;
  } catch (const UsageError&) {
    return false;
  }
}

// A property that must hold for every input: abort (a finding) with `what` when it does not.
inline void require(bool holds, const char* what) {
  if (!holds) {
    std::fprintf(stderr, "fuzz: property failed: %s\n", what);
    std::abort();
  }
}

// A scratch directory for this process, made once and reused for every input.
inline const std::string& scratch_directory() {
  static const std::string path = [] {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/edb-fuzz-XXXXXX";
    if (!::mkdtemp(pattern.data())) std::abort();
    return pattern;
  }();
  return path;
}

// The input as the file `name` in the scratch directory, written by the project's durable writer.
inline std::string write_scratch(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = scratch_directory() + "/" + name;
  const std::string why =
      ir::write_file(path, std::string_view(reinterpret_cast<const char*>(data), size), {.lock = true, .sync = false});
  require(why.empty(), "the scratch file is written");
  return path;
}

// The input as a file of trace/binary_file.h's framing, for the checksummed formats. An input
// whose first byte is 1 is the body after it, given a header of `format` with the right size and
// checksum so the fuzzer reaches the body's parser; any other input is the whole file.
inline std::string binary_file_input(const detail::BinaryFormat& format, const uint8_t* data, size_t size) {
  if (size == 0 || data[0] != 1) return write_scratch("raw.bin", data, size);
  const std::string path = scratch_directory() + "/wrapped.bin";
  detail::write_binary_file(path, format, std::string(data + 1, data + size), "fuzz");
  return path;
}

}  // namespace edb::fuzz
