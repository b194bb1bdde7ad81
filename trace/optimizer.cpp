// Optimizers (train.h): SGD with momentum and Adam over dense parameters and the touched rows of
// lookup tables, global-norm clipping, and the optimizer's checksummed state file. Computing the
// gradients is Trace::backward's job (backward.cpp); this file only applies them.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>

#include "edbatch/train.h"
#include "ir/files.h"
#include "trace/binary_file.h"
#include "trace/state.h"

namespace edb {

namespace {

// Version 2 ends with the checksum of the model file body the state was saved with (version 1,
// without it, is still read).
constexpr detail::BinaryFormat kStateFile{
    {'E', 'D', 'B', 'O', 'P', 'T', 'I', 'M'}, 2, "optimizer state file", 1};

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

// Why `options` cannot be used, or "" when they can. The comparisons are negated so that NaN fails.
std::string options_problem(const OptimizerOptions& o) {
  if (o.kind != "sgd" && o.kind != "adam") return "unknown kind '" + o.kind + "' (sgd, adam)";
  if (!(std::isfinite(o.learning_rate) && o.learning_rate > 0))
    return "learning_rate " + number(o.learning_rate) + " must be finite and > 0";
  if (!(o.momentum >= 0 && o.momentum < 1)) return "momentum " + number(o.momentum) + " must be in [0, 1)";
  if (!(o.beta1 >= 0 && o.beta1 < 1)) return "beta1 " + number(o.beta1) + " must be in [0, 1)";
  if (!(o.beta2 >= 0 && o.beta2 < 1)) return "beta2 " + number(o.beta2) + " must be in [0, 1)";
  // Adam divides by sqrt(v) + epsilon, and v is 0 wherever every gradient so far was 0.
  if (!(std::isfinite(o.epsilon) && o.epsilon > 0))
    return "epsilon " + number(o.epsilon) + " must be finite and > 0";
  if (!(std::isfinite(o.clip_norm) && o.clip_norm >= 0))
    return "clip_norm " + number(o.clip_norm) + " must be finite and >= 0 (0: no clipping)";
  return "";
}

// The moment buffers each parameter carries: Adam's m and v, SGD's velocity, or none.
int moment_buffers(const OptimizerOptions& o) {
  if (o.kind == "adam") return 2;
  return o.momentum > 0 ? 1 : 0;
}

// Per parameter, each as long as its values; empty until the parameter first gets a gradient
// (or when the file had none for it), which stands for zeros.
struct Moments {
  std::vector<float> first;   // SGD's velocity, or Adam's m
  std::vector<float> second;  // Adam's v
};

// One step's arithmetic over `count` consecutive weights from `offset`, shared by dense parameters
// and table rows: one pass, reading each weight, gradient and moment once. Float throughout, as the
// weights are; only the bias corrections start in double. The loops vectorise (this file is built
// with -fno-math-errno, so sqrt is the vector instruction): the options are copied into locals and
// the arrays are restrict, so nothing is reloaded per element. Each element's operations are the
// scalar formula's, in its order, so the result is the same to the bit.
struct Update {
  OptimizerOptions options;
  float scale = 1;                         // clip_norm / norm when clipping, else 1
  float correction1 = 1, correction2 = 1;  // Adam's 1 - beta^t

