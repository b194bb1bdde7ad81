// Same-type chain ranks: for each scheduled node, the most nodes of its own type on any path that
// ends at it (1 when it has no ancestor of its type). The lower bound sums, per type, the longest
// chain; the greedy and learned policies use ranks to count a type's frontier in linear time.
// Precondition: LocalTypes built for the same input.
#pragma once

#include <cstdint>
#include <vector>

#include "scheduler/frontier.h"

namespace edb::scheduler {

class TypeChains {
 public:
  // One pass in topological order over a row of per-type counts per node (a vector max per
  // edge), so the cost is nodes x types / vector width. A row lives only until its node's last
  // consumer has read it, so the rows in use stay few and in cache. Reuses this object's buffers.
  void build(const ScheduleInput& input, const LocalTypes& types, const Dependencies& dependencies);

  std::vector<uint32_t> rank;     // per node in range (index id - begin); 0 for leaves
  std::vector<uint32_t> longest;  // per local type
  int64_t unbatchable = 0;        // nodes whose op is kUnbatchable (not in any chain)

  int64_t lower_bound() const;  // unbatchable + sum of longest

 private:
  template <typename Count>
  void fill(const ScheduleInput& input, const LocalTypes& types, const Dependencies& dependencies,
            std::vector<Count>& rows);
  std::vector<uint16_t> rows16_;
  std::vector<uint32_t> rows32_;
  std::vector<uint32_t> row_of_;      // per node: its row while live
  std::vector<uint32_t> unread_;      // per node: consumers that have not read its row yet
  std::vector<uint32_t> free_rows_;
};

// The analyses every policy may use, computed once per evaluation by the driver.
struct Analysis {
  LocalTypes types;
  Dependencies dependencies;
  TypeChains chains;
  void build(const ScheduleInput& input) {
    types.build(input);
    dependencies.build(input, types);
    chains.build(input, types, dependencies);
  }
};

}  // namespace edb::scheduler
