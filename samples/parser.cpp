// A shift-reduce (arc-standard) dependency parser with stack-LSTM state, after Dyer et al. 2015:
// the stack is an LSTM over its elements' representations that pops by going back to an earlier
// state; a reduction composes head and dependent into one representation pushed in their place.
// Each step scores SHIFT, LEFT-ARC and RIGHT-ARC from the stack LSTM's top, the two top elements
// and the buffer's front word. Training and record() follow the gold transitions (static: the
// whole instance records before anything runs); decode() parses from the model's own predictions,
// a program that awaits each step's scores (edbatch/program.h).
#include <optional>
#include <string>

#include "samples/data/data.h"
#include "samples/models.h"

namespace edb::samples {

namespace {

enum Action { kShift = 0, kLeft = 1, kRight = 2, kActions = 3 };

class Parser final : public SampleModel {
 public:
  explicit Parser(const ModelConfig& config)
      : model_("parser", config.seed),
        embed_(config.embed),
        hidden_(config.hidden),
        zeros_embed_(size_t(config.embed), 0.0f),
        zeros_hidden_(size_t(config.hidden), 0.0f) {
    sentences_ = load_instances<TaggedSentence>(config, "parser", "sentences", read_tagged, generate_parses, source_);
    restore_vocabulary(config, "words", vocabulary_);
    for (size_t s = 0; s < sentences_.size(); ++s) {
      const TaggedSentence& sentence = sentences_[s];
      std::vector<int>& words = word_ids_.emplace_back();
      std::vector<int>& heads = heads_.emplace_back();
      for (size_t w = 0; w < sentence.words.size(); ++w) {
        words.push_back(vocabulary_.add(sentence.words[w]));
        heads.push_back(head_of(sentence.tags[w], int(sentence.words.size()), s));
      }
      gold_actions_.push_back(oracle(heads, s));
    }
    vocabulary_.freeze();
    const int e = embed_, h = hidden_;
    embeddings_ = model_.add_lookup("E", vocabulary_.size(), e);
    stack_ = {model_.add_parameter("W_stack", 4 * h, e), model_.add_parameter("U_stack", 4 * h, h),
              model_.add_parameter("b_stack", 4 * h, 1)};
    w_compose_ = model_.add_parameter("W_compose", e, 2 * e);
    b_compose_ = model_.add_parameter("b_compose", e, 1);
    w_top_ = model_.add_parameter("W_top", h, h);
    w_s0_ = model_.add_parameter("W_s0", h, e);
    w_s1_ = model_.add_parameter("W_s1", h, e);
    w_b0_ = model_.add_parameter("W_b0", h, e);
    b_hidden_ = model_.add_parameter("b_hidden", h, 1);
    w_out_ = model_.add_parameter("W_out", kActions, h);
    b_out_ = model_.add_parameter("b_out", kActions, 1);
    push_.emplace(push_cell());
    compose_.emplace(compose_cell());
    score_.emplace(score_cell());
  }

  size_t instance_count() const override { return sentences_.size(); }
  double instance_cost(size_t i) const override { return double(word_ids_.at(i).size()); }
  Model& model() override { return model_; }
  std::string describe_data() const override {
    return std::to_string(sentences_.size()) + " parsed sentences, " + std::to_string(vocabulary_.size()) +
           " word types, " + source_;
  }
  std::string accuracy_unit() const override { return "transition"; }
  std::vector<std::pair<std::string, const Vocabulary*>> vocabularies() const override {
    return {{"words", &vocabulary_}};
  }
  bool decodes() const override { return true; }
  std::string decoded_unit() const override { return "head"; }

