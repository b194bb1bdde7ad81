// The thread pool: every task runs exactly once per job across many back-to-back jobs (the
// hand-off that a late worker must not spoil), with lent threads coming and going through
// assist(); a task's exception reaches the caller; a worker stuck in one task holds back only that
// task.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
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

// A lent thread assists in bursts (as a pipelined caller does between recordings) while the owner
// posts jobs; every task still runs once, and assist() returns once done() holds and release() is
// called.
TEST(ThreadPool, AssistantsComeAndGo) {
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    pool.lend(1);
    EXPECT_EQ(pool.size(), threads + 1);
    std::atomic<bool> stop{false};
    std::thread assistant([&] {
      while (!stop.load()) {
        std::atomic<int> left{50};  // this burst ends after 50 of the owner's jobs
        std::atomic<bool> done{false};
        std::thread ender([&] {
          while (left.load() > 0 && !stop.load()) std::this_thread::yield();
          done.store(true);
          pool.release();
        });
        pool.assist([&] {
          left.fetch_sub(1);
          return done.load();
        });
        ender.join();
      }
    });
    for (int job = 0; job < 3000; ++job) {
      const int count = 1 + job % 9;
      std::vector<std::atomic<int>> runs(count);
      pool.parallel_for(count, [&](int i) { runs[i].fetch_add(1); });
      for (int i = 0; i < count; ++i) ASSERT_EQ(runs[i].load(), 1) << "job " << job << " task " << i;
    }
    stop.store(true);
    pool.release();
    assistant.join();  // assist() returned
  }
}

// Tasks are claimed one at a time: while one thread is stuck in task 0 (as a worker the OS does
// not schedule), the other runs every other task of the job.
TEST(ThreadPool, AStuckTaskHoldsBackOnlyItself) {
  ThreadPool pool(2);
  for (int job = 0; job < 20; ++job) {
    std::atomic<int> others{0};
    std::atomic<int> seen_by_first{-1};
    pool.parallel_for(8, [&](int i) {
      if (i != 0) {
        others.fetch_add(1);
        return;
      }
      // Waits for the other seven tasks (10 s at most, so a broken pool fails instead of hanging).
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (others.load() < 7 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
      seen_by_first.store(others.load());
    });
    ASSERT_EQ(seen_by_first.load(), 7) << "job " << job;
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
