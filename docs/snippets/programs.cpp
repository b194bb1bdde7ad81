// Programs that branch on their own values: each instance a coroutine that reads a value with
// co_await; run_instances batches what every instance recorded before it waits, round by round.
#include <edbatch/edbatch.h>
#include <edbatch/program.h>

#include <cstdio>
#include <vector>

// Greedy decoding: feed back the best-scoring token until token 0 (the end) or 10 tokens.
// Inputs by value: the program runs later, inside run_instances.
edb::Program<std::vector<int>> decode(edb::Trace& t, const edb::Model& model, int first) {
  const edb::Parameter W = model.parameter("W"), U = model.parameter("U");
  const edb::Parameter b = model.parameter("b"), O = model.parameter("O");
  const edb::LookupTable E = model.lookup("E");
  std::vector<int> tokens{first};
  edb::Expr h = t.input(std::vector<float>(8, 0.0f));
  while (tokens.size() < 10) {
    h = edb::tanh(edb::affine({t.param(b), t.param(W), h, t.param(U), t.lookup(E, tokens.back())}));
    const edb::Tensor scores = co_await edb::matmul(t.param(O), h);  // waits for the round
    int best = 0;
    for (int k = 1; k < scores.rows; ++k)
      if (scores(k) > scores(best)) best = k;
    if (best == 0) break;
    tokens.push_back(best);
  }
  co_return tokens;
}

int main() {
  edb::Model model("decoder", 3);
  model.add_parameter("W", 8, 8);
  model.add_parameter("U", 8, 4);
  model.add_parameter("b", 8, 1);
  model.add_parameter("O", 6, 8);
  model.add_lookup("E", 6, 4);

  edb::Engine engine;  // greedy policy, jit executor
  edb::Trace trace(engine);
  std::vector<edb::Program<std::vector<int>>> programs;
  for (int i = 0; i < 32; ++i) programs.push_back(decode(trace, model, 1 + i % 5));
  const edb::InstanceReport report = edb::run_instances(trace, programs);

  // Each instance alone under the reference executor decodes the same tokens.
  edb::EngineOptions options;
  options.executor = "reference";
  edb::Engine reference(options);
  bool same = report.finished == 32;
  for (int i = 0; i < 32; ++i) {
    edb::Trace alone(reference);
    std::vector<edb::Program<std::vector<int>>> one;
    one.push_back(decode(alone, model, 1 + i % 5));
    edb::run_instances(alone, one);
    same = same && one[0].result() == programs[i].result();
  }
  std::printf("%lld rounds; %lld nodes in %lld batches\n", (long long)report.rounds,
              (long long)engine.stats().nodes, (long long)engine.stats().batches);
  return same ? 0 : 1;
}
