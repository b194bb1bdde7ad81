// Same-type chains: for each scheduled node, the most nodes of its own type on any path that ends
// at it (its rank: the typewise counts of greedy) or that starts at it (its height: the tight
// frontier of the learned policy and the search); one pass either way, and either gives each type's
// longest chain, which the lower bound sums. The heights pass also gives what the tight frontier
// reads beside them (remaining batches, terminal types), so a policy reading heights pays for one
// pass over the edges. Precondition: LocalTypes built for the same input.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "scheduler/frontier.h"

namespace edb::scheduler {

class TypeChains {
 public:
  // One pass in (reverse, for heights) topological order over a row of per-type counts per node (a
  // vector max per edge), so the cost is nodes x types / vector width. A row lives only until the
  // last node that reads it has, so the rows in use stay few and in cache. Reuses this object's
  // buffers.
  // `weights` (per local type, expanded_type_weights) are read for heights only.
  void build(const ScheduleInput& input, const LocalTypes& types, const Dependencies& dependencies,
             ChainDirection direction = ChainDirection::ranks, std::span<const uint32_t> weights = {});

  ChainDirection direction = ChainDirection::ranks;
  // Per node in range (index id - begin), the one `direction` asks for (the other is empty); 0 for
  // leaves and unbatchable nodes.
  std::vector<uint32_t> rank;
  std::vector<uint32_t> height;
  std::vector<uint32_t> longest;  // per local type
  int64_t unbatchable = 0;        // nodes whose op is kUnbatchable (not in any chain)
  // Built with heights only (else empty). Per node in range: the most batches (weighted) on any
  // path that starts at it, itself included: how far its instance still has to go.
  std::vector<uint32_t> remaining;
  // Per local type: single-rank, and every path from its nodes meets only single-rank types (the
  // output layer, losses): running it before it is tight never lets anything else run sooner.
  std::vector<uint8_t> terminal;

  int64_t lower_bound() const;  // unbatchable + sum of longest

 private:
  template <bool kHeights, typename Count>
  void fill(const ScheduleInput& input, const LocalTypes& types, const Dependencies& dependencies,
            std::span<const uint32_t> weights, std::vector<Count>& rows);
  std::vector<uint16_t> rows16_;
  std::vector<uint32_t> rows32_;
  // Heights: per row, and per type over its nodes' rows, a bit per type met on a path from there.
  std::vector<uint64_t> met_, met_by_type_;
  std::vector<uint64_t> not_single_;  // heights: the types that are not single-rank, as bits
  std::vector<uint32_t> row_of_;      // per node: its row while live
  std::vector<uint32_t> unread_;      // per node: consumers that have not read its row yet
  std::vector<uint32_t> free_rows_;
};

// The analyses every policy may use, computed once per evaluation by the driver, the chains the
// way the policy reads them.
struct Analysis {
  LocalTypes types;
  Dependencies dependencies;
  std::vector<uint32_t> weights;  // per local type: batches one batch of it costs once cells expand
  TypeChains chains;
  void build(const ScheduleInput& input, ChainDirection direction = ChainDirection::ranks) {
    types.build(input);
    dependencies.build(input, types);
    expanded_type_weights(input, types, weights);
    chains.build(input, types, dependencies, direction, weights);
  }
};

}  // namespace edb::scheduler
