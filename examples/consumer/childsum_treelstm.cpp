// A model the samples do not have, written with nothing but the installed headers: the child-sum
// TreeLSTM (Tai et al. 2015) over trees whose nodes have 0 to 4 children. It evaluates generated
// trees with the batched executor and with the unbatched reference executor and exits 1 when any
// root state or loss differs by more than a small tolerance.
#include <edbatch/edbatch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr int kWords = 50, kEmbed = 16, kHidden = 24, kLabels = 5;
constexpr int kTrees = 32, kTreesPerTrace = 8, kMaxChildren = 4, kMaxDepth = 4;

// A tree in post-order: children come before their parent, the root is last.
struct Tree {
  std::vector<int> word;                   // per node
  std::vector<std::vector<int>> children;  // per node, indices of earlier nodes
  int label = 0;
};

int grow(Tree& tree, std::mt19937& rng, int depth) {
  std::vector<int> children;
  const bool leaf = depth == kMaxDepth || std::uniform_int_distribution<int>(0, 3)(rng) == 0;
  if (!leaf) {
    const int count = std::uniform_int_distribution<int>(1, kMaxChildren)(rng);
    for (int k = 0; k < count; ++k) children.push_back(grow(tree, rng, depth + 1));
  }
  tree.word.push_back(std::uniform_int_distribution<int>(0, kWords - 1)(rng));
  tree.children.push_back(std::move(children));
  return int(tree.word.size()) - 1;
}

std::vector<Tree> generate_trees(unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<Tree> trees(kTrees);
  for (Tree& tree : trees) {
    grow(tree, rng, 0);
    tree.label = std::uniform_int_distribution<int>(0, kLabels - 1)(rng);
  }
  return trees;
}

// h~ = sum of the children's h; i, o, u from W x + U h~ + b; one forget gate per child from
// W_f x + U_f h_k + b_f; c = i * u + sum of f_k * c_k; h = o * tanh(c). Three cells: a leaf's
// gates, an inner node's gates, and a child's forget term; calls of each batch across nodes.
class ChildSumTreeLstm {
 public:
  explicit ChildSumTreeLstm(edb::Model& model)
      : embeddings_(model.add_lookup("E", kWords, kEmbed)),
        w_iou_(model.add_parameter("W_iou", 3 * kHidden, kEmbed)),
        u_iou_(model.add_parameter("U_iou", 3 * kHidden, kHidden)),
        b_iou_(model.add_parameter("b_iou", 3 * kHidden, 1)),
        w_f_(model.add_parameter("W_f", kHidden, kEmbed)),
        u_f_(model.add_parameter("U_f", kHidden, kHidden)),
        b_f_(model.add_parameter("b_f", kHidden, 1)),
        w_out_(model.add_parameter("W_out", kLabels, kHidden)),
        b_out_(model.add_parameter("b_out", kLabels, 1)) {}

  struct Result {
    edb::Expr root_h, loss;
  };

  Result record(edb::Trace& trace, const Tree& tree) const {
    std::vector<edb::Expr> h(tree.word.size()), c(tree.word.size());
    for (size_t n = 0; n < tree.word.size(); ++n) {
      const edb::Expr x = trace.lookup(embeddings_, tree.word[n]);
      const std::vector<int>& kids = tree.children[n];
      std::vector<edb::Expr> gates, terms;
      if (kids.empty()) {
        gates = leaf_gates_(trace, {x});
      } else {
        std::vector<edb::Expr> child_h;
        for (int k : kids) child_h.push_back(h[size_t(k)]);
        gates = inner_gates_(trace, {x, edb::sum(child_h)});
        for (int k : kids) terms.push_back(forget_(trace, {x, h[size_t(k)], c[size_t(k)]})[0]);
      }
      terms.insert(terms.begin(), gates[0]);  // i * u
      c[n] = edb::sum(terms);
      h[n] = edb::cmult(gates[1], edb::tanh(c[n]));
    }
    const edb::Expr logits = edb::affine({trace.param(b_out_), trace.param(w_out_), h.back()});
    return {h.back(), edb::pick_neg_log_softmax(logits, tree.label)};
  }

