// What a launcher's environment says about this process, read without MPI (so a build without MPI
// can tell that mpirun started it and refuse to train alone on every rank), and the split of a
// batch by cost, which needs only the rank and the size.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "edbatch/distributed.h"

namespace edb {

namespace {

const char* environment(const char* name) {
  const char* value = std::getenv(name);
  return value && *value ? value : nullptr;
}

}  // namespace

int DataParallel::launched_size() {
  // Open MPI's, MPICH's (PMI) and Slurm's names for the number of ranks.
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"})
    if (const char* value = environment(name)) return std::max(1, std::atoi(value));
  return 1;
}

int DataParallel::launched_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if (const char* value = environment(name)) return std::max(0, std::atoi(value));
  return 0;
}

bool DataParallel::launched() {
  return environment("OMPI_COMM_WORLD_SIZE") || environment("PMI_SIZE") || environment("PMIX_RANK");
}

std::pair<size_t, size_t> DataParallel::share(std::span<const double> costs) const {
  const size_t n = costs.size(), ranks = size_t(size()), r = size_t(rank());
  std::vector<double> before(n + 1, 0.0);  // before[i]: the cost of instances [0, i)
  for (size_t i = 0; i < n; ++i) {
    if (!(costs[i] >= 0) || !std::isfinite(costs[i]))
      throw UsageError("edb::DataParallel::share: cost " + std::to_string(i) + " is " + std::to_string(costs[i]) +
                       "; costs must be finite and at least 0");
    before[i + 1] = before[i] + costs[i];
  }
  // Cut k at the instance boundary nearest to k / ranks of the total (the targets ascend, so do the
  // cuts), kept at least one apart when there are as many instances as ranks.
  std::vector<size_t> cuts(ranks + 1, 0);
  cuts[ranks] = n;
  for (size_t k = 1; k < ranks; ++k) {
    const double target = before[n] * double(k) / double(ranks);
    size_t at = size_t(std::lower_bound(before.begin(), before.end(), target) - before.begin());
    if (at > n) at = n;
    if (at > 0 && target - before[at - 1] <= before[at] - target) --at;
    at = std::max(at, cuts[k - 1]);
    if (n >= ranks) at = std::clamp(at, cuts[k - 1] + 1, n - (ranks - k));
    cuts[k] = at;
  }
  return {cuts[r], cuts[r + 1]};
}

}  // namespace edb
