// The ready frontier that every dynamic policy walks: per-type lists of nodes whose arguments
// have all run. Policies choose a type; run() moves all its ready nodes into one batch and
// releases their consumers. Building it is linear in nodes + edges; run() is linear in the
// batch's out-edges, so a whole schedule costs O(nodes + edges + batches x types).
#pragma once

#include <cstdint>
#include <vector>

#include "scheduler/schedule.h"

namespace edb::scheduler {

// Dense local type numbers for the types present in the scheduled range (0..count-1).
struct LocalTypes {
  std::vector<uint32_t> of_node;     // per node in range (index id - begin); kNone for leaves
  std::vector<ir::TypeId> global;    // local -> global TypeId
  std::vector<ir::NodeId> first;     // local -> its first node (a type's nodes all cost alike)
  static constexpr uint32_t kNone = ~0u;

  LocalTypes() = default;
  explicit LocalTypes(const ScheduleInput& input) { build(input); }
  void build(const ScheduleInput& input);  // reuses this object's buffers
  size_t count() const { return global.size(); }

 private:
  std::vector<uint32_t> local_of_global_;
};

// Per local type, the batches one batch of it stands for: 1, or a call type's cell's batches, read
// at the type's first node: every call of a type runs the same cell. Runs on every trace, in time linear in the types.
void expanded_type_weights(const ScheduleInput& input, const LocalTypes& types, std::vector<uint32_t>& weights);

// Who consumes whom among the scheduled nodes of the range: built in two passes over the edges,
// shared by the frontier and the chain ranks.
struct Dependencies {
  std::vector<uint32_t> pending;      // per node in range: scheduled in-range arguments (edges)
  // CSR of those arguments as indices in the range (id - begin), repeats kept: node i's are
  // arguments[arguments_begin[i]...]; one walk of for_each_argument serves every later pass.
  std::vector<uint32_t> arguments_begin;
  std::vector<uint32_t> arguments;
  std::vector<uint32_t> users_begin;  // CSR of consumers: node i's are users[users_begin[i]...]
  std::vector<ir::NodeId> users;
  std::vector<ir::NodeId> initially_ready;
  std::vector<uint8_t> unbatchable;   // per local type
  // The type graph: per local type, a bit per type that consumes one of its nodes (type_words()
  // words a type). Only a type on a cycle of it can have a same-type chain longer than 1.
  std::vector<uint64_t> type_users;
  size_t scheduled = 0;               // nodes to schedule

  size_t type_words() const { return type_words_; }

  void build(const ScheduleInput& input, const LocalTypes& types);  // reuses buffers
  uint32_t user_count(size_t index) const { return users_begin[index + 1] - users_begin[index]; }

 private:
  std::vector<uint32_t> fill_;
  size_t type_words_ = 0;
};

class Frontier {
 public:
  Frontier() = default;
  // Starts over on a new input, reusing this object's buffers (policies keep one frontier).
  void reset(const ScheduleInput& input, const LocalTypes& types, const Dependencies& dependencies);

  bool done() const { return remaining_ == 0; }
  const std::vector<ir::NodeId>& ready(uint32_t type) const { return ready_[type]; }
  // Local types with at least one ready node, in no particular order.
  const std::vector<uint32_t>& ready_types() const { return ready_types_; }

  // Runs every ready node of `type` as one batch appended to `out`; calls on_ready(node, type)
  // for each node that becomes ready as a result (policies keep their own per-type tallies).
  template <typename OnReady>
  void run(uint32_t type, Schedule& out, OnReady&& on_ready);

  // Nodes ready at the start, reported through the same callback.
  template <typename OnReady>
  void seed(OnReady&& on_ready) {
    for (ir::NodeId id : dependencies_->initially_ready) push(id, on_ready);
  }

 private:
  template <typename OnReady>
  void push(ir::NodeId id, OnReady& on_ready) {
    const uint32_t t = types_->of_node[id - begin_];
    if (ready_[t].empty()) ready_types_.push_back(t);
    ready_[t].push_back(id);
    on_ready(id, t);
  }

  const LocalTypes* types_ = nullptr;
  const Dependencies* dependencies_ = nullptr;
  ir::NodeId begin_ = 0;
  std::vector<uint32_t> pending_;  // unmet in-range arguments per node
  std::vector<std::vector<ir::NodeId>> ready_;
  std::vector<uint32_t> ready_types_;
  std::vector<ir::NodeId> batch_;
  size_t remaining_ = 0;
};

template <typename OnReady>
void Frontier::run(uint32_t type, Schedule& out, OnReady&& on_ready) {
  if (dependencies_->unbatchable[type]) {
    // Runs alone: the oldest ready node only.
    batch_.assign(1, ready_[type].front());
    ready_[type].erase(ready_[type].begin());
  } else {
    batch_.swap(ready_[type]);
    ready_[type].clear();
  }
  if (ready_[type].empty())
    for (size_t i = 0; i < ready_types_.size(); ++i)
      if (ready_types_[i] == type) {
        ready_types_[i] = ready_types_.back();
        ready_types_.pop_back();
        break;
      }
  out.add_batch(types_->global[type], batch_);
  remaining_ -= batch_.size();
  const Dependencies& d = *dependencies_;
  for (ir::NodeId id : batch_)
    for (uint32_t u = d.users_begin[id - begin_]; u < d.users_begin[id - begin_ + 1]; ++u) {
      const ir::NodeId user = d.users[u];
      if (--pending_[user - begin_] == 0) push(user, on_ready);
    }
}

}  // namespace edb::scheduler
