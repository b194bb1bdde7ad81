// The list of sample models that edb-run can run.
#include "samples/models.h"

namespace edb::samples {

const std::vector<ModelEntry>& model_registry() {
  static const std::vector<ModelEntry> registry = {
      {"treelstm", "binary TreeLSTM over SST-style trees, a label loss at every node", 128, 128,
       make_treelstm},
      {"treegru", "binary TreeGRU over SST-style trees, a label loss at every node", 128, 128,
       make_treegru},
      {"mvrnn", "MV-RNN (a vector and a matrix per word) over SST-style trees, a loss at every node",
       64, 64, make_mvrnn},
      {"bilstm", "BiLSTM tagger over word|tag sentences (LSTM 50 each way, MLP 32), a loss per word",
       128, 50, make_bilstm},
      {"bilstmchar", "the BiLSTM tagger with a char BiLSTM (20 -> embed/2 each way) for words seen fewer than 5 times",
       128, 50, make_bilstm_char},
      {"latticelstm", "Lattice LSTM (Zhang and Yang 2018) over char lattices with word arcs, a loss per char",
       128, 128, make_latticelstm},
      {"latticegru", "Lattice GRU over char lattices with word arcs, a loss per char", 128, 128,
       make_latticegru},
      {"childsum", "child-sum TreeLSTM over n-ary trees (1-5 children per node), a label loss at every node",
       128, 128, make_childsum},
      {"dagrnn", "RNN over random DAGs, each node summing 1-3 predecessors, a label loss at every node", 128, 128,
       make_dagrnn},
      {"parser", "shift-reduce dependency parser, stack-LSTM state, a loss per gold transition (--decode: greedy)",
       64, 64, make_parser},
      {"earlyexit", "tagger of up to 4 stacked LSTMs, each with its own exit (--decode: stops at the first confident exit)",
       64, 64, make_earlyexit},
      {"charcnn", "tagger over [word embedding; char CNN (conv1d_wide, kmax_pooling)], layer_norm, MLP 32, a loss per word",
       32, 32, make_charcnn},
  };
  return registry;
}

const ModelEntry* find_model(const std::string& name) {
  for (const ModelEntry& entry : model_registry())
    if (entry.name == name) return &entry;
  return nullptr;
}

std::unique_ptr<SampleModel> make_default_model(const std::string& name, const std::string& data_path,
                                                const std::string& tool) {
  const ModelEntry* entry = find_model(name);
  if (!entry) throw UsageError(tool + ": unknown model '" + name + "'");
  ModelConfig config;
  config.data_path = data_path;
  config.embed = entry->default_embed;
  config.hidden = entry->default_hidden;
  return entry->make(config);
}

}  // namespace edb::samples
