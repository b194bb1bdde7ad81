// The thread pool: every task runs exactly once per job across many back-to-back jobs (the
// hand-off that a late worker must not spoil), and a task's exception reaches the caller.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "runtime/thread_pool.h"

namespace edb::runtime {
namespace {

TEST(ThreadPool, EveryTaskRunsOncePerJob) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int job = 0; job < 2000; ++job) {
      const int count = 1 + job % 7;
      std::vector<std::atomic<int>> runs(count);
      pool.parallel_for(count, [&](int i) { runs[i].fetch_add(1); });
      for (int i = 0; i < count; ++i) ASSERT_EQ(runs[i].load(), 1) << "job " << job << " task " << i;
    }
  }
}

TEST(ThreadPool, ExceptionsReachTheCaller) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(4, [](int i) { if (i == 2) throw std::runtime_error("task 2"); }),
               std::runtime_error);
  // The pool still works afterwards.
  std::atomic<int> sum{0};
  pool.parallel_for(4, [&](int i) { sum += i; });
  EXPECT_EQ(sum.load(), 6);
}

}  // namespace
}  // namespace edb::runtime
