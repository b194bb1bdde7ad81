// Trace::backward(): the backward pass recorded as IR nodes of the same trace, so every policy,
// executor, device and the memory planner batch and run it exactly as they run the forward pass.
//
// Reverse mode over the recorded graph: nodes on the loss's path that depend on a parameter or a
// lookup get a gradient, the sum of the contributions their consumers send (each op's rule in
// trace/backward_rules.cpp; the pass's state in trace/backward_pass.h).
// Two shapes of contribution are kept apart until the end:
//   - a weight's products: a use W x sends the pair (dy, x); all pairs of one parameter become one
//     contraction, sum_i dy_i x_i^T (matmul_nt_rows over columns read where they lie, matmul_nt
//     over matrices): one GEMM per weight per trace, not one per instance;
//   - slices: a slice of x sends (rows, dy); slices that tile x become one concat.
#include "trace/backward_pass.h"

namespace edb {

using ir::NodeId;
using ir::Op;

namespace detail {

std::vector<LeafGradient> Backward::record(NodeId loss) {
  loss_ = loss;
  const std::vector<uint8_t>& flows = gradient_flows(loss);
  b_.head.assign(loss + 1, kNothingSent);
  whole(loss, constant(ir::Shape{1, 1}, 1.0f));
  std::vector<LeafGradient> leaves;
  std::vector<NodeId> parameters;
  const std::vector<NodeId>& order = mirrored_order(loss);
  b_.pending.clear();
  // The order's nodes lie anywhere in the graph: what the loop reads of each (its contributions'
  // head, its op, whether a gradient flows) is fetched well before, or each visit waits on a cache
  // miss (most of the loop's time in a profile).
  constexpr size_t kAhead = 12;
  for (size_t p = 0; p < order.size(); ++p) {
    if (p + kAhead < order.size()) {
      const NodeId ahead = order[p + kAhead];
      if (!b_.reads_views[p + kAhead]) __builtin_prefetch(&graph_.node(ahead));  // a call's is read by send_call_batch
      __builtin_prefetch(b_.head.data() + ahead);
      __builtin_prefetch(flows.data() + ahead);
    }
    // A node's newest contribution, once its head (fetched above) has come.
    if (p + kAhead / 2 < order.size())
      if (const int32_t newest = b_.head[order[p + kAhead / 2]]; newest >= 0) __builtin_prefetch(b_.items.data() + newest);
    // A forward batch's calls whose cell batches them wait for its last member: their gradients
    // are then all sent (their views, left out of the order, by consumers that come earlier).
    if (!b_.pending.empty() && p > 0 && b_.batch_last[p - 1]) send_call_batch(flows);
    // A forward batch of several nodes whose op has a rule by batch: that rule, once.
    if ((p == 0 || b_.batch_last[p - 1]) && !b_.batch_last[p]) {
      size_t last = p;
      while (!b_.batch_last[last]) ++last;
      if (send_batch(std::span(order).subspan(p, last - p + 1), flows)) {
        p = last;
        continue;
      }
    }
    const NodeId n = order[p];
    if (const uint32_t read = b_.reads_views[p]) {  // a member of its forward batch's batch call,
      // which reads its views (and any term sent to the call itself: read_views reads those last)
      if (flows[n] && (sent(n) || views_sent(n, read - 1))) b_.pending.push_back(n);
      continue;
    }
    if (!sent(n)) continue;
    const Op op = graph_.node(n).op;  // a copy: combine() may grow the node array
    // A parameter may be sent terms by a cell call whatever the trace's own path to it.
    if (!flows[n] && op != Op::parameter) continue;
    if (op == Op::call) {
      send_call(n, flows);
      continue;
    }
    if (op == Op::parameter) {  // after every call's rule, which may send it terms
      parameters.push_back(n);
      continue;
    }
    if (op == Op::lookup) {  // a term alone (a batch call's frame at a row) is read there, with no view
      const auto [gradient, at] = gradient_at(n);
      leaves.push_back({n, gradient, std::max(at, 0)});
      continue;
    }
    send(n, combine(n), flows);
  }
  if (!b_.pending.empty()) send_call_batch(flows);
  // Parameters, then those only cells' bodies use (their nodes made by the calls' rules).
  for (NodeId p : parameters) leaves.push_back({p, combine(p)});
  std::reverse(leaves.begin(), leaves.end());
  for (NodeId p : body_parameters_) leaves.push_back({p, combine(p)});
  return leaves;
}

Backward::BodyGradients Backward::record_body(NodeId last, std::span<const std::pair<NodeId, NodeId>> seeds,
                                               std::span<const NodeId> arguments) {
  loss_ = last;
  const std::vector<uint8_t>& flows = gradient_flows(last, arguments);
  b_.head.assign(last + 1, kNothingSent);
  for (const auto& [output, gradient] : seeds)
    if (flows[output]) whole(output, gradient);
  BodyGradients out;
  out.arguments.assign(arguments.size(), ir::kNoNode);
  const std::vector<NodeId>& order = mirrored_order(last);
  // A body holds no call (trace/cell.cpp), so no view is left for a batch call to read.
  if (std::any_of(b_.reads_views.begin(), b_.reads_views.end(), [](uint32_t read) { return read != 0; }))
    throw InternalError("Backward::record_body: a body's call output views were left out of its order");
  for (NodeId n : order) {
    if (!flows[n] || !sent(n)) continue;
    if (graph_.node(n).op == Op::parameter) {
      BodyGradients::Parameter& p = out.parameters.emplace_back();
      p.node = n;
      p.whole = combine(n, &p.pairs);
      continue;
    }
    const NodeId gradient = combine(n);
    const auto argument = std::find(arguments.begin(), arguments.end(), n);
    if (argument != arguments.end()) {
      out.arguments[size_t(argument - arguments.begin())] = gradient;
      continue;
    }
    send(n, gradient, flows);
  }
  return out;
}

const std::vector<NodeId>& Backward::mirrored_order(NodeId loss) {
  std::vector<NodeId>& order = b_.order;
  std::vector<uint8_t>& placed = b_.placed;
  std::vector<uint8_t>& batch_last = b_.batch_last;
  std::vector<uint32_t>& reads = b_.reads_views;
  order.clear();
  batch_last.clear();
  reads.clear();
  placed.assign(loss + 1, 0);
  auto place = [&](NodeId n, uint32_t views_read = 0) {
    placed[n] = 1;
    order.push_back(n);
    reads.push_back(views_read);
  };
  // A view whose call's batch call reads its terms stays out of the order.
  const std::vector<ir::TypeId>& types = s_.data.types;
  auto read_by_its_call = [&](NodeId n) { return types[n] == ir::kCallOutput && view_reader(n) != ir::kNoNode; };
  const scheduler::Schedule& last = s_.data.schedule;
  NodeId first_scheduled = loss + 1;
  for (size_t b = last.batch_count(); b-- > 0;) {
    // The members lie anywhere in the graph, but a batch is of one type (scheduler::verify), so
    // of one op (a call: of one cell): the node of its first member says what all are, and no
    // other member's type or node is read.
    bool first = true, calls = false, read = false;
    NodeId views = 0;
    for (NodeId m : last.batch(b)) {
      if (m > loss || placed[m]) continue;
      if (first) {
        first = false;
        const ir::Node& node = graph_.node(m);
        calls = node.op == Op::call && !ir::is_call_batch(node);
        read = calls && reads_views(m);
        views = calls ? NodeId(graph_.cell(node.attrs.index).output_views) : 0;
      }
      // A call's output views (never scheduled) pass their gradients to it just before it, or
      // its batch call reads them.
      for (NodeId v = std::min(m + views, loss); v > m; --v) {
        if (read) placed[v] = 1;
        else place(v);
      }
      place(m, read ? 1 + views : 0);
      first_scheduled = std::min(first_scheduled, m);
    }
    batch_last.resize(order.size(), 0);
    if (!order.empty()) batch_last.back() = 1;
  }
  // The schedule is an order of its nodes, so its reverse is valid for them; the nodes below
  // all of them (earlier evaluations) can read none of them. A computed node among them that
  // the schedule lacks would break that: then plain reverse recording order, always valid.
  // One walk down the rest: computed nodes now, leaves kept to go last.
  std::vector<NodeId>& leaves = b_.unplaced_leaves;
  leaves.clear();
  for (NodeId n = loss + 1; n-- > 0;) {
    // Most nodes are placed: eight at a time pass with one load (a branch per node mispredicted
    // wherever placed and unplaced nodes interleave).
    while (n >= 8) {
      uint64_t eight;
      std::memcpy(&eight, placed.data() + n - 7, sizeof(eight));
      if (eight != 0x0101010101010101ull) break;
      n -= 8;
    }
    if (placed[n]) continue;
    if (has_flag(graph_.node(n).op, ir::kLeaf)) {
      leaves.push_back(n);
      continue;
    }
    if (n > first_scheduled) {
      order.clear();
      reads.clear();
      for (NodeId m = loss + 1; m-- > 0;)
        if (!read_by_its_call(m)) {
          order.push_back(m);
          reads.push_back(views_read(m));
        }
      batch_last.assign(order.size(), 1);
      return order;
    }
    if (read_by_its_call(n)) continue;
    order.push_back(n);
    reads.push_back(views_read(n));
  }
  order.insert(order.end(), leaves.begin(), leaves.end());
  batch_last.resize(order.size(), 1);
  reads.resize(order.size(), 0);
  return order;
}

const std::vector<uint8_t>& Backward::gradient_flows(NodeId loss, std::span<const NodeId> sources) {
  std::vector<uint8_t>& depends = b_.depends;
  if (sources.empty()) {  // kept by the trace as it recorded (copied: the pass records more nodes)
    const std::vector<uint8_t>& kept = s_.depends();
    depends.assign(kept.begin(), kept.begin() + ptrdiff_t(loss) + 1);
    return depends;
  }
  depends.assign(loss + 1, 0);
  for (NodeId a : sources) depends[a] = 1;
  for (NodeId n = 0; n <= loss; ++n) {
    if (depends[n]) continue;  // a source
    const ir::Node& node = graph_.node(n);
    uint8_t d = node.op == Op::parameter || node.op == Op::lookup;
    for (NodeId a : graph_.args(node)) d |= depends[a];
    if (!d && node.op == Op::call)  // its body's parameters
      d = !static_cast<const runtime::CallCell&>(graph_.cell(node.attrs.index)).body.parameters().empty();
    depends[n] = d;
  }
  return depends;
}

void Backward::send_call(NodeId n, const std::vector<uint8_t>& flows) {
  const ir::Node node = graph_.node(n);
  const auto& cell = static_cast<const runtime::CallCell&>(graph_.cell(node.attrs.index));
  if (cell.is_backward)
    throw UsageError("edb::Trace::backward(): node %" + std::to_string(n) + " (a call of " + cell.name +
                     ") belongs to an earlier backward pass; second derivatives are not supported");
  detail::CellRecord& record = record_of(cell);
  if (!record.backward) return;  // no gradient flows through its body
  detail::BackwardCell& backward = *record.backward;
  auto& args = b_.call_args;
  args.assign(1, n);
  const auto forward_args = graph_.args(n);
  args.insert(args.end(), forward_args.begin(), forward_args.end());
  const size_t arguments = forward_args.size();
  b_.frame_reads.clear();
  // Each output's gradient: what the views of the output sent, summed.
  const size_t outputs_sent = backward.seed_offsets.size();
  std::vector<std::vector<NodeId>>& seeds = b_.seeds;  // the first outputs_sent are this call's
  if (seeds.size() < outputs_sent) seeds.resize(outputs_sent);
  for (size_t j = 0; j < outputs_sent; ++j) seeds[j].clear();
  for (int32_t i = b_.head[n]; i >= 0; i = b_.items[size_t(i)].next) {
    const Contribution c = b_.items[size_t(i)];
    const size_t j = seeded_output(n, c, backward);
    seeds[j].push_back(term_node(c.a, c.at, ir::Shape{int32_t(backward.seed_floats[j]), 1}));
  }
  for (size_t j = 0; j < outputs_sent; ++j) {
    std::reverse(seeds[j].begin(), seeds[j].end());
    if (seeds[j].empty()) args.push_back(constant(ir::Shape{int32_t(backward.seed_floats[j]), 1}, 0.0f));
    else args.push_back(seeds[j].size() == 1 ? seeds[j][0] : emit(Op::sum, seeds[j]));
  }
  // A backward call passes a parameter only where its forward call did (the frame is a call and
  // the seeds are gradients): a forward call of the cell's plain type needs no scan of the
  // arguments.
  const ir::TypeId type = s_.data.types[n] == record.call_type
                              ? backward.cell.call_type
                              : detail::call_type(*s_.engine, backward.cell, graph_, args);
  std::vector<NodeId>& outputs = b_.call_outputs;
  outputs.clear();
  const NodeId call = detail::record_call_node(s_, backward.cell, type, args, outputs);
  const runtime::CallCell& backward_cell = *backward.cell.call_cell;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const detail::BackwardCell::Output& o = backward.outputs[k];
    if (o.kind == detail::BackwardCell::Output::argument) {
      const NodeId a = args[1 + o.index];
      if (flows[a]) whole(a, outputs[k]);
      continue;
    }
    const NodeId p = parameter_of(cell.body.parameter(o.index));
    const auto forward_args = std::span(args).subspan(1, arguments);
    if (o.kind == detail::BackwardCell::Output::whole) {
      whole(p, outputs[k]);
    } else if (backward_cell.read_in_place(k)) {  // dy and x columns, read where they lie
      ParameterPairs::Term term;
      std::tie(term.x, term.x_row) = call_value_at(n, forward_args, o.x);
      term.x_shape = o.x.shape;
      term.dy_shape = backward.cell.body.node(backward.cell.outputs[k]).shape;
      if (backward_cell.output_offsets[k] >= 0) {
        term.dy = call;
        term.dy_row = int32_t(backward_cell.output_offsets[k]);
      } else {
        term.dy = outputs[k];  // an argument or constant of the call, returned as it is
      }
      pair_at(p, term);
    } else {
      pair(p, outputs[k], call_value(n, forward_args, o.x));
    }
  }
}

size_t Backward::seeded_output(NodeId call, const Contribution& c, const detail::BackwardCell& backward) {
  if (c.kind != Contribution::kSlice)
    throw InternalError("Trace::backward: call %" + std::to_string(call) + " was sent a gradient at no output");
  return seeded_output(call, c.begin, c.end, backward);
}

size_t Backward::seeded_output(NodeId call, int32_t begin, int32_t end, const detail::BackwardCell& backward) {
  const size_t outputs = backward.seed_offsets.size();
  size_t j = 0;
  while (j < outputs && !(begin == backward.seed_offsets[j] && end - begin == backward.seed_floats[j])) ++j;
  if (j == outputs)
    throw InternalError("Trace::backward: call %" + std::to_string(call) + " was sent a gradient at no output");
  return j;
}

bool Backward::batches_calls(detail::CellRecord& record) {
  // Asked per call and per output view: calls of one cell come in runs.
  if (&record == batches_record_) return batches_;
  batches_record_ = &record;
  batches_ = false;
  if (!s_.engine->batch_backward_calls || !record.backward) return false;
  const runtime::CallCell& cell = *record.backward->cell.call_cell;
  batches_ = cell.lowered && std::all_of(cell.output_offsets.begin(), cell.output_offsets.end(), [](int64_t at) { return at >= 0; });
  return batches_;
}

bool Backward::reads_views(NodeId n) {
  const ir::Node& node = graph_.node(n);
  if (node.op != Op::call || ir::is_call_batch(node)) return false;
  const auto& cell = static_cast<const runtime::CallCell&>(graph_.cell(node.attrs.index));
  return !cell.is_backward && batches_calls(record_of(cell));
}

NodeId Backward::view_reader(NodeId v) {
  const NodeId slice = graph_.node(v).op == Op::reshape ? graph_.args(v)[0] : v;
  if (graph_.node(slice).op != Op::slice) return ir::kNoNode;
  const NodeId call = graph_.args(slice)[0];
  return reads_views(call) ? call : ir::kNoNode;
}

void Backward::read_views(NodeId call, const detail::BackwardCell& backward, const std::vector<uint8_t>& flows) {
  std::vector<SeedTerm>& seeds = b_.seed_terms;
  std::vector<int32_t>& sent_to = b_.seed_counts;
  std::vector<ViewPlan>& plan = b_.view_plan;
  const NodeId views = NodeId(plan.size());
  // The views as the per-node pass visited them, last first (a matrix output's reshape before
  // its slice).
  for (NodeId v = std::min(call + views, loss_); v > call; --v) {
    if (!sent(v)) continue;
    // Its terms (newest first, as its list runs), while all are whole.
    const size_t first = seeds.size();
    bool only_whole = true;
    for (int32_t i = b_.head[v]; i >= 0; i = b_.items[size_t(i)].next) {
      const Contribution& c = b_.items[size_t(i)];
      if (c.kind != Contribution::kWhole) {
        only_whole = false;
        break;
      }
      seeds.push_back({0, c.a, c.at});
    }
    if (!only_whole) {  // its rule sends its gradient on as a slice of the call (or to its slice)
      seeds.resize(first);
      send(v, combine(v), flows);
      continue;
    }
    // What view v - call of every member is, read at the first member whose view was sent whole
    // terms (calls of one cell record their views alike, trace/cell.cpp).
    ViewPlan& view = plan[v - call - 1];
    if (!view.known) {
      const ir::Node& node = graph_.node(v);
      view.known = true;
      view.reshape = node.op == Op::reshape;
      if (view.reshape) view.slice = graph_.args(v)[0] - call;
      else view.output = uint32_t(seeded_output(call, node.attrs.begin, node.attrs.end, backward));
    }
    if (!view.reshape) {  // its terms, oldest first, as seeds of its output (a whole node at row 0)
      for (size_t i = first; i < seeds.size(); ++i) {
        seeds[i].output = view.output;
        seeds[i].row = std::max(seeds[i].row, 0);
      }
      std::reverse(seeds.begin() + ptrdiff_t(first), seeds.end());
      sent_to[view.output] += int32_t(seeds.size() - first);
      continue;
    }
    // A matrix output's reshape: its terms go on to its slice as they are, oldest first.
    const NodeId slice = call + view.slice;
    for (size_t i = seeds.size(); i-- > first;) push(slice, Contribution::kWhole, seeds[i].node, 0, 0, seeds[i].row);
    seeds.resize(first);
  }
  // What views sent through their own rules: slices of the call's frame (newest first).
  const size_t first = seeds.size();
  for (int32_t i = b_.head[call]; i >= 0; i = b_.items[size_t(i)].next) {
    const Contribution c = b_.items[size_t(i)];
    const uint32_t j = uint32_t(seeded_output(call, c, backward));
    seeds.push_back({j, c.a, std::max(c.at, 0)});
    ++sent_to[j];
  }
  std::reverse(seeds.begin() + ptrdiff_t(first), seeds.end());
}

void Backward::send_call_batch(const std::vector<uint8_t>& flows) {
  const std::vector<NodeId>& calls = b_.pending;
  const auto& cell = static_cast<const runtime::CallCell&>(graph_.cell(graph_.node(calls[0]).attrs.index));
  detail::CellRecord& record = record_of(cell);
  detail::BackwardCell& backward = *record.backward;
  const runtime::CallCell& backward_cell = *backward.cell.call_cell;
  const size_t arguments = graph_.args(calls[0]).size();
  const size_t outputs_sent = backward.seed_offsets.size();
  // Each member's seeds, the terms sent to its outputs (per output oldest first), one flat array
  // for the batch (member m's from seed_begin[m]); the most any member sent each output.
  std::vector<SeedTerm>& seeds = b_.seed_terms;
  std::vector<uint32_t>& seed_begin = b_.seed_begin;
  std::vector<int32_t>& sent_to = b_.seed_counts;
  seeds.clear();
  seed_begin.clear();
  std::vector<int32_t>& terms = b_.batch_terms;
  terms.assign(1 + arguments + outputs_sent, 1);
  sent_to.resize(outputs_sent);
  // Each member's forward arguments, copied in the one walk that reads the members' nodes (they
  // lie anywhere; recording moves the argument pool): member m's from m * arguments.
  std::vector<NodeId>& forward_args = b_.call_forward_args;
  forward_args.clear();
  // The members' call nodes, their views, contributions and arguments lie anywhere: fetched a few
  // members ahead.
  constexpr size_t kAhead = 8;
  const NodeId views = NodeId(cell.output_views);
  b_.view_plan.assign(size_t(views), ViewPlan{});
  for (size_t m = 0; m < calls.size(); ++m) {
    if (m + kAhead < calls.size()) __builtin_prefetch(&graph_.node(calls[m + kAhead]));
    if (m + kAhead / 2 < calls.size()) {
      const NodeId ahead = calls[m + kAhead / 2];
      __builtin_prefetch(graph_.args(ahead).data());
      for (NodeId v = ahead + 1; v <= ahead + views && v <= loss_; ++v)
        if (b_.head[v] >= 0) __builtin_prefetch(&b_.items[size_t(b_.head[v])]);
    }
    const auto member_args = graph_.args(calls[m]);
    for (NodeId a : member_args) forward_args.push_back(a);  // a few: a loop, not a call of memmove
    seed_begin.push_back(uint32_t(seeds.size()));
    for (size_t j = 0; j < outputs_sent; ++j) sent_to[j] = 0;
    read_views(calls[m], backward, flows);
    for (size_t j = 0; j < outputs_sent; ++j)
      terms[1 + arguments + j] = std::max(terms[1 + arguments + j], sent_to[j]);
  }
  seed_begin.push_back(uint32_t(seeds.size()));
  // The table: per member its frame, its arguments, then each output's terms oldest first, a
  // member with fewer than the batch's most padded with zeros (one node per shape, made where
  // first needed). Every member's row of the table is as wide: written in place.
  size_t width = 1 + arguments;
  for (size_t j = 0; j < outputs_sent; ++j) width += size_t(terms[1 + arguments + j]);
  auto& args = b_.call_args;
  auto& rows = b_.batch_rows;
  args.resize(calls.size() * width);
  rows.resize(calls.size() * width);
  std::vector<NodeId>& zeros = b_.call_zeros;  // per output: its padding, once made
  zeros.assign(outputs_sent, ir::kNoNode);
  NodeId* arg = args.data();
  int32_t* row = rows.data();
  for (size_t m = 0; m < calls.size(); ++m) {
    *arg++ = calls[m];
    *row++ = 0;
    for (size_t i = m * arguments; i < (m + 1) * arguments; ++i) {
      *arg++ = forward_args[i];
      *row++ = 0;
    }
    const auto member = std::span(seeds).subspan(seed_begin[m], seed_begin[m + 1] - seed_begin[m]);
    for (size_t j = 0; j < outputs_sent; ++j) {
      int32_t sent = 0;
      for (const SeedTerm& seed : member)
        if (seed.output == j) {
          *arg++ = seed.node;
          *row++ = seed.row;
          ++sent;
        }
      if (sent < terms[1 + arguments + j] && zeros[j] == ir::kNoNode)
        zeros[j] = constant(ir::Shape{int32_t(backward.seed_floats[j]), 1}, 0.0f);
      for (; sent < terms[1 + arguments + j]; ++sent) {
        *arg++ = zeros[j];
        *row++ = 0;
      }
    }
  }
  s_.check_room();
  const NodeId batch = ir::add_call_batch(graph_, graph_.add_cell(&backward_cell), int32_t(calls.size()), terms, args, rows);
  s_.data.types.push_back(s_.engine->driver.signatures.intern(graph_, batch));
  // Where each output goes, the same for every member: worked out once for the batch.
  std::vector<OutputRoute>& routes = b_.output_routes;
  routes.assign(backward.outputs.size(), OutputRoute{});
  for (size_t k = 0; k < backward.outputs.size(); ++k) {
    const detail::BackwardCell::Output& o = backward.outputs[k];
    OutputRoute& route = routes[k];
    route.output = &o;
    route.offset = backward_cell.output_offsets[k];
    route.shape = backward.cell.body.node(backward.cell.outputs[k]).shape;
    route.in_place = backward_cell.read_in_place(k);
    if (o.kind == detail::BackwardCell::Output::argument) continue;
    route.parameter = parameter_of(cell.body.parameter(o.index));
    if (o.kind == detail::BackwardCell::Output::pair) pairs_of(route.parameter, true);
  }
  // The pairs' lists once all are made (making one may move the others); a pair's x that is a
  // constant (a bias's ones) is one node for every member.
  for (OutputRoute& route : routes) {
    if (route.output->kind != detail::BackwardCell::Output::pair) continue;
    route.pairs = pairs_of(route.parameter, false);
    if (route.output->x.kind == detail::BackwardCell::Value::constant)
      route.constant_x = call_value(calls[0], {}, route.output->x);
  }
  // The places of every member's pairs to a parameter whose every pair here is read in place and
  // alike (as a rule), claimed at once: member after member, and a member's in route order, as
  // they would be added one by one.
  for (size_t k = 0; k < routes.size(); ++k) {
    OutputRoute& route = routes[k];
    if (route.output->kind != detail::BackwardCell::Output::pair || route.stride > 0) continue;
    const ParameterPairs::Shapes shape{route.shape, route.output->x.shape};
    bool alike = true;
    size_t stride = 0;
    for (size_t other = k; other < routes.size(); ++other) {
      OutputRoute& next = routes[other];
      if (next.output->kind != detail::BackwardCell::Output::pair || next.parameter != route.parameter) continue;
      alike &= next.in_place && next.shape == shape.first && next.output->x.shape == shape.second;
      next.slot = stride++;
    }
    const size_t place = alike ? route.pairs->claim(shape, stride * calls.size()) : ParameterPairs::kNoPlace;
    for (size_t other = k; other < routes.size(); ++other) {
      OutputRoute& next = routes[other];
      if (next.output->kind != detail::BackwardCell::Output::pair || next.parameter != route.parameter) continue;
      next.stride = stride;
      next.place = place;
    }
  }
  // Each member's outputs, read in place at its frame's rows.
  for (size_t m = 0; m < calls.size(); ++m) {
    const NodeId n = calls[m];
    const auto member_args = std::span(forward_args).subspan(m * arguments, arguments);
    b_.frame_reads.clear();
    const int64_t frame = int64_t(m) * backward_cell.frame_floats;
    for (const OutputRoute& route : routes) {
      const detail::BackwardCell::Output& o = *route.output;
      const int32_t row = int32_t(frame + route.offset);
      if (o.kind == detail::BackwardCell::Output::argument) {
        const NodeId a = member_args[o.index];
        if (flows[a]) push(a, Contribution::kWhole, batch, 0, 0, row);
      } else if (o.kind == detail::BackwardCell::Output::whole) {
        push(route.parameter, Contribution::kWhole, batch, 0, 0, row);
      } else if (route.in_place) {  // dy and x columns, read where they lie
        ParameterPairs::Term term;
        if (route.constant_x != ir::kNoNode) term.x = route.constant_x;
        else std::tie(term.x, term.x_row) = call_value_at(n, member_args, o.x);
        if (route.place != ParameterPairs::kNoPlace) {  // in its place
          const size_t at = route.place + 2 * (m * route.stride + route.slot);
          NodeId* args = route.pairs->args.data();  // claimed: no pair moves them in this walk
          int32_t* rows = route.pairs->rows.data();
          args[at] = batch;
          args[at + 1] = term.x;
          rows[at] = row;
          rows[at + 1] = term.x_row;
          continue;
        }
        term.x_shape = o.x.shape;
        term.dy = batch;
        term.dy_row = row;
        term.dy_shape = route.shape;
        route.pairs->add(term);
      } else {
        const NodeId dy = term_node(batch, row, route.shape);
        const NodeId x = route.constant_x != ir::kNoNode ? route.constant_x : call_value(n, member_args, o.x);
        route.pairs->add({dy, x, graph_.node(dy).shape, graph_.node(x).shape});
      }
    }
  }
  b_.pending.clear();
}

NodeId Backward::combine(NodeId n, std::vector<std::pair<NodeId, NodeId>>* pairs) {
  std::vector<int32_t>& list = b_.list;  // n's contributions, oldest first (the links run newest first)
  list.clear();
  for (int32_t i = b_.head[n]; i >= 0; i = b_.items[size_t(i)].next) list.push_back(i);
  std::reverse(list.begin(), list.end());
  std::vector<NodeId>& terms = b_.terms;
  std::vector<SlicePart>& slices = b_.slices;
  terms.clear();
  slices.clear();
  for (int32_t i : list) {
    const Contribution c = b_.items[size_t(i)];
    if (c.kind == Contribution::kWhole) terms.push_back(term_node(c.a, c.at, graph_.node(n).shape));
    else slices.push_back({c.begin, c.end, term_node(c.a, c.at, ir::Shape{c.end - c.begin, graph_.node(n).shape.cols})});
  }
  if (!slices.empty()) terms.push_back(assemble_slices(n, slices));
  const ParameterPairs* sent_pairs = graph_.node(n).op == Op::parameter ? pairs_of(n, false) : nullptr;
  if (sent_pairs && !sent_pairs->empty()) {
    if (pairs) {
      sent_pairs->for_each([&](const ParameterPairs::Term& t) {
        if (t.dy_row != 0 || t.x_row != 0)  // a body calls no cell
          throw InternalError("Trace::backward: a body's pair reads rows of a node");
        pairs->emplace_back(t.dy, t.x);
      });
    } else {
      // One product per shape (all of a group's pairs are alike): columns read where they lie,
      // at rows of frames or whole (matmul_nt_rows), or matrices (matmul_nt, never at rows).
      auto contract = [&](ParameterPairs::Shapes shape, std::span<const NodeId> args, std::span<const int32_t> rows) {
        const ir::Shape pair[] = {shape.first, shape.second};
        const ir::Shape product = ir::infer_shape(Op::matmul_nt, pair, {});
        ir::Attributes at;
        if (pair[0].cols == 1) {
          at.index = graph_.add_rows(rows);
          at.target = product;
        }
        s_.check_room();
        const NodeId contraction = graph_.add(pair[0].cols == 1 ? Op::matmul_nt_rows : Op::matmul_nt, args, product, at);
        s_.data.types.push_back(s_.engine->driver.signatures.intern_contraction(graph_, contraction, pair[0], pair[1]));
        terms.push_back(contraction);
      };
      if (!sent_pairs->mixed) {  // one shape: the pairs as they were grouped when sent
        contract(sent_pairs->shape, sent_pairs->args, sent_pairs->rows);
      } else {
        group_pairs(sent_pairs->terms);
        for (size_t g = 0; g < b_.group_shapes.size(); ++g) contract(b_.group_shapes[g], b_.groups[g], b_.group_rows[g]);
      }
    }
  }
  if (terms.empty()) return ir::kNoNode;  // only pairs, kept apart
  return terms.size() == 1 ? terms[0] : emit(Op::sum, terms);
}

void Backward::group_pairs(std::span<const ParameterPairs::Term> sent) {
  std::vector<std::pair<ir::Shape, ir::Shape>>& shapes = b_.group_shapes;
  std::vector<uint32_t>& sizes = b_.group_sizes;
  std::vector<uint32_t>& group_of = b_.pair_groups;
  shapes.clear();
  sizes.clear();
  group_of.resize(sent.size());
  // First each pair's group, then each group's lists filled at once.
  size_t last = 0;  // the group of the previous pair: pairs of one shape come in runs
  for (size_t i = 0; i < sent.size(); ++i) {
    const std::pair<ir::Shape, ir::Shape> shape{sent[i].dy_shape, sent[i].x_shape};
    size_t g = last < shapes.size() && shapes[last] == shape ? last : 0;
    while (g < shapes.size() && shapes[g] != shape) ++g;
    if (g == shapes.size()) {
      shapes.push_back(shape);
      sizes.push_back(0);
    }
    ++sizes[g];
    group_of[i] = uint32_t(g);
    last = g;
  }
  if (b_.groups.size() < shapes.size()) {
    b_.groups.resize(shapes.size());
    b_.group_rows.resize(shapes.size());
  }
  for (size_t g = 0; g < shapes.size(); ++g) {
    b_.groups[g].resize(2 * size_t(sizes[g]));
    b_.group_rows[g].resize(2 * size_t(sizes[g]));
    sizes[g] = 0;  // now each group's next free pair
  }
  for (size_t i = 0; i < sent.size(); ++i) {
    const size_t g = group_of[i];
    const size_t at = 2 * size_t(sizes[g]++);
    b_.groups[g][at] = sent[i].dy;
    b_.groups[g][at + 1] = sent[i].x;
    b_.group_rows[g][at] = sent[i].dy_row;
    b_.group_rows[g][at + 1] = sent[i].x_row;
  }
}

NodeId Backward::assemble_slices(NodeId n, std::vector<SlicePart>& parts) {
  const ir::Shape shape = graph_.node(n).shape;
  std::sort(parts.begin(), parts.end(), [](const SlicePart& x, const SlicePart& y) {
    return std::tie(x.begin, x.end) < std::tie(y.begin, y.end);
  });
  // Slices of the same rows first add up.
  std::vector<SlicePart> merged;
  for (size_t i = 0; i < parts.size();) {
    size_t j = i + 1;
    while (j < parts.size() && parts[j].begin == parts[i].begin && parts[j].end == parts[i].end) ++j;
    std::vector<NodeId> same;
    for (size_t k = i; k < j; ++k) same.push_back(parts[k].gradient);
    merged.push_back({parts[i].begin, parts[i].end, same.size() == 1 ? same[0] : emit(Op::sum, same)});
    i = j;
  }
  bool disjoint = true;
  for (size_t i = 1; i < merged.size(); ++i) disjoint &= merged[i].begin >= merged[i - 1].end;
  // Disjoint slices in ascending order as one value of n's shape, with zeros in the gaps.
  auto place = [&](std::span<const SlicePart> ascending) {
    std::vector<NodeId> pieces;
    int32_t row = 0;
    for (const SlicePart& p : ascending) {
      if (p.begin > row) pieces.push_back(constant(ir::Shape{p.begin - row, shape.cols}, 0.0f));
      pieces.push_back(p.gradient);
      row = p.end;
    }
    if (row < shape.rows) pieces.push_back(constant(ir::Shape{shape.rows - row, shape.cols}, 0.0f));
    return pieces.size() == 1 ? pieces[0] : emit(Op::concat, pieces);
  };
  if (disjoint) return place(merged);
  std::vector<NodeId> padded;
  for (const SlicePart& p : merged) padded.push_back(place(std::span(&p, 1)));
  return emit(Op::sum, padded);
}

}  // namespace detail

