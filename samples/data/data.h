// Readers, writers and seeded generators for the three sample data formats (docs/design.md "Data
// formats"): SST bracket trees, tagged sentences, character lattices; plus a string Vocabulary.
// Models and batching live elsewhere: this only turns text into plain structs and back.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <istream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace edb::samples {

// One binary tree, nodes in post-order (children before parent); the root is nodes.back().
// A leaf is a preterminal "(label word)"; an internal node has exactly two children.
struct TreeNode {
  int label = 0;
  int left = -1;
  int right = -1;
  std::string word;  // empty for internal nodes
  bool is_leaf() const { return left < 0; }
  bool operator==(const TreeNode&) const = default;
};

struct Tree {
  std::vector<TreeNode> nodes;
  int leaf_count() const;
  const TreeNode& root() const;  // throws UsageError on an empty tree
  bool operator==(const Tree&) const = default;
};

// Depth counting the preterminal level as 1, as gen.py does (a one-word tree has depth 1).
int tree_depth(const Tree& tree);

// Errors name the input as "NAME:LINE:COL: expected X, found Y"; empty lines are skipped.
std::vector<Tree> parse_trees(std::istream& in, const std::string& name);
std::vector<Tree> read_trees(const std::string& path);
void write_tree(std::ostream& out, const Tree& tree);  // one line, SST format, newline at end

struct TaggedSentence {
  std::vector<std::string> words;
  std::vector<std::string> tags;
  bool operator==(const TaggedSentence&) const = default;
};

std::vector<TaggedSentence> parse_tagged(std::istream& in, const std::string& name);
std::vector<TaggedSentence> read_tagged(const std::string& path);
void write_tagged(std::ostream& out, const TaggedSentence& sentence);

// A word arc over chars start..end, 0-based and inclusive, end > start.
struct LatticeArc {
  int start = 0;
  int end = 0;
  std::string word;
  bool operator==(const LatticeArc&) const = default;
};

struct Lattice {
  std::vector<std::string> chars;    // never empty
  std::vector<LatticeArc> words;
  std::vector<std::string> labels;   // one per char
  bool operator==(const Lattice&) const = default;
};

std::vector<Lattice> parse_lattices(std::istream& in, const std::string& name);
std::vector<Lattice> read_lattices(const std::string& path);
void write_lattice(std::ostream& out, const Lattice& lattice);

// One n-ary tree (childsum): nodes in post-order, the root last. A leaf "(label word)" has no
// children; an internal node "(label child child ...)" has 1 to kMaxChildren children and no word.
struct NaryNode {
  int label = 0;
  std::vector<int> children;  // indices of earlier nodes
  std::string word;           // leaves only
  bool is_leaf() const { return children.empty(); }
  bool operator==(const NaryNode&) const = default;
};
struct NaryTree {
  static constexpr int kMaxChildren = 5;
  std::vector<NaryNode> nodes;
  bool operator==(const NaryTree&) const = default;
};

// The bracket format of Tree with any number of subtrees (1-5) under an internal node.
std::vector<NaryTree> parse_nary_trees(std::istream& in, const std::string& name);
std::vector<NaryTree> read_nary_trees(const std::string& path);
void write_nary_tree(std::ostream& out, const NaryTree& tree);

// One DAG (dagrnn), one per line: tokens "word|label" or "word|label<p,q,...>" separated by single
// spaces, where p, q are 0-based indices of earlier tokens on the line (1 to kMaxPredecessors of
// them, distinct); a token without predecessors starts the DAG. Labels 0-4.
struct DagNode {
  std::string word;
  int label = 0;
  std::vector<int> predecessors;
  bool operator==(const DagNode&) const = default;
};
struct Dag {
  static constexpr int kMaxPredecessors = 3;
  std::vector<DagNode> nodes;  // topological: predecessors come first
  bool operator==(const Dag&) const = default;
};

std::vector<Dag> parse_dags(std::istream& in, const std::string& name);
std::vector<Dag> read_dags(const std::string& path);
void write_dag(std::ostream& out, const Dag& dag);

// Seeded generators following the bench data in distribution, not in exact output (docs/design.md
// "Data formats"). They use std::mt19937_64 with hand-written distributions, so a seed gives the
// same data with every standard library.
std::vector<Tree> generate_trees(int count, uint64_t seed);
std::vector<TaggedSentence> generate_tagged(int count, uint64_t seed);
// The same sentences' law over spelled words (the char-level tagger): each word type a stem of 2-5
// letters and, 80% of the time, one of two endings of 1-3 letters its home tag owns.
std::vector<TaggedSentence> generate_spelled_tagged(int count, uint64_t seed);
std::vector<Lattice> generate_lattices(int count, uint64_t seed);
// Child-sum trees: every internal node has 1-5 children (as many with 2-5 as with 1), 8-40 leaves.
std::vector<NaryTree> generate_nary_trees(int count, uint64_t seed);
// DAGs of 10-60 nodes: a few sources, every other node reads 1-3 of the 8 nodes before it.
std::vector<Dag> generate_dags(int count, uint64_t seed);
// Dependency parses as tagged sentences (the parser sample): each word's tag is its head's 1-based
// position, 0 for the root. Projective trees from a small grammar over six word classes (a word's
// class is its id modulo 6: a verb heads the sentence; nouns take determiners and adjectives on
// the left, prepositional phrases on the right), 1-25 words.
std::vector<TaggedSentence> generate_parses(int count, uint64_t seed);

