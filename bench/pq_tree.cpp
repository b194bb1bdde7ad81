// edb-bench-pq: how long the PQ tree takes to reduce a planner-sized constraint set. Runs of a
// hidden order (sizes 2..64, all satisfiable) with some random sets mixed in (most rejected);
// target: 10,000 leaves and 2,000 constraints in under 50 ms, building the tree included.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "edbatch/errors.h"
#include "memplan/pq_tree.h"
#include "tools/flags.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Workload {
  std::vector<int> hidden;
  std::vector<std::vector<int>> constraints;
  std::vector<bool> is_run;  // a run of the hidden order, which the tree must accept
};

Workload make_workload(int leaves, int count, int random_percent, uint32_t seed) {
  std::mt19937 rng(seed);
  Workload w;
  w.hidden.resize(size_t(leaves));
  std::iota(w.hidden.begin(), w.hidden.end(), 0);
  std::shuffle(w.hidden.begin(), w.hidden.end(), rng);
  const int largest = std::min(64, leaves);
  for (int i = 0; i < count; ++i) {
    const int size = 2 + int(rng() % uint32_t(largest - 1));
    const bool run = int(rng() % 100) >= random_percent;
    std::vector<int> set;
    if (run) {
      const int start = int(rng() % uint32_t(leaves - size + 1));
      set.assign(w.hidden.begin() + start, w.hidden.begin() + start + size);
    } else {
      while (int(set.size()) < size) set.push_back(int(rng() % uint32_t(leaves)));
    }
    std::shuffle(set.begin(), set.end(), rng);
    w.constraints.push_back(std::move(set));
    w.is_run.push_back(run);
  }
  return w;
}

bool consecutive(const std::vector<int>& position, const std::vector<int>& set) {
  std::vector<int> at;
  for (int leaf : set) at.push_back(position[size_t(leaf)]);
  std::sort(at.begin(), at.end());
  at.erase(std::unique(at.begin(), at.end()), at.end());
  return at.back() - at.front() + 1 == int(at.size());
}

int run(int argc, char** argv) {
  edb::tools::Flags flags("edb-bench-pq", {"leaves", "constraints", "seed", "random", "rounds"}, {"help"});
  flags.parse(argc, argv, 1);
  if (flags.has("help")) {
    std::printf(
        "usage: edb-bench-pq [--leaves 10000] [--constraints 2000] [--seed 1] [--random 10] [--rounds 11]\n"
        "  Reduces a PQ tree over --leaves leaves by --constraints leaf sets: runs of a hidden order\n"
        "  (2..64 leaves) and, --random percent of them, random sets that the tree may reject.\n"
        "  Each round builds a new tree and reduces it by every set; the target is every round (the\n"
        "  first one included, whose memory is fresh) under 50 ms.\n");
    return 0;
  }
  const int leaves = int(flags.get_int("leaves", 10000, 2, 1 << 24));
  const int count = int(flags.get_int("constraints", 2000, 0, 1 << 24));
  const uint32_t seed = uint32_t(flags.get_int("seed", 1, 0, UINT32_MAX));
  const int random_percent = int(flags.get_int("random", 10, 0, 100));
  const int rounds = int(flags.get_int("rounds", 11, 1, 1000));
  const Workload w = make_workload(leaves, count, random_percent, seed);

  std::vector<double> times;
  std::vector<bool> accepted;
  size_t undo_entries = 0;
  std::vector<int> order;
  for (int r = 0; r < rounds; ++r) {
    accepted.assign(w.constraints.size(), false);
    const auto start = Clock::now();
    edb::memplan::PqTree tree(leaves);
    for (size_t i = 0; i < w.constraints.size(); ++i) accepted[i] = tree.reduce(w.constraints[i]);
    times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    undo_entries = tree.mark();
    order = tree.frontier();
  }

  // The answers must be right as well as quick: every accepted set consecutive in the frontier,
  // and every run accepted while the hidden order is still allowed (no accepted random set broke it).
  std::vector<int> position(order.size()), hidden_position(order.size());
  for (size_t i = 0; i < order.size(); ++i) position[size_t(order[i])] = int(i);
  for (size_t i = 0; i < w.hidden.size(); ++i) hidden_position[size_t(w.hidden[i])] = int(i);
  int runs = 0, random_sets = 0, random_accepted = 0, wrong = 0;
  bool hidden_allowed = true;
  for (size_t i = 0; i < w.constraints.size(); ++i) {
    if (w.is_run[i]) {
      ++runs;
      wrong += hidden_allowed && !accepted[i];
    } else {
      ++random_sets;
      random_accepted += accepted[i];
    }
    if (accepted[i] && !consecutive(hidden_position, w.constraints[i])) hidden_allowed = false;
    if (accepted[i] && !consecutive(position, w.constraints[i])) ++wrong;
  }
  const double first_ms = times.front() * 1e3;
  std::sort(times.begin(), times.end());
  const double median_ms = times[times.size() / 2] * 1e3, slowest_ms = times.back() * 1e3;
  std::printf("%d leaves, %d constraints (seed %u): %d runs of a hidden order, %d random sets (%d accepted)\n",
              leaves, count, seed, runs, random_sets, random_accepted);
  std::printf("build and reduce: first round %.2f ms; of %d rounds median %.2f ms, fastest %.2f ms, slowest %.2f ms\n",
              first_ms, rounds, median_ms, times.front() * 1e3, slowest_ms);
  std::printf("undo log after the last round: %zu entries\n", undo_entries);
  std::printf("answers: %s\n", wrong == 0 ? "every accepted set consecutive in the frontier, no run wrongly rejected"
                                          : "WRONG (see the PQ tree tests)");
  if (leaves == 10000 && count == 2000)
    std::printf("target: every round < 50 ms: %s\n", slowest_ms < 50.0 ? "met" : "NOT met");
  else
    std::printf("target: set for --leaves 10000 --constraints 2000, not this size\n");
  return wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return edb::tools::run_tool("edb-bench-pq", run, argc, argv); }
