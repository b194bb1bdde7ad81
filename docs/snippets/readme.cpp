// The README's example: sentences of different lengths, one tanh RNN each, batched by the engine.
#include <edbatch/edbatch.h>

#include <cstdio>
#include <vector>

int main() {
  edb::Model model("readme");
  edb::Parameter W = model.add_parameter("W", 4, 4), U = model.add_parameter("U", 4, 2);
  edb::Parameter b = model.add_parameter("b", 4, 1);
  edb::Engine engine;        // greedy policy, jit executor, CPU (edb::EngineOptions)
  edb::Trace trace(engine);  // records; nothing runs yet
  std::vector<edb::Expr> last;
  for (int length : {3, 5, 2}) {  // per-instance code: a plain loop over each sentence
    edb::Expr h = trace.input({0.0f, 0.0f, 0.0f, 0.0f});
    for (int t = 0; t < length; ++t)
      h = edb::tanh(edb::affine({trace.param(b), trace.param(W), h, trace.param(U), trace.input({1.0f, float(t)})}));
    last.push_back(h);
  }
  edb::Tensor value = last[1].value();  // evaluates all three sentences: step t of each runs as one batch
  std::printf("h = %.3f %.3f ...; %lld nodes in %lld batches\n", value(0), value(1),
              (long long)engine.stats().nodes, (long long)engine.stats().batches);
  return engine.stats().batches == engine.stats().lower_bound ? 0 : 1;
}
