// Unit tests for Optimizer (train.h): SGD, momentum and Adam against updates written out here,
// global-norm clipping, lazy updates of lookup-table rows, the state file (a resumed run is
// bit-identical; every load error) and the UsageErrors for bad options and bad gradients.
// Gradients are built by hand, so these tests do not depend on Trace::backward.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include <edbatch/train.h>

#include "tests/support/test_support.h"

namespace edb {

// For gtest's messages about the parameterised tests (its default prints raw bytes).
static void PrintTo(const OptimizerOptions& o, std::ostream* out) {
  *out << o.kind << " learning_rate " << o.learning_rate << " momentum " << o.momentum;
}

namespace {

using edb::testing::add_layout;
using edb::testing::all_values;
using edb::testing::read_file;
using edb::testing::TempDir;
using edb::testing::usage_error;
using edb::testing::write_file;

constexpr size_t kHeaderBytes = 8 + 4 + 8 + 8;  // magic, version, body size, checksum

std::vector<float> copy(std::span<const float> v) { return {v.begin(), v.end()}; }

Gradients::Dense dense(const Parameter& p, std::vector<float> values) {
  return {p, Tensor{p.rows(), p.cols(), std::move(values)}};
}

Gradients::Rows rows(const LookupTable& table, std::vector<int64_t> entries, std::vector<float> values) {
  return {table, std::move(entries), std::move(values)};
}

Gradients gradients(std::vector<Gradients::Dense> parameters, std::vector<Gradients::Rows> tables = {}) {
  Gradients g;
  g.parameters = std::move(parameters);
  g.tables = std::move(tables);
  return g;
}

OptimizerOptions sgd(float learning_rate, float momentum = 0) {
  OptimizerOptions o;
  o.kind = "sgd";
  o.learning_rate = learning_rate;
  o.momentum = momentum;
  return o;
}

OptimizerOptions adam(float learning_rate) {
  OptimizerOptions o;
  o.kind = "adam";
  o.learning_rate = learning_rate;
  return o;
}

// Entry `entry`'s values in a table.
std::vector<float> row(const LookupTable& table, int entry) {
  return copy(table.values().subspan(size_t(entry) * table.dim(), table.dim()));
}

// ---- The updates.

TEST(OptimizerSgd, StepIsLearningRateTimesGradient) {
  Model model("m");
  const Parameter w = model.add_parameter("W", 2, 3);
  const Parameter b = model.add_parameter("b", 2, 1);
  const std::vector<float> w0 = copy(w.values()), b0 = copy(b.values());
  const std::vector<float> g = {0.5f, -1.0f, 2.0f, 0.25f, 0.0f, -3.0f};
  Optimizer optimizer(model, sgd(0.1f));
  const float norm = optimizer.step(gradients({dense(w, g)}));

  double squares = 0;
  for (float x : g) squares += double(x) * x;
  EXPECT_FLOAT_EQ(norm, float(std::sqrt(squares)));
  for (size_t i = 0; i < g.size(); ++i) EXPECT_FLOAT_EQ(w.values()[i], w0[i] - 0.1f * g[i]) << i;
  EXPECT_EQ(copy(b.values()), b0) << "a parameter without a gradient must not move";
  EXPECT_EQ(optimizer.steps(), 1);
}

TEST(OptimizerSgd, MomentumOverThreeSteps) {
  Model model("m");
  const Parameter w = model.add_parameter("W", 2, 2);
  const std::vector<std::vector<float>> steps = {
      {1.0f, -2.0f, 0.5f, 0.0f}, {0.5f, 1.0f, -1.0f, 2.0f}, {-0.25f, 0.0f, 3.0f, 1.0f}};
  const double lr = 0.05, mu = 0.9;
  std::vector<double> expected(w.values().begin(), w.values().end()), velocity(4, 0.0);
  Optimizer optimizer(model, sgd(float(lr), float(mu)));
  for (const auto& g : steps) {
    optimizer.step(gradients({dense(w, g)}));
    for (size_t i = 0; i < 4; ++i) {
      velocity[i] = mu * velocity[i] + g[i];
      expected[i] -= lr * velocity[i];
    }
  }
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(w.values()[i], expected[i], 1e-6) << i;
  EXPECT_EQ(optimizer.steps(), 3);
}

// Adam as Kingma and Ba write it, in double: bias-corrected moments, epsilon outside the root.
struct AdamReference {
  AdamReference(double lr, std::span<const float> start)
      : lr(lr), weights(start.begin(), start.end()), m(start.size()), v(start.size()) {}
  double lr, beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8;
  std::vector<double> weights, m, v;
  int t = 0;
  void step(const std::vector<float>& g) {
    ++t;
    for (size_t i = 0; i < g.size(); ++i) {
      m[i] = beta1 * m[i] + (1 - beta1) * g[i];
      v[i] = beta2 * v[i] + (1 - beta2) * double(g[i]) * g[i];
      const double m_hat = m[i] / (1 - std::pow(beta1, t)), v_hat = v[i] / (1 - std::pow(beta2, t));
      weights[i] -= lr * m_hat / (std::sqrt(v_hat) + epsilon);
    }
  }
};

TEST(OptimizerAdam, ThreeStepsMatchAReferenceInDouble) {
  Model model("m");
  const Parameter w = model.add_parameter("W", 3, 2);
  AdamReference reference(0.01, w.values());
  // Element 5 sees a zero gradient first (v stays 0: epsilon alone keeps the division finite).
  const std::vector<std::vector<float>> steps = {{1.0f, -2.0f, 0.5f, 0.001f, 30.0f, 0.0f},
                                                 {-1.0f, -2.0f, 0.25f, 0.002f, -10.0f, 0.5f},
                                                 {0.5f, 1.0f, 0.0f, -0.003f, 20.0f, -1.5f}};
  Optimizer optimizer(model, adam(0.01f));
  for (const auto& g : steps) {
    optimizer.step(gradients({dense(w, g)}));
    reference.step(g);
    for (size_t i = 0; i < 6; ++i)
      ASSERT_NEAR(w.values()[i], reference.weights[i], 1e-6) << "step " << reference.t << ", value " << i;
  }
}

TEST(OptimizerClip, ScalesByClipOverNormAndReturnsTheNorm) {
  Model model("m");
  const Parameter w = model.add_parameter("W", 1, 2);
  const LookupTable e = model.add_lookup("E", 4, 2);
  const std::vector<float> w0 = copy(w.values()), e2 = row(e, 2);
  // The global norm spans dense and sparse gradients: |(3, 0, 0, 4)| = 5.
  OptimizerOptions options = sgd(1.0f);
  options.clip_norm = 1.0f;
  Optimizer optimizer(model, options);
  EXPECT_FLOAT_EQ(optimizer.step(gradients({dense(w, {3, 0})}, {rows(e, {2}, {0, 4})})), 5.0f);
  EXPECT_FLOAT_EQ(w.values()[0], w0[0] - 0.6f);
  EXPECT_FLOAT_EQ(w.values()[1], w0[1]);
  EXPECT_FLOAT_EQ(row(e, 2)[0], e2[0]);
  EXPECT_FLOAT_EQ(row(e, 2)[1], e2[1] - 0.8f);

  // Under the limit nothing is scaled.
  const std::vector<float> w1 = copy(w.values());
  EXPECT_FLOAT_EQ(optimizer.step(gradients({dense(w, {0.3f, 0.4f})})), 0.5f);
  EXPECT_FLOAT_EQ(w.values()[0], w1[0] - 0.3f);
  EXPECT_FLOAT_EQ(w.values()[1], w1[1] - 0.4f);

  // clip_norm 0 never clips.
  Optimizer unclipped(model, sgd(1.0f));
  const std::vector<float> w2 = copy(w.values());
  EXPECT_FLOAT_EQ(unclipped.step(gradients({dense(w, {30, 40})})), 50.0f);
  EXPECT_FLOAT_EQ(w.values()[0], w2[0] - 30);
}

// ---- Lookup tables: only the touched rows, and only their moments.

TEST(OptimizerSparse, OnlyTouchedRowsAndTheirMomentsChange) {
  Model model("m");
  const LookupTable e = model.add_lookup("E", 5, 2);
  std::vector<std::vector<float>> start;
  for (int entry = 0; entry < 5; ++entry) start.push_back(row(e, entry));
  const float lr = 0.5f, mu = 0.5f;
  Optimizer optimizer(model, sgd(lr, mu));
  optimizer.step(gradients({}, {rows(e, {1, 3}, {1, 2, 3, 4})}));
  optimizer.step(gradients({}, {rows(e, {0}, {5, 6})}));
  optimizer.step(gradients({}, {rows(e, {1}, {7, 8})}));

  // Row 1's velocity did not decay in step 2, which did not touch it: v = mu * g1 + g3.
  const float v1[2] = {mu * 1 + 7, mu * 2 + 8};
  EXPECT_FLOAT_EQ(row(e, 1)[0], start[1][0] - lr * 1 - lr * v1[0]);
  EXPECT_FLOAT_EQ(row(e, 1)[1], start[1][1] - lr * 2 - lr * v1[1]);
  // Row 3 has a velocity from step 1, but untouched rows never move on it (dense momentum would).
  EXPECT_FLOAT_EQ(row(e, 3)[0], start[3][0] - lr * 3);
  EXPECT_FLOAT_EQ(row(e, 3)[1], start[3][1] - lr * 4);
  EXPECT_FLOAT_EQ(row(e, 0)[0], start[0][0] - lr * 5);
  EXPECT_FLOAT_EQ(row(e, 0)[1], start[0][1] - lr * 6);
  EXPECT_EQ(row(e, 2), start[2]);
  EXPECT_EQ(row(e, 4), start[4]);
}

TEST(OptimizerSparse, AdamRowsUseTheGlobalStepForBiasCorrection) {
  Model model("m");
  const LookupTable e = model.add_lookup("E", 3, 2);
  const std::vector<float> row0 = row(e, 0), row1 = row(e, 1), row2 = row(e, 2);
  Optimizer optimizer(model, adam(0.01f));
  optimizer.step(gradients({}, {rows(e, {0}, {1, -1})}));
  const std::vector<float> row0_after_one = row(e, 0);
  optimizer.step(gradients({}, {rows(e, {1}, {2, 0.5f})}));

  EXPECT_EQ(row(e, 0), row0_after_one) << "step 2 did not touch row 0";
  EXPECT_NE(row0_after_one, row0);
  // Row 1's first update, at global step t = 2: m = (1 - b1) g, v = (1 - b2) g^2.
  const double b1 = 0.9, b2 = 0.999;
  const float g[2] = {2, 0.5f};
  for (int i = 0; i < 2; ++i) {
    const double m_hat = (1 - b1) * g[i] / (1 - b1 * b1);
    const double v_hat = (1 - b2) * g[i] * g[i] / (1 - b2 * b2);
    EXPECT_NEAR(row(e, 1)[i], row1[i] - 0.01 * m_hat / (std::sqrt(v_hat) + 1e-8), 1e-6) << i;
  }
  EXPECT_EQ(row(e, 2), row2);
}

// ---- The state file.

// Step k's gradients: every dense value, and table rows that differ from step to step (some rows
// first touched after a resume), with values large enough that clipping takes part.
Gradients gradients_for_step(const Model& model, int k) {
  Gradients g;
  for (const Parameter& p : model.parameters()) {
    std::vector<float> values(p.values().size());
    for (size_t i = 0; i < values.size(); ++i) values[i] = std::sin(float(k * 31 + i)) * float(k);
    g.parameters.push_back(dense(p, std::move(values)));
  }
  const LookupTable e = model.lookup("E");
  const std::vector<int64_t> entries = {int64_t(k % 3), int64_t(3 + k % 4), 9};
  std::vector<float> values(entries.size() * e.dim());
  for (size_t i = 0; i < values.size(); ++i) values[i] = std::cos(float(k * 17 + i));
  g.tables.push_back(rows(e, entries, std::move(values)));
  return g;
}

class OptimizerResume : public ::testing::TestWithParam<OptimizerOptions> {};

TEST_P(OptimizerResume, IsBitIdenticalToAnUninterruptedRun) {
  OptimizerOptions options = GetParam();
  options.clip_norm = 4;
  TempDir dir;
  // Uninterrupted: four steps, the learning rate lowered after the second.
  Model straight("m", 1);
  add_layout(straight);
  Optimizer uninterrupted(straight, options);
  for (int k = 1; k <= 4; ++k) {
    if (k == 3) uninterrupted.set_learning_rate(options.learning_rate / 2);
    uninterrupted.step(gradients_for_step(straight, k));
  }

  // Interrupted after two steps; the model and the optimizer saved.
  Model first("m", 1);
  add_layout(first);
  Optimizer before(first, options);
  for (int k = 1; k <= 2; ++k) before.step(gradients_for_step(first, k));
  before.set_learning_rate(options.learning_rate / 2);
  first.save(dir.file("model.edb"));
  before.save(dir.file("optimizer.edb"));
  EXPECT_EQ(testing::leftovers(dir.path()), std::vector<std::string>{}) << "no temporary left behind";

  // Resumed into fresh objects: a model from another seed, an optimizer with another rate.
  Model resumed("m", 2);
  add_layout(resumed);
  resumed.load(dir.file("model.edb"));
  OptimizerOptions fresh_options = options;
  fresh_options.learning_rate = 0.75f;
  Optimizer after(resumed, fresh_options);
  after.load(dir.file("optimizer.edb"));
  EXPECT_EQ(after.steps(), 2);
  EXPECT_EQ(after.options().learning_rate, options.learning_rate / 2) << "load restores the options";
  for (int k = 3; k <= 4; ++k) after.step(gradients_for_step(resumed, k));

  const std::vector<float> expected = all_values(straight), got = all_values(resumed);
  ASSERT_EQ(got.size(), expected.size());
  EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)), 0)
      << "the resumed run differs from the uninterrupted one";
  EXPECT_NE(all_values(first), expected);

  // Saving the same state twice writes the same bytes.
  after.save(dir.file("again.edb"));
  uninterrupted.save(dir.file("straight.edb"));
  EXPECT_EQ(read_file(dir.file("again.edb")), read_file(dir.file("straight.edb")));
}

