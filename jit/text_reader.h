// Reading the canonical texts of jit/ (kernels, cell programs) line by line, token by token, with
// errors that name the line; and the exact text of a float constant. Internal to jit/.
#pragma once

#include <bit>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "edbatch/errors.h"

namespace edb::jit {

// "0x3f000000 (0.5)": the bits decide, the decimal is for people.
inline std::string constant_text(float value) {
  char text[64];
  std::snprintf(text, sizeof text, "0x%08x (%.9g)", std::bit_cast<uint32_t>(value), double(value));
  return text;
}

// Takes the first line off `text` (without its newline) and returns it.
inline std::string_view take_line(std::string_view& text) {
  const size_t newline = text.find('\n');
  const std::string_view line = text.substr(0, newline);
  text = newline == std::string_view::npos ? std::string_view{} : text.substr(newline + 1);
  return line;
}

// One line of kernel text, read token by token; every failure names the line.
class LineReader {
 public:
  // `text`: what is read, for messages ("kernel text", "cell program text").
  LineReader(std::string_view line, size_t number, const char* text = "kernel text")
      : line_(line), number_(number), text_(text) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw UsageError(std::string(text_) + " line " + std::to_string(number_) + " ('" + std::string(line_) + "'): " + what);
  }
  std::string_view word() {
    while (at_ < line_.size() && line_[at_] == ' ') ++at_;
    const size_t begin = at_;
    while (at_ < line_.size() && line_[at_] != ' ') ++at_;
    if (begin == at_) fail("the line ends early");
    return line_.substr(begin, at_ - begin);
  }
  // The next word, or "" at the end of the line.
  std::string_view word_or_end() {
    while (at_ < line_.size() && line_[at_] == ' ') ++at_;
    return at_ == line_.size() ? std::string_view{} : word();
  }
  void expect(std::string_view token) {
    if (word() != token) fail("expected '" + std::string(token) + "'");
  }
  // "<prefix><decimal>", e.g. %3 or x0.
  int32_t number(char prefix) { return number(word(), prefix); }
  int32_t number(std::string_view w, char prefix) const {
    if (w.size() < 2 || w[0] != prefix) fail("expected " + std::string(1, prefix) + "N, got '" + std::string(w) + "'");
    int64_t value = 0;
    for (char c : w.substr(1)) {
      if (c < '0' || c > '9' || value > (int64_t{1} << 30)) fail("bad number '" + std::string(w) + "'");
      value = value * 10 + (c - '0');
    }
    return int32_t(value);
  }
  // "0x3f000000 (0.5)": the bits; the decimal must agree with them.
  float constant() {
    const std::string_view bits = word();
    uint32_t value = 0;
    if (bits.size() != 10 || bits.substr(0, 2) != "0x") fail("expected a constant as 0x and 8 hex digits");
    for (char c : bits.substr(2)) {
      const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (digit < 0) fail("bad hex digit in '" + std::string(bits) + "'");
      value = value << 4 | uint32_t(digit);
    }
    const float f = std::bit_cast<float>(value);
    if (word() != constant_text(f).substr(11)) fail("the decimal beside the constant does not match its bits");
    return f;
  }
  void end() {
    while (at_ < line_.size() && line_[at_] == ' ') ++at_;
    if (at_ != line_.size()) fail("unexpected '" + std::string(line_.substr(at_)) + "' at the end");
  }

 private:
  std::string_view line_;
  size_t number_;
  const char* text_;
  size_t at_ = 0;
};


}  // namespace edb::jit
