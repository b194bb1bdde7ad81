// The seeded random numbers the test generators draw from: splitmix64, the same numbers with every
// standard library (unlike std distributions), so a seed names one graph or program everywhere.
#pragma once

#include <cstdint>
#include <initializer_list>

namespace edb::testing {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  int below(int n) { return static_cast<int>(next() % static_cast<uint64_t>(n)); }
  double unit() { return double(next() >> 11) * 0x1.0p-53; }
  bool chance(double p) { return unit() < p; }
  // An index drawn with the given weights.
  int weighted(std::initializer_list<int> weights) {
    int total = 0;
    for (int w : weights) total += w;
    int x = below(total), i = 0;
    for (int w : weights) {
      if (x < w) return i;
      x -= w;
      ++i;
    }
    return i - 1;
  }

 private:
  uint64_t state_;
};

// A seed for stream `b` of seed `a`.
inline uint64_t mix(uint64_t a, uint64_t b) { return Rng(a * 0x2545f4914f6cdd1dull ^ (b + 0x632be59bd9b4e019ull)).next(); }

}  // namespace edb::testing
