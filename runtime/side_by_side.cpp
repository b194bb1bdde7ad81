#include "runtime/side_by_side.h"

#include <algorithm>
#include <string>

#include "edbatch/errors.h"

#include "scheduler/schedule.h"

namespace edb::runtime {

std::atomic<bool> SideBySide::any_balance{false};
std::atomic<bool> SideBySide::verify_windows{false};

void SideBySide::start(const scheduler::Schedule& schedule, const Values& values, int threads) {
  schedule_ = &schedule;
  values_ = &values;
  threads_ = threads;
  found_ = false;
}

void SideBySide::find_producers() {
  found_ = true;
  const scheduler::Schedule& schedule = *schedule_;
  const Values& values = *values_;
  const ir::Graph& graph = values.graph;
  base_ = schedule.nodes.empty() ? ir::NodeId(graph.size()) : *std::min_element(schedule.nodes.begin(), schedule.nodes.end());
  producer_.assign(graph.size() - base_, -1);
  for (size_t b = 0; b < schedule.batch_count(); ++b)
    for (ir::NodeId id : schedule.batch(b)) producer_[id - base_] = int32_t(b);
  // A view (scheduled as a batch that runs nothing, or a call's output, never scheduled) is
  // written by whoever writes what it aliases: its first argument, recorded before it. Any other
  // node this schedule does not run is taken for its first argument's too: at worst a dependency
  // that is not there, never one missed.
  for (ir::NodeId n = base_; n < graph.size(); ++n) {
    const ir::Node& node = graph.node(n);
    const bool scheduled = producer_[n - base_] >= 0;
    if ((scheduled && !values.plan.is_view(n)) || ir::has_flag(node.op, ir::kLeaf) || node.arg_count == 0) continue;
    const ir::NodeId source = graph.args(n)[0];
    producer_[n - base_] = source < base_ ? -1 : producer_[source - base_];
  }
}

bool SideBySide::reads_from(size_t i, size_t begin) const {
  const ir::Graph& graph = values_->graph;
  for (ir::NodeId member : schedule_->batch(i))
    for (ir::NodeId arg : graph.args(member)) {
      if (arg < base_) continue;
      const int32_t p = producer_[arg - base_];
      if (p >= int32_t(begin) && p < int32_t(i)) return true;
    }
  return false;
}

int64_t SideBySide::cost(size_t i) const {
  const ir::Graph& graph = values_->graph;
  const std::span<const ir::NodeId> members = schedule_->batch(i);
  if (values_->plan.is_view(members[0])) return 0;
  const ir::Node& first = graph.node(members[0]);
  // Members of one batch share their type, so their arithmetic, but for batch calls, whose
  // members' counts differ.
  if (!ir::is_call_batch(first)) return int64_t(members.size()) * (ir::node_flops(graph, members[0]) + first.shape.size());
  int64_t flops = 0;
  for (ir::NodeId member : members) flops += ir::node_flops(graph, member) + graph.node(member).shape.size();
  return flops;
}

size_t SideBySide::window(size_t b, const std::function<bool(size_t)>& beside) {
  // Most batches read their predecessor's values: that is checked first, as it is cheapest.
  const size_t count = schedule_->batch_count();
  if (threads_ < 2 || b + 1 >= count) return b + 1;
  if (!found_) find_producers();
  if (reads_from(b + 1, b) || !beside(b)) return b + 1;
  const auto runs = [&](size_t i) { return values_->plan.is_view(schedule_->batch(i)[0]) ? 0 : 1; };
  size_t end = b + 1, best = b + 1;
  int64_t largest = cost(b), total = largest;
  int batches = runs(b);  // that run something: a window needs two
  for (; end < count && end - b < kMaxWindow && !reads_from(end, b) && beside(end); ++end) {
    const int64_t c = cost(end);
    largest = std::max(largest, c);
    total += c;
    batches += runs(end);
    if (batches >= 2 && (any_balance.load(std::memory_order_relaxed) ||
                         (total >= kMinWindowFlops &&
                          (largest < kWholeFlops || double(largest) * threads_ <= kBalance * double(total)))))
      best = end + 1;
  }
  return best;
}

void SideBySide::verify(std::span<const size_t> batches) const {
  const ir::Graph& graph = values_->graph;
  const auto floats = [&](ir::NodeId id) {  // the arena floats node id occupies, or none
    const int64_t at = values_->plan.offset[id];
    return std::pair<int64_t, int64_t>{at, at < 0 ? at : at + graph.node(id).shape.size()};
  };
  for (size_t writer : batches) {
    const auto members = schedule_->batch(writer);
    const int64_t begin = floats(members.front()).first, end = floats(members.back()).second;
    const auto overlaps = [&](ir::NodeId id) {
      const auto [b, e] = floats(id);
      return b >= 0 && b < end && e > begin;
    };
    for (size_t other : batches) {
      if (other == writer) continue;
      for (ir::NodeId m : schedule_->batch(other)) {
        if (overlaps(m))
          throw InternalError("side by side: batches " + std::to_string(writer) + " and " + std::to_string(other) +
                              " of one window write the same arena floats");
        for (ir::NodeId arg : graph.args(m))
          if (overlaps(arg))
            throw InternalError("side by side: batch " + std::to_string(other) + " reads node %" + std::to_string(arg) +
                                ", which batch " + std::to_string(writer) + " of the same window writes");
      }
    }
  }
}

Lane& SideBySide::lane(size_t k) {
  while (lanes_.size() <= k) lanes_.push_back(std::make_unique<Lane>());
  return *lanes_[k];
}

void SideBySide::trim(size_t max_bytes) {
  for (auto& lane : lanes_) lane->scratch.trim(max_bytes);
}

}  // namespace edb::runtime
