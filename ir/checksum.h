// The project's one checksum: FNV-1a, 64-bit, over bytes. It detects damaged files (the model,
// optimizer and policy files); it is not a security measure, and not the kernel cache's key or
// checksum (xxh3, jit/kernel_cache.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace edb::ir {

// The checksum of bytes given piece by piece: checksum(a + b) == Checksum().add(a).add(b).value().
class Checksum {
 public:
  Checksum& add(const void* data, size_t size) {
    for (const unsigned char* c = static_cast<const unsigned char*>(data); size--; ++c) h_ = (h_ ^ *c) * 1099511628211ull;
    return *this;
  }
  Checksum& add(std::string_view bytes) { return add(bytes.data(), bytes.size()); }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 1469598103934665603ull;
};

inline uint64_t checksum(std::string_view bytes) { return Checksum().add(bytes).value(); }

}  // namespace edb::ir
