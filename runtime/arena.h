// The value arena of a trace: grows by itself (doubling) and is reused across traces. Growing
// keeps the old values only while the trace still needs them, and new space is not zero-filled.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>

namespace edb::runtime {

class Arena {
 public:
  // Makes room for `floats`; the first `live` floats keep their values.
  void reserve(size_t floats, size_t live) {
    if (floats <= capacity_) return;
    const size_t capacity = std::max(floats, capacity_ * 2);
    std::unique_ptr<float[]> grown(new float[capacity]);
    if (live > 0) std::memcpy(grown.get(), data_.get(), live * sizeof(float));
    data_ = std::move(grown);
    capacity_ = capacity;
  }
  float* data() { return data_.get(); }
  size_t capacity() const { return capacity_; }

 private:
  std::unique_ptr<float[]> data_;
  size_t capacity_ = 0;
};

}  // namespace edb::runtime
