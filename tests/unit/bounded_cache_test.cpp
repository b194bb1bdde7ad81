// ir::BoundedCache, the one cache behind every Stats::caches entry: least recently used out first,
// within entries and bytes, every eviction seen by its owner and counted.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ir/bounded_cache.h"

namespace edb::ir {
namespace {

std::vector<std::string> keys_of(const BoundedCache<std::string, int>& cache) {
  std::vector<std::string> keys;
  for (const auto& item : cache) keys.push_back(item.key);
  return keys;
}

TEST(BoundedCache, TheLeastRecentlyUsedGoesFirstAndEachEvictionIsSeen) {
  BoundedCache<std::string, int> cache(3);
  std::vector<std::string> evicted;
  auto seen = [&](const std::string& key, int&) { evicted.push_back(key); };
  for (const char* key : {"a", "b", "c"}) cache.insert(key, int(key[0]), 0, seen);
  ASSERT_NE(cache.find("a"), nullptr);  // a is now the most recently used
  EXPECT_EQ(*cache.find("a"), 'a');
  EXPECT_EQ(cache.find("z"), nullptr);
  cache.insert("d", 'd', 0, seen);  // b, the least recently used, goes
  EXPECT_EQ(evicted, std::vector<std::string>{"b"});
  EXPECT_EQ(keys_of(cache), (std::vector<std::string>{"d", "a", "c"}));
  EXPECT_EQ(cache.hits(), 2);
  EXPECT_EQ(cache.misses(), 1);
  EXPECT_EQ(cache.evictions(), 1);
  // Inserting a key again replaces its value without evicting anything.
  cache.insert("c", 7, 0, seen);
  EXPECT_EQ(*cache.peek("c"), 7);
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(cache.evictions(), 1);
  // Smaller limits evict at once, oldest first.
  cache.set_limits(1, 0, seen);
  EXPECT_EQ(evicted, (std::vector<std::string>{"b", "a", "d"}));
  EXPECT_EQ(keys_of(cache), std::vector<std::string>{"c"});
  const CacheSize sizes = cache.sizes();
  EXPECT_EQ(sizes.entries, 1);
  EXPECT_EQ(sizes.max_entries, 1);
  EXPECT_EQ(sizes.evictions, 3);
  cache.clear();  // cleared entries count as evictions, as Stats::caches says
  EXPECT_EQ(cache.sizes().evictions, 4);
  EXPECT_TRUE(cache.empty());
}

TEST(BoundedCache, BytesAreBoundedAndTheNewestIsAlwaysKept) {
  BoundedCache<int, std::unique_ptr<int>> cache(100, 10);
  cache.insert(1, std::make_unique<int>(1), 4);
  cache.insert(2, std::make_unique<int>(2), 4);
  EXPECT_EQ(cache.bytes(), 8u);
  cache.insert(3, std::make_unique<int>(3), 4);  // 12 > 10: 1 goes
  EXPECT_EQ(cache.peek(1), nullptr);
  EXPECT_EQ(cache.bytes(), 8u);
  cache.insert(4, std::make_unique<int>(4), 30);  // alone over the bound: kept, everything else goes
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(**cache.peek(4), 4);
  EXPECT_EQ(cache.bytes(), 30u);
  EXPECT_EQ(cache.sizes().max_bytes, 10);
}

TEST(BoundedCache, NoEntriesMeansNothingIsKept) {
  BoundedCache<std::pair<const void*, int>, int, PairHash> cache(0);
  EXPECT_EQ(cache.insert({nullptr, 1}, 5), nullptr);
  EXPECT_TRUE(cache.empty());
  cache.set_limits(2);
  int a = 0, b = 0;
  EXPECT_NE(cache.insert({&a, 1}, 5), nullptr);
  EXPECT_NE(cache.insert({&b, 1}, 6), nullptr);
  EXPECT_EQ(*cache.find({&a, 1}), 5);
  EXPECT_EQ(cache.find({&a, 2}), nullptr);
}

}  // namespace
}  // namespace edb::ir
