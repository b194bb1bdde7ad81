// Lattice LSTM and Lattice GRU taggers (after Zhang and Yang 2018, Chinese NER): a char cell per
// position, a word cell per lexicon arc [b, e] fed by char b's state, merged into char e's cell
// through one sigmoid gate per arc; a tag loss at every char. Equations (h hidden, x_j char
// embedding, x_w word embedding, A = arcs ending at e, n = |A|):
//   latticelstm  char:  [i; f; o; g] = W x_j + U h_{j-1} + b
//                       c_j = f*c_{j-1} + i*tanh(g)                       (no arc ends at j)
//                       c_j = (i*tanh(g) + sum_{w in A} g_w*c_w) / (1 + n)  (n >= 1)
//                       h_j = o*tanh(c_j)
//                word:  [i_w; f_w; u_w] = W_word x_w + U_word h_b + b_word
//                       c_w = f_w*c_b + i_w*tanh(u_w)                     (no output gate)
//                gate:  g_w = sigmoid(W_gate x_e + U_gate c_w + b_gate)
//   latticegru   char:  [z; r] = sigmoid(W x_j + U h_{j-1} + b),  u = tanh(W_c x_j + U_c (r*h_{j-1}) + b_c)
//                       h~_j = h_{j-1} + z*(u - h_{j-1})
//                       h_j = h~_j, or (h~_j + sum_{w in A} g_w*h_w) / (1 + n)  (n >= 1)
//                word:  the same GRU update from h_b with x_w (own parameters) -> h_w
//                gate:  g_w = sigmoid(W_gate x_e + U_gate h_w + b_gate)
// The merge is normalised by the arc count, not by the paper's per-dimension exp normalisation:
// the public ops have no elementwise exp or divide. Every char cell, word cell and arc gate has one
// op pattern whatever the arc counts (arc terms are summed pairwise, off the char chain, and the
// 1/(1+n) is a cmult by an input), so they all batch together across positions and lattices.
#include <algorithm>
#include <optional>

#include "samples/data/data.h"
#include "samples/models.h"

namespace edb::samples {

namespace {

// The lattices with ids fixed once (chars, words and labels by first appearance; char and word id 0
// is <unk>, labels from 0) and the arcs indexed by start and end char, so recording does no string
// work.
struct LatticeDataset {
  struct Ids {
    std::vector<int> chars, labels, words;          // words: per arc
    std::vector<std::vector<int>> starting, ending;  // per char: arc indices
  };
  std::vector<Lattice> lattices;
  std::vector<Ids> ids;
  Vocabulary chars, words, labels;
  int max_incoming = 0;  // most arcs ending at one char
  std::string source;

  static LatticeDataset load(const ModelConfig& config, const std::string& model) {
    LatticeDataset data;
    data.lattices = load_instances<Lattice>(config, model, "lattices", read_lattices, generate_lattices, data.source);
    restore_vocabulary(config, "chars", data.chars);
    restore_vocabulary(config, "words", data.words);
    restore_vocabulary(config, "labels", data.labels);
    for (const Lattice& lattice : data.lattices) {
      Ids& ids = data.ids.emplace_back();
      const size_t length = lattice.chars.size();
      ids.starting.resize(length);
      ids.ending.resize(length);
      for (size_t j = 0; j < length; ++j) {
        ids.chars.push_back(data.chars.add(lattice.chars[j]));
        ids.labels.push_back(label_id(data.labels, lattice.labels[j], "edb-run " + model + ": label", config) - 1);
      }
      for (size_t a = 0; a < lattice.words.size(); ++a) {
        const LatticeArc& arc = lattice.words[a];
        ids.words.push_back(data.words.add(arc.word));
        ids.starting[size_t(arc.start)].push_back(int(a));
        ids.ending[size_t(arc.end)].push_back(int(a));
      }
      for (const std::vector<int>& incoming : ids.ending)
        data.max_incoming = std::max(data.max_incoming, int(incoming.size()));
    }
    data.chars.freeze();
    data.words.freeze();
    data.labels.freeze();
    return data;
  }

