// Character lattices as JSON Lines: {"chars":[...],"words":[[start,end,"word"],...],"labels":[...]}.
// nlohmann-json parses each line; a small scanner over the (valid) line finds the column of a
// value that fails the schema, since the DOM keeps no positions.
#include <fstream>
#include <ostream>
#include <variant>

#include <nlohmann/json.hpp>

#include <edbatch/errors.h>

#include "samples/data/data.h"

namespace edb::samples {
namespace {

using nlohmann::json;

constexpr std::string_view kJsonStops = "[]{},:\"";

// Byte offsets inside a line that nlohmann has already accepted as JSON.
size_t skip_spaces(std::string_view text, size_t pos) {
  while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t' || text[pos] == '\n' ||
                               text[pos] == '\r')) {
    ++pos;
  }
  return pos;
}

size_t skip_string(std::string_view text, size_t pos) {  // pos at the opening quote
  for (++pos; pos < text.size() && text[pos] != '"'; ++pos) {
    if (text[pos] == '\\') ++pos;
  }
  return pos + 1;
}

size_t skip_value(std::string_view text, size_t pos) {
  if (text[pos] == '"') return skip_string(text, pos);
  if (text[pos] != '[' && text[pos] != '{') {
    while (pos < text.size() && kJsonStops.find(text[pos]) == std::string_view::npos &&
           text[pos] != ' ' && text[pos] != '\t') {
      ++pos;
    }
    return pos;
  }
  int depth = 0;
  while (pos < text.size()) {
    char c = text[pos];
    if (c == '"') {
      pos = skip_string(text, pos);
      continue;
    }
    if (c == '[' || c == '{') ++depth;
    if ((c == ']' || c == '}') && --depth == 0) return pos + 1;
    ++pos;
  }
  return pos;
}

// A path step: an object key or an array index.
using Step = std::variant<std::string_view, size_t>;

// Offset of the value at path, starting from the root value; stops early where a step is missing.
size_t locate(std::string_view text, std::initializer_list<Step> path) {
  size_t pos = skip_spaces(text, 0);
  for (const Step& step : path) {
    if (pos >= text.size()) return pos;
    size_t container = pos;
    pos = skip_spaces(text, pos + 1);
    size_t index = 0;
    bool found = false;
    while (pos < text.size() && text[pos] != ']' && text[pos] != '}') {
      if (const auto* key = std::get_if<std::string_view>(&step)) {
        size_t key_end = skip_string(text, pos);
        bool match = text.substr(pos + 1, key_end - pos - 2) == *key;
        pos = skip_spaces(text, skip_spaces(text, key_end) + 1);  // past ':'
        if (match) found = true;
      } else if (index++ == std::get<size_t>(step)) {
        found = true;
      }
      if (found) break;
      pos = skip_spaces(text, skip_value(text, pos));
      if (pos < text.size() && text[pos] == ',') pos = skip_spaces(text, pos + 1);
    }
    if (!found) return container;
  }
  return pos;
}

class LatticeLineParser {
 public:
  LatticeLineParser(std::string_view line, const std::string& name, int line_number)
      : line_(line), name_(name), line_number_(line_number) {}

  Lattice parse() {
    json root;
    try {
      root = json::parse(line_.begin(), line_.end());
    } catch (const json::parse_error& error) {
      fail_json_syntax(error);
    } catch (const json::exception& error) {  // out_of_range: a number too large for a double
      fail_json_value(error);
    }
    if (!root.is_object()) fail({}, "JSON object", found(root));
    Lattice lattice;
    lattice.chars = string_array(root, "chars");
    if (lattice.chars.empty()) fail({"chars"}, "at least one char in \"chars\"", "empty array");
    const json& words = member(root, "words");
    if (!words.is_array()) fail({"words"}, "array of arcs for \"words\"", found(words));
    const int64_t char_count = static_cast<int64_t>(lattice.chars.size());
    for (size_t i = 0; i < words.size(); ++i) {
      const json& arc = words[i];
      if (!arc.is_array() || arc.size() != 3) {
        fail({"words", i}, "arc [start, end, word]",
             arc.is_array() ? "array of " + std::to_string(arc.size()) + " elements" : found(arc));
      }
      int64_t start = integer(arc[0], {"words", i, size_t{0}}, "integer arc start");
      int64_t end = integer(arc[1], {"words", i, size_t{1}}, "integer arc end");
      if (start < 0 || start >= char_count) {
        fail({"words", i, size_t{0}}, "arc start in 0.." + std::to_string(char_count - 1),
             arc[0].dump());
      }
      if (end <= start) {
        fail({"words", i, size_t{1}}, "arc end > start " + std::to_string(start), arc[1].dump());
      }
      if (end >= char_count) {
        fail({"words", i, size_t{1}},
             "arc end < " + std::to_string(char_count) + " (the number of chars)", arc[1].dump());
      }
      if (!arc[2].is_string()) fail({"words", i, size_t{2}}, "string arc word", found(arc[2]));
      lattice.words.push_back({static_cast<int>(start), static_cast<int>(end),
                               arc[2].get<std::string>()});
    }
    lattice.labels = string_array(root, "labels");
    if (lattice.labels.size() != lattice.chars.size()) {
      fail({"labels"}, std::to_string(char_count) + " labels (one per char)",
           std::to_string(lattice.labels.size()));
    }
    return lattice;
  }

