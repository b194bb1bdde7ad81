// Tagged sentences, one per line: "word|tag word|tag ..." with single spaces (the format of
// dynet-benchmark's bilstm-tagger). Parse and write, and the ids the taggers record with.
#include <fstream>
#include <map>
#include <ostream>

#include <edbatch/errors.h>

#include "samples/data/data.h"

namespace edb::samples {
namespace {

constexpr std::string_view kTaggedStops = "|";

TaggedSentence parse_tagged_line(std::string_view line, const std::string& name, int line_number) {
  auto fail = [&](size_t pos, std::string_view expected) {
    detail::throw_parse_error(name, line_number, static_cast<int>(pos) + 1, expected,
                              detail::describe_at(line, pos, kTaggedStops));
  };
  TaggedSentence sentence;
  size_t pos = 0;
  for (;;) {
    size_t end = line.find(' ', pos);
    if (end == std::string_view::npos) end = line.size();
    if (end == pos) fail(pos, "word|tag token");
    std::string_view token = line.substr(pos, end - pos);
    // Tabs and carriage returns are not part of a token (write_tagged refuses them).
    if (size_t blank = token.find_first_of("\t\r"); blank != std::string_view::npos)
      fail(pos + blank, "a single ' ' between tokens");
    size_t bar = token.find('|');
    if (bar == std::string_view::npos) fail(pos, "word|tag token");
    if (bar == 0) fail(pos, "word before '|'");
    if (bar + 1 == token.size()) fail(pos + bar + 1, "tag after '|'");
    size_t second_bar = token.find('|', bar + 1);
    if (second_bar != std::string_view::npos) fail(pos + second_bar, "' ' or end of line after tag");
    sentence.words.emplace_back(token.substr(0, bar));
    sentence.tags.emplace_back(token.substr(bar + 1));
    if (end == line.size()) return sentence;
    pos = end + 1;
  }
}

void check_token(std::string_view text, const char* what, size_t index) {
  if (text.empty() || text.find_first_of(" |\t\r\n") != std::string_view::npos) {
    throw UsageError("edb::samples::write_tagged(): " + std::string(what) + " " +
                     std::to_string(index) + " is '" + std::string(text) +
                     "', expected non-empty text without spaces or '|'");
  }
}

}  // namespace

std::vector<TaggedSentence> parse_tagged(std::istream& in, const std::string& name) {
  std::vector<TaggedSentence> sentences;
  detail::for_each_line(in, [&](std::string_view line, int line_number) {
    sentences.push_back(parse_tagged_line(line, name, line_number));
  });
  return sentences;
}

std::vector<TaggedSentence> read_tagged(const std::string& path) {
  std::ifstream file;
  detail::open_or_throw(file, path, "read_tagged");
  return parse_tagged(file, path);
}

void write_tagged(std::ostream& out, const TaggedSentence& sentence) {
  if (sentence.words.size() != sentence.tags.size() || sentence.words.empty()) {
    throw UsageError("edb::samples::write_tagged(): expected as many tags as words (at least one), "
                     "found " + std::to_string(sentence.words.size()) + " words and " +
                     std::to_string(sentence.tags.size()) + " tags");
  }
  std::string text;
  for (size_t i = 0; i < sentence.words.size(); ++i) {
    check_token(sentence.words[i], "word", i);
    check_token(sentence.tags[i], "tag", i);
    if (i > 0) text += ' ';
    text.append(sentence.words[i]).append(1, '|').append(sentence.tags[i]);
  }
  text += '\n';
  out << text;
}

TaggedIds tagged_ids(const std::vector<TaggedSentence>& sentences, int frequent, Spell spell, Vocabulary& words,
                     Vocabulary& chars, Vocabulary& tags, const ModelConfig& config, const std::string& model) {
  const bool restored = restore_vocabulary(config, "words", words);
  if (spell != Spell::none) restore_vocabulary(config, "chars", chars);
  restore_vocabulary(config, "tags", tags);
  std::map<std::string, int> seen;
  if (frequent > 0 && !restored)
    for (const TaggedSentence& sentence : sentences)
      for (const std::string& word : sentence.words) ++seen[word];
  TaggedIds ids;
  for (const TaggedSentence& sentence : sentences) {
    std::vector<int>& word_ids = ids.words.emplace_back();
    std::vector<int>& tag_ids = ids.tags.emplace_back();
    std::vector<std::vector<int>>& spelled = ids.letters.emplace_back();
    for (size_t w = 0; w < sentence.words.size(); ++w) {
      const std::string& word = sentence.words[w];
      const bool rare = frequent > 0 && (restored ? words.id(word) == 0 : seen[word] < frequent);
      word_ids.push_back(rare ? 0 : words.add(word));
      std::vector<int>& letters = spelled.emplace_back();
      if (spell == Spell::every || (spell == Spell::rare && rare))
        for (char c : word) letters.push_back(chars.add(std::string(1, c)));
      tag_ids.push_back(label_id(tags, sentence.tags[w], "edb-run " + model + ": tag", config) - 1);
    }
  }
  words.freeze();
  chars.freeze();
  tags.freeze();
  return ids;
}

}  // namespace edb::samples
