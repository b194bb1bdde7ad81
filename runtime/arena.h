// The value arena of a trace: grows by itself (doubling) and is reused across traces. Growing
// keeps the old values only while the trace still needs them, and new space is not zero-filled.
// A large arena asks for transparent huge pages (Linux, where THP is "madvise" or "always"):
// its first touch then faults in 2 MiB at a time instead of 4 KiB, which on a virtual machine
// was most of a training run's first epoch (a page fault costs microseconds there).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace edb::runtime {

class Arena {
 public:
  // Makes room for `floats`; the first `live` floats keep their values.
  void reserve(size_t floats, size_t live) {
    if (floats <= capacity_) return;
    const size_t capacity = std::max(floats, capacity_ * 2);
    Buffer grown = allocate(capacity * sizeof(float));
    if (live > 0) std::memcpy(grown.get(), data_.get(), live * sizeof(float));
    data_ = std::move(grown);
    capacity_ = capacity;
  }
  float* data() { return data_.get(); }
  size_t capacity() const { return capacity_; }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  using Buffer = std::unique_ptr<float[], Free>;
  static constexpr size_t kHugePage = size_t{2} << 20;

  static Buffer allocate(size_t bytes) {
    const size_t alignment = bytes >= kHugePage ? kHugePage : 64;
    const size_t rounded = (bytes + alignment - 1) / alignment * alignment;
    Buffer buffer(static_cast<float*>(std::aligned_alloc(alignment, rounded)));
    if (!buffer) throw std::bad_alloc();
#if defined(MADV_HUGEPAGE)
    if (alignment == kHugePage) madvise(buffer.get(), rounded, MADV_HUGEPAGE);  // advice: failure is harmless
#endif
    return buffer;
  }

  Buffer data_;
  size_t capacity_ = 0;
};

}  // namespace edb::runtime