  Program<Decoded> decode(Trace& trace, size_t i) override {
    const std::vector<int>& gold = heads_.at(i);
    State state = start(trace, i);
    std::vector<int> heads(gold.size(), -1);
    while (!state.finished()) {
      const bool can_shift = state.next < state.words->size(), can_reduce = state.stack.size() >= 2;
      int action = can_shift ? kShift : kLeft;
      if (can_shift && can_reduce) {  // a choice: wait for this step's scores
        const Tensor scores = co_await score(trace, state);
        action = 0;
        for (int a = 1; a < kActions; ++a)
          if (scores(a) > scores(action)) action = a;
      } else if (can_reduce) {
        // Only reductions are left: LEFT or RIGHT, also from the scores.
        const Tensor scores = co_await score(trace, state);
        action = scores(kRight) > scores(kLeft) ? kRight : kLeft;
      }
      apply(trace, state, action, heads);
    }
    heads[size_t(state.stack.back().word)] = 0;
    Decoded decoded;
    decoded.total = int64_t(gold.size());
    for (size_t w = 0; w < gold.size(); ++w) decoded.correct += heads[w] == gold[w];
    co_return decoded;
  }

 protected:
  void record(Trace& trace, size_t i, const std::function<void(const Prediction&)>& output) override {
    State state = start(trace, i);
    std::vector<int> heads(word_ids_[i].size(), -1);
    for (const int action : gold_actions_[i]) {
      output({score(trace, state), action});
      apply(trace, state, action, heads);
    }
  }

 private:
  struct Lstm { Parameter w, u, b; };
  // A stack element: its representation, the stack LSTM's state once it was pushed, its head word.
  struct Entry { Expr x, h, c; int word; };
  struct State {
    const std::vector<int>* words = nullptr;
    std::vector<Entry> stack;
    size_t next = 0;         // the buffer's front
    Expr zero_embed, h0, c0;  // an absent element's representation; the empty stack's state
    bool finished() const { return next == words->size() && stack.size() == 1; }
  };

  State start(Trace& trace, size_t i) const {
    State state;
    state.words = &word_ids_.at(i);
    // Inputs rather than parameters, so a first step's ops batch with every later step's.
    state.zero_embed = trace.input(zeros_embed_);
    state.h0 = state.c0 = trace.input(zeros_hidden_);
    return state;
  }

  Expr score(Trace& trace, const State& state) const {
    const size_t n = state.stack.size();
    const Expr top = n ? state.stack.back().h : state.h0;
    const Expr s0 = n ? state.stack[n - 1].x : state.zero_embed;
    const Expr s1 = n >= 2 ? state.stack[n - 2].x : state.zero_embed;
    const Expr b0 = state.next < state.words->size() ? trace.lookup(embeddings_, (*state.words)[state.next])
                                                     : state.zero_embed;
    // The scores' 3 rows outside the cell: a compiled cell computes blocks of rows, which the
    // hidden layer fills and 3 rows would not.
    const Expr hidden = (*score_)(trace, {top, s0, s1, b0})[0];
    return affine({trace.param(b_out_), trace.param(w_out_), hidden});
  }

  void push(Trace& trace, State& state, const Expr& x, int word) const {
    const Expr h = state.stack.empty() ? state.h0 : state.stack.back().h;
    const Expr c = state.stack.empty() ? state.c0 : state.stack.back().c;
    const std::vector<Expr> out = (*push_)(trace, {x, h, c});
    state.stack.push_back({x, out[0], out[1], word});
  }

  // Applies `action` (valid in `state`), recording the new elements' ops; `heads` gets the arc.
  void apply(Trace& trace, State& state, int action, std::vector<int>& heads) const {
    if (action == kShift) {
      const int word = int(state.next++);
      push(trace, state, trace.lookup(embeddings_, (*state.words)[size_t(word)]), word);
      return;
    }
    const Entry s0 = state.stack.back();
    state.stack.pop_back();
    const Entry s1 = state.stack.back();
    state.stack.pop_back();
    const Entry& head = action == kLeft ? s0 : s1;
    const Entry& dependent = action == kLeft ? s1 : s0;
    heads[size_t(dependent.word)] = head.word + 1;
    push(trace, state, (*compose_)(trace, {head.x, dependent.x})[0], head.word);
  }