INSTANTIATE_TEST_SUITE_P(OptimizerKinds, OptimizerResume,
                         ::testing::Values(sgd(0.1f), sgd(0.1f, 0.9f), adam(0.01f)),
                         [](const auto& info) {
                           const OptimizerOptions& o = info.param;
                           return o.kind + (o.momentum > 0 ? "Momentum" : "");
                         });

// A saved Adam state after one step, and an optimizer (on another model of the same layout, with
// its own step) to load it into; each load error must leave that optimizer as it was.
class OptimizerFile : public ::testing::Test {
 protected:
  void SetUp() override {
    add_layout(saved_model);
    Optimizer saver(saved_model, adam(0.01f));
    saver.step(gradients_for_step(saved_model, 1));
    saver.save(path);
    bytes = read_file(path);
    add_layout(target_model);
    target = std::make_unique<Optimizer>(target_model, adam(0.02f));
    target->step(gradients_for_step(target_model, 5));
  }
  std::string load_error(const std::string& contents) {
    write_file(bad, contents);
    const std::string error = usage_error([&] { target->load(bad); });
    EXPECT_EQ(target->steps(), 1) << "a failed load changed the optimizer";
    EXPECT_EQ(target->options().learning_rate, 0.02f) << "a failed load changed the optimizer";
    return error;
  }
  std::string body() const { return bytes.substr(kHeaderBytes); }
  std::string prefix(const std::string& file) const { return "edb::Optimizer::load(): '" + file + "'"; }

