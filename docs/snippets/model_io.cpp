// Models: named parameters and lookup tables, set through values(), saved and loaded.
#include <edbatch/edbatch.h>

#include <cstdio>
#include <filesystem>
#include <string>

int main() {
  edb::Model model("tagger", /*seed=*/7);
  edb::LookupTable E = model.add_lookup("E", /*entries=*/100, /*dim=*/8);
  edb::Parameter W = model.add_parameter("W", 5, 8);
  for (float& v : W.values()) v = 0.01f;  // column-major floats, writable in place

  edb::Engine engine;
  edb::Trace trace(engine);
  edb::Expr word = trace.lookup(E, 42);                   // an 8x1 embedding
  edb::Expr scores = edb::matmul(trace.param(W), word);   // 5x1
  const float before = scores.value()(0);

  const std::string path = (std::filesystem::temp_directory_path() / "edb-guide-model.bin").string();
  model.save(path);  // names, shapes, values and a checksum
  edb::Model copy("tagger", /*seed=*/99);  // different initial values...
  copy.add_lookup("E", 100, 8);
  copy.add_parameter("W", 5, 8);
  copy.load(path);  // ...replaced by the saved ones (every name and shape must match)
  std::filesystem::remove(path);

  edb::Trace again(engine);
  const float after = edb::matmul(again.param(copy.parameter("W")), again.lookup(copy.lookup("E"), 42)).value()(0);
  std::printf("%zu parameters, %lld floats; score %g before, %g after loading\n", model.parameter_count(),
              (long long)model.value_count(), before, after);
  return before == after ? 0 : 1;
}
