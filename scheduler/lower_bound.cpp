// The lower bound from the same-type chain ranks.
#include "scheduler/lower_bound.h"

#include "scheduler/type_chains.h"

namespace edb::scheduler {

int64_t lower_bound(const ScheduleInput& input) {
  Analysis analysis;
  analysis.build(input);
  return analysis.chains.lower_bound();
}

}  // namespace edb::scheduler
