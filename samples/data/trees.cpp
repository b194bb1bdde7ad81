// SST bracket trees "(3 (2 w17) (4 (2 w5) (1 w902)))": parse, write, depth; also the error
// helpers that all three readers share (detail:: in data.h).
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ostream>

#include <edbatch/errors.h>

#include "samples/data/data.h"

namespace edb::samples {

namespace detail {

void throw_parse_error(const std::string& name, int line, int column, std::string_view expected,
                       std::string_view found) {
  std::string message = name + ":" + std::to_string(line) + ":" + std::to_string(column) +
                        ": expected ";
  message.append(expected).append(", found ").append(found);
  throw UsageError(message);
}

std::string describe_at(std::string_view line, size_t pos, std::string_view stops) {
  if (pos >= line.size()) return "end of line";
  auto is_control = [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; };
  char c = line[pos];
  if (c == ' ') return "' '";
  if (c == '\t') return "tab";
  if (is_control(c)) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "byte 0x%02X", static_cast<unsigned char>(c));
    return hex;
  }
  if (stops.find(c) != std::string_view::npos) return std::string("'") + c + "'";
  constexpr size_t kLongest = 20;
  size_t end = pos;
  while (end < line.size() && line[end] != ' ' && !is_control(line[end]) &&
         stops.find(line[end]) == std::string_view::npos && end - pos <= kLongest) {
    ++end;
  }
  std::string run(line.substr(pos, std::min(end - pos, kLongest)));
  return "'" + run + (end - pos > kLongest ? "...'" : "'");
}

void open_or_throw(std::ifstream& file, const std::string& path, const char* function) {
  // A directory opens as a stream that fails on its first read; a device or pipe may never end.
  std::error_code error;
  const std::filesystem::file_status status = std::filesystem::status(path, error);
  const char* why = std::filesystem::is_directory(status)                                  ? "is a directory"
                    : std::filesystem::exists(status) && !std::filesystem::is_regular_file(status) ? "is not a regular file (a device, pipe or socket)"
                                                                                           : nullptr;
  if (why) throw UsageError(std::string("edb::samples::") + function + "(): '" + path + "' " + why);
  file.open(path, std::ios::binary);
  if (!file) {
    throw UsageError(std::string("edb::samples::") + function + "(): cannot open '" + path +
                     "': " + std::strerror(errno));
  }
}

}  // namespace detail

namespace {

constexpr std::string_view kTreeStops = "()";

// Parses one line into post-order nodes. Iterative, so a deeply nested line cannot overflow the
// stack; each '(' pushes an open node that waits for its first child, then its second.
class TreeLineParser {
 public:
  TreeLineParser(std::string_view line, const std::string& name, int line_number)
      : line_(line), name_(name), line_number_(line_number) {}

  Tree parse() {
    struct OpenNode {
      int label;
      int first_child;
    };
    Tree tree;
    std::vector<OpenNode> open;
    skip_spaces();
    expect('(', "'(' starting a tree");
    for (;;) {
      int label = parse_label();
      if (!at(' ') && !at('\t')) fail("' ' after label");
      skip_spaces();
      if (at('(')) {
        ++pos_;
        open.push_back({label, -1});
        continue;
      }
      size_t word_start = pos_;
      // A carriage return inside a line ends the word (and is then an error): write_tree refuses it.
      while (pos_ < line_.size() && !at(' ') && !at('\t') && !at('\r') && !at('(') && !at(')')) ++pos_;
      if (pos_ == word_start) fail("word or '('");
      TreeNode leaf;
      leaf.label = label;
      leaf.word.assign(line_.substr(word_start, pos_ - word_start));
      skip_spaces();
      expect(')', "')' after word");
      tree.nodes.push_back(std::move(leaf));
      int done = static_cast<int>(tree.nodes.size()) - 1;
      // Close every node that the finished subtree completes.
      for (;;) {
        skip_spaces();
        if (open.empty()) {
          if (pos_ < line_.size()) fail("end of line after tree");
          return tree;
        }
        OpenNode& parent = open.back();
        if (parent.first_child < 0) {
          parent.first_child = done;
          expect('(', "'(' starting the second subtree");
          break;
        }
        expect(')', "')' after two subtrees");
        TreeNode node;
        node.label = parent.label;
        node.left = parent.first_child;
        node.right = done;
        open.pop_back();
        tree.nodes.push_back(std::move(node));
        done = static_cast<int>(tree.nodes.size()) - 1;
      }
    }
  }

