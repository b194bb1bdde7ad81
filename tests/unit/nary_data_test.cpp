// The childsum and dagrnn data formats: generated data writes and parses back unchanged, the
// generators keep their laws (1-5 children, 1-3 distinct earlier predecessors) and seeds, and
// malformed lines are errors naming file, line, column and what was expected.
#include <gtest/gtest.h>

#include <sstream>

#include <edbatch/errors.h>

#include "samples/data/data.h"

namespace edb::samples {
namespace {

template <typename T, typename Write>
std::string write_all(const std::vector<T>& items, Write write) {
  std::ostringstream out;
  for (const T& item : items) write(out, item);
  return out.str();
}

std::string parse_error(const std::string& text, bool dag) {
  std::istringstream in(text);
  try {
    if (dag) parse_dags(in, "f.txt");
    else parse_nary_trees(in, "f.txt");
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(NaryTrees, GeneratedTreesRoundTripAndKeepTheirLaw) {
  const std::vector<NaryTree> trees = generate_nary_trees(200, 5);
  std::istringstream in(write_all(trees, write_nary_tree));
  EXPECT_EQ(parse_nary_trees(in, "generated"), trees);
  int counts[NaryTree::kMaxChildren + 1] = {};
  for (const NaryTree& tree : trees)
    for (const NaryNode& node : tree.nodes) {
      ASSERT_LE(node.children.size(), size_t(NaryTree::kMaxChildren));
      ++counts[node.children.size()];
    }
  for (int c = 0; c <= NaryTree::kMaxChildren; ++c) EXPECT_GT(counts[c], 0) << c << " children";
  EXPECT_EQ(generate_nary_trees(20, 5), generate_nary_trees(20, 5));
  EXPECT_NE(generate_nary_trees(20, 5), generate_nary_trees(20, 6));
}

TEST(NaryTrees, ParsesAnyNumberOfSubtreesUpToFive) {
  std::istringstream in("(3 (2 a) (1 (2 b) (4 c) (0 d)))\n\n(1 (2 (3 x)))\n");
  const std::vector<NaryTree> trees = parse_nary_trees(in, "t");
  ASSERT_EQ(trees.size(), 2u);
  ASSERT_EQ(trees[0].nodes.size(), 6u);
  EXPECT_EQ(trees[0].nodes.back().children, (std::vector<int>{0, 4}));
  EXPECT_EQ(trees[0].nodes[4].children, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(trees[1].nodes.size(), 3u);
}

TEST(NaryTrees, MalformedLinesNameWhereAndWhat) {
  EXPECT_EQ(parse_error("(3 (2 a) (1 b)\n", false), "f.txt:1:15: expected '(' starting another subtree or ')' closing the node, found end of line");
  EXPECT_EQ(parse_error("(7 a)\n", false), "f.txt:1:2: expected label 0-4, found '7'");
  EXPECT_NE(parse_error("(1 (2 a) (2 b) (2 c) (2 d) (2 e) (2 f))\n", false).find("at most 5 children"), std::string::npos);
  EXPECT_EQ(parse_error("(2 a) x\n", false), "f.txt:1:7: expected end of line after tree, found 'x'");
}

TEST(Dags, GeneratedDagsRoundTripAndKeepTheirLaw) {
  const std::vector<Dag> dags = generate_dags(200, 5);
  std::istringstream in(write_all(dags, write_dag));
  EXPECT_EQ(parse_dags(in, "generated"), dags);
  int counts[Dag::kMaxPredecessors + 1] = {};
  for (const Dag& dag : dags)
    for (size_t n = 0; n < dag.nodes.size(); ++n) {
      const auto& p = dag.nodes[n].predecessors;
      ASSERT_LE(p.size(), size_t(Dag::kMaxPredecessors));
      for (int q : p) ASSERT_LT(q, int(n));
      ++counts[p.size()];
    }
  for (int c = 0; c <= Dag::kMaxPredecessors; ++c) EXPECT_GT(counts[c], 0) << c << " predecessors";
  EXPECT_EQ(generate_dags(20, 5), generate_dags(20, 5));
}

TEST(Dags, MalformedLinesNameWhereAndWhat) {
  EXPECT_EQ(parse_error("a|1 b|2<1>\n", true), "f.txt:1:9: expected the index of an earlier token (0-0), found '1'");
  EXPECT_EQ(parse_error("a|1 b|2<0,0>\n", true), "f.txt:1:11: expected a predecessor not listed before, found '0'");
  EXPECT_EQ(parse_error("a|9\n", true), "f.txt:1:3: expected label 0-4, found '9'");
  EXPECT_EQ(parse_error("a 1\n", true), "f.txt:1:2: expected '|' after the word, found ' '");
  EXPECT_NE(parse_error("a|1 b|1 c|1 d|1 e|2<0,1,2,3>\n", true).find("at most 3 predecessors"), std::string::npos);
}

}  // namespace
}  // namespace edb::samples
