// The positions argmax and kmax_pooling select, one rule for the reference and batched executors
// (so the oracle and the kernels pick alike): a NaN ranks above every number (as ir::max_of keeps
// it), and of equal values the earlier position comes first. Writing the values is the caller's.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace edb::runtime {

// Whether a ranks strictly above b (NaNs rank alike, above every number).
inline bool ranks_above(float a, float b) { return a != a ? b == b : (b == b && a > b); }

// The position of the largest of count values, `stride` floats apart: the first at ties.
inline int64_t argmax_position(const float* values, int64_t count, int64_t stride) {
  int64_t best = 0;
  for (int64_t j = 1; j < count; ++j)
    if (ranks_above(values[j * stride], values[best * stride])) best = j;
  return best;
}

// The positions of the k largest of count values, `stride` floats apart, in increasing order (of
// equal values the earlier ones); `positions` is resized to k and its storage reused.
inline void kmax_positions(const float* values, int64_t count, int64_t stride, int64_t k,
                           std::vector<int64_t>& positions) {
  positions.resize(size_t(count));
  for (int64_t j = 0; j < count; ++j) positions[size_t(j)] = j;
  std::stable_sort(positions.begin(), positions.end(),
                   [&](int64_t a, int64_t b) { return ranks_above(values[a * stride], values[b * stride]); });
  positions.resize(size_t(k));
  std::sort(positions.begin(), positions.end());
}

}  // namespace edb::runtime
