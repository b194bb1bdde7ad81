// Seeded synthetic data shaped like the bench data (docs/design.md "Data formats"): trees, tagged
// sentences, lattices. Distributions are hand-written over std::mt19937_64 so that a seed
// gives the same data with every standard library; the exact Python output is not reproduced.
#include <algorithm>
#include <functional>
#include <cmath>
#include <random>

#include <edbatch/errors.h>

#include "samples/data/data.h"

namespace edb::samples {
namespace {

constexpr int kVocabularySize = 5000;
constexpr int kTagCount = 40;
constexpr double kSkew = 0.55;  // chance that a split goes to an edge: deepens trees like SST's
constexpr double kNodeLabels[] = {0.026, 0.108, 0.690, 0.138, 0.038};
constexpr double kRootLabels[] = {0.12, 0.26, 0.19, 0.27, 0.16};

class Random {
 public:
  explicit Random(uint64_t seed) : engine_(seed) {}
  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }  // [0, 1)
  int below(int n) {  // uniform in [0, n), without modulo bias
    const uint64_t range = static_cast<uint64_t>(n);
    const uint64_t limit = UINT64_MAX - UINT64_MAX % range;
    uint64_t value;
    do value = engine_(); while (value >= limit);
    return static_cast<int>(value % range);
  }

 private:
  std::mt19937_64 engine_;
};

// Index i with probability weight_i / total, given running totals of the weights.
int draw_cumulative(Random& random, const std::vector<double>& cumulative) {
  double target = random.uniform() * cumulative.back();
  auto it = std::upper_bound(cumulative.begin(), cumulative.end(), target);
  return static_cast<int>(std::min(it - cumulative.begin(),
                                   static_cast<std::ptrdiff_t>(cumulative.size()) - 1));
}

// P(rank r) ~ 1 / (r + 1); sums of exact divisions, so identical everywhere.
std::vector<double> zipf_cumulative(int count) {
  std::vector<double> cumulative;
  cumulative.reserve(count);
  double total = 0.0;
  for (int rank = 0; rank < count; ++rank) cumulative.push_back(total += 1.0 / (rank + 1));
  return cumulative;
}

// The law of round(Gamma(mean, sd)) conditioned on [lo, hi], as running totals over lo..hi.
// Tabulating it (Simpson's rule over each unit interval) keeps the number of random draws fixed;
// libm differences can only move a threshold by a few ulps.
std::vector<double> rounded_gamma_cumulative(double mean, double sd, int lo, int hi) {
  const double shape = (mean / sd) * (mean / sd);
  const double scale = sd * sd / mean;
  const double mode = std::max((shape - 1.0) * scale, 1e-9);
  auto density = [&](double x) {  // unnormalised, scaled to 1 at the mode
    if (x <= 0.0) return 0.0;
    return std::exp((shape - 1.0) * std::log(x / mode) - (x - mode) / scale);
  };
  constexpr int kSteps = 16;
  std::vector<double> cumulative;
  double total = 0.0;
  for (int n = lo; n <= hi; ++n) {
    const double a = n - 0.5, h = 1.0 / kSteps;
    double sum = density(a) + density(a + 1.0);
    for (int i = 1; i < kSteps; ++i) sum += (i % 2 ? 4.0 : 2.0) * density(a + i * h);
    cumulative.push_back(total += sum * h / 3.0);
  }
  return cumulative;
}

int pick(Random& random, const double (&probabilities)[5]) {
  double x = random.uniform(), total = 0.0;
  for (int i = 0; i < 5; ++i) {
    total += probabilities[i];
    if (x < total) return i;
  }
  return 4;
}

// Appends the subtree over words[begin, end) in post-order; returns its node index. The label is
// drawn before the children, in gen.py's order.
int build_subtree(Tree& tree, Random& random, const std::vector<int>& words, int begin, int end,
                  bool is_root) {
  TreeNode node;
  node.label = pick(random, is_root ? kRootLabels : kNodeLabels);
  const int n = end - begin;
  if (n == 1) {
    node.word = "w" + std::to_string(words[begin]);
  } else {
    int split = 1;
    if (n > 2) {
      if (random.uniform() < kSkew) {
        split = random.uniform() < 0.5 ? 1 : n - 1;
      } else {
        split = 1 + random.below(n - 1);
      }
    }
    node.left = build_subtree(tree, random, words, begin, begin + split, false);
    node.right = build_subtree(tree, random, words, begin + split, end, false);
  }
  tree.nodes.push_back(std::move(node));
  return static_cast<int>(tree.nodes.size()) - 1;
}

void check_count(int count, const char* function) {
  if (count < 0) {
    throw UsageError(std::string("edb::samples::") + function +
                     "(): expected a count >= 0, found " + std::to_string(count));
  }
}

}  // namespace

