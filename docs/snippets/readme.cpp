#include <edbatch/edbatch.h>
#include <cstdio>

int main() {  // sentences of 3, 5 and 2 words, a tanh RNN over each, written one sentence at a time
  edb::Model model("readme");
  auto W = model.add_parameter("W", 4, 4), U = model.add_parameter("U", 4, 2), b = model.add_parameter("b", 4, 1);
  edb::Engine engine;        // greedy policy, jit executor, CPU (edb::EngineOptions)
  edb::Trace trace(engine);  // records; nothing runs yet
  std::vector<edb::Expr> h;
  for (int length : {3, 5, 2}) {
    h.push_back(trace.input({0.0f, 0.0f, 0.0f, 0.0f}));
    for (int t = 0; t < length; ++t)
      h.back() = edb::tanh(edb::affine({trace.param(b), trace.param(W), h.back(), trace.param(U), trace.input({1.0f, float(t)})}));
  }
  const float first = h[1].value()(0);  // runs all three sentences: step t of each in one batch
  std::printf("h = %.3f ...; %lld nodes in %lld batches\n", first, (long long)engine.stats().nodes, (long long)engine.stats().batches);
  return engine.stats().batches == engine.stats().lower_bound ? 0 : 1;
}
