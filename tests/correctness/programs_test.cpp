// edb::Program and edb::run_instances: random programs that branch on their own values, run
// together in one trace under every executor and several policies, against each instance run alone
// under the reference executor; mid-trace evaluation running only new nodes; the error cases.
#include <edbatch/program.h>

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/support/rng.h"
#include "tests/support/test_support.h"

namespace edb {
namespace {

using testing::Rng;

// What one instance did: each awaited scalar and the decision taken on it, and its final value.
struct Log {
  std::vector<float> awaited;
  std::vector<int> decisions;
};

struct Fixture {
  Model model{"programs", 7};
  Parameter W1 = model.add_parameter("W1", 4, 4);
  Parameter W2 = model.add_parameter("W2", 4, 4);
  Parameter b = model.add_parameter("b", 4, 1);
  Parameter U = model.add_parameter("U", 4, 8);
  LookupTable E = model.add_lookup("E", 10, 4);
  Cell step{"step", {{4, 1}, {4, 1}}, [this](Trace& t, std::span<const Expr> in) {
              const Expr h = tanh(affine({t.param(b), t.param(W1), in[0], t.param(W2), in[1]}));
              return std::vector<Expr>{h, sigmoid(in[0] - h)};
            }};
};

// The bucket of an awaited scalar; within kMargin of a boundary two executors may disagree.
constexpr float kBoundaries[] = {-0.4f, 0.0f, 0.4f};
constexpr float kMargin = 1e-3f;
int bucket(float v) {
  int d = 0;
  for (float boundary : kBoundaries) d += v > boundary;
  return d;
}
bool near_boundary(float v) {
  for (float boundary : kBoundaries)
    if (std::fabs(v - boundary) < kMargin) return true;
  return false;
}

// One random op on the state, drawn from `rng`.
Expr random_op(Fixture& f, Trace& t, Rng& rng, const Expr& h, const Expr& context) {
  switch (rng.below(6)) {
    case 0: return tanh(affine({t.param(f.b), t.param(f.W1), h}));
    case 1: return sigmoid(matmul(t.param(f.W2), h)) - 0.5f;
    case 2: return f.step(t, {h, context})[0];
    case 3: return tanh(h + t.lookup(f.E, rng.below(10)));
    case 4: return cmult(h, tanh(h)) * 2.0f - 0.3f;
    default: return tanh(matmul(t.param(f.U), concat({h, context})));
  }
}

// A program with random branch points: after some ops it awaits a scalar of its state and, on the
// value's bucket, stops early, loops a value-dependent number of times, or takes one of two paths.
Program<Tensor> random_program(Fixture& f, Trace& t, uint64_t seed, Log& log) {
  Rng rng(seed);
  Expr h = t.lookup(f.E, rng.below(10));
  const Expr context = t.input({0.1f * float(rng.below(7)) - 0.3f, 0.2f, -0.1f, 0.05f * float(seed % 5)});
  Expr first;
  const int steps = 1 + rng.below(6);
  for (int k = 0; k < steps; ++k) {
    h = random_op(f, t, rng, h, context);
    if (!first.valid()) first = h;
    if (!rng.chance(0.6)) continue;
    const Tensor value = co_await sum_elements(h);
    const float v = value.scalar();
    const int decision = bucket(v);
    log.awaited.push_back(v);
    log.decisions.push_back(decision);
    if (decision == 0) break;  // early exit
    if (decision == 1) {
      for (int r = 0; r <= int(std::fabs(v) * 10) % 3; ++r) h = random_op(f, t, rng, h, context);
    } else if (decision == 2) {
      h = f.step(t, {h, h})[1];
    } else {
      h = relu(h) - 0.25f;
    }
    if (rng.chance(0.3)) {
      // A value computed in an earlier round: no suspension, the same value again.
      const Tensor again = co_await first;
      log.awaited.push_back(again(0));
      log.decisions.push_back(-1);
    }
  }
  const Tensor result = co_await h;
  const Tensor twice = co_await h;  // computed: returns at once
  if (twice.data != result.data) throw std::logic_error("a computed value read twice differs");
  co_return result;
}

struct Setting {
  std::string executor, policy;
  bool cells;
  int threads;
};

std::string name(const Setting& s) {
  return s.executor + "/" + s.policy + (s.cells ? "/cells" : "/inline") + "/threads" + std::to_string(s.threads);
}

TEST(Programs, RandomProgramsMatchEachInstanceAloneUnderTheReference) {
  const std::vector<Setting> settings = {
      {"reference", "greedy", true, 1}, {"batched", "greedy", true, 1}, {"jit", "greedy", true, 1},
      {"jit", "agenda", false, 1},      {"batched", "depth", false, 2}, {"jit", "greedy", true, 2},
  };
  constexpr int kInstances = 24;
  int diverged_settings = 0;
  std::vector<int> buckets_seen(4, 0);
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    Fixture f;
    // Each instance alone, in its own trace, under the reference executor.
    EngineOptions alone_options = testing::checked_options("reference");
    alone_options.policy = "sequential";
    Engine alone_engine(alone_options);
    std::vector<Tensor> expected;
    std::vector<Log> expected_logs(kInstances);
    std::vector<int64_t> alone_rounds;
    int64_t alone_nodes = 0;
    for (int i = 0; i < kInstances; ++i) {
      Trace trace(alone_engine);
      std::vector<Program<Tensor>> one;
      one.push_back(random_program(f, trace, testing::mix(seed, i), expected_logs[i]));
      const InstanceReport report = run_instances(trace, one);
      ASSERT_EQ(report.finished, 1);
      alone_rounds.push_back(report.rounds);
      expected.push_back(one[0].result());
    }
    alone_nodes = alone_engine.stats().nodes;
    for (const Log& log : expected_logs)
      for (const int d : log.decisions)
        if (d >= 0) ++buckets_seen[d];

    for (const Setting& s : settings) {
      SCOPED_TRACE(name(s) + " seed " + std::to_string(seed));
      EngineOptions options = testing::checked_options(s.executor, s.threads);
      options.policy = s.policy;
      options.cells = s.cells;
      Engine engine(options);
      Trace trace(engine);
      std::vector<Log> logs(kInstances);
      std::vector<Program<Tensor>> programs;
      for (int i = 0; i < kInstances; ++i) programs.push_back(random_program(f, trace, testing::mix(seed, i), logs[i]));
      const InstanceReport report = run_instances(trace, programs);
      EXPECT_EQ(report.finished, kInstances);
      EXPECT_EQ(report.failed, 0);
      EXPECT_EQ(report.first_failed, -1);

      bool diverged = false;  // an awaited value so near a bucket boundary that the executors chose apart
      int64_t most_rounds = 0;
      for (int i = 0; i < kInstances; ++i) {
        ASSERT_TRUE(programs[i].done());
        most_rounds = std::max(most_rounds, alone_rounds[i]);
        const Log& got = logs[i];
        const Log& want = expected_logs[i];
        bool same_path = true;
        for (size_t k = 0; k < std::min(got.awaited.size(), want.awaited.size()); ++k) {
          if (got.decisions[k] != want.decisions[k]) {
            ASSERT_TRUE(near_boundary(want.awaited[k])) << "instance " << i << " await " << k << ": "
                                                        << got.awaited[k] << " vs " << want.awaited[k];
            same_path = false;
            break;
          }
          EXPECT_TRUE(testing::near_relative(got.awaited[k], want.awaited[k], 1e-4)) << "instance " << i;
        }
        if (!same_path) {
          diverged = true;
          continue;
        }
        ASSERT_EQ(got.decisions, want.decisions) << "instance " << i;
        EXPECT_TRUE(testing::near_relative(programs[i].result(), expected[i], 1e-4)) << "instance " << i;
      }
      if (diverged) {
        ++diverged_settings;
        continue;
      }
      // One evaluation per suspension of the instance that suspends most: instances at different
      // points of their programs wait together.
      EXPECT_EQ(report.rounds, most_rounds);
      // Every node ran once: a round runs only what was recorded since the one before.
      EXPECT_EQ(engine.stats().nodes, alone_nodes);
      // Batched across instances: well under the batches of the instances run one by one.
      if (s.executor != "reference") {
        EXPECT_LT(2 * engine.stats().batches, alone_engine.stats().batches);
      }
    }
  }
  EXPECT_LE(diverged_settings, 1);  // the values' branches were compared, not skipped
  for (int d = 0; d < 4; ++d) EXPECT_GT(buckets_seen[d], 5) << "branch " << d;  // every branch taken
}

// The same program written as a plain function reading value() instance by instance, against the
// coroutine run with the others: the runner changes nothing but when values are read.
TEST(Programs, MatchesAPlainFunctionReadingValues) {
  Fixture f;
  auto plain = [&](Trace& t, int i) {
    Expr h = t.lookup(f.E, i % 10);
    int steps = 0;
    while (steps < 8) {
      h = tanh(affine({t.param(f.b), t.param(f.W1), h}));
      ++steps;
      if (h.value()(i % 4) > 0.1f * float(i % 3)) break;
    }
    return std::pair{h.value(), steps};
  };
  auto coroutine = [&](Trace& t, int i) -> Program<std::pair<Tensor, int>> {
    Expr h = t.lookup(f.E, i % 10);
    int steps = 0;
    while (steps < 8) {
      h = tanh(affine({t.param(f.b), t.param(f.W1), h}));
      ++steps;
      if ((co_await h)(i % 4) > 0.1f * float(i % 3)) break;
    }
    co_return std::pair{co_await h, steps};
  };
  Engine reference(testing::checked_options("reference"));
  Engine batched(testing::checked_options("jit"));
  Trace trace(batched);
  std::vector<Program<std::pair<Tensor, int>>> programs;
  for (int i = 0; i < 40; ++i) programs.push_back(coroutine(trace, i));
  const InstanceReport report = run_instances(trace, programs);
  int most_steps = 0;
  for (int i = 0; i < 40; ++i) {
    Trace alone(reference);
    const auto [value, steps] = plain(alone, i);
    EXPECT_EQ(programs[i].result().second, steps) << i;
    EXPECT_TRUE(testing::near_relative(programs[i].result().first, value, 1e-5)) << i;
    most_steps = std::max(most_steps, steps);
  }
  EXPECT_EQ(report.rounds, most_steps);
  // The lookups in one batch, then per round one affine batch and one tanh batch.
  EXPECT_EQ(batched.stats().batches, 1 + 2 * most_steps);
}

// Reading a value mid-trace and recording more: the next evaluation runs only the new nodes, and
// the values computed before stay as they were.
TEST(Programs, MidTraceEvaluationRunsOnlyNewNodes) {
  Fixture f;
  for (const char* executor : {"reference", "batched", "jit"}) {
    SCOPED_TRACE(executor);
    auto record = [&](Trace& t, bool read_between) {
      std::vector<Expr> kept;
      Expr h = t.lookup(f.E, 3);
      for (int k = 0; k < 6; ++k) {
        h = f.step(t, {h, t.lookup(f.E, k)})[0];
        kept.push_back(h);
        if (read_between && k % 2 == 0) (void)h.value();
      }
      std::vector<Tensor> values;
      for (const Expr& e : kept) values.push_back(e.value());
      return values;
    };
    Engine once_engine(testing::checked_options(executor)), read_engine(testing::checked_options(executor));
    Trace once(once_engine), read(read_engine);
    const std::vector<Tensor> a = record(once, false), b = record(read, true);
    for (size_t k = 0; k < a.size(); ++k) EXPECT_TRUE(testing::near_relative(a[k], b[k], 1e-6)) << k;
    EXPECT_EQ(read_engine.stats().nodes, once_engine.stats().nodes);
    EXPECT_EQ(read_engine.stats().flops, once_engine.stats().flops);
  }
}

Program<void> awaits(Trace& t, Expr e) {
  (void)t;
  co_await e;
}

TEST(Programs, AwaitingAnotherTracesExpressionEndsThatInstance) {
  Fixture f;
  Engine engine(testing::checked_options("batched"));
  Trace other(engine), trace(engine);
  const Expr foreign = tanh(other.input({1.0f}));
  std::vector<Program<void>> programs;
  programs.push_back(awaits(trace, tanh(trace.input({0.5f}))));
  programs.push_back(awaits(trace, foreign));
  programs.push_back(awaits(trace, sigmoid(trace.input({0.5f}))));
  const std::string message = testing::usage_error([&] { run_instances(trace, programs); });
  EXPECT_NE(message.find("edb::Program: co_await on an expression of another trace"), std::string::npos) << message;
  EXPECT_TRUE(programs[0].done() && !programs[0].failed());
  EXPECT_TRUE(programs[1].done() && programs[1].failed());
  EXPECT_TRUE(programs[2].done() && !programs[2].failed());
  EXPECT_NE(testing::usage_error([&] { programs[1].result(); }).find("another trace"), std::string::npos);
  EXPECT_NO_THROW(other.input({2.0f}).value());  // both traces go on
  EXPECT_NO_THROW(trace.input({2.0f}).value());
}

Program<int> counts_down(Trace& t, int n, bool throws_at_end) {
  Expr x = t.input({float(n)});
  while ((co_await x).scalar() > 0.5f) x = x - 1.0f;
  if (throws_at_end) throw std::runtime_error("instance gave up");
  co_return n;
}

TEST(Programs, AnExceptionEndsItsInstanceAndTheOthersFinish) {
  Engine engine(testing::checked_options("jit"));
  Trace trace(engine);
  std::vector<Program<int>> programs;
  for (int i = 0; i < 6; ++i) programs.push_back(counts_down(trace, i, i == 2 || i == 4));
  InstanceOptions keep_going;
  keep_going.rethrow = false;
  const InstanceReport report = run_instances(trace, programs, keep_going);
  EXPECT_EQ(report.finished, 4);
  EXPECT_EQ(report.failed, 2);
  EXPECT_EQ(report.first_failed, 2);
  EXPECT_EQ(report.rounds, 6);  // the instance counting down from 5 awaits six times
  for (int i = 0; i < 6; ++i) {
    EXPECT_TRUE(programs[i].done());
    if (i == 2 || i == 4) {
      EXPECT_THROW(programs[i].result(), std::runtime_error);
    } else {
      EXPECT_EQ(programs[i].result(), i);
    }
  }
  // By default the first failed instance's exception is rethrown once every instance has ended.
  Trace again(engine);
  std::vector<Program<int>> more;
  for (int i = 0; i < 4; ++i) more.push_back(counts_down(again, i, i == 1));
  EXPECT_THROW(run_instances(again, more), std::runtime_error);
  EXPECT_EQ(more[3].result(), 3);
}

TEST(Programs, AnInstanceThatNeverEndsStopsAtTheRoundLimit) {
  Engine engine(testing::checked_options("batched"));
  Trace trace(engine);
  auto forever = [](Trace& t) -> Program<void> {
    Expr x = t.input({1.0f});
    while (true) {
      x = x + 1.0f;
      co_await x;
    }
  };
  std::vector<Program<void>> programs;
  programs.push_back(forever(trace));
  programs.push_back(forever(trace));
  InstanceOptions options;
  options.max_rounds = 50;
  const std::string message = testing::usage_error([&] { run_instances(trace, programs, options); });
  EXPECT_NE(message.find("instance 0 (and 1 more) had not finished after 50 evaluations"), std::string::npos) << message;
  EXPECT_TRUE(programs[0].done() && programs[0].failed());
  EXPECT_EQ(engine.stats().nodes, 100);  // 50 rounds of two additions, each run once
}

TEST(Programs, AnEvaluationErrorEndsEveryWaitingInstance) {
  EngineOptions options = testing::checked_options("batched");
  options.check_finite = true;
  Engine engine(options);
  Trace trace(engine);
  std::vector<Program<void>> programs;
  programs.push_back(awaits(trace, log(trace.input({-1.0f}))));  // NaN
  programs.push_back(awaits(trace, tanh(trace.input({1.0f}))));
  EXPECT_THROW(run_instances(trace, programs), NumericError);
  EXPECT_TRUE(programs[0].done() && programs[1].done());
  EXPECT_THROW(programs[1].result(), NumericError);
}

TEST(Programs, UsageErrorsBeforeAnythingRuns) {
  Engine engine(testing::checked_options("reference"));
  Trace trace(engine), other(engine);
  std::vector<Program<void>> programs(1);
  EXPECT_NE(testing::usage_error([&] { run_instances(trace, programs); }).find("program 0 is empty"), std::string::npos);
  programs[0] = awaits(other, tanh(other.input({1.0f})));
  run_instances(other, programs);
  EXPECT_TRUE(programs[0].done());
  EXPECT_NE(testing::usage_error([&] { run_instances(trace, programs); }).find("started in another trace"),
            std::string::npos);
  std::vector<Program<int>> unfinished;
  unfinished.push_back(counts_down(trace, 1, false));
  EXPECT_NE(testing::usage_error([&] { unfinished[0].result(); }).find("has not ended"), std::string::npos);
  trace.finish();
  EXPECT_NE(testing::usage_error([&] { run_instances(trace, unfinished); }).find("the trace has finished"),
            std::string::npos);
}

}  // namespace
}  // namespace edb

