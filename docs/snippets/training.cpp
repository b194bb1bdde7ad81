// Training: Trace::backward records and evaluates the loss's gradients (dense per parameter,
// sparse rows per lookup table), and an Optimizer applies them. One trace per batch.
#include <edbatch/edbatch.h>
#include <edbatch/train.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

int main() {
  // A word's class is its id mod 3; the embeddings and an output layer learn it.
  edb::Model model("classifier", /*seed=*/1);
  const edb::LookupTable E = model.add_lookup("E", /*entries=*/30, /*dim=*/8);
  const edb::Parameter W = model.add_parameter("W", 3, 8), b = model.add_parameter("b", 3, 1);

  edb::OptimizerOptions options;
  options.kind = "adam";  // or "sgd", with momentum
  options.learning_rate = 0.02f;
  edb::Optimizer optimizer(model, options);
  edb::Engine engine;
  float first = 0, last = 0;
  size_t rows = 0;
  for (int step = 0; step < 30; ++step) {
    edb::Trace trace(engine);  // one batch of instances
    std::vector<edb::Expr> losses;
    for (int word = 0; word < 30; ++word) {
      const edb::Expr scores = edb::affine({trace.param(b), trace.param(W), trace.lookup(E, word)});
      losses.push_back(edb::pick_neg_log_softmax(scores, word % 3));
    }
    const edb::Expr loss = edb::sum(losses) * (1.0f / 30.0f);  // the batch's mean, 1x1
    const edb::Gradients gradients = trace.backward(loss);     // batched like the forward pass
    optimizer.step(gradients);
    if (step == 0) first = gradients.loss;
    last = gradients.loss;
    rows = gradients.of(E)->entries.size();  // the table rows this batch read
  }
  // Save the model and the optimizer's state (moments, step count) as one unit, to continue
  // later: load_training refuses a model and a state of different saves.
  const std::string path = (std::filesystem::temp_directory_path() / "edb-guide-classifier.bin").string();
  edb::save_training(model, optimizer, path);  // path and path + ".optimizer"
  edb::Optimizer resumed(model, options);
  edb::load_training(model, resumed, path);
  std::filesystem::remove(path);
  std::filesystem::remove(path + ".optimizer");

  std::printf("mean loss %.3f at the first step, %.3f after %lld steps; %zu embedding rows updated per step\n",
              first, last, (long long)resumed.steps(), rows);
  return last < 0.25f * first && rows == 30 && resumed.steps() == 30 ? 0 : 1;
}
