// libFuzzer target: the durable writer and the framed reader every binary file shares (ir/files.h,
// trace/binary_file.h). The input is a script of writes to one path: each write is a length byte
// and that many bytes, kept, abandoned (a TemporaryFile never committed) or framed as a model file.
// After each, the file holds the last write kept, whole, and the directory holds no temporary or
// lock file; a framed write reads back through read_binary_body exactly.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>

#include "tests/fuzz/fuzz_support.h"

namespace {

constexpr edb::detail::BinaryFormat kFormat = {{'E', 'D', 'B', 'F', 'U', 'Z', 'Z', '0'}, 1, "fuzz file"};

bool no_leftovers(const std::string& directory) {
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    const std::string name = entry.path().filename().string();
    if (edb::ir::is_temporary_name(name) || name.ends_with(".lock")) return false;
  }
  return true;
}

std::string contents_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace edb;
  const std::string directory = fuzz::scratch_directory() + "/durable";
  std::filesystem::remove_all(directory);
  std::filesystem::create_directories(directory);
  const std::string path = directory + "/file";
  std::string expected;
  bool exists = false;
  for (size_t at = 0; at + 1 < size;) {
    const uint8_t control = data[at++];
    const size_t length = std::min<size_t>(control >> 2, size - at);
    const std::string bytes(reinterpret_cast<const char*>(data + at), length);
    at += length;
    switch (control & 3) {
      case 0:
      case 1:
        fuzz::require(ir::write_file(path, bytes, {.lock = (control & 1) == 0, .sync = false}).empty(),
                      "a write to a writable directory succeeds");
        expected = bytes;
        exists = true;
        break;
      case 2: {
        ir::TemporaryFile abandoned(path);
        fuzz::require(abandoned.write(bytes, false).empty(), "a temporary is written");
        break;  // never committed: removed, the file unchanged
      }
      case 3: {
        detail::write_binary_file(path, kFormat, bytes, "fuzz");
        fuzz::require(detail::read_binary_body(path, kFormat, "fuzz") == bytes, "a framed body reads back");
        expected = detail::framed(kFormat, bytes);
        exists = true;
        break;
      }
    }
    fuzz::require(std::filesystem::exists(path) == exists, "the file exists once written");
    if (exists) fuzz::require(contents_of(path) == expected, "the file holds the last write, whole");
    fuzz::require(no_leftovers(directory), "no temporary or lock file is left behind");
  }
  // The file as it stands, read as a framed file: refused with a UsageError or read.
  if (exists) fuzz::accepts([&] { detail::read_binary_body(path, kFormat, "fuzz"); });
  return 0;
}
