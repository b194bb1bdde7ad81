// Cells (edb::Cell): calls give the same values as the body recorded inline and as the reference
// executor, calls of one cell batch together with the cell's own schedule inside, and bad calls
// and bodies are clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include <edbatch/edbatch.h>

#include "samples/models.h"
#include "samples/runner.h"
#include "tests/support/test_support.h"

namespace edb {
namespace {

using testing::usage_error;

// out = tanh(x) + sigmoid(x) * y: internally tanh, sigmoid, cmult, add (4 batches).
Cell mix_cell(const std::string& name = "mix") {
  return Cell(name, {{3, 1}, {3, 1}}, [](Trace&, std::span<const Expr> in) {
    return std::vector<Expr>{tanh(in[0]) + cmult(sigmoid(in[0]), in[1])};
  });
}

float mix(float x, float y) { return std::tanh(x) + y / (1.0f + std::exp(-x)); }

struct CallRun {
  std::vector<Tensor> values;
  Stats stats;
};

CallRun run_calls(const std::vector<const Cell*>& cells, int calls_each, EngineOptions options) {
  options.verify = true;
  Engine engine(options);
  Trace trace(engine);
  std::vector<Expr> outs;
  for (const Cell* cell : cells)
    for (int k = 0; k < calls_each; ++k) {
      const float v = 0.1f * float(k) - 0.3f;
      const Expr x = trace.input({v, 2 * v, -v});
      const Expr y = trace.input({1.0f, v, 0.5f});
      outs.push_back((*cell)(trace, {x, y})[0]);
    }
  trace.run();
  CallRun run;
  for (const Expr& e : outs) run.values.push_back(e.value());
  run.stats = engine.stats();
  return run;
}

TEST(Cells, CallsOfOneCellRunAsTheCellsOwnBatches) {
  const Cell cell = mix_cell();
  for (const char* policy : {"depth", "agenda", "greedy", "fsm"}) {
    EngineOptions options;
    options.policy = policy;
    const CallRun run = run_calls({&cell}, 6, options);
    EXPECT_EQ(run.stats.batches, 4) << policy;  // tanh and sigmoid, cmult, add: one batch each
    ASSERT_EQ(run.values.size(), 6u);
    for (int k = 0; k < 6; ++k) {
      const float v = 0.1f * float(k) - 0.3f;
      const float xs[3] = {v, 2 * v, -v}, ys[3] = {1.0f, v, 0.5f};
      for (int r = 0; r < 3; ++r) EXPECT_NEAR(run.values[size_t(k)](r), mix(xs[r], ys[r]), 1e-6) << policy;
    }
  }
}

TEST(Cells, OffRecordsTheBodyInlineWithTheSameValues) {
  const Cell cell = mix_cell();
  EngineOptions on, off;
  off.cells = false;
  const CallRun a = run_calls({&cell}, 5, on), b = run_calls({&cell}, 5, off);
  ASSERT_EQ(a.values.size(), b.values.size());
  for (size_t i = 0; i < a.values.size(); ++i) EXPECT_EQ(a.values[i].data, b.values[i].data);
  EXPECT_EQ(a.stats.nodes, b.stats.nodes);
}

TEST(Cells, DifferentCellsNeverShareABatchEvenWithTheSameName) {
  // The same name and ops, but one more constant: two cells.
  const Cell first = mix_cell("same");
  const Cell second("same", {{3, 1}, {3, 1}}, [](Trace&, std::span<const Expr> in) {
    return std::vector<Expr>{tanh(in[0]) + cmult(sigmoid(in[0] * 2.0f), in[1])};
  });
  EngineOptions options;
  const CallRun run = run_calls({&first, &second}, 3, options);
  EXPECT_EQ(run.stats.batches, 9);  // each cell's calls batch apart: 4 + 5
}

// The allocation-free call writes the same outputs into a span, and refuses a span of the wrong size
// (with cells on, before recording anything).
TEST(Cells, OutputsIntoASpanAreTheVectorsOutputs) {
  for (const bool cells : {true, false}) {
    EngineOptions options = testing::checked_options("jit");
    options.cells = cells;
    Engine engine(options);
    Trace trace(engine);
    const Cell cell = mix_cell();
    const Expr x = trace.input({0.5f, -1.0f, 2.0f}), y = trace.input({1.0f, 2.0f, 3.0f});
    const Expr arguments[2] = {x, y};
    Expr out[1];
    cell(trace, arguments, out);
    const std::vector<Expr> by_vector = cell(trace, arguments);
    EXPECT_EQ(out[0].value().data, by_vector[0].value().data);
    const size_t nodes = trace.node_count();
    Expr two[2];
    EXPECT_EQ(usage_error([&] { cell(trace, arguments, two); }),
              "edb::Cell: cell 'mix' returns 1 outputs, but room for 2 was given");
    if (cells) {
      EXPECT_EQ(trace.node_count(), nodes);
    }
  }
}

// A Cell declared again with the same name and body (say, inside the per-batch function) is the
// same cell: its calls batch with the first one's, and the engine's tables stay bounded.
TEST(Cells, ADeclarationAgainOfTheSameCellIsThatCell) {
  const Cell first = mix_cell("same"), second = mix_cell("same");
  EngineOptions options;
  EXPECT_EQ(run_calls({&first, &second}, 3, options).stats.batches, 4);  // one cell: 4 batches
  // 1000 traces on one engine, each value against the first: verify starts every trace's values as
  // NaN, so one a kernel leaves unwritten cannot pass as the trace before's.
  Engine engine(testing::checked_options("jit"));
  size_t signatures = 0;
  float first_value = 0;
  for (int t = 0; t < 1000; ++t) {
    const Cell declared_here = mix_cell();
    Trace trace(engine);
    const Expr x = trace.input({0.5f, -1.0f, 2.0f});
    const float value = declared_here(trace, {x, x})[0].value()(1);
    if (t == 0) first_value = value;
    EXPECT_EQ(value, first_value);
    if (t == 1) signatures = engine.signature_count();
  }
  EXPECT_EQ(engine.signature_count(), signatures);
}

// A body may hold its own constants, a fixed lookup entry and parameters; calls may come after a
// part of the trace was already evaluated.
TEST(Cells, ConstantsLookupsAndEvaluationsBetweenCalls) {
  Model model("cells", 7);
  const Parameter w = model.add_parameter("W", 3, 3);
  const LookupTable table = model.add_lookup("E", 4, 3);
  const Cell cell("rich", {{3, 1}}, [&](Trace& t, std::span<const Expr> in) {
    const Expr bias = t.input({0.5f, -0.25f, 1.0f});
    return std::vector<Expr>{tanh(matmul(t.param(w), in[0]) + bias + t.lookup(table, 2)), sigmoid(in[0])};
  });
  auto run = [&](bool cells) {
    EngineOptions options;
    options.cells = cells;
    options.verify = true;
    Engine engine(options);
    Trace trace(engine);
    std::vector<Tensor> values;
    Expr x = trace.input({0.1f, 0.2f, 0.3f});
    for (int k = 0; k < 5; ++k) {
      const std::vector<Expr> out = cell(trace, {x});
      if (k == 2) values.push_back(out[0].value());  // evaluate part of the trace, then go on
      x = out[0] + out[1];
    }
    values.push_back(x.value());
    return values;
  };
  const std::vector<Tensor> on = run(true), off = run(false);
  ASSERT_EQ(on.size(), off.size());
  for (size_t i = 0; i < on.size(); ++i)
    EXPECT_TRUE(testing::near_relative(on[i], off[i], 1e-6)) << i;
}

// A body that concatenates its arguments and also reads them alone (a TreeLSTM's forget gate
// over one child's h) reads them from the concat's copy: a slice view per argument and call, the
// same values, and the GEMM over it reads in place where node by node it gathers.
// A body may return what it was given (an argument, a parameter) as with cells off, alone or
// beside values it computes; gradients flow through such outputs too.
TEST(Cells, ABodyMayReturnItsArgumentsAndParametersUnchanged) {
  Model model("passthrough", 2);
  const Parameter W = model.add_parameter("W", 3, 3);
  const Cell both("both", {{3, 1}, {3, 1}}, [&](Trace& t, std::span<const Expr> in) {
    return std::vector<Expr>{in[0], tanh(matmul(t.param(W), in[1])), in[1]};
  });
  const Cell only("only", {{3, 1}}, [](Trace&, std::span<const Expr> in) { return std::vector<Expr>{in[0]}; });
  auto run = [&](const EngineOptions& options, std::vector<Tensor>& values) {
    Engine engine(options);
    Trace trace(engine);
    std::vector<Expr> outputs, losses;
    for (int i = 0; i < 5; ++i) {
      const Expr x = trace.input({float(i), 1.0f, -0.5f}), y = tanh(trace.input({0.25f, float(-i), 2.0f}));
      for (const Expr& out : both(trace, {x, y})) outputs.push_back(out);
      outputs.push_back(only(trace, {outputs.back()})[0]);
    }
    for (const Expr& out : outputs) losses.push_back(sum_elements(cmult(out, out)));
    const Gradients g = trace.backward(sum(losses));
    for (const Expr& out : outputs) values.push_back(out.value());
    values.push_back(*g.of(W));
    return g.loss;
  };
  EngineOptions reference;
  reference.executor = "reference";
  reference.cells = false;
  std::vector<Tensor> expected;
  const float loss = run(reference, expected);
  EXPECT_FLOAT_EQ(expected[0](1), 1.0f);  // call 0's first output is its argument x
  testing::TempDir cache;
  for (const char* executor : {"reference", "batched", "jit"})
    for (bool cells : {true, false}) {
      EngineOptions options;
      options.executor = executor;
      options.cells = cells;
      options.verify = true;
      options.cache_directory = cache.path();
      std::vector<Tensor> actual;
      EXPECT_TRUE(testing::near_relative(run(options, actual), loss)) << executor << " cells " << cells;
      ASSERT_EQ(actual.size(), expected.size());
      for (size_t k = 0; k < actual.size(); ++k)
        EXPECT_TRUE(testing::near_relative(actual[k], expected[k])) << executor << " cells " << cells << ": value " << k;
    }
}

// A lookup in a cell's body is an argument of each call (looked up in the caller's trace): the
// calls stay single nodes through a backward pass under every executor, the table's rows get the
// gradients the body sends them, and the values equal the reference with cells off.
TEST(Cells, ALookupInTheBodyIsAnArgumentAndItsRowGetsTheGradient) {
  Model model("looked", 5);
  const Parameter w = model.add_parameter("W", 3, 3);
  const LookupTable table = model.add_lookup("E", 6, 3);
  const Cell cell("looked", {{3, 1}}, [&](Trace& t, std::span<const Expr> in) {
    const Expr h = tanh(matmul(t.param(w), in[0]) + t.lookup(table, 2));
    return std::vector<Expr>{h, cmult(t.lookup(table, 4), in[0]) + t.lookup(table, 2)};
  });
  struct Result {
    float loss = 0;
    Tensor w_gradient;
    std::vector<int64_t> entries;
    std::vector<float> rows;
    std::string dump;
  };
  auto run = [&](const EngineOptions& options) {
    Engine engine(options);
    Result result;
    for (int step = 0; step < 2; ++step) {  // the second trace runs on an engine that has trained
      Trace trace(engine);
      std::vector<Expr> losses;
      for (int i = 0; i < 4; ++i) {
        Expr x = trace.lookup(table, i);
        for (int k = 0; k < 3; ++k) {
          const std::vector<Expr> out = cell(trace, {x});
          losses.push_back(sum_elements(cmult(out[1], out[1])));
          x = out[0];
        }
      }
      const Gradients g = trace.backward(sum(losses));
      result.loss = g.loss;
      result.w_gradient = *g.of(w);
      result.entries = g.of(table)->entries;
      result.rows = g.of(table)->gradients;
      result.dump = trace.dump();
    }
    return result;
  };
  EngineOptions reference;
  reference.executor = "reference";
  reference.cells = false;
  const Result expected = run(reference);
  EXPECT_EQ(expected.entries, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  testing::TempDir cache;
  for (const char* executor : {"reference", "batched", "jit"}) {
    EngineOptions options = testing::checked_options(executor);
    options.cache_directory = cache.path();
    const Result actual = run(options);
    EXPECT_TRUE(testing::near_relative(actual.loss, expected.loss)) << executor;
    EXPECT_TRUE(testing::near_relative(actual.w_gradient, expected.w_gradient)) << executor;
    EXPECT_EQ(actual.entries, expected.entries) << executor;
    ASSERT_EQ(actual.rows.size(), expected.rows.size()) << executor;
    for (size_t k = 0; k < actual.rows.size(); ++k)
      EXPECT_TRUE(testing::near_relative(actual.rows[k], expected.rows[k], 1e-4)) << executor << " row float " << k;
    // Twelve calls, each still one node, each passing its two lookups.
    size_t calls = 0;
    for (size_t at = actual.dump.find("= call("); at != std::string::npos; at = actual.dump.find("= call(", at + 1))
      ++calls;
    EXPECT_GE(calls, 12u) << executor << "\n" << actual.dump;
  }
}

TEST(Cells, ArgumentsCopiedIntoAConcatAreReadFromTheCopy) {
  Model model("cells", 11);
  const Parameter w = model.add_parameter("W", 4, 6), u = model.add_parameter("U", 3, 3);
  const Parameter b = model.add_parameter("b", 4, 1), c = model.add_parameter("c", 3, 1);
  const Cell cell("gates", {{3, 1}, {3, 1}}, [&](Trace& t, std::span<const Expr> in) {
    const Expr both = affine({t.param(b), t.param(w), concat({in[0], in[1]})});
    const Expr first = affine({t.param(c), t.param(u), in[0]});
    return std::vector<Expr>{tanh(both), sigmoid(first) + in[1] * 2.0f};
  });
  constexpr int kCalls = 6;
  auto run = [&](const char* executor, bool cells) {
    EngineOptions options = testing::checked_options(executor);
    options.cells = cells;
    Engine engine(options);
    Trace trace(engine);
    std::vector<Expr> outs;
    for (int k = 0; k < kCalls; ++k) {
      const float v = 0.2f * float(k) - 0.5f;
      // The first arguments come from two batches, interleaved: node by node the GEMM over them
      // gathers.
      const Expr input = trace.input({v, -v, 0.3f});
      const Expr x = k % 2 ? tanh(input) : sigmoid(input);
      const Expr y = tanh(trace.input({0.1f, v, 1.0f - v}));
      for (const Expr& e : cell(trace, {x, y})) outs.push_back(e);
    }
    trace.run();
    std::vector<Tensor> values;
    for (const Expr& e : outs) values.push_back(e.value());
    return std::pair(values, engine.stats());
  };
  const auto [reference, reference_stats] = run("reference", false);
  const auto [on, on_stats] = run("batched", true);
  const auto [off, off_stats] = run("batched", false);
  ASSERT_EQ(on.size(), reference.size());
  for (size_t i = 0; i < on.size(); ++i) {
    EXPECT_TRUE(testing::near_relative(on[i], reference[i], 1e-6)) << i;
    EXPECT_TRUE(testing::near_relative(off[i], reference[i], 1e-6)) << i;
  }
  EXPECT_EQ(on_stats.nodes, off_stats.nodes + 2 * kCalls);  // per call, a slice of the concat per argument
  EXPECT_LT(on_stats.bytes_gathered, off_stats.bytes_gathered);
}

// Every sample model, cells on and off and with the PQ-tree layout planner, against the
// reference executor (which runs the same calls unbatched).
class CellsOnSampleModels : public ::testing::TestWithParam<std::string> {};

TEST_P(CellsOnSampleModels, LossesEqualTheReferenceWithCellsOnAndOffAndPlanning) {
  samples::ModelConfig config;
  config.limit = 7;
  config.embed = 6;
  config.hidden = 5;
  config.seed = 3;
  auto sample = samples::find_model(GetParam())->make(config);
  samples::RunOptions run;
  run.batch = 4;
  run.repeat = 1;
  auto loss_with = [&](const char* executor, bool cells, bool memplan = false) {
    EngineOptions options;
    options.executor = executor;
    options.cells = cells;
    options.memplan = memplan;
    options.verify = true;
    Engine engine(options);
    return samples::run_inference(*sample, engine, run);
  };
  const samples::RunResult reference = loss_with("reference", false);
  const samples::RunResult on = loss_with("batched", true), off = loss_with("batched", false);
  EXPECT_TRUE(testing::near_relative(on.loss, reference.loss, 1e-5));
  EXPECT_TRUE(testing::near_relative(off.loss, reference.loss, 1e-5));
  EXPECT_TRUE(testing::near_relative(loss_with("reference", true).loss, reference.loss, 1e-5));
  // Cells may add views (an argument read from the body's concat of it), never drop a node.
  EXPECT_GE(on.stats.nodes, off.stats.nodes);
  const samples::RunResult planned = loss_with("batched", true, true);
  EXPECT_TRUE(testing::near_relative(planned.loss, reference.loss, 1e-5));
  EXPECT_LE(planned.stats.bytes_gathered, on.stats.bytes_gathered);
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const samples::ModelEntry& entry : samples::model_registry()) names.push_back(entry.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(AllModels, CellsOnSampleModels, ::testing::ValuesIn(model_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

TEST(CellErrors, BadCallsAndBodiesNameTheCellAndWhatWasWrong) {
  Engine engine(testing::checked_options("jit"));
  Trace trace(engine);
  const Cell cell = mix_cell();
  const Expr x = trace.input({1.0f, 2.0f, 3.0f});
  EXPECT_EQ(usage_error([&] { cell(trace, {x}); }), "edb::Cell: cell 'mix' takes 2 arguments, got 1");
  const Expr wide = trace.input({1.0f, 2.0f});
  EXPECT_EQ(usage_error([&] { cell(trace, {x, wide}); }),
            "edb::Cell: cell 'mix': argument 2 is 2x1, the cell declares 3x1");
  Trace other(engine);
  const Expr elsewhere = other.input({1.0f, 2.0f, 3.0f});
  EXPECT_EQ(usage_error([&] { cell(trace, {x, elsewhere}); }),
            "edb::Cell: cell 'mix': argument 2 belongs to a different trace");

  const Cell empty("empty", {{3, 1}}, [](Trace&, std::span<const Expr>) { return std::vector<Expr>{}; });
  EXPECT_EQ(usage_error([&] { empty(trace, {x}); }), "edb::Cell: cell 'empty': the body returned no outputs");
  const Cell leaking("leaking", {{3, 1}}, [&](Trace&, std::span<const Expr>) { return std::vector<Expr>{tanh(x)}; });
  EXPECT_EQ(usage_error([&] { leaking(trace, {x}); }),
            "edb::Cell: cell 'leaking': output 1 was not recorded by the body on the trace it was given");
  EXPECT_EQ(usage_error([] { Cell("bad", {{0, 1}}, [](Trace&, std::span<const Expr>) { return std::vector<Expr>{}; }); }),
            "edb::Cell: cell 'bad' input 1 has shape 0x1; rows and cols must be positive");
  // A call inside a body, whether the inner cell's calls are single nodes (the default jit) or
  // copies of its body (batched), and with cells off (the body records inline) alike.
  for (const bool cells : {true, false})
    for (const char* executor : {"jit", "batched"}) {
      EngineOptions options;
      options.executor = executor;
      options.cells = cells;
      Engine nesting_engine(options);
      Trace nesting_trace(nesting_engine);
      const Expr y = nesting_trace.input({1.0f, 2.0f, 3.0f});
      const Cell outer("outer", {{3, 1}}, [&](Trace& t, std::span<const Expr> in) { return cell(t, {in[0], in[0]}); });
      EXPECT_EQ(usage_error([&] { outer(nesting_trace, {y}); }),
                "edb::Cell: cell 'outer': the body calls another cell; cells do not nest yet")
          << executor << (cells ? " cells on" : " cells off");
      // The trace records on after the refusal, and the inner cell is called outside a body.
      EXPECT_FALSE(cell(nesting_trace, {y, y}).empty()) << executor;
    }
  // A value captured from outside the body: the same error with cells on (the jit's single-node
  // calls, the batched executor's copies) and off, naming the cell and what to do instead.
  for (const bool cells : {true, false})
    for (const char* executor : {"jit", "batched"}) {
      EngineOptions options;
      options.cells = cells;
      options.executor = executor;
      Engine capturing_engine(options);
      Trace capturing_trace(capturing_engine);
      const Expr outside = capturing_trace.input({1.0f, 2.0f, 3.0f});
      const Cell capturing("capturing", {{3, 1}}, [&](Trace&, std::span<const Expr> in) {
        return std::vector<Expr>{in[0] + outside};
      });
      EXPECT_EQ(usage_error([&] { capturing(capturing_trace, {capturing_trace.input({0.0f, 1.0f, 2.0f})}); }),
                "edb::Cell: cell 'capturing': the body reads a value recorded outside it (argument 2 of edb::add()); a "
                "body may use only its arguments, parameters and constants: pass the value to the cell as an argument")
          << "cells " << cells << ", " << executor;
    }
  // After the errors the trace still records and runs calls.
  EXPECT_NEAR(cell(trace, {x, x})[0].value()(0), mix(1.0f, 1.0f), 1e-6);
}

}  // namespace
}  // namespace edb
