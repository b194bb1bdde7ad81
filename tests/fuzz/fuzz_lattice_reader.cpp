// libFuzzer target: the lattice JSON Lines reader. Bad input is a UsageError; good input survives a
// round trip (write_lattice then parse_lattices gives the same lattices).
#include <sstream>

#include "samples/data/data.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace edb;
  std::vector<samples::Lattice> lattices;
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  if (!fuzz::accepts([&] { lattices = samples::parse_lattices(in, "fuzz"); })) return 0;
  std::ostringstream out;
  for (const samples::Lattice& lattice : lattices) samples::write_lattice(out, lattice);
  std::istringstream again(out.str());
  std::vector<samples::Lattice> reread;
  fuzz::require(fuzz::accepts([&] { reread = samples::parse_lattices(again, "fuzz-rewritten"); }),
                "written lattices parse");
  fuzz::require(reread == lattices, "lattices survive write_lattice + parse_lattices");
  return 0;
}
