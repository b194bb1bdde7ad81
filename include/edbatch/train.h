// Training: optimizers that apply Trace::backward()'s Gradients to a Model's parameters.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "edbatch/edbatch.h"

namespace edb {

// Checked when an Optimizer is made (and by set_learning_rate, and in a loaded file): a value out of
// range is a UsageError naming it.
struct OptimizerOptions {
  std::string kind = "sgd";    // sgd (with momentum when momentum > 0) or adam; others: UsageError
  float learning_rate = 0.1f;  // finite, > 0
  float momentum = 0.0f;       // [0, 1). sgd: v = momentum * v + g; w -= learning_rate * v
  float beta1 = 0.9f;          // adam, [0, 1): m = beta1 * m + (1 - beta1) * g
  float beta2 = 0.999f;        // adam, [0, 1): v = beta2 * v + (1 - beta2) * g^2
  float epsilon = 1e-8f;       // adam, > 0: w -= lr * m_hat / (sqrt(v_hat) + epsilon), with
                               // m_hat = m / (1 - beta1^t), v_hat = v / (1 - beta2^t), t = steps()
  float clip_norm = 0.0f;      // > 0: gradients whose global L2 norm (all parameters and table
                               // rows of the step together) exceeds it are scaled to it
};

// Updates a model's parameters from gradients. A dense parameter with a gradient updates whole; one
// without (the loss did not depend on it) keeps its weights and moments. A lookup table's rows
// update only where the gradients touched it, and so do their moments (lazy, as sparse optimizers
// do); Adam's bias correction there uses the global step count t, as TensorFlow's LazyAdam does.
// Moments start at zero when a parameter first gets a gradient, so parameters added to the model
// later are picked up. The model must outlive the optimizer.
class Optimizer {
 public:
  explicit Optimizer(Model& model, OptimizerOptions options = {});
  ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update; the step count goes up by one even when `gradients` is empty. Returns the
  // gradients' global L2 norm before clipping. Everything is checked before any weight changes,
  // and a UsageError names what is wrong: a gradient of another model's parameter, a shape that
  // differs from its parameter's, table entries out of range or not ascending, a value count that
  // is not entries * dim, a NaN or infinity (naming the parameter and where), two gradients for
  // one parameter (sum batches with Gradients::add).
  float step(const Gradients& gradients);
  // The same update cut across the engine's threads (EngineOptions::threads; with one thread it is
  // step() above), after every evaluation the engine has queued, the caller taking part: the
  // weights, moments, norm and errors are step()'s to the bit, whatever the thread count.
  float step(const Gradients& gradients, Engine& engine);
  int64_t steps() const;
  const OptimizerOptions& options() const;
  void set_learning_rate(float learning_rate);

  // The optimizer's state (kind, options, step count, moments per parameter by name and shape) in
  // a checksummed binary file (magic, format version, FNV-1a; written to a temp file and renamed),
  // kept next to the model's own file. load() restores all of it, options included (a learning
  // rate set since is part of the state), after checking that the kind is this optimizer's and
  // that every saved name exists in the model with the same shape; parameters the file lacks start
  // from zero moments. A missing, truncated or damaged file, or one for another model, is a
  // UsageError naming the path and the byte offset, and leaves the optimizer as it was.
  void save(const std::string& path) const;
  void load(const std::string& path);

 private:
  friend void save_training(const Model& model, const Optimizer& optimizer, const std::string& path);
  struct State;
  std::unique_ptr<State> state_;
};

// A model and its optimizer state saved as one unit: `path` and `path`.optimizer, both written to
// temporary files beside them (unique to the saver) and flushed to the disk, then renamed, the
// state first; the old state stays (hard-linked as `path`.optimizer.previous) until the model is
// replaced too. The state file records the checksum of the model values it goes with, so
// load_training() tells one save's pair from files of different saves, or from a save killed
// between its two renames. Saves and loads of one path, from threads or processes, take turns
// through a lock file (`path`.lock, removed after), so each load reads one save's pair.
void save_training(const Model& model, const Optimizer& optimizer, const std::string& path);
// Loads what save_training() wrote. Returns false, having loaded only the model, when
// `path`.optimizer does not exist. After a save killed between its renames, the previous pair
// (the model and `path`.optimizer.previous) is loaded, and stderr says so. Files that are not one
// save's pair are a UsageError naming both, and nothing is loaded. (A state file of format
// version 1 records no checksum: it is loaded as is.)
bool load_training(Model& model, Optimizer& optimizer, const std::string& path);

}  // namespace edb