// A value of `shape` that lies at rows [at, at + its size) of column `source`: a slice of them,
// reshaped when the value is a matrix.
NodeId detail::read_rows(TraceState& s, NodeId source, int64_t at, ir::Shape shape, bool placed_view) {
  auto add = [&](Op op, NodeId arg, ir::Shape out, const ir::Attributes& attrs) {
    if (!placed_view) return s.add(op, std::span(&arg, 1), out, attrs).node_id();
    s.check_room();
    const NodeId id = s.data.graph.add(op, std::span(&arg, 1), out, attrs);
    s.data.types.push_back(ir::kCallOutput);
    s.data.plan.batch_views.push_back(id);
    return id;
  };
  ir::Attributes rows;
  rows.begin = int32_t(at);
  rows.end = rows.begin + int32_t(shape.size());
  const NodeId read = add(Op::slice, source, ir::Shape{rows.end - rows.begin, 1}, rows);
  if (shape.cols == 1) return read;
  ir::Attributes target;
  target.target = shape;
  return add(Op::reshape, read, shape, target);
}

detail::BodyGradients detail::body_gradients(TraceState& s, NodeId last, std::span<const std::pair<NodeId, NodeId>> seeds,
                                             std::span<const NodeId> arguments) {
  return detail::Backward(s).record_body(last, seeds, arguments);
}

