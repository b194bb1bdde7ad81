// The shared framing of trace/'s binary files (binary_file.h): header checks, writing through
// ir/files.h, and the field reader's errors.
#include "trace/binary_file.h"

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "ir/files.h"

namespace edb::detail {

void put_string(std::string& out, const std::string& text) {
  put(out, static_cast<uint32_t>(text.size()));
  out += text;
}

std::string framed(const BinaryFormat& format, const std::string& body) {
  std::string file(format.magic, sizeof format.magic);
  put(file, format.version);
  put(file, static_cast<uint64_t>(body.size()));
  put(file, ir::checksum(body));
  file += body;
  return file;
}

void throw_if_failed(const std::string& why, const char* function) {
  if (!why.empty()) throw UsageError(std::string(function) + ": " + why);
}

void write_binary_file(const std::string& path, const BinaryFormat& format, const std::string& body,
                       const char* function) {
  throw_if_failed(ir::write_file(path, framed(format, body)), function);
}

std::string read_binary_body(const std::string& path, const BinaryFormat& format, const char* function,
                             uint32_t* version_read, uint64_t* checksum) {
  if (const std::string why = ir::unreadable_file_reason(path, ir::kMaxModelFileBytes); !why.empty())
    throw UsageError(std::string(function) + ": '" + path + "' " + why);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(std::string(function) + ": cannot open '" + path + "': " + std::strerror(errno));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  BinaryReader header(bytes, path, function);
  if (header.get_bytes(sizeof format.magic, "the header") != std::string(format.magic, sizeof format.magic))
    header.fail(std::string("not an edbatch ") + format.name + " (bad magic)");
  const uint32_t version = header.get<uint32_t>("the header");
  const uint32_t oldest = format.oldest ? format.oldest : format.version;
  if (version < oldest || version > format.version)
    header.fail("format version " + std::to_string(version) + ", this build reads version " +
                (oldest == format.version ? "" : std::to_string(oldest) + " to ") + std::to_string(format.version));
  if (version_read) *version_read = version;
  const uint64_t body_size = header.get<uint64_t>("the header");
  const uint64_t expected = header.get<uint64_t>("the header");
  const size_t left = header.left();
  if (left < body_size)
    header.fail("body is " + std::to_string(left) + " bytes, header says " + std::to_string(body_size) +
                " (truncated?)");
  if (left > body_size)
    header.fail("has " + std::to_string(left - body_size) + " extra bytes after the " +
                std::to_string(body_size) + "-byte body");
  std::string body = bytes.substr(kBinaryHeaderBytes);
  if (ir::checksum(body) != expected) header.fail("checksum mismatch (the file is damaged)");
  if (checksum) *checksum = expected;
  return body;
}

std::optional<BinaryHeader> read_binary_header(const std::string& path, const BinaryFormat& format) {
  std::ifstream in(path, std::ios::binary);
  char bytes[kBinaryHeaderBytes];
  if (!in.read(bytes, sizeof bytes) || std::memcmp(bytes, format.magic, sizeof format.magic) != 0) return std::nullopt;
  BinaryHeader header;
  std::memcpy(&header.version, bytes + sizeof format.magic, sizeof header.version);
  std::memcpy(&header.body_size, bytes + sizeof format.magic + sizeof header.version, sizeof header.body_size);
  std::memcpy(&header.checksum, bytes + sizeof format.magic + sizeof header.version + sizeof header.body_size,
              sizeof header.checksum);
  return header;
}

std::string BinaryReader::get_bytes(size_t length, const char* what) {
  need(length, what);
  std::string s = bytes_.substr(pos_, length);
  pos_ += length;
  return s;
}

std::vector<float> BinaryReader::get_floats(size_t count, const char* what) {
  if (count > left() / sizeof(float)) truncated(what);  // not need(): count * 4 could overflow
  std::vector<float> out(count);
  if (count > 0) std::memcpy(out.data(), bytes_.data() + pos_, count * sizeof(float));
  pos_ += count * sizeof(float);
  return out;
}

void BinaryReader::truncated(const char* what) const {
  fail(std::string("file ends inside ") + what + " (truncated?)");
}

void BinaryReader::fail(const std::string& what) const {
  throw UsageError(std::string(function_) + ": '" + path_ + "' at byte " + std::to_string(base_ + pos_) +
                   ": " + what);
}

}  // namespace edb::detail
