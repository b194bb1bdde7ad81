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
  // One pass in (reverse, for heights) topological order over a row of counts per node (a vector
  // max per edge), a count per type that can form a chain (on a cycle of the type graph,
  // Dependencies::type_users). When the row is one 16-byte vector (the usual case) every node has
  // its own, in a register while it is built; wider, a node no one reads, or with no such type
  // before it, keeps no row, and a row lives only until the last node that reads it has, so the
  // rows in use stay few and in cache. Reuses this object's buffers.
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
  static constexpr uint32_t kNoLane = ~0u, kNoRow = ~0u;
  // A lane of the rows per type on a cycle of the type graph (the only ones whose chains can be
  // longer than 1; the others get rank and height 1 without one), and per unbatchable type when
  // `with_unbatchable`.
  void chain_lanes(const LocalTypes& types, const Dependencies& dependencies, bool with_unbatchable);
  template <bool kHeights, typename Count, size_t kWidth>
  void fill(const ScheduleInput& input, const LocalTypes& types, const Dependencies& dependencies,
            std::span<const uint32_t> weights, std::vector<Count>& rows);
  // A row per node, of one 16-byte vector (kWidth x Count).
  template <bool kHeights, typename Count, size_t kWidth>
  void fill_dense(const ScheduleInput& input, const LocalTypes& types, const Dependencies& dependencies,
                  std::span<const uint32_t> weights, std::vector<Count>& rows);
  // Terminal types from the lanes met below each type (exact_met: `met` holds them; else a flag per
  // type in meets_row_ tells only whether any lane was met, and a single-rank lane asks build() for
  // a second pass with them).
  template <typename Count>
  void find_terminal(const LocalTypes& types, const std::vector<Count>& met, size_t width, bool exact_met);
  std::vector<uint16_t> rows16_;
  std::vector<uint32_t> rows32_;
  std::vector<uint64_t> reach_;     // the type graph's transitive closure, as Dependencies::type_users
  std::vector<uint32_t> lane_of_;   // per type: its lane, or kNoLane
  uint32_t lanes_ = 0;
  size_t width_ = 0;                // lanes per row when fill's kWidth is 0
  // Heights: per type, whether a node of it has or reads a row; and when exact_met_ (always with
  // rows of one vector, for the types still single-rank), the OR of its nodes' rows (16- or 32-bit
  // counts, as the rows).
  std::vector<uint8_t> meets_row_;
  std::vector<uint16_t> met16_;
  std::vector<uint32_t> met32_;
  bool exact_met_ = false, needs_exact_met_ = false;
  std::vector<uint32_t> not_single_lanes_;  // heights: the lanes of types that are not single-rank
  std::vector<uint32_t> row_of_;      // per node: its row while live, or kNoRow
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
