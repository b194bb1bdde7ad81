// The beam with rollouts. Each beam step makes one decision that may cost a batch beyond the lower
// bound; the budget sets the first pass's width from the measured cost of a rollout.
#include "scheduler/search.h"

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "scheduler/policies.h"
#include "scheduler/tight.h"

namespace edb::scheduler {

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kNone = LocalTypes::kNone;

struct State {
  TightFrontier frontier;
  Schedule prefix;
  uint64_t hash = 0;  // of the set of nodes run: equal sets, equal states, whatever the order

  void run(uint32_t t) {
    const size_t before = prefix.nodes.size();
    frontier.run(t, prefix);
    for (size_t i = before; i < prefix.nodes.size(); ++i) {
      uint64_t z = prefix.nodes[i] + 0x9e3779b97f4a7c15ull;  // splitmix64
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      hash += z ^ (z >> 31);
    }
  }
};

// The rules a rollout may follow (tight.h); the search keeps the one that does best from the root.
enum class Rule { tight_first, remaining, remaining_cheap };
constexpr Rule kRules[] = {Rule::tight_first, Rule::remaining, Rule::remaining_cheap};

uint32_t rule_choice(const TightFrontier& f, Rule rule) {
  switch (rule) {
    case Rule::tight_first: return tight_first_choice(f);
    case Rule::remaining: return remaining_choice(f, 1);
    case Rule::remaining_cheap: return remaining_choice(f, 2);
  }
  return tight_first_choice(f);
}

void run_tight(State& s) {
  for (uint32_t t = s.frontier.any_tight(); t != kNone && !s.frontier.done(); t = s.frontier.any_tight()) s.run(t);
}

// `rule` from `s` to the end, on a copy; counts the decisions that were not tight.
int64_t rollout(const State& s, Rule rule, Schedule* complete, int64_t* decisions = nullptr) {
  State copy = s;
  while (!copy.frontier.done()) {
    if (decisions && copy.frontier.any_tight() == kNone) ++*decisions;
    copy.frontier.run(rule_choice(copy.frontier, rule), copy.prefix);
  }
  if (complete) *complete = std::move(copy.prefix);
  return copy.frontier.cost();
}

// The ready types a state may branch on, best first: tight ones (when they are not run without
// branching), then by the rule's own score; terminal types only when nothing else is ready.
std::vector<uint32_t> candidates(const TightFrontier& f, int most, Rule rule) {
  std::vector<uint32_t> out;
  for (uint32_t t : f.ready_types())
    if (!f.terminal(t)) out.push_back(t);
  if (out.empty()) out = f.ready_types();
  const int power = rule == Rule::remaining_cheap ? 2 : 1;
  auto score = [&](uint32_t t) {
    double cost = f.weight(t);
    if (power == 2) cost *= cost;
    return double(f.ready_remaining(t)) / cost;
  };
  std::sort(out.begin(), out.end(), [&](uint32_t a, uint32_t b) {
    if (f.tight(a) != f.tight(b)) return f.tight(a);
    if (rule != Rule::tight_first) {
      const double sa = score(a), sb = score(b);
      if (sa != sb) return sa > sb;
    } else {
      const uint64_t lhs = uint64_t(f.top_ready(a)) * std::max(f.top_unexecuted(b), 1u);
      const uint64_t rhs = uint64_t(f.top_ready(b)) * std::max(f.top_unexecuted(a), 1u);
      if (lhs != rhs) return lhs > rhs;
    }
    if (f.weight(a) != f.weight(b)) return f.weight(a) < f.weight(b);
    return a < b;
  });
  if (int(out.size()) > most) out.resize(size_t(most));
  return out;
}

struct Child {
  int64_t value;  // its rollout's cost
  int64_t cost;   // spent so far
  State state;
};

}  // namespace

