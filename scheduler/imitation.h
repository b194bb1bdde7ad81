// The learned policy "learned": imitates schedule search (search.h). Training searches each
// training trace, replays the best schedule found and fits a score per (type, frontier feature) by
// an averaged perceptron over the decisions; at run time a decision is a table lookup per ready
// type and an argmax, no search. The feature generalises across traces and lengths: the share of
// the type's top-height nodes that are ready, in quarters, and whether its remaining chain is the
// longest among the ready types', or "tight" (waiting cannot pay); types
// that only feed outputs and losses (one per instance length) share one name. Per trace the chain
// heights are built once and the buckets kept current as batches run (TightFrontier), so a
// decision reads counters of the ready types only. Where no ready type has a score, and among
// ties, the base decides; training picks it: greedy, tight types first and then greedy, the
// whole tight-first rule or a remaining rule (tight.h; these keep no greedy counts).
// Never worse than greedy on its training traces: the table is cut until no training trace needs
// more batches than under greedy, and when it still loses on one, or only ties greedy over them,
// the policy falls back to greedy exactly and says so (greedy_fallback(), the report, Stats).
// ScheduleInput should carry the engine's SignatureTable (without it, types go by id).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "scheduler/search.h"
#include "scheduler/tight.h"

namespace edb::scheduler {

struct ImitationTraining {
  SearchOptions search{.widen = true};  // per training trace: its whole budget
  int epochs = 20;             // perceptron passes over the decisions
  double heldout_fraction = 0.25;  // traces kept out of fitting to report on (none with one trace or 0)
};

// What training learned; the policy file keeps it.
struct LearnedReport {
  int64_t traces = 0, heldout_traces = 0;
  // Over the traces fitted on: the learned table, greedy, the search it imitated, the lower bound.
  int64_t batches = 0, greedy_batches = 0, search_batches = 0, lower_bound = 0;
  // Over the held-out traces.
  int64_t heldout_batches = 0, heldout_greedy_batches = 0, heldout_lower_bound = 0;
  int64_t decisions = 0;       // decisions the fitted traces asked for
  int64_t fallbacks = 0;       // ... that fell back to greedy
  int64_t states = 0;          // (type, feature) scores kept
  int64_t searches_cut_short = 0;  // traces whose search ran out of budget
  bool beats_greedy = false;   // fewer batches than greedy over the fitted traces
  bool greedy_fallback = false;  // the table lost to or only tied greedy: the policy runs greedy exactly
  std::string stop_reason;
};

class ImitationPolicy final : public Policy {
 public:
  static constexpr uint32_t kBuckets = 9;  // four ready-share quarters, on the longest chain or not, then tight

  std::string_view name() const override { return "learned"; }
  void schedule(const ScheduleInput& input, Schedule& out) override;
  // Heights, unless it asks greedy (whose counts read ranks): the tight frontier then costs no
  // chain pass beyond the one greedy's analysis makes.
  ChainDirection chains() const override {
    return greedy_fallback() || base_needs_greedy() ? ChainDirection::ranks : ChainDirection::heights;
  }

  // `progress(done, total)` after each trace's search. Deterministic for a fixed input unless a
  // search runs out of its time budget.
  LearnedReport train(std::span<const ScheduleInput> graphs, const ImitationTraining& options,
                      const std::function<void(int done, int total)>& progress = nullptr);

  void save(const std::string& path) const;  // UsageError when it cannot be written
  void load(const std::string& path);        // UsageError naming the path and the problem

  const LearnedReport& report() const { return report_; }
  size_t state_count() const { return scores_.size(); }
  // What decides where the table has no score and among ties (chosen in training): greedy; tight
  // types first, then greedy; the whole tight-first rule; or the remaining rule, its weights to the
  // power 1 or 2 (cheap), each node's remaining batches to the power 1 or 4 (steep); or the steep
  // rule boosted, where a tight type runs first only if its score, counted kTightBoost times, is
  // the best (tight.h).
  enum class Base { greedy, tight_then_greedy, tight_first, remaining, remaining_cheap, remaining_steep,
                    remaining_steep_cheap, remaining_steep_boosted };
  static constexpr double kTightBoost = 4;
  // Runs greedy exactly: never trained, or training's table lost to or only tied greedy.
  bool greedy_fallback() const { return scores_.empty() && base_ == Base::greedy; }
  bool learned_nothing() const { return greedy_fallback(); }
  Base base() const { return base_; }
  // The base reads ChainHeights::remaining (built only then: it costs a little more per trace).
  bool needs_remaining() const { return weight_power() != 0; }
  int64_t decisions() const { return decisions_; }
  int64_t unseen() const { return unseen_; }  // decisions the table had no score for
  int64_t greedy_schedules() const { return greedy_schedules_; }  // schedules made by the greedy fallback

