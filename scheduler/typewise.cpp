// Rank-bucket counts kept up to date as nodes become ready and run.
#include "scheduler/typewise.h"

#include "edbatch/errors.h"

namespace edb::scheduler {

void TypewiseFrontier::reset(const ScheduleInput& input, const Analysis& analysis, bool count_ranks) {
  input_ = &input;
  analysis_ = &analysis;
  count_ranks_ = count_ranks;
  if (!count_ranks) {
    frontier_.reset(input, analysis.types, analysis.dependencies);
    frontier_.seed([](ir::NodeId, uint32_t) {});
    return;
  }
  const TypeChains& chains = analysis.chains;
  const size_t width = analysis.types.count();
  rank_base_.assign(width + 1, 0);
  for (size_t t = 0; t < width; ++t) rank_base_[t + 1] = rank_base_[t] + chains.longest[t];
  unexecuted_.assign(rank_base_[width], 0);
  ready_at_.assign(rank_base_[width], 0);
  lowest_.assign(width, 1);
  for (size_t i = 0; i < chains.rank.size(); ++i)
    if (chains.rank[i] > 0) ++unexecuted_[rank_base_[analysis.types.of_node[i]] + chains.rank[i] - 1];
  frontier_.reset(input, analysis.types, analysis.dependencies);
  frontier_.seed([&](ir::NodeId id, uint32_t t) {
    const uint32_t r = chains.rank[id - input.begin];
    if (r > 0) ++ready_at_[rank_base_[t] + r - 1];
  });
}

uint64_t TypewiseFrontier::frontier_count(uint32_t t) {
  const uint32_t longest = analysis_->chains.longest[t];
  uint32_t& low = lowest_[t];
  while (low <= longest && unexecuted_[rank_base_[t] + low - 1] == 0) ++low;
  uint64_t tf = ready_count(t);
  if (low <= longest) {
    const uint32_t at = rank_base_[t] + low - 1;
    tf += unexecuted_[at] - ready_at_[at];
  }
  return tf;
}

uint32_t TypewiseFrontier::greedy_among(const std::vector<uint32_t>& types) {
  uint32_t best = LocalTypes::kNone;
  uint64_t best_f = 0, best_tf = 1;
  for (uint32_t t : types) {
    const uint64_t f = ready_count(t), tf = frontier_count(t);
    const uint64_t lhs = f * best_tf, rhs = best_f * tf;  // f / tf > best_f / best_tf
    if (best == LocalTypes::kNone || lhs > rhs || (lhs == rhs && (f > best_f || (f == best_f && t < best)))) {
      best = t;
      best_f = f;
      best_tf = tf;
    }
  }
  if (best == LocalTypes::kNone) throw InternalError("typewise frontier: nothing ready but nodes remain (cycle?)");
  return best;
}

}  // namespace edb::scheduler
