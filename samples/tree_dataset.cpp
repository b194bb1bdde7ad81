// Loading the tree workload.
#include "samples/tree_dataset.h"

namespace edb::samples {

TreeDataset TreeDataset::load(const ModelConfig& config, const std::string& model) {
  TreeDataset data;
  data.trees = load_instances<Tree>(config, model, "trees", read_trees, generate_trees, data.source);
  restore_vocabulary(config, "words", data.vocabulary);
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