SearchResult search_schedule(const ScheduleInput& input, const SearchOptions& options) {
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + options.budget;
  Analysis own;
  const Analysis& analysis = analysis_for(input, own);
  ScheduleInput with_analysis = input;
  with_analysis.analysis = &analysis;
  SearchResult result;
  {
    GreedyPolicy greedy;
    Schedule schedule;
    greedy.schedule(with_analysis, schedule);
    result.greedy_batches = expanded_batch_count(input, schedule);
  }
  ChainHeights heights;
  heights.build(input, analysis, true);
  State unforced;
  unforced.frontier.reset(with_analysis, analysis, heights);
  result.lower_bound = unforced.frontier.remaining_bound();
  State root = unforced;
  run_tight(root);
  // The rule the rollouts follow: of those in kRules, the one that does best from the root.
  const Clock::time_point before_rollout = Clock::now();
  int64_t decisions = 0;
  int64_t best = rollout(root, Rule::tight_first, &result.schedule, &decisions);
  const auto rollout_time = std::max(Clock::now() - before_rollout, Clock::duration(1));
  result.rule_batches = best;
  result.rollouts = 1;
  Rule rule = Rule::tight_first;
  Schedule complete;
  for (Rule other : kRules) {
    if (other == Rule::tight_first) continue;
    const int64_t batches = rollout(root, other, &complete);
    ++result.rollouts;
    if (batches < best) best = batches, rule = other, result.schedule = complete;
  }
  // About as many beam steps as the rule made decisions that were not tight, each costing width x
  // candidates rollouts: narrow the beam until the whole search fits the budget.
  size_t ready_types = 0;
  for (uint32_t t : root.frontier.ready_types()) ready_types += root.frontier.terminal(t) ? 0 : 1;
  const double affordable = double(options.budget.count()) * 1000.0 /
                            double(std::chrono::duration_cast<std::chrono::nanoseconds>(rollout_time).count()) /
                            double(std::max<int64_t>(decisions, 1));
  const int candidates_wanted = std::max(1, std::min(options.max_candidates, int(affordable)));
  const double per_state = double(std::max<size_t>(1, std::min<size_t>(ready_types, size_t(candidates_wanted))));
  const int width = std::max(1, std::min(options.beam_width, int(affordable / per_state / 2)));

  // One pass of the beam from the root; false when the deadline cut it short. With `force`, tight
  // types run at once; without, they are candidates too (first).
  std::unordered_set<uint64_t> seen;
  std::vector<State> beam;
  std::vector<Child> children;
  auto pass = [&](int beam_width, int tried, bool force) {
    ++result.passes;
    result.last_width = beam_width;
    beam.clear();
    beam.push_back(force ? root : unforced);
    while (!beam.empty()) {
      children.clear();
      for (const State& s : beam) {
        if (s.frontier.done()) continue;
        for (uint32_t t : candidates(s.frontier, tried, rule)) {
          if (Clock::now() > deadline) return false;
          Child child{0, 0, s};
          child.state.run(t);
          if (force) run_tight(child.state);
          child.cost = child.state.frontier.cost();
          child.value = rollout(child.state, rule, &complete);
          ++result.rollouts;
          if (child.value < best) {
            best = child.value;
            result.schedule = complete;
          }
          children.push_back(std::move(child));
        }
      }
      // The most promising states; among equals, those that spent least (more is still open).
      std::stable_sort(children.begin(), children.end(), [](const Child& a, const Child& b) {
        return a.value != b.value ? a.value < b.value : a.cost < b.cost;
      });
      beam.clear();
      seen.clear();
      for (Child& c : children) {
        if (int(beam.size()) == beam_width) break;
        if (c.state.frontier.done() || !seen.insert(c.state.hash).second) continue;
        beam.push_back(std::move(c.state));
      }
    }
    return true;
  };
  const bool out_of_time = !pass(width, candidates_wanted, true);
  if (options.widen && !out_of_time) {
    // Each step now one decision, tight or not: about as many steps as batches.
    const int widest = std::max(1, options.beam_width) * 64;
    for (int w = width; w <= widest; w *= 2)
      if (!pass(w, options.max_candidates, false)) break;
  }
  result.finished = !out_of_time;
  result.batches = best;
  return result;
}

std::string structure_key(const ScheduleInput& input) {
  std::vector<uint32_t> words;
  std::unordered_map<ir::TypeId, uint32_t> local;
  std::string names;
  const ir::NodeId begin = input.begin;
  for (ir::NodeId id = begin; id < input.graph.size(); ++id) {
    const ir::TypeId type = scheduled_type(input, id);
    if (type == ir::kNoType) {
      words.push_back(~0u);
      continue;
    }
    auto [it, inserted] = local.emplace(type, uint32_t(local.size()));
    if (inserted) {
      names += input.signatures ? input.signatures->name(type) : "#" + std::to_string(type);
      names += '\n';
    }
    words.push_back(it->second);
    const size_t count_at = words.size();
    words.push_back(0);
    for_each_argument(input, id, [&](ir::NodeId arg) {
      if (arg < begin || scheduled_type(input, arg) == ir::kNoType) return;
      words.push_back(id - arg);
      ++words[count_at];
    });
  }
  std::string key = std::to_string(words.size()) + ":" + names;
  const size_t at = key.size();
  key.resize(at + words.size() * sizeof(uint32_t));
  std::memcpy(key.data() + at, words.data(), words.size() * sizeof(uint32_t));
  return key;
}

void SearchPolicy::schedule(const ScheduleInput& input, Schedule& out) {
  const std::string key = structure_key(input);
  if (const Schedule* cached = cache_.find(key)) {
    out = *cached;
    for (ir::NodeId& id : out.nodes) id += input.begin;
    return;
  }
  ++searches_;
  out = search_schedule(input, options_).schedule;
  if (Schedule* kept = cache_.insert(key, out))  // none when the capacity is 0
    for (ir::NodeId& id : kept->nodes) id -= input.begin;
}

}  // namespace edb::scheduler
