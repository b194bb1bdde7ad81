// edb::run_instances: resumes coroutine instances round by round over one trace, each round one
// evaluation of what they recorded (the driver's incremental submit: only nodes new since the last
// round run). What batches is the policy's and the executor's business, not this file's.
#include <string>

#include "edbatch/program.h"
#include "trace/state.h"

namespace edb::detail {

struct InstanceRunner {
  static TraceState& trace_state(Trace& trace) {
    if (!trace.active())
      throw UsageError("edb::run_instances(): the trace has finished (or its Engine was destroyed)");
    return *trace.state_;
  }
  static uint32_t trace_generation(const Trace& trace) { return trace.generation_; }

  // Whether `expr`'s value is computed already; UsageError unless it is of the trace the program runs in.
  static bool ready(const ProgramState& program, const Expr& expr) {
    if (!program.trace_)
      throw UsageError("edb::Program: co_await outside edb::run_instances()");
    TraceState& state = TraceState::of(expr, "edb::Program: co_await");
    if (&state != program.trace_)
      throw UsageError("edb::Program: co_await on an expression of another trace (node " +
                       std::to_string(expr.id_) +
                       "); an instance may await only values of the trace edb::run_instances() runs it in");
    return state.id(expr) < state.data.evaluated && !state.data.pending.load(std::memory_order_acquire);
  }

  static void end(ProgramState& program, std::exception_ptr error) {
    program.ended_ = true;
    if (!program.error_) program.error_ = std::move(error);
  }

  static InstanceReport run(Trace& trace, std::span<ProgramState* const> programs, const InstanceOptions& options) {
    TraceState& state = trace_state(trace);
    const uint32_t generation = trace_generation(trace);
    if (options.max_rounds < 0)
      throw UsageError("edb::run_instances(): InstanceOptions::max_rounds is " + std::to_string(options.max_rounds) +
                       "; expected 0 or more");
    for (size_t i = 0; i < programs.size(); ++i) {
      const ProgramState* program = programs[i];
      if (!program)
        throw UsageError("edb::run_instances(): program " + std::to_string(i) +
                         " is empty (default-constructed or moved from)");
      if (program->trace_ && (program->trace_ != &state || program->generation_ != generation))
        throw UsageError("edb::run_instances(): program " + std::to_string(i) +
                         " was started in another trace; a program runs in one trace to its end");
      for (size_t j = 0; j < i; ++j)
        if (programs[j] == program)
          throw UsageError("edb::run_instances(): programs " + std::to_string(j) + " and " + std::to_string(i) +
                           " are the same program");
    }
    std::vector<size_t> resume, waiting;
    for (size_t i = 0; i < programs.size(); ++i) {
      programs[i]->trace_ = &state;
      programs[i]->generation_ = generation;
      if (!programs[i]->ended()) resume.push_back(i);
    }

    InstanceReport report;
    while (true) {
      waiting.clear();
      for (const size_t i : resume) {
        // Exceptions inside the coroutine, a co_await's UsageError included, end up in
        // unhandled_exception: resuming never throws here.
        programs[i]->running_.resume();
        if (!programs[i]->ended()) waiting.push_back(i);
      }
      if (waiting.empty()) break;
      if (report.rounds == options.max_rounds) {
        const UsageError limit("edb::run_instances(): instance " + std::to_string(waiting.front()) + " (and " +
                               std::to_string(waiting.size() - 1) + " more) had not finished after " +
                               std::to_string(options.max_rounds) +
                               " evaluations (InstanceOptions::max_rounds); does its program wait on values forever?");
        for (const size_t i : waiting) end(*programs[i], std::make_exception_ptr(limit));
        throw limit;
      }
      ++report.rounds;
      try {
        TraceState& now = trace_state(trace);  // an instance may have finished the trace
        now.engine->driver.evaluate(now.data);
      } catch (...) {
        for (const size_t i : waiting) end(*programs[i], std::current_exception());
        throw;
      }
      resume.swap(waiting);
    }
    // A backward pass inside an instance moves the trace's generation: programs left to run again
    // in this trace keep the one it has now.
    for (ProgramState* program : programs) program->generation_ = trace_generation(trace);

    for (size_t i = 0; i < programs.size(); ++i) {
      if (programs[i]->error_) {
        ++report.failed;
        if (report.first_failed < 0) report.first_failed = int64_t(i);
      } else {
        ++report.finished;
      }
    }
    if (options.rethrow && report.first_failed >= 0) std::rethrow_exception(programs[report.first_failed]->error_);
    return report;
  }
};

bool ProgramState::ready(const Expr& expr) const { return InstanceRunner::ready(*this, expr); }

InstanceReport run_instances(Trace& trace, std::span<ProgramState* const> programs, const InstanceOptions& options) {
  return InstanceRunner::run(trace, programs, options);
}

void program_misuse(const char* message) { throw UsageError(message); }

void program_not_finished(const char* function) {
  throw UsageError(std::string(function) + ": the program has not ended; run it with edb::run_instances() first");
}

}  // namespace edb::detail
