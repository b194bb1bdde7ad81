// Error tests for the edb-run front end: every bad invocation exits non-zero with one clear line
// on stderr, --help lists the flags, and --json carries every field docs/edb-run.md lists.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "tests/support/test_support.h"

namespace edb {
namespace {

using edb::testing::leftovers;
using edb::testing::read_file;
using edb::testing::TempDir;
using edb::testing::edb_run_binary;
using edb::testing::one_error_line;
using edb::testing::run_edb;
using edb::testing::write_file;


using Outcome = testing::ProgramRun;



class EdbRun : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(edb_run_binary()))
      GTEST_FAIL() << "edb-run not found at " << edb_run_binary() << " (set EDB_RUN_BINARY)";
  }
};

TEST_F(EdbRun, HelpListsModelsAndFlags) {
  const Outcome o = run_edb("--help");
  EXPECT_EQ(o.status, 0);
  EXPECT_EQ(o.err, "");
  EXPECT_EQ(o.out.rfind("usage: edb-run MODEL [flags]\n", 0), 0u) << o.out;
  EXPECT_NE(o.out.find("  treelstm "), std::string::npos);
  for (const char* flag : {"--data FILE", "--limit N", "--batch N", "--embed N", "--hidden N",
                           "--policy NAME", "--executor NAME", "--device NAME", "--threads N",
                           "--repeat N", "--seed N", "--cells on|off", "--memplan on|off", "--json", "--help"})
    EXPECT_NE(o.out.find("  " + std::string(flag)), std::string::npos) << flag;
  EXPECT_EQ(run_edb("treelstm --help").out, o.out);
}

TEST_F(EdbRun, ModelAndFlagErrors) {
  EXPECT_EQ(one_error_line(""), "edb-run: which model? (see --help)");
  EXPECT_EQ(one_error_line("nosuch"), "edb-run: unknown model 'nosuch' (see --help)");
  EXPECT_EQ(one_error_line("treelstm bilstm"), "edb-run: expected one MODEL, got 2 arguments (see --help)");
  EXPECT_EQ(one_error_line("treelstm --bogus"), "edb-run: unknown flag --bogus (see --help)");
  EXPECT_EQ(one_error_line("treelstm --batch"), "edb-run: --batch needs a value");
  EXPECT_EQ(one_error_line("treelstm --json=1"), "edb-run: --json takes no value");
  EXPECT_EQ(one_error_line("treelstm --batch abc"), "edb-run: --batch expects an integer, got 'abc'");
  EXPECT_EQ(one_error_line("treelstm --batch=12x"), "edb-run: --batch expects an integer, got '12x'");
  EXPECT_EQ(one_error_line("treelstm --batch 0"), "edb-run: --batch must be in [1, 1048576], got 0");
  EXPECT_EQ(one_error_line("treelstm --cells maybe"), "edb-run: --cells takes on or off, not 'maybe'");
  EXPECT_EQ(one_error_line("treelstm --memplan yes"), "edb-run: --memplan takes on or off, not 'yes'");
  EXPECT_EQ(one_error_line("treelstm --limit -3"),
            "edb-run: --limit must be in [1, 1099511627776], got -3");
}

// Counts from --limit and --skip are added and checked in 64 bits before anything is narrowed or
// generated (issue 45: --limit 4294967297 ran on 1 tree and exited 0; --limit 2147483648 named no
// flag; --skip 1000000000 --limit 5 ended in "std::bad_alloc"): one line naming the flags, the
// count and the memory it needs against the machine's.
TEST_F(EdbRun, CountsTooLargeForTheMachineNameTheFlags) {
  for (const std::string flags : {"--limit 4294967297", "--limit 2147483648", "--limit 1099511627776",
                                  "--skip 4294967296 --limit 3", "--skip 1000000000 --limit 5"}) {
    const std::string line = one_error_line("treelstm " + flags + " --repeat 1");
    EXPECT_EQ(line.rfind("edb-run treelstm: " + flags + " asks for ", 0), 0u) << line;
    EXPECT_NE(line.find(" generated trees, at least "), std::string::npos) << line;
    EXPECT_NE(line.find(" GiB, more than the "), std::string::npos) << line;
    EXPECT_TRUE(line.ends_with(" GiB of memory this process may use")) << line;
  }
  EXPECT_EQ(one_error_line("treelstm --limit 4294967297 --repeat 1"),
            one_error_line("treelstm --limit=4294967297 --repeat 1"));
  // A file's instances: a --skip past them says so.
  TempDir dir;
  write_file(dir.file("trees.txt"), "(3 (2 good) (4 (2 very) (3 fun)))\n(1 (2 not) (1 bad))\n");
  EXPECT_EQ(one_error_line("treelstm --data " + dir.file("trees.txt") + " --skip 2"),
            "edb-run treelstm: --skip 2 leaves none of the 2 trees in " + dir.file("trees.txt"));
}