Gradients Trace::backward(const Expr& loss) {
  Gradients gradients;
  backward(loss, gradients);
  return gradients;
}

void Trace::backward(const Expr& loss, Gradients& out) {
  record_backward(loss, "edb::Trace::backward()");
  gradients(out);
}

void Trace::record_backward(const Expr& loss) { record_backward(loss, "edb::Trace::record_backward()"); }

void Trace::record_backward(const Expr& loss, const char* function) {
  detail::TraceState& s = detail::TraceState::of(loss, function);
  if (&s != state_ || s.generation != generation_)
    throw UsageError(std::string(function) + ": the loss belongs to another trace");
  if (!(s.data.graph.node(s.id(loss)).shape == ir::Shape{1, 1}))
    throw UsageError(std::string(function) + ": the loss must be 1x1, got " +
                     ir::to_string(s.data.graph.node(s.id(loss)).shape));
  // A call of a cell stays one node: its gradient is one call of the cell's backward body.
  // The engine's first backward pass may find calls laid out for inference (their frames keep only
  // what they return): that trace's calls are recorded again, and its forward pass runs again,
  // with the layout the backward bodies read, which the engine's later calls use too (the same
  // arithmetic: values and gradients do not depend on which trace came first).
  if (s.call_nodes) {
    bool relayout = false;  // a call laid out for inference
    const ir::Graph& graph = s.data.graph;
    for (size_t c = 0; c < graph.cell_count(); ++c) {  // the cells the trace calls
      const auto& cell = static_cast<const runtime::CallCell&>(graph.cell(int64_t(c)));
      if (cell.is_backward) continue;  // a second derivative: refused by the pass
      detail::CellRecord& record = detail::record_of(*s.engine, cell);
      relayout |= record.inference_cell.get() == &cell;
      if (!record.backward_derived) detail::derive_backward(*s.engine, record);
    }
    s.engine->trained = true;
    if (relayout) {
      s.engine->driver.drain(s.data);
      s.record_calls_again();
      generation_ = s.generation;
    }
  }

  // The forward pass is batched first (unless it ran), not run: the backward pass records in the
  // order of its batches. Both run in one evaluation, whose batches and memory plan
  // record_backward() also makes now, so that run() only executes (a training loop records and
  // prepares the next step while this one runs).
  s.engine->driver.schedule(s.data);
  s.backward_loss = s.id(loss);
  const auto start = std::chrono::steady_clock::now();
  s.backward_leaves = detail::Backward(s).record(s.backward_loss);
  s.engine->driver.add_record_backward_ms(
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  s.engine->driver.prepare(s.data);
}

}  // namespace edb