  TempDir dir;
  std::string path = dir.file("optimizer.edb"), bad = dir.file("bad.edb");
  Model saved_model{"m", 1}, target_model{"m", 2};
  std::unique_ptr<Optimizer> target;
  std::string bytes;
};

TEST_F(OptimizerFile, Layout) {
  EXPECT_EQ(bytes.substr(0, 8), "EDBOPTIM");
  // kind, six options, steps, count; per entry name, kind, shape, buffer count, m and v; the
  // checksum of the model values the state goes with (format version 2).
  const size_t body_bytes = (4 + 4) + 6 * 4 + 8 + 4 + (4 + 1 + 1 + 8 + 1 + 2 * 12 * 4) +
                            (4 + 1 + 1 + 8 + 1 + 2 * 3 * 4) + (4 + 1 + 1 + 8 + 1 + 2 * 40 * 4) + 8;
  EXPECT_EQ(bytes.size(), kHeaderBytes + body_bytes);
}

TEST_F(OptimizerFile, MissingFile) {
  const std::string missing = dir.file("missing.edb");
  EXPECT_EQ(usage_error([&] { target->load(missing); }),
            "edb::Optimizer::load(): '" + missing + "' does not exist");
}

TEST_F(OptimizerFile, BadMagicAndVersion) {
  std::string file = bytes;
  file[0] = 'X';
  EXPECT_EQ(load_error(file), prefix(bad) + " at byte 8: not an edbatch optimizer state file (bad magic)");
  // A model file is not an optimizer file.
  file = bytes;
  std::memcpy(file.data(), "EDBMODEL", 8);
  EXPECT_EQ(load_error(file), prefix(bad) + " at byte 8: not an edbatch optimizer state file (bad magic)");
  file = bytes;
  const uint32_t version = 7;
  std::memcpy(file.data() + 8, &version, 4);
  EXPECT_EQ(load_error(file), prefix(bad) + " at byte 12: format version 7, this build reads version 1 to 2");
}

