// The learned policy: features of the frontier, the lookup at run time, and fitting by imitation.
#include "scheduler/imitation.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "edbatch/errors.h"
#include "scheduler/lower_bound.h"
#include "scheduler/policies.h"

namespace edb::scheduler {

namespace {

constexpr uint32_t kNone = LocalTypes::kNone;
// Types that only feed outputs and losses: one shared name, so a loss sum over a sentence length
// never seen in training still has a score.
constexpr const char* kTerminalName = "<terminal: outputs and losses>";

int64_t greedy_batches(const ScheduleInput& input, const Analysis& analysis) {
  ScheduleInput with = input;
  with.analysis = &analysis;
  GreedyPolicy greedy;
  Schedule schedule;
  greedy.schedule(with, schedule);
  return expanded_batch_count(input, schedule);
}

}  // namespace

std::vector<std::string> model_names(const ir::Graph& graph) {
  std::vector<std::string> names;
  for (const ir::ParameterInfo& p : graph.parameters()) {
    const size_t slash = p.name.find('/');
    if (slash != std::string::npos) names.push_back(p.name.substr(0, slash));
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

uint32_t ImitationPolicy::index_of(const std::string& name, bool add) {
  if (!add) {
    const auto it = index_of_name_.find(name);
    return it == index_of_name_.end() ? kUnseen : it->second;
  }
  auto [it, inserted] = index_of_name_.emplace(name, uint32_t(names_.size()));
  if (inserted) names_.push_back(name);
  return it->second;
}

void ImitationPolicy::map_types(const ScheduleInput& input, const Analysis& analysis, const ChainHeights& heights,
                                bool add) {
  const int64_t resets = input.signatures ? input.signatures->resets() : 0;
  if (input.signatures != indexed_for_ || resets != indexed_resets_) {
    index_of_global_.clear();
    indexed_for_ = input.signatures;
    indexed_resets_ = resets;
  }
  if (dense_stale_) {
    dense_score_.assign(names_.size() * kBuckets, 0.0f);
    dense_known_.assign(names_.size() * kBuckets, 0);
    for (const auto& [key, score] : scores_) {
      if (key >= dense_score_.size()) continue;  // a name not in names_ cannot be met
      dense_score_[key] = score;
      dense_known_[key] = 1;
    }
    dense_stale_ = false;
  }
  const size_t count = analysis.types.count();
  index_of_local_.resize(count);
  local_score_.resize(count * kBuckets);
  local_known_.resize(count * kBuckets);
  uint32_t terminal_index = kNone;
  for (size_t t = 0; t < count; ++t) {
    uint32_t index;
    if (heights.terminal[t]) {
      if (terminal_index == kNone) terminal_index = index_of(kTerminalName, add);
      index = terminal_index;
    } else {
      const ir::TypeId type = analysis.types.global[t];
      if (type >= index_of_global_.size()) index_of_global_.resize(size_t(type) + 1, kNone);
      if (index_of_global_[type] == kNone || (add && index_of_global_[type] == kUnseen))
        index_of_global_[type] = index_of(input.signatures ? input.signatures->name(type) : "#" + std::to_string(type), add);
      index = index_of_global_[type];
    }
    index_of_local_[t] = index;
    for (uint32_t b = 0; b < kBuckets; ++b) {
      const size_t key = size_t(index) * kBuckets + b;
      const bool known = key < dense_known_.size() && dense_known_[key];
      local_score_[t * kBuckets + b] = known ? dense_score_[key] : 0.0f;
      local_known_[t * kBuckets + b] = known;
    }
  }
}

uint32_t ImitationPolicy::bucket(const TightFrontier& frontier, uint32_t t, bool tight, uint64_t longest_ready) const {
  if (tight) return kBuckets - 1;
  const uint64_t ready = frontier.top_ready(t), all = std::max<uint64_t>(frontier.top_unexecuted(t), 1);
  const uint32_t share = uint32_t(std::min<uint64_t>(ready * 4 / all, 3));
  const bool longest = uint64_t(frontier.top_height(t)) * frontier.weight(t) >= longest_ready;
  return share + (longest ? 4 : 0);
}

uint64_t ImitationPolicy::longest_ready(const TightFrontier& frontier) {
  uint64_t most = 0;
  for (uint32_t t : frontier.ready_types())
    if (!frontier.terminal(t)) most = std::max<uint64_t>(most, uint64_t(frontier.top_height(t)) * frontier.weight(t));
  return most;
}

uint32_t ImitationPolicy::decide(TightFrontier& frontier, bool count) {
  const auto& ready = frontier.ready_types();
  if (ready.size() == 1) return ready[0];
  if (count) ++decisions_;
  if (!tight_first_unasked() && scores_.empty()) {  // the boosted base with no table: it decides alone
    if (count) ++unseen_;
    return base_among(frontier, ready);
  }
  // One pass over the ready types for what the rest reads more than once: which are tight, the
  // longest remaining chain, and the base's tight choice (the same as remaining_tight_choice and
  // any_tight: the remaining rule's best non-terminal tight type, else its best terminal one; or
  // the first tight type).
  const int power = tight_first_unasked() ? weight_power() : 0;
  ready_tight_.resize(ready.size());
  uint64_t longest = 0;
  uint32_t first_tight = kNone, best[2] = {kNone, kNone};  // [terminal]
  double best_score[2] = {0, 0};
  for (size_t k = 0; k < ready.size(); ++k) {
    const uint32_t t = ready[k];
    const bool tight = frontier.tight(t), terminal = frontier.terminal(t);
    ready_tight_[k] = tight;
    if (!terminal) longest = std::max<uint64_t>(longest, uint64_t(frontier.top_height(t)) * frontier.weight(t));
    if (!tight) continue;
    if (first_tight == kNone) first_tight = t;
    if (power == 0) continue;
    const uint32_t weight = frontier.weight(t);
    const double score = double(frontier.ready_remaining(t)) / (power == 2 ? double(weight) * weight : double(weight));
    uint32_t& b = best[terminal];
    if (b == kNone || score > best_score[terminal] ||
        (score == best_score[terminal] && (weight < frontier.weight(b) || (weight == frontier.weight(b) && t < b))))
      b = t, best_score[terminal] = score;
  }
  if (tight_first_unasked()) {  // tight types first, unasked; the remaining rule picks among them
    const uint32_t t = power == 0 ? first_tight : best[0] != kNone ? best[0] : best[1];
    if (t != kNone) return t;
  }
  float best_table = -INFINITY;
  bool known = false;
  tied_.clear();
  for (size_t k = 0; k < ready.size(); ++k) {
    const uint32_t t = ready[k];
    const uint32_t at = t * kBuckets + bucket(frontier, t, ready_tight_[k], longest);
    known = known || local_known_[at];
    const float s = local_score_[at];
    if (s > best_table) {
      best_table = s;
      tied_.assign(1, t);
    } else if (s == best_table) {
      tied_.push_back(t);
    }
  }
  if (!known) {
    if (count) ++unseen_;
    return base_among(frontier, ready);
  }
  if (tied_.size() == 1) return tied_[0];
  return base_among(frontier, tied_);
}

uint32_t ImitationPolicy::base_among(TightFrontier& frontier, const std::vector<uint32_t>& types) const {
  switch (base_) {
    case Base::greedy:
    case Base::tight_then_greedy: return frontier.greedy_among(types);
    case Base::tight_first: return tight_first_among(frontier, types);
    case Base::remaining:
    case Base::remaining_steep: return remaining_among(frontier, types, 1);
    case Base::remaining_cheap:
    case Base::remaining_steep_cheap: return remaining_among(frontier, types, 2);
    case Base::remaining_steep_boosted: return boosted_remaining_among(frontier, types, 1, kTightBoost);
  }
  throw InternalError("ImitationPolicy: unknown base");
}

int64_t ImitationPolicy::rollout(const ScheduleInput& input, const Analysis& analysis, const ChainHeights& heights,
                                 Schedule& out, bool count) {
  out.clear();
  map_types(input, analysis, heights, false);
  frontier_.reset(input, analysis, heights, base_needs_greedy(), remaining_power());
  while (!frontier_.done()) frontier_.run(decide(frontier_, count), out);
  return expanded_batch_count(input, out);
}

int64_t ImitationPolicy::greedy_rollout(const ScheduleInput& input, const Analysis& analysis, Schedule& out,
                                        bool count) {
  // Greedy exactly, at greedy's cost: no heights, no buckets.
  out.clear();
  greedy_frontier_.reset(input, analysis);
  while (!greedy_frontier_.done()) {
    if (count && greedy_frontier_.ready_types().size() >= 2) ++decisions_, ++unseen_;
    greedy_frontier_.run(greedy_frontier_.greedy_choice(), out);
  }
  return expanded_batch_count(input, out);
}

void ImitationPolicy::check_models(const ScheduleInput& input) const {
  if (models_.empty()) return;
  // Usually the first parameter settles it: no strings are built unless the check fails.
  bool any = false;
  for (const ir::ParameterInfo& p : input.graph.parameters()) {
    const size_t slash = p.name.find('/');
    if (slash == std::string::npos) continue;
    any = true;
    const std::string_view model(p.name.data(), slash);
    if (std::binary_search(models_.begin(), models_.end(), model, std::less<>())) return;
  }
  if (!any) return;
  const std::vector<std::string> here = model_names(input.graph);
  std::string trained, seen;
  for (const std::string& m : models_) trained += (trained.empty() ? "" : ", ") + m;
  for (const std::string& m : here) seen += (seen.empty() ? "" : ", ") + m;
  throw UsageError("edb::Engine: the learned policy" + (path_.empty() ? std::string() : " in '" + path_ + "'") +
                   " was trained on model " + trained + ", but this trace uses model " + seen +
                   "; train a policy for this model (edb-run MODEL --policy learned --train-policy FILE)");
}

void ImitationPolicy::schedule(const ScheduleInput& input, Schedule& out) {
  check_models(input);
  const Analysis& analysis = analysis_for(input, own_, chains());
  if (greedy_fallback()) {
    ++greedy_schedules_;
    greedy_rollout(input, analysis, out, true);
    return;
  }
  heights_.build(input, analysis, needs_remaining());
  ScheduleInput with = input;
  with.analysis = &analysis;
  rollout(with, analysis, heights_, out, true);
}

void ImitationPolicy::add_samples(const ScheduleInput& input, const Analysis& analysis, const ChainHeights& heights,
                                  const Schedule& taught, std::vector<Sample>& samples) {
  map_types(input, analysis, heights, true);
  std::vector<uint32_t> local_of_global;
  for (uint32_t t = 0; t < analysis.types.count(); ++t) {
    const ir::TypeId global = analysis.types.global[t];
    if (global >= local_of_global.size()) local_of_global.resize(global + 1, kNone);
    local_of_global[global] = t;
  }
  TightFrontier frontier;
  frontier.reset(input, analysis, heights, false, remaining_power());
  Schedule replay;  // the search's choices: no greedy counts needed
  for (size_t b = 0; b < taught.batch_count(); ++b) {
    const uint32_t chosen = local_of_global[taught.batch_type[b]];
    const auto& ready = frontier.ready_types();
    // Where the base runs a tight type without asking the table, there is nothing to learn.
    if (ready.size() >= 2 && !(tight_first_unasked() && frontier.any_tight() != kNone)) {
      Sample& sample = samples.emplace_back();
      const uint64_t longest = longest_ready(frontier);
      for (uint32_t t : ready) {
        if (t == chosen) sample.chosen = uint32_t(sample.keys.size());
        sample.keys.push_back(index_of_local_[t] * kBuckets + bucket(frontier, t, frontier.tight(t), longest));
      }
    }
    frontier.run(chosen, replay);
  }
}

// The table fitted to `samples` under the current base, then cut: the averaged perceptron, and of
// the table's best-supported all, half, quarter, ..., none, the cut that never needs more batches
// than greedy on a fitted trace and needs fewest on the held-out traces (then on the fitted ones):
// the table that generalises, not the one that fits best. Traces [0, fitted) were fitted on, the
// rest of `greedy` held out.
ImitationPolicy::Fitted ImitationPolicy::fit_table(const std::vector<Sample>& samples, int epochs,
                                                   const std::function<int64_t(size_t)>& evaluate,
                                                   const std::vector<int64_t>& greedy, size_t fitted) {
  scores_.clear();
  // Averaged perceptron: scores are the mean of the weights over every step of every epoch.
  std::unordered_map<uint32_t, double> weight, total;
  std::unordered_map<uint32_t, int64_t> support;
  for (const Sample& s : samples) ++support[s.keys[s.chosen]];
  int64_t step = 0;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    int mistakes = 0;
    for (const Sample& s : samples) {
      ++step;
      size_t best = 0;
      double best_w = -INFINITY;
      bool tie = false;
      for (size_t k = 0; k < s.keys.size(); ++k) {
        const double w = weight[s.keys[k]];
        if (w > best_w) best_w = w, best = k, tie = false;
        else if (w == best_w) tie = true;
      }
      if (best != s.chosen || tie) {
        ++mistakes;
        // Lazy averaging: add the weight's value times the steps it held before changing it.
        weight[s.keys[s.chosen]] += 1.0;
        total[s.keys[s.chosen]] += double(step);
        if (s.keys[best] != s.keys[s.chosen]) {
          weight[s.keys[best]] -= 1.0;
          total[s.keys[best]] -= double(step);
        }
      }
    }
    if (mistakes == 0) break;
  }
  const double steps = double(std::max<int64_t>(step, 1));
  std::vector<std::pair<int64_t, uint32_t>> by_support;
  for (const auto& [key, w] : weight) {
    // averaged = w - total/steps (the standard lazy form of the averaged perceptron)
    const double averaged = w - total[key] / steps;
    if (averaged != 0.0) {
      scores_[key] = float(averaged);
      by_support.emplace_back(support.count(key) ? support[key] : 0, key);
    }
  }
  std::sort(by_support.begin(), by_support.end(), std::greater<>());

  const std::unordered_map<uint32_t, float> full = std::move(scores_);
  auto cut_to = [&](size_t kept) {
    scores_.clear();
    for (size_t k = 0; k < kept; ++k) scores_[by_support[k].second] = full.at(by_support[k].second);
    dense_stale_ = true;
  };
  // The base alone per trace: a cut must not need more on any held-out trace either (the held-out
  // traces are few, and a table that wins on their sum but loses on one did worse elsewhere).
  cut_to(0);
  std::vector<int64_t> base_alone(greedy.size());
  for (size_t g = fitted; g < greedy.size(); ++g) base_alone[g] = evaluate(g);
  size_t best_kept = 0;
  int64_t best_heldout = 0, best_fitted = 0;
  bool any_valid = false;
  for (size_t kept = by_support.size();; kept /= 2) {
    cut_to(kept);
    bool valid = true;
    int64_t on_fitted = 0, on_heldout = 0;
    for (size_t g = 0; g < fitted && valid; ++g) {
      const int64_t batches = evaluate(g);
      valid = batches <= greedy[g];
      on_fitted += batches;
    }
    for (size_t g = fitted; g < greedy.size() && valid; ++g) {
      const int64_t batches = evaluate(g);
      valid = batches <= base_alone[g];
      on_heldout += batches;
    }
    if (valid && (!any_valid || on_heldout < best_heldout || (on_heldout == best_heldout && on_fitted < best_fitted)))
      any_valid = true, best_kept = kept, best_heldout = on_heldout, best_fitted = on_fitted;
    if (kept == 0) break;
  }
  cut_to(best_kept);
  return Fitted{std::move(scores_), by_support.size(), best_heldout, best_fitted};
}

LearnedReport ImitationPolicy::train(std::span<const ScheduleInput> graphs, const ImitationTraining& options,
                                     const std::function<void(int, int)>& progress) {
  if (graphs.empty()) throw UsageError("edb::Engine::train_policy(): no traces to learn from");
  if (options.epochs < 1) throw UsageError("edb::Engine::train_policy(): epochs must be at least 1");
  const size_t count = graphs.size();
  const size_t heldout = count < 2 || options.heldout_fraction <= 0
                             ? 0
                             : std::max<size_t>(1, size_t(double(count) * options.heldout_fraction));
  const size_t fitted = count - heldout;
  std::vector<Analysis> analyses(count);
  std::vector<ChainHeights> heights(count);
  std::vector<ScheduleInput> inputs(graphs.begin(), graphs.end());
  LearnedReport report;
  report.traces = int64_t(fitted);
  report.heldout_traces = int64_t(heldout);
  models_.clear();
  for (size_t g = 0; g < count; ++g) {
    analyses[g].build(graphs[g]);
    inputs[g].analysis = &analyses[g];
    heights[g].build(inputs[g], analyses[g], true);  // every base is tried
    for (std::string& m : model_names(graphs[g].graph)) models_.push_back(std::move(m));
  }
  std::sort(models_.begin(), models_.end());
  models_.erase(std::unique(models_.begin(), models_.end()), models_.end());
  std::vector<uint32_t> weight_scratch;
  auto node_bound = [&](size_t g) { return weighted_lower_bound(graphs[g], analyses[g], weight_scratch); };

  // The search's best schedule of each fitted trace: the teacher, searched once for every base.
  std::vector<Schedule> taught(fitted);
  std::vector<int64_t> greedy(count);
  for (size_t g = 0; g < count; ++g) greedy[g] = greedy_batches(inputs[g], analyses[g]);
  for (size_t g = 0; g < fitted; ++g) {
    SearchResult found = search_schedule(inputs[g], options.search);
    report.search_batches += found.batches;
    report.greedy_batches += greedy[g];
    report.lower_bound += node_bound(g);
    if (!found.finished) ++report.searches_cut_short;
    taught[g] = std::move(found.schedule);
    if (progress) progress(int(g + 1), int(fitted));
  }

  // The base (what decides without a score): of those that alone never need more batches than
  // greedy on a fitted trace, the one needing fewest over all the traces (nothing is fitted yet,
  // so the held-out ones count too). Choosing it with a table on top would favour the table that
  // fits the fitted traces best, not the one that generalises.
  Schedule scratch;
  auto evaluate = [&](size_t g) { return rollout(inputs[g], analyses[g], heights[g], scratch, false); };
  scores_.clear();
  dense_stale_ = true;
  Base chosen = Base::greedy;
  int64_t chosen_total = std::accumulate(greedy.begin(), greedy.end(), int64_t{0});
  for (Base candidate : {Base::tight_then_greedy, Base::tight_first, Base::remaining, Base::remaining_cheap,
                         Base::remaining_steep, Base::remaining_steep_cheap, Base::remaining_steep_boosted}) {
    base_ = candidate;
    bool never_worse = true;
    int64_t total = 0;
    for (size_t g = 0; g < count && never_worse; ++g) {
      const int64_t batches = evaluate(g);
      never_worse = g >= fitted || batches <= greedy[g];
      total += batches;
    }
    if (never_worse && total < chosen_total) chosen = candidate, chosen_total = total;
  }
  base_ = chosen;
  std::vector<Sample> samples;
  for (size_t g = 0; g < fitted; ++g) add_samples(inputs[g], analyses[g], heights[g], taught[g], samples);
  const size_t sample_count = samples.size();
  Fitted best = fit_table(samples, options.epochs, evaluate, greedy, fitted);
  scores_ = std::move(best.scores);
  dense_stale_ = true;
  const size_t best_kept = scores_.size();
  // The fallback: greedy exactly when the base alone still loses on a fitted trace, or
  // when the table only ties greedy over them (it would cost more per decision for nothing).
  int64_t with_table = 0, with_greedy = 0;
  bool lost = false;
  for (size_t g = 0; g < fitted; ++g) {
    const int64_t batches = evaluate(g);
    lost = lost || batches > greedy[g];
    with_table += batches;
    with_greedy += greedy[g];
  }
  const bool tied = !lost && with_table >= with_greedy;
  if (lost || tied) {
    scores_.clear();
    dense_stale_ = true;
    base_ = Base::greedy;
  }
  const char* base_names[] = {"", "; tight types run first, greedy where no score",
                              "; tight types run first, the tight-first rule where no score",
                              "; tight types run first, the remaining rule where no score",
                              "; tight types run first, the remaining rule (cheap types first) where no score",
                              "; tight types run first, the remaining rule (steep: lagging instances count more) where no score",
                              "; tight types run first, the remaining rule (steep, cheap types first) where no score",
                              "; the remaining rule (steep, a tight type's score counted 4 times) where no score"};
  const std::string base_said = base_names[int(base_)];
  const int64_t decisions_before = decisions_, unseen_before = unseen_;
  for (size_t g = 0; g < count; ++g) {
    Schedule schedule;
    const int64_t batches = greedy_fallback() ? greedy_rollout(inputs[g], analyses[g], schedule, g < fitted)
                                              : rollout(inputs[g], analyses[g], heights[g], schedule, g < fitted);
    if (g < fitted) {
      report.batches += batches;
    } else {
      report.heldout_batches += batches;
      report.heldout_greedy_batches += greedy[g];
      report.heldout_lower_bound += node_bound(g);
    }
  }
  report.decisions = decisions_ - decisions_before;
  report.fallbacks = unseen_ - unseen_before;
  decisions_ = decisions_before;
  unseen_ = unseen_before;
  report.states = int64_t(scores_.size());
  report.beats_greedy = report.batches < report.greedy_batches;
  report.greedy_fallback = greedy_fallback();
  std::string why = "fitted " + std::to_string(sample_count) + " decisions of the search's schedules (" +
                    std::to_string(report.search_batches) + " batches against greedy's " +
                    std::to_string(report.greedy_batches) + ")";
  if (report.searches_cut_short > 0)
    why += "; the search ran out of its budget on " + std::to_string(report.searches_cut_short) + " of " +
           std::to_string(fitted) + " traces";
  if (best_kept < best.offered)
    why += "; kept the best-supported " + std::to_string(best_kept) + " of " + std::to_string(best.offered) +
           " scores (never above greedy on a training trace nor above the base alone on a held-out one, fewest "
           "batches on the held-out ones)";
  why += base_said;
  if (lost) why += "; still more batches than greedy on a training trace with the table emptied";
  if (tied) why += "; the table only tied greedy on the training traces";
  if (greedy_fallback()) why = "learned nothing: " + why + "; falls back to greedy exactly";
  report.stop_reason = why;
  report_ = report;
  return report;
}

}  // namespace edb::scheduler
