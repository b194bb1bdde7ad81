// The kinds of error edbatch throws: UsageError for the caller's mistakes, NumericError for a
// value that came out NaN or infinite (only with EngineOptions::check_finite), InternalError for
// broken invariants inside the engine.
#pragma once

#include <stdexcept>
#include <string>

namespace edb {

// The caller did something wrong: a shape mismatch, a malformed file, a bad flag.
// The message starts with the public function (or file:line:col) and says what was expected.
class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& message) : std::runtime_error(message) {}
};

// With EngineOptions::check_finite: a node produced a NaN or an infinity. The message names the
// first such node in execution order (its op, shape and where it was recorded), the value and
// where in the node it is, and whether an input leaf it reads already held one.
class NumericError : public std::runtime_error {
 public:
  explicit NumericError(const std::string& message) : std::runtime_error(message) {}
};

// An invariant of the engine itself broke; this is a bug in edbatch, not in the caller's code.
class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& message)
      : std::logic_error("edbatch internal error: " + message) {}
};

}  // namespace edb
