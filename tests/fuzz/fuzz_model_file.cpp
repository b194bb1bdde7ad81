// libFuzzer target: the model file (Model::load) for a model with one parameter and one lookup
// table. A bad file is a UsageError that leaves the model unchanged; a loaded model saves and loads
// again to the same values. Inputs whose first byte is 1 are the file's body, given a header
// with the right magic, version, size and checksum (fuzz::binary_file_input), so the fuzzer
// reaches the entry parser.
#include <cstring>
#include <vector>

#include <edbatch/edbatch.h>

#include "tests/fuzz/fuzz_support.h"

namespace {

std::vector<float> values_of(edb::Model& model) {
  std::vector<float> all;
  for (float v : model.parameter("W").values()) all.push_back(v);
  for (float v : model.lookup("E").values()) all.push_back(v);
  return all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace edb;
  const std::string path = fuzz::binary_file_input(
      {{'E', 'D', 'B', 'M', 'O', 'D', 'E', 'L'}, 1, "model file"}, data, size);
  Model model("fuzz", 7);
  model.add_parameter("W", 3, 2);
  model.add_lookup("E", 4, 2);
  const std::vector<float> before = values_of(model);
  if (!fuzz::accepts([&] { model.load(path); })) {
    const std::vector<float> after = values_of(model);
    fuzz::require(std::memcmp(before.data(), after.data(), before.size() * sizeof(float)) == 0,
                  "a refused file leaves the model unchanged");
    return 0;
  }
  const std::string saved = fuzz::scratch_directory() + "/saved.model";
  model.save(saved);
  Model again("fuzz", 8);
  again.add_parameter("W", 3, 2);
  again.add_lookup("E", 4, 2);
  fuzz::require(fuzz::accepts([&] { again.load(saved); }), "a saved model loads");
  const std::vector<float> loaded = values_of(model), reloaded = values_of(again);
  fuzz::require(std::memcmp(loaded.data(), reloaded.data(), loaded.size() * sizeof(float)) == 0,
                "a saved model loads to the same bits");
  return 0;
}