 private:
  struct Sample {
    std::vector<uint32_t> keys;  // per ready type: policy type index * kBuckets + bucket
    uint32_t chosen;             // index into keys
  };
  struct Fitted {
    std::unordered_map<uint32_t, float> scores;  // the table as cut
    size_t offered = 0;                          // scores before the cut
    int64_t heldout = 0, fitted = 0;             // batches with it on the held-out and fitted traces
  };
  // The decisions of `taught` (the search's schedule) that the table decides under the current base.
  void add_samples(const ScheduleInput& input, const Analysis& analysis, const ChainHeights& heights,
                   const Schedule& taught, std::vector<Sample>& samples);
  Fitted fit_table(const std::vector<Sample>& samples, int epochs, const std::function<int64_t(size_t)>& evaluate,
                   const std::vector<int64_t>& greedy, size_t fitted);
  // A type name's index in the table; a name it lacks is added while training (`add`), and
  // otherwise is kUnseen, with no score: scheduling never grows the table, however many
  // structures it sees.
  static constexpr uint32_t kUnseen = ~0u - 1;
  uint32_t index_of(const std::string& name, bool add);
  void map_types(const ScheduleInput& input, const Analysis& analysis, const ChainHeights& heights, bool add);
  // The feature of ready type t: tight, or its ready share of its top height in quarters, times
  // whether its remaining chain (top height x weight) is the longest among the ready types'.
  uint32_t bucket(const TightFrontier& frontier, uint32_t t, bool tight, uint64_t longest_ready) const;
  static uint64_t longest_ready(const TightFrontier& frontier);
  // The learned choice, or the base's; counts into decisions/unseen when `count`.
  uint32_t decide(TightFrontier& frontier, bool count);
  uint32_t base_among(TightFrontier& frontier, const std::vector<uint32_t>& types) const;
  bool base_needs_greedy() const { return base_ == Base::greedy || base_ == Base::tight_then_greedy; }
  // The remaining rule's powers under the base: of a type's weight (0 when the base is not the
  // remaining rule) and of each node's remaining batches.
  int weight_power() const {
    return base_ == Base::remaining || base_ == Base::remaining_steep || base_ == Base::remaining_steep_boosted ? 1
           : base_ == Base::remaining_cheap || base_ == Base::remaining_steep_cheap                           ? 2
                                                                                                               : 0;
  }
  int remaining_power() const {
    return base_ == Base::remaining_steep || base_ == Base::remaining_steep_cheap || base_ == Base::remaining_steep_boosted
               ? 4
               : 1;
  }
  // Tight types run first, unasked (every base but greedy and the boosted one).
  bool tight_first_unasked() const { return base_ != Base::greedy && base_ != Base::remaining_steep_boosted; }
  int64_t rollout(const ScheduleInput& input, const Analysis& analysis, const ChainHeights& heights, Schedule& out,
                  bool count);
  int64_t greedy_rollout(const ScheduleInput& input, const Analysis& analysis, Schedule& out, bool count);
  void check_models(const ScheduleInput& input) const;

  std::unordered_map<uint32_t, float> scores_;  // key -> score
  // scores_ by key in arrays (rebuilt when scores_ changes), and the policy type index of each
  // global TypeId met so far (for the signature table `indexed_for_`): no string per trace.
  std::vector<float> dense_score_;
  std::vector<uint8_t> dense_known_;
  bool dense_stale_ = true;
  std::vector<uint32_t> index_of_global_;
  const ir::SignatureTable* indexed_for_ = nullptr;
  int64_t indexed_resets_ = 0;  // indexed_for_->resets() then: a reset table reuses its ids
  std::vector<std::string> names_;             // policy type index -> signature (or kTerminalName)
  std::unordered_map<std::string, uint32_t> index_of_name_;
  std::vector<std::string> models_;            // models the table was trained on ("model/..." prefixes)
  LearnedReport report_;
  std::string path_;                           // the file it was loaded from, for messages
  // For the current input: per local type x bucket, the score and whether there is one.
  std::vector<float> local_score_;
  std::vector<uint8_t> local_known_;
  std::vector<uint32_t> index_of_local_;
  std::vector<uint32_t> tied_;
  std::vector<uint8_t> ready_tight_;  // per ready type (in ready_types() order), while deciding
  Analysis own_;
  ChainHeights heights_;
  TightFrontier frontier_;
  TypewiseFrontier greedy_frontier_;  // when the table learned nothing
  int64_t decisions_ = 0, unseen_ = 0, greedy_schedules_ = 0;
  Base base_ = Base::greedy;
};

// The model names of a graph's parameters (the part of "model/W" before the slash), sorted.
std::vector<std::string> model_names(const ir::Graph& graph);

}  // namespace edb::scheduler