TEST_F(OptimizerFile, Truncated) {
  const size_t size = bytes.size() - kHeaderBytes;
  EXPECT_EQ(load_error(bytes.substr(0, bytes.size() - 4)),
            prefix(bad) + " at byte 28: body is " + std::to_string(size - 4) + " bytes, header says " +
                std::to_string(size) + " (truncated?)");
  EXPECT_EQ(load_error(bytes.substr(0, 20)),
            prefix(bad) + " at byte 20: file ends inside the header (truncated?)");
  EXPECT_EQ(load_error(""), prefix(bad) + " at byte 0: file ends inside the header (truncated?)");
  // Cut inside the body with a consistent header: the parser meets the end.
  const std::string cut = testing::with_binary_body(bytes, body().substr(0, 36));  // kind 8, options 24, steps 8
  EXPECT_NE(load_error(cut).find("file ends inside the step count (truncated?)"), std::string::npos);
}

TEST_F(OptimizerFile, FlippedByteFailsTheChecksum) {
  for (size_t at : {kHeaderBytes, kHeaderBytes + 20, bytes.size() - 1}) {
    std::string file = bytes;
    file[at] = char(file[at] ^ 0x10);
    EXPECT_EQ(load_error(file), prefix(bad) + " at byte 28: checksum mismatch (the file is damaged)")
        << "flipped byte " << at;
  }
}

