// The PQ tree: on every universe of up to 7 leaves the orders it represents are exactly the
// permutations that keep every accepted constraint consecutive, and a constraint is rejected
// exactly when none does; rollback restores the tree exactly; a failed reduction changes nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "memplan/pq_tree.h"
#include "tests/support/test_support.h"

namespace edb::memplan {
namespace {

using Order = std::vector<int>;
using testing::usage_error;

// Every order the subtree at `node` represents: a P-node's children in every order, a Q-node's
// as listed or reversed, and each child in each of its own orders.
std::vector<Order> orders(const PqTree& tree, int node) {
  if (tree.kind(node) == PqTree::Kind::leaf) return {{node}};
  const std::vector<int> kids = tree.children(node);
  std::vector<std::vector<Order>> child_orders;
  for (int child : kids) child_orders.push_back(orders(tree, child));
  std::vector<int> index(kids.size());
  std::iota(index.begin(), index.end(), 0);
  std::vector<std::vector<int>> arrangements;
  if (tree.kind(node) == PqTree::Kind::p) {
    do arrangements.push_back(index);
    while (std::next_permutation(index.begin(), index.end()));
  } else {
    arrangements.push_back(index);
    arrangements.emplace_back(index.rbegin(), index.rend());
  }
  std::vector<Order> out;
  for (const std::vector<int>& arrangement : arrangements) {
    std::vector<Order> prefixes{{}};
    for (int i : arrangement) {
      std::vector<Order> longer;
      for (const Order& prefix : prefixes)
        for (const Order& tail : child_orders[size_t(i)]) {
          Order joined = prefix;
          joined.insert(joined.end(), tail.begin(), tail.end());
          longer.push_back(std::move(joined));
        }
      prefixes = std::move(longer);
    }
    out.insert(out.end(), prefixes.begin(), prefixes.end());
  }
  return out;
}

// All orders of the tree, sorted; duplicates kept so that a test can see them.
std::vector<Order> all_orders(const PqTree& tree) {
  std::vector<Order> out = tree.root() < 0 ? std::vector<Order>{{}} : orders(tree, tree.root());
  std::sort(out.begin(), out.end());
  return out;
}

bool consecutive(const Order& order, const std::vector<int>& leaves) {
  std::vector<int> position(order.size());
  for (size_t i = 0; i < order.size(); ++i) position[size_t(order[i])] = int(i);
  const std::set<int> distinct(leaves.begin(), leaves.end());
  if (distinct.size() < 2) return true;
  int low = int(order.size()), high = -1;
  for (int leaf : distinct) {
    low = std::min(low, position[size_t(leaf)]);
    high = std::max(high, position[size_t(leaf)]);
  }
  return high - low + 1 == int(distinct.size());
}

std::vector<Order> all_permutations(int n) {
  Order order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::vector<Order> out;
  do out.push_back(order);
  while (std::next_permutation(order.begin(), order.end()));
  return out;
}

// A constraint: a run of a hidden order (so many are accepted and the tree grows Q-nodes), or a
// random set, sometimes with a repeated leaf.
std::vector<int> random_constraint(std::mt19937& rng, const Order& hidden) {
  const int n = int(hidden.size());
  std::vector<int> leaves;
  if (n == 0) return leaves;
  if (rng() % 2 == 0) {
    const int size = 1 + int(rng() % uint32_t(n));
    const int start = int(rng() % uint32_t(n - size + 1));
    leaves.assign(hidden.begin() + start, hidden.begin() + start + size);
  } else {
    for (int leaf = 0; leaf < n; ++leaf)
      if (rng() % 2 == 0) leaves.push_back(leaf);
    if (!leaves.empty() && rng() % 4 == 0) leaves.push_back(leaves.front());
  }
  std::shuffle(leaves.begin(), leaves.end(), rng);
  return leaves;
}

std::string text(const std::vector<int>& leaves) {
  std::string out;
  for (int leaf : leaves) out += std::to_string(leaf) + " ";
  return out;
}

// Reduces random constraints one by one, checking after each that the tree represents exactly the
// permutations that satisfy every accepted one; now and then rolls back to an earlier step and
// checks that the tree and its orders are back too.
void check_against_brute_force(int n, int seeds, int steps) {
  const std::vector<Order> every = all_permutations(n);
  for (int seed = 0; seed < seeds; ++seed) {
    std::mt19937 rng(uint32_t(1000 * n + seed));
    Order hidden = every.front();
    std::shuffle(hidden.begin(), hidden.end(), rng);
    PqTree tree(n);
    std::vector<Order> allowed = every;
    ASSERT_EQ(all_orders(tree), allowed) << "n " << n;
    struct Step {
      size_t mark;
      std::string tree;
      std::vector<Order> allowed;
    };
    std::vector<Step> history{{tree.mark(), tree.to_string(), allowed}};
    for (int step = 0; step < steps; ++step) {
      SCOPED_TRACE("n " + std::to_string(n) + " seed " + std::to_string(seed) + " step " + std::to_string(step));
      if (history.size() > 1 && rng() % 6 == 0) {
        history.resize(1 + rng() % history.size());
        tree.rollback(history.back().mark);
        ASSERT_EQ(tree.to_string(), history.back().tree);
        allowed = history.back().allowed;
        ASSERT_EQ(all_orders(tree), allowed);
        continue;
      }
      const std::vector<int> leaves = random_constraint(rng, hidden);
      std::vector<Order> expected;
      for (const Order& order : allowed)
        if (consecutive(order, leaves)) expected.push_back(order);
      const std::string before = tree.to_string();
      const size_t mark = tree.mark();
      const bool accepted = tree.reduce(leaves);
      SCOPED_TRACE("constraint " + text(leaves) + " tree before " + before + " after " + tree.to_string());
      ASSERT_EQ(accepted, !expected.empty());
      if (accepted) {
        allowed = std::move(expected);
      } else {
        ASSERT_EQ(tree.to_string(), before);
        ASSERT_EQ(tree.mark(), mark);
      }
      ASSERT_NO_THROW(tree.check());
      ASSERT_EQ(all_orders(tree), allowed);
      ASSERT_TRUE(std::binary_search(allowed.begin(), allowed.end(), tree.frontier()));
      history.push_back({tree.mark(), tree.to_string(), allowed});
    }
  }
}

TEST(PqTree, MatchesBruteForceOnSmallUniverses) {
  for (int n = 0; n <= 5; ++n) check_against_brute_force(n, 300, 12);
  check_against_brute_force(6, 200, 14);
  check_against_brute_force(7, 80, 16);
  check_against_brute_force(8, 4, 16);
}

TEST(PqTree, TemplatesBuildTheExpectedTrees) {
  PqTree tree(4);
  EXPECT_EQ(tree.to_string(), "(0 1 2 3)");
  ASSERT_TRUE(tree.reduce(std::vector<int>{1, 0}));
  EXPECT_EQ(tree.to_string(), "(2 3 (0 1))");
  ASSERT_TRUE(tree.reduce(std::vector<int>{1, 2}));
  EXPECT_EQ(tree.to_string(), "(3 [0 1 2])");
  ASSERT_TRUE(tree.reduce(std::vector<int>{3, 0}));
  EXPECT_EQ(tree.to_string(), "[3 0 1 2]");
  EXPECT_EQ(tree.kind(tree.root()), PqTree::Kind::q);
  EXPECT_EQ(tree.children(tree.root()), (std::vector<int>{3, 0, 1, 2}));
  EXPECT_EQ(tree.frontier(), (std::vector<int>{3, 0, 1, 2}));
  // Already implied: nothing changes.
  ASSERT_TRUE(tree.reduce(std::vector<int>{0, 1, 2}));
  EXPECT_EQ(tree.to_string(), "[3 0 1 2]");
}

TEST(PqTree, InnerRunOfAQNodeUsesThePseudonode) {
  // Overlapping triples make one Q-node [0 1 2 3 4 5 6]; the inner runs 2..4 and 3..4 reach no end
  // child, so their parent is known only through the pseudonode.
  PqTree tree(7);
  for (int i = 0; i + 2 < 7; ++i) ASSERT_TRUE(tree.reduce(std::vector<int>{i, i + 1, i + 2}));
  EXPECT_EQ(tree.children(tree.root()).size(), 7u);
  ASSERT_TRUE(tree.reduce(std::vector<int>{2, 3, 4}));
  ASSERT_TRUE(tree.reduce(std::vector<int>{3, 4}));
  ASSERT_FALSE(tree.reduce(std::vector<int>{2, 4}));
  ASSERT_FALSE(tree.reduce(std::vector<int>{1, 3, 5}));
  tree.check();
  const Order order = tree.frontier();
  EXPECT_TRUE(order == (Order{0, 1, 2, 3, 4, 5, 6}) || order == (Order{6, 5, 4, 3, 2, 1, 0})) << tree.to_string();
}

TEST(PqTree, FailedReductionLeavesTheTreeUnchanged) {
  PqTree tree(6);
  ASSERT_TRUE(tree.reduce(std::vector<int>{0, 1}));
  ASSERT_TRUE(tree.reduce(std::vector<int>{1, 2}));
  ASSERT_TRUE(tree.reduce(std::vector<int>{4, 5}));
  const std::string before = tree.to_string();
  const size_t mark = tree.mark();
  // 0 and 2 sit at the two ends of [0 1 2]; the second set would need 1 beside 4 and 5 and 3.
  for (const std::vector<int>& bad : {std::vector<int>{0, 2}, std::vector<int>{1, 4, 5}, std::vector<int>{0, 2, 3}}) {
    EXPECT_FALSE(tree.reduce(bad)) << text(bad);
    EXPECT_EQ(tree.to_string(), before) << text(bad);
    EXPECT_EQ(tree.mark(), mark) << text(bad);
    tree.check();
  }
  // A P-node below the pertinent root with two partial children: 2 and 3 can meet inside
  // ([0 1 2] [3 4 5]) but 6 cannot join them there.
  PqTree two(8);
  for (const std::vector<int>& fits : {std::vector<int>{0, 1}, std::vector<int>{1, 2}, std::vector<int>{3, 4},
                                       std::vector<int>{4, 5}, std::vector<int>{0, 1, 2, 3, 4, 5}})
    ASSERT_TRUE(two.reduce(fits));
  EXPECT_EQ(two.to_string(), "(6 7 ([3 4 5] [0 1 2]))");
  EXPECT_FALSE(two.reduce(std::vector<int>{2, 3, 6}));
  EXPECT_EQ(two.to_string(), "(6 7 ([3 4 5] [0 1 2]))");
  // The tree still takes constraints that fit.
  EXPECT_TRUE(tree.reduce(std::vector<int>{2, 3}));
  EXPECT_TRUE(tree.reduce(std::vector<int>{3, 4}));
  EXPECT_EQ(tree.to_string(), "[0 1 2 3 4 5]");
}

// Random interval constraints of a hidden order on a larger universe, with random sets mixed in.
struct Workload {
  Order hidden;
  std::vector<std::vector<int>> constraints;
};

Workload make_workload(int n, int count, uint32_t seed) {
  std::mt19937 rng(seed);
  Workload w;
  w.hidden.resize(size_t(n));
  std::iota(w.hidden.begin(), w.hidden.end(), 0);
  std::shuffle(w.hidden.begin(), w.hidden.end(), rng);
  for (int i = 0; i < count; ++i) {
    const int size = 2 + int(rng() % 15);
    std::vector<int> leaves;
    if (rng() % 5 != 0) {
      const int start = int(rng() % uint32_t(n - size + 1));
      leaves.assign(w.hidden.begin() + start, w.hidden.begin() + start + size);
    } else {
      for (int k = 0; k < size; ++k) leaves.push_back(int(rng() % uint32_t(n)));
    }
    w.constraints.push_back(std::move(leaves));
  }
  return w;
}

TEST(PqTree, RollbackRestoresEveryEarlierTree) {
  const Workload w = make_workload(60, 80, 7);
  PqTree tree(60);
  std::vector<size_t> marks{tree.mark()};
  std::vector<std::string> trees{tree.to_string()};
  std::vector<bool> results;
  for (const std::vector<int>& leaves : w.constraints) {
    results.push_back(tree.reduce(leaves));
    tree.check();
    marks.push_back(tree.mark());
    trees.push_back(tree.to_string());
  }
  // Back through every mark, newest first; the tree is the one recorded there.
  for (size_t i = marks.size(); i-- > 0;) {
    tree.rollback(marks[i]);
    ASSERT_EQ(tree.to_string(), trees[i]) << "mark " << i;
    tree.check();
  }
  EXPECT_EQ(tree.mark(), 0u);
  // Replaying from a middle mark gives the same trees and the same answers.
  for (size_t i = 0; i < 40; ++i) ASSERT_EQ(tree.reduce(w.constraints[i]), results[i]);
  const size_t middle = tree.mark();
  ASSERT_EQ(tree.to_string(), trees[40]);
  for (size_t i = 40; i < w.constraints.size(); ++i) ASSERT_EQ(tree.reduce(w.constraints[i]), results[i]);
  ASSERT_EQ(tree.to_string(), trees.back());
  tree.rollback(middle);
  ASSERT_EQ(tree.to_string(), trees[40]);
  for (size_t i = 40; i < w.constraints.size(); ++i) {
    ASSERT_EQ(tree.reduce(w.constraints[i]), results[i]);
    ASSERT_EQ(tree.to_string(), trees[i + 1]);
  }
  tree.check();
}

TEST(PqTree, LargeRandomWorkloadAcceptsEveryRunOfTheHiddenOrder) {
  // Random sets are tried and rolled back, so the hidden order stays allowed and every run of it
  // must be accepted; a rejected set must leave the tree as it was.
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    const int n = 500;
    const Workload w = make_workload(n, 600, seed);
    PqTree tree(n);
    std::vector<std::vector<int>> accepted;
    int tried = 0, rejected = 0;
    for (const std::vector<int>& leaves : w.constraints) {
      if (consecutive(w.hidden, leaves)) {
        ASSERT_TRUE(tree.reduce(leaves)) << "seed " << seed << " constraint " << text(leaves);
        accepted.push_back(leaves);
      } else {
        const std::string before = tree.to_string();
        const size_t mark = tree.mark();
        ++tried;
        if (tree.reduce(leaves)) {
          tree.check();
          ASSERT_TRUE(consecutive(tree.frontier(), leaves)) << text(leaves);
        } else {
          ++rejected;
        }
        tree.rollback(mark);
        ASSERT_EQ(tree.to_string(), before);
      }
      tree.check();
    }
    EXPECT_GT(rejected, 0) << "seed " << seed;
    EXPECT_LT(rejected, tried) << "seed " << seed;
    const Order order = tree.frontier();
    for (const std::vector<int>& leaves : accepted) ASSERT_TRUE(consecutive(order, leaves)) << text(leaves);
  }
}

TEST(PqTree, ForgetMarksKeepsTheTree) {
  PqTree tree(5);
  ASSERT_TRUE(tree.reduce(std::vector<int>{0, 1, 2}));
  const std::string now = tree.to_string();
  tree.forget_marks();
  EXPECT_EQ(tree.mark(), 0u);
  EXPECT_EQ(tree.to_string(), now);
  ASSERT_TRUE(tree.reduce(std::vector<int>{2, 3}));
  tree.rollback(0);
  EXPECT_EQ(tree.to_string(), now);
}

TEST(PqTree, UsageErrorsNameTheFunction) {
  EXPECT_EQ(usage_error([] { PqTree tree(-1); }).rfind("PqTree: ", 0), 0u);
  PqTree tree(4);
  EXPECT_EQ(usage_error([&] { tree.reduce(std::vector<int>{0, 4}); }).rfind("PqTree::reduce: leaf 4", 0), 0u);
  EXPECT_EQ(usage_error([&] { tree.reduce(std::vector<int>{-1}); }).rfind("PqTree::reduce: leaf -1", 0), 0u);
  EXPECT_EQ(usage_error([&] { tree.rollback(tree.mark() + 1); }).rfind("PqTree::rollback: ", 0), 0u);
  EXPECT_EQ(usage_error([&] { tree.children(-2); }).rfind("PqTree::children: ", 0), 0u);
  EXPECT_EQ(usage_error([&] { tree.kind(1000); }).rfind("PqTree::kind: ", 0), 0u);
  EXPECT_EQ(tree.to_string(), "(0 1 2 3)");
}

TEST(PqTree, TinyTrees) {
  PqTree none(0);
  EXPECT_EQ(none.root(), -1);
  EXPECT_TRUE(none.frontier().empty());
  EXPECT_TRUE(none.reduce(std::vector<int>{}));
  none.check();
  PqTree one(1);
  EXPECT_EQ(one.root(), 0);
  EXPECT_TRUE(one.reduce(std::vector<int>{0, 0}));
  EXPECT_EQ(one.frontier(), (Order{0}));
  one.check();
}

}  // namespace
}  // namespace edb::memplan
