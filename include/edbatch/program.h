// Programs that branch on their own values, still batched: each instance is a C++20 coroutine
// (`edb::Program`) that records ops into a trace and `co_await`s an Expr's value; run_instances()
// resumes every instance until it waits or ends, evaluates what all of them recorded in one batched
// evaluation of the trace (the engine's policy, executor and cells), and resumes those whose value
// is ready, until all have ended. The runner lives in trace/program.cpp.
#pragma once

#include <coroutine>
#include <cstdint>
#include <exception>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "edbatch/edbatch.h"

namespace edb {

template <class T = void>
class Program;

// How run_instances() runs its instances.
struct InstanceOptions {
  // Evaluations at most. When they are spent, every instance not yet ended ends with a UsageError
  // naming it, and run_instances() throws that error: a guard against a program that never ends.
  int64_t max_rounds = 10000;
  // After every instance has ended, rethrow the exception of the first (lowest index) instance that
  // an exception ended; false: only report it (InstanceReport, Program::error()).
  bool rethrow = true;
};

// What one run_instances() call did.
struct InstanceReport {
  int64_t rounds = 0;        // evaluations of the trace, each batched across the instances waiting then
  int64_t finished = 0;      // instances that returned
  int64_t failed = 0;        // instances an exception ended (Program::error())
  int64_t first_failed = -1; // the lowest index among them, or -1
};

namespace detail {

struct InstanceRunner;

// What every program's promise shares, whatever it returns: its coroutine, the trace it runs in,
// and the exception that ended it.
class ProgramState {
 public:
  ProgramState() : root_(this) {}
  ProgramState(const ProgramState&) = delete;
  ProgramState& operator=(const ProgramState&) = delete;
  std::suspend_always initial_suspend() noexcept { return {}; }  // runs only under run_instances()
  // The Program destroys the frame. A sub-program hands control back to its caller here.
  struct FinalAwaiter {
    ProgramState* program;
    bool await_ready() const noexcept { return false; }
    std::coroutine_handle<> await_suspend(std::coroutine_handle<>) const noexcept { return program->finish(); }
    void await_resume() const noexcept {}
  };
  FinalAwaiter final_suspend() noexcept { return FinalAwaiter{this}; }
  void unhandled_exception() noexcept { error_ = std::current_exception(); }

  // `co_await expr`: the value of `expr`, an Expr of the trace the instance runs in. Suspends the
  // instance until the next evaluation unless the value is already computed.
  struct ValueAwaiter {
    const ProgramState* program;
    Expr expr;
    bool await_ready() const { return program->ready(expr); }  // UsageError: another trace's Expr
    void await_suspend(std::coroutine_handle<>) const noexcept {}
    Tensor await_resume() const { return expr.value(); }
  };
  ValueAwaiter await_transform(const Expr& expr) const { return ValueAwaiter{this, expr}; }

  // `co_await program(t, ...)`: a sub-program, run inside this one (its waits are this instance's)
  // until it returns its result or rethrows its exception here. UsageError for an empty Program
  // or one that has run before.
  template <class U>
  struct SubprogramAwaiter {
    Program<U> program;
    ProgramState* caller;
    bool await_ready() const;
    std::coroutine_handle<> await_suspend(std::coroutine_handle<> caller_handle);
    decltype(auto) await_resume();
  };
  template <class U>
  SubprogramAwaiter<U> await_transform(Program<U>&& program) {
    return SubprogramAwaiter<U>{std::move(program), this};
  }

  bool ended() const { return ended_ || (handle_ && handle_.done()); }
  const std::exception_ptr& error() const { return error_; }

 protected:
  std::coroutine_handle<> handle_;

 private:
  friend struct InstanceRunner;
  template <class U>
  friend class edb::Program;
  bool ready(const Expr& expr) const;  // defined in trace/program.cpp
  // Where control goes when this program ends: its caller, for a sub-program (the innermost
  // running sub-program becomes the caller again); nowhere, back to the runner, for an instance.
  std::coroutine_handle<> finish() noexcept {
    if (!caller_) return std::noop_coroutine();
    root_->running_ = caller_;
    return caller_;
  }
  TraceState* trace_ = nullptr;        // the trace run_instances() first ran it in, and its generation
  uint32_t generation_ = 0;
  ProgramState* root_;                 // the instance this program runs in (itself for an instance)
  std::coroutine_handle<> caller_;     // a sub-program's caller
  std::coroutine_handle<> running_;    // an instance's innermost running program: what to resume
  bool ended_ = false;  // ended by the runner (a round limit, an evaluation error), not by the coroutine
  std::exception_ptr error_;
};

template <class T>
struct ProgramResult {
  std::optional<T> result;
  template <class U>
  void return_value(U&& value) {
    result.emplace(std::forward<U>(value));
  }
};
template <>
struct ProgramResult<void> {
  void return_void() noexcept {}
};

InstanceReport run_instances(Trace& trace, std::span<ProgramState* const> programs, const InstanceOptions& options);
[[noreturn]] void program_not_finished(const char* function);
[[noreturn]] void program_misuse(const char* message);  // a UsageError with `message`

}  // namespace detail

// One instance's program: a coroutine that takes the trace (and its input) by reference, records
// ops, reads values with `co_await expr` (a Tensor), may `co_await` a sub-program (another
// Program, run inside it), and co_returns a T. Created suspended; only run_instances() runs it (or
// a caller awaiting it). Move-only; destroying it destroys the coroutine wherever it stopped.
template <class T>
class Program {
 public:
  struct promise_type : detail::ProgramState, detail::ProgramResult<T> {
    Program get_return_object() {
      auto handle = std::coroutine_handle<promise_type>::from_promise(*this);
      this->handle_ = handle;
      this->running_ = handle;
      return Program(handle);
    }
  };

