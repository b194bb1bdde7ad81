// The learned policy of ED-Batch: a finite state machine over the ready frontier, learned by
// tabular n-step Q-learning. State: the ready types ("base": as a set; "sort": ordered by how
// many nodes are ready). Action: a ready type, all of whose ready nodes run as one batch.
// The state leaves out single-rank types (chain length 1: the per-instance loss sums, whose arity
// makes one type per sentence length and would make every state new); they stay actions. Without
// a learned action, every step is exactly greedy's choice.
// Reward per step: -1 + |F_a| / |TF_a| (TypewiseFrontier's counts). Types are kept by signature
// string, so a table trained in one process schedules graphs of another. Unseen states fall back
// to the greedy rule, and the policy counts how often that happens.
// ScheduleInput should carry the engine's SignatureTable (without it, types go by id).
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "scheduler/policies.h"
#include "scheduler/typewise.h"

namespace edb::scheduler {

struct FsmTraining {
  int episodes = 1000;       // at most
  int n_step = 10;
  double alpha = 0.4;
  double gamma = 1.0;
  double epsilon = 0.5;      // exploration, times `decay` per episode down to `epsilon_min`
  double decay = 0.9;
  double epsilon_min = 0.05;
  int rollout_every = 50;    // greedy rollouts keep the best table
  double stop_within = 0.01; // stop once the rollout is within this fraction of the lower bound
  int patience = 6;          // ... or after this many rollouts in a row without a better table
  uint64_t seed = 1;
};

struct FsmProgress {
  int episode = 0;
  int episodes = 0;
  int64_t batches = 0;       // of the last rollout, over all training graphs
  int64_t best_batches = 0;
  int64_t lower_bound = 0;   // over all training graphs
  int64_t greedy_batches = 0;  // greedy over the same graphs
  int64_t decisions = 0;     // of the best table's rollout over the training graphs (set at the end)
  int64_t fallbacks = 0;     // ... that fell back to greedy
  std::string stop_reason;   // set at the end
};

class FsmPolicy final : public Policy {
 public:
  enum class Encoding { base, sort };
  explicit FsmPolicy(Encoding encoding = Encoding::base) : encoding_(encoding) {}
  static Encoding parse_encoding(const std::string& name);  // UsageError when unknown

  std::string_view name() const override { return "fsm"; }
  void schedule(const ScheduleInput& input, Schedule& out) override;

  // Learns from several graphs (each input with its types and signatures); returns the final
  // progress (the best table is kept). Deterministic for a fixed seed.
  FsmProgress train(std::span<const ScheduleInput> graphs, const FsmTraining& options,
                    const std::function<void(const FsmProgress&)>& progress = nullptr);

  void save(const std::string& path) const;  // UsageError when it cannot be written
  void load(const std::string& path);        // UsageError naming the path and the problem

  size_t state_count() const;  // states with at least one tried action
  int64_t decisions() const { return decisions_; }
  int64_t unseen() const { return unseen_; }  // decisions that fell back to greedy

 private:
  // The ready types in policy type indexes: "base" as a bitset (32 per word, up to the highest
  // set word, so equal sets give equal keys); "sort" as a list ordered by ready count.
  using Key = std::vector<uint32_t>;
  struct KeyHash {
    size_t operator()(const Key& key) const;
  };
  // Q of the actions tried in a state, and the best of them (kept current on every update, so a
  // decision is a key, a lookup and no scan).
  struct Entry {
    std::vector<std::pair<uint32_t, double>> q;  // policy type index -> Q
    uint32_t best = ~0u;
    void set(uint32_t action, double value);
    double best_q() const;
  };
  using Table = std::unordered_map<Key, Entry, KeyHash>;

  // Policy type indexes of the input's types: a name the table lacks is added while training
  // (`add`); otherwise it gets an index past every name for this input only, which no state of
  // the table holds, so scheduling never grows the table however many structures it sees.
  void map_types(const ScheduleInput& input, const Analysis& analysis, bool add);
  // Whether this step is a decision: two or more types ready, some not single-rank. Fills
  // candidates_ with the ready types that are not single-rank: the state.
  bool needs_decision();
  void encode(Key& key) const;  // candidates_ as a key
  // The entry's best action when it is ready and learned better than greedy's choice; else greedy's.
  uint32_t learned_or_greedy(const Entry* entry);
  static Key key_of(std::vector<uint32_t> ready, Encoding encoding);  // from policy type indexes
  std::vector<uint32_t> ready_of(const Key& key) const;   // back to policy type indexes
  int64_t rollout(const ScheduleInput& input, const Analysis& analysis, Schedule& out, bool count);

  Encoding encoding_;
  Table table_;
  std::string stop_reason_;  // of the last training, for save()'s warning
  std::vector<std::string> names_;  // policy type index -> signature
  std::unordered_map<std::string, uint32_t> index_of_name_;
  std::vector<uint32_t> index_of_local_;  // for the current input
  std::vector<uint32_t> local_of_index_;  // policy type index -> local type (kNone: absent)
  Analysis own_;
  TypewiseFrontier frontier_;
  Key key_;
  std::vector<uint32_t> candidates_;  // local types
  std::vector<uint32_t> weight_;      // per local type: batches one batch expands to (training)
  int64_t decisions_ = 0;
  int64_t unseen_ = 0;
};

}  // namespace edb::scheduler
