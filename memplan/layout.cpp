// The PQ-tree layout planner and the operand-mode checker. The PQ tree (pq_tree.h) keeps the
// consecutive sets; this file chooses the constraints, the member orders and the offsets.
#include "memplan/layout.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "edbatch/errors.h"
#include "memplan/pq_tree.h"

namespace edb::memplan {

namespace {

// ---- The executor's rule (runtime/batched.cpp, BatchContext::operand and run_linear) ----

// Where an operand's values start, in floats: arena values by offset, leaves by address. Two
// values in different spaces have no distance the planner can know.
struct Address {
  enum Space : uint8_t { arena, host };
  Space space = arena;
  int64_t floats = 0;
  friend bool operator==(Address, Address) = default;
};

Address address(const ir::Graph& graph, const Plan& plan, ir::NodeId id) {
  if (plan.offset[id] >= 0) return {Address::arena, plan.offset[id]};
  const float* data = graph.leaf_data(id);
  if (!data)
    throw InternalError("memplan::operand_modes: node %" + std::to_string(id) + " (" +
                        std::string(ir::op_name(graph.node(id).op)) + ") has no offset and is not a leaf");
  return {Address::host, int64_t(reinterpret_cast<uintptr_t>(data) / sizeof(float))};
}

// The executor's stride rule (Operand::stride_fits): 0 (shared), or at least one operand apart
// (any stride for column vectors, exactly one operand otherwise).
bool stride_fits(int64_t stride, ir::Shape shape) {
  return stride == 0 || (stride >= shape.size() && (shape.cols == 1 || stride == shape.size()));
}

// BatchContext::operand: member k at base + k * stride by stride_fits; else gathered.
OperandMode classify(std::span<const Address> at, ir::Shape shape) {
  if (at.size() <= 1) return OperandMode::contiguous;
  const int64_t stride = at[1].floats - at[0].floats;
  if (at[1].space != at[0].space || !stride_fits(stride, shape)) return OperandMode::gather;
  for (size_t k = 2; k < at.size(); ++k)
    if (at[k].space != at[0].space || at[k].floats != at[0].floats + int64_t(k) * stride) return OperandMode::gather;
  return stride == 0 ? OperandMode::shared : OperandMode::contiguous;
}

// Calls mode_of(slot) for each slot the executor classifies, in its order. A linear op stops at
// the first product whose weight is not one for every member (run_linear's per-member products,
// which read operands in place), and a matvec always does; a lookup reads no operand.
template <typename ModeOf>
void for_each_read_slot(const ir::Node& first, size_t members, ModeOf&& mode_of) {
  if (ir::is_node_batch(first)) return;  // its members' arguments lie where their table says (ir::NodeBatch)
  switch (first.op) {
    case ir::Op::lookup:
    case ir::Op::matmul_nt:
    case ir::Op::matmul_nt_rows: return;  // packs each member's pairs itself (run_matmul_nt)
    case ir::Op::call: return;       // a compiled cell reads each call's arguments through its pointer table
    case ir::Op::matmul_tn:  // as matmul: its weight is transposed, not read otherwise
    case ir::Op::matmul:
    case ir::Op::affine:
    case ir::Op::matvec: {
      const size_t product_begin = first.op == ir::Op::affine ? 1 : 0;
      if (first.op == ir::Op::affine) mode_of(size_t{0});
      for (size_t slot = product_begin; slot + 1 < first.arg_count; slot += 2) {
        const bool one_weight = mode_of(slot) == OperandMode::shared || members == 1;
        if (first.op == ir::Op::matvec || !one_weight) return;
        mode_of(slot + 1);
      }
      return;
    }
    default:
      for (size_t slot = 0; slot < first.arg_count; ++slot) mode_of(slot);
  }
}

// Of a gathered slot, the members the batched executor copies (OperandModes::bytes_copied).
int64_t copied_members(const ir::Graph& graph, const ir::Node& first, ir::NodeId member0, size_t slot,
                       std::span<const Address> at, ir::Shape shape) {
  const int64_t n = int64_t(at.size());
  // A run may not repeat a matrix (no view does).
  auto fits = [&](int64_t s) { return stride_fits(s, shape) && (s != 0 || shape.cols == 1); };
  int64_t runs = 0, alone = 0;
  for (int64_t start = 0; start < n;) {
    int64_t end = start + 1;
    if (end < n && at[end].space == at[start].space && fits(at[end].floats - at[start].floats)) {
      const int64_t s = at[end].floats - at[start].floats;
      while (end + 1 < n && at[end + 1].space == at[end].space && at[end + 1].floats - at[end].floats == s) ++end;
      ++end;
    }
    ++runs;
    alone += end == start + 1;
    start = end;
  }
  switch (first.op) {
    case ir::Op::softmax:
    case ir::Op::log_softmax:
    case ir::Op::pick_neg_log_softmax:
    case ir::Op::softmax_grad:
    case ir::Op::log_softmax_grad:
    case ir::Op::pick_neg_log_softmax_grad: return n;
    case ir::Op::matvec: return 0;  // per-member products, read in place
    case ir::Op::affine:
    case ir::Op::matmul:
    case ir::Op::matmul_tn: {  // A^T X: X read like any GEMM's (gemm_rows, transposed)
      const size_t product_begin = first.op == ir::Op::affine ? 1 : 0;
      if (slot < product_begin) return n;  // the bias
      if ((slot - product_begin) % 2 == 0) return 0;  // a weight that differs: per-member products
      const ir::Shape weight = graph.node(graph.args(member0)[slot - 1]).shape;
      const int64_t output_rows = first.op == ir::Op::matmul_tn ? weight.cols : weight.rows;
      return gemm_reads_runs(runs, output_rows, n) ? alone : n;
    }
    default: return alone;
  }
}


// ---- The planner ----

// An operand before offsets exist: a buffer of this schedule (index, floats into it for views),
// a value planned by an earlier evaluation (its arena offset), or a leaf (its address in floats).
struct Location {
  enum Kind : uint8_t { buffer, planned, leaf };
  Kind kind = buffer;
  int64_t base = 0;
  int64_t delta = 0;
  friend bool operator==(const Location&, const Location&) = default;
};

// A C2 candidate: batch `batch`'s operand slot `slot` reads distinct buffers, member k's being
// buffers[k] (in the schedule's member order), all at the same place inside equal-sized buffers.
struct OperandSet {
  uint32_t batch = 0;
  uint32_t slot = 0;
  int64_t bytes = 0;
  std::vector<int> buffers;
  bool kept = false;
};

// The PQ tree copied into arrays the planner may reorder: node ids 0..buffers-1 are the leaves
// (one per buffer), inner nodes follow in breadth-first order, so parents precede children.
struct Tree {
  std::vector<uint8_t> is_q;
  std::vector<int> first_kid, kid_count, parent;
  std::vector<int> kids;
  int root = -1;
  int leaves = 0;