 private:
  static std::string found(const json& value) {
    if (value.is_array() || value.is_object()) return value.type_name();
    std::string text = value.dump();
    return text.size() > 20 ? text.substr(0, 20) + "..." : text;
  }

  const json& member(const json& object, const char* key) const {
    auto it = object.find(key);
    if (it == object.end()) {  // point at the root's closing brace
      size_t close = skip_value(line_, skip_spaces(line_, 0)) - 1;
      detail::throw_parse_error(name_, line_number_, static_cast<int>(close) + 1,
                                std::string("field \"") + key + "\"", "end of object");
    }
    return *it;
  }

  std::vector<std::string> string_array(const json& root, const char* key) const {
    const json& array = member(root, key);
    std::string field = std::string("\"") + key + "\"";
    if (!array.is_array()) fail({key}, "array of strings for " + field, found(array));
    std::vector<std::string> strings;
    strings.reserve(array.size());
    for (size_t i = 0; i < array.size(); ++i) {
      if (!array[i].is_string()) fail({key, i}, "string in " + field, found(array[i]));
      strings.push_back(array[i].get<std::string>());
    }
    return strings;
  }

  int64_t integer(const json& value, std::initializer_list<Step> path,
                  std::string_view expected) const {
    if (value.is_number_unsigned()) {
      uint64_t number = value.get<uint64_t>();
      return number > uint64_t{INT64_MAX} ? INT64_MAX : static_cast<int64_t>(number);
    }
    if (!value.is_number_integer()) fail(path, expected, found(value));
    return value.get<int64_t>();
  }

  [[noreturn]] void fail(std::initializer_list<Step> path, std::string_view expected,
                         std::string_view found_text) const {
    size_t pos = locate(line_, path);
    detail::throw_parse_error(name_, line_number_, static_cast<int>(pos) + 1, expected, found_text);
  }

  // nlohmann reports "...; expected X" when it knows X, and the byte of the last character read.
  [[noreturn]] void fail_json_syntax(const json::parse_error& error) const {
    std::string message = error.what();
    std::string expected = "valid JSON";
    size_t expected_at = message.rfind("; expected ");
    if (expected_at != std::string::npos) {
      expected = message.substr(expected_at + 11);
    } else if (size_t reason_at = message.find(" - "); reason_at != std::string::npos) {
      size_t reason_end = message.find(';', reason_at);
      expected += " (" + message.substr(reason_at + 3, reason_end - reason_at - 3) + ")";
    }
    size_t pos = error.byte == 0 ? 0 : std::min<size_t>(error.byte - 1, line_.size());
    detail::throw_parse_error(name_, line_number_, static_cast<int>(pos) + 1, expected,
                              detail::describe_at(line_, pos, kJsonStops));
  }

  // nlohmann names the offending token ("number overflow parsing '2e2226'") but not its byte.
  [[noreturn]] void fail_json_value(const json::exception& error) const {
    std::string message = error.what();
    size_t pos = 0;
    size_t open = message.find('\''), close = message.rfind('\'');
    if (open != std::string::npos && close > open) {
      size_t at = line_.find(std::string_view(message).substr(open + 1, close - open - 1));
      if (at != std::string_view::npos) pos = at;
    }
    const size_t tag_end = message.find("] ");  // after nlohmann's "[json.exception...]" tag
    const std::string reason = tag_end == std::string::npos ? message : message.substr(tag_end + 2);
    detail::throw_parse_error(name_, line_number_, static_cast<int>(pos) + 1,
                              "a number that fits a double", reason);
  }

  std::string_view line_;
  const std::string& name_;
  int line_number_;
};

}  // namespace

std::vector<Lattice> parse_lattices(std::istream& in, const std::string& name) {
  std::vector<Lattice> lattices;
  detail::for_each_line(in, [&](std::string_view line, int line_number) {
    lattices.push_back(LatticeLineParser(line, name, line_number).parse());
  });
  return lattices;
}

std::vector<Lattice> read_lattices(const std::string& path) {
  std::ifstream file;
  detail::open_or_throw(file, path, "read_lattices");
  return parse_lattices(file, path);
}

void write_lattice(std::ostream& out, const Lattice& lattice) {
  auto fail = [](const std::string& what) {
    throw UsageError("edb::samples::write_lattice(): " + what);
  };
  const int char_count = static_cast<int>(lattice.chars.size());
  if (char_count == 0) fail("expected at least one char, found none");
  if (lattice.labels.size() != lattice.chars.size()) {
    fail("expected " + std::to_string(char_count) + " labels (one per char), found " +
         std::to_string(lattice.labels.size()));
  }
  nlohmann::ordered_json object;  // keeps the key order of gen_lattice.py
  object["chars"] = lattice.chars;
  nlohmann::ordered_json& words = object["words"] = nlohmann::ordered_json::array();
  for (const LatticeArc& arc : lattice.words) {
    if (arc.start < 0 || arc.end <= arc.start || arc.end >= char_count) {
      fail("expected arcs with 0 <= start < end < " + std::to_string(char_count) + ", found " +
           std::to_string(arc.start) + ".." + std::to_string(arc.end));
    }
    words.push_back(nlohmann::ordered_json::array({arc.start, arc.end, arc.word}));
  }
  object["labels"] = lattice.labels;
  try {
    out << object.dump() << '\n';
  } catch (const json::type_error& error) {
    fail(std::string("cannot encode as JSON: ") + error.what());
  }
}

}  // namespace edb::samples