TEST_F(OptimizerFile, OtherModelsAndKinds) {
  // A model without 'b'.
  Model smaller("m", 3);
  smaller.add_parameter("W", 3, 4);
  smaller.add_lookup("E", 10, 4);
  Optimizer on_smaller(smaller, adam(0.01f));
  std::string error = usage_error([&] { on_smaller.load(path); });
  EXPECT_NE(error.find(prefix(path)), std::string::npos) << error;
  EXPECT_NE(error.find("the file has parameter 'b', which model 'm' lacks"), std::string::npos) << error;
  EXPECT_EQ(on_smaller.steps(), 0);

  // A table of another size.
  Model wider("m", 3);
  wider.add_parameter("W", 3, 4);
  wider.add_parameter("b", 3, 1);
  wider.add_lookup("E", 11, 4);
  Optimizer on_wider(wider, adam(0.01f));
  error = usage_error([&] { on_wider.load(path); });
  EXPECT_NE(error.find("lookup table 'E' has 10 entries of dimension 4 in the file but 11 entries of "
                       "dimension 4 in the model"),
            std::string::npos)
      << error;

  // A parameter of another shape.
  Model reshaped("m", 3);
  reshaped.add_parameter("W", 4, 3);
  Optimizer on_reshaped(reshaped, adam(0.01f));
  error = usage_error([&] { on_reshaped.load(path); });
  EXPECT_NE(error.find("parameter 'W' has shape 3x4 in the file but shape 4x3 in the model"),
            std::string::npos)
      << error;

  // An SGD optimizer cannot take Adam's state.
  Optimizer plain(target_model, sgd(0.1f));
  EXPECT_EQ(usage_error([&] { plain.load(path); }),
            prefix(path) + " at byte 36: the file holds adam state; this optimizer's kind is sgd");
}

TEST_F(OptimizerFile, BodyErrorsBehindAValidChecksum) {
  // A negative learning rate (the first option, after the 4-byte length and "adam").
  std::string changed = body();
  const float negative = -1;
  std::memcpy(changed.data() + 8, &negative, 4);
  EXPECT_EQ(load_error(testing::with_binary_body(bytes, changed)),
            prefix(bad) + " at byte 60: options: learning_rate -1 must be finite and > 0");
  // Bytes after the last entry.
  EXPECT_EQ(load_error(testing::with_binary_body(bytes, body() + "junk")),
            prefix(bad) + " at byte " + std::to_string(bytes.size()) + ": 4 bytes follow the last entry");
  // Moments that would poison the next step: a NaN, or a negative second moment (E's v is last,
  // before the model's 8-byte checksum).
  for (const float value : {std::nanf(""), -1.0f}) {
    changed = body();
    std::memcpy(changed.data() + changed.size() - 8 - 4, &value, 4);
    EXPECT_EQ(load_error(testing::with_binary_body(bytes, changed)),
              prefix(bad) + " at byte " + std::to_string(bytes.size() - 8) + ": a moment value is " +
                  (std::isnan(value) ? "nan" : "-1") + " (the file is damaged)");
  }
  // A damaged name length must fail cleanly, not allocate or read past the end.
  changed = body();
  const uint32_t huge = 0xfffffff0u;
  std::memcpy(changed.data() + 4 + 4 + 24 + 8 + 4, &huge, 4);
  EXPECT_NE(load_error(testing::with_binary_body(bytes, changed)).find("file ends inside a name (truncated?)"),
            std::string::npos);
}