  std::span<int> children(int node) { return {kids.data() + first_kid[size_t(node)], size_t(kid_count[size_t(node)])}; }
};

// Into `t`, reusing its arrays.
void copy_tree(const PqTree& pq, Tree& t) {
  t.kids.clear();
  t.root = -1;
  t.leaves = pq.leaves();
  t.is_q.assign(size_t(t.leaves), 0);
  t.first_kid.assign(size_t(t.leaves), 0);
  t.kid_count.assign(size_t(t.leaves), 0);
  t.parent.assign(size_t(t.leaves), -1);
  if (pq.root() < 0) return;
  auto add = [&](int pq_node, int parent) {
    if (pq.kind(pq_node) == PqTree::Kind::leaf) {
      t.parent[size_t(pq_node)] = parent;
      return pq_node;
    }
    const int id = int(t.is_q.size());
    t.is_q.push_back(pq.kind(pq_node) == PqTree::Kind::q);
    t.first_kid.push_back(0);
    t.kid_count.push_back(0);
    t.parent.push_back(parent);
    return id;
  };
  std::vector<int> pq_of;  // inner node id -> PqTree node id, in breadth-first order
  t.root = add(pq.root(), -1);
  if (t.root >= t.leaves) pq_of.push_back(pq.root());
  for (size_t i = 0; i < pq_of.size(); ++i) {
    const int id = t.leaves + int(i);
    const std::vector<int> children = pq.children(pq_of[i]);
    t.first_kid[size_t(id)] = int(t.kids.size());
    t.kid_count[size_t(id)] = int(children.size());
    for (int child : children) {
      const int mine = add(child, id);
      if (mine >= t.leaves) pq_of.push_back(child);
      t.kids.push_back(mine);
    }
  }
}

// Per batch, its largest operand read from buffers of this schedule (any places, repeats
// allowed): the member order to follow when no operand set was kept.
struct FallbackLead {
  int64_t bytes = 0;
  std::vector<Location> at;
};

}  // namespace

// The planner's arrays and PQ tree, kept from one plan to the next so that planning a trace
// reuses memory already touched instead of faulting in fresh pages.
struct LayoutPlanner::Workspace {
  std::vector<uint8_t> scheduled, view_batch;
  std::vector<int> buffer_of;
  std::vector<ir::NodeId> buffer_node;
  std::vector<uint32_t> buffer_batch;
  std::vector<OperandSet> sets;
  std::vector<FallbackLead> fallback_lead;
  std::unique_ptr<PqTree> pq;
  Tree tree;
  std::vector<int64_t> position, subtree_key;
  std::vector<int> nodes, stack;
  std::vector<int64_t> source_at;
};

namespace {

class Planner {
 public:
  static constexpr size_t kMaxLeads = 3;  // kept operand sets tried as a batch's lead

