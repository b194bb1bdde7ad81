// libFuzzer target: the optimizer state file (Optimizer::load), loaded by an Adam and an SGD
// (momentum) optimizer, each over a model with one parameter and one lookup table and one step
// taken. A bad file is a UsageError that leaves the optimizer's state unchanged; a loaded state
// saves and loads again to the same bytes, and steps. Inputs whose first byte is 1 are the file's
// body, given a header with the right magic, version, size and checksum (fuzz::binary_file_input),
// so the fuzzer reaches the body parser.
#include <algorithm>
#include <fstream>
#include <iterator>

#include <edbatch/edbatch.h>
#include <edbatch/train.h>

#include "tests/fuzz/fuzz_support.h"

namespace {

using namespace edb;

void add_layout(Model& model) {
  model.add_parameter("W", 3, 2);
  model.add_lookup("E", 4, 2);
}

// A gradient for all of W and for E's entries 1 and 3.
Gradients gradients_for(Model& model) {
  Gradients g;
  const Parameter w = model.parameter("W");
  g.parameters.push_back({w, Tensor{3, 2, std::vector<float>(6, 0.5f)}});
  g.tables.push_back({model.lookup("E"), {1, 3}, std::vector<float>(4, 0.25f)});
  return g;
}

// The optimizer's whole state, as its file's bytes.
std::string state_of(const Optimizer& optimizer, const char* name) {
  const std::string path = fuzz::scratch_directory() + "/" + name;
  optimizer.save(path);
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void check(const std::string& path, const OptimizerOptions& options) {
  Model model("fuzz", 7);
  add_layout(model);
  Optimizer optimizer(model, options);
  optimizer.step(gradients_for(model));
  const std::string before = state_of(optimizer, "before.state");
  if (!fuzz::accepts([&] { optimizer.load(path); })) {
    fuzz::require(state_of(optimizer, "after.state") == before,
                  "a refused file leaves the optimizer unchanged");
    return;
  }
  const std::string saved = state_of(optimizer, "saved.state");
  Model other("fuzz", 8);
  add_layout(other);
  // The same values: the state file records the checksum of the model's values it goes with.
  std::ranges::copy(model.parameter("W").values(), other.parameter("W").values().begin());
  std::ranges::copy(model.lookup("E").values(), other.lookup("E").values().begin());
  OptimizerOptions changed = options;
  changed.learning_rate *= 2;
  Optimizer again(other, changed);
  fuzz::require(fuzz::accepts([&] { again.load(fuzz::scratch_directory() + "/saved.state"); }),
                "a saved state loads");
  fuzz::require(state_of(again, "reloaded.state") == saved, "a saved state loads to the same bytes");
  // The loaded moments are used (ASan watches their sizes, UBSan the step count).
  optimizer.step(gradients_for(model));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::binary_file_input(
      {{'E', 'D', 'B', 'O', 'P', 'T', 'I', 'M'}, 1, "optimizer state file"}, data, size);
  OptimizerOptions adam;
  adam.kind = "adam";
  adam.learning_rate = 0.01f;
  OptimizerOptions sgd;
  sgd.momentum = 0.9f;
  check(path, adam);  // a file holds one kind's state: the other optimizer refuses it
  check(path, sgd);
  return 0;
}