// Maps strings to dense ids. Id 0 is reserved for "<unk>"; after freeze(), unknown strings map to 0.
class Vocabulary {
 public:
  Vocabulary();
  int add(const std::string& word);       // the id (existing or new); after freeze() same as id()
  int id(const std::string& word) const;  // 0 when unknown
  const std::string& word(int id) const;  // throws UsageError when id is out of range
  int size() const;
  void freeze();
  bool frozen() const;
  // Becomes `words` (id i is words[i], words[0] "<unk>"), frozen: a saved vocabulary restored.
  void restore(const std::vector<std::string>& words);
  const std::vector<std::string>& words() const { return words_; }

 private:
  std::vector<std::string> words_;
  std::unordered_map<std::string, int> ids_;
  bool frozen_ = false;
};

struct ModelConfig;  // samples/models.h

// The vocabularies a sample model's ids came from, by name ("words", "chars", "tags"), as edb-run
// --save writes them beside the model (PATH.vocab) so that --load on other data gives its strings
// the same ids (unknown words <unk>). The text: "edbatch vocabularies 1", then per vocabulary a
// line "NAME COUNT" and its COUNT entries, one per line, in id order.
struct SavedVocabularies {
  std::string path;  // where they were read from, for errors
  std::vector<std::pair<std::string, std::vector<std::string>>> vocabularies;
};
using NamedVocabularies = std::vector<std::pair<std::string, const Vocabulary*>>;
// The file's text; UsageError for an entry that cannot be one line (a newline in it).
std::string vocabularies_text(const NamedVocabularies& vocabularies);
// Parses vocabularies_text's text; UsageError "PATH:LINE: expected ..., found ..." otherwise.
SavedVocabularies parse_vocabularies(std::istream& in, const std::string& path);
// When `config` carries saved vocabularies: `v` becomes the one named `name` and true (a
// UsageError when there is none of that name: saved by another model); else false, v untouched.
bool restore_vocabulary(const ModelConfig& config, const std::string& name, Vocabulary& v);
// The id of `label` in `labels` (by first appearance while it is open); a frozen (restored)
// vocabulary without it is a UsageError naming the label, `what` it is, and the saved file.
int label_id(Vocabulary& labels, const std::string& label, const std::string& what, const ModelConfig& config);

// A tagged corpus as ids, fixed once so that recording a trace does no string work: per sentence
// and word, its word id, its tag id and its letters' ids, each vocabulary filled by first
// appearance and then frozen, or restored from `config`'s saved vocabularies ("words", "chars"
// unless spell is none, "tags"; then a word is rare when the saved words lack it, and a tag they
// lack is a UsageError naming `model`). A word seen fewer than `frequent` times in the corpus is <unk> (0) in
// the word vocabulary (frequent 0: none is); `spell` says whose letters are kept (none, those rare
// words', every word's; the others' lists are empty). Tags need no <unk>: Vocabulary's id 0 is
// skipped, so tag t is output row t.
enum class Spell { none, rare, every };
struct TaggedIds {
  std::vector<std::vector<int>> words, tags;
  std::vector<std::vector<std::vector<int>>> letters;
};
TaggedIds tagged_ids(const std::vector<TaggedSentence>& sentences, int frequent, Spell spell, Vocabulary& words,
                     Vocabulary& chars, Vocabulary& tags, const ModelConfig& config, const std::string& model);

// Shared by the three readers so that every format reports errors alike; not for models.
namespace detail {

// Throws UsageError("NAME:LINE:COLUMN: expected EXPECTED, found FOUND").
[[noreturn]] void throw_parse_error(const std::string& name, int line, int column,
                                    std::string_view expected, std::string_view found);

// Describes the text at pos for "found ...": "end of line", "' '", or the quoted run of
// characters up to a space or one of `stops` (a stop character itself is quoted alone).
std::string describe_at(std::string_view line, size_t pos, std::string_view stops);

// Calls on_line(text, line_number) for each non-blank line (trailing '\r' removed).
template <typename OnLine>
void for_each_line(std::istream& in, OnLine&& on_line) {
  std::string line;
  int line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    on_line(std::string_view(line), line_number);
  }
}

// Opens path for reading or throws "edb::samples::FUNCTION(): cannot open 'PATH': REASON".
void open_or_throw(std::ifstream& file, const std::string& path, const char* function);

}  // namespace detail
}  // namespace edb::samples
