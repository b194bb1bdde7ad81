// libFuzzer target: the word|tag sentence reader. Bad input is a UsageError; good input survives a
// round trip (write_tagged then parse_tagged gives the same sentences).
#include <sstream>

#include "samples/data/data.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace edb;
  std::vector<samples::TaggedSentence> sentences;
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  if (!fuzz::accepts([&] { sentences = samples::parse_tagged(in, "fuzz"); })) return 0;
  std::ostringstream out;
  for (const samples::TaggedSentence& sentence : sentences) samples::write_tagged(out, sentence);
  std::istringstream again(out.str());
  std::vector<samples::TaggedSentence> reread;
  fuzz::require(fuzz::accepts([&] { reread = samples::parse_tagged(again, "fuzz-rewritten"); }),
                "written sentences parse");
  fuzz::require(reread == sentences, "sentences survive write_tagged + parse_tagged");
  return 0;
}