  std::string describe() const {
    return std::to_string(lattices.size()) + " lattices, " + std::to_string(chars.size()) + " char types, " +
           std::to_string(words.size()) + " word types, " + std::to_string(labels.size() - 1) + " labels, " +
           source;
  }
};

// The walk shared by both models; a subclass supplies the three cells. A State's c is unused by
// the GRU.
class LatticeTagger : public SampleModel {
 public:
  size_t instance_count() const override { return data_.lattices.size(); }
  Model& model() override { return model_; }
  std::string describe_data() const override { return data_.describe(); }

  std::string accuracy_unit() const override { return "char"; }
  std::vector<std::pair<std::string, const Vocabulary*>> vocabularies() const override {
    return {{"chars", &data_.chars}, {"words", &data_.words}, {"labels", &data_.labels}};
  }

 protected:
  void record(Trace& trace, size_t i, const std::function<void(const Prediction&)>& output) override {
    const LatticeDataset::Ids& ids = data_.ids[i];
    const size_t length = ids.chars.size();
    // The zero initial state is an input, so the first char's cell batches with every later one.
    const Expr zero = trace.input(zeros_);
    std::vector<Expr> scales(size_t(data_.max_incoming) + 1);  // 1/(1+n) per arc count n, made on demand
    std::vector<State> chars(length);
    std::vector<Expr> carried(ids.words.size());  // per arc: the state part its gate merges
    for (size_t j = 0; j < length; ++j) {
      const Expr x = trace.lookup(char_embeddings_, ids.chars[j]);
      std::vector<Expr> args{x};
      append(args, j == 0 ? State{zero, cell_state_ ? zero : Expr{}} : chars[j - 1]);
      const std::vector<int>& incoming = ids.ending[j];
      if (incoming.empty()) {
        chars[j] = state_of((*plain_char_)(trace, args));
      } else {
        Expr arcs;  // sum of g_w * state_w, summed pairwise so each add has the same signature
        for (int a : incoming) {
          // Its own lookup of x: the arc gates then read their embeddings in place.
          const Expr term = (*arc_)(trace, {trace.lookup(char_embeddings_, ids.chars[j]), carried[size_t(a)]})[0];
          arcs = arcs.valid() ? arcs + term : term;
        }
        Expr& scale = scales[incoming.size()];
        if (!scale.valid()) scale = trace.input(scale_values_[incoming.size()]);
        args.push_back(arcs);
        args.push_back(scale);
        chars[j] = state_of((*merge_char_)(trace, args));
      }
      for (int a : ids.starting[j]) {
        std::vector<Expr> word_args{trace.lookup(word_embeddings_, ids.words[size_t(a)])};
        append(word_args, chars[j]);
        carried[size_t(a)] = (*word_)(trace, word_args)[0];
      }
      output({affine({trace.param(b_out_), trace.param(w_out_), chars[j].h}), ids.labels[j]});
    }
  }

  struct State { Expr h, c; };
  struct Merge {
    Expr arcs;   // sum over incoming arcs of g_w * (c_w or h_w); invalid when none
    Expr scale;  // 1/(1 + arc count), hidden rows
  };

  // `cell_state`: the model carries c beside h (the LSTM) or h alone (the GRU).
  LatticeTagger(const ModelConfig& config, const std::string& name, bool cell_state)
      : model_(name, config.seed), data_(LatticeDataset::load(config, name)), hidden_(config.hidden),
        cell_state_(cell_state), zeros_(size_t(config.hidden), 0.0f) {
    make_cells(name, config.embed);
    for (int n = 0; n <= data_.max_incoming; ++n)
      scale_values_.emplace_back(size_t(hidden_), 1.0f / float(1 + n));
    char_embeddings_ = model_.add_lookup("E_char", data_.chars.size(), config.embed);
    word_embeddings_ = model_.add_lookup("E_word", data_.words.size(), config.embed);
    w_gate_ = model_.add_parameter("W_gate", hidden_, config.embed);
    u_gate_ = model_.add_parameter("U_gate", hidden_, hidden_);
    b_gate_ = model_.add_parameter("b_gate", hidden_, 1);
    w_out_ = model_.add_parameter("W_out", data_.labels.size() - 1, hidden_);
    b_out_ = model_.add_parameter("b_out", data_.labels.size() - 1, 1);
  }