// Sizes whose parameters need more memory than the machine has: refused before they are allocated,
// naming the flags and the parameter; training's copies counted too.
TEST_F(EdbRun, ModelsTooLargeForTheMachineNameTheFlags) {
  std::string line = one_error_line("treelstm --limit 2 --embed 65536 --hidden 65536 --repeat 1");
  EXPECT_EQ(line.rfind("edb-run: --limit 2 --embed 65536 --hidden 65536: edb::Model::add_parameter(): 'W_iou' "
                       "(196608x65536 floats) would bring model 'treelstm' to 48.0 GiB, more than the ",
                       0),
            0u)
      << line;
#if !defined(__SANITIZE_ADDRESS__)  // AddressSanitizer reserves more address space than the limit
  // Under a 1.5 GB limit on the process (ulimit -v): a model of about 0.5 GiB runs, and trains in
  // four times that (values, gradients, Adam's two moments), which is refused before any epoch.
  const testing::ProgramRun o = testing::run_program(
      "/bin/sh", "-c \"ulimit -v 1500000; exec '" + edb_run_binary() +
                     "' treelstm --limit 2 --embed 64 --hidden 4096 --executor batched --train --epochs 1\"");
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err.rfind("edb-run: --limit 2 --embed 64 --hidden 4096: training needs about 2.0 GiB (the model's "
                        "values, gradients and the optimizer's two moments), more than the 1.4 GiB of memory this "
                        "process may use\n",
                        0),
            0u)
      << o.err;
#endif
}

// What no estimate caught (here the trace's values, under a 600 MB address-space limit) is one line
// naming the flags that size the run, not "edb-run: std::bad_alloc".
TEST_F(EdbRun, RunningOutOfMemoryNamesTheFlags) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer reserves more address space than the limit";
#endif
  const testing::ProgramRun o = testing::run_program(
      "/bin/sh", "-c \"ulimit -v 600000; exec '" + edb_run_binary() +
                     "' treelstm --hidden 4096 --embed 64 --limit 2 --repeat 1 --executor batched\"");
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err,
            "edb-run: out of memory: the run asked for more than this machine has; the flags that size it: --hidden "
            "4096 --embed 64 --limit 2\n");
}

// The lists of available names grow as policies, executors and devices land; only their start
// is pinned.
bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

TEST_F(EdbRun, EngineErrorsNameTheBadValue) {
  EXPECT_PRED2(starts_with, one_error_line("treelstm --policy nosuch"),
               "edb::Engine: unknown policy 'nosuch' (available: sequential");
  EXPECT_PRED2(starts_with, one_error_line("treelstm --executor nosuch"),
               "edb::Engine: unknown executor 'nosuch' (available: reference");
  EXPECT_PRED2(starts_with, one_error_line("treelstm --device tpu"),
               "edb::Engine: device 'tpu' is not available in this build (available: cpu");
  EXPECT_EQ(one_error_line("treelstm --executor reference --threads 2"),
            "edb::Engine: threads = 2, but the reference executor runs on one thread only");
}

