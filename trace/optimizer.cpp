// Optimizers (train.h): SGD with momentum and Adam, with gradient clipping, and their state file.
#include "edbatch/train.h"
#include "trace/state.h"

namespace edb {

struct Optimizer::State {};

Optimizer::Optimizer(Model&, OptimizerOptions) : state_(std::make_unique<State>()) {
  throw UsageError("edb::Optimizer: not built yet");
}
Optimizer::~Optimizer() = default;
float Optimizer::step(const Gradients&) { throw UsageError("edb::Optimizer: not built yet"); }
int64_t Optimizer::steps() const { return 0; }
const OptimizerOptions& Optimizer::options() const { throw UsageError("edb::Optimizer: not built yet"); }
void Optimizer::set_learning_rate(float) {}
void Optimizer::save(const std::string&) const { throw UsageError("edb::Optimizer: not built yet"); }
void Optimizer::load(const std::string&) { throw UsageError("edb::Optimizer: not built yet"); }

}  // namespace edb
