// Training: optimizers that apply Trace::backward()'s Gradients to a Model's parameters.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "edbatch/edbatch.h"

namespace edb {

struct OptimizerOptions {
  std::string kind = "sgd";    // sgd (with momentum when momentum > 0) or adam; others: UsageError
  float learning_rate = 0.1f;
  float momentum = 0.0f;       // sgd: v = momentum * v + g; w -= learning_rate * v
  float beta1 = 0.9f;          // adam
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float clip_norm = 0.0f;      // > 0: gradients whose global L2 norm exceeds it are scaled to it
};

// Updates a model's parameters from gradients. Dense parameters update every step; a lookup
// table's rows update only where the gradients touched it (their moments too: lazy, as sparse
// optimizers do). The model must outlive the optimizer.
class Optimizer {
 public:
  explicit Optimizer(Model& model, OptimizerOptions options = {});
  ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update. Returns the gradients' global L2 norm before clipping. Gradients of another
  // model's parameters are a UsageError.
  float step(const Gradients& gradients);
  int64_t steps() const;
  const OptimizerOptions& options() const;
  void set_learning_rate(float learning_rate);

  // The optimizer's state (options, step count, moments per parameter by name) in a checksummed
  // binary file next to the model's own file; load() checks names and shapes against the model.
  void save(const std::string& path) const;
  void load(const std::string& path);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace edb