TEST_F(OptimizerFile, DuplicateEntry) {
  Model two("m");
  two.add_parameter("a", 2, 1);
  two.add_parameter("b", 2, 1);
  Optimizer optimizer(two, sgd(0.1f));
  optimizer.save(path);
  std::string changed = read_file(path).substr(kHeaderBytes);
  const std::string b_entry("\x01\x00\x00\x00" "b", 5);
  const size_t at = changed.find(b_entry);
  ASSERT_NE(at, std::string::npos);
  changed.replace(at, 5, std::string("\x01\x00\x00\x00" "a", 5));
  write_file(bad, testing::with_binary_body(read_file(path), changed));
  const std::string error = usage_error([&] { optimizer.load(bad); });
  EXPECT_NE(error.find("the file has parameter 'a' twice"), std::string::npos) << error;
}

TEST_F(OptimizerFile, FailedLoadsChangeNothing) {
  // A twin of the target with the same history; after failed loads both step alike, bit for bit.
  Model twin_model("m", 2);
  add_layout(twin_model);
  Optimizer twin(twin_model, adam(0.02f));
  twin.step(gradients_for_step(twin_model, 5));
  std::string damaged = bytes;
  damaged.back() = char(damaged.back() ^ 1);
  load_error(damaged);
  load_error(bytes.substr(0, bytes.size() / 2));
  target->step(gradients_for_step(target_model, 6));
  twin.step(gradients_for_step(twin_model, 6));
  EXPECT_EQ(all_values(target_model), all_values(twin_model));
  // And a good load does take effect.
  target->load(path);
  EXPECT_EQ(target->steps(), 1);
  EXPECT_EQ(target->options().learning_rate, 0.01f);
}

// ---- UsageErrors for options and gradients.

// Optimizer::step(gradients, engine) cuts the update into pieces (32,768 weights, or as many of a
// table's rows) across the engine's threads: weights, moments and norm are step()'s to the bit, for
// parameters and tables of several pieces and of one, under every kind, with clipping.
TEST(OptimizerThreads, StepOnAnEnginesThreadsEqualsThePlainStepToTheBit) {
  OptimizerOptions clipped = adam(0.01f);
  clipped.clip_norm = 0.5f;
  for (const OptimizerOptions& options : {sgd(0.1f), sgd(0.05f, 0.9f), adam(0.01f), clipped}) {
    for (int threads : {1, 2, 3}) {
      Model plain("m", 5), cut("m", 5);
      for (Model* m : {&plain, &cut}) {
        m->add_parameter("big", 300, 250);  // 75,000 weights: three pieces
        m->add_parameter("small", 7, 3);
        m->add_lookup("E", 20000, 3);  // rows touched: 15,000, so two pieces of 10,922 rows
      }
      Optimizer plain_optimizer(plain, options), cut_optimizer(cut, options);
      EngineOptions engine_options;
      engine_options.threads = threads;
      Engine engine(engine_options);
      uint64_t seed = 17;
      const auto random_values = [&](size_t count) {
        std::vector<float> v(count);
        for (float& x : v) {
          seed = seed * 6364136223846793005ull + 1442695040888963407ull;
          x = float(int64_t(seed >> 40) % 2001 - 1000) / 1000.0f;
        }
        return v;
      };
      // Plain SGD written out for the parameter of several pieces: both runs cut it the same way.
      std::vector<float> expected_big = copy(plain.parameter("big").values());
      for (int step = 0; step < 3; ++step) {
        std::vector<int64_t> entries;
        for (int64_t e = step; e < 20000 && entries.size() < 15000; e += 1 + (e % 3 == 0)) entries.push_back(e);
        const std::vector<float> big = random_values(75000), small = random_values(21),
                                 table = random_values(entries.size() * 3);
        const auto of = [&](Model& m) {
          return gradients({dense(m.parameter("big"), big), dense(m.parameter("small"), small)},
                           {rows(m.lookup("E"), entries, table)});
        };
        for (size_t i = 0; i < big.size(); ++i) expected_big[i] -= options.learning_rate * big[i];
        const float plain_norm = plain_optimizer.step(of(plain));
        const float cut_norm = cut_optimizer.step(of(cut), engine);
        EXPECT_EQ(std::memcmp(&plain_norm, &cut_norm, sizeof(float)), 0) << options.kind << ", " << threads << " threads";
      }
      if (options.kind == "sgd" && options.momentum == 0) {
        EXPECT_EQ(copy(plain.parameter("big").values()), expected_big);
      }
      const std::vector<float> a = all_values(plain), b = all_values(cut);
      ASSERT_EQ(a.size(), b.size());
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
          << options.kind << " momentum " << options.momentum << ", " << threads << " threads";
      // A bad gradient among large ones (checked by tasks): the same message, the first in order.
      std::vector<float> bad = random_values(75000);
      bad[74999] = std::nanf("");
      const auto bad_step = [&](Model& m, bool on_engine) {
        Gradients g = gradients({dense(m.parameter("big"), bad)}, {rows(m.lookup("E"), {5, 3}, {1, 1, 1, 1, 1, 1})});
        return usage_error([&] { on_engine ? cut_optimizer.step(g, engine) : plain_optimizer.step(g); });
      };
      EXPECT_EQ(bad_step(cut, true), bad_step(plain, false));
      EXPECT_EQ(bad_step(plain, false), "edb::Optimizer::step(): the gradient for parameter 'big' holds nan at (299, 249); no weight was changed");
      // The moments too: one more step from equal weights moves them equally only if they are.
      TempDir dir;
      plain_optimizer.save(dir.file("plain.optimizer"));
      cut_optimizer.save(dir.file("cut.optimizer"));
      EXPECT_EQ(read_file(dir.file("plain.optimizer")), read_file(dir.file("cut.optimizer")));
    }
  }
}

