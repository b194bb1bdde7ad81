// runtime::Arena: growing keeps the live values, from a small block into a mapping and from one
// mapping into a larger one (moved, not copied), and a large arena starts on a huge page.
#include "runtime/arena.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace edb::runtime {
namespace {

void fill(float* data, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) data[i] = float(i % 1000) + 0.5f;
}

bool holds(const float* data, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i)
    if (data[i] != float(i % 1000) + 0.5f) return false;
  return true;
}

TEST(Arena, GrowingKeepsTheLiveValues) {
  Arena arena;
  arena.reserve(1000, 0);  // small: not a mapping
  ASSERT_GE(arena.capacity(), 1000u);
  fill(arena.data(), 0, 1000);
  const size_t mapped = size_t{3} << 20;  // 12 MiB of floats: a mapping
  arena.reserve(mapped, 1000);
  ASSERT_GE(arena.capacity(), mapped);
  EXPECT_TRUE(holds(arena.data(), 0, 1000));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(arena.data()) % (size_t{2} << 20), 0u);
  fill(arena.data(), 0, mapped);
  arena.reserve(mapped * 3, mapped);  // a mapping moved into a larger one
  ASSERT_GE(arena.capacity(), mapped * 3);
  EXPECT_TRUE(holds(arena.data(), 0, mapped));
  fill(arena.data(), mapped, mapped * 3);  // the new part is writable
  EXPECT_TRUE(holds(arena.data(), 0, mapped * 3));
  const float* before = arena.data();
  arena.reserve(mapped, mapped);  // room enough: nothing moves
  EXPECT_EQ(arena.data(), before);
}

TEST(Arena, MovesTakeTheMemory) {
  Arena a;
  a.reserve(size_t{1} << 20, 0);
  fill(a.data(), 0, 100);
  Arena b(std::move(a));
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(a.capacity(), 0u);
  EXPECT_TRUE(holds(b.data(), 0, 100));
  Arena c;
  c = std::move(b);
  EXPECT_TRUE(holds(c.data(), 0, 100));
}

}  // namespace
}  // namespace edb::runtime