  // The cells, over the virtual steps below: a char without arcs, a char merging arcs, a word
  // (returning the part of its state that its arc carries), and an arc's gated term.
  void make_cells(const std::string& name, int embed) {
    const std::pair<int, int> x{embed, 1}, v{hidden_, 1};
    std::vector<std::pair<int, int>> with_state{x, v};
    if (cell_state_) with_state.push_back(v);
    std::vector<std::pair<int, int>> merging = with_state;
    merging.push_back(v);
    merging.push_back(v);
    plain_char_.emplace(name + "_char", with_state, [this](Trace& t, std::span<const Expr> in) {
      return exprs_of(char_cell(t, in[0], state_of(in.subspan(1)), Merge{}));
    });
    merge_char_.emplace(name + "_char_merge", merging, [this](Trace& t, std::span<const Expr> in) {
      const size_t arcs = in.size() - 2;
      return exprs_of(char_cell(t, in[0], state_of(in.subspan(1, arcs - 1)), Merge{in[arcs], in[arcs + 1]}));
    });
    word_.emplace(name + "_word", with_state, [this](Trace& t, std::span<const Expr> in) {
      const State word = word_cell(t, in[0], state_of(in.subspan(1)));
      return std::vector<Expr>{word.c.valid() ? word.c : word.h};
    });
    arc_.emplace(name + "_arc", std::vector<std::pair<int, int>>{x, v}, [this](Trace& t, std::span<const Expr> in) {
      return std::vector<Expr>{gated_term(t, in[0], in[1])};
    });
  }
  State state_of(std::span<const Expr> hc) const { return State{hc[0], cell_state_ ? hc[1] : Expr{}}; }
  std::vector<Expr> exprs_of(const State& s) const {
    return cell_state_ ? std::vector<Expr>{s.h, s.c} : std::vector<Expr>{s.h};
  }
  void append(std::vector<Expr>& args, const State& s) const {
    args.push_back(s.h);
    if (cell_state_) args.push_back(s.c);
  }

  // Char j's new state from its embedding, char j-1's state and the merged arcs ending at j.
  virtual State char_cell(Trace& trace, const Expr& x, const State& previous, const Merge& merge) const = 0;
  // An arc's state from its word embedding and its start char's state.
  virtual State word_cell(Trace& trace, const Expr& x_word, const State& start) const = 0;
  // The gated state an arc brings to its end char; `gated` is the state part the model merges.
  Expr gated_term(Trace& trace, const Expr& x_end, const Expr& gated) const {
    const Expr gate = sigmoid(affine({trace.param(b_gate_), trace.param(w_gate_), x_end, trace.param(u_gate_), gated}));
    return cmult(gate, gated);
  }

  Model model_;
  LatticeDataset data_;
  int hidden_;
  bool cell_state_;

 private:
  std::vector<float> zeros_;
  std::vector<std::vector<float>> scale_values_;
  LookupTable char_embeddings_, word_embeddings_;
  Parameter w_gate_, u_gate_, b_gate_, w_out_, b_out_;
  std::optional<Cell> plain_char_, merge_char_, word_, arc_;
};

class LatticeLstm final : public LatticeTagger {
 public:
  explicit LatticeLstm(const ModelConfig& config) : LatticeTagger(config, "latticelstm", true) {
    const int h = hidden_;
    w_char_ = model_.add_parameter("W_char", 4 * h, config.embed);
    u_char_ = model_.add_parameter("U_char", 4 * h, h);
    b_char_ = model_.add_parameter("b_char", 4 * h, 1);
    w_word_ = model_.add_parameter("W_word", 3 * h, config.embed);
    u_word_ = model_.add_parameter("U_word", 3 * h, h);
    b_word_ = model_.add_parameter("b_word", 3 * h, 1);
  }

