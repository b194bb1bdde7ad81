// A one-line progress bar on stderr, drawn only when stderr is a terminal and at most ten times a
// second, so it never slows the work or litters logs and pipes.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include <unistd.h>

namespace edb::tools {

class ProgressBar {
 public:
  explicit ProgressBar(std::string label) : label_(std::move(label)), enabled_(isatty(2) != 0) {}
  ~ProgressBar() { done(); }

  void update(int64_t done, int64_t total, const std::string& note = "") {
    if (!enabled_ || total <= 0) return;
    const auto now = std::chrono::steady_clock::now();
    if (done < total && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * done / total);
    std::fprintf(stderr, "\r%s [%s%s] %lld/%lld %s", label_.c_str(), std::string(filled, '#').c_str(),
                 std::string(kWidth - filled, '.').c_str(), static_cast<long long>(done),
                 static_cast<long long>(total), note.c_str());
    std::fflush(stderr);
    drawn_ = true;
  }

  void done() {
    if (drawn_) std::fprintf(stderr, "\r\033[K");
    drawn_ = false;
  }

 private:
  std::string label_;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace edb::tools
