// Helpers shared by the test suites: tolerant comparison of tensors and temporary files.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include <edbatch/edbatch.h>

namespace edb::testing {

// |a - b| <= tolerance * max(1, |a|, |b|) elementwise (equal infinities and two NaNs agree), with
// the first mismatch in the message.
::testing::AssertionResult near_relative(const Tensor& a, const Tensor& b, double tolerance = 1e-5);
::testing::AssertionResult near_relative(double a, double b, double tolerance = 1e-5);

// What an executor test starts from: the executor, the thread count, and verify on (checks
// between stages; new values start as NaN).
EngineOptions checked_options(const std::string& executor, int threads = 1);

// The tail of the table-driven op tests (reductions, broadcasting): every value, plain and through
// a cell, weighed by the row `w` into one loss; its backward pass, then the values read.
struct WeighedRun {
  std::vector<Tensor> plain, celled;
  Gradients gradients;
};
WeighedRun weigh_and_backward(Trace& trace, const Expr& w, const std::vector<Expr>& plain, const std::vector<Expr>& celled);

// Expects `got` to be `want` (a reference's): the loss, each of `parameters`' gradients and
// `table`'s rows and their gradients, each within 1e-4 of 1 + |want|, naming `what` and the first
// value that differs.
void expect_same_gradients(const Gradients& got, const Gradients& want, const std::vector<const Parameter*>& parameters,
                           const LookupTable& table, const std::string& what);

// The gradients of the loss `loss(trace)` records, under the reference executor with cells off.
template <typename Loss>
Gradients reference_gradients(Loss&& loss) {
  EngineOptions options;
  options.executor = "reference";
  options.cells = false;
  Engine engine(options);
  Trace trace(engine);
  return trace.backward(loss(trace));
}

// The options a backward pass is checked under: the greedy, sequential, depth and agenda policies x
// 1 and 2 threads x the planner off and on, verify on; body(options, what) for each, `what`
// naming them (also as a SCOPED_TRACE).
void for_each_backward_combination(const std::function<void(EngineOptions, const std::string&)>& body);

// A fresh directory under the system temp dir, removed when the object goes away.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// The message of the UsageError that f() throws, or "" when it throws none.
template <typename F>
std::string usage_error(F&& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

void write_file(const std::string& path, const std::string& contents);
// The layout the model and optimizer file tests use: parameters W (3x4) and b (3x1), table E (10 x 4).
void add_layout(Model& model);
// Every value of every parameter, then of every lookup table, in the order they were added.
std::vector<float> all_values(const Model& model);
// A model or optimizer file (trace/binary_file.h) with its body replaced and the header's size and
// checksum recomputed, so a test reaches the errors behind the checksum.
std::string with_binary_body(const std::string& file, const std::string& body);
std::string read_file(const std::string& path);
// The files a writer leaves behind in `directory` when it fails or is killed: ir/files.h's
// temporaries and lock files, by name, sorted.
std::vector<std::string> leftovers(const std::string& directory);

// What a program printed and how it ended.
struct ProgramRun {
  int status = -1;  // exit status, or -1 when the process did not exit normally
  std::string out, err;
};
// Runs `binary args` (args already shell-quoted where needed) with an empty stdin, capturing both
// streams. A program still running after kProgramSeconds is killed (status 124, and `err` says so),
// so a hung one fails its test instead of holding ctest.
inline constexpr int kProgramSeconds = 600;
ProgramRun run_program(const std::string& binary, const std::string& args);

// edb-run for the tests that run it: EDB_RUN_BINARY if set, else build/tools/edb-run beside this
// test binary's build/tests/.
std::string edb_run_binary();
ProgramRun run_edb(const std::string& args);
// A failing edb-run: a non-zero exit, nothing on stdout, exactly one line on stderr; returns it.
std::string one_error_line(const std::string& args);

}  // namespace edb::testing