TEST(OptimizerErrors, BadOptions) {
  Model model("m");
  model.add_parameter("W", 2, 2);
  const auto error = [&](auto change) {
    OptimizerOptions o;
    change(o);
    return usage_error([&] { Optimizer optimizer(model, o); });
  };
  EXPECT_EQ(error([](auto& o) { o.kind = "rmsprop"; }), "edb::Optimizer: unknown kind 'rmsprop' (sgd, adam)");
  EXPECT_EQ(error([](auto& o) { o.kind = "Adam"; }), "edb::Optimizer: unknown kind 'Adam' (sgd, adam)");
  EXPECT_EQ(error([](auto& o) { o.learning_rate = 0; }),
            "edb::Optimizer: learning_rate 0 must be finite and > 0");
  EXPECT_EQ(error([](auto& o) { o.learning_rate = -0.5f; }),
            "edb::Optimizer: learning_rate -0.5 must be finite and > 0");
  EXPECT_EQ(error([](auto& o) { o.learning_rate = std::numeric_limits<float>::infinity(); }),
            "edb::Optimizer: learning_rate inf must be finite and > 0");
  EXPECT_NE(error([](auto& o) { o.learning_rate = std::nanf(""); }).find("learning_rate"), std::string::npos);
  EXPECT_EQ(error([](auto& o) { o.momentum = 1; }), "edb::Optimizer: momentum 1 must be in [0, 1)");
  EXPECT_EQ(error([](auto& o) { o.momentum = -0.25f; }), "edb::Optimizer: momentum -0.25 must be in [0, 1)");
  EXPECT_NE(error([](auto& o) { o.momentum = std::nanf(""); }).find("momentum"), std::string::npos);
  EXPECT_EQ(error([](auto& o) { o.beta1 = 1; }), "edb::Optimizer: beta1 1 must be in [0, 1)");
  EXPECT_EQ(error([](auto& o) { o.beta2 = -0.5f; }), "edb::Optimizer: beta2 -0.5 must be in [0, 1)");
  EXPECT_EQ(error([](auto& o) { o.epsilon = 0; }), "edb::Optimizer: epsilon 0 must be finite and > 0");
  EXPECT_EQ(error([](auto& o) { o.clip_norm = -1; }),
            "edb::Optimizer: clip_norm -1 must be finite and >= 0 (0: no clipping)");
  EXPECT_EQ(error([](auto&) {}), "");

  Optimizer optimizer(model, sgd(0.1f));
  EXPECT_EQ(usage_error([&] { optimizer.set_learning_rate(0); }),
            "edb::Optimizer::set_learning_rate(): learning_rate 0 must be finite and > 0");
  EXPECT_EQ(optimizer.options().learning_rate, 0.1f);
  optimizer.set_learning_rate(0.01f);
  EXPECT_EQ(optimizer.options().learning_rate, 0.01f);
}