 private:
  // (i * u, o) from the 3H rows of iou = [i; o; u] before their nonlinearities.
  static std::vector<edb::Expr> from_iou(const edb::Expr& iou) {
    const edb::Expr i = edb::sigmoid(edb::slice(iou, 0, kHidden));
    const edb::Expr o = edb::sigmoid(edb::slice(iou, kHidden, 2 * kHidden));
    const edb::Expr u = edb::tanh(edb::slice(iou, 2 * kHidden, 3 * kHidden));
    return {edb::cmult(i, u), o};
  }

  edb::LookupTable embeddings_;
  edb::Parameter w_iou_, u_iou_, b_iou_, w_f_, u_f_, b_f_, w_out_, b_out_;

  edb::Cell leaf_gates_{"childsum_leaf", {{kEmbed, 1}}, [this](edb::Trace& t, std::span<const edb::Expr> in) {
    return from_iou(edb::affine({t.param(b_iou_), t.param(w_iou_), in[0]}));
  }};
  edb::Cell inner_gates_{"childsum_gates", {{kEmbed, 1}, {kHidden, 1}},
                         [this](edb::Trace& t, std::span<const edb::Expr> in) {
    return from_iou(edb::affine({t.param(b_iou_), t.param(w_iou_), in[0], t.param(u_iou_), in[1]}));
  }};
  edb::Cell forget_{"childsum_forget", {{kEmbed, 1}, {kHidden, 1}, {kHidden, 1}},
                    [this](edb::Trace& t, std::span<const edb::Expr> in) {
    const edb::Expr f = edb::sigmoid(edb::affine({t.param(b_f_), t.param(w_f_), in[0], t.param(u_f_), in[1]}));
    return std::vector<edb::Expr>{edb::cmult(f, in[2])};
  }};
};

// Every tree's root state and loss, flattened, evaluated in traces of kTreesPerTrace trees.
std::vector<float> evaluate(const ChildSumTreeLstm& model, const std::vector<Tree>& trees,
                            edb::Engine& engine) {
  std::vector<float> values;
  for (size_t first = 0; first < trees.size(); first += kTreesPerTrace) {
    edb::Trace trace(engine);
    std::vector<ChildSumTreeLstm::Result> results;
    for (size_t i = first; i < std::min(trees.size(), first + kTreesPerTrace); ++i)
      results.push_back(model.record(trace, trees[i]));
    trace.run();
    for (const ChildSumTreeLstm::Result& r : results) {
      const edb::Tensor h = r.root_h.value();
      values.insert(values.end(), h.data.begin(), h.data.end());
      values.push_back(r.loss.scalar());
    }
  }
  return values;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string executor = argc > 1 ? argv[1] : "batched";
  try {
    edb::Model parameters("childsum_treelstm", 7);
    const ChildSumTreeLstm model(parameters);
    const std::vector<Tree> trees = generate_trees(11);
    size_t nodes = 0;
    for (const Tree& tree : trees) nodes += tree.word.size();

    edb::EngineOptions options;
    options.executor = executor;
    edb::Engine batched(options);
    options.executor = "reference";
    options.policy = "sequential";
    edb::Engine reference(options);
    const std::vector<float> got = evaluate(model, trees, batched);
    const std::vector<float> want = evaluate(model, trees, reference);

    float worst = 0;
    bool finite = got.size() == want.size();
    for (size_t i = 0; finite && i < want.size(); ++i) {
      finite = std::isfinite(got[i]) && std::isfinite(want[i]);
      worst = std::max(worst, std::abs(got[i] - want[i]));
    }
    const bool agree = finite && worst <= 1e-4f;
    const bool batched_fewer = batched.stats().batches < reference.stats().batches;
    std::printf("edbatch %s consumer: child-sum TreeLSTM, %d trees, %zu nodes, fan-out 0-%d: %s %lld batches, "
                "reference %lld; largest difference %.2g: %s\n",
                EDBATCH_VERSION_STRING, kTrees, nodes, kMaxChildren, executor.c_str(),
                (long long)batched.stats().batches, (long long)reference.stats().batches, double(worst),
                agree && batched_fewer ? "OK" : agree ? "FAILED (nothing was batched)" : "FAILED (results differ)");
    return agree && batched_fewer ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "childsum_treelstm: %s\n", e.what());
    return 2;
  }
}