  Planner(const ir::Graph& graph, scheduler::Schedule& schedule, Plan& plan, LayoutStats& stats,
          LayoutPlanner::Workspace& ws)
      : graph_(graph), schedule_(schedule), plan_(plan), stats_(stats), scheduled_(ws.scheduled),
        view_batch_(ws.view_batch), buffer_of_(ws.buffer_of), buffer_node_(ws.buffer_node),
        buffer_batch_(ws.buffer_batch), sets_(ws.sets), fallback_lead_(ws.fallback_lead), pq_(ws.pq),
        tree_(ws.tree), position_(ws.position), subtree_key_(ws.subtree_key), nodes_(ws.nodes), stack_(ws.stack),
        source_at_(ws.source_at) {
    buffer_node_.clear();
    buffer_batch_.clear();
    sets_.clear();
  }

  void run() {
    number_buffers();
    collect_operand_sets();
    reduce();
    order();
    assign_offsets();
  }

  // The (batch, slot) of every kept C2 set.
  std::vector<std::pair<uint32_t, uint32_t>> kept_slots() const {
    std::vector<std::pair<uint32_t, uint32_t>> out;
    for (const OperandSet& s : sets_)
      if (s.kept) out.emplace_back(s.batch, s.slot);
    return out;
  }

 private:
  // Views as plan_batch_order makes them, then one buffer per other scheduled node, in schedule order.
  void number_buffers() {
    plan_.offset.resize(graph_.size(), -1);
    plan_.view.resize(graph_.size(), 0);
    scheduled_.assign(graph_.size(), 0);
    buffer_of_.assign(graph_.size(), -1);
    for (ir::NodeId id : schedule_.nodes) scheduled_[id] = 1;
    view_batch_.assign(schedule_.batch_count(), 0);
    for (size_t b = 0; b < schedule_.batch_count(); ++b) {
      const auto members = schedule_.batch(b);
      view_batch_[b] = std::all_of(members.begin(), members.end(), [&](ir::NodeId id) {
        const ir::Node& n = graph_.node(id);
        const ir::NodeId arg = n.arg_count > 0 ? graph_.args(n)[0] : ir::kNoNode;
        return viewable(n) && (plan_.offset[arg] >= 0 || scheduled_[arg]);
      });
      for (ir::NodeId id : members) {
        plan_.view[id] = view_batch_[b];
        if (view_batch_[b]) continue;
        buffer_of_[id] = int(buffer_node_.size());
        buffer_node_.push_back(id);
        buffer_batch_.push_back(uint32_t(b));
      }
    }
  }