  void apply(float* weights, const float* gradient, Moments& moments, size_t offset, size_t count) const {
    float* __restrict w = weights + offset;
    const float* __restrict g = gradient;
    const float lr = options.learning_rate, scale = this->scale;
    if (options.kind == "adam") {
      float* __restrict m = moments.first.data() + offset;
      float* __restrict v = moments.second.data() + offset;
      const float b1 = options.beta1, b2 = options.beta2, epsilon = options.epsilon;
      const float c1 = correction1, c2 = correction2;
      for (size_t i = 0; i < count; ++i) {
        const float gi = g[i] * scale;
        const float mi = b1 * m[i] + (1 - b1) * gi;
        const float vi = b2 * v[i] + (1 - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        w[i] -= lr * (mi / c1) / (std::sqrt(vi / c2) + epsilon);
      }
    } else if (options.momentum > 0) {
      float* __restrict velocity = moments.first.data() + offset;
      const float momentum = options.momentum;
      for (size_t i = 0; i < count; ++i) {
        const float vi = momentum * velocity[i] + g[i] * scale;
        velocity[i] = vi;
        w[i] -= lr * vi;
      }
    } else {
      for (size_t i = 0; i < count; ++i) w[i] -= lr * (g[i] * scale);
    }
  }
};

// The weights of one piece of an update run on an engine's threads (Optimizer::step(gradients,
// engine)): a dense parameter's range, or as many of a table's rows.
constexpr size_t kPieceFloats = size_t{1} << 15;

// ---- Checking gradients: everything is checked before any weight changes.

[[noreturn]] void gradient_error(const std::string& what) {
  throw UsageError("edb::Optimizer::step(): " + what + "; no weight was changed");
}

// Sum of squares in double: no float overflow, and a NaN or an infinity makes it non-finite, so
// finding one costs no extra pass over a healthy gradient.
// Eight partial sums, so the loop vectorises (a single double sum is a chain of dependent adds).
double sum_of_squares(const std::vector<float>& values) {
  constexpr size_t kLanes = 8;
  double partial[kLanes] = {};
  const float* __restrict x = values.data();
  const size_t whole = values.size() / kLanes * kLanes;
  for (size_t i = 0; i < whole; i += kLanes)
    for (size_t j = 0; j < kLanes; ++j) partial[j] += double(x[i + j]) * x[i + j];
  double sum = 0;
  for (size_t i = whole; i < values.size(); ++i) sum += double(x[i]) * x[i];
  for (double p : partial) sum += p;
  return sum;
}

size_t first_non_finite(const std::vector<float>& values) {
  size_t i = 0;
  while (i < values.size() && std::isfinite(values[i])) ++i;
  return i;
}

// Checks one dense gradient against its parameter; returns the sum of its squares.
double check_dense(const detail::ParameterStorage& p, const Tensor& gradient) {
  const std::string name = "the gradient for parameter '" + p.name + "'";
  if (gradient.rows != p.rows || gradient.cols != p.cols || gradient.data.size() != p.values.size())
    gradient_error(name + " is " + std::to_string(gradient.rows) + "x" + std::to_string(gradient.cols) +
                   " with " + std::to_string(gradient.data.size()) + " values; the parameter is " +
                   std::to_string(p.rows) + "x" + std::to_string(p.cols));
  const double sum = sum_of_squares(gradient.data);
  if (!std::isfinite(sum)) {
    const size_t at = first_non_finite(gradient.data);
    gradient_error(name + " holds " + number(gradient.data[at]) + " at (" + std::to_string(at % p.rows) +
                   ", " + std::to_string(at / p.rows) + ")");
  }
  return sum;
}

// Checks one table's rows against the table; returns the sum of their squares.
double check_rows(const detail::ParameterStorage& table, const Gradients::Rows& rows) {
  const std::string name = "the gradient for lookup table '" + table.name + "'";
  const size_t dim = size_t(table.rows);
  for (size_t i = 0; i < rows.entries.size(); ++i) {
    const int64_t entry = rows.entries[i];
    if (entry < 0 || entry >= table.cols)
      gradient_error(name + " names entry " + std::to_string(entry) + "; the table has entries 0.." +
                     std::to_string(table.cols - 1));
    if (i > 0 && entry <= rows.entries[i - 1])
      gradient_error(name + " lists entry " + std::to_string(entry) + " after " +
                     std::to_string(rows.entries[i - 1]) + "; entries must ascend, each once");
  }
  if (rows.gradients.size() != rows.entries.size() * dim)
    gradient_error(name + " has " + std::to_string(rows.gradients.size()) + " values for " +
                   std::to_string(rows.entries.size()) + " entries of dimension " + std::to_string(dim) +
                   " (" + std::to_string(rows.entries.size() * dim) + " expected)");
  const double sum = sum_of_squares(rows.gradients);
  if (!std::isfinite(sum)) {
    const size_t at = first_non_finite(rows.gradients);
    gradient_error(name + " holds " + number(rows.gradients[at]) + " in entry " +
                   std::to_string(rows.entries[at / dim]));
  }
  return sum;
}

// Marks parameter `index` as seen; false when it already was (a step's gradients and a state file
// name each parameter at most once).
bool first_sight(std::vector<bool>& seen, uint32_t index) {
  if (seen.size() <= index) seen.resize(index + 1);
  if (seen[index]) return false;
  seen[index] = true;
  return true;
}

// Two batches' gradients are summed (Gradients::add), not passed side by side.
void check_once(std::vector<bool>& seen, uint32_t index, const std::string& what) {
  if (!first_sight(seen, index)) gradient_error(what + " has two gradients (Gradients::add sums batches)");
}

// ---- The state file: binary_file.h's header (magic, version, body size, checksum), then the body.

using detail::put;
using detail::put_string;

// A shape as the user declared it: rows x cols, or a lookup table's entries (cols) of dim (rows).
std::string shape_text(bool is_lookup, int rows, int cols) {
  if (is_lookup) return std::to_string(cols) + " entries of dimension " + std::to_string(rows);
  return "shape " + std::to_string(rows) + "x" + std::to_string(cols);
}

// One moment buffer. A NaN there (or a negative second moment, whose root Adam takes) would spread
// into the weights at the next step, so it is as much damage as a bad checksum.
std::vector<float> read_moments(detail::BinaryReader& reader, size_t size, bool second_moment) {
  std::vector<float> values = reader.get_floats(size, "moment values");
  for (float v : values)
    if (!std::isfinite(v) || (second_moment && v < 0))
      reader.fail("a moment value is " + number(v) + " (the file is damaged)");
  return values;
}

}  // namespace

struct Optimizer::State {
  State(Model& model, OptimizerOptions options) : model(model), options(std::move(options)) {}

