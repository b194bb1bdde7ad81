// The list of sample models that edb-run can run.
#include "samples/models.h"

namespace edb::samples {

const std::vector<ModelEntry>& model_registry() {
  static const std::vector<ModelEntry> registry = {
      {"treelstm", "binary TreeLSTM over SST-style trees, a label loss at every node", 128, 128,
       make_treelstm},
  };
  return registry;
}

const ModelEntry* find_model(const std::string& name) {
  for (const ModelEntry& entry : model_registry())
    if (entry.name == name) return &entry;
  return nullptr;
}

}  // namespace edb::samples
