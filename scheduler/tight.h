// Tight batches (docs/design.md "A cost that is exact"): a batch of type t is tight when it holds every
// unexecuted t-node at the head of a longest remaining t-chain. Heights (the most t-nodes on a path
// that starts at a node) never change while the node waits, so a type's tightness is one compare of
// two counters. Every schedule has exactly sum_t longest_t tight batches; a non-tight batch of t
// costs weight_t (the batches one batch of t expands to). The search and the learned policy walk this.
// Precondition: an Analysis built for the same input.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "scheduler/typewise.h"

namespace edb::scheduler {

// Per scheduled node, the most nodes of its own type on any path that starts at it (1 when no
// descendant has its type); 0 for unbatchable nodes and leaves. Views of the analysis's when it was
// built for heights (the learned policy's: no pass beyond the one greedy's ranks cost); else one
// reverse pass of its own over per-type rows, a row per node (2 bytes per chain type). Reuses this
// object's buffers; the views must not outlive the analysis.
struct ChainHeights {
  std::span<const uint32_t> height;  // per node in range (index id - begin)
  std::vector<uint32_t> weight;  // per local type: batches one batch of it costs once cells expand
  // Per local type (TypeChains::terminal): single-rank, and every path from its nodes meets only
  // single-rank types: running it before it is tight never lets anything else run sooner.
  std::vector<uint8_t> terminal;
  // Per node in range, when built `with_remaining` (else empty): the most batches (weighted) on any
  // path that starts at it, itself included: how far its instance still has to go.
  std::span<const uint32_t> remaining;
  void build(const ScheduleInput& input, const Analysis& analysis, bool with_remaining = false);

  ChainHeights() = default;
  ChainHeights(const ChainHeights&) = delete;  // the views may be of this object's own buffers
  ChainHeights& operator=(const ChainHeights&) = delete;
  ChainHeights(ChainHeights&&) = default;
  ChainHeights& operator=(ChainHeights&&) = default;

 private:
  std::vector<uint32_t> own_height_, own_remaining_;
  std::vector<uint16_t> rows_;     // per node, a row of chain-type lanes (nodes x lanes)
  std::vector<uint32_t> lane_of_;
  std::vector<uint8_t> flags_;     // per node: terminal, has a row
};

// The typewise frontier plus per-type height buckets, kept current as nodes become ready and run.
// The typewise rank counts (greedy's TF_a) are kept only when reset asks for greedy. Copyable: the
// search copies states.
class TightFrontier {
 public:
  // `greedy`: keep the counts greedy_choice and greedy_among need (a cost per node run).
  // `remaining_power`: ready_remaining sums each node's remaining batches to this power (1 or 4).
  void reset(const ScheduleInput& input, const Analysis& analysis, const ChainHeights& heights, bool greedy = false,
             int remaining_power = 1);

  bool done() const { return typewise_.done(); }
  const std::vector<uint32_t>& ready_types() const { return typewise_.ready_types(); }
  uint64_t ready_count(uint32_t t) const { return typewise_.ready_count(t); }
  bool single_rank(uint32_t t) const { return analysis_->chains.longest[t] == 1; }
  bool unbatchable(uint32_t t) const { return analysis_->dependencies.unbatchable[t] != 0; }
  uint32_t weight(uint32_t t) const { return heights_->weight[t]; }
  bool terminal(uint32_t t) const { return heights_->terminal[t] != 0; }
  uint32_t greedy_choice() { return typewise_.greedy_choice(); }  // only after reset with `greedy`
  uint32_t greedy_among(const std::vector<uint32_t>& types) { return typewise_.greedy_among(types); }
  // Running t now costs no batch beyond the lower bound: every node at its top height is ready (an
  // unbatchable node always counts as tight: it costs its batch whenever it runs).
  bool tight(uint32_t t) const;
  // Nodes of t at its current top height: ready ones, and all unexecuted ones.
  uint32_t top_ready(uint32_t t) const { return top_[t] ? ready_at_[base_[t] + top_[t] - 1] : 0; }
  uint32_t top_unexecuted(uint32_t t) const { return top_[t] ? unexecuted_at_[base_[t] + top_[t] - 1] : 0; }
  uint32_t top_height(uint32_t t) const { return top_[t]; }
  // The sum of ChainHeights::remaining, to reset's power, over the ready nodes of t (0 when the
  // heights have none). Summed when asked, over the nodes that became ready since: most nodes run
  // before anyone asks for their type's sum, and then cost nothing. (So even a const frontier is
  // not to be read from two threads at once; the search and the policies read theirs from one.)
  // Exact at power 1 (integers far below 2^53).
  double ready_remaining(uint32_t t) const;
  int remaining_power() const { return remaining_power_; }
  // A tight ready type, or LocalTypes::kNone.
  uint32_t any_tight() const;

  void run(uint32_t t, Schedule& out);  // every ready node of t as one batch (the oldest if unbatchable)
  int64_t cost() const { return cost_; }  // batches so far, weighted
  int64_t remaining_bound() const;        // sum of weight x top height, plus unbatchable nodes left

 private:
  const ScheduleInput* input_ = nullptr;
  const Analysis* analysis_ = nullptr;
  const ChainHeights* heights_ = nullptr;
  TypewiseFrontier typewise_;
  std::vector<uint32_t> base_, unexecuted_at_, ready_at_, top_;
  // Per type: the sum of remaining over the first summed_[t] of its ready nodes (in the frontier's
  // order, which only appends, and drops the oldest when an unbatchable node runs).
  mutable std::vector<double> ready_remaining_;
  mutable std::vector<uint32_t> summed_;
  int64_t cost_ = 0;
  int64_t unbatchable_left_ = 0;
  bool track_remaining_ = false;
  int remaining_power_ = 1;
};

// The one-pass rule rollouts use and the search starts from: a tight type if any; else the ready
// type with the largest ready share of its top height (cheaper weight, then more ready nodes, then
// the lower type on ties); terminal types (outputs, losses) only when nothing else is ready.
uint32_t tight_first_choice(const TightFrontier& frontier);
// The same rule's non-tight part among some ready `types` (the learned policy's ties).
uint32_t tight_first_among(const TightFrontier& frontier, std::span<const uint32_t> types);

// The remaining rule, a weighted majority merge: of the tight types if any, else of all ready
// types, the one whose ready nodes have the most batches still ahead of them (the sum of their
// remaining, each to the frontier's remaining_power: at 4 the instances furthest behind count far
// more), per batch it costs raised to `weight_power` (1 or 2: 2 favours cheap types more);
// terminal types only when nothing else is ready. Lagging instances pull their next type forward.
uint32_t remaining_choice(const TightFrontier& frontier, int weight_power);
// Its tight part: the tight type it would run, or LocalTypes::kNone when none is tight.
uint32_t remaining_tight_choice(const TightFrontier& frontier, int weight_power);
uint32_t remaining_among(const TightFrontier& frontier, std::span<const uint32_t> types, int weight_power);
// The boosted remaining rule: no type runs first for being tight; among `types` (outputs and losses
// only when nothing else is among them) the most batches ahead per cost^weight_power, a tight
// type's score counted `tight_boost` times (a tight batch costs nothing beyond the lower bound, but
// a type that is not tight yet can pull lagging instances forward by more). A tight terminal type
// runs first only when no other type among them is tight, as in the remaining rule.
uint32_t boosted_remaining_among(const TightFrontier& frontier, std::span<const uint32_t> types, int weight_power,
                                 double tight_boost);

}  // namespace edb::scheduler
