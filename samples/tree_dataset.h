// The tree workload shared by the tree models: trees from --data or the generator, cut to --limit,
// with word ids fixed once (by first appearance; 0 is <unk>) so recording does no string work.
#pragma once

#include <string>
#include <vector>

#include "samples/data/data.h"
#include "samples/models.h"

namespace edb::samples {

struct TreeDataset {
  std::vector<Tree> trees;
  std::vector<std::vector<int>> word_ids;  // per tree, per node: the leaf's word id, -1 inside
  Vocabulary vocabulary;                   // frozen
  std::string source;

  // UsageError naming `model` when there are no trees.
  static TreeDataset load(const ModelConfig& config, const std::string& model);
  std::string describe() const;  // "2000 trees, 4070 word types, FILE"
};

// What every tree model shares: its Model (named after it) and its TreeDataset.
class TreeSample : public SampleModel {
 public:
  size_t instance_count() const override { return data_.trees.size(); }
  Model& model() override { return model_; }
  std::string describe_data() const override { return data_.describe(); }
  double instance_cost(size_t i) const override { return double(data_.trees.at(i).nodes.size()); }
  std::vector<std::pair<std::string, const Vocabulary*>> vocabularies() const override {
    return {{"words", &data_.vocabulary}};
  }

 protected:
  TreeSample(const std::string& name, const ModelConfig& config)
      : model_(name, config.seed), data_(TreeDataset::load(config, name)) {}
  Model model_;
  TreeDataset data_;
};

}  // namespace edb::samples