  Program() = default;
  Program(Program&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
  Program& operator=(Program&& other) noexcept {
    if (this != &other) {
      if (handle_) handle_.destroy();
      handle_ = std::exchange(other.handle_, {});
    }
    return *this;
  }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  ~Program() {
    if (handle_) handle_.destroy();
  }

  bool valid() const { return bool(handle_); }
  // Ended: returned, or ended by an exception (its own, or the runner's: a round limit, an
  // evaluation error).
  bool done() const { return handle_ && handle_.promise().ended(); }
  bool failed() const { return handle_ && handle_.promise().error() != nullptr; }
  std::exception_ptr error() const { return handle_ ? handle_.promise().error() : nullptr; }
  // What it returned; rethrows the exception that ended it; a UsageError before it has ended.
  decltype(auto) result() const {
    if (!done()) detail::program_not_finished("edb::Program::result()");
    if (failed()) std::rethrow_exception(error());
    if constexpr (!std::is_void_v<T>) return (*handle_.promise().result);
  }

 private:
  template <class U>
  friend InstanceReport run_instances(Trace& trace, std::span<Program<U>> programs, const InstanceOptions& options);
  friend class detail::ProgramState;
  explicit Program(std::coroutine_handle<promise_type> handle) : handle_(handle) {}
  std::coroutine_handle<promise_type> handle_;
};

namespace detail {

template <class U>
bool ProgramState::SubprogramAwaiter<U>::await_ready() const {
  if (!program.handle_) program_misuse("edb::Program: co_await on an empty Program (default-constructed or moved from)");
  if (program.handle_.promise().trace_ || program.handle_.done())
    program_misuse("edb::Program: co_await on a Program that has run before; a sub-program runs once, inside its caller");
  return false;
}

template <class U>
std::coroutine_handle<> ProgramState::SubprogramAwaiter<U>::await_suspend(std::coroutine_handle<> caller_handle) {
  ProgramState& callee = program.handle_.promise();
  callee.trace_ = caller->trace_;
  callee.generation_ = caller->generation_;
  callee.root_ = caller->root_;
  callee.caller_ = caller_handle;
  caller->root_->running_ = program.handle_;
  return program.handle_;  // starts it now, in this pass
}

template <class U>
decltype(auto) ProgramState::SubprogramAwaiter<U>::await_resume() {
  ProgramState& callee = program.handle_.promise();
  if (callee.error_) std::rethrow_exception(callee.error_);
  if constexpr (!std::is_void_v<U>) return std::move(*program.handle_.promise().result);
}

}  // namespace detail

// Runs the instances in one trace until each has ended: resumes every live instance (in index
// order) until it waits on a value or ends; evaluates what all of them recorded, as one evaluation
// of the trace (batched across instances by the engine's policy, run by its executor, cells
// included; only the nodes recorded since the last evaluation run); resumes every instance that was
// waiting; and so on. Instances that ended before are skipped. Errors (docs/guide.md):
//  - an exception inside an instance (its own code, an op's UsageError, a co_await on an Expr of
//    another trace) ends that instance alone; the others run to their end; then, with
//    InstanceOptions::rethrow, the first failed instance's exception is rethrown;
//  - an evaluation's error (a NumericError under check_finite) ends every instance waiting on it
//    and is rethrown;
//  - instances still live after InstanceOptions::max_rounds evaluations end with a UsageError,
//    which is thrown.
// UsageError before anything runs: an empty Program, or one started in another trace.
template <class T>
InstanceReport run_instances(Trace& trace, std::span<Program<T>> programs, const InstanceOptions& options = {}) {
  std::vector<detail::ProgramState*> states;
  states.reserve(programs.size());
  for (Program<T>& program : programs)
    states.push_back(program.handle_ ? static_cast<detail::ProgramState*>(&program.handle_.promise()) : nullptr);
  return detail::run_instances(trace, states, options);
}
template <class T>
InstanceReport run_instances(Trace& trace, std::vector<Program<T>>& programs, const InstanceOptions& options = {}) {
  return run_instances(trace, std::span<Program<T>>(programs), options);
}

}  // namespace edb