  Location locate(ir::NodeId id) const {
    int64_t delta = 0;
    while (scheduled_[id] && plan_.view[id]) {
      delta += view_offset(graph_.node(id));
      id = graph_.args(id)[0];
    }
    if (buffer_of_[id] >= 0) return {Location::buffer, buffer_of_[id], delta};
    if (plan_.offset[id] >= 0) return {Location::planned, plan_.offset[id] + delta, 0};
    return {Location::leaf, int64_t(reinterpret_cast<uintptr_t>(graph_.leaf_data(id)) / sizeof(float)), 0};
  }

  int64_t buffer_size(int buffer) const { return graph_.node(buffer_node_[size_t(buffer)]).shape.size(); }

  // C2 candidates: the slots the executor will classify whose operands are distinct buffers that
  // can sit one stride apart.
  void collect_operand_sets() {
    std::vector<Location> at;
    fallback_lead_.assign(schedule_.batch_count(), {});
    for (size_t b = 0; b < schedule_.batch_count(); ++b) {
      const auto members = schedule_.batch(b);
      if (view_batch_[b] || members.size() < 2) continue;
      for_each_read_slot(graph_.node(members[0]), members.size(), [&](size_t slot) {
        at.clear();
        for (ir::NodeId m : members) at.push_back(locate(graph_.args(m)[slot]));
        if (std::all_of(at.begin(), at.end(), [&](const Location& l) { return l == at[0]; }))
          return OperandMode::shared;
        const ir::Shape shape = graph_.node(graph_.args(members[0])[slot]).shape;
        const int64_t bytes = 4 * shape.size() * int64_t(members.size());
        const bool buffers = std::all_of(at.begin(), at.end(), [](const Location& l) { return l.kind == Location::buffer; });
        if (buffers && bytes > fallback_lead_[b].bytes) {
          fallback_lead_[b].bytes = bytes;
          fallback_lead_[b].at.assign(at.begin(), at.end());
        }
        if (std::all_of(at.begin(), at.end(), [&](const Location& l) {
              return l.kind == Location::buffer && l.delta == at[0].delta &&
                     buffer_size(int(l.base)) == buffer_size(int(at[0].base));
            })) {
          const int64_t stride = buffer_size(int(at[0].base));
          OperandSet set{uint32_t(b), uint32_t(slot), bytes, {}, false};
          for (const Location& l : at) set.buffers.push_back(int(l.base));
          std::vector<int> distinct = set.buffers;
          std::sort(distinct.begin(), distinct.end());
          const bool unique = std::adjacent_find(distinct.begin(), distinct.end()) == distinct.end();
          if (unique && stride >= shape.size() && (shape.cols == 1 || stride == shape.size()))
            sets_.push_back(std::move(set));
        }
        return OperandMode::gather;  // for the control flow, only "shared or not" matters here
      });
    }
  }