std::vector<Tree> generate_trees(int count, uint64_t seed) {
  check_count(count, "generate_trees");
  Random random(seed);
  const std::vector<double> word_law = zipf_cumulative(kVocabularySize);
  const std::vector<double> length_law = rounded_gamma_cumulative(19.0, 9.0, 2, 55);
  std::vector<Tree> trees(count);
  std::vector<int> words;
  for (Tree& tree : trees) {
    const int length = 2 + draw_cumulative(random, length_law);
    words.clear();
    for (int i = 0; i < length; ++i) words.push_back(draw_cumulative(random, word_law));
    tree.nodes.reserve(2 * length - 1);
    build_subtree(tree, random, words, 0, length, true);
  }
  return trees;
}

namespace {

// Sentences of Zipf-drawn word types, each type spelled by `spell` (its id and its home tag), each
// carrying its home tag 85% of the time, so a tagger can learn the task.
std::vector<TaggedSentence> tagged_sentences(int count, uint64_t seed, const char* generator,
                                             const std::function<std::string(int, int)>& spell) {
  check_count(count, generator);
  Random random(seed);
  const std::vector<double> word_law = zipf_cumulative(kVocabularySize);
  const std::vector<double> tag_law = zipf_cumulative(kTagCount);
  const std::vector<double> length_law = rounded_gamma_cumulative(24.0, 12.0, 2, 80);
  std::vector<int> home_tag(kVocabularySize);
  for (int& tag : home_tag) tag = draw_cumulative(random, tag_law);
  std::vector<std::string> spelling(kVocabularySize);
  for (int word = 0; word < kVocabularySize; ++word) spelling[size_t(word)] = spell(word, home_tag[size_t(word)]);
  std::vector<TaggedSentence> sentences(count);
  for (TaggedSentence& sentence : sentences) {
    const int length = 2 + draw_cumulative(random, length_law);
    for (int i = 0; i < length; ++i) {
      const int word = draw_cumulative(random, word_law);
      const int tag = random.uniform() < 0.85 ? home_tag[word] : draw_cumulative(random, tag_law);
      sentence.words.push_back(spelling[size_t(word)]);
      sentence.tags.push_back("T" + std::to_string(tag));
    }
  }
  return sentences;
}

}  // namespace

std::vector<TaggedSentence> generate_tagged(int count, uint64_t seed) {
  return tagged_sentences(count, seed, "generate_tagged", [](int word, int) { return "w" + std::to_string(word); });
}

std::vector<TaggedSentence> generate_spelled_tagged(int count, uint64_t seed) {
  // Each tag's two endings of 1-3 letters; a word is a stem of 2-5 letters and, 80% of the time,
  // an ending of its home tag (else any tag's).
  Random letters(seed ^ 0x5eed5eedull);
  auto letters_of = [&](int length) {
    std::string text;
    for (int i = 0; i < length; ++i) text += char('a' + letters.below(26));
    return text;
  };
  std::vector<std::string> endings;
  for (int i = 0; i < 2 * kTagCount; ++i) endings.push_back(letters_of(1 + letters.below(3)));
  return tagged_sentences(count, seed, "generate_spelled_tagged", [&](int, int home) {
    const std::string stem = letters_of(2 + letters.below(4));
    const int ending = letters.uniform() < 0.8 ? 2 * home + letters.below(2) : letters.below(2 * kTagCount);
    return stem + endings[size_t(ending)];
  });
}

