// The Schedule container, the sequential policy, the policy registry and the schedule checker.
#include "scheduler/schedule.h"

#include <unordered_map>

#include "edbatch/errors.h"
#include "scheduler/fsm.h"
#include "scheduler/policies.h"

namespace edb::scheduler {

void Schedule::add_batch(ir::TypeId type, std::span<const ir::NodeId> members) {
  nodes.insert(nodes.end(), members.begin(), members.end());
  batch_begin.push_back(static_cast<uint32_t>(nodes.size()));
  batch_type.push_back(type);
}

void Schedule::clear() {
  nodes.clear();
  batch_begin.assign(1, 0);
  batch_type.clear();
}

void SequentialPolicy::schedule(const ScheduleInput& input, Schedule& out) {
  out.clear();
  for (ir::NodeId id = input.begin; id < input.graph.size(); ++id)
    if (const ir::TypeId type = scheduled_type(input, id); type != ir::kNoType) out.add_batch(type, std::span(&id, 1));
}

void expand_calls(const CallGroups& calls, Schedule& schedule) {
  if (calls.empty()) return;
  Schedule expanded;
  expanded.nodes.reserve(schedule.nodes.size());
  std::vector<ir::NodeId> members;
  for (size_t b = 0; b < schedule.batch_count(); ++b) {
    const auto batch = schedule.batch(b);
    const uint32_t first_call = calls.call(batch[0]);
    if (first_call == CallGroups::kNone) {
      expanded.add_batch(schedule.batch_type[b], batch);
      continue;
    }
    const Schedule& inner = calls.calls[first_call].schedule->batches;
    for (size_t i = 0; i < inner.batch_count(); ++i) {
      // Node-major: the calls' copies of one body node lie together, so a batch that reads them
      // (the next internal batch, or a consumer outside) finds them at a regular stride.
      members.clear();
      for (ir::NodeId offset : inner.batch(i))
        for (ir::NodeId id : batch) members.push_back(calls.calls[calls.call(id)].first + offset);
      expanded.add_batch(inner.batch_type[i], members);
    }
  }
  schedule = std::move(expanded);
}

int64_t expanded_batch_count(const CallGroups* calls, const Schedule& schedule) {
  if (!calls || calls->empty()) return int64_t(schedule.batch_count());
  int64_t count = 0;
  for (size_t b = 0; b < schedule.batch_count(); ++b) {
    const uint32_t c = calls->call(schedule.batch(b)[0]);
    count += c == CallGroups::kNone ? 1 : int64_t(calls->calls[c].schedule->batches.batch_count());
  }
  return count;
}

void expanded_batch_weights(const CallGroups* calls, std::span<const ir::TypeId> types, std::vector<uint32_t>& weights) {
  weights.assign(types.size(), 1);
  if (!calls || calls->empty()) return;
  std::unordered_map<ir::TypeId, uint32_t> of_call_type;
  for (const CallGroups::Call& call : calls->calls)
    of_call_type.emplace(call.type, uint32_t(call.schedule->batches.batch_count()));
  for (size_t t = 0; t < types.size(); ++t)
    if (auto it = of_call_type.find(types[t]); it != of_call_type.end()) weights[t] = it->second;
}

std::vector<std::string> policy_names() { return {"sequential", "depth", "agenda", "greedy", "fsm"}; }

std::unique_ptr<Policy> make_policy(std::string_view name) {
  if (name == "sequential") return std::make_unique<SequentialPolicy>();
  if (name == "depth") return std::make_unique<DepthPolicy>();
  if (name == "agenda") return std::make_unique<AgendaPolicy>();
  if (name == "greedy") return std::make_unique<GreedyPolicy>();
  if (name == "fsm") return std::make_unique<FsmPolicy>();
  std::string known;
  for (const std::string& n : policy_names()) known += (known.empty() ? "" : ", ") + n;
  throw UsageError("edb::Engine: unknown policy '" + std::string(name) + "' (available: " + known +
                   ")");
}

void verify(const ScheduleInput& input, const Schedule& schedule) {
  const ir::Graph& graph = input.graph;
  // position[id]: the batch that runs the node; -1 before it is seen.
  std::vector<int64_t> batch_of(graph.size() - input.begin, -1);
  auto fail = [](const std::string& what) { throw InternalError("scheduler::verify: " + what); };
  for (size_t b = 0; b < schedule.batch_count(); ++b) {
    if (schedule.batch(b).empty()) fail("batch " + std::to_string(b) + " is empty");
    for (ir::NodeId id : schedule.batch(b)) {
      if (id < input.begin || id >= graph.size())
        fail("batch " + std::to_string(b) + " holds node %" + std::to_string(id) +
             " outside the scheduled range");
      if (input.types[id] == ir::kNoType) fail("leaf %" + std::to_string(id) + " was scheduled");
      if (input.types[id] != schedule.batch_type[b])
        fail("node %" + std::to_string(id) + " does not have batch " + std::to_string(b) + "'s type");
      if (batch_of[id - input.begin] >= 0) fail("node %" + std::to_string(id) + " appears twice");
      batch_of[id - input.begin] = static_cast<int64_t>(b);
    }
  }
  for (ir::NodeId id = input.begin; id < graph.size(); ++id) {
    if (input.types[id] == ir::kNoType) continue;
    const int64_t b = batch_of[id - input.begin];
    if (b < 0) fail("node %" + std::to_string(id) + " is never scheduled");
    for (ir::NodeId arg : graph.args(id)) {
      if (arg < input.begin || input.types[arg] == ir::kNoType) continue;
      if (batch_of[arg - input.begin] >= b)
        fail("node %" + std::to_string(id) + " runs in batch " + std::to_string(b) +
             " but its argument %" + std::to_string(arg) + " runs in batch " +
             std::to_string(batch_of[arg - input.begin]));
    }
  }
}

}  // namespace edb::scheduler