  // C1 for every batch (disjoint sets: always kept), then C2 by bytes, largest first.
  void reduce() {
    if (pq_) pq_->reset(int(buffer_node_.size()));
    else pq_ = std::make_unique<PqTree>(int(buffer_node_.size()));
    std::vector<int> set;
    for (size_t b = 0; b < schedule_.batch_count(); ++b) {
      if (view_batch_[b] || schedule_.batch(b).size() < 2) continue;
      set.clear();
      for (ir::NodeId id : schedule_.batch(b)) set.push_back(buffer_of_[id]);
      ++stats_.constraints_tried;
      if (!pq_->reduce(set))
        throw InternalError("memplan::plan_layout: batch " + std::to_string(b) + "'s outputs cannot be consecutive");
      ++stats_.constraints_kept;
      pq_->forget_marks();
    }
    std::stable_sort(sets_.begin(), sets_.end(), [](const OperandSet& x, const OperandSet& y) { return x.bytes > y.bytes; });
    for (OperandSet& s : sets_) {
      ++stats_.constraints_tried;
      s.kept = pq_->reduce(s.buffers);
      ++(s.kept ? stats_.constraints_kept : stats_.constraints_dropped);
      pq_->forget_marks();
    }
  }

  // Arranges `node`'s children by `key` of their leaves (the smallest leaf key of each child):
  // a P-node sorted, a Q-node turned so its first child's key is the smaller end.
  void arrange(int node, const std::vector<int64_t>& subtree_key) {
    std::span<int> kids = tree_.children(node);
    if (kids.empty()) return;
    if (!tree_.is_q[size_t(node)]) {
      std::stable_sort(kids.begin(), kids.end(),
                       [&](int x, int y) { return subtree_key[size_t(x)] < subtree_key[size_t(y)]; });
    } else if (subtree_key[size_t(kids.front())] > subtree_key[size_t(kids.back())]) {
      std::reverse(kids.begin(), kids.end());
    }
  }

  // Arranges every node under `tops` (breadth-first lists, so parents before children) by the
  // leaves' `leaf_key`, then numbers their leaves from `start` in the new order.
  void arrange_and_number(std::span<const int> tops, const std::vector<int64_t>& leaf_key, int64_t start) {
    nodes_.clear();
    for (int top : tops) nodes_.push_back(top);
    for (size_t i = 0; i < nodes_.size(); ++i)
      for (int kid : tree_.children(nodes_[i])) nodes_.push_back(kid);
    for (size_t i = nodes_.size(); i-- > 0;) {
      const int node = nodes_[i];
      if (node < tree_.leaves) {
        subtree_key_[size_t(node)] = leaf_key[size_t(node)];
        continue;
      }
      arrange(node, subtree_key_);
      int64_t smallest = INT64_MAX;
      for (int kid : tree_.children(node)) smallest = std::min(smallest, subtree_key_[size_t(kid)]);
      subtree_key_[size_t(node)] = smallest;
    }
    // Number the leaves depth first, children in their (new) order.
    for (int top : tops) {
      stack_.assign(1, top);
      while (!stack_.empty()) {
        const int node = stack_.back();
        stack_.pop_back();
        if (node < tree_.leaves) {
          position_[size_t(node)] = start++;
          continue;
        }
        const std::span<int> kids = tree_.children(node);
        for (size_t k = kids.size(); k-- > 0;) stack_.push_back(kids[k]);
      }
    }
  }