  // The stack LSTM's step: (x, h, c) -> (h', c').
  Cell push_cell() const {
    const int h = hidden_;
    return Cell("parser_push", {{embed_, 1}, {h, 1}, {h, 1}}, [this, h](Trace& t, std::span<const Expr> in) {
      const Expr gates = affine({t.param(stack_.b), t.param(stack_.w), in[0], t.param(stack_.u), in[1]});
      const LstmState next = lstm_update(gates, in[2], h);
      return std::vector<Expr>{next.h, next.c};
    });
  }
  // (head, dependent) -> the head's new representation.
  Cell compose_cell() const {
    return Cell("parser_compose", {{embed_, 1}, {embed_, 1}}, [this](Trace& t, std::span<const Expr> in) {
      return std::vector<Expr>{tanh(affine({t.param(b_compose_), t.param(w_compose_), concat({in[0], in[1]})}))};
    });
  }
  // (stack LSTM top, s0, s1, b0) -> the hidden layer the three actions' scores read.
  Cell score_cell() const {
    return Cell("parser_features", {{hidden_, 1}, {embed_, 1}, {embed_, 1}, {embed_, 1}},
                [this](Trace& t, std::span<const Expr> in) {
                  return std::vector<Expr>{relu(affine({t.param(b_hidden_), t.param(w_top_), in[0], t.param(w_s0_),
                                                        in[1], t.param(w_s1_), in[2], t.param(w_b0_), in[3]}))};
                });
  }

  int head_of(const std::string& tag, int length, size_t sentence) const {
    size_t used = 0;
    int head = -1;
    try {
      head = std::stoi(tag, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != tag.size() || head < 0 || head > length)
      throw UsageError("edb-run parser: sentence " + std::to_string(sentence + 1) + " of " + source_ + ": head '" +
                       tag + "' is not a word's position (1-" + std::to_string(length) + ") or 0 for the root");
    return head;
  }

  // The arc-standard static oracle's transitions for gold `heads`; a UsageError unless they are one
  // projective tree.
  std::vector<int> oracle(const std::vector<int>& heads, size_t sentence) const {
    const int n = int(heads.size());
    std::vector<int> pending(size_t(n), 0);  // dependents not yet attached
    for (const int h : heads)
      if (h > 0) ++pending[size_t(h - 1)];
    std::vector<int> stack, actions;
    int next = 0;
    while (next < n || stack.size() > 1) {
      const size_t k = stack.size();
      if (k >= 2 && heads[size_t(stack[k - 2])] == stack[k - 1] + 1) {
        actions.push_back(kLeft);
        --pending[size_t(stack[k - 1])];
        stack.erase(stack.end() - 2);
      } else if (k >= 2 && heads[size_t(stack[k - 1])] == stack[k - 2] + 1 && pending[size_t(stack[k - 1])] == 0) {
        actions.push_back(kRight);
        --pending[size_t(stack[k - 2])];
        stack.pop_back();
      } else if (next < n) {
        actions.push_back(kShift);
        stack.push_back(next++);
      } else {
        break;
      }
    }
    if (stack.size() != 1 || heads[size_t(stack[0])] != 0)
      throw UsageError("edb-run parser: sentence " + std::to_string(sentence + 1) + " of " + source_ +
                       ": the heads are not one projective tree with one root (head 0)");
    return actions;
  }

  Model model_;
  int embed_, hidden_;
  std::vector<float> zeros_embed_, zeros_hidden_;
  std::vector<TaggedSentence> sentences_;
  std::vector<std::vector<int>> word_ids_, heads_, gold_actions_;
  Vocabulary vocabulary_;
  std::string source_;
  LookupTable embeddings_;
  Lstm stack_;
  Parameter w_compose_, b_compose_, w_top_, w_s0_, w_s1_, w_b0_, b_hidden_, w_out_, b_out_;
  std::optional<Cell> push_, compose_, score_;
};

}  // namespace

std::unique_ptr<SampleModel> make_parser(const ModelConfig& config) { return std::make_unique<Parser>(config); }

}  // namespace edb::samples
