// Seeded random DAGs recorded through the public API, for batched-versus-reference equality tests.
// The same seed records the same graph (ops, shapes, constants, input values) with every engine.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <edbatch/edbatch.h>

namespace edb::testing {

// The parameters random graphs draw from: a weight per (rows, cols) in two variants, a bias per
// size and a lookup table per size. One object serves every graph and every engine compared, so
// that shared operands are the same parameters (and so batch together) in all of them.
class RandomGraphModel {
 public:
  static constexpr std::array<int, 5> kSizes = {2, 3, 4, 5, 8};
  static constexpr int kLookupEntries = 10;

  RandomGraphModel();
  Parameter weight(int rows, int cols, int variant) const;  // rows, cols in kSizes; variant 0 or 1
  Parameter bias(int rows) const;
  LookupTable table(int dim) const;
  Model& model() { return model_; }

 private:
  Model model_;
  std::vector<Parameter> weights_, biases_;
  std::vector<LookupTable> tables_;
};

struct RandomGraphOptions {
  int min_instances = 4, max_instances = 8;
  int min_ops = 10, max_ops = 22;  // ops recorded per instance (inputs not counted)
  int compare_every = 1;           // compare every k-th op node, plus every sink
  double cross_instance = 0.08;    // chance that an exact-shape argument comes from the previous instance
};

struct RandomGraph {
  std::vector<Expr> compared;     // in recording order
  std::vector<std::string> ops;   // the op of each compared node, for failure messages
  int instances = 0;
  int op_nodes = 0;               // every recorded op (scheduled nodes)
  int sinks = 0;                  // op nodes nothing else uses
};

// Records a random DAG into `trace`. Instances draw their structure from one of two shared
// templates or from their own seed, so a trace holds both repeated and unique structure; input
// values, lookup entries and pick labels differ per instance. Deterministic for a seed.
RandomGraph record_random_graph(Trace& trace, const RandomGraphModel& model, uint64_t seed,
                                const RandomGraphOptions& options = {});

}  // namespace edb::testing