  // The member orders (C3). First every node in schedule order (each leaf's key its buffer
  // number), which fixes how batches sit relative to each other; then, batch by batch in schedule
  // order, the nodes holding only that batch's buffers are rearranged so its members follow their
  // largest kept operand's buffers, whose order is final by then (they come from earlier batches).
  void order() {
    const size_t count = buffer_node_.size();
    position_.assign(count, 0);
    copy_tree(*pq_, tree_);
    pq_.reset();
    if (tree_.root < 0) return;
    subtree_key_.assign(tree_.is_q.size(), 0);
    std::vector<int64_t> key(count);
    for (size_t i = 0; i < count; ++i) key[i] = int64_t(i);
    const int root = tree_.root;
    arrange_and_number(std::span(&root, 1), key, 0);

    // Which batch each node holds only buffers of (-1: several), and each batch's top nodes.
    std::vector<int> batch_of(tree_.is_q.size(), -1);
    for (size_t i = 0; i < count; ++i) batch_of[i] = int(buffer_batch_[i]);
    for (size_t node = tree_.is_q.size(); node-- > size_t(tree_.leaves);) {
      const std::span<int> kids = tree_.children(int(node));
      int batch = batch_of[size_t(kids[0])];
      for (int kid : kids)
        if (batch_of[size_t(kid)] != batch) batch = -1;
      batch_of[node] = batch;
    }
    std::vector<std::vector<int>> tops(schedule_.batch_count());
    stack_.assign(1, root);
    while (!stack_.empty()) {
      const int node = stack_.back();
      stack_.pop_back();
      if (batch_of[size_t(node)] >= 0) {
        tops[size_t(batch_of[size_t(node)])].push_back(node);
        continue;
      }
      const std::span<int> kids = tree_.children(node);
      for (size_t k = kids.size(); k-- > 0;) stack_.push_back(kids[k]);
    }

    // Each batch follows one lead: one of its kept operand sets, or else its largest operand read
    // from buffers. Each candidate is tried (the largest few) and the one under which the most
    // kept operand bytes come out in member order wins.
    std::vector<std::vector<const OperandSet*>> kept(schedule_.batch_count());
    for (const OperandSet& s : sets_)  // sorted by bytes, largest first
      if (s.kept) kept[s.batch].push_back(&s);
    for (size_t b = 0; b < schedule_.batch_count(); ++b) {
      const auto members = schedule_.batch(b);
      const size_t candidates = std::min<size_t>(kept[b].size(), kMaxLeads) + (fallback_lead_[b].at.empty() ? 0 : 1);
      if (candidates == 0) continue;
      int64_t start = INT64_MAX;
      for (ir::NodeId id : members) start = std::min(start, position_[size_t(buffer_of_[id])]);
      auto follow = [&](size_t candidate) {
        for (size_t k = 0; k < members.size(); ++k) {
          const int buffer = buffer_of_[members[k]];
          // Sources by where they start: the rows inside a buffer first (members reading the same
          // rows of different buffers are likely to be read together again), then the buffer.
          if (candidate < kept[b].size() && candidate < kMaxLeads) {
            key[size_t(buffer)] = position_[size_t(kept[b][candidate]->buffers[k])];
          } else {
            const Location& at = fallback_lead_[b].at[k];
            key[size_t(buffer)] = (at.delta << 32) + position_[size_t(at.base)];
          }
        }
        arrange_and_number(tops[b], key, start);
      };
      auto aligned_bytes = [&] {
        int64_t bytes = 0;
        for (const OperandSet* s : kept[b]) {
          for (size_t k = 0; k < members.size(); ++k)
            source_at_[size_t(position_[size_t(buffer_of_[members[k]])] - start)] = position_[size_t(s->buffers[k])];
          bool in_order = true;
          for (size_t r = 1; r < members.size() && in_order; ++r) in_order = source_at_[r] == source_at_[r - 1] + 1;
          if (in_order) bytes += s->bytes;
        }
        return bytes;
      };
      if (candidates == 1) {
        follow(0);
        continue;
      }
      source_at_.resize(std::max(source_at_.size(), members.size()));
      size_t best = 0;
      int64_t best_bytes = -1;
      for (size_t c = 0; c < candidates; ++c) {
        follow(c);
        const int64_t bytes = aligned_bytes();
        if (bytes > best_bytes) {
          best = c;
          best_bytes = bytes;
        }
      }
      if (best != candidates - 1) follow(best);
    }
  }

