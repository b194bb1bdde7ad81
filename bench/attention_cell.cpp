// edb-bench-attention: a cell with softmax (scores = W h, a = softmax(scores), out = tanh(U (a .* v)
// + b), and log_softmax(V out) as a second output), or with `--cell layer_norm` layer_norm(W h, v,
// v) in place of a .* v, `--cell pick` the loss pick_neg_log_softmax(V out) as the second output,
// `--cell kmax` the largest of each row of tanh(W M) (kmax_pooling, M a per-call n x 6 matrix) in
// place of a .* v, `--cell conv` the same of tanh(conv1d_wide(W M, F)) (a char-CNN's word encoder,
// F n x 3), over chains of calls, `jit` against `batched`:
// inference and training (a backward pass, no update) instances/s per round, rounds interleaved,
// medians of each and of each round's ratio. It leaves checking the values to the tests
// (tests/correctness/compiled_column_steps_test.cpp).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <edbatch/edbatch.h>

#include "tools/flags.h"

namespace {

struct Attention {
  int n;
  edb::Model model{"attention", 5};
  edb::Parameter w, u, v, b, f;
  std::unique_ptr<edb::Cell> cell;
  std::string kind;
  // `layer_norm`: layer_norm(W h, v, v) in place of the softmax's a .* v, tanh(V out) for the
  // second output; `pick`: the second output pick_neg_log_softmax(V out, n / 2), the loss's term;
  // `kmax`: kmax_pooling(tanh(W M), 1) + h in place of a .* v (M the second argument, n x 6);
  // `conv`: kmax_pooling(tanh(conv1d_wide(W M, F)), 1) + h.
  Attention(int hidden, const std::string& cell_kind)
      : n(hidden), w(model.add_parameter("W", hidden, hidden)), u(model.add_parameter("U", hidden, hidden)),
        v(model.add_parameter("V", hidden, hidden)), b(model.add_parameter("b", hidden, 1)),
        f(model.add_parameter("F", hidden, 3)), kind(cell_kind) {
    const bool layer_norm = kind == "layer_norm", conv = kind == "conv", kmax = kind == "kmax" || conv;
    cell = std::make_unique<edb::Cell>("attend", std::vector<std::pair<int, int>>{{n, 1}, {n, kmax ? 6 : 1}},
                                       [this, layer_norm, kmax, conv](edb::Trace& t, std::span<const edb::Expr> in) {
                                         edb::Expr scores = edb::matmul(t.param(w), in[kmax ? 1 : 0]);
                                         if (conv) scores = edb::conv1d_wide(scores, t.param(f));
                                         const edb::Expr mixed = layer_norm ? edb::layer_norm(scores, in[1], in[1])
                                                                 : kmax ? edb::kmax_pooling(edb::tanh(scores), 1) + in[0]
                                                                        : edb::cmult(edb::softmax(scores), in[1]);
                                         const edb::Expr out = edb::tanh(edb::affine({t.param(b), t.param(u), mixed}));
                                         const edb::Expr second = edb::matmul(t.param(v), out);
                                         if (kind == "pick") return std::vector<edb::Expr>{out, edb::pick_neg_log_softmax(second, n / 2)};
                                         return std::vector<edb::Expr>{out, layer_norm || kmax ? edb::tanh(second) : edb::log_softmax(second)};
                                       });
  }

  // Column i of the inputs: made once, so that the measures time the engine, not the inputs.
  std::vector<std::vector<float>> columns;
  const std::vector<float>& input(int i) {
    while (int(columns.size()) <= i) {
      columns.emplace_back(static_cast<size_t>(n));
      for (int r = 0; r < n; ++r) columns.back()[size_t(r)] = std::sin(0.7f * float(columns.size()) + 0.13f * float(r));
    }
    return columns[size_t(i)];
  }
  // `kmax`'s second argument: columns i..i+5 side by side.
  std::vector<std::vector<float>> matrices;
  const std::vector<float>& matrix(int i) {
    while (int(matrices.size()) <= i) {
      const int at = int(matrices.size());
      matrices.emplace_back();
      for (int j = 0; j < 6; ++j) matrices.back().insert(matrices.back().end(), input(at + j).begin(), input(at + j).end());
    }
    return matrices[size_t(i)];
  }

