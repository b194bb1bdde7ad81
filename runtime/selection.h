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
// equal values the earlier ones); `positions` is resized to k and its storage reused. The k
// largest are the first k of the rank order with the earlier position first among values that
// rank alike, a total order: a selection (nth_element, linear on average) finds them, with no
// sort of every position and no buffer (stable_sort allocated one per row: it was a fifth of the
// char-CNN tagger's time), and k = 1 is argmax_position's single pass.
inline void kmax_positions(const float* values, int64_t count, int64_t stride, int64_t k,
                           std::vector<int64_t>& positions) {
  if (k == 1) {
    positions.assign(1, argmax_position(values, count, stride));
    return;
  }
  positions.resize(size_t(count));
  for (int64_t j = 0; j < count; ++j) positions[size_t(j)] = j;
  const auto before = [&](int64_t a, int64_t b) {
    const float x = values[a * stride], y = values[b * stride];
    if (ranks_above(x, y)) return true;
    if (ranks_above(y, x)) return false;
    return a < b;
  };
  if (k < count) std::nth_element(positions.begin(), positions.begin() + k, positions.end(), before);
  positions.resize(size_t(k));
  std::sort(positions.begin(), positions.end());
}

}  // namespace edb::runtime