 private:
  State char_cell(Trace& trace, const Expr& x, const State& previous, const Merge& merge) const override {
    const int h = hidden_;
    const Expr gates = affine({trace.param(b_char_), trace.param(w_char_), x, trace.param(u_char_), previous.h});
    const Expr own = cmult(sigmoid(slice(gates, 0, h)), tanh(slice(gates, 3 * h, 4 * h)));
    State next;
    if (merge.arcs.valid()) {
      next.c = cmult(own + merge.arcs, merge.scale);
    } else {
      next.c = cmult(sigmoid(slice(gates, h, 2 * h)), previous.c) + own;
    }
    next.h = cmult(sigmoid(slice(gates, 2 * h, 3 * h)), tanh(next.c));
    return next;
  }

  State word_cell(Trace& trace, const Expr& x_word, const State& start) const override {
    const int h = hidden_;
    const Expr gates = affine({trace.param(b_word_), trace.param(w_word_), x_word, trace.param(u_word_), start.h});
    const Expr in = sigmoid(slice(gates, 0, h));
    const Expr forget = sigmoid(slice(gates, h, 2 * h));
    const Expr candidate = tanh(slice(gates, 2 * h, 3 * h));
    return State{Expr{}, cmult(forget, start.c) + cmult(in, candidate)};
  }

  Parameter w_char_, u_char_, b_char_, w_word_, u_word_, b_word_;
};

class LatticeGru final : public LatticeTagger {
 public:
  explicit LatticeGru(const ModelConfig& config) : LatticeTagger(config, "latticegru", false) {
    char_ = Gru(model_, "char", config.embed, hidden_);
    word_ = Gru(model_, "word", config.embed, hidden_);
  }

 private:
  struct Gru {
    Parameter w, u, b, w_candidate, u_candidate, b_candidate;
    Gru() = default;
    Gru(Model& model, const std::string& kind, int embed, int h)
        : w(model.add_parameter("W_" + kind, 2 * h, embed)), u(model.add_parameter("U_" + kind, 2 * h, h)),
          b(model.add_parameter("b_" + kind, 2 * h, 1)),
          w_candidate(model.add_parameter("W_" + kind + "_c", h, embed)),
          u_candidate(model.add_parameter("U_" + kind + "_c", h, h)),
          b_candidate(model.add_parameter("b_" + kind + "_c", h, 1)) {}
  };

  // h + z*(u - h) with [z; r] = sigmoid(W x + U h + b), u = tanh(W_c x + U_c (r*h) + b_c).
  Expr step(Trace& trace, const Gru& gru, const Expr& x, const Expr& previous) const {
    const int h = hidden_;
    const Expr gates = sigmoid(affine({trace.param(gru.b), trace.param(gru.w), x, trace.param(gru.u), previous}));
    const Expr reset = cmult(slice(gates, h, 2 * h), previous);
    const Expr candidate = tanh(affine({trace.param(gru.b_candidate), trace.param(gru.w_candidate), x,
                                        trace.param(gru.u_candidate), reset}));
    return previous + cmult(slice(gates, 0, h), candidate - previous);
  }

  State char_cell(Trace& trace, const Expr& x, const State& previous, const Merge& merge) const override {
    const Expr own = step(trace, char_, x, previous.h);
    return State{merge.arcs.valid() ? cmult(own + merge.arcs, merge.scale) : own, Expr{}};
  }

  State word_cell(Trace& trace, const Expr& x_word, const State& start) const override {
    return State{step(trace, word_, x_word, start.h), Expr{}};
  }

  Gru char_, word_;
};

}  // namespace

std::unique_ptr<SampleModel> make_latticelstm(const ModelConfig& config) {
  return std::make_unique<LatticeLstm>(config);
}

std::unique_ptr<SampleModel> make_latticegru(const ModelConfig& config) {
  return std::make_unique<LatticeGru>(config);
}

}  // namespace edb::samples