  // `chains` chains of 1..`steps` calls (lengths rotating), each step's h the last one's out; a
  // loss that reads every output.
  edb::Expr loss(edb::Trace& t, int chains, int steps) {
    std::vector<edb::Expr> terms;
    for (int k = 0; k < chains; ++k) {
      edb::Expr h = t.input(input(k));
      for (int s = 0; s < 1 + k % steps; ++s) {
        const edb::Expr second = kind == "kmax" || kind == "conv" ? t.input(n, 6, matrix(k + s + 1)) : t.input(input(k + s + 1));
        const std::vector<edb::Expr> out = (*cell)(t, {h, second});
        h = out[0];
        terms.push_back(kind == "pick" ? out[1] * -1.0f : edb::pick(out[1], (k + s) % n));
      }
    }
    return edb::sum(terms) * -1.0f;
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

int body(int argc, char** argv) {
  edb::tools::Flags flags("edb-bench-attention", {"cell", "hidden", "chains", "steps", "rounds", "traces", "threads"}, {"help"});
  flags.parse(argc, argv, 1);
  if (flags.has("help")) {
    std::printf(
        "usage: edb-bench-attention [--cell attention|layer_norm|pick|kmax|conv] [--hidden N] [--chains N]\n"
        "                           [--steps N] [--rounds N] [--traces N] [--threads N]\n"
        "  A cell with softmax (scores = W h, a = softmax(scores), out = tanh(U (a .* v) + b), log_softmax(V\n"
        "  out)), or with layer_norm(W h, v, v) in place of a .* v (layer_norm), the loss\n"
        "  pick_neg_log_softmax(V out, n / 2) as its second output (pick), or kmax_pooling(tanh(W M), 1) + h\n"
        "  in place of a .* v, M a per-call n x 6 matrix (kmax), the same of tanh(conv1d_wide(W M, F)), F n x 3\n"
        "  (conv), over --chains chains of 1..--steps calls\n"
        "  (defaults: attention, hidden 64, 64 chains, 8 steps): batched against jit, inference and\n"
        "  training, --traces traces a measure (10), --rounds interleaved rounds (5), medians.\n");
    return 0;
  }
  const int hidden = int(flags.get_int("hidden", 64, 1, 4096));
  const int chains = int(flags.get_int("chains", 64, 1, 100000));
  const int steps = int(flags.get_int("steps", 8, 1, 1000));
  const int rounds = int(flags.get_int("rounds", 5, 1, 1000));
  const int traces = int(flags.get_int("traces", 10, 1, 100000));
  const int threads = int(flags.get_int("threads", 1, 1, 256));
  const std::string kind = flags.get("cell", "attention");
  if (kind != "attention" && kind != "layer_norm" && kind != "pick" && kind != "kmax" && kind != "conv")
    throw edb::UsageError("edb-bench-attention: --cell is '" + kind + "'; expected attention, layer_norm, pick, kmax or conv");
  Attention attention(hidden, kind);
  int instances = 0;
  for (int k = 0; k < chains; ++k) instances += 1 + k % steps;
  const std::vector<std::string> executors = {"batched", "jit"};
  std::vector<std::unique_ptr<edb::Engine>> engines;
  for (const std::string& executor : executors) {
    edb::EngineOptions options;
    options.executor = executor;
    options.threads = threads;
    engines.push_back(std::make_unique<edb::Engine>(options));
  }
  // calls/s of `traces` traces on engine e (training: a backward pass each).
  auto measure = [&](size_t e, bool train) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < traces; ++i) {
      edb::Trace trace(*engines[e]);
      const edb::Expr loss = attention.loss(trace, chains, steps);
      if (train) trace.backward(loss);
      else loss.scalar();
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return double(instances) * traces / seconds;
  };
  for (size_t e = 0; e < engines.size(); ++e)  // warm-up: kernels compiled, the training layout, arenas grown
    for (bool train : {false, true}) measure(e, train);
  std::printf("%s cell: hidden %d, %d chains of 1-%d calls (%d calls a trace), %d traces a measure, %d thread(s)\n",
              kind.c_str(), hidden, chains, steps, instances, traces, threads);
  for (bool train : {false, true}) {
    std::vector<std::vector<double>> rates(engines.size());
    std::vector<double> ratios;
    for (int r = 0; r < rounds; ++r) {
      std::vector<double> round(engines.size());
      for (size_t i = 0; i < engines.size(); ++i) {
        const size_t e = r % 2 ? engines.size() - 1 - i : i;  // alternate which runs first
        round[e] = measure(e, train);
        rates[e].push_back(round[e]);
      }
      ratios.push_back(round[1] / round[0]);
      std::printf("  %s round %d: batched %.0f calls/s, jit %.0f calls/s, jit/batched %.2fx\n", train ? "training" : "inference",
                  r + 1, round[0], round[1], ratios.back());
    }
    std::printf("%s medians: batched %.0f calls/s, jit %.0f calls/s, jit/batched %.2fx (median of the rounds' ratios)\n",
                train ? "training" : "inference", median(rates[0]), median(rates[1]), median(ratios));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return edb::tools::run_tool("edb-bench-attention", body, argc, argv); }