 private:
  bool at(char c) const { return pos_ < line_.size() && line_[pos_] == c; }

  void skip_spaces() {
    while (at(' ') || at('\t')) ++pos_;
  }

  void expect(char c, std::string_view what) {
    if (!at(c)) fail(what);
    ++pos_;
  }

  int parse_label() {
    size_t next = pos_ + 1;
    bool single_char = next >= line_.size() || line_[next] == ' ' || line_[next] == '\t' ||
                       line_[next] == '(' || line_[next] == ')';
    if (pos_ >= line_.size() || line_[pos_] < '0' || line_[pos_] > '4' || !single_char) {
      fail("label 0-4");
    }
    return line_[pos_++] - '0';
  }

  [[noreturn]] void fail(std::string_view expected) const {
    detail::throw_parse_error(name_, line_number_, static_cast<int>(pos_) + 1, expected,
                              detail::describe_at(line_, pos_, kTreeStops));
  }

  std::string_view line_;
  const std::string& name_;
  int line_number_;
  size_t pos_ = 0;
};

void check_tree(const Tree& tree, const char* function) {
  auto fail = [&](size_t index, const std::string& what) {
    throw UsageError(std::string("edb::samples::") + function + "(): node " +
                     std::to_string(index) + " " + what);
  };
  if (tree.nodes.empty()) throw UsageError(std::string("edb::samples::") + function +
                                           "(): expected a tree with nodes, found none");
  for (size_t i = 0; i < tree.nodes.size(); ++i) {
    const TreeNode& node = tree.nodes[i];
    if (node.label < 0 || node.label > 4) fail(i, "has label " + std::to_string(node.label) +
                                               ", expected 0-4");
    if (node.is_leaf()) {
      if (node.word.empty() || node.word.find_first_of(" \t\r\n()") != std::string::npos) {
        fail(i, "has word '" + node.word + "', expected a non-empty word without spaces or parentheses");
      }
    } else if (node.right < 0 || node.left >= static_cast<int>(i) ||
               node.right >= static_cast<int>(i)) {
      fail(i, "expected two children before it in post-order");
    }
  }
}

void append_subtree(std::string& text, const Tree& tree, int index) {
  const TreeNode& node = tree.nodes[index];
  text += '(';
  text += static_cast<char>('0' + node.label);
  text += ' ';
  if (node.is_leaf()) {
    text += node.word;
  } else {
    append_subtree(text, tree, node.left);
    text += ' ';
    append_subtree(text, tree, node.right);
  }
  text += ')';
}

}  // namespace

int Tree::leaf_count() const {
  int count = 0;
  for (const TreeNode& node : nodes) count += node.is_leaf() ? 1 : 0;
  return count;
}

const TreeNode& Tree::root() const {
  if (nodes.empty()) throw UsageError("edb::samples::Tree::root(): the tree has no nodes");
  return nodes.back();
}

int tree_depth(const Tree& tree) {
  check_tree(tree, "tree_depth");
  std::vector<int> depth(tree.nodes.size(), 1);
  for (size_t i = 0; i < tree.nodes.size(); ++i) {
    const TreeNode& node = tree.nodes[i];
    if (!node.is_leaf()) depth[i] = 1 + std::max(depth[node.left], depth[node.right]);
  }
  return depth.back();
}

std::vector<Tree> parse_trees(std::istream& in, const std::string& name) {
  std::vector<Tree> trees;
  detail::for_each_line(in, [&](std::string_view line, int line_number) {
    trees.push_back(TreeLineParser(line, name, line_number).parse());
  });
  return trees;
}

std::vector<Tree> read_trees(const std::string& path) {
  std::ifstream file;
  detail::open_or_throw(file, path, "read_trees");
  return parse_trees(file, path);
}

void write_tree(std::ostream& out, const Tree& tree) {
  check_tree(tree, "write_tree");
  std::string text;
  append_subtree(text, tree, static_cast<int>(tree.nodes.size()) - 1);
  text += '\n';
  out << text;
}

}  // namespace edb::samples