  // Offsets in the final order from the current end of the arena, views on their sources, and
  // each batch's members in the order of their outputs.
  void assign_offsets() {
    std::vector<int> in_order(buffer_node_.size());
    for (size_t i = 0; i < in_order.size(); ++i) in_order[size_t(position_[i])] = int(i);
    int64_t end = plan_.arena_floats;
    for (int buffer : in_order) {
      plan_.offset[buffer_node_[size_t(buffer)]] = end;
      end += buffer_size(buffer);
    }
    plan_.arena_floats = end;
    for (size_t b = 0; b < schedule_.batch_count(); ++b) {
      const auto members = schedule_.batch(b);
      if (!view_batch_[b] && graph_.node(members[0]).op == ir::Op::call) place_call_frames(graph_, members, plan_);
    }
    for (size_t b = 0; b < schedule_.batch_count(); ++b) {
      if (!view_batch_[b]) continue;
      for (ir::NodeId id : schedule_.batch(b)) plan_.offset[id] = view_at(graph_, plan_, id);
    }
    for (size_t b = 0; b < schedule_.batch_count(); ++b) {
      const auto begin = schedule_.nodes.begin() + schedule_.batch_begin[b];
      const auto end_of_batch = schedule_.nodes.begin() + schedule_.batch_begin[b + 1];
      std::stable_sort(begin, end_of_batch, [&](ir::NodeId x, ir::NodeId y) { return plan_.offset[x] < plan_.offset[y]; });
    }
  }

