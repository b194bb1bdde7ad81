// One persistent pool for coarse pieces of work (GEMM column blocks, large elementwise ranges).
// Idle workers spin briefly for the next job, then sleep on a condition variable: spinning keeps
// back-to-back batches cheap, sleeping keeps an idle pool from stealing a core.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace edb::runtime {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // threads counts the caller: 1 means no workers
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // Runs task(i) for i in [0, count), the caller taking part; returns when all are done.
  // Exceptions in tasks are rethrown here (the first one).
  void parallel_for(int count, const std::function<void(int)>& task);

 private:
  void worker_loop();
  void run_tasks(uint64_t job);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  // (job << 32) | next task index. Claims are compare-and-swap against the job a worker woke for,
  // so a late worker can never take (or spoil the counter of) a task of a later job.
  std::atomic<uint64_t> ticket_{0};
  std::atomic<int> finished_{0};
  // Atomic because a worker finishing the previous job may claim an index of the next one.
  std::atomic<int> count_{0};
  std::atomic<const std::function<void(int)>*> task_{nullptr};
  std::exception_ptr error_;
  std::mutex error_mutex_;
  bool stop_ = false;
};

}  // namespace edb::runtime