TEST_F(EdbRun, DataFileErrors) {
  EXPECT_EQ(one_error_line("treelstm --data /nonexistent"),
            "edb::samples::read_trees(): cannot open '/nonexistent': No such file or directory");
  TempDir dir;
  const std::string bad = dir.file("bad trees.txt");  // a space, so quoting matters too
  write_file(bad, "(2 (1 a) (3 b))\n(2 (1 a)\n");
  EXPECT_EQ(one_error_line("treelstm --data '" + bad + "'"),
            bad + ":2:9: expected '(' starting the second subtree, found end of line");
  const std::string empty = dir.file("empty.txt");
  write_file(empty, "\n");
  EXPECT_EQ(one_error_line("treelstm --data '" + empty + "'"),
            "edb-run treelstm: no trees in " + empty);
}

// Every file a user names that is a directory, a device or missing: one line naming it and why,
// before any work (issue 31: "basic_filebuf::underflow error", "std::bad_alloc").
TEST_F(EdbRun, FilesThatAreNotFilesToReadNameThePath) {
  TempDir dir;
  EXPECT_EQ(one_error_line("treelstm --limit 4 --load '" + dir.path() + "'"),
            "edb::Model::load(): '" + dir.path() + "' is a directory");
  EXPECT_EQ(one_error_line("treelstm --limit 4 --load /dev/zero"),
            "edb::Model::load(): '/dev/zero' is not a regular file (a device, pipe or socket)");
  EXPECT_EQ(one_error_line("treelstm --limit 4 --policy fsm --policy-file '" + dir.path() + "'"),
            "edb::Engine: policy file '" + dir.path() + "': is a directory");
  EXPECT_EQ(one_error_line("treelstm --limit 4 --data '" + dir.path() + "'"),
            "edb::samples::read_trees(): '" + dir.path() + "' is a directory");
  EXPECT_EQ(one_error_line("treelstm --limit 4 --train --save '" + dir.path() + "'"),
            "edb-run: --save: '" + dir.path() + "' is a directory; give a file name in it");
  // A device or pipe is refused before training too: renaming the saved file over it would replace
  // it (as root, /dev/null). A pipe here, so that a regression replaces nothing that matters.
  const std::string pipe = dir.file("pipe");
  ASSERT_EQ(::mkfifo(pipe.c_str(), 0644), 0);
  for (const char* flag : {"--train --save", "--policy fsm --train-policy"})
    EXPECT_EQ(one_error_line("treelstm --limit 4 " + std::string(flag) + " '" + pipe + "'"),
              "edb-run: " + std::string(flag).substr(std::string(flag).rfind(' ') + 1) + ": '" + pipe +
                  "' is not a regular file (a device, pipe or socket); give the name of a file to write");
  EXPECT_TRUE(std::filesystem::is_fifo(pipe));
}

// More threads than the machine has cores: one line saying so, once per process however many
// engines it makes (a training run makes more than one), and the run goes on.
TEST_F(EdbRun, MoreThreadsThanCoresWarnOnce) {
  const unsigned cores = std::thread::hardware_concurrency();
  if (cores == 0 || cores >= 1024) GTEST_SKIP() << "the machine's cores are unknown or beyond --threads' range";
  const std::string threads = std::to_string(cores + 1);
  const std::string line = "edbatch: " + threads + " threads on a machine with " + std::to_string(cores) +
                           " cores: they take turns, which is slower than " + std::to_string(cores) + " threads\n";
  for (const std::string args : {"treelstm --limit 8 --repeat 3", "treelstm --limit 8 --train --epochs 2"}) {
    const Outcome o = run_edb(args + " --threads " + threads);
    EXPECT_EQ(o.status, 0) << args << ": " << o.err;
    EXPECT_EQ(o.err, line) << args;
  }
  EXPECT_EQ(run_edb("treelstm --limit 8 --repeat 1 --threads " + std::to_string(cores)).err, "");
}

