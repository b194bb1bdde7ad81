// Policies decide which ready nodes run together. All give the same values; they differ in how
// many batches they need (never fewer than the lower bound) and in what a decision costs.
#include <edbatch/edbatch.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

// Records instances [first, first + count) of a small sequence model (a tanh RNN over `i % 5 + 2`
// steps) and returns their summed loss, unevaluated.
edb::Expr record(edb::Trace& trace, edb::Model& model, int first, int count) {
  const edb::Parameter W = model.parameter("W"), U = model.parameter("U"), b = model.parameter("b");
  std::vector<edb::Expr> losses;
  for (int i = first; i < first + count; ++i) {
    edb::Expr h = trace.input({0.0f, 0.0f, 0.0f});
    for (int t = 0; t < i % 5 + 2; ++t) {
      edb::Expr x = trace.input({float(t), float(i % 3), 1.0f});
      h = edb::tanh(edb::affine({trace.param(b), trace.param(W), x, trace.param(U), h}));
    }
    losses.push_back(edb::pick_neg_log_softmax(h, i % 3));
  }
  return edb::sum(losses);
}

int main() {
  edb::Model model("rnn");
  model.add_parameter("W", 3, 3);
  model.add_parameter("U", 3, 3);
  model.add_parameter("b", 3, 1);
  bool ok = true;
  float expected = 0;
  for (const char* policy : {"sequential", "depth", "agenda", "greedy"}) {
    edb::EngineOptions options;
    options.policy = policy;
    edb::Engine engine(options);
    edb::Trace trace(engine);
    const float loss = record(trace, model, 0, 16).scalar();
    const edb::Stats& s = engine.stats();
    std::printf("%-10s loss %.5f  %3lld batches, lower bound %lld\n", policy, loss, (long long)s.batches,
                (long long)s.lower_bound);
    if (expected == 0) expected = loss;
    ok = ok && std::fabs(loss - expected) <= 1e-5f * expected && s.batches >= s.lower_bound;
  }

  // fsm: a policy learned from recorded (not yet evaluated) traces, saved, and loaded elsewhere.
  const std::string path = (std::filesystem::temp_directory_path() / "edb-guide-rnn.policy").string();
  {
    edb::EngineOptions options;
    options.policy = "fsm";
    edb::Engine learner(options);
    std::vector<std::unique_ptr<edb::Trace>> traces;
    std::vector<edb::Trace*> pointers;
    for (int t = 0; t < 4; ++t) {
      traces.push_back(std::make_unique<edb::Trace>(learner));
      record(*traces.back(), model, 16 * t, 16);
      pointers.push_back(traces.back().get());
    }
    edb::PolicyTraining training;
    training.episodes = 200;
    const edb::PolicyProgress learned = learner.train_policy(pointers, training);
    std::printf("fsm training: %lld batches over 4 traces, lower bound %lld\n", (long long)learned.best_batches,
                (long long)learned.lower_bound);
    learner.save_policy(path);
  }
  edb::EngineOptions options;
  options.policy = "fsm";
  options.policy_file = path;  // a damaged or foreign file is a UsageError naming it
  edb::Engine engine(options);
  edb::Trace trace(engine);
  const float loss = record(trace, model, 0, 16).scalar();
  std::filesystem::remove(path);
  std::printf("fsm        loss %.5f  %3lld batches; %lld of %lld decisions fell back to greedy\n", loss,
              (long long)engine.stats().batches, (long long)engine.stats().policy_unseen,
              (long long)engine.stats().policy_decisions);
  ok = ok && std::fabs(loss - expected) <= 1e-5f * expected;
  return ok ? 0 : 1;
}
