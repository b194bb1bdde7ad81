// PQ tree (Booth and Lueker, 1976): every order of the leaves 0..n-1 that keeps each accepted
// leaf set consecutive, with an undo log for rollback. The planner feeds it constraints C1 and C2
// of docs/design.md and walks the result; lining up corresponding subsets (C3) is left to that pass.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace edb::memplan {

// Nodes are ints: the leaves are 0..leaves()-1, inner nodes have larger ids, which a reduction or
// a rollback may free and reuse (walk from root() again after either). A P-node's children may
// come in any order, a Q-node's only as listed or reversed; the tree's orders are all the
// frontiers those choices give.
class PqTree {
 public:
  enum class Kind : uint8_t { leaf, p, q };

  // One P-node over all the leaves: every order is allowed. Throws edb::UsageError if leaves < 0.
  explicit PqTree(int leaves);
  // Starts over as one P-node over `leaves` leaves with an empty undo log, keeping the arrays'
  // memory (a planner that builds a tree per trace then touches no fresh pages).
  void reset(int leaves);

  int leaves() const { return leaves_; }

  // Keeps only the orders in which `leaves` are consecutive (Booth and Lueker's REDUCE: bubble up
  // to the pertinent subtree, then the templates L1, P1-P6, Q1-Q3 bottom-up). Returns false and
  // leaves the tree exactly as it was when no order the tree allows has them consecutive.
  // Duplicates are ignored; fewer than two distinct leaves always succeed. Time grows with the
  // pertinent subtree (the smallest subtree holding all of `leaves`), not with the whole tree;
  // a rejected set also pays for undoing what it changed. Throws edb::UsageError for a leaf
  // outside 0..leaves()-1.
  bool reduce(std::span<const int> leaves);

  // A position in the undo log; rollback(mark) restores the tree exactly as it was then, undoing
  // every change since, without copying the tree. Marks taken after the one rolled back to, and
  // all marks after forget_marks(), are void.
  size_t mark() const { return undo_.size(); }
  void rollback(size_t mark);
  // Drops the undo log (it grows with every change, a few entries per pertinent node), so a
  // long-lived tree does not keep its whole history.
  void forget_marks() { undo_.clear(); }

  // One of the allowed orders: the leaves left to right as the tree lists them.
  std::vector<int> frontier() const;

  // Walking the tree: the root (-1 when there are no leaves), a node's kind, its children in the
  // listed order (empty for a leaf).
  int root() const { return root_; }
  Kind kind(int node) const;
  std::vector<int> children(int node) const;

  // The tree as text: a P-node is "(...)", a Q-node "[...]", a leaf its number, children in the
  // listed order; two trees print the same exactly when their structure and orders match.
  std::string to_string() const;

  // Checks the links, parents, child counts (a P-node has at least two children, a Q-node at least
  // three) and that every leaf appears once. Throws edb::InternalError.
  void check() const;

 private:
  // Per-node fields, stored flat so that one undo entry (slot, old value) covers any of them.
  // A node's siblings are an unordered pair, so reversing a Q-node is swapping its two ends. Only
  // the children of P-nodes and the end children of Q-nodes keep a true parent; the parent of an
  // inner Q-node child is stale and found through its siblings when needed (Booth and Lueker).
  enum Field : int { parent_of, sibling0, sibling1, end0, end1, p_child_count, under_p_node, kind_of, field_count };
  struct Undo {
    int32_t slot;  // node * field_count + field, or one of the negative slots in pq_tree.cpp
    int32_t old;
  };
  // What one reduction knows about a node; stale (and reset on first use) once `generation`
  // differs from the tree's, so nothing has to be cleared after a reduction.
  struct Scratch {
    uint32_t generation = 0;
    uint8_t mark = 0;   // bubble-up: unmarked, queued, blocked, unblocked
    uint8_t label = 0;  // empty, full, partial
    int pertinent_children = 0;
    int pertinent_leaves = 0;
    int full_head = -1, full_count = 0, full_next = -1;  // the full children, linked through full_next
    int partial[2] = {-1, -1};
    int partial_count = 0;
  };

  int get(int node, Field field) const { return fields_[size_t(node) * field_count + field]; }
  void set(int node, Field field, int value);
  void set_root(int node);
  int node_count() const { return int(fields_.size() / field_count); }
  Scratch& scratch(int node);
  int other_sibling(int node, int sibling) const;

  int allocate(Kind kind);
  void free_node(int node);
  void relink(int node, int from, int to);
  void append_child(int parent, int child, Field end);
  void unlink_child(int parent, int child);
  void remove_child(int parent, int child);
  void replace_child(int child, int replacement);
  int take_full_children(int node);
  Field full_end(int q);
  void splice(int partial_child, int toward);

  bool bubble();
  bool reduce_pertinent();
  int reduce_p_child(int node);
  int reduce_q_child(int node);
  bool reduce_p_root(int node);
  bool reduce_q_root(int node);

  int leaves_ = 0;
  int root_ = -1;
  int free_head_ = -1;  // freed nodes, linked through parent_of
  int pseudo_ = -1;     // the pseudonode: a stand-in parent for blocked inner Q-node children
  std::vector<int> fields_;
  std::vector<Undo> undo_;
  std::vector<Scratch> scratch_;
  uint32_t generation_ = 0;
  std::vector<int> pertinent_, queue_, processed_;
};

}  // namespace edb::memplan
