// Issue 28's classes of wrong compiled cells, and those the random cell fuzzer found beside them
// (differential_cells_test.cpp, shrunk), one small program each, written against the public API:
// values, call outputs, the loss and every gradient under every executor x policy x cells on/off,
// against the reference executor with cells off on the sequential policy. Each engine runs three
// traces: forward only (calls laid out for inference under jit), then backward twice (the first
// records its calls again with the training layout, the next uses it from the start).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <edbatch/edbatch.h>

#include "runtime/executor.h"
#include "scheduler/schedule.h"
#include "tests/support/test_support.h"

namespace edb {
namespace {

using Program = std::function<std::vector<Expr>(Trace&)>;

struct Result {
  std::vector<Tensor> values;  // call outputs, then (backward traces) the loss and every gradient
  std::vector<std::string> names;
  std::string error;
};

std::vector<float> column(int rows, float seed) {
  std::vector<float> v(static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) v[size_t(r)] = std::sin(seed * 1.7f + 0.37f * float(r) + 0.2f);
  return v;
}

// The loss: every output weighed elementwise by fixed, unequal weights.
Expr loss_of(Trace& t, const std::vector<Expr>& outputs) {
  std::vector<Expr> terms;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const int n = outputs[i].rows() * outputs[i].cols();
    std::vector<float> weights(static_cast<size_t>(n));
    for (int k = 0; k < n; ++k) weights[size_t(k)] = 0.1f * float(int((i * 7 + size_t(k) * 5) % 11) - 5) + 0.05f;
    terms.push_back(matmul(t.input(1, n, weights), reshape(outputs[i], n, 1)));
  }
  return sum(terms);
}

void add_gradients(Result& result, const Gradients& g, const Model& model, const std::string& trace) {
  result.values.push_back(Tensor{1, 1, {g.loss}});
  result.names.push_back(trace + ": loss");
  for (const Parameter& p : model.parameters()) {
    const Tensor* t = g.of(p);
    result.values.push_back(t ? *t : Tensor{p.rows(), p.cols(), std::vector<float>(size_t(p.rows() * p.cols()), 0.0f)});
    result.names.push_back(trace + ": gradient of " + p.name());
  }
  for (const LookupTable& table : model.lookups()) {
    const Gradients::Rows* rows = g.of(table);
    std::vector<float> dense(size_t(table.dim()) * size_t(table.entries()), 0.0f);
    for (size_t i = 0; rows && i < rows->entries.size(); ++i)
      for (int d = 0; d < table.dim(); ++d)
        dense[size_t(rows->entries[i]) * size_t(table.dim()) + size_t(d)] = rows->gradients[i * size_t(table.dim()) + size_t(d)];
    result.values.push_back(Tensor{table.dim(), table.entries(), dense});
    result.names.push_back(trace + ": gradient of " + table.name());
  }
}

Result run(const Model& model, const Program& program, const EngineOptions& options) {
  Result result;
  try {
    Engine engine(options);
    {
      Trace trace(engine);
      const std::vector<Expr> outputs = program(trace);
      trace.run();
      for (size_t i = 0; i < outputs.size(); ++i) {
        result.values.push_back(outputs[i].value());
        result.names.push_back("forward: output " + std::to_string(i));
      }
    }
    for (const char* name : {"first backward", "second backward"}) {
      Trace trace(engine);
      const std::vector<Expr> outputs = program(trace);
      const Gradients g = trace.backward(loss_of(trace, outputs));
      for (size_t i = 0; i < outputs.size(); ++i) {
        result.values.push_back(outputs[i].value());
        result.names.push_back(std::string(name) + ": output " + std::to_string(i));
      }
      add_gradients(result, g, model, name);
    }
  } catch (const std::exception& e) {
    result.error = e.what();
  }
  return result;
}

EngineOptions options_for(const std::string& policy, const std::string& executor, bool cells) {
  EngineOptions options;
  options.policy = policy;
  options.executor = executor;
  options.cells = cells;
  options.verify = true;
  options.search_budget_ms = 50;
  return options;
}

// Runs `program` under every executor x policy x cells on/off; every value must be the
// reference's (relative 1e-4; the bugs are tens of percent off).
void expect_every_engine_agrees(const Model& model, const Program& program, const std::string& cache) {
  const Result want = run(model, program, options_for("sequential", "reference", false));
  ASSERT_EQ(want.error, "");
  for (const std::string& executor : runtime::executor_names())
    for (const std::string& policy : scheduler::policy_names())
      for (const bool cells : {true, false}) {
        EngineOptions options = options_for(policy, executor, cells);
        options.cache_directory = cache;
        const std::string name = executor + "/" + policy + "/cells " + (cells ? "on" : "off");
        const Result got = run(model, program, options);
        EXPECT_EQ(got.error, "") << name;
        if (!got.error.empty()) continue;
        ASSERT_EQ(got.values.size(), want.values.size()) << name;
        // The first difference per engine, and how many values differ.
        std::string first;
        int differing = 0;
        for (size_t i = 0; i < want.values.size(); ++i) {
          const ::testing::AssertionResult same = testing::near_relative(got.values[i], want.values[i], 1e-4);
          if (same) continue;
          if (!differing++) first = want.names[i] + ": " + same.message();
        }
        EXPECT_EQ(differing, 0) << name << ": " << differing << " of " << want.values.size() << " values differ, first "
                                << first;
      }
}

// Class 1: a parameter passed as an argument, a different one per call, used as a matmul weight:
// the jit used the first call's weight for every call of the batch.
TEST(CellRegressions, PerCallParameterArgumentAsMatmulWeight) {
  testing::TempDir cache;
  Model model("class1", 5);
  const Parameter w1 = model.add_parameter("W1", 3, 3), w2 = model.add_parameter("W2", 3, 3);
  const Cell cell("step", {{3, 3}, {3, 1}}, [](Trace&, std::span<const Expr> in) {
    return std::vector<Expr>{tanh(matmul(in[0], in[1]))};
  });
  const Program program = [&](Trace& t) {
    std::vector<Expr> outputs;
    for (int i = 0; i < 4; ++i) outputs.push_back(cell(t, {t.param(i % 2 ? w1 : w2), t.input(column(3, float(i)))})[0]);
    return outputs;
  };
  expect_every_engine_agrees(model, program, cache.path());
}

// Class 1 through affine: the weight and the bias are arguments, different per call.
TEST(CellRegressions, PerCallParameterArgumentAsAffineWeight) {
  testing::TempDir cache;
  Model model("class1_affine", 6);
  const Parameter w1 = model.add_parameter("W1", 4, 3), w2 = model.add_parameter("W2", 4, 3);
  const Parameter b1 = model.add_parameter("b1", 4, 1), b2 = model.add_parameter("b2", 4, 1);
  const Parameter u = model.add_parameter("U", 4, 4);
  const Cell cell("affine_step", {{4, 1}, {4, 3}, {3, 1}}, [&](Trace& t, std::span<const Expr> in) {
    const Expr h = affine({in[0], in[1], in[2]});
    return std::vector<Expr>{sigmoid(h), tanh(matmul(t.param(u), h))};
  });
  const Program program = [&](Trace& t) {
    std::vector<Expr> outputs;
    for (int i = 0; i < 5; ++i) {
      const std::vector<Expr> out =
          cell(t, {t.param(i % 3 ? b1 : b2), t.param(i % 2 ? w1 : w2), t.input(column(3, float(i)))});
      outputs.insert(outputs.end(), out.begin(), out.end());
    }
    return outputs;
  };
  expect_every_engine_agrees(model, program, cache.path());
}

// Class 2: a parameter used through t.param in one cell's body and passed as an argument to
// another cell: its gradient held only the body's part.
TEST(CellRegressions, ParameterInABodyAndAsAnotherCellsArgument) {
  testing::TempDir cache;
  Model model("class2", 7);
  const Parameter w = model.add_parameter("W", 3, 3);
  const Cell inside("inside", {{3, 1}}, [&](Trace& t, std::span<const Expr> in) {
    return std::vector<Expr>{tanh(matmul(t.param(w), in[0]))};
  });
  const Cell passed("passed", {{3, 3}, {3, 1}}, [](Trace&, std::span<const Expr> in) {
    return std::vector<Expr>{sigmoid(matmul(in[0], in[1]))};
  });
  const Program program = [&](Trace& t) {
    std::vector<Expr> outputs;
    for (int i = 0; i < 3; ++i) {
      const Expr h = inside(t, {t.input(column(3, float(i)))})[0];
      outputs.push_back(h);
      outputs.push_back(passed(t, {t.param(w), h})[0]);
    }
    return outputs;
  };
  expect_every_engine_agrees(model, program, cache.path());
}

// Class 3: a parameter used through t.param in two cells' bodies, one of which also computes a
// value it does not return (a matmul, an affine): the parameter's gradient was wrong.
TEST(CellRegressions, ParameterInTwoBodiesWithUnreturnedValues) {
  testing::TempDir cache;
  Model model("class3", 8);
  const Parameter w = model.add_parameter("W", 3, 3), v = model.add_parameter("V", 2, 3);
  const Parameter b = model.add_parameter("b", 2, 1);
  const Cell first("first", {{3, 1}}, [&](Trace& t, std::span<const Expr> in) {
    const Expr unused = matmul(t.param(v), in[0]);  // computed, never returned
    (void)unused;
    return std::vector<Expr>{tanh(matmul(t.param(w), in[0]))};
  });
  const Cell second("second", {{3, 1}, {3, 1}}, [&](Trace& t, std::span<const Expr> in) {
    const Expr unused = affine({t.param(b), t.param(v), in[1]});  // computed, never returned
    (void)unused;
    return std::vector<Expr>{sigmoid(matmul(t.param(w), in[0]) + in[1])};
  });
  const Program program = [&](Trace& t) {
    std::vector<Expr> outputs;
    for (int i = 0; i < 3; ++i) {
      const Expr h = first(t, {t.input(column(3, float(i)))})[0];
      outputs.push_back(h);
      outputs.push_back(second(t, {h, t.input(column(3, float(i) + 0.5f))})[0]);
    }
    return outputs;
  };
  expect_every_engine_agrees(model, program, cache.path());
}

// Class 3 as the fuzzer found it (seed 485 then, shrunk): one parameter read through t.param in two
// cells' bodies, one call each; the second body also computes a matmul it does not return, of 3
// rows where its other values have 2, so that body does not lower to a compiled kernel while the
// first does (with V 2x2 both lower and the gradient is right). The jit's gradient held only the
// first cell's part.
TEST(CellRegressions, ParameterAsAWeightInOneBodyAndAnOperandInAnother) {
  testing::TempDir cache;
  Model model("class3_roles", 10);
  const Parameter p = model.add_parameter("p", 2, 1), v = model.add_parameter("V", 3, 2);
  const Cell weight("weight", {{1, 1}}, [&](Trace& t, std::span<const Expr> in) {
    return std::vector<Expr>{matmul(t.param(p), in[0])};
  });
  const Cell operand("operand", {{2, 1}}, [&](Trace& t, std::span<const Expr> in) {
    const Expr unused = matmul(t.param(v), in[0]);  // computed, never returned
    (void)unused;
    return std::vector<Expr>{tanh(t.param(p) + in[0])};
  });
  const Program program = [&](Trace& t) {
    return std::vector<Expr>{weight(t, {t.input({0.5f})})[0], operand(t, {t.input({0.1f, -0.8f})})[0]};
  };
  expect_every_engine_agrees(model, program, cache.path());
}

// Class 4: relu of rows 2..4 of a 6x1 lookup, one call, no parameter: value and gradient were
// wrong (a slice at a row offset that is not a multiple of the narrowest elementwise op).
TEST(CellRegressions, ReluOfASliceAtRowTwoOfALookup) {
  testing::TempDir cache;
  Model model("class4", 9);
  const LookupTable table = model.add_lookup("E", 4, 6);
  // Positive and negative values in rows 2..4 of every entry, so relu passes some and stops some.
  const std::span<float> values = table.values();
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.3f * float(int(i % 5) - 2) + 0.1f;
  const Cell cell("relu_slice", {{6, 1}}, [](Trace&, std::span<const Expr> in) {
    return std::vector<Expr>{relu(slice(in[0], 2, 5))};
  });
  const Program program = [&](Trace& t) { return cell(t, {t.lookup(table, 1)}); };
  expect_every_engine_agrees(model, program, cache.path());
}

// ---- classes the random cell fuzzer found beside the four (DifferentialCells, shrunk) ----
// "Seed N" names the program as the generator drew it when the class was found; the generator has
// drawn other programs for those seeds since, so the programs are kept here, not the seeds.

// Seed 61: a weight argument that is a parameter in one call and an input in the other (class 1
// without a second parameter): the forward values were wrong.
TEST(CellRegressions, WeightArgumentAParameterInOneCallAnInputInAnother) {
  testing::TempDir cache;
  Model model("mixed_weight", 11);
  const Parameter w = model.add_parameter("W", 2, 2);
  const Cell cell("product", {{2, 1}, {2, 2}}, [](Trace&, std::span<const Expr> in) {
    return std::vector<Expr>{matmul(in[1], in[0])};
  });
  const Program program = [&](Trace& t) {
    return std::vector<Expr>{cell(t, {t.input({0.23f, 0.5f}), t.param(w)})[0],
                             cell(t, {t.input({-0.05f, -0.72f}), t.input(2, 2, std::vector<float>{-0.94f, 0.27f, 0.93f, -0.9f})})[0]};
  };
  expect_every_engine_agrees(model, program, cache.path());
}

// Seed 98: an elementwise body on an argument that is a parameter in one call and an input in the
// other: the values of the trace that differentiates were wrong.
TEST(CellRegressions, ElementwiseOnAParameterArgumentInOneCallAnInputInAnother) {
  testing::TempDir cache;
  Model model("mixed_operand", 12);
  const Parameter p = model.add_parameter("p", 4, 1);
  const Cell cell("twice", {{4, 1}}, [](Trace&, std::span<const Expr> in) { return std::vector<Expr>{sum({in[0], in[0]})}; });
  const Program program = [&](Trace& t) {
    return std::vector<Expr>{cell(t, {t.param(p)})[0], cell(t, {t.input({0.63f, 0.84f, 0.43f, -0.55f})})[0]};
  };
  expect_every_engine_agrees(model, program, cache.path());
}

// Seed 91: a parameter read through t.param in a body and passed to the same cell as an argument
// (class 2 with one cell): the gradient missed the argument's part.
TEST(CellRegressions, ParameterInABodyAndAsThatCellsArgument) {
  testing::TempDir cache;
  Model model("same_cell", 13);
  const Parameter p = model.add_parameter("p", 4, 1);
  const Cell cell("minus", {{4, 1}}, [&](Trace& t, std::span<const Expr> in) { return std::vector<Expr>{in[0] - t.param(p)}; });
  const Program program = [&](Trace& t) {
    return std::vector<Expr>{cell(t, {t.input({0.9f, 0.48f, 0.17f, -0.79f})})[0], cell(t, {t.param(p)})[0]};
  };
  expect_every_engine_agrees(model, program, cache.path());
}

// Seed 173: a parameter read in a body (a cell without inputs) and outside any call: the gradient
// missed the outside use.
TEST(CellRegressions, ParameterInABodyAndOutsideAnyCall) {
  testing::TempDir cache;
  Model model("outside", 14);
  const Parameter p = model.add_parameter("p", 3, 1);
  const Cell cell("constant", {}, [&](Trace& t, std::span<const Expr>) { return std::vector<Expr>{sigmoid(t.param(p))}; });
  const Program program = [&](Trace& t) {
    return std::vector<Expr>{cell(t, std::span<const Expr>{})[0], slice(t.param(p), 0, 1)};
  };
  expect_every_engine_agrees(model, program, cache.path());
}

// Seed 354: class 4 on a parameter: a slice at row 1 of a parameter in a cell without inputs.
TEST(CellRegressions, SliceAtRowOneOfAParameterInACellWithoutInputs) {
  testing::TempDir cache;
  Model model("slice_parameter", 15);
  const Parameter p = model.add_parameter("p", 4, 1), q = model.add_parameter("q", 3, 1);
  const Cell cell("sliced", {}, [&](Trace& t, std::span<const Expr>) {
    return std::vector<Expr>{cmult(slice(t.param(p), 1, 4), t.param(q))};
  });
  const Program program = [&](Trace& t) { return cell(t, std::span<const Expr>{}); };
  expect_every_engine_agrees(model, program, cache.path());
}

// Seed 150: a body that computes a product it does not return, on a weight argument (an input in
// one call, a parameter in the other), and returns a concat of its other argument.
TEST(CellRegressions, UnreturnedProductBesideAConcatOfAnArgument) {
  testing::TempDir cache;
  Model model("unreturned", 16);
  const Parameter x = model.add_parameter("x", 6, 1), w = model.add_parameter("W", 2, 6);
  const Cell cell("tripled", {{6, 1}, {2, 6}}, [](Trace&, std::span<const Expr> in) {
    const Expr unused = matmul(in[1], in[0]);  // computed, never returned
    (void)unused;
    return std::vector<Expr>{concat({in[0], in[0], in[0]})};
  });
  const Program program = [&](Trace& t) {
    std::vector<float> weights(12);
    for (size_t i = 0; i < weights.size(); ++i) weights[i] = std::sin(float(i));
    const Expr first = concat({t.input({0.87f}), t.input({-0.05f, -0.88f, 0.3f, -0.83f, 0.53f})});
    return std::vector<Expr>{cell(t, {first, t.input(2, 6, weights)})[0], cell(t, {t.param(x), t.param(w)})[0]};
  };
  expect_every_engine_agrees(model, program, cache.path());
}

}  // namespace
}  // namespace edb
