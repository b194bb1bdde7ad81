// Loading the tree workload.
#include "samples/tree_dataset.h"

namespace edb::samples {

TreeDataset TreeDataset::load(const ModelConfig& config, const std::string& model) {
  TreeDataset data;
  if (config.data_path.empty()) {
    data.trees = generate_trees(config.limit > 0 ? int(config.limit) : 1000, config.seed);
    data.source = "generated (seed " + std::to_string(config.seed) + ")";
  } else {
    data.trees = read_trees(config.data_path);
    data.source = config.data_path;
  }
  if (config.limit > 0 && size_t(config.limit) < data.trees.size()) data.trees.resize(size_t(config.limit));
  if (data.trees.empty()) throw UsageError("edb-run " + model + ": no trees in " + data.source);
  for (const Tree& tree : data.trees) {
    std::vector<int>& ids = data.word_ids.emplace_back(tree.nodes.size(), -1);
    for (size_t n = 0; n < tree.nodes.size(); ++n)
      if (tree.nodes[n].is_leaf()) ids[n] = data.vocabulary.add(tree.nodes[n].word);
  }
  data.vocabulary.freeze();
  return data;
}

std::string TreeDataset::describe() const {
  return std::to_string(trees.size()) + " trees, " + std::to_string(vocabulary.size()) + " word types, " + source;
}

}  // namespace edb::samples
