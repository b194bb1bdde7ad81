// Batching: record every instance into one trace, then evaluate once; independent instances
// run together. The reference executor evaluates node by node, the oracle to compare with.
#include <edbatch/edbatch.h>

#include <cmath>
#include <cstdio>
#include <vector>

// Sum over instances of a chain of `length` tanh layers: instance i has length 1 + i % 3.
float run(edb::Engine& engine, edb::Model& model) {
  const edb::Parameter W = model.parameter("W"), b = model.parameter("b");
  edb::Trace trace(engine);
  std::vector<edb::Expr> outputs;
  for (int i = 0; i < 8; ++i) {
    edb::Expr h = trace.input({0.1f * float(i), -0.2f, 0.3f, 0.5f});
    for (int step = 0; step <= i % 3; ++step) h = edb::tanh(edb::affine({trace.param(b), trace.param(W), h}));
    outputs.push_back(h);
  }
  edb::Expr total = edb::sum(outputs);  // 4x1
  edb::Expr loss = edb::pick_neg_log_softmax(total, 0);
  trace.run();          // starts evaluating everything recorded so far
  return loss.scalar(); // waits for it and reads one value
}

int main() {
  edb::Model model("chains");
  model.add_parameter("W", 4, 4);
  model.add_parameter("b", 4, 1);

  edb::Engine batched;  // default EngineOptions: policy "greedy", executor "jit"
  edb::EngineOptions unbatched;
  unbatched.policy = "sequential";
  unbatched.executor = "reference";
  edb::Engine reference(unbatched);
  const float a = run(batched, model), r = run(reference, model);

  // 8 instances, 1-3 layers each: the batched engine needs one batch per layer depth and op.
  const edb::Stats& stats = batched.stats();
  std::printf("loss %g (reference %g); %lld nodes in %lld batches, lower bound %lld\n", a, r,
              (long long)stats.nodes, (long long)stats.batches, (long long)stats.lower_bound);
  const bool ok = std::fabs(a - r) <= 1e-5f * std::fmax(1.0f, std::fabs(r)) &&
                  stats.batches == stats.lower_bound && reference.stats().batches == reference.stats().nodes;
  return ok ? 0 : 1;
}
