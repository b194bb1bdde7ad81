// Building the frontier: local type numbers, pending-argument counts and the consumer lists.
#include "scheduler/frontier.h"

#include "edbatch/errors.h"

namespace edb::scheduler {

void LocalTypes::build(const ScheduleInput& input) {
  const ir::NodeId begin = input.begin;
  const size_t n = input.graph.size() - begin;
  of_node.assign(n, kNone);
  global.clear();
  first.clear();
  std::vector<uint32_t>& local_of_global = local_of_global_;  // dense: TypeIds are dense per engine
  local_of_global.clear();
  for (size_t i = 0; i < n; ++i) {
    const ir::TypeId t = scheduled_type(input, ir::NodeId(begin + i));
    if (t == ir::kNoType) continue;
    if (t >= local_of_global.size()) local_of_global.resize(size_t(t) + 1, kNone);
    uint32_t& local = local_of_global[t];
    if (local == kNone) {
      local = static_cast<uint32_t>(global.size());
      global.push_back(t);
      first.push_back(ir::NodeId(begin + i));
    }
    of_node[i] = local;
  }
}

void expanded_type_weights(const ScheduleInput& input, const LocalTypes& types, std::vector<uint32_t>& weights) {
  weights.assign(types.count(), 1);
  if (input.graph.cell_count() == 0) return;  // no call unless the graph holds cells
  for (size_t t = 0; t < types.count(); ++t)
    if (const ir::Node& node = input.graph.node(types.first[t]); node.op == ir::Op::call)
      weights[t] = uint32_t(input.graph.cell(node.attrs.index).batches);
}

void Dependencies::build(const ScheduleInput& input, const LocalTypes& types) {
  const ir::Graph& graph = input.graph;
  const ir::NodeId begin = input.begin;
  const size_t n = graph.size() - begin;
  pending.assign(n, 0);
  users_begin.assign(n + 1, 0);
  arguments_begin.assign(n + 1, 0);
  arguments.clear();
  initially_ready.clear();
  unbatchable.assign(types.count(), 0);
  type_words_ = (types.count() + 63) / 64;
  type_users.assign(types.count() * type_words_, 0);
  scheduled = 0;
  for (ir::NodeId id = begin; id < graph.size(); ++id) {
    const size_t i = id - begin;
    if (const uint32_t t = types.of_node[i]; t != LocalTypes::kNone) {
      ++scheduled;
      const ir::Node& node = graph.node(id);
      if (ir::has_flag(node.op, ir::kUnbatchable)) unbatchable[t] = 1;
      uint64_t* users_of_type = type_users.data() + t / 64;
      const uint64_t bit = uint64_t{1} << (t % 64);
      for_each_argument(input, id, [&](ir::NodeId arg) {
        if (arg < begin) return;
        const uint32_t arg_type = types.of_node[arg - begin];
        if (arg_type == LocalTypes::kNone) return;
        users_of_type[size_t(arg_type) * type_words_] |= bit;
        arguments.push_back(arg - begin);
        ++users_begin[arg - begin + 1];
      });
      pending[i] = uint32_t(arguments.size() - arguments_begin[i]);
      if (pending[i] == 0) initially_ready.push_back(id);
    }
    arguments_begin[i + 1] = uint32_t(arguments.size());
  }
  for (size_t i = 0; i < n; ++i) users_begin[i + 1] += users_begin[i];
  users.resize(users_begin[n]);
  fill_.assign(users_begin.begin(), users_begin.end() - 1);
  for (size_t i = 0; i < n; ++i)
    for (uint32_t a = arguments_begin[i]; a < arguments_begin[i + 1]; ++a)
      users[fill_[arguments[a]]++] = begin + ir::NodeId(i);
}

void Frontier::reset(const ScheduleInput& input, const LocalTypes& types, const Dependencies& dependencies) {
  types_ = &types;
  dependencies_ = &dependencies;
  begin_ = input.begin;
  remaining_ = dependencies.scheduled;
  ready_types_.clear();
  pending_ = dependencies.pending;
  if (ready_.size() < types.count()) ready_.resize(types.count());
  for (auto& list : ready_) list.clear();
}

}  // namespace edb::scheduler
