// libFuzzer target: the SST bracket-tree reader. Bad input is a UsageError; good input survives a
// round trip (write_tree then parse_trees gives the same trees).
#include <sstream>

#include "samples/data/data.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace edb;
  std::vector<samples::Tree> trees;
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  if (!fuzz::accepts([&] { trees = samples::parse_trees(in, "fuzz"); })) return 0;
  std::ostringstream out;
  for (const samples::Tree& tree : trees) {
    samples::write_tree(out, tree);
    (void)samples::tree_depth(tree);
  }
  std::istringstream again(out.str());
  std::vector<samples::Tree> reread;
  fuzz::require(fuzz::accepts([&] { reread = samples::parse_trees(again, "fuzz-rewritten"); }),
                "written trees parse");
  fuzz::require(reread == trees, "trees survive write_tree + parse_trees");
  return 0;
}