nlohmann::json run_json(const std::string& args) {
  const Outcome o = run_edb(args);
  EXPECT_EQ(o.status, 0) << args << "\n" << o.err;
  EXPECT_EQ(o.err, "") << args;
  nlohmann::json j = nlohmann::json::parse(o.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_TRUE(j.is_object()) << o.out;
  return j.is_object() ? j : nlohmann::json::object();
}

TEST_F(EdbRun, JsonCarriesEveryRunnerField) {
  const nlohmann::json j = run_json("treelstm --policy sequential --executor reference --limit 8 --repeat 1 --json");
  for (const char* field : {"model", "policy", "executor", "device", "batch", "instances",
                            "instances_per_sec", "batches", "lower_bound", "kernel_calls",
                            "bytes_gathered", "kernels_compiled", "cache_hits", "flops", "loss",
                            "time_ms", "caches", "cpu", "isa"})
    EXPECT_TRUE(j.contains(field)) << field;
  for (const char* cache : {"signatures", "search_schedules", "jit_kernels", "linked_kernels", "kernel_memory", "scratch",
                            "cell_records", "cell_kernels", "call_expansions", "device_kernels"}) {
    ASSERT_TRUE(j["caches"].contains(cache)) << cache;
    for (const char* field : {"entries", "bytes", "max_entries", "max_bytes", "evictions"})
      EXPECT_TRUE(j["caches"][cache].value(field, nlohmann::json()).is_number()) << cache << "." << field;
  }
  EXPECT_GT(j["caches"]["signatures"].value("entries", 0), 0);
  EXPECT_LE(j["caches"]["signatures"].value("entries", 0), j["caches"]["signatures"].value("max_entries", 0));
  ASSERT_TRUE(j.contains("time_ms") && j["time_ms"].is_object());
  for (const char* stage : {"trace", "schedule", "plan", "compile", "execute", "total"}) {
    EXPECT_TRUE(j["time_ms"].contains(stage)) << stage;
    EXPECT_TRUE(j["time_ms"].value(stage, nlohmann::json()).is_number()) << stage;
  }
  EXPECT_EQ(j.value("model", ""), "treelstm");
  EXPECT_EQ(j.value("policy", ""), "sequential");
  EXPECT_EQ(j.value("executor", ""), "reference");
  EXPECT_EQ(j.value("device", ""), "cpu");
  EXPECT_EQ(j.value("batch", 0), 64);
  EXPECT_EQ(j.value("instances", 0), 8);
  const int64_t nodes = j.value("nodes", int64_t{0}), batches = j.value("batches", int64_t{-1});
  EXPECT_GT(nodes, 0);
  EXPECT_EQ(batches, nodes);  // sequential: one node per batch
  // The reference computes node by node, and the gates' slices are views that compute nothing.
  EXPECT_GT(j.value("kernel_calls", int64_t{0}), 0);
  EXPECT_LT(j.value("kernel_calls", int64_t{0}), nodes);
  EXPECT_GT(j.value("lower_bound", int64_t{0}), 0);
  EXPECT_LE(j.value("lower_bound", INT64_MAX), batches);
  EXPECT_EQ(j.value("bytes_gathered", -1), 0);
  EXPECT_EQ(j.value("kernels_compiled", -1), 0);
  EXPECT_GT(j.value("flops", int64_t{0}), 0);
  EXPECT_GT(j.value("loss", 0.0), 0.0);
  EXPECT_GT(j.value("instances_per_sec", 0.0), 0.0);
  EXPECT_GE(j["time_ms"].value("total", 0.0), j["time_ms"].value("execute", 0.0));

  // Two passes: counts double, the loss of one pass stays the same. Four traces of two
  // instances do the same work except the per-trace 1x1 sum of losses: 4 nodes adding 1 flop
  // each instead of one node adding 7.
  const nlohmann::json twice = run_json("treelstm --policy sequential --executor reference --limit 8 --repeat 2 --json");
  EXPECT_EQ(twice.value("instances", 0), 16);
  EXPECT_EQ(twice.value("nodes", int64_t{0}), 2 * nodes);
  EXPECT_EQ(twice.value("flops", int64_t{0}), 2 * j.value("flops", int64_t{0}));
  EXPECT_DOUBLE_EQ(twice.value("loss", 0.0), j.value("loss", 0.0));
  const nlohmann::json small = run_json("treelstm --policy sequential --executor reference --limit 8 --repeat 1 --batch 2 --json");
  EXPECT_EQ(small.value("batch", 0), 2);
  EXPECT_EQ(small.value("nodes", int64_t{0}), nodes + 3);
  EXPECT_EQ(small.value("flops", int64_t{0}), j.value("flops", int64_t{0}) - 3);
  EXPECT_NEAR(small.value("loss", 0.0), j.value("loss", 0.0), 1e-4 * j.value("loss", 0.0));
}

// EDB_ISA: a narrower ISA runs and is reported, with the same loss as the widest to float
// precision; a name that is no ISA, or one wider than the CPU's, is one line naming EDB_ISA.
TEST_F(EdbRun, EdbIsaIsReportedAndCheckedAtStart) {
  const std::string flags = "treelstm --limit 8 --repeat 1 --hidden 16 --embed 16 --executor jit --json";
  const Outcome native = testing::run_program("/usr/bin/env", "EDB_ISA=native '" + edb_run_binary() + "' " + flags);
  const Outcome generic = testing::run_program("/usr/bin/env", "EDB_ISA=generic '" + edb_run_binary() + "' " + flags);
  ASSERT_EQ(native.status, 0) << native.err;
  ASSERT_EQ(generic.status, 0) << generic.err;
  const nlohmann::json wide = nlohmann::json::parse(native.out), narrow = nlohmann::json::parse(generic.out);
  EXPECT_EQ(narrow.value("isa", ""), "generic");
#if defined(__x86_64__)
  EXPECT_EQ(narrow.value("cpu", ""), "x86-64");  // the JIT tunes for the baseline, not the host
#endif
  EXPECT_NE(wide.value("isa", ""), "");
  EXPECT_NEAR(narrow.value("loss", 0.0), wide.value("loss", -1.0), 1e-4 * std::abs(wide.value("loss", 0.0)));
  const Outcome bad = testing::run_program("/usr/bin/env", "EDB_ISA=sse9 '" + edb_run_binary() + "' " + flags);
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.err.find("edb::Engine: EDB_ISA=sse9: expected native, avx512, avx2 or generic"), std::string::npos)
      << bad.err;
  EXPECT_EQ(bad.out, "");
}

