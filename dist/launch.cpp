// What a launcher's environment says about this process, read without MPI (so a build without MPI
// can tell that mpirun started it and refuse to train alone on every rank).
#include <algorithm>
#include <cstdlib>

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

bool DataParallel::launched() {
  return environment("OMPI_COMM_WORLD_SIZE") || environment("PMI_SIZE") || environment("PMIX_RANK");
}

}  // namespace edb
