// The value arena of a trace: grows by itself (doubling) and is reused across traces. Growing
// keeps the old values only while the trace still needs them, and new space is not zero-filled.
// A large arena (2 MiB or more) is its own memory mapping (Linux): it asks for transparent huge
// pages, so its first touch faults in 2 MiB at a time instead of 4 KiB (on a virtual machine a
// page fault costs microseconds, which was most of a training run's first epoch), and it grows by
// moving its pages (mremap) rather than copying the values it keeps into fresh memory, page fault
// by page fault. As a mapping it also stays out of malloc's heap, whose later allocations would
// otherwise inherit the huge-page advice and fault in 2 MiB, zeroed, for every small block.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace edb::runtime {

class Arena {
 public:
  Arena() = default;
  Arena(Arena&& other) noexcept : data_(std::exchange(other.data_, nullptr)), capacity_(std::exchange(other.capacity_, 0)) {}
  Arena& operator=(Arena&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(capacity_, other.capacity_);
    return *this;
  }
  ~Arena() { release(data_, capacity_); }

  // Makes room for `floats`; the first `live` floats keep their values.
  void reserve(size_t floats, size_t live) {
    if (floats <= capacity_) return;
    const size_t capacity = std::max(floats, capacity_ * 2);
    data_ = grow(data_, capacity_, capacity, std::min(live, capacity_));
    capacity_ = capacity;
  }
  float* data() { return data_; }
  size_t capacity() const { return capacity_; }

 private:
  static constexpr size_t kHugePage = size_t{2} << 20;

  static bool mapped(size_t floats) {
#if defined(__linux__)
    return floats * sizeof(float) >= kHugePage;
#else
    (void)floats;
    return false;
#endif
  }
  static size_t mapped_bytes(size_t floats) { return (floats * sizeof(float) + kHugePage - 1) / kHugePage * kHugePage; }

#if defined(__linux__)
  // A mapping of `bytes` (a multiple of kHugePage) at a kHugePage-aligned address: a larger
  // reservation, trimmed at both ends. Pages are never touched here.
  static void* reserve_aligned(size_t bytes) {
    void* raw = mmap(nullptr, bytes + kHugePage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) throw std::bad_alloc();
    const uintptr_t begin = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t aligned = (begin + kHugePage - 1) / kHugePage * kHugePage;
    if (aligned > begin) munmap(raw, aligned - begin);
    const uintptr_t end = begin + bytes + kHugePage;
    if (end > aligned + bytes) munmap(reinterpret_cast<void*>(aligned + bytes), end - (aligned + bytes));
    return reinterpret_cast<void*>(aligned);
  }
#endif

  // A buffer of `capacity` floats holding the first `live` floats of `old` (of `old_capacity`),
  // which it replaces.
  static float* grow(float* old, size_t old_capacity, size_t capacity, size_t live) {
#if defined(__linux__)
    if (mapped(capacity)) {
      const size_t bytes = mapped_bytes(capacity);
      void* at = reserve_aligned(bytes);
      if (old && mapped(old_capacity)) {
        // The old pages move to the start of the new place (none is copied), which grows by
        // fresh, untouched pages after them.
        const size_t old_bytes = mapped_bytes(old_capacity);
        if (mremap(old, old_bytes, old_bytes, MREMAP_MAYMOVE | MREMAP_FIXED, at) == MAP_FAILED) {
          munmap(at, bytes);
          throw std::bad_alloc();
        }
        void* rest = static_cast<char*>(at) + old_bytes;
        if (mmap(rest, bytes - old_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) ==
            MAP_FAILED) {
          munmap(at, bytes);
          throw std::bad_alloc();
        }
      } else {
        if (mmap(at, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED) {
          munmap(at, bytes);
          throw std::bad_alloc();
        }
        if (live > 0) std::memcpy(at, old, live * sizeof(float));
        release(old, old_capacity);
      }
      madvise(at, bytes, MADV_HUGEPAGE);  // advice: failure is harmless
      return static_cast<float*>(at);
    }
#endif
    auto* grown = static_cast<float*>(std::aligned_alloc(64, (capacity * sizeof(float) + 63) / 64 * 64));
    if (!grown) throw std::bad_alloc();
    if (live > 0) std::memcpy(grown, old, live * sizeof(float));
    release(old, old_capacity);
    return grown;
  }

  static void release(float* data, size_t capacity) {
    if (!data) return;
#if defined(__linux__)
    if (mapped(capacity)) {
      munmap(data, mapped_bytes(capacity));
      return;
    }
#endif
    std::free(data);
  }

  float* data_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace edb::runtime