  Model& model;
  OptimizerOptions options;
  int64_t steps = 0;
  std::vector<Moments> moments;  // by index in the model's parameter list; missing: zeros

  detail::ModelState* model_state();
  template <typename Handle>
  detail::ParameterStorage& checked_storage(const Handle& handle, const char* what);
  // One step, its independent pieces run by parallel_for(count, task) (in any order, on any
  // thread): each gradient's check and sum of squares, then the update in ranges of weights.
  using ParallelFor = std::function<void(int, const std::function<void(int)>&)>;
  float step(const Gradients& gradients, const ParallelFor& parallel_for);
  double checked_sum_of_squares(const Gradients& gradients, const ParallelFor& parallel_for);
  Update next_update(double norm);
  Moments& moments_of(uint32_t index);
  std::string encode();
  void decode(const std::string& body, const std::string& path, uint32_t version);
  uint32_t decode_entry(detail::BinaryReader& reader, std::vector<bool>& seen);
};

detail::ModelState* Optimizer::State::model_state() { return model.state_.get(); }

// The storage behind a gradient's handle, after checking that it is one of this model's.
template <typename Handle>
detail::ParameterStorage& Optimizer::State::checked_storage(const Handle& handle, const char* what) {
  if (!handle.valid())
    gradient_error(std::string("a gradient is for an empty ") + what + " handle");
  if (handle.model_ != model_state())
    gradient_error(std::string("the gradient for ") + what + " '" + handle.name() + "' of model '" +
                   handle.model_->name + "' is not for this optimizer's model '" + model.name() + "'");
  return handle.model_->at(handle.index_);
}

// Every check of step(), before anything changes; returns the squared global norm. The handles
// are checked in order, then each gradient's values and sum by its own task; the first error in
// the gradients' order is thrown, and the sums add in that order, so neither depends on the tasks.
double Optimizer::State::checked_sum_of_squares(const Gradients& gradients, const ParallelFor& parallel_for) {
  const size_t dense = gradients.parameters.size(), count = dense + gradients.tables.size();
  std::vector<const detail::ParameterStorage*> storage;
  std::vector<std::exception_ptr> errors(count);
  std::vector<bool> seen;
  for (size_t i = 0; i < count; ++i) {
    try {
      if (i < dense) {
        const Parameter& handle = gradients.parameters[i].parameter;
        storage.push_back(&checked_storage(handle, "parameter"));
        check_once(seen, handle.index_, "parameter '" + storage.back()->name + "'");
      } else {
        const LookupTable& handle = gradients.tables[i - dense].table;
        storage.push_back(&checked_storage(handle, "lookup table"));
        check_once(seen, handle.index_, "lookup table '" + storage.back()->name + "'");
      }
    } catch (const UsageError&) {
      errors[i] = std::current_exception();
      break;  // a later gradient's error could not be the first
    }
  }
  std::vector<double> sums(storage.size());
  parallel_for(int(storage.size()), [&](int i) {
    try {
      const size_t at = size_t(i);
      sums[at] = at < dense ? check_dense(*storage[at], gradients.parameters[at].gradient)
                            : check_rows(*storage[at], gradients.tables[at - dense]);
    } catch (const UsageError&) {
      errors[size_t(i)] = std::current_exception();
    }
  });
  for (const std::exception_ptr& error : errors)
    if (error) std::rethrow_exception(error);
  double sum = 0;
  for (double s : sums) sum += s;
  return sum;
}

// Advances the step count and fixes this step's clipping scale and bias corrections. Table rows
// use the global step count t in Adam's bias correction (as TensorFlow's LazyAdam does) rather
// than a count per row, so the state stays one number per table value. The cost: a row first
// touched late is corrected by 1 - beta^t ~ 1, so its first update is about
// lr * (1 - beta1) / sqrt(1 - beta2) (3.2 lr with the defaults) where a fresh Adam moves lr.
Update Optimizer::State::next_update(double norm) {
  ++steps;
  Update update{options};
  if (options.clip_norm > 0 && norm > options.clip_norm) update.scale = float(options.clip_norm / norm);
  update.correction1 = float(1 - std::pow(double(options.beta1), double(steps)));
  update.correction2 = float(1 - std::pow(double(options.beta2), double(steps)));
  return update;
}

// The moments of parameter `index`, allocated (as zeros) when first needed.
Moments& Optimizer::State::moments_of(uint32_t index) {
  if (moments.size() <= index) moments.resize(index + 1);
  Moments& m = moments[index];
  const size_t size = model_state()->at(index).values.size();
  const int buffers = moment_buffers(options);
  if (buffers >= 1 && m.first.size() != size) m.first.assign(size, 0.0f);
  if (buffers >= 2 && m.second.size() != size) m.second.assign(size, 0.0f);
  return m;
}

// Body: kind, options, step count, then per parameter of the model (in its order) its name, kind,
// shape, number of moment buffers and their values (zeros for a parameter without any yet).
std::string Optimizer::State::encode() {
  std::string body;
  put_string(body, options.kind);
  for (float value : {options.learning_rate, options.momentum, options.beta1, options.beta2,
                      options.epsilon, options.clip_norm})
    put(body, value);
  put(body, steps);
  detail::ModelState* state = model_state();
  const uint32_t count = static_cast<uint32_t>(state->parameters.size());
  const int buffers = moment_buffers(options);
  put(body, count);
  const Moments none;
  for (uint32_t index = 0; index < count; ++index) {
    const detail::ParameterStorage& p = state->at(index);
    put_string(body, p.name);
    put(body, static_cast<uint8_t>(p.is_lookup));
    put(body, static_cast<int32_t>(p.rows));
    put(body, static_cast<int32_t>(p.cols));
    put(body, static_cast<uint8_t>(buffers));
    const Moments& m = index < moments.size() ? moments[index] : none;
    const std::vector<float>* kept[2] = {&m.first, &m.second};
    for (int b = 0; b < buffers; ++b) {
      if (kept[b]->empty())
        body.append(p.values.size() * sizeof(float), '\0');  // 0.0f is all zero bytes
      else
        body.append(reinterpret_cast<const char*>(kept[b]->data()), kept[b]->size() * sizeof(float));
    }
  }
  put(body, detail::model_file_checksum(*state));  // the model's values this state goes with
  return body;
}

// The index of the model's parameter that the next file entry names, after checking its kind and
// shape, and that the file names it once.
uint32_t Optimizer::State::decode_entry(detail::BinaryReader& reader, std::vector<bool>& seen) {
  const std::string name = reader.get_string("a name");
  const bool is_lookup = reader.get<uint8_t>("an entry kind") != 0;
  const int32_t rows = reader.get<int32_t>("a shape");
  const int32_t cols = reader.get<int32_t>("a shape");
  const std::string what = std::string(is_lookup ? "lookup table" : "parameter") + " '" + name + "'";
  detail::ModelState* state = model_state();
  const size_t count = state->parameters.size();
  uint32_t index = 0;
  while (index < count && !(state->at(index).name == name && state->at(index).is_lookup == is_lookup))
    ++index;
  if (index == count) reader.fail("the file has " + what + ", which model '" + model.name() + "' lacks");
  const detail::ParameterStorage& p = state->at(index);
  if (p.rows != rows || p.cols != cols)
    reader.fail(what + " has " + shape_text(is_lookup, rows, cols) + " in the file but " +
                shape_text(is_lookup, p.rows, p.cols) + " in the model");
  if (!first_sight(seen, index)) reader.fail("the file has " + what + " twice");
  return index;
}

// Parses the whole body before changing anything, so a bad file leaves the optimizer as it was.
void Optimizer::State::decode(const std::string& body, const std::string& path, uint32_t version) {
  detail::BinaryReader reader(body, path, "edb::Optimizer::load()", detail::kBinaryHeaderBytes);
  OptimizerOptions loaded;
  loaded.kind = reader.get_string("the kind");
  if (loaded.kind != options.kind)
    reader.fail("the file holds " + loaded.kind + " state; this optimizer's kind is " + options.kind);
  for (float* value : {&loaded.learning_rate, &loaded.momentum, &loaded.beta1, &loaded.beta2,
                       &loaded.epsilon, &loaded.clip_norm})
    *value = reader.get<float>("the options");
  if (const std::string problem = options_problem(loaded); !problem.empty())
    reader.fail("options: " + problem);
  const int64_t loaded_steps = reader.get<int64_t>("the step count");
  if (loaded_steps < 0) reader.fail("step count " + std::to_string(loaded_steps) + " is negative");
  // The next step() adds one, which the largest count would overflow.
  if (loaded_steps == std::numeric_limits<int64_t>::max())
    reader.fail("step count " + std::to_string(loaded_steps) + " leaves no room for another step");

  const uint32_t count = reader.get<uint32_t>("the entry count");
  const int buffers = moment_buffers(loaded);
  std::vector<Moments> loaded_moments;
  std::vector<bool> seen;
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t index = decode_entry(reader, seen);
    const int stored = reader.get<uint8_t>("a moment buffer count");
    if (stored != buffers)
      reader.fail("'" + model_state()->at(index).name + "' has " + std::to_string(stored) +
                  " moment buffers; its options keep " + std::to_string(buffers));
    if (loaded_moments.size() <= index) loaded_moments.resize(index + 1);
    const size_t size = model_state()->at(index).values.size();
    if (buffers >= 1) loaded_moments[index].first = read_moments(reader, size, false);
    if (buffers >= 2) loaded_moments[index].second = read_moments(reader, size, true);
  }
  if (version >= 2) reader.get<uint64_t>("the model's checksum");
  if (reader.left() != 0) reader.fail(std::to_string(reader.left()) + " bytes follow the last entry");
  options = std::move(loaded);
  steps = loaded_steps;
  moments = std::move(loaded_moments);
}

Optimizer::Optimizer(Model& model, OptimizerOptions options) {
  if (const std::string problem = options_problem(options); !problem.empty())
    throw UsageError("edb::Optimizer: " + problem);
  state_ = std::make_unique<State>(model, std::move(options));
}

Optimizer::~Optimizer() = default;

float Optimizer::step(const Gradients& gradients) {
  return state_->step(gradients, [](int count, const std::function<void(int)>& task) {
    for (int i = 0; i < count; ++i) task(i);
  });
}

float Optimizer::step(const Gradients& gradients, Engine& engine) {
  // Fewer weights than two pieces are not worth waking the engine's thread for (tens of us).
  size_t floats = 0;
  for (const Gradients::Dense& dense : gradients.parameters) floats += dense.gradient.data.size();
  for (const Gradients::Rows& rows : gradients.tables) floats += rows.gradients.size();
  if (floats < 2 * kPieceFloats) return step(gradients);
  runtime::Driver& driver = engine.state_->driver;
  return state_->step(gradients, [&](int count, const std::function<void(int)>& task) { driver.parallel_for(count, task); });
}

float Optimizer::State::step(const Gradients& gradients, const ParallelFor& parallel_for) {
  const double norm = std::sqrt(checked_sum_of_squares(gradients, parallel_for));
  const Update update = next_update(norm);
  // The update in pieces of about kPieceFloats weights (a dense parameter's range, or a table's
  // rows): every weight's arithmetic is its own, so the pieces may run anywhere. The weights and
  // moments are fetched here, on the caller: fetching bumps versions and allocates moments.
  struct Piece {
    float* weights;
    Moments* moments;
    const float* gradient;  // dense: the parameter's gradient; a table: null
    const Gradients::Rows* rows;
    size_t begin, end;  // dense: weights; a table: entries
  };
  // Moments first: making one may grow the vector that holds them all.
  for (const Gradients::Dense& dense : gradients.parameters) moments_of(dense.parameter.index_);
  for (const Gradients::Rows& rows : gradients.tables) moments_of(rows.table.index_);
  std::vector<Piece> pieces;
  for (const Gradients::Dense& dense : gradients.parameters) {
    std::vector<float>& weights = dense.parameter.model_->at(dense.parameter.index_).writable();
    Moments& moments = moments_of(dense.parameter.index_);
    for (size_t begin = 0; begin < weights.size(); begin += kPieceFloats)
      pieces.push_back({weights.data(), &moments, dense.gradient.data.data(), nullptr, begin,
                        std::min(weights.size(), begin + kPieceFloats)});
  }
  for (const Gradients::Rows& rows : gradients.tables) {
    std::vector<float>& weights = rows.table.model_->at(rows.table.index_).writable();
    Moments& moments = moments_of(rows.table.index_);
    const size_t per_piece = std::max<size_t>(1, kPieceFloats / size_t(rows.table.dim()));
    for (size_t begin = 0; begin < rows.entries.size(); begin += per_piece)
      pieces.push_back({weights.data(), &moments, nullptr, &rows, begin, std::min(rows.entries.size(), begin + per_piece)});
  }
  parallel_for(int(pieces.size()), [&](int i) {
    const Piece& piece = pieces[size_t(i)];
    if (piece.gradient) {
      update.apply(piece.weights, piece.gradient + piece.begin, *piece.moments, piece.begin, piece.end - piece.begin);
      return;
    }
    const size_t dim = size_t(piece.rows->table.dim());
    for (size_t e = piece.begin; e < piece.end; ++e)
      update.apply(piece.weights, piece.rows->gradients.data() + e * dim, *piece.moments,
                   size_t(piece.rows->entries[e]) * dim, dim);
  });
  return float(norm);
}

int64_t Optimizer::steps() const { return state_->steps; }
const OptimizerOptions& Optimizer::options() const { return state_->options; }

void Optimizer::set_learning_rate(float learning_rate) {
  OptimizerOptions changed = state_->options;
  changed.learning_rate = learning_rate;
  if (const std::string problem = options_problem(changed); !problem.empty())
    throw UsageError("edb::Optimizer::set_learning_rate(): " + problem);
  state_->options = std::move(changed);
}

void Optimizer::save(const std::string& path) const {
  detail::write_binary_file(path, kStateFile, state_->encode(), "edb::Optimizer::save()");
}

void Optimizer::load(const std::string& path) {
  uint32_t version = 0;
  const std::string body = detail::read_binary_body(path, kStateFile, "edb::Optimizer::load()", &version);
  state_->decode(body, path, version);
}

namespace {

// Whether the state file on disk is a newer save's than the model file beside it: its recorded
// model checksum (the last 8 bytes of a version 2 body) differs from the model file's header
// checksum. Unreadable or missing files: no.
bool leftover_of_killed_save(const std::string& model_path, const std::string& state_path) {
  const std::optional<detail::BinaryHeader> model = detail::read_binary_header(model_path, detail::model_file_format());
  const std::optional<detail::BinaryHeader> state = detail::read_binary_header(state_path, kStateFile);
  uint64_t saved_with = 0;
  if (!model || !state || state->version < 2 || state->body_size < sizeof saved_with) return false;
  std::ifstream tail(state_path, std::ios::binary);
  tail.seekg(std::streamoff(detail::kBinaryHeaderBytes + state->body_size - sizeof saved_with));
  return tail.read(reinterpret_cast<char*>(&saved_with), sizeof saved_with) && saved_with != model->checksum;
}

}  // namespace

void save_training(const Model& model, const Optimizer& optimizer, const std::string& path) {
  const char* function = "edb::save_training()";
  if (optimizer.state_->model.state_ != model.state_)
    throw UsageError(std::string(function) + ": the optimizer is for model '" + optimizer.state_->model.name() +
                     "', not '" + model.name() + "'");
  const std::string state_path = path + ".optimizer", previous = state_path + ".previous";
  if (const std::string why = ir::unreplaceable_file_reason(path); !why.empty())
    detail::throw_if_failed("'" + path + "' " + why, function);
  if (const std::string why = ir::unreplaceable_file_reason(state_path); !why.empty())
    detail::throw_if_failed("'" + state_path + "' " + why, function);
  // Saves of one path take turns (two trainings saving there at once): each pair is renamed into
  // place whole under the lock, and the last save to rename is the pair that stays.
  ir::FileLock lock(ir::lock_path_for(path));
  if (!lock.error().empty()) detail::throw_if_failed("cannot write '" + path + "': " + lock.error(), function);
  // Both written and flushed before either replaces its file; the state first, so that a save
  // killed between the renames leaves a new state beside the old model, which load_training()
  // tells by the checksum the state records. The old state stays linked as `previous` until the
  // model is replaced too, so the old pair can still be loaded. A temporary not renamed is removed.
  ir::TemporaryFile model_temp(path), state_temp(state_path);
  detail::throw_if_failed(model_temp.write(detail::framed(detail::model_file_format(), detail::model_file_body(*model.state_))),
                          function);
  detail::throw_if_failed(state_temp.write(detail::framed(kStateFile, optimizer.state_->encode())), function);
  // `previous` becomes the state now on disk, unless that state is a killed save's, beside the
  // model of the save before it: then `previous` is that model's state, and stays.
  std::error_code ignored;
  if (!leftover_of_killed_save(path, state_path)) {
    std::filesystem::remove(previous, ignored);
    if (std::filesystem::exists(state_path, ignored)) std::filesystem::create_hard_link(state_path, previous, ignored);
  }
  detail::throw_if_failed(state_temp.commit(), function);
  detail::throw_if_failed(model_temp.commit(), function);
  std::filesystem::remove(previous, ignored);
}

bool load_training(Model& model, Optimizer& optimizer, const std::string& path) {
  const char* function = "edb::load_training()";
  const std::string state_path = path + ".optimizer";
  std::error_code error;
  // A load takes the lock saves of `path` hold while they rename their pair into place, so it reads
  // both files of one save (a save to the same path from another training may be under way). Where
  // no lock can be made (a read-only directory), no save can be under way there either.
  ir::FileLock lock(ir::lock_path_for(path));
  if (!std::filesystem::exists(state_path, error)) {
    model.load(path);
    return false;
  }
  // The pair is checked before anything is loaded: a refused pair changes nothing.
  uint64_t model_checksum = 0;
  detail::read_binary_body(path, detail::model_file_format(), "edb::Model::load()", nullptr, &model_checksum);
  // Whether the state file at `state` goes with the model (a version 1 file records nothing: yes).
  auto goes_with_model = [&](const std::string& state) {
    uint32_t version = 0;
    const std::string body = detail::read_binary_body(state, kStateFile, "edb::Optimizer::load()", &version);
    uint64_t saved_with = 0;
    if (version < 2) return true;
    if (body.size() >= sizeof saved_with)
      std::memcpy(&saved_with, body.data() + body.size() - sizeof saved_with, sizeof saved_with);
    return saved_with == model_checksum;
  };
  std::string state = state_path;
  if (!goes_with_model(state_path)) {
    // A save killed between its renames left the previous state beside the previous model.
    const std::string previous = state_path + ".previous";
    if (!std::filesystem::exists(previous, error) || !goes_with_model(previous))
      throw UsageError(std::string(function) + ": '" + state_path + "' was not saved with the model values in '" + path +
                       "' (files of different saves, or a save interrupted between the two); load the model alone, "
                       "or the pair of one save");
    std::fprintf(stderr, "%s: '%s' is from a save that did not finish; loading the previous pair, '%s' with '%s'\n",
                 function, state_path.c_str(), path.c_str(), previous.c_str());
    state = previous;
  }
  model.load(path);
  optimizer.load(state);
  return true;
}

}  // namespace edb
