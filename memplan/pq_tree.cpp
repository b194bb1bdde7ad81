// The PQ tree: the undo log, the link edits the templates are made of, bubble-up, the templates,
// and the walks (frontier, printing, the invariant check).
#include "memplan/pq_tree.h"

#include <algorithm>

#include "edbatch/errors.h"

namespace edb::memplan {

namespace {

enum Mark : uint8_t { unmarked, queued, blocked, unblocked };
enum Label : uint8_t { empty, full, partial };

// Undo slots that are not node fields: the node count before an allocation, the root, and the
// head of the free list.
constexpr int32_t node_count_slot = -1;
constexpr int32_t root_slot = -2;
constexpr int32_t free_head_slot = -3;

}  // namespace

PqTree::PqTree(int leaves) { reset(leaves); }

void PqTree::reset(int leaves) {
  if (leaves < 0) throw UsageError("PqTree: expected a leaf count >= 0, got " + std::to_string(leaves));
  leaves_ = leaves;
  root_ = -1;
  free_head_ = -1;
  pseudo_ = -1;
  fields_.clear();
  scratch_.clear();
  undo_.clear();
  pertinent_.clear();
  queue_.clear();
  processed_.clear();
  // At most 2n nodes are alive (n leaves, n - 1 inner nodes, the pseudonode) plus the few a template
  // allocates before it frees; reserving keeps the arrays (and the log, which grows with every
  // reduction) from being copied as they grow.
  const size_t nodes = 2 * size_t(leaves) + 8;
  fields_.reserve(nodes * field_count);
  scratch_.reserve(nodes);
  undo_.reserve(32 * size_t(leaves) + 64);
  for (int i = 0; i < leaves; ++i) allocate(Kind::leaf);
  pseudo_ = allocate(Kind::q);
  if (leaves == 1) set_root(0);
  if (leaves >= 2) {
    const int top = allocate(Kind::p);
    for (int i = 0; i < leaves; ++i) append_child(top, i, end1);
    set_root(top);
  }
  undo_.clear();
}

// ---- Storage and the undo log ----

void PqTree::set(int node, Field field, int value) {
  const size_t slot = size_t(node) * field_count + field;
  if (fields_[slot] == value) return;
  undo_.push_back({int32_t(slot), fields_[slot]});
  fields_[slot] = value;
}

void PqTree::set_root(int node) {
  undo_.push_back({root_slot, root_});
  root_ = node;
}

void PqTree::rollback(size_t mark) {
  if (mark > undo_.size())
    throw UsageError("PqTree::rollback: mark " + std::to_string(mark) + " is past the undo log's end " +
                     std::to_string(undo_.size()));
  while (undo_.size() > mark) {
    const Undo undo = undo_.back();
    undo_.pop_back();
    if (undo.slot >= 0)
      fields_[size_t(undo.slot)] = undo.old;
    else if (undo.slot == node_count_slot)
      fields_.resize(size_t(undo.old) * field_count);
    else if (undo.slot == root_slot)
      root_ = undo.old;
    else
      free_head_ = undo.old;
  }
}

PqTree::Scratch& PqTree::scratch(int node) {
  Scratch& s = scratch_[size_t(node)];
  if (s.generation != generation_) {
    s = Scratch{};
    s.generation = generation_;
  }
  return s;
}

int PqTree::other_sibling(int node, int sibling) const {
  const int first = get(node, sibling0);
  return first == sibling ? get(node, sibling1) : first;
}

int PqTree::allocate(Kind kind) {
  int node = free_head_;
  if (node >= 0) {
    undo_.push_back({free_head_slot, free_head_});
    free_head_ = get(node, parent_of);
    for (Field field : {parent_of, sibling0, sibling1, end0, end1}) set(node, field, -1);
    set(node, p_child_count, 0);
    set(node, under_p_node, 0);
  } else {
    node = node_count();
    undo_.push_back({node_count_slot, node});
    fields_.resize(fields_.size() + field_count, -1);
    fields_[size_t(node) * field_count + p_child_count] = 0;
    fields_[size_t(node) * field_count + under_p_node] = 0;
    if (scratch_.size() < fields_.size() / field_count) scratch_.resize(fields_.size() / field_count);
  }
  set(node, kind_of, int(kind));
  // A reused id may carry this reduction's scratch from its previous life.
  scratch_[size_t(node)] = Scratch{};
  scratch_[size_t(node)].generation = generation_;
  return node;
}

void PqTree::free_node(int node) {
  set(node, parent_of, free_head_);
  undo_.push_back({free_head_slot, free_head_});
  free_head_ = node;
}

// ---- Link edits ----

// Replaces `node`'s link to `from` (which may be -1, its free side) with `to`.
void PqTree::relink(int node, int from, int to) {
  if (get(node, sibling0) == from)
    set(node, sibling0, to);
  else if (get(node, sibling1) == from)
    set(node, sibling1, to);
  else
    throw InternalError("PqTree: node " + std::to_string(node) + " is not linked to " + std::to_string(from));
}

void PqTree::append_child(int parent, int child, Field end) {
  const Field other = end == end0 ? end1 : end0;
  const int old_end = get(parent, end);
  set(child, sibling0, old_end);
  set(child, sibling1, -1);
  if (old_end >= 0)
    relink(old_end, -1, child);
  else
    set(parent, other, child);
  set(parent, end, child);
  set(child, parent_of, parent);
  const bool is_p = get(parent, kind_of) == int(Kind::p);
  set(child, under_p_node, is_p);
  if (is_p) set(parent, p_child_count, get(parent, p_child_count) + 1);
}

// Takes `child` out of `parent`'s list, leaving the child's own links stale: every caller links
// it again elsewhere or frees it.
void PqTree::unlink_child(int parent, int child) {
  const int a = get(child, sibling0), b = get(child, sibling1);
  if (a >= 0) relink(a, child, b);
  if (b >= 0) relink(b, child, a);
  // An end child has one free side; its other neighbour becomes the end.
  if (get(parent, end0) == child) set(parent, end0, a >= 0 ? a : b);
  if (get(parent, end1) == child) set(parent, end1, a >= 0 ? a : b);
}

void PqTree::remove_child(int parent, int child) {
  unlink_child(parent, child);
  if (get(parent, kind_of) == int(Kind::p)) set(parent, p_child_count, get(parent, p_child_count) - 1);
}

// `replacement` (detached) takes `child`'s place; `child`'s own links are left stale.
void PqTree::replace_child(int child, int replacement) {
  const int a = get(child, sibling0), b = get(child, sibling1), parent = get(child, parent_of);
  const bool under_p = get(child, under_p_node);
  set(replacement, sibling0, a);
  set(replacement, sibling1, b);
  if (a >= 0) relink(a, child, replacement);
  if (b >= 0) relink(b, child, replacement);
  set(replacement, parent_of, parent);
  set(replacement, under_p_node, under_p);
  // Only then is `parent` true; an inner Q-node child changes no ends.
  if (under_p || a < 0 || b < 0) {
    if (parent < 0) {
      set_root(replacement);
    } else {
      if (get(parent, end0) == child) set(parent, end0, replacement);
      if (get(parent, end1) == child) set(parent, end1, replacement);
    }
  }
}

// Detaches `node`'s full children and returns them as one node: the child itself when there is
// one, else a new full P-node over them, chained in one pass (these moves are most of the log).
int PqTree::take_full_children(int node) {
  const int head = scratch(node).full_head, count = scratch(node).full_count;
  if (count == 1) {
    remove_child(node, head);
    return head;
  }
  const int group = allocate(Kind::p);
  int previous = -1;
  for (int child = head; child >= 0; child = scratch(child).full_next) {
    unlink_child(node, child);
    set(child, sibling0, previous);
    set(child, sibling1, scratch(child).full_next);
    set(child, parent_of, group);
    set(child, under_p_node, 1);
    previous = child;
  }
  set(node, p_child_count, get(node, p_child_count) - count);
  set(group, end0, head);
  set(group, end1, previous);
  set(group, p_child_count, count);
  scratch(group).label = full;
  return group;
}

PqTree::Field PqTree::full_end(int q) {
  if (scratch(get(q, end0)).label == full) return end0;
  if (scratch(get(q, end1)).label == full) return end1;
  throw InternalError("PqTree::reduce: partial Q-node " + std::to_string(q) + " has no full end child");
}

// Replaces the partial Q-node `partial_child` by its children, its full end facing `toward`
// (one of its siblings, or -1 for the free side of an end child).
void PqTree::splice(int partial_child, int toward) {
  const Field end = full_end(partial_child);
  const int full_child = get(partial_child, end);
  const int empty_child = get(partial_child, end == end0 ? end1 : end0);
  const int a = get(partial_child, sibling0), b = get(partial_child, sibling1);
  if (a != toward && b != toward)
    throw InternalError("PqTree::reduce: " + std::to_string(toward) + " is no sibling of " +
                        std::to_string(partial_child));
  const int away = a == toward ? b : a;
  const int parent = get(partial_child, parent_of);  // true when partial_child is an end child
  for (auto [inner, outer] : {std::pair{full_child, toward}, std::pair{empty_child, away}}) {
    if (outer >= 0) {
      relink(inner, -1, outer);
      relink(outer, partial_child, inner);
    } else {
      if (get(parent, end0) == partial_child) set(parent, end0, inner);
      if (get(parent, end1) == partial_child) set(parent, end1, inner);
      set(inner, parent_of, parent);
      set(inner, under_p_node, 0);
    }
  }
  free_node(partial_child);
}

// ---- Bubble-up ----

// Gives every node of the pertinent subtree a true parent and counts its pertinent children
// (Booth and Lueker's BUBBLE). Inner Q-node children left blocked, that is with no sibling that
// knows the parent, get the pseudonode as parent. False when the leaves cannot be consecutive.
bool PqTree::bubble() {
  queue_.assign(pertinent_.begin(), pertinent_.end());
  processed_.clear();
  size_t head = 0;
  int block_count = 0, blocked_nodes = 0, off_the_top = 0;
  while (queue_.size() - head + size_t(block_count + off_the_top) > 1) {
    if (head == queue_.size()) return false;
    const int x = queue_[head++];
    processed_.push_back(x);
    scratch(x).mark = blocked;
    const bool under_p = get(x, under_p_node);
    bool parent_known = under_p || get(x, sibling0) < 0 || get(x, sibling1) < 0;
    int blocked_siblings = 0;
    if (!under_p) {
      for (Field side : {sibling0, sibling1}) {
        const int s = get(x, side);
        if (s < 0) continue;
        const uint8_t mark = scratch(s).mark;
        if (mark == blocked) ++blocked_siblings;
        if (mark == unblocked && !parent_known) {
          set(x, parent_of, get(s, parent_of));
          parent_known = true;
        }
      }
    }
    if (!parent_known) {
      block_count += 1 - blocked_siblings;
      ++blocked_nodes;
      continue;
    }
    scratch(x).mark = unblocked;
    const int y = get(x, parent_of);
    if (blocked_siblings > 0) {
      // The blocked runs beside x share its parent.
      for (Field side : {sibling0, sibling1}) {
        int previous = x, current = get(x, side);
        while (current >= 0 && scratch(current).mark == blocked) {
          scratch(current).mark = unblocked;
          set(current, parent_of, y);
          ++scratch(y).pertinent_children;
          --blocked_nodes;
          const int next = other_sibling(current, previous);
          previous = current;
          current = next;
        }
      }
      block_count -= blocked_siblings;
    }
    if (y < 0) {
      off_the_top = 1;
      continue;
    }
    Scratch& parent = scratch(y);
    ++parent.pertinent_children;
    if (parent.mark == unmarked) {
      parent.mark = queued;
      queue_.push_back(y);
    }
  }
  // The loop stopped at one front: a queued node, one block or the top of the tree.
  if (block_count == 1 && blocked_nodes > 1) {
    for (int x : processed_) {
      if (scratch(x).mark != blocked) continue;
      set(x, parent_of, pseudo_);
      ++scratch(pseudo_).pertinent_children;
    }
  }
  return true;
}

// ---- Templates ----

// P1, P3, P5 on a P-node below the pertinent root; returns the node now in its place (full or
// partial), or -1 when no template applies.
int PqTree::reduce_p_child(int node) {
  const Scratch s = scratch(node);
  if (s.full_count == get(node, p_child_count)) {  // P1
    scratch(node).label = full;
    return node;
  }
  if (s.partial_count == 0) {  // P3: a Q-node of [empty children, full children]
    const int q = allocate(Kind::q);
    replace_child(node, q);
    const int full_group = take_full_children(node);
    int empty_group = node;
    if (get(node, p_child_count) == 1) {
      empty_group = get(node, end0);
      remove_child(node, empty_group);
      free_node(node);
    }
    scratch(empty_group).label = empty;
    append_child(q, empty_group, end0);
    append_child(q, full_group, end1);
    scratch(q).label = partial;
    return q;
  }
  if (s.partial_count == 1) {  // P5: the partial child takes the P-node's place and its children
    const int q = s.partial[0];
    const Field full_side = full_end(q);
    remove_child(node, q);
    replace_child(node, q);
    if (s.full_count > 0) append_child(q, take_full_children(node), full_side);
    const int left = get(node, p_child_count);
    int empty_group = node;
    if (left <= 1) {
      empty_group = get(node, end0);
      if (left == 1) remove_child(node, empty_group);
      free_node(node);
    }
    if (left > 0) {
      scratch(empty_group).label = empty;
      append_child(q, empty_group, full_side == end0 ? end1 : end0);
    }
    return q;
  }
  return -1;
}

// Q1, Q2 on a Q-node below the pertinent root: its full children must run from one end, followed
// by at most one partial child.
int PqTree::reduce_q_child(int node) {
  const Scratch s = scratch(node);
  if (s.partial_count > 1) return -1;
  int start = -1;
  for (uint8_t wanted : {full, partial}) {
    for (Field end : {end0, end1})
      if (start < 0 && scratch(get(node, end)).label == wanted) start = get(node, end);
  }
  if (start < 0) return -1;
  int previous = -1, current = start, count = 0;
  while (current >= 0 && scratch(current).label == full) {
    ++count;
    const int next = other_sibling(current, previous);
    previous = current;
    current = next;
  }
  if (current < 0) {  // Q1: every child is full
    scratch(node).label = full;
    return node;
  }
  const bool ends_in_partial = scratch(current).label == partial;
  if (count != s.full_count || int(ends_in_partial) != s.partial_count) return -1;
  if (ends_in_partial) splice(current, previous);  // Q2
  scratch(node).label = partial;
  return node;
}

// P2, P4, P6 on the pertinent root when it is a P-node.
bool PqTree::reduce_p_root(int node) {
  const Scratch s = scratch(node);
  if (s.full_count == get(node, p_child_count)) return true;  // P1
  if (s.partial_count == 0) {                                 // P2
    if (s.full_count > 1) append_child(node, take_full_children(node), end1);
    return true;
  }
  if (s.partial_count > 2) return false;
  const int q = s.partial[0];
  const Field full_side = full_end(q);
  if (s.full_count > 0) append_child(q, take_full_children(node), full_side);  // P4
  if (s.partial_count == 2) {  // P6: the second partial child continues the first, full end first
    const int other = s.partial[1];
    const Field other_full = full_end(other);
    remove_child(node, other);
    const int joint = get(q, full_side), next = get(other, other_full);
    const int far = get(other, other_full == end0 ? end1 : end0);
    relink(joint, -1, next);
    relink(next, -1, joint);
    set(q, full_side, far);
    set(far, parent_of, q);
    free_node(other);
  }
  if (get(node, p_child_count) == 1) {  // only the Q-node is left: it replaces the P-node
    remove_child(node, q);
    replace_child(node, q);
    free_node(node);
  }
  return true;
}

// Q1, Q2, Q3 on the pertinent root when it is a Q-node or the pseudonode: its pertinent children
// are one run of full children with at most one partial child at each side.
bool PqTree::reduce_q_root(int node) {
  const Scratch s = scratch(node);
  if (s.partial_count > 2) return false;
  if (s.full_count == 0) {  // two adjacent partial children, full ends facing
    const int first = s.partial[0], second = s.partial[1];
    if (s.partial_count != 2 || (get(first, sibling0) != second && get(first, sibling1) != second)) return false;
    const int joint = get(first, full_end(first));
    splice(first, second);
    splice(second, joint);
    return true;
  }
  int beyond[2], last[2], count = 1;
  for (int side = 0; side < 2; ++side) {
    int previous = s.full_head, current = get(s.full_head, side == 0 ? sibling0 : sibling1);
    while (current >= 0 && scratch(current).label == full) {
      ++count;
      const int next = other_sibling(current, previous);
      previous = current;
      current = next;
    }
    beyond[side] = current;
    last[side] = previous;
  }
  int partials = 0;
  for (int side = 0; side < 2; ++side) partials += beyond[side] >= 0 && scratch(beyond[side]).label == partial;
  if (count != s.full_count || partials != s.partial_count) return false;
  for (int side = 0; side < 2; ++side)
    if (beyond[side] >= 0 && scratch(beyond[side]).label == partial) splice(beyond[side], last[side]);
  return true;
}

// Booth and Lueker's REDUCE: nodes leave the queue once all their pertinent children have, each
// goes through its template and reports to its parent; the pertinent root ends it.
bool PqTree::reduce_pertinent() {
  const int total = int(pertinent_.size());
  queue_.assign(pertinent_.begin(), pertinent_.end());
  for (int leaf : pertinent_) scratch(leaf).pertinent_leaves = 1;
  for (size_t head = 0; head < queue_.size(); ++head) {
    const int x = queue_[head];
    const int leaves_below = scratch(x).pertinent_leaves;
    const Kind kind = Kind(get(x, kind_of));
    if (leaves_below == total) {
      if (kind == Kind::leaf) return true;
      return kind == Kind::p ? reduce_p_root(x) : reduce_q_root(x);
    }
    const int y = get(x, parent_of);
    if (y < 0 || x == pseudo_)
      throw InternalError("PqTree::reduce: pertinent node " + std::to_string(x) + " has no parent");
    int result = x;
    if (kind == Kind::leaf)
      scratch(x).label = full;
    else
      result = kind == Kind::p ? reduce_p_child(x) : reduce_q_child(x);
    if (result < 0) return false;
    Scratch& parent = scratch(y);
    parent.pertinent_leaves += leaves_below;
    if (scratch(result).label == full) {
      scratch(result).full_next = parent.full_head;
      parent.full_head = result;
      ++parent.full_count;
    } else {
      if (parent.partial_count < 2) parent.partial[parent.partial_count] = result;
      ++parent.partial_count;
    }
    if (--parent.pertinent_children == 0) queue_.push_back(y);
  }
  throw InternalError("PqTree::reduce: the queue ran out before the pertinent root");
}

bool PqTree::reduce(std::span<const int> leaves) {
  for (int leaf : leaves)
    if (leaf < 0 || leaf >= leaves_)
      throw UsageError("PqTree::reduce: leaf " + std::to_string(leaf) + " is out of range for a tree of " +
                       std::to_string(leaves_) + " leaves");
  if (++generation_ == 0) {  // the counter wrapped: no scratch may look current
    for (Scratch& s : scratch_) s.generation = 0;
    generation_ = 1;
  }
  pertinent_.clear();
  for (int leaf : leaves) {
    Scratch& s = scratch(leaf);
    if (s.mark == queued) continue;
    s.mark = queued;
    pertinent_.push_back(leaf);
  }
  if (pertinent_.size() < 2) return true;
  const size_t start = mark();
  try {
    if (bubble() && reduce_pertinent()) return true;
  } catch (...) {  // a broken invariant: still hand back the tree as it was
    rollback(start);
    throw;
  }
  rollback(start);
  return false;
}

// ---- Walks ----

PqTree::Kind PqTree::kind(int node) const {
  if (node < 0 || node >= node_count() || node == pseudo_)
    throw UsageError("PqTree::kind: node " + std::to_string(node) + " is not in the tree");
  return Kind(get(node, kind_of));
}

std::vector<int> PqTree::children(int node) const {
  if (node < 0 || node >= node_count() || node == pseudo_)
    throw UsageError("PqTree::children: node " + std::to_string(node) + " is not in the tree");
  std::vector<int> out;
  for (int previous = -1, current = get(node, end0); current >= 0;) {
    out.push_back(current);
    if (current == get(node, end1)) break;
    const int next = other_sibling(current, previous);
    previous = current;
    current = next;
  }
  return out;
}

std::vector<int> PqTree::frontier() const {
  std::vector<int> out, stack, kids;
  if (root_ >= 0) stack.push_back(root_);
  while (!stack.empty()) {
    const int node = stack.back();
    stack.pop_back();
    if (node < leaves_) {
      out.push_back(node);
      continue;
    }
    kids = children(node);
    stack.insert(stack.end(), kids.rbegin(), kids.rend());
  }
  return out;
}

std::string PqTree::to_string() const {
  // Each stack entry is a node to print, or -1 - c for the closing bracket c.
  std::string out;
  std::vector<int> stack;
  if (root_ >= 0) stack.push_back(root_);
  bool first = true;
  while (!stack.empty()) {
    const int entry = stack.back();
    stack.pop_back();
    if (entry < 0) {
      out += char(-1 - entry);
      continue;
    }
    if (!first && out.back() != '(' && out.back() != '[') out += ' ';
    first = false;
    if (entry < leaves_) {
      out += std::to_string(entry);
      continue;
    }
    const bool is_p = get(entry, kind_of) == int(Kind::p);
    out += is_p ? '(' : '[';
    stack.push_back(-1 - (is_p ? ')' : ']'));
    const std::vector<int> kids = children(entry);
    stack.insert(stack.end(), kids.rbegin(), kids.rend());
  }
  return out;
}

void PqTree::check() const {
  auto fail = [](int node, const std::string& what) {
    throw InternalError("PqTree::check: node " + std::to_string(node) + " " + what);
  };
  if (leaves_ == 0) {
    if (root_ != -1) fail(root_, "is the root of a tree without leaves");
    return;
  }
  if (root_ < 0 || root_ >= node_count() || get(root_, parent_of) != -1 || get(root_, sibling0) != -1 ||
      get(root_, sibling1) != -1)
    fail(root_, "is no proper root");
  std::vector<uint8_t> seen(size_t(node_count()), 0);
  std::vector<int> stack{root_};
  int leaves_seen = 0;
  while (!stack.empty()) {
    const int node = stack.back();
    stack.pop_back();
    if (seen[size_t(node)]++) fail(node, "is reached twice");
    const Kind kind = Kind(get(node, kind_of));
    if ((node < leaves_) != (kind == Kind::leaf)) fail(node, "has the wrong kind");
    if (kind == Kind::leaf) {
      ++leaves_seen;
      continue;
    }
    int count = 0;
    for (int previous = -1, current = get(node, end0);;) {
      if (current < 0 || current >= node_count() || ++count > node_count()) fail(node, "has a broken child list");
      if (get(current, sibling0) != previous && get(current, sibling1) != previous)
        fail(current, "is not linked back to its left sibling");
      const bool is_end = current == get(node, end0) || current == get(node, end1);
      if (get(current, under_p_node) != (kind == Kind::p)) fail(current, "has the wrong parent kind flag");
      if ((kind == Kind::p || is_end) && get(current, parent_of) != node) fail(current, "has the wrong parent");
      stack.push_back(current);
      if (current == get(node, end1)) {
        if (other_sibling(current, previous) != -1) fail(current, "is the last child but has a right sibling");
        break;
      }
      const int next = other_sibling(current, previous);
      previous = current;
      current = next;
    }
    if (kind == Kind::p && (count < 2 || count != get(node, p_child_count)))
      fail(node, "is a P-node with " + std::to_string(count) + " children, counted " +
                     std::to_string(get(node, p_child_count)));
    if (kind == Kind::q && count < 3) fail(node, "is a Q-node with " + std::to_string(count) + " children");
  }
  if (leaves_seen != leaves_)
    fail(root_, "holds " + std::to_string(leaves_seen) + " of " + std::to_string(leaves_) + " leaves");
}

}  // namespace edb::memplan
