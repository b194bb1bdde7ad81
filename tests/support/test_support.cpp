// Shared test helpers.
#include "tests/support/test_support.h"

#include "ir/files.h"
#include "trace/binary_file.h"

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace edb::testing {

WeighedRun weigh_and_backward(Trace& trace, const Expr& w, const std::vector<Expr>& plain, const std::vector<Expr>& celled) {
  std::vector<Expr> terms;
  for (size_t i = 0; i < plain.size(); ++i) {
    terms.push_back(matmul(w, plain[i]));
    terms.push_back(matmul(w, celled[i]));
  }
  WeighedRun run;
  run.gradients = trace.backward(sum(terms));
  for (const Expr& e : plain) run.plain.push_back(e.value());
  for (const Expr& e : celled) run.celled.push_back(e.value());
  return run;
}

EngineOptions checked_options(const std::string& executor, int threads) {
  EngineOptions options;
  options.executor = executor;
  options.threads = threads;
  options.verify = true;
  return options;
}

::testing::AssertionResult near_relative(double a, double b, double tolerance) {
  // Equal infinities and two NaNs agree (a graph may overflow the same way in both runs).
  if (a == b || (std::isnan(a) && std::isnan(b))) return ::testing::AssertionSuccess();
  const double scale = std::max({1.0, std::fabs(a), std::fabs(b)});
  // Otherwise a non-finite value never agrees (an infinite scale would accept anything).
  if (std::isfinite(a) && std::isfinite(b) && std::fabs(a - b) <= tolerance * scale)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << a << " vs " << b << " differ by " << std::fabs(a - b)
                                       << " (tolerance " << tolerance << " relative)";
}

void for_each_backward_combination(const std::function<void(EngineOptions, const std::string&)>& body) {
  for (const char* policy : {"greedy", "sequential", "depth", "agenda"})
    for (int threads : {1, 2})
      for (bool memplan : {false, true}) {
        const std::string what =
            std::string(policy) + ", " + std::to_string(threads) + " threads, planner " + (memplan ? "on" : "off");
        SCOPED_TRACE(what);
        EngineOptions options;
        options.policy = policy;
        options.threads = threads;
        options.memplan = memplan;
        options.verify = true;
        body(options, what);
      }
}

void expect_same_gradients(const Gradients& got, const Gradients& want, const std::vector<const Parameter*>& parameters,
                           const LookupTable& table, const std::string& what) {
  EXPECT_NEAR(got.loss, want.loss, 1e-4f * (1 + std::abs(want.loss))) << what;
  for (const Parameter* p : parameters) {
    const Tensor* g = got.of(*p);
    const Tensor* w = want.of(*p);
    ASSERT_TRUE(g && w) << what << ": " << p->name();
    ASSERT_EQ(g->data.size(), w->data.size()) << what << ": " << p->name();
    for (size_t e = 0; e < w->data.size(); ++e)
      ASSERT_NEAR(g->data[e], w->data[e], 1e-4f * (1 + std::abs(w->data[e]))) << what << ": " << p->name() << " " << e;
  }
  const Gradients::Rows* g = got.of(table);
  const Gradients::Rows* w = want.of(table);
  ASSERT_TRUE(g && w) << what;
  ASSERT_EQ(g->entries, w->entries) << what;
  ASSERT_EQ(g->gradients.size(), w->gradients.size()) << what;
  for (size_t e = 0; e < w->gradients.size(); ++e)
    ASSERT_NEAR(g->gradients[e], w->gradients[e], 1e-4f * (1 + std::abs(w->gradients[e]))) << what << ": " << table.name() << " " << e;
}

::testing::AssertionResult near_relative(const Tensor& a, const Tensor& b, double tolerance) {
  if (a.rows != b.rows || a.cols != b.cols)
    return ::testing::AssertionFailure() << "shapes " << a.rows << "x" << a.cols << " vs " << b.rows
                                         << "x" << b.cols;
  for (size_t i = 0; i < a.data.size(); ++i) {
    auto r = near_relative(a.data[i], b.data[i], tolerance);
    if (!r) return r << " at element " << i;
  }
  return ::testing::AssertionSuccess();
}

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "edbatch-test-XXXXXX").string();
  if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

void add_layout(Model& model) {
  model.add_parameter("W", 3, 4);
  model.add_parameter("b", 3, 1);
  model.add_lookup("E", 10, 4);
}

std::vector<float> all_values(const Model& model) {
  std::vector<float> out;
  for (const Parameter& p : model.parameters()) out.insert(out.end(), p.values().begin(), p.values().end());
  for (const LookupTable& t : model.lookups()) out.insert(out.end(), t.values().begin(), t.values().end());
  return out;
}

std::string with_binary_body(const std::string& file, const std::string& body) {
  std::string out = file.substr(0, 12);  // magic and version
  detail::put(out, uint64_t(body.size()));
  detail::put(out, ir::checksum(body));
  return out + body;
}

void write_file(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary);
  out << contents;
}

std::vector<std::string> leftovers(const std::string& directory) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    const std::string name = entry.path().filename().string();
    if (ir::is_temporary_name(name) || name.ends_with(".lock") || name.ends_with(".tmp")) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

ProgramRun run_program(const std::string& binary, const std::string& args) {
  TempDir scratch;
  std::string command = "timeout -k 10 ";  // built by appending: GCC 12 misreports "'" + std::string
  command += std::to_string(kProgramSeconds);
  command += " '";
  command += binary;
  command += "' " + args + " >'" + scratch.file("out") + "' 2>'" + scratch.file("err") + "' </dev/null";
  const int raw = std::system(command.c_str());
  ProgramRun run;
  if (raw != -1 && WIFEXITED(raw)) run.status = WEXITSTATUS(raw);
  run.out = read_file(scratch.file("out"));
  run.err = read_file(scratch.file("err"));
  if (run.status == 124) run.err += "(killed after " + std::to_string(kProgramSeconds) + " s by run_program)\n";
  return run;
}

std::string edb_run_binary() {
  if (const char* path = std::getenv("EDB_RUN_BINARY")) return path;
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  return (self.parent_path() / ".." / "tools" / "edb-run").lexically_normal().string();
}

ProgramRun run_edb(const std::string& args) { return run_program(edb_run_binary(), args); }

std::string one_error_line(const std::string& args) {
  const ProgramRun o = run_edb(args);
  EXPECT_NE(o.status, 0) << args;
  EXPECT_NE(o.status, -1) << args << ": did not exit normally";
  EXPECT_EQ(o.out, "") << args;
  EXPECT_FALSE(o.err.empty()) << args;
  if (o.err.empty()) return "";
  EXPECT_EQ(o.err.back(), '\n') << args;
  const std::string line = o.err.substr(0, o.err.size() - 1);
  EXPECT_EQ(line.find('\n'), std::string::npos) << args << ": more than one line:\n" << o.err;
  return line;
}

}  // namespace edb::testing