TEST(OptimizerErrors, BadGradientsChangeNothing) {
  Model model("m"), other("other");
  const Parameter w = model.add_parameter("W", 2, 3);
  const LookupTable e = model.add_lookup("E", 10, 2);
  const Parameter other_w = other.add_parameter("W", 2, 3);
  const LookupTable other_e = other.add_lookup("E", 10, 2);
  const std::vector<float> before = all_values(model);
  Optimizer optimizer(model, sgd(0.1f, 0.5f));
  const std::vector<float> ones(6, 1.0f);
  const float nan = std::nanf(""), inf = std::numeric_limits<float>::infinity();
  // Most cases pass a good gradient for W before the bad one: it must not be applied either.
  const auto good = dense(w, ones);
  // Each case on the caller and on an engine's two threads (the gradients checked by tasks): the
  // same message, the first error in the gradients' order.
  EngineOptions two_threads;
  two_threads.threads = 2;
  Engine engine(two_threads);
  const auto error = [&](std::vector<Gradients::Dense> parameters, std::vector<Gradients::Rows> tables) {
    const std::string message = usage_error([&] { optimizer.step(gradients(parameters, tables)); });
    EXPECT_EQ(usage_error([&] { optimizer.step(gradients(parameters, tables), engine); }), message);
    EXPECT_EQ(all_values(model), before) << message;
    EXPECT_EQ(optimizer.steps(), 0) << message;
    return message;
  };
  const auto expected = [](const std::string& what) {
    return "edb::Optimizer::step(): " + what + "; no weight was changed";
  };
  EXPECT_EQ(error({good, dense(other_w, ones)}, {}),
            expected("the gradient for parameter 'W' of model 'other' is not for this optimizer's model 'm'"));
  EXPECT_EQ(error({good}, {rows(other_e, {1}, {1, 1})}),
            expected("the gradient for lookup table 'E' of model 'other' is not for this optimizer's model 'm'"));
  EXPECT_EQ(error({{Parameter{}, Tensor{1, 1, {1}}}}, {}),
            expected("a gradient is for an empty parameter handle"));
  EXPECT_EQ(error({good, good}, {}), expected("parameter 'W' has two gradients (Gradients::add sums batches)"));
  EXPECT_EQ(error({good}, {rows(e, {1}, {1, 1}), rows(e, {2}, {1, 1})}),
            expected("lookup table 'E' has two gradients (Gradients::add sums batches)"));
  EXPECT_EQ(error({{w, Tensor{3, 2, ones}}}, {}),
            expected("the gradient for parameter 'W' is 3x2 with 6 values; the parameter is 2x3"));
  EXPECT_EQ(error({{w, Tensor{2, 3, {1, 2}}}}, {}),
            expected("the gradient for parameter 'W' is 2x3 with 2 values; the parameter is 2x3"));
  EXPECT_EQ(error({dense(w, {0, 1, 2, 3, nan, 5})}, {}),
            expected("the gradient for parameter 'W' holds nan at (0, 2)"));
  EXPECT_EQ(error({good}, {rows(e, {1, 10}, {1, 1, 1, 1})}),
            expected("the gradient for lookup table 'E' names entry 10; the table has entries 0..9"));
  EXPECT_EQ(error({good}, {rows(e, {-1}, {1, 1})}),
            expected("the gradient for lookup table 'E' names entry -1; the table has entries 0..9"));
  EXPECT_EQ(error({good}, {rows(e, {4, 2}, {1, 1, 1, 1})}),
            expected("the gradient for lookup table 'E' lists entry 2 after 4; entries must ascend, each once"));
  EXPECT_EQ(error({good}, {rows(e, {2, 2}, {1, 1, 1, 1})}),
            expected("the gradient for lookup table 'E' lists entry 2 after 2; entries must ascend, each once"));
  EXPECT_EQ(error({good}, {rows(e, {1, 2}, {1, 1, 1})}),
            expected("the gradient for lookup table 'E' has 3 values for 2 entries of dimension 2 (4 expected)"));
  EXPECT_EQ(error({good}, {rows(e, {1, 7}, {1, 1, inf, 1})}),
            expected("the gradient for lookup table 'E' holds inf in entry 7"));
  // Two errors: the earlier gradient's, though a later one's handle is checked first.
  EXPECT_EQ(error({dense(w, {0, 1, 2, 3, nan, 5}), dense(other_w, ones)}, {}),
            expected("the gradient for parameter 'W' holds nan at (0, 2)"));
  EXPECT_EQ(error({good}, {rows(e, {1, 7}, {1, 1, inf, 1}), rows(e, {2}, {1, 1})}),
            expected("the gradient for lookup table 'E' holds inf in entry 7"));

  // An optimizer on a model without parameters yet: every gradient is another model's.
  Model empty("empty");
  Optimizer on_empty(empty, sgd(0.1f));
  EXPECT_EQ(usage_error([&] { on_empty.step(gradients({good})); }),
            expected("the gradient for parameter 'W' of model 'm' is not for this optimizer's model 'empty'"));
  EXPECT_EQ(on_empty.step(Gradients{}), 0.0f);  // nothing to apply is a step all the same
  EXPECT_EQ(on_empty.steps(), 1);
}

}  // namespace
}  // namespace edb
