// DataParallel in a build without MPI (CMake found none, or EDB_MPI=OFF): available() is false and
// making one is a UsageError that says how to get MPI, so a program fails clearly, never trains
// alone on each rank.
#include <cstdlib>

#include "edbatch/distributed.h"

namespace edb {

struct DataParallel::State {
  ReductionStats stats;
};

bool DataParallel::available() { return false; }

DataParallel::DataParallel(Model&, DataParallelOptions) {
  throw UsageError(
      "edb::DataParallel: this edbatch was built without MPI; install Open MPI (libopenmpi-dev, as "
      "scripts/setup.sh does) and configure again with -DEDB_MPI=ON");
}

DataParallel::~DataParallel() = default;
int DataParallel::rank() const { return 0; }
int DataParallel::size() const { return 1; }
std::pair<size_t, size_t> DataParallel::share(size_t begin, size_t end) const { return {begin, end}; }
void DataParallel::check_same(const std::string&, const std::string&) {}
void DataParallel::check_weights(const std::string&) {}
void DataParallel::start(Gradients&) {}
void DataParallel::progress() {}
void DataParallel::finish(Gradients&) {}
const ReductionStats& DataParallel::stats() const { return state_->stats; }
void DataParallel::abort(const std::string&, const std::string&, int status) { std::exit(status); }

}  // namespace edb
