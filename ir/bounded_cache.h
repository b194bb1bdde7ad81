// One bounded cache for every cache Stats::caches reports: values by key, at most max_entries of
// them and (when max_bytes is set) at most max_bytes of what they hold, the least recently used
// out first, with counts of hits, misses and evictions. What a value is and what it costs to make
// are its owner's; so is locking (a BoundedCache is not thread-safe).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <unordered_map>
#include <utility>

#include "edbatch/stats.h"

namespace edb::ir {

// A hash for pair keys ((cell, calls), (cell, type)), for BoundedCache's Hash.
struct PairHash {
  template <typename A, typename B>
  size_t operator()(const std::pair<A, B>& p) const {
    const size_t a = std::hash<A>()(p.first), b = std::hash<B>()(p.second);
    return a ^ (b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2));
  }
};

template <typename Key, typename Value, typename Hash = std::hash<Key>>
class BoundedCache {
 public:
  struct Item {
    Key key;
    Value value;
    uint64_t bytes = 0;
  };

  // max_entries 0: none kept (insert drops what it is given); max_bytes 0: no bound on bytes.
  explicit BoundedCache(size_t max_entries, uint64_t max_bytes = 0) : max_entries_(max_entries), max_bytes_(max_bytes) {}

  // The value for `key`, now the most recently used; null when absent. Counts a hit or a miss.
  Value* find(const Key& key) {
    const auto at = index_.find(key);
    if (at == index_.end()) {
      ++misses_;
      return nullptr;
    }
    ++hits_;
    items_.splice(items_.begin(), items_, at->second);
    return &at->second->value;
  }
  // The same without counting or reordering (for reports and checks).
  const Value* peek(const Key& key) const {
    const auto at = index_.find(key);
    return at == index_.end() ? nullptr : &at->second->value;
  }

  // Puts `value` under `key` (replacing what was there) as the most recently used, holding `bytes`.
  // The least recently used entries go first until it fits; it is kept even when it alone is over
  // max_bytes (it is about to be used). `evicted(key, value)` sees each entry evicted before it
  // goes (a device function to unload, code to destroy outside a lock). Null when max_entries is 0.
  template <typename Evicted>
  Value* insert(const Key& key, Value value, uint64_t bytes, Evicted&& evicted) {
    if (const auto at = index_.find(key); at != index_.end()) {
      bytes_ -= at->second->bytes;
      items_.erase(at->second);
      index_.erase(at);
    }
    if (max_entries_ == 0) return nullptr;
    while (!items_.empty() && (items_.size() >= max_entries_ || (max_bytes_ > 0 && bytes_ + bytes > max_bytes_)))
      evict_oldest(evicted);
    items_.push_front(Item{key, std::move(value), bytes});
    bytes_ += bytes;
    index_.emplace(key, items_.begin());
    return &items_.front().value;
  }
  Value* insert(const Key& key, Value value, uint64_t bytes = 0) {
    return insert(key, std::move(value), bytes, [](const Key&, Value&) {});
  }

  // New bounds; entries beyond them go, least recently used first.
  template <typename Evicted>
  void set_limits(size_t max_entries, uint64_t max_bytes, Evicted&& evicted) {
    max_entries_ = max_entries;
    max_bytes_ = max_bytes;
    while (!items_.empty() && (items_.size() > max_entries_ || (max_bytes_ > 0 && bytes_ > max_bytes_)))
      evict_oldest(evicted);
  }
  void set_limits(size_t max_entries, uint64_t max_bytes = 0) {
    set_limits(max_entries, max_bytes, [](const Key&, Value&) {});
  }

  // Drops every entry; they count as evictions.
  void clear() {
    evictions_ += int64_t(items_.size());
    items_.clear();
    index_.clear();
    bytes_ = 0;
  }

  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  uint64_t bytes() const { return bytes_; }
  size_t max_entries() const { return max_entries_; }
  uint64_t max_bytes() const { return max_bytes_; }
  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }
  int64_t evictions() const { return evictions_; }
  // As Stats::caches reports it.
  CacheSize sizes() const {
    return CacheSize{int64_t(items_.size()), int64_t(bytes_), int64_t(max_entries_), int64_t(max_bytes_), evictions_};
  }

  // The entries, most recently used first.
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  template <typename Evicted>
  void evict_oldest(Evicted& evicted) {
    Item& oldest = items_.back();
    evicted(oldest.key, oldest.value);
    bytes_ -= oldest.bytes;
    index_.erase(oldest.key);
    items_.pop_back();
    ++evictions_;
  }

  std::list<Item> items_;  // most recently used first
  std::unordered_map<Key, typename std::list<Item>::iterator, Hash> index_;
  size_t max_entries_;
  uint64_t max_bytes_;
  uint64_t bytes_ = 0;
  int64_t hits_ = 0, misses_ = 0, evictions_ = 0;
};

}  // namespace edb::ir
