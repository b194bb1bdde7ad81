// Unit tests for scheduler::to_dot (the "what was batched" picture): one cluster per batch holding
// exactly its members, every node declared once, one edge per argument, escaped labels, checks on
// a broken schedule; and EDB_DUMP_DIR writing the schedule as dot files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <edbatch/edbatch.h>

#include "scheduler/schedule.h"
#include "tests/support/test_support.h"
#include "trace/inspect.h"

namespace edb {
namespace {

using testing::TempDir;

// What a dot picture declares: nodes per cluster (-1: outside every cluster), edges, tooltips.
struct Picture {
  std::map<ir::NodeId, int> cluster_of;  // every node declaration; a repeat is a test failure
  std::vector<std::vector<ir::NodeId>> clusters;
  std::vector<std::string> tooltips;
  std::multiset<std::pair<ir::NodeId, ir::NodeId>> edges;
  std::map<ir::NodeId, std::string> declarations;
};

Picture parse(const std::string& dot) {
  Picture p;
  const std::regex cluster(R"(^  subgraph cluster_(\d+) \{$)"), node(R"(^ +n(\d+) \[(.*)\];$)"),
      edge(R"(^  n(\d+) -> n(\d+);$)"), tooltip(R"re(tooltip="((?:[^"\\]|\\.)*)")re");
  std::istringstream lines(dot);
  std::string line;
  int current = -1;
  std::smatch m;
  while (std::getline(lines, line)) {
    if (std::regex_match(line, m, cluster)) {
      EXPECT_EQ(std::stoul(m[1]), p.clusters.size()) << "clusters out of order";
      current = int(p.clusters.size());
      p.clusters.emplace_back();
      std::getline(lines, line);
      EXPECT_TRUE(std::regex_search(line, m, tooltip)) << line;
      p.tooltips.push_back(m[1]);
    } else if (line == "  }") {
      current = -1;
    } else if (std::regex_match(line, m, node)) {
      const ir::NodeId id = ir::NodeId(std::stoul(m[1]));
      EXPECT_EQ(p.cluster_of.count(id), 0u) << "n" << id << " declared twice";
      p.cluster_of[id] = current;
      p.declarations[id] = m[2];
      if (current >= 0) p.clusters[size_t(current)].push_back(id);
    } else if (std::regex_match(line, m, edge)) {
      p.edges.emplace(ir::NodeId(std::stoul(m[1])), ir::NodeId(std::stoul(m[2])));
    }
  }
  return p;
}

EngineOptions depth_policy() {
  EngineOptions options;
  options.policy = "depth";
  return options;
}

// Three instances of tanh(W x + b) and their sum.
struct SmallTrace {
  Model model{"dot"};
  Parameter W = model.add_parameter("W", 2, 3), b = model.add_parameter("b", 2, 1);
  Engine engine{depth_policy()};
  Trace trace{engine};
  std::vector<Expr> outputs;

  SmallTrace() {
    for (int i = 0; i < 3; ++i)
      outputs.push_back(tanh(affine({trace.param(b), trace.param(W), trace.input({1.0f * i, 2.0f, 3.0f})})));
    outputs.push_back(sum(outputs));
  }
};

TEST(ScheduleDot, OneClusterPerBatchEveryNodeOnceAnEdgePerArgument) {
  SmallTrace t;
  const detail::EvaluatedTrace e = detail::evaluated_trace(t.outputs.back());
  ASSERT_EQ(e.schedule.batch_count(), 3u);  // affine x3, tanh x3, sum
  const std::string dot = scheduler::to_dot(e.graph, e.schedule, e.signatures);
  ASSERT_EQ(dot.rfind("digraph schedule {\n", 0), 0u) << dot;
  ASSERT_EQ(dot.substr(dot.size() - 2), "}\n");
  const Picture p = parse(dot);

  ASSERT_EQ(p.clusters.size(), e.schedule.batch_count());
  for (size_t b = 0; b < e.schedule.batch_count(); ++b) {
    const auto members = e.schedule.batch(b);
    EXPECT_EQ(p.clusters[b], std::vector<ir::NodeId>(members.begin(), members.end())) << "batch " << b;
    EXPECT_EQ(p.tooltips[b], e.signatures.name(e.schedule.batch_type[b]));
  }
  ASSERT_EQ(p.cluster_of.size(), e.graph.size());
  std::multiset<std::pair<ir::NodeId, ir::NodeId>> edges;
  for (ir::NodeId id = 0; id < e.graph.size(); ++id) {
    for (ir::NodeId arg : e.graph.args(id)) edges.emplace(arg, id);
    const bool leaf = ir::has_flag(e.graph.node(id).op, ir::kLeaf);
    EXPECT_EQ(p.cluster_of.at(id) < 0, leaf) << "n" << id;
    EXPECT_NE(p.declarations.at(id).find("%" + std::to_string(id) + " " + std::string(ir::op_name(e.graph.node(id).op))),
              std::string::npos)
        << p.declarations.at(id);
  }
  EXPECT_EQ(p.edges, edges);
  // Labels carry the shape, and the parameter's name for a parameter.
  EXPECT_NE(p.declarations.at(e.graph.args(e.schedule.batch(0)[0])[1]).find("dot/W\\n2x3"), std::string::npos);
  // Each batch is one row.
  EXPECT_EQ(std::count(dot.begin(), dot.end(), '{') - 1, 2 * 3);  // the graph, 3 clusters, 3 rows
}

TEST(ScheduleDot, NodesEvaluatedEarlierAreDashedAndOutsideTheClusters) {
  SmallTrace t;
  t.outputs.back().value();
  const Expr more = t.outputs.back() * 2.0f;
  const detail::EvaluatedTrace e = detail::evaluated_trace(more);
  ASSERT_EQ(e.schedule.batch_count(), 1u);
  const Picture p = parse(scheduler::to_dot(e.graph, e.schedule, e.signatures));
  ASSERT_EQ(p.clusters.size(), 1u);
  EXPECT_EQ(p.clusters[0], std::vector<ir::NodeId>{more.node_id()});
  EXPECT_EQ(p.cluster_of.size(), e.graph.size());
  const ir::NodeId earlier = t.outputs.back().node_id();
  EXPECT_NE(p.declarations.at(earlier).find("dashed"), std::string::npos) << p.declarations.at(earlier);
  EXPECT_NE(p.declarations.at(more.node_id()).find("scale *2"), std::string::npos) << p.declarations.at(more.node_id());
}

TEST(ScheduleDot, QuotesAndBackslashesInNamesAreEscaped) {
  Model model("m");
  const Parameter odd = model.add_parameter("say \"hi\" \\ bye", 1, 1);
  Engine engine;
  Trace trace(engine);
  const Expr y = tanh(trace.param(odd));
  const detail::EvaluatedTrace e = detail::evaluated_trace(y);
  const std::string dot = scheduler::to_dot(e.graph, e.schedule, e.signatures);
  EXPECT_NE(dot.find(R"(m/say \"hi\" \\ bye)"), std::string::npos) << dot;
  const Picture p = parse(dot);  // the tooltip, with its quotes escaped, still parses
  ASSERT_EQ(p.clusters.size(), 1u);
  EXPECT_EQ(p.cluster_of.size(), e.graph.size());
}

TEST(ScheduleDot, ABrokenScheduleIsAnInternalError) {
  SmallTrace t;
  const detail::EvaluatedTrace e = detail::evaluated_trace(t.outputs.back());
  scheduler::Schedule twice = e.schedule;
  const ir::NodeId first = e.schedule.batch(0)[0];
  twice.add_batch(e.schedule.batch_type[0], std::span(&first, 1));
  EXPECT_THROW(scheduler::to_dot(e.graph, twice, e.signatures), InternalError);
  scheduler::Schedule outside = e.schedule;
  const ir::NodeId missing = ir::NodeId(e.graph.size());
  outside.add_batch(e.schedule.batch_type[0], std::span(&missing, 1));
  EXPECT_THROW(scheduler::to_dot(e.graph, outside, e.signatures), InternalError);
}

// Sets environment variables for one scope and restores them after.
class ScopedEnvironment {
 public:
  void set(const char* name, const std::string& value) {
    const char* old = std::getenv(name);
    saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnvironment() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second) setenv(it->first.c_str(), it->second->c_str(), 1);
      else unsetenv(it->first.c_str());
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST(ScheduleDot, DumpDirectoryGetsOneDotFilePerEvaluation) {
  TempDir dir;
  const std::string target = dir.file("dumps/nested");
  ScopedEnvironment env;
  env.set("EDB_DUMP", "schedule");
  env.set("EDB_DUMP_DIR", target);
  Model model("m");
  const Parameter W = model.add_parameter("W", 2, 2);
  Engine engine;
  Trace trace(engine);
  const Expr x = trace.input({1.0f, 2.0f});
  const Expr y = tanh(matmul(trace.param(W), x));
  y.value();
  const Expr z = sigmoid(y);
  z.value();
  // schedule-N.dot, N counting the process's evaluations: first matmul and tanh, then sigmoid.
  std::map<int, std::string> files;
  const std::regex name(R"(schedule-(\d+)\.dot)");
  for (const auto& entry : std::filesystem::directory_iterator(target)) {
    const std::string file = entry.path().filename().string();
    std::smatch m;
    ASSERT_TRUE(std::regex_match(file, m, name)) << file;
    files[std::stoi(m[1])] = testing::read_file(entry.path().string());
  }
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files.rbegin()->first, files.begin()->first + 1);
  EXPECT_EQ(parse(files.begin()->second).clusters.size(), 2u);
  EXPECT_EQ(parse(files.rbegin()->second).clusters.size(), 1u);
}

TEST(ScheduleDot, AnUncreatableDumpDirectoryIsAUsageError) {
  TempDir dir;
  testing::write_file(dir.file("plain"), "a file, not a directory");
  ScopedEnvironment env;
  env.set("EDB_DUMP", "schedule");
  env.set("EDB_DUMP_DIR", dir.file("plain/sub"));
  const std::string message = testing::usage_error([] { Engine engine; });
  EXPECT_NE(message.find("EDB_DUMP_DIR"), std::string::npos) << message;
  EXPECT_NE(message.find("plain/sub"), std::string::npos) << message;
}

// Without EDB_DUMP_DIR the picture goes to stderr; `batches` is the text listing; an unknown
// stage name is a clear error, not silently nothing.
TEST(ScheduleDot, DumpScheduleToStderrIsThePictureAndUnknownStagesAreErrors) {
  ScopedEnvironment env;
  env.set("EDB_DUMP", "schedule,batches");
  Model model("m");
  const Parameter W = model.add_parameter("W", 2, 2);
  ::testing::internal::CaptureStderr();
  {
    Engine engine;
    Trace trace(engine);
    tanh(matmul(trace.param(W), trace.input({1.0f, 2.0f}))).value();
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  const size_t dot = err.find("== schedule\n"), text = err.find("== batches\n");
  ASSERT_NE(dot, std::string::npos) << err;
  ASSERT_NE(text, std::string::npos) << err;
  const size_t end = err.find("\n== ", dot);
  const std::string picture = err.substr(dot + 12, end == std::string::npos ? std::string::npos : end + 1 - (dot + 12));
  EXPECT_EQ(parse(picture).clusters.size(), 2u) << err;
  env.set("EDB_DUMP", "schedule,plans");
  const std::string message = testing::usage_error([] { Engine engine; });
  EXPECT_NE(message.find("'plans'"), std::string::npos) << message;
  EXPECT_NE(message.find("batches"), std::string::npos) << message;
}

}  // namespace
}  // namespace edb