std::vector<Lattice> generate_lattices(int count, uint64_t seed) {
  check_count(count, "generate_lattices");
  constexpr double kDensity = 0.45;   // chance of a short lexicon arc (2-4 chars) per start
  constexpr double kDensity2 = 0.12;  // chance of a long one (5-6 chars) per start
  Random random(seed);
  const std::vector<double> char_law = zipf_cumulative(3000);
  const std::vector<double> length_law = rounded_gamma_cumulative(30.0, 15.0, 3, 120);
  const std::vector<double> short_arc_law = {0.6, 0.85, 1.0};  // lengths 2, 3, 4
  std::vector<Lattice> lattices(count);
  for (Lattice& lattice : lattices) {
    const int n = 3 + draw_cumulative(random, length_law);
    for (int i = 0; i < n; ++i) {
      lattice.chars.push_back("c" + std::to_string(draw_cumulative(random, char_law)));
    }
    auto add_arc = [&](int start, int length) {
      if (start + length - 1 >= n) return;
      LatticeArc arc{start, start + length - 1, ""};
      for (int i = arc.start; i <= arc.end; ++i) arc.word += lattice.chars[i];
      lattice.words.push_back(std::move(arc));
    };
    for (int start = 0; start < n; ++start) {
      if (random.uniform() < kDensity) add_arc(start, 2 + draw_cumulative(random, short_arc_law));
      if (random.uniform() < kDensity2) add_arc(start, 5 + random.below(2));
    }
    for (int i = 0; i < n; ++i) {
      const int label = random.uniform() < 0.7 ? 0 : 1 + random.below(16);
      lattice.labels.push_back("L" + std::to_string(label));
    }
  }
  return lattices;
}

}  // namespace edb::samples

