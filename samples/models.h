// The sample models behind edb-run, each written as plain per-instance code against the public
// API (edbatch/edbatch.h). A SampleModel owns its dataset and records one instance's loss.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <edbatch/edbatch.h>
#include <edbatch/program.h>

namespace edb::samples {

struct SavedVocabularies;  // samples/data/data.h
class Vocabulary;

struct ModelConfig {
  std::string data_path;  // empty: a generated workload
  int64_t limit = -1;     // instances to use; -1: all
  int64_t skip = 0;       // instances to leave out first (before limit)
  int embed = 128;
  int hidden = 128;
  uint64_t seed = 1;
  // The memory this process may use (edb-run: ir::memory_bytes): a generated workload that would
  // need more is refused before it is generated. 0: not checked.
  uint64_t memory_bytes = 0;
  // Vocabularies saved with a model (edb-run --load PATH reads PATH.vocab): when set, a model takes
  // its ids from them (unknown words <unk>) instead of building them from the data.
  std::shared_ptr<const SavedVocabularies> vocabularies;
};

// One labelled position of an instance: the class scores (logits) its loss reads, and its gold
// class.
struct Prediction {
  Expr scores;        // classes x 1
  int64_t gold = 0;
  bool root = false;  // the instance's root (tree models); their accuracy counts roots alone
};

// What one instance's decoding from the model's own predictions got right (the parser: words
// whose head it found, of all words).
struct Decoded {
  int64_t correct = 0;
  int64_t total = 0;
  Decoded& operator+=(const Decoded& other) {
    correct += other.correct;
    total += other.total;
    return *this;
  }
};

// An LSTM's new state from its gates [i; f; o; g] (4h x 1, before their activations) and the
// previous cell c: c' = sigmoid(f) * c + sigmoid(i) * tanh(g), h' = sigmoid(o) * tanh(c'). The
// taggers, the parser's stack and the early-exit layers record their steps through it.
struct LstmState {
  Expr h, c;
};
LstmState lstm_update(const Expr& gates, const Expr& c, int h);

class SampleModel {
 public:
  virtual ~SampleModel() = default;
  virtual size_t instance_count() const = 0;
  // Records instance `i`'s loss (a 1x1 sum of pick_neg_log_softmax over its labelled positions)
  // into `trace`.
  Expr record_loss(Trace& trace, size_t i);
  // Records instance `i`'s labelled positions (every node of a tree, every word or char of a
  // tagger), in the order record_loss sums their losses; no loss nodes.
  std::vector<Prediction> record_predictions(Trace& trace, size_t i);
  virtual Model& model() = 0;
  virtual std::string describe_data() const = 0;  // "2000 trees from FILE", "generated ..."
  // What one accuracy count is: "root" (tree models: the root's class), "word", "char".
  virtual std::string accuracy_unit() const = 0;
  // The vocabularies its ids come from, by name, for edb-run --save to keep beside the model
  // (ModelConfig::vocabularies gives them back); none for a model without strings.
  virtual std::vector<std::pair<std::string, const Vocabulary*>> vocabularies() const { return {}; }
  // A rough relative cost of instance `i` (a tree's nodes, a sentence's words), by which
  // data-parallel training splits a batch across ranks evenly; 1 for models that do not say.
  virtual double instance_cost(size_t i) const { return i < instance_count() ? 1.0 : 0.0; }
  // Models whose inference decodes from their own predictions (the parser): instance `i`'s greedy
  // decoding as a program that records into `trace`, awaits its scores and branches on them
  // (edbatch/program.h); its result counts what it got right. Others: a UsageError.
  virtual bool decodes() const { return false; }
  virtual Program<Decoded> decode(Trace& trace, size_t i);
  virtual std::string decoded_unit() const { return ""; }  // what Decoded counts: "head" (the parser)

 protected:
  // The model's network for instance `i`: calls `output` at each labelled position as soon as its
  // scores are recorded, so the loss and the predictions share one walk and one output layer.
  virtual void record(Trace& trace, size_t i, const std::function<void(const Prediction&)>& output) = 0;
};

// How many instances `generate` makes for `config` (skip + limit, limit 1000 when not given),
// counted in 64 bits; a UsageError naming --skip and --limit when that is more than the generator
// makes (2^31 - 1) or, at kGeneratedInstanceBytes each, more than config.memory_bytes.
int generated_count(const ModelConfig& config, const std::string& model, const std::string& noun);
// The least memory one generated instance takes (a tree of 20 words, a sentence of its strings).
constexpr uint64_t kGeneratedInstanceBytes = 1024;
// A UsageError when `config.skip` leaves no instance of the `count` read from `source`.
void check_skip(const ModelConfig& config, const std::string& model, const std::string& noun, size_t count,
                const std::string& source);

// A model's instances: read from config.data_path, or `generate`d (config.limit of them, default
// 1000, from config.seed; config.skip more) when there is no file; config.skip dropped, cut to
// config.limit. `source` says which. A UsageError names the model, the source and the flags when
// nothing is left or too many are asked for.
template <typename Instance, typename Read, typename Generate>
std::vector<Instance> load_instances(const ModelConfig& config, const std::string& model, const std::string& noun,
                                     Read&& read, Generate&& generate, std::string& source) {
  std::vector<Instance> instances;
  if (config.data_path.empty()) {
    instances = generate(generated_count(config, model, noun), config.seed);
    source = "generated (seed " + std::to_string(config.seed) + ")";
  } else {
    instances = read(config.data_path);
    source = config.data_path;
  }
  check_skip(config, model, noun, instances.size(), source);
  if (config.skip > 0) instances.erase(instances.begin(), instances.begin() + std::min<int64_t>(config.skip, int64_t(instances.size())));
  if (config.limit > 0 && uint64_t(config.limit) < instances.size()) instances.resize(size_t(config.limit));
  if (instances.empty()) throw UsageError("edb-run " + model + ": no " + noun + " in " + source);
  return instances;
}

struct ModelEntry {
  std::string name;
  std::string summary;
  int default_embed;
  int default_hidden;
  std::function<std::unique_ptr<SampleModel>(const ModelConfig&)> make;
};

// Every runnable model, in the order --help lists them.
const std::vector<ModelEntry>& model_registry();
const ModelEntry* find_model(const std::string& name);
// The model `name` at its default sizes on `data_path` (generated data when empty); a UsageError
// starting with `tool` when there is no such model.
std::unique_ptr<SampleModel> make_default_model(const std::string& name, const std::string& data_path,
                                                const std::string& tool);

std::unique_ptr<SampleModel> make_treelstm(const ModelConfig& config);
std::unique_ptr<SampleModel> make_treegru(const ModelConfig& config);
std::unique_ptr<SampleModel> make_mvrnn(const ModelConfig& config);
std::unique_ptr<SampleModel> make_bilstm(const ModelConfig& config);
std::unique_ptr<SampleModel> make_bilstm_char(const ModelConfig& config);
std::unique_ptr<SampleModel> make_latticelstm(const ModelConfig& config);
std::unique_ptr<SampleModel> make_latticegru(const ModelConfig& config);
std::unique_ptr<SampleModel> make_childsum(const ModelConfig& config);
std::unique_ptr<SampleModel> make_dagrnn(const ModelConfig& config);
std::unique_ptr<SampleModel> make_parser(const ModelConfig& config);
std::unique_ptr<SampleModel> make_earlyexit(const ModelConfig& config);
std::unique_ptr<SampleModel> make_charcnn(const ModelConfig& config);

}  // namespace edb::samples
