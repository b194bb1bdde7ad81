// The batching policies of docs/design.md besides `sequential`, each a named type:
//   depth  - one batch per (depth, type), TensorFlow Fold style;
//   agenda - DyNet's rule: run the ready type with the lowest average depth;
//   greedy - ED-Batch's typewise rule: run the ready type maximising |F_a| / |TF_a|.
// Precondition: ScheduleInput.types assigned for every node (kNoType for leaves).
#pragma once

#include "scheduler/frontier.h"
#include "scheduler/schedule.h"
#include "scheduler/type_chains.h"
#include "scheduler/typewise.h"

namespace edb::scheduler {

class DepthPolicy final : public Policy {
 public:
  std::string_view name() const override { return "depth"; }
  void schedule(const ScheduleInput& input, Schedule& out) override;

 private:
  Analysis own_;
  std::vector<uint32_t> depth_, start_, fill_;
  std::vector<ir::NodeId> sorted_;
};

// The input's analysis when its chains run in `direction`, else `own` built for it.
const Analysis& analysis_for(const ScheduleInput& input, Analysis& own,
                             ChainDirection direction = ChainDirection::ranks);

class AgendaPolicy final : public Policy {
 public:
  std::string_view name() const override { return "agenda"; }
  void schedule(const ScheduleInput& input, Schedule& out) override;

 private:
  Analysis own_;  // used when the input carries no analysis
  Frontier frontier_;
  std::vector<uint32_t> depth_;
  std::vector<uint64_t> depth_sum_;
};

// F_a and TF_a as TypewiseFrontier counts them (typewise.h).
class GreedyPolicy final : public Policy {
 public:
  std::string_view name() const override { return "greedy"; }
  void schedule(const ScheduleInput& input, Schedule& out) override;

 private:
  Analysis own_;
  TypewiseFrontier frontier_;
};

}  // namespace edb::scheduler
