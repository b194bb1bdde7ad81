// The Schedule container, the sequential policy, the policy registry, the schedule checker and
// the schedule's dot picture.
#include "scheduler/schedule.h"

#include <cstdio>
#include <sstream>
#include <unordered_map>

#include "edbatch/errors.h"
#include "scheduler/fsm.h"
#include "scheduler/imitation.h"
#include "scheduler/search.h"
#include "scheduler/policies.h"

namespace edb::scheduler {

void Schedule::add_batch(ir::TypeId type, std::span<const ir::NodeId> members) {
  nodes.insert(nodes.end(), members.begin(), members.end());
  batch_begin.push_back(static_cast<uint32_t>(nodes.size()));
  batch_type.push_back(type);
}

void Schedule::append(const Schedule& other) {
  const auto node_base = static_cast<uint32_t>(nodes.size());
  node_by_node = node_by_node || other.node_by_node;
  nodes.insert(nodes.end(), other.nodes.begin(), other.nodes.end());
  for (size_t b = 1; b < other.batch_begin.size(); ++b) batch_begin.push_back(node_base + other.batch_begin[b]);
  batch_type.insert(batch_type.end(), other.batch_type.begin(), other.batch_type.end());
}

void Schedule::clear() {
  nodes.clear();
  batch_begin.assign(1, 0);
  batch_type.clear();
  node_by_node = false;
}

void SequentialPolicy::schedule(const ScheduleInput& input, Schedule& out) {
  out.clear();
  out.node_by_node = true;
  for (ir::NodeId id = input.begin; id < input.graph.size(); ++id)
    if (const ir::TypeId type = scheduled_type(input, id); type != ir::kNoType) out.add_batch(type, std::span(&id, 1));
}

int64_t expanded_batch_count(const ScheduleInput& input, const Schedule& schedule) {
  int64_t count = 0;
  for (size_t b = 0; b < schedule.batch_count(); ++b) {
    const ir::Node& n = input.graph.node(schedule.batch(b)[0]);
    count += n.op == ir::Op::call ? input.graph.cell(n.attrs.index).batches : 1;
  }
  return count;
}

std::vector<std::string> policy_names() { return {"sequential", "depth", "agenda", "greedy", "fsm", "learned", "search"}; }

std::unique_ptr<Policy> make_policy(std::string_view name) {
  if (name == "sequential") return std::make_unique<SequentialPolicy>();
  if (name == "depth") return std::make_unique<DepthPolicy>();
  if (name == "agenda") return std::make_unique<AgendaPolicy>();
  if (name == "greedy") return std::make_unique<GreedyPolicy>();
  if (name == "fsm") return std::make_unique<FsmPolicy>();
  if (name == "learned") return std::make_unique<ImitationPolicy>();
  if (name == "search") return std::make_unique<SearchPolicy>();
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
      if (input.types[id] == ir::kCallOutput) fail("view %" + std::to_string(id) + " of a call's output was scheduled");
      if (input.types[id] != schedule.batch_type[b])
        fail("node %" + std::to_string(id) + " does not have batch " + std::to_string(b) + "'s type");
      if (batch_of[id - input.begin] >= 0) fail("node %" + std::to_string(id) + " appears twice");
      batch_of[id - input.begin] = static_cast<int64_t>(b);
    }
  }
  for (ir::NodeId id = input.begin; id < graph.size(); ++id) {
    if (input.types[id] == ir::kNoType || input.types[id] == ir::kCallOutput) continue;
    const int64_t b = batch_of[id - input.begin];
    if (b < 0) fail("node %" + std::to_string(id) + " is never scheduled");
    for (ir::NodeId node_arg : graph.args(id)) {
      const ir::NodeId arg = scheduled_argument(input, node_arg);
      if (arg < input.begin || input.types[arg] == ir::kNoType) continue;
      if (batch_of[arg - input.begin] >= b)
        fail("node %" + std::to_string(id) + " runs in batch " + std::to_string(b) +
             " but its argument %" + std::to_string(arg) + " runs in batch " +
             std::to_string(batch_of[arg - input.begin]));
    }
  }
}

