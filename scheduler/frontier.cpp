// Building the frontier: local type numbers, pending-argument counts and the consumer lists.
#include "scheduler/frontier.h"

#include "edbatch/errors.h"

namespace edb::scheduler {

void LocalTypes::build(const ScheduleInput& input) {
  const ir::NodeId begin = input.begin;
  const size_t n = input.graph.size() - begin;
  of_node.assign(n, kNone);
  global.clear();
  std::vector<uint32_t>& local_of_global = local_of_global_;  // dense: TypeIds are dense per engine
  local_of_global.clear();
  for (size_t i = 0; i < n; ++i) {
    const ir::TypeId t = input.types[begin + i];
    if (t == ir::kNoType) continue;
    if (t >= local_of_global.size()) local_of_global.resize(size_t(t) + 1, kNone);
    uint32_t& local = local_of_global[t];
    if (local == kNone) {
      local = static_cast<uint32_t>(global.size());
      global.push_back(t);
    }
    of_node[i] = local;
  }
}

void Frontier::reset(const ScheduleInput& input, const LocalTypes& types) {
  types_ = &types;
  begin_ = input.begin;
  remaining_ = 0;
  initially_ready_.clear();
  ready_types_.clear();
  const ir::Graph& graph = input.graph;
  const size_t n = graph.size() - begin_;
  pending_.assign(n, 0);
  users_begin_.assign(n + 1, 0);
  unbatchable_.assign(types.count(), false);
  auto scheduled = [&](ir::NodeId id) { return id >= begin_ && types.of_node[id - begin_] != LocalTypes::kNone; };
  for (ir::NodeId id = begin_; id < graph.size(); ++id) {
    if (!scheduled(id)) continue;
    ++remaining_;
    if (ir::has_flag(graph.node(id).op, ir::kUnbatchable)) unbatchable_[types.of_node[id - begin_]] = true;
    for (ir::NodeId arg : graph.args(id))
      if (scheduled(arg)) {
        ++pending_[id - begin_];
        ++users_begin_[arg - begin_ + 1];
      }
  }
  for (size_t i = 0; i < n; ++i) users_begin_[i + 1] += users_begin_[i];
  users_.resize(users_begin_[n]);
  fill_.assign(users_begin_.begin(), users_begin_.end() - 1);
  std::vector<uint32_t>& fill = fill_;
  for (ir::NodeId id = begin_; id < graph.size(); ++id) {
    if (!scheduled(id)) continue;
    for (ir::NodeId arg : graph.args(id))
      if (scheduled(arg)) users_[fill[arg - begin_]++] = id;
    if (pending_[id - begin_] == 0) initially_ready_.push_back(id);
  }
  if (ready_.size() < types.count()) ready_.resize(types.count());
  for (auto& list : ready_) list.clear();
}

}  // namespace edb::scheduler
