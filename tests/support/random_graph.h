// Seeded random DAGs recorded through the public API, for batched-versus-reference equality tests.
// The same seed records the same graph (ops, shapes, constants, input values) with every engine.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <edbatch/edbatch.h>

namespace edb::testing {

// The parameters random graphs draw from: a weight per (rows, cols) in two variants, a bias per
// size and a lookup table per size; and kCells random cells (1-3 inputs, a random body of 2-7 ops
// on those inputs, parameters and constants, 1-3 outputs). One object serves every graph and every
// engine compared, so that shared operands are the same parameters (and so batch together) and
// calls are calls of the same cells in all of them.
class RandomGraphModel {
 public:
  static constexpr std::array<int, 5> kSizes = {2, 3, 4, 5, 8};
  static constexpr int kLookupEntries = 10;
  static constexpr int kCells = 8;

  RandomGraphModel();
  RandomGraphModel(const RandomGraphModel&) = delete;  // the cells' bodies point at this object
  RandomGraphModel& operator=(const RandomGraphModel&) = delete;
  Parameter weight(int rows, int cols, int variant) const;  // rows, cols in kSizes; variant 0 or 1
  Parameter bias(int rows) const;
  LookupTable table(int dim) const;
  const Cell& cell(int index) const { return cells_[size_t(index)]; }
  const std::vector<std::pair<int, int>>& cell_inputs(int index) const { return cell_inputs_[size_t(index)]; }
  Model& model() { return model_; }

 private:
  Model model_;
  std::vector<Parameter> weights_, biases_;
  std::vector<LookupTable> tables_;
  std::vector<Cell> cells_;
  std::vector<std::vector<std::pair<int, int>>> cell_inputs_;
};

struct RandomGraphOptions {
  int min_instances = 4, max_instances = 8;
  int min_ops = 10, max_ops = 22;  // ops recorded per instance (inputs not counted)
  int compare_every = 1;           // compare every k-th op node, plus every sink
  double cross_instance = 0.08;    // chance that an exact-shape argument comes from the previous instance
  double cell_calls = 0.0;         // chance, before each op, of also calling one of the model's cells
                                   // (0 draws nothing: the same graphs as without the option)
};

struct RandomGraph {
  std::vector<Expr> compared;     // in recording order
  std::vector<std::string> ops;   // the op of each compared node, for failure messages
  int instances = 0;
  int op_nodes = 0;               // every recorded op (scheduled nodes)
  int sinks = 0;                  // op nodes nothing else uses
  int cell_calls = 0;             // each call's outputs count as op nodes (op "cell NAME")
};

// Records a random DAG into `trace`. Instances draw their structure from one of two shared
// templates or from their own seed, so a trace holds both repeated and unique structure; input
// values, lookup entries and pick labels differ per instance. Deterministic for a seed.
RandomGraph record_random_graph(Trace& trace, const RandomGraphModel& model, uint64_t seed,
                                const RandomGraphOptions& options = {});

}  // namespace edb::testing
