// Checks on a file a user names before it is read whole (a model, an optimizer state, a policy):
// one place that turns a directory, a device or pipe, a file too large or unreadable into a
// sentence, so every reader's UsageError names the path and the reason.
#pragma once

#include <cstdint>
#include <string>

namespace edb::ir {

// Why the file at `path` cannot be read whole, or "" when it is a readable regular file of at most
// `max_bytes`: "does not exist", "is a directory", "is not a regular file (a device, pipe or
// socket)", "is N bytes, more than the M this reader accepts", "cannot be opened: REASON".
std::string unreadable_file_reason(const std::string& path, uint64_t max_bytes);

// Why a file written whole at `path` (a temporary file, then renamed over it) must not replace what
// is there, or "" when nothing is there or a regular file is: "is a directory; give a file name in
// it", "is not a regular file (a device, pipe or socket); give the name of a file to write" (a
// rename would put a file in place of /dev/null).
std::string unreplaceable_file_reason(const std::string& path);

// The most a model, optimizer or policy file may hold: 16 GiB.
constexpr uint64_t kMaxModelFileBytes = uint64_t{16} << 30;

}  // namespace edb::ir
