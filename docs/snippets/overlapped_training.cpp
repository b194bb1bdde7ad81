// Training that overlaps its steps (two threads): step i+1 is recorded, forward and backward
// (record_backward), while step i runs in the background; gradients() waits for step i.
#include <edbatch/edbatch.h>
#include <edbatch/train.h>

#include <cstdio>
#include <memory>
#include <vector>

int main() {
  edb::Model model("classifier", /*seed=*/1);  // a word's class is its id mod 3
  const edb::LookupTable E = model.add_lookup("E", /*entries=*/30, /*dim=*/8);
  const edb::Parameter W = model.add_parameter("W", 3, 8), b = model.add_parameter("b", 3, 1);
  edb::OptimizerOptions options;
  options.kind = "adam";
  options.learning_rate = 0.02f;
  edb::Optimizer optimizer(model, options);
  edb::EngineOptions engine_options;
  engine_options.threads = 2;
  edb::Engine engine(engine_options);

  // One step's trace, both passes recorded and batched, nothing evaluated yet.
  auto record_step = [&] {
    auto trace = std::make_unique<edb::Trace>(engine);
    std::vector<edb::Expr> losses;
    for (int word = 0; word < 30; ++word) {
      const edb::Expr scores = edb::affine({trace->param(b), trace->param(W), trace->lookup(E, word)});
      losses.push_back(edb::pick_neg_log_softmax(scores, word % 3));
    }
    trace->record_backward(edb::sum(losses) * (1.0f / 30.0f));
    return trace;
  };
  edb::Gradients gradients;  // kept across steps: its storage is reused
  float first = 0, last = 0;
  std::unique_ptr<edb::Trace> trace = record_step();
  for (int step = 0; step < 30; ++step) {
    trace->run();  // forward and backward, in the background
    std::unique_ptr<edb::Trace> next = step + 1 < 30 ? record_step() : nullptr;  // meanwhile
    trace->gradients(gradients);  // waits for this step
    optimizer.step(gradients, engine);  // on the engine's threads, before next->run(), which reads them
    if (step == 0) first = gradients.loss;
    last = gradients.loss;
    trace = std::move(next);
  }
  std::printf("mean loss %.3f at the first step, %.3f after 30 steps\n", first, last);
  return last < 0.25f * first ? 0 : 1;
}