namespace {

// ColorBrewer's Set3: light fills that black labels stay readable on; types beyond it repeat.
constexpr const char* kBatchColours[] = {"#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462",
                                         "#b3de69", "#fccde5", "#d9d9d9", "#bc80bd", "#ccebc5", "#ffed6f"};

// A dot string literal's body: quotes and backslashes escaped, newlines as dot's centred "\n".
std::string dot_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string short_float(float value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", double(value));
  return text;
}

// "%7 affine\n384x1", with what tells members apart (a slice's rows, a constant, a table row).
std::string node_label(const ir::Graph& graph, ir::NodeId id) {
  const ir::Node& n = graph.node(id);
  std::string label = "%" + std::to_string(id) + " " + std::string(ir::op_name(n.op));
  switch (n.op) {
    case ir::Op::parameter: label += " " + graph.parameter(n.attrs.parameter).name; break;
    case ir::Op::lookup:
      label += " " + graph.parameter(n.attrs.parameter).name + "[" + std::to_string(n.attrs.index) + "]";
      break;
    case ir::Op::slice: label += " [" + std::to_string(n.attrs.begin) + ":" + std::to_string(n.attrs.end) + ")"; break;
    case ir::Op::scale: label += " *" + short_float(n.attrs.constant); break;
    case ir::Op::add_const: label += " +" + short_float(n.attrs.constant); break;
    case ir::Op::pick_neg_log_softmax: label += " label " + std::to_string(n.attrs.index); break;
    case ir::Op::call: label += " " + graph.cell(n.attrs.index).name; break;
    default: break;
  }
  return label + "\n" + ir::to_string(n.shape);
}

}  // namespace

std::string to_dot(const ir::Graph& graph, const Schedule& schedule, const ir::SignatureTable& signatures) {
  constexpr int64_t kNotScheduled = -1;
  std::vector<int64_t> batch_of(graph.size(), kNotScheduled);
  for (size_t b = 0; b < schedule.batch_count(); ++b)
    for (ir::NodeId id : schedule.batch(b)) {
      if (id >= graph.size())
        throw InternalError("scheduler::to_dot(): batch " + std::to_string(b) + " holds node %" + std::to_string(id) +
                            " but the graph has " + std::to_string(graph.size()) + " nodes");
      if (batch_of[id] != kNotScheduled)
        throw InternalError("scheduler::to_dot(): node %" + std::to_string(id) + " is in batches " +
                            std::to_string(batch_of[id]) + " and " + std::to_string(b));
      batch_of[id] = int64_t(b);
    }

  std::ostringstream out;
  out << "digraph schedule {\n"
         "  label=\"" << graph.size() << " nodes, " << schedule.batch_count()
      << " batches (clusters, coloured by batch type)\";\n"
         "  labelloc=t; fontname=\"Helvetica\"; newrank=true;\n"
         "  node [shape=box, style=\"rounded,filled\", fillcolor=white, fontname=\"Helvetica\", fontsize=10];\n"
         "  edge [color=\"#00000060\", arrowsize=0.6];\n";
  std::unordered_map<ir::TypeId, size_t> colour_of;  // by first appearance, so pictures are stable
  for (size_t b = 0; b < schedule.batch_count(); ++b) {
    const auto members = schedule.batch(b);
    const ir::TypeId type = schedule.batch_type[b];
    const size_t colour = colour_of.emplace(type, colour_of.size()).first->second;
    const std::string signature = type < signatures.size() ? signatures.name(type) : "type " + std::to_string(type);
    const std::string op = members.empty() ? "empty" : std::string(ir::op_name(graph.node(members[0]).op));
    out << "  subgraph cluster_" << b << " {\n"
        << "    label=\"batch " << b << ": " << op << " x" << members.size()
        << (op == "call" ? " (its cell's " + std::to_string(graph.cell(graph.node(members[0]).attrs.index).batches) + " batches)" : "")
        << "\"; tooltip=\""
        << dot_escape(signature) << "\";\n"
        << "    style=\"rounded,filled\"; fillcolor=\"" << kBatchColours[colour % std::size(kBatchColours)]
        << "\"; color=\"#555555\"; fontsize=10;\n";
    for (ir::NodeId id : members) out << "    n" << id << " [label=\"" << dot_escape(node_label(graph, id)) << "\"];\n";
    // Members never depend on each other, so a batch can be one row: the picture reads as the
    // order things ran in, not as a cluster stretched over the whole graph.
    out << "    { rank=same;";
    for (ir::NodeId id : members) out << " n" << id << ";";
    out << " }\n  }\n";
  }
  for (ir::NodeId id = 0; id < graph.size(); ++id) {
    if (batch_of[id] != kNotScheduled) continue;
    const bool leaf = ir::has_flag(graph.node(id).op, ir::kLeaf);
    out << "  n" << id << " [label=\"" << dot_escape(node_label(graph, id)) << "\""
        << (leaf ? ", shape=ellipse, style=filled, fillcolor=\"#eeeeee\", fontcolor=\"#555555\""
                 : ", style=\"rounded,dashed\", tooltip=\"evaluated earlier\"")
        << "];\n";
  }
  for (ir::NodeId id = 0; id < graph.size(); ++id)
    for (ir::NodeId arg : graph.args(id)) out << "  n" << arg << " -> n" << id << ";\n";
  out << "}\n";
  return out.str();
}

}  // namespace edb::scheduler
