// Vocabulary: strings to dense ids for embedding lookups, with id 0 kept for "<unk>".
// Freezing after training-set construction makes unseen test words map to <unk>.
#include <edbatch/errors.h>

#include <string>

#include "samples/data/data.h"
#include "samples/models.h"

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

void Vocabulary::restore(const std::vector<std::string>& words) {
  if (words.empty() || words[0] != "<unk>")
    throw UsageError("edb::samples::Vocabulary::restore(): the first entry must be <unk>");
  words_ = words;
  ids_.clear();
  for (size_t i = 0; i < words_.size(); ++i)
    if (!ids_.emplace(words_[i], int(i)).second)
      throw UsageError("edb::samples::Vocabulary::restore(): '" + words_[i] + "' appears twice");
  frozen_ = true;
}

namespace {
constexpr std::string_view kVocabulariesHeader = "edbatch vocabularies 1";
}

std::string vocabularies_text(const NamedVocabularies& vocabularies) {
  std::string text(kVocabulariesHeader);
  text += '\n';
  for (const auto& [name, vocabulary] : vocabularies) {
    text += name + ' ' + std::to_string(vocabulary->size()) + '\n';
    for (const std::string& word : vocabulary->words()) {
      if (word.empty() || word.find_first_of("\n\r") != std::string::npos)
        throw UsageError("edb::samples::vocabularies_text(): vocabulary '" + name + "' holds an entry that is not one line");
      text += word;
      text += '\n';
    }
  }
  return text;
}

SavedVocabularies parse_vocabularies(std::istream& in, const std::string& path) {
  SavedVocabularies saved;
  saved.path = path;
  std::string line;
  int number = 0;
  auto next = [&](std::string_view expected) {
    if (!std::getline(in, line)) detail::throw_parse_error(path, number + 1, 1, expected, "end of file");
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
  };
  next(kVocabulariesHeader);
  if (line != kVocabulariesHeader) detail::throw_parse_error(path, number, 1, kVocabulariesHeader, "'" + line + "'");
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    size_t count = 0;
    try {
      size_t used = 0;
      if (space == std::string::npos || space == 0) throw std::invalid_argument("no count");
      count = std::stoul(line.substr(space + 1), &used);
      if (used != line.size() - space - 1 || count == 0) throw std::invalid_argument("not a count");
    } catch (const std::exception&) {
      detail::throw_parse_error(path, number, 1, "a vocabulary's NAME COUNT", "'" + line + "'");
    }
    auto& [name, words] = saved.vocabularies.emplace_back(line.substr(0, space), std::vector<std::string>{});
    for (size_t i = 0; i < count; ++i) {
      const std::string expected =
          "entry " + std::to_string(i + 1) + " of " + std::to_string(count) + " of vocabulary '" + name + "'";
      next(expected);
      if (line.empty()) detail::throw_parse_error(path, number, 1, expected, "an empty line");
      words.push_back(line);
    }
    if (words[0] != "<unk>") detail::throw_parse_error(path, number - int(count) + 1, 1, "<unk>", "'" + words[0] + "'");
  }
  return saved;
}

bool restore_vocabulary(const ModelConfig& config, const std::string& name, Vocabulary& v) {
  if (!config.vocabularies) return false;
  for (const auto& [saved_name, words] : config.vocabularies->vocabularies)
    if (saved_name == name) {
      try {
        v.restore(words);
      } catch (const UsageError& e) {
        throw UsageError("'" + config.vocabularies->path + "': vocabulary '" + name + "': " + e.what());
      }
      return true;
    }
  throw UsageError("'" + config.vocabularies->path + "' has no vocabulary '" + name +
                   "': it was saved with another model");
}

int label_id(Vocabulary& labels, const std::string& label, const std::string& what, const ModelConfig& config) {
  const int id = labels.add(label);
  if (id == 0 && labels.frozen())
    throw UsageError(what + " '" + label + "' is not one of the " + std::to_string(labels.size() - 1) +
                     " the model was trained with (" + (config.vocabularies ? config.vocabularies->path : "") + ")");
  return id;
}

}  // namespace edb::samples
