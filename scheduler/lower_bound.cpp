// The lower bound from the same-type chain ranks.
#include "scheduler/lower_bound.h"

#include "scheduler/frontier.h"
#include "scheduler/type_chains.h"

namespace edb::scheduler {

int64_t lower_bound(const ScheduleInput& input) {
  Analysis analysis;
  analysis.build(input);
  return analysis.chains.lower_bound();
}

// Every batch of a type adds its weight, and a type needs at least its longest chain's length in
// batches, so the weighted sum stays a bound.
int64_t weighted_lower_bound(const ScheduleInput& input, const Analysis& analysis, std::vector<uint32_t>& weights) {
  expanded_type_weights(input, analysis.types, weights);
  int64_t bound = analysis.chains.unbatchable;
  for (size_t t = 0; t < weights.size(); ++t) bound += int64_t(weights[t]) * analysis.chains.longest[t];
  return bound;
}

}  // namespace edb::scheduler