namespace edb::samples {
namespace {

// Appends a subtree with `leaves` leaves in post-order and returns its index. Children counts:
// 1 with probability 1/5 (a unary chain link), else 2-5, capped by the leaves left.
int build_nary(NaryTree& tree, Random& random, const std::vector<double>& word_law, int leaves, bool is_root) {
  NaryNode node;
  node.label = pick(random, is_root ? kRootLabels : kNodeLabels);
  if (leaves == 1 && (is_root || random.uniform() < 0.8)) {
    node.word = "w" + std::to_string(draw_cumulative(random, word_law));
  } else {
    int children = leaves == 1 || random.uniform() < 0.2 ? 1 : 2 + random.below(NaryTree::kMaxChildren - 1);
    children = std::min(children, leaves);
    // Split the leaves: each child at least one, the rest spread at random.
    std::vector<int> share(size_t(children), 1);
    for (int extra = leaves - children; extra > 0; --extra) ++share[size_t(random.below(children))];
    for (int c = 0; c < children; ++c) node.children.push_back(build_nary(tree, random, word_law, share[size_t(c)], false));
  }
  tree.nodes.push_back(std::move(node));
  return static_cast<int>(tree.nodes.size()) - 1;
}

}  // namespace

std::vector<NaryTree> generate_nary_trees(int count, uint64_t seed) {
  check_count(count, "generate_nary_trees");
  Random random(seed);
  const std::vector<double> word_law = zipf_cumulative(kVocabularySize);
  std::vector<NaryTree> trees(static_cast<size_t>(count));
  for (NaryTree& tree : trees) build_nary(tree, random, word_law, 8 + random.below(33), true);
  return trees;
}

std::vector<Dag> generate_dags(int count, uint64_t seed) {
  check_count(count, "generate_dags");
  Random random(seed);
  const std::vector<double> word_law = zipf_cumulative(kVocabularySize);
  constexpr int kWindow = 8;  // predecessors come from the last kWindow nodes: DAGs stay deep
  std::vector<Dag> dags(static_cast<size_t>(count));
  for (Dag& dag : dags) {
    const int size = 10 + random.below(51);
    const int sources = 1 + random.below(3);
    for (int i = 0; i < size; ++i) {
      DagNode node;
      node.word = "w" + std::to_string(draw_cumulative(random, word_law));
      node.label = pick(random, kNodeLabels);
      if (i >= sources) {
        const int window = std::min(i, kWindow);
        const int wanted = std::min(window, 1 + random.below(Dag::kMaxPredecessors));
        while (int(node.predecessors.size()) < wanted) {
          const int p = i - 1 - random.below(window);
          if (std::find(node.predecessors.begin(), node.predecessors.end(), p) == node.predecessors.end())
            node.predecessors.push_back(p);
        }
        std::sort(node.predecessors.begin(), node.predecessors.end());
      }
      dag.nodes.push_back(std::move(node));
    }
  }
  return dags;
}

std::vector<TaggedSentence> generate_parses(int count, uint64_t seed) {
  check_count(count, "generate_parses");
  // Word classes: 0 verb, 1 noun, 2 determiner, 3 adjective, 4 preposition, 5 adverb. A word's
  // class is its id modulo 6, so a parser can learn the grammar from the words.
  constexpr int kWords = 600, kClasses = 6, kMaxDepth = 4;
  Random random(seed);
  const std::vector<double> word_law = zipf_cumulative(kWords / kClasses);
  auto word_of = [&](int word_class) { return draw_cumulative(random, word_law) * kClasses + word_class; };
  std::vector<TaggedSentence> sentences(count);
  for (TaggedSentence& sentence : sentences) {
    std::vector<int> words, heads;  // heads: 1-based, 0 for the root
    // Appends the phrase headed by a word of `word_class` (dependents on the left, the head, on the
    // right), attached to `head`; returns nothing: each dependent is added in place.
    auto phrase = [&](auto&& self, int word_class, int head, int depth) -> void {
      std::vector<int> left, right;  // dependents' classes, nearest the head last (left) or first
      const bool deeper = depth < kMaxDepth;
      switch (word_class) {
        case 0:
          if (random.uniform() < 0.3) left.push_back(5);
          if (deeper && random.uniform() < 0.9) left.insert(left.begin(), 1);
          if (deeper && random.uniform() < 0.7) right.push_back(1);
          if (deeper && random.uniform() < 0.4) right.push_back(4);
          break;
        case 1:
          if (random.uniform() < 0.7) left.push_back(2);
          if (random.uniform() < 0.4) left.push_back(3);
          if (deeper && random.uniform() < 0.25) right.push_back(4);
          break;
        case 4:
          if (deeper) right.push_back(1);
          break;
        default: break;
      }
      std::vector<int> placed;
      for (const int c : left) {
        words.push_back(word_of(c));
        heads.push_back(-1);  // filled once the head is placed
        placed.push_back(int(words.size()) - 1);
        if (c == 1 || c == 4) {  // a phrase on the left: its own dependents around it
          words.pop_back();
          heads.pop_back();
          placed.pop_back();
          const int before = int(words.size());
          self(self, c, -2, depth + 1);
          for (int i = before; i < int(words.size()); ++i)
            if (heads[i] == -2) placed.push_back(i);
        }
      }
      words.push_back(word_of(word_class));
      heads.push_back(head);
      const int self_index = int(words.size());  // 1-based
      for (const int i : placed) heads[i] = self_index;
      for (const int c : right) {
        if (c == 1 || c == 4) {
          self(self, c, self_index, depth + 1);
        } else {
          words.push_back(word_of(c));
          heads.push_back(self_index);
        }
      }
    };
    phrase(phrase, 0, 0, 0);
    for (size_t i = 0; i < words.size(); ++i) {
      sentence.words.push_back("w" + std::to_string(words[i]));
      sentence.tags.push_back(std::to_string(heads[i]));
    }
  }
  return sentences;
}

}  // namespace edb::samples
