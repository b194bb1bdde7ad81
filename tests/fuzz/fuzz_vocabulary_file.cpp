// libFuzzer target: the reader of the vocabularies edb-run saves beside a model (PATH.vocab). Bad
// input is a UsageError; a file that reads and restores (no entry twice in a vocabulary) is written
// back by vocabularies_text (or refused, for an entry that cannot be one line) and reads again the
// same.
#include <sstream>

#include "samples/data/data.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace edb;
  samples::SavedVocabularies saved;
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  if (!fuzz::accepts([&] { saved = samples::parse_vocabularies(in, "fuzz"); })) return 0;
  std::vector<samples::Vocabulary> restored(saved.vocabularies.size());
  if (!fuzz::accepts([&] {
        for (size_t i = 0; i < restored.size(); ++i) restored[i].restore(saved.vocabularies[i].second);
      }))
    return 0;
  samples::NamedVocabularies named;
  for (size_t i = 0; i < restored.size(); ++i) named.emplace_back(saved.vocabularies[i].first, &restored[i]);
  std::string text;
  if (!fuzz::accepts([&] { text = samples::vocabularies_text(named); })) return 0;
  std::istringstream again(text);
  samples::SavedVocabularies reread;
  fuzz::require(fuzz::accepts([&] { reread = samples::parse_vocabularies(again, "fuzz-rewritten"); }),
                "written vocabularies parse");
  fuzz::require(reread.vocabularies == saved.vocabularies, "vocabularies survive vocabularies_text + parse_vocabularies");
  return 0;
}