namespace edb {
namespace {

// What the Python runner asks of an Expr: whose trace it is, and whether its value is computed.
TEST(Programs, TraceContainsAndExprComputed) {
  Engine engine(testing::checked_options("batched"));
  Trace trace(engine), other(engine);
  const Expr x = tanh(trace.input({0.5f}));
  EXPECT_TRUE(trace.contains(x));
  EXPECT_FALSE(other.contains(x));
  EXPECT_FALSE(trace.contains(Expr()));
  EXPECT_FALSE(x.computed());
  trace.run();
  EXPECT_TRUE(x.computed());
  const Expr y = sigmoid(x);
  EXPECT_FALSE(y.computed());
  EXPECT_TRUE(x.computed());
  trace.finish();
  EXPECT_FALSE(trace.contains(x));
  EXPECT_NE(testing::usage_error([&] { (void)x.computed(); }).find("edb::Expr::computed()"), std::string::npos);
}

}  // namespace
}  // namespace edb

namespace edb {
namespace {

// A sub-program: the steps of a tanh chain until its first row falls below `limit`, awaiting each.
Program<std::pair<Expr, int>> chain_until(Trace& t, Parameter W, Expr h, float limit) {
  int steps = 0;
  do {
    h = tanh(matmul(t.param(W), h)) + 0.05f;
    ++steps;
  } while ((co_await h)(0) > limit && steps < 6);
  co_return std::pair{h, steps};
}

Program<int> fails_after_a_wait(Trace& t) {
  // Recorded apart from the co_await: GCC cannot keep an initializer list's array across a
  // suspension within one full-expression ("array used as initializer").
  const Expr x = tanh(t.input({1.0f}));
  co_await x;
  throw std::runtime_error("sub-program failed");
}

// Sub-programs run inside their caller: their waits are the instance's rounds, their results and
// exceptions come back at the co_await, and they nest.
TEST(Programs, SubProgramsRunInsideTheirCaller) {
  Model model("sub", 3);
  const Parameter W = model.add_parameter("W", 4, 4);
  auto program = [&](Trace& t, int i) -> Program<std::vector<float>> {
    std::vector<float> out;
    Expr h = t.input({0.1f * float(i), 0.3f, -0.2f, 0.5f});
    for (int part = 0; part < 1 + i % 3; ++part) {
      auto [last, steps] = co_await chain_until(t, W, h, 0.1f * float(i % 4));
      h = last;
      out.push_back(float(steps));
    }
    try {
      co_await fails_after_a_wait(t);
    } catch (const std::runtime_error& e) {
      out.push_back(-1.0f);
    }
    out.push_back((co_await h)(0));
    co_return out;
  };
  // The same, reading values instance by instance under the reference executor.
  auto plain = [&](Trace& t, int i) {
    std::vector<float> out;
    Expr h = t.input({0.1f * float(i), 0.3f, -0.2f, 0.5f});
    int rounds = 0;
    for (int part = 0; part < 1 + i % 3; ++part) {
      int steps = 0;
      do {
        h = tanh(matmul(t.param(W), h)) + 0.05f;
        ++steps;
        ++rounds;
      } while (h.value()(0) > 0.1f * float(i % 4) && steps < 6);
      out.push_back(float(steps));
    }
    ++rounds;  // fails_after_a_wait's one wait
    out.push_back(-1.0f);
    out.push_back(h.value()(0));
    return std::pair{out, rounds};
  };
  Engine engine(testing::checked_options("jit"));
  EngineOptions reference_options = testing::checked_options("reference");
  reference_options.policy = "sequential";
  Engine reference(reference_options);
  Trace trace(engine);
  std::vector<Program<std::vector<float>>> programs;
  for (int i = 0; i < 12; ++i) programs.push_back(program(trace, i));
  const InstanceReport report = run_instances(trace, programs);
  EXPECT_EQ(report.finished, 12);
  int64_t most_rounds = 0;
  for (int i = 0; i < 12; ++i) {
    Trace alone(reference);
    const auto [expected, rounds] = plain(alone, i);
    most_rounds = std::max<int64_t>(most_rounds, rounds);
    const std::vector<float>& got = programs[size_t(i)].result();
    ASSERT_EQ(got.size(), expected.size()) << i;
    for (size_t k = 0; k < got.size(); ++k) EXPECT_TRUE(testing::near_relative(got[k], expected[k], 1e-5)) << i;
  }
  EXPECT_EQ(report.rounds, most_rounds);

  // An uncaught exception of a sub-program ends its instance; an empty or used Program is a
  // UsageError at the co_await.
  Trace again(engine);
  std::vector<Program<int>> failing;
  failing.push_back([](Trace& t) -> Program<int> { co_return co_await fails_after_a_wait(t); }(again));
  failing.push_back([](Trace& t) -> Program<int> {
    Program<int> empty;
    co_return co_await std::move(empty);
  }(again));
  InstanceOptions keep_going;
  keep_going.rethrow = false;
  const InstanceReport failed = run_instances(again, failing, keep_going);
  EXPECT_EQ(failed.failed, 2);
  EXPECT_THROW(failing[0].result(), std::runtime_error);
  EXPECT_NE(testing::usage_error([&] { failing[1].result(); }).find("co_await on an empty Program"), std::string::npos);
}

}  // namespace
}  // namespace edb
