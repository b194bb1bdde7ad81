// The framing that trace/'s binary files share (the model file, the optimizer state file): magic,
// version, body size and checksum (ir/checksum.h), written by ir/files.h's durable writer, and the
// typed field reader whose errors name the file and the byte offset. Each file's body is its owner's.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "edbatch/errors.h"
#include "ir/checksum.h"

namespace edb::detail {

template <typename T>
void put(std::string& out, const T& value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

// A uint32 length, then the bytes.
void put_string(std::string& out, const std::string& text);

// One kind of file: its 8-byte magic, the version this build writes and reads, and its name in
// errors ("model file": "not an edbatch model file (bad magic)").
struct BinaryFormat {
  char magic[8];
  uint32_t version;
  const char* name;
  uint32_t oldest = 0;  // the oldest version this build still reads (0: only `version`)
};

// Magic, version, body size, checksum: where the body starts.
constexpr size_t kBinaryHeaderBytes = 8 + 4 + 8 + 8;

// Header + `body`: the bytes of the file.
std::string framed(const BinaryFormat& format, const std::string& body);

// Writes framed(format, body) to `path` with ir::write_file (a temporary file unique to this
// writer, flushed, renamed; writers of one path take turns), so a crash mid-write never leaves a
// half-written file there and two saves at once both succeed. `function` ("edb::Model::save()")
// starts every error.
void write_binary_file(const std::string& path, const BinaryFormat& format, const std::string& body,
                       const char* function);
// A UsageError "FUNCTION: WHY" unless `why` (one of ir/files.h's reasons) is empty.
void throw_if_failed(const std::string& why, const char* function);

// The body of the file at `path`, after checking the header's magic, version, size and checksum;
// a UsageError starting with `function` ("edb::Model::load()") otherwise. `version`, when given,
// receives the file's format version (between format.oldest and format.version), and `checksum`
// the body's (checked).
std::string read_binary_body(const std::string& path, const BinaryFormat& format, const char* function,
                             uint32_t* version = nullptr, uint64_t* checksum = nullptr);

// The header of the file at `path` alone, its body unread and unchecked; nullopt when the file
// cannot be read or does not start with `format`'s magic.
struct BinaryHeader {
  uint32_t version = 0;
  uint64_t body_size = 0, checksum = 0;
};
std::optional<BinaryHeader> read_binary_header(const std::string& path, const BinaryFormat& format);

// Reads typed fields from a file's bytes; a field that runs past the end, or fail(), is a
// UsageError "FUNCTION: 'PATH' at byte N: ...".
class BinaryReader {
 public:
  // `base`: where `bytes` start in the file, so messages give file offsets. The reader keeps
  // references to all three strings.
  BinaryReader(const std::string& bytes, const std::string& path, const char* function, size_t base = 0)
      : bytes_(bytes), path_(path), function_(function), base_(base) {}

  template <typename T>
  T get(const char* what) {
    T value;
    need(sizeof value, what);
    std::memcpy(&value, bytes_.data() + pos_, sizeof value);
    pos_ += sizeof value;
    return value;
  }
  std::string get_bytes(size_t length, const char* what);
  // A uint32 length, then the bytes (put_string's layout); `what` names both in errors.
  std::string get_string(const char* what) { return get_bytes(get<uint32_t>(what), what); }
  // Checks the length before allocating, so a damaged count fails instead of allocating.
  std::vector<float> get_floats(size_t count, const char* what);

  [[noreturn]] void fail(const std::string& what) const;
  size_t position() const { return pos_; }
  size_t left() const { return bytes_.size() - pos_; }

 private:
  void need(size_t count, const char* what) const {
    if (left() < count) truncated(what);
  }
  [[noreturn]] void truncated(const char* what) const;
  const std::string& bytes_;
  const std::string& path_;
  const char* function_;
  size_t base_ = 0;
  size_t pos_ = 0;
};

}  // namespace edb::detail
