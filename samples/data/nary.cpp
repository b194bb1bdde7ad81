// The childsum and dagrnn formats: n-ary bracket trees "(3 (2 w1) (1 (2 w2) (4 w3) (0 w4)))" and
// DAG lines "w1|2 w2|0<0> w3|4<0,1>": parse, check, write. Errors name file, line and column.
#include <algorithm>
#include <fstream>
#include <ostream>

#include <edbatch/errors.h>

#include "samples/data/data.h"

namespace edb::samples {

namespace {

constexpr std::string_view kTreeStops = "()";
constexpr std::string_view kDagStops = "|<>,";

// A cursor over one line that reports errors in the shared "NAME:LINE:COL: expected ..." form.
class LineCursor {
 public:
  LineCursor(std::string_view line, const std::string& name, int line_number, std::string_view stops)
      : line_(line), name_(name), line_number_(line_number), stops_(stops) {}

  bool at(char c) const { return pos_ < line_.size() && line_[pos_] == c; }
  bool at_end() const { return pos_ >= line_.size(); }
  void skip_spaces() {
    while (at(' ') || at('\t')) ++pos_;
  }
  void expect(char c, std::string_view what) {
    if (!at(c)) fail(what);
    ++pos_;
  }
  // A label 0-4 standing alone (followed by a space, a stop or the end).
  int label() {
    const size_t next = pos_ + 1;
    const bool alone = next >= line_.size() || line_[next] == ' ' || line_[next] == '\t' ||
                       stops_.find(line_[next]) != std::string_view::npos;
    if (at_end() || line_[pos_] < '0' || line_[pos_] > '4' || !alone) fail("label 0-4");
    return line_[pos_++] - '0';
  }
  // A run of characters up to a space, tab, carriage return or stop; empty is an error.
  std::string word(std::string_view what) {
    const size_t start = pos_;
    while (!at_end() && !at(' ') && !at('\t') && !at('\r') && stops_.find(line_[pos_]) == std::string_view::npos) ++pos_;
    if (pos_ == start) fail(what);
    return std::string(line_.substr(start, pos_ - start));
  }
  int number(std::string_view what) {
    if (at_end() || line_[pos_] < '0' || line_[pos_] > '9') fail(what);
    int64_t value = 0;
    while (!at_end() && line_[pos_] >= '0' && line_[pos_] <= '9') {
      value = value * 10 + (line_[pos_++] - '0');
      if (value > 1'000'000'000) fail(what);
    }
    return int(value);
  }
  size_t position() const { return pos_; }
  void set_position(size_t pos) { pos_ = pos; }
  [[noreturn]] void fail(std::string_view expected) const {
    detail::throw_parse_error(name_, line_number_, static_cast<int>(pos_) + 1, expected,
                              detail::describe_at(line_, pos_, stops_));
  }

 private:
  std::string_view line_;
  const std::string& name_;
  int line_number_;
  std::string_view stops_;
  size_t pos_ = 0;
};

// Iterative, so a deeply nested line cannot overflow the stack.
NaryTree parse_nary_line(std::string_view line, const std::string& name, int line_number) {
  LineCursor cursor(line, name, line_number, kTreeStops);
  struct Open {
    int label;
    std::vector<int> children;
  };
  NaryTree tree;
  std::vector<Open> open;
  cursor.skip_spaces();
  cursor.expect('(', "'(' starting a tree");
  for (;;) {
    const int label = cursor.label();
    if (!cursor.at(' ') && !cursor.at('\t')) cursor.fail("' ' after label");
    cursor.skip_spaces();
    if (cursor.at('(')) {
      cursor.expect('(', "'('");
      open.push_back({label, {}});
      continue;
    }
    NaryNode leaf;
    leaf.label = label;
    leaf.word = cursor.word("word or '('");
    cursor.skip_spaces();
    cursor.expect(')', "')' after word");
    tree.nodes.push_back(std::move(leaf));
    int done = int(tree.nodes.size()) - 1;
    for (;;) {
      cursor.skip_spaces();
      if (open.empty()) {
        if (!cursor.at_end()) cursor.fail("end of line after tree");
        return tree;
      }
      Open& parent = open.back();
      parent.children.push_back(done);
      if (cursor.at('(')) {
        if (int(parent.children.size()) == NaryTree::kMaxChildren)
          cursor.fail("')': a node has at most " + std::to_string(NaryTree::kMaxChildren) + " children");
        cursor.expect('(', "'('");
        break;
      }
      cursor.expect(')', "'(' starting another subtree or ')' closing the node");
      NaryNode node;
      node.label = parent.label;
      node.children = std::move(parent.children);
      open.pop_back();
      tree.nodes.push_back(std::move(node));
      done = int(tree.nodes.size()) - 1;
    }
  }
}

void check_nary(const NaryTree& tree, const char* function) {
  auto fail = [&](size_t index, const std::string& what) {
    throw UsageError(std::string("edb::samples::") + function + "(): node " + std::to_string(index) + " " + what);
  };
  if (tree.nodes.empty()) throw UsageError(std::string("edb::samples::") + function + "(): expected a tree with nodes, found none");
  for (size_t i = 0; i < tree.nodes.size(); ++i) {
    const NaryNode& node = tree.nodes[i];
    if (node.label < 0 || node.label > 4) fail(i, "has label " + std::to_string(node.label) + ", expected 0-4");
    if (node.is_leaf()) {
      if (node.word.empty() || node.word.find_first_of(" \t\r\n()") != std::string::npos)
        fail(i, "has word '" + node.word + "', expected a non-empty word without spaces or parentheses");
      continue;
    }
    if (!node.word.empty()) fail(i, "has children and a word; only leaves carry words");
    if (int(node.children.size()) > NaryTree::kMaxChildren)
      fail(i, "has " + std::to_string(node.children.size()) + " children, expected at most " +
                  std::to_string(NaryTree::kMaxChildren));
    for (int c : node.children)
      if (c < 0 || c >= int(i)) fail(i, "expected its children before it in post-order");
  }
}

void append_nary(std::string& text, const NaryTree& tree, int index) {
  const NaryNode& node = tree.nodes[size_t(index)];
  text += '(';
  text += char('0' + node.label);
  text += ' ';
  if (node.is_leaf()) {
    text += node.word;
  } else {
    for (size_t c = 0; c < node.children.size(); ++c) {
      if (c) text += ' ';
      append_nary(text, tree, node.children[c]);
    }
  }
  text += ')';
}

Dag parse_dag_line(std::string_view line, const std::string& name, int line_number) {
  LineCursor cursor(line, name, line_number, kDagStops);
  Dag dag;
  for (;;) {
    DagNode node;
    node.word = cursor.word("a word");
    cursor.expect('|', "'|' after the word");
    node.label = cursor.label();
    if (cursor.at('<')) {
      cursor.expect('<', "'<'");
      for (;;) {
        const size_t at = cursor.position();
        const int p = cursor.number("a predecessor index");
        if (p >= int(dag.nodes.size())) {
          cursor.set_position(at);
          cursor.fail("the index of an earlier token (0-" + std::to_string(int(dag.nodes.size()) - 1) + ")");
        }
        if (std::find(node.predecessors.begin(), node.predecessors.end(), p) != node.predecessors.end()) {
          cursor.set_position(at);
          cursor.fail("a predecessor not listed before");
        }
        node.predecessors.push_back(p);
        if (cursor.at(',')) {
          if (int(node.predecessors.size()) == Dag::kMaxPredecessors)
            cursor.fail("'>': a node has at most " + std::to_string(Dag::kMaxPredecessors) + " predecessors");
          cursor.expect(',', "','");
          continue;
        }
        cursor.expect('>', "',' or '>' after a predecessor");
        break;
      }
    }
    dag.nodes.push_back(std::move(node));
    if (cursor.at_end()) return dag;
    cursor.expect(' ', "' ' between tokens or end of line");
  }
}

void check_dag(const Dag& dag, const char* function) {
  auto fail = [&](size_t index, const std::string& what) {
    throw UsageError(std::string("edb::samples::") + function + "(): node " + std::to_string(index) + " " + what);
  };
  if (dag.nodes.empty()) throw UsageError(std::string("edb::samples::") + function + "(): expected a DAG with nodes, found none");
  for (size_t i = 0; i < dag.nodes.size(); ++i) {
    const DagNode& node = dag.nodes[i];
    if (node.label < 0 || node.label > 4) fail(i, "has label " + std::to_string(node.label) + ", expected 0-4");
    if (node.word.empty() || node.word.find_first_of(std::string(" \t\r\n") + std::string(kDagStops)) != std::string::npos)
      fail(i, "has word '" + node.word + "', expected a non-empty word without spaces or |<>,");
    if (int(node.predecessors.size()) > Dag::kMaxPredecessors)
      fail(i, "has " + std::to_string(node.predecessors.size()) + " predecessors, expected at most " +
                  std::to_string(Dag::kMaxPredecessors));
    for (size_t k = 0; k < node.predecessors.size(); ++k) {
      const int p = node.predecessors[k];
      if (p < 0 || p >= int(i)) fail(i, "expected its predecessors before it");
      if (std::find(node.predecessors.begin(), node.predecessors.begin() + long(k), p) != node.predecessors.begin() + long(k))
        fail(i, "lists predecessor " + std::to_string(p) + " twice");
    }
  }
}

}  // namespace

std::vector<NaryTree> parse_nary_trees(std::istream& in, const std::string& name) {
  std::vector<NaryTree> trees;
  detail::for_each_line(in, [&](std::string_view line, int line_number) {
    trees.push_back(parse_nary_line(line, name, line_number));
  });
  return trees;
}

std::vector<NaryTree> read_nary_trees(const std::string& path) {
  std::ifstream file;
  detail::open_or_throw(file, path, "read_nary_trees");
  return parse_nary_trees(file, path);
}

void write_nary_tree(std::ostream& out, const NaryTree& tree) {
  check_nary(tree, "write_nary_tree");
  std::string text;
  append_nary(text, tree, int(tree.nodes.size()) - 1);
  text += '\n';
  out << text;
}

std::vector<Dag> parse_dags(std::istream& in, const std::string& name) {
  std::vector<Dag> dags;
  detail::for_each_line(in, [&](std::string_view line, int line_number) {
    dags.push_back(parse_dag_line(line, name, line_number));
  });
  return dags;
}

std::vector<Dag> read_dags(const std::string& path) {
  std::ifstream file;
  detail::open_or_throw(file, path, "read_dags");
  return parse_dags(file, path);
}

void write_dag(std::ostream& out, const Dag& dag) {
  check_dag(dag, "write_dag");
  std::string text;
  for (size_t i = 0; i < dag.nodes.size(); ++i) {
    const DagNode& node = dag.nodes[i];
    if (i) text += ' ';
    text += node.word + '|' + char('0' + node.label);
    if (!node.predecessors.empty()) {
      text += '<';
      for (size_t k = 0; k < node.predecessors.size(); ++k) text += (k ? "," : "") + std::to_string(node.predecessors[k]);
      text += '>';
    }
  }
  text += '\n';
  out << text;
}

}  // namespace edb::samples
