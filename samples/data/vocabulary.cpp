// Vocabulary: strings to dense ids for embedding lookups, with id 0 kept for "<unk>".
// Freezing after training-set construction makes unseen test words map to <unk>.
#include <edbatch/errors.h>

#include "samples/data/data.h"

namespace edb::samples {

Vocabulary::Vocabulary() {
  words_.push_back("<unk>");
  ids_.emplace("<unk>", 0);
}

int Vocabulary::add(const std::string& word) {
  auto it = ids_.find(word);
  if (it != ids_.end()) return it->second;
  if (frozen_) return 0;
  const int id = static_cast<int>(words_.size());
  words_.push_back(word);
  ids_.emplace(word, id);
  return id;
}

int Vocabulary::id(const std::string& word) const {
  auto it = ids_.find(word);
  return it == ids_.end() ? 0 : it->second;
}

const std::string& Vocabulary::word(int id) const {
  if (id < 0 || id >= size()) {
    throw UsageError("edb::samples::Vocabulary::word(): expected an id in 0.." +
                     std::to_string(size() - 1) + ", found " + std::to_string(id));
  }
  return words_[id];
}

int Vocabulary::size() const { return static_cast<int>(words_.size()); }

void Vocabulary::freeze() { frozen_ = true; }

bool Vocabulary::frozen() const { return frozen_; }

}  // namespace edb::samples
