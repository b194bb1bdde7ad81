// The lower bound from the same-type chain ranks.
#include "scheduler/lower_bound.h"

#include "scheduler/type_chains.h"

namespace edb::scheduler {

int64_t lower_bound(const ScheduleInput& input) {
  const LocalTypes types(input);
  const TypeChains chains = type_chains(input, types);
  int64_t bound = chains.unbatchable;
  for (uint32_t l : chains.longest) bound += l;
  return bound;
}

}  // namespace edb::scheduler