// --dump-schedule: a bad name or place is one clear line before any work; FILE.dot is the first
// trace's picture; a rendered format without graphviz names the package to install.
TEST_F(EdbRun, DumpScheduleErrors) {
  TempDir dir;
  EXPECT_NE(one_error_line("treelstm --limit 2 --dump-schedule " + dir.file("s.txt")).find("must end in .dot"),
            std::string::npos);
  EXPECT_NE(one_error_line("treelstm --limit 2 --dump-schedule " + dir.file("missing/s.dot")).find("cannot write '"),
            std::string::npos);
  // No `dot` on an empty PATH: the message says what to install.
  const Outcome o = testing::run_program("/usr/bin/env", "PATH=" + dir.path() + " '" + edb_run_binary() +
                                                             "' treelstm --limit 2 --dump-schedule " + dir.file("s.svg"));
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("apt-get install graphviz"), std::string::npos) << o.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("s.svg")));
}

// On a full disk (files limited to 512 bytes, `ulimit -f 1`) --train-policy and --dump-schedule
// fail naming the file and leave neither it nor a temporary behind (before: a 0-byte F.tmp, a
// 0-byte F). The batched executor writes no kernel cache.
TEST_F(EdbRun, AFullDiskLeavesNoPolicyOrScheduleFileBehind) {
  TempDir dir;
  const std::string run = "-c \"trap '' XFSZ; ulimit -f 1; exec '" + edb_run_binary() +
                          "' treelstm --limit 4 --batch 2 --repeat 1 --hidden 4 --embed 4 --executor batched ";
  const std::string policy = dir.file("p.policy"), picture = dir.file("s.dot");
  // A learned policy of this size is about 900 bytes; a warning that it learned nothing may come first.
  testing::ProgramRun o = testing::run_program(
      "/bin/sh", run + "--policy learned --train-traces 2 --search-budget 5 --train-policy " + policy + "\"");
  EXPECT_NE(o.status, 0);
  EXPECT_TRUE(o.err.ends_with("edb::Engine: policy file '" + policy + "': cannot write '" + policy + "': File too large\n"))
      << o.err;
  o = testing::run_program("/bin/sh", run + "--dump-schedule " + picture + "\"");
  EXPECT_NE(o.status, 0);
  EXPECT_EQ(o.err, "edb-run: --dump-schedule: cannot write '" + picture + "': File too large\n");
  EXPECT_FALSE(std::filesystem::exists(policy));
  EXPECT_FALSE(std::filesystem::exists(picture));
  EXPECT_EQ(leftovers(dir.path()), std::vector<std::string>{});
}

