// The file checks of ir/files.h.
#include "ir/files.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <system_error>
#include <filesystem>

namespace edb::ir {

std::string unreadable_file_reason(const std::string& path, uint64_t max_bytes) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (error || !fs::exists(status)) {
    return error && error != std::errc::no_such_file_or_directory ? "cannot be examined: " + error.message()
                                                                   : "does not exist";
  }
  if (fs::is_directory(status)) return "is a directory";
  if (!fs::is_regular_file(status)) return "is not a regular file (a device, pipe or socket)";
  const uintmax_t bytes = fs::file_size(path, error);
  if (error) return "cannot be examined: " + error.message();
  if (bytes > max_bytes)
    return "is " + std::to_string(bytes) + " bytes, more than the " + std::to_string(max_bytes) + " this reader accepts";
  std::ifstream probe(path, std::ios::binary);
  if (!probe) return std::string("cannot be opened: ") + std::strerror(errno);
  return "";
}

std::string unreplaceable_file_reason(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::file_status status = fs::status(path, error);  // through links, as the user means them
  if (error || !fs::exists(status) || fs::is_regular_file(status)) return "";
  if (fs::is_directory(status)) return "is a directory; give a file name in it";
  return "is not a regular file (a device, pipe or socket); give the name of a file to write";
}

}  // namespace edb::ir
