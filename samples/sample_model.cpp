// What every sample model shares: its loss and its predictions, both from the model's one walk.
#include "samples/models.h"

#include <climits>
#include <cstdio>

namespace edb::samples {
namespace {

std::string gib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", double(bytes) / double(uint64_t{1} << 30));
  return text;
}

// "--skip S --limit L", the flags that asked for `count` instances.
std::string count_flags(const ModelConfig& config) {
  std::string flags;
  if (config.skip > 0) flags += "--skip " + std::to_string(config.skip);
  if (config.limit > 0) flags += (flags.empty() ? "" : " ") + std::string("--limit ") + std::to_string(config.limit);
  return flags.empty() ? "the default --limit 1000" : flags;
}

}  // namespace

int generated_count(const ModelConfig& config, const std::string& model, const std::string& noun) {
  // Both flags are at most 2^40: the sum cannot overflow, and is checked before it is narrowed.
  const int64_t count = std::max<int64_t>(config.skip, 0) + (config.limit > 0 ? config.limit : 1000);
  const std::string asked = "edb-run " + model + ": " + count_flags(config) + " asks for " + std::to_string(count) +
                            " generated " + noun;
  const uint64_t bytes = uint64_t(count) * kGeneratedInstanceBytes;
  if (config.memory_bytes > 0 && bytes > config.memory_bytes)
    throw UsageError(asked + ", at least " + gib(bytes) + ", more than the " + gib(config.memory_bytes) +
                     " of memory this process may use");
  if (count > INT_MAX) throw UsageError(asked + "; the generator makes at most " + std::to_string(INT_MAX));
  return int(count);
}

void check_skip(const ModelConfig& config, const std::string& model, const std::string& noun, size_t count,
                const std::string& source) {
  if (config.skip > 0 && uint64_t(config.skip) >= count)
    throw UsageError("edb-run " + model + ": --skip " + std::to_string(config.skip) + " leaves none of the " +
                     std::to_string(count) + " " + noun + " in " + source);
}

Expr SampleModel::record_loss(Trace& trace, size_t i) {
  std::vector<Expr> losses;
  record(trace, i, [&](const Prediction& p) { losses.push_back(pick_neg_log_softmax(p.scores, p.gold)); });
  return sum(losses);
}

Program<Decoded> SampleModel::decode(Trace&, size_t) {
  throw UsageError("edb-run: --decode is for models that decode from their own predictions (parser)");
}

std::vector<Prediction> SampleModel::record_predictions(Trace& trace, size_t i) {
  std::vector<Prediction> predictions;
  record(trace, i, [&](const Prediction& p) { predictions.push_back(p); });
  return predictions;
}

LstmState lstm_update(const Expr& gates, const Expr& c, int h) {
  LstmState next;
  next.c = cmult(sigmoid(slice(gates, h, 2 * h)), c) + cmult(sigmoid(slice(gates, 0, h)), tanh(slice(gates, 3 * h, 4 * h)));
  next.h = cmult(sigmoid(slice(gates, 2 * h, 3 * h)), tanh(next.c));
  return next;
}

}  // namespace edb::samples