TEST_F(EdbRun, DumpScheduleWritesTheFirstTraceAsDot) {
  TempDir dir;
  write_file(dir.file("trees.txt"), "(3 (2 good) (4 (2 very) (3 fun)))\n(1 (2 not) (1 bad))\n");
  const std::string picture = dir.file("schedule.dot");
  const Outcome o = run_edb("treelstm --data " + dir.file("trees.txt") +
                            " --batch 2 --repeat 1 --hidden 8 --embed 8 --policy depth --executor batched --json"
                            " --dump-schedule " + picture);
  ASSERT_EQ(o.status, 0) << o.err;
  const std::string dot = read_file(picture);
  ASSERT_EQ(dot.rfind("digraph schedule {", 0), 0u) << dot.substr(0, 200);
  // One trace holds the whole workload, so the picture's batches are the measured pass's.
  const nlohmann::json j = nlohmann::json::parse(o.out);
  // A cluster of cell calls counts as its cell's batches, as Stats::batches counts it.
  size_t clusters = 0;
  for (size_t at = dot.find("subgraph cluster_"); at != std::string::npos; at = dot.find("subgraph cluster_", at + 1)) {
    const std::string label = dot.substr(at, dot.find('\n', dot.find("label=", at)) - at);
    const size_t cell = label.find("(its cell's ");
    clusters += cell == std::string::npos ? 1 : std::stoul(label.substr(cell + 12));
  }
  EXPECT_EQ(int64_t(clusters), j.value("batches", int64_t{-1}));
  EXPECT_NE(dot.find("lookup treelstm/E["), std::string::npos);
  EXPECT_EQ(leftovers(dir.path()), std::vector<std::string>{});
}

TEST_F(EdbRun, DumpScheduleShowsTheJitsCellCallsAsNodes) {
  TempDir dir;
  write_file(dir.file("trees.txt"), "(3 (2 good) (4 (2 very) (3 fun)))\n");
  const std::string picture = dir.file("schedule.dot");
  const Outcome o = run_edb("treelstm --data " + dir.file("trees.txt") +
                            " --batch 1 --repeat 1 --hidden 8 --embed 8 --executor jit --dump-schedule " + picture);
  ASSERT_EQ(o.status, 0) << o.err;
  const std::string dot = read_file(picture);
  EXPECT_NE(dot.find(" call treelstm_leaf\\n"), std::string::npos) << dot.substr(0, 2000);
  EXPECT_EQ(dot.find("cmult"), std::string::npos) << "the calls' bodies were copied into the trace";
}

TEST_F(EdbRun, DumpScheduleRendersSvgWithGraphviz) {
  if (std::system("command -v dot >/dev/null 2>&1") != 0) GTEST_SKIP() << "graphviz's dot is not installed";
  TempDir dir;
  const std::string picture = dir.file("schedule.svg");
  const Outcome o = run_edb("treelstm --limit 1 --batch 1 --repeat 1 --hidden 4 --embed 4 --dump-schedule " + picture);
  ASSERT_EQ(o.status, 0) << o.err;
  const std::string svg = read_file(picture);
  EXPECT_NE(svg.find("<svg"), std::string::npos) << svg.substr(0, 200);
  EXPECT_NE(svg.find("batch 0: "), std::string::npos);
  EXPECT_EQ(leftovers(dir.path()), std::vector<std::string>{});
}

}  // namespace
}  // namespace edb
