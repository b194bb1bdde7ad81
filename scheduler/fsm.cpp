// The learned policy: encoding the frontier, acting from the table, and Q-learning it.
#include "scheduler/fsm.h"

#include <algorithm>
#include <cmath>

#include "edbatch/errors.h"
#include "scheduler/lower_bound.h"

namespace edb::scheduler {

namespace {
constexpr uint32_t kNone = LocalTypes::kNone;
}

FsmPolicy::Encoding FsmPolicy::parse_encoding(const std::string& name) {
  if (name == "base") return Encoding::base;
  if (name == "sort") return Encoding::sort;
  throw UsageError("edb::Engine: unknown policy encoding '" + name + "' (available: base, sort)");
}

size_t FsmPolicy::KeyHash::operator()(const Key& key) const {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ key.size();
  for (uint32_t v : key) {
    h = (h ^ v) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 29;
  }
  return static_cast<size_t>(h);
}


void FsmPolicy::Entry::set(uint32_t action, double value) {
  auto it = std::find_if(q.begin(), q.end(), [&](const auto& p) { return p.first == action; });
  if (it == q.end()) q.emplace_back(action, value);
  else it->second = value;
  if (best == action || best == kNone) {
    // The best may have dropped: rescan (entries hold a handful of actions).
    best = kNone;
    double best_value = -INFINITY;
    for (const auto& [a, v] : q)
      if (v > best_value || (v == best_value && a < best)) best = a, best_value = v;
  } else if (value > best_q() || (value == best_q() && action < best)) {
    best = action;
  }
}

double FsmPolicy::Entry::best_q() const {
  for (const auto& [a, v] : q)
    if (a == best) return v;
  return -INFINITY;
}

FsmPolicy::Key FsmPolicy::key_of(std::vector<uint32_t> ready, Encoding encoding) {
  if (encoding == Encoding::sort) return ready;
  Key key;
  for (uint32_t index : ready) {
    if (index / 32 >= key.size()) key.resize(index / 32 + 1, 0);
    key[index / 32] |= 1u << (index % 32);
  }
  return key;
}

std::vector<uint32_t> FsmPolicy::ready_of(const Key& key) const {
  if (encoding_ == Encoding::sort) return key;
  std::vector<uint32_t> ready;
  for (uint32_t word = 0; word < key.size(); ++word)
    for (uint32_t bit = 0; bit < 32; ++bit)
      if (key[word] >> bit & 1u) ready.push_back(word * 32 + bit);
  return ready;
}

void FsmPolicy::map_types(const ScheduleInput& input, const Analysis& analysis, bool add) {
  // Without the engine's signature table (a bare graph), types are named by their ids: such a
  // table works within the process only.
  index_of_local_.resize(analysis.types.count());
  uint32_t unseen = 0;
  for (size_t t = 0; t < analysis.types.count(); ++t) {
    const ir::TypeId type = analysis.types.global[t];
    const std::string name = input.signatures ? input.signatures->name(type) : "#" + std::to_string(type);
    if (const auto it = index_of_name_.find(name); it != index_of_name_.end()) {
      index_of_local_[t] = it->second;
    } else if (add) {
      index_of_local_[t] = uint32_t(names_.size());
      index_of_name_.emplace(name, index_of_local_[t]);
      names_.push_back(name);
    } else {
      index_of_local_[t] = uint32_t(names_.size()) + unseen++;  // names_ does not grow without `add`
    }
  }
  local_of_index_.assign(names_.size() + unseen, kNone);
  for (uint32_t t = 0; t < index_of_local_.size(); ++t) local_of_index_[index_of_local_[t]] = t;
}

bool FsmPolicy::needs_decision() {
  candidates_.clear();
  if (frontier_.ready_types().size() < 2) return false;
  for (uint32_t t : frontier_.ready_types())
    if (!frontier_.single_rank(t)) candidates_.push_back(t);
  return !candidates_.empty();
}

void FsmPolicy::encode(Key& key) const {
  key.clear();
  if (encoding_ == Encoding::base) {
    for (uint32_t t : candidates_) {
      const uint32_t index = index_of_local_[t];
      if (index / 32 >= key.size()) key.resize(index / 32 + 1, 0);
      key[index / 32] |= 1u << (index % 32);
    }
    return;
  }
  key = candidates_;
  std::sort(key.begin(), key.end(), [&](uint32_t a, uint32_t b) {
    const uint64_t ca = frontier_.ready_count(a), cb = frontier_.ready_count(b);
    return ca != cb ? ca > cb : index_of_local_[a] < index_of_local_[b];
  });
  for (uint32_t& t : key) t = index_of_local_[t];
}

uint32_t FsmPolicy::learned_or_greedy(const Entry* entry) {
  // Leave greedy's choice (Q 0 while untried) only for a ready action learned to be better.
  const uint32_t greedy = frontier_.greedy_choice();
  if (!entry || entry->best == kNone) return greedy;
  const uint32_t learned = local_of_index_[entry->best];
  if (learned == kNone || frontier_.ready_count(learned) == 0) return greedy;
  double greedy_q = 0;
  for (const auto& [a, value] : entry->q)
    if (a == index_of_local_[greedy]) greedy_q = value;
  return entry->best_q() > greedy_q ? learned : greedy;
}

size_t FsmPolicy::state_count() const {
  return static_cast<size_t>(std::count_if(table_.begin(), table_.end(), [](const auto& s) { return !s.second.q.empty(); }));
}

int64_t FsmPolicy::rollout(const ScheduleInput& input, const Analysis& analysis, Schedule& out, bool count) {
  out.clear();
  map_types(input, analysis, false);
  frontier_.reset(input, analysis);
  while (!frontier_.done()) {
    uint32_t choice;
    if (!needs_decision()) {
      choice = frontier_.greedy_choice();
    } else {
      encode(key_);
      const auto it = table_.find(key_);
      const bool seen = it != table_.end() && it->second.best != kNone;
      choice = learned_or_greedy(seen ? &it->second : nullptr);
      if (count) {
        ++decisions_;
        if (!seen) ++unseen_;
      }
    }
    frontier_.run(choice, out);
  }
  return expanded_batch_count(input, out);  // what the schedule costs once cells expand
}

void FsmPolicy::schedule(const ScheduleInput& input, Schedule& out) {
  rollout(input, analysis_for(input, own_), out, true);
}

FsmProgress FsmPolicy::train(std::span<const ScheduleInput> graphs, const FsmTraining& options,
                             const std::function<void(const FsmProgress&)>& progress) {
  if (graphs.empty()) throw UsageError("edb::Engine::train_policy(): no traces to learn from");
  std::vector<Analysis> analyses(graphs.size());
  std::vector<uint32_t> weight_scratch;
  FsmProgress state;
  state.episodes = options.episodes;
  for (size_t g = 0; g < graphs.size(); ++g) {
    analyses[g].build(graphs[g]);
    // As Stats counts it at run time, like the batch counts.
    state.lower_bound += weighted_lower_bound(graphs[g], analyses[g], weight_scratch);
  }
  Schedule scratch;
  auto rollout_all = [&] {
    int64_t total = 0;
    for (size_t g = 0; g < graphs.size(); ++g) total += rollout(graphs[g], analyses[g], scratch, false);
    return total;
  };
  state.best_batches = state.batches = rollout_all();
  for (size_t g = 0; g < graphs.size(); ++g) {
    ScheduleInput with = graphs[g];
    with.analysis = &analyses[g];
    GreedyPolicy greedy;
    greedy.schedule(with, scratch);
    state.greedy_batches += expanded_batch_count(graphs[g], scratch);
  }
  Table best = table_;
  std::mt19937_64 rng(options.seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  double epsilon = options.epsilon;
  // One step of an episode. Entries are looked up once (an unordered_map's nodes stay put), so the
  // n-step updates below need no hashing.
  struct Step {
    Entry* entry;
    uint32_t action;
    uint32_t ready;  // how many types were ready (actions available) in that state
    double reward;
  };
  std::vector<Step> steps;
  // max_a Q(s, a) over the state's actions; an action never tried there counts as 0.
  auto max_q_of = [](const Step& step) {
    if (step.entry->best == kNone) return 0.0;
    const double best = step.entry->best_q();
    return step.entry->q.size() == step.ready ? best : std::max(0.0, best);
  };
  int stale_rollouts = 0;
  state.stop_reason = "ran all " + std::to_string(options.episodes) + " episodes";
  for (int episode = 0; episode < options.episodes; ++episode) {
    if (state.best_batches <= int64_t(std::floor((1.0 + options.stop_within) * double(state.lower_bound)))) {
      state.stop_reason = "the best table came within " + std::to_string(int(options.stop_within * 100 + 0.5)) +
                          "% of the lower bound";
      break;
    }
    if (stale_rollouts >= options.patience) {
      state.stop_reason = std::to_string(options.patience) + " rollouts in a row found no better table";
      break;
    }
    const size_t g = size_t(episode) % graphs.size();
    map_types(graphs[g], analyses[g], true);
    expanded_type_weights(graphs[g], analyses[g].types, weight_);
    frontier_.reset(graphs[g], analyses[g]);
    steps.clear();
    scratch.clear();
    while (!frontier_.done()) {
      // Steps without a decision take greedy's choice and stay out of the returns.
      uint32_t choice;
      if (!needs_decision()) {
        choice = frontier_.greedy_choice();
      } else {
        encode(key_);
        Entry& entry = table_[key_];
        const auto& ready = frontier_.ready_types();
        choice = unit(rng) < epsilon ? ready[size_t(rng() % ready.size())] : learned_or_greedy(&entry);
        const double f = double(frontier_.ready_count(choice)), tf = double(frontier_.frontier_count(choice));
        // A batch of cell calls is as many batches as the cell's schedule has.
        const double reward = double(weight_[choice]) * (-1.0 + f / tf);
        steps.push_back({&entry, index_of_local_[choice], static_cast<uint32_t>(ready.size()), reward});
      }
      frontier_.run(choice, scratch);
    }
    // n-step returns, bootstrapped from the table at t + n.
    for (size_t t = 0; t < steps.size(); ++t) {
      double ret = 0, discount = 1;
      const size_t end = std::min(steps.size(), t + size_t(options.n_step));
      for (size_t k = t; k < end; ++k, discount *= options.gamma) ret += discount * steps[k].reward;
      if (end < steps.size()) ret += discount * max_q_of(steps[end]);
      Entry& entry = *steps[t].entry;
      double q = 0;
      for (const auto& [a, value] : entry.q)
        if (a == steps[t].action) q = value;
      entry.set(steps[t].action, q + options.alpha * (ret - q));
    }
    epsilon = std::max(options.epsilon_min, epsilon * options.decay);
    state.episode = episode + 1;
    if ((episode + 1) % options.rollout_every == 0 || episode + 1 == options.episodes) {
      state.batches = rollout_all();
      if (state.batches < state.best_batches) {
        state.best_batches = state.batches;
        best = table_;
        stale_rollouts = 0;
      } else {
        ++stale_rollouts;
      }
      if (progress) progress(state);
    }
  }
  table_ = std::move(best);
  const int64_t decisions = decisions_, unseen = unseen_;
  for (size_t g = 0; g < graphs.size(); ++g) rollout(graphs[g], analyses[g], scratch, true);
  state.decisions = decisions_ - decisions;
  state.fallbacks = unseen_ - unseen;
  decisions_ = decisions;
  unseen_ = unseen;
  if (state.best_batches >= state.greedy_batches)
    state.stop_reason += "; the table does not beat greedy (" + std::to_string(state.best_batches) + " batches against " +
                         std::to_string(state.greedy_batches) + ")";
  stop_reason_ = state.stop_reason;
  return state;
}

}  // namespace edb::scheduler