  const ir::Graph& graph_;
  scheduler::Schedule& schedule_;
  Plan& plan_;
  LayoutStats& stats_;
  std::vector<uint8_t>& scheduled_;
  std::vector<uint8_t>& view_batch_;
  std::vector<int>& buffer_of_;          // per node: its buffer, -1 for views, leaves, earlier nodes
  std::vector<ir::NodeId>& buffer_node_;
  std::vector<uint32_t>& buffer_batch_;
  std::vector<OperandSet>& sets_;
  std::vector<FallbackLead>& fallback_lead_;
  std::unique_ptr<PqTree>& pq_;
  Tree& tree_;
  std::vector<int64_t>& position_;
  std::vector<int64_t>& subtree_key_;
  std::vector<int>& nodes_;
  std::vector<int>& stack_;
  std::vector<int64_t>& source_at_;
};

}  // namespace

LayoutPlanner::LayoutPlanner() : workspace_(std::make_unique<Workspace>()) {}
LayoutPlanner::~LayoutPlanner() = default;

void plan_layout(const ir::Graph& graph, scheduler::Schedule& schedule, Plan& plan, LayoutStats* stats) {
  LayoutPlanner planner;
  planner.always_build();
  planner.plan(graph, schedule, plan, stats);
}

void LayoutPlanner::plan(const ir::Graph& graph, scheduler::Schedule& schedule, Plan& plan, LayoutStats* stats) {
  const auto start = std::chrono::steady_clock::now();
  LayoutStats own;
  LayoutStats& out = stats ? *stats : own;
  out = LayoutStats{};
  const std::vector<ir::NodeId> schedule_order = schedule.nodes;
  const int64_t arena_start = plan.arena_floats;
  // The PQ tree costs about 100 ns per buffer here, and a copied byte about 0.1 ns: where the
  // batch order copies less than kBytesPerBuffer per buffer (compiled cells read their arguments
  // through pointers, so they copy nothing), no layout can win back its own planning.
  constexpr int64_t kBytesPerBuffer = 1024;
  plan_batch_order(graph, schedule, plan);
  const OperandModes batch_order_first = operand_modes(graph, schedule, plan);
  int64_t buffers = 0;
  for (ir::NodeId id : schedule_order) buffers += !plan.is_view(id);
  // And where the last layout built saved less copying than it cost to build, the next traces
  // (alike, as a run's traces are) keep the batch order too, until kSkippedPlans have gone by.
  const bool not_worth_it = !always_build_ && (batch_order_first.bytes_copied < kBytesPerBuffer * buffers || skip_ > 0);
  if (skip_ > 0) --skip_;
  if (batch_order_first.bytes_copied == 0 || not_worth_it) {
    out.kept_batch_order = true;
    out.bytes_gathered = out.bytes_gathered_batch_order = batch_order_first.bytes_gathered;
    out.plan_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    return;
  }
  for (ir::NodeId id : schedule_order) {
    plan.offset[id] = -1;
    plan.view[id] = 0;
  }
  plan.arena_floats = arena_start;
  Planner planner(graph, schedule, plan, out, *workspace_);
  planner.run();
  place_call_outputs(graph, schedule, plan);
  const OperandModes modes = operand_modes(graph, schedule, plan);
  out.bytes_gathered = modes.bytes_gathered;
  out.bytes_copied = modes.bytes_copied;
  for (const auto& [batch, slot] : planner.kept_slots())
    if (modes.batch(batch)[slot] != OperandMode::contiguous) ++out.operands_misaligned;

  // Never worse than the batch order: where the layout gathers more, keep that plan instead.
  std::vector<ir::NodeId> layout_order = std::move(schedule.nodes);
  std::vector<int64_t> layout_offsets;
  for (ir::NodeId id : layout_order) layout_offsets.push_back(plan.offset[id]);
  const int64_t layout_end = plan.arena_floats;
  schedule.nodes = schedule_order;
  plan.arena_floats = arena_start;
  plan_batch_order(graph, schedule, plan);
  const OperandModes& batch_order = batch_order_first;  // the same plan as the first
  out.bytes_gathered_batch_order = batch_order.bytes_gathered;
  out.bytes_copied_batch_order = batch_order.bytes_copied;
  if (std::pair(batch_order.bytes_copied, batch_order.bytes_gathered) <= std::pair(out.bytes_copied, out.bytes_gathered)) {
    out.kept_batch_order = true;
    out.bytes_gathered = out.bytes_gathered_batch_order;
    out.bytes_copied = out.bytes_copied_batch_order;
  } else {
    schedule.nodes = std::move(layout_order);
    for (size_t i = 0; i < schedule.nodes.size(); ++i) plan.offset[schedule.nodes[i]] = layout_offsets[i];
    plan.arena_floats = layout_end;
  }
  out.plan_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  constexpr double kNsPerCopiedByte = 0.1;  // what a gathered byte costs the executor here
  constexpr int kSkippedPlans = 1000;
  const double saved_ns = double(batch_order.bytes_copied - out.bytes_copied) * kNsPerCopiedByte;
  if (saved_ns < out.plan_ms * 1e6) skip_ = kSkippedPlans;
}

OperandModes operand_modes(const ir::Graph& graph, const scheduler::Schedule& schedule, const Plan& plan) {
  OperandModes out;
  std::vector<Address> at;
  for (size_t b = 0; b < schedule.batch_count(); ++b) {
    const auto members = schedule.batch(b);
    const ir::Node& first = graph.node(members[0]);
    const size_t base = out.modes.size();
    out.modes.resize(base + first.arg_count, OperandMode::unread);
    if (!plan.is_view(members[0])) {
      for_each_read_slot(first, members.size(), [&](size_t slot) {
        at.clear();
        for (ir::NodeId m : members) at.push_back(address(graph, plan, graph.args(m)[slot]));
        const ir::Shape shape = graph.node(graph.args(members[0])[slot]).shape;
        const OperandMode mode = classify(at, shape);
        out.modes[base + slot] = mode;
        if (mode == OperandMode::gather) {
          const int64_t n = int64_t(members.size());
          out.bytes_gathered += 4 * shape.size() * n;
          out.bytes_copied += 4 * shape.size() * copied_members(graph, first, members[0], slot, at, shape);
        }
        return mode;
      });
    }
    out.slot_begin.push_back(uint32_t(out.modes.size()));
  }
  return out;
}

}  // namespace edb::memplan
