// One persistent pool for coarse pieces of work (GEMM column blocks, large elementwise ranges,
// blocks of a compiled cell's calls). Idle workers spin a bounded while for the next job (about
// 200 us; about 20 us for a while after a spinning thread found itself descheduled), then sleep on
// a condition variable: spinning keeps batches a few hundred microseconds apart cheap (a sleeping
// thread takes tens of microseconds to wake on a virtual machine), sleeping keeps an idle pool from
// stealing a core. Tasks are claimed one at a time, so a worker the OS has not scheduled holds
// back only the task it started, never the ones it has not claimed.
//
// A pool may also be lent threads that have work of their own: a pipelined caller (runtime/driver.h)
// records the next trace while the pool's owner executes, and takes part through assist() only
// while it waits for that execution. size() counts them, so work is cut for them too; a job
// posted while no worker and no assistant is there runs on the caller alone.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace edb::runtime {

// Work a thread with nothing else to do may take: pieces of later batches whose inputs are ready
// (runtime/weight_gradients.h), offered by the executor for one evaluation. An assistant waiting
// for that evaluation, or a worker between jobs, runs them; a job parallel_for posts comes first.
class SideWork {
 public:
  virtual ~SideWork() = default;
  virtual bool available() const = 0;  // cheap and thread-safe
  virtual bool run_one() = 0;          // runs one piece, if one is available: whether it did
};

// One pause of a spinning wait (x86's pause instruction).
void cpu_pause();

class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // threads counts the caller: 1 means no workers
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // The threads a job may be cut for: the caller, the workers and the lent threads.
  int size() const { return static_cast<int>(workers_.size()) + 1 + lent_; }
  // Runs task(i) for i in [0, count), the caller taking part; returns when all are done.
  // Exceptions in tasks are rethrown here (the first one).
  void parallel_for(int count, const std::function<void(int)>& task);

  // Counts `threads` more threads that will call assist() (before the first parallel_for).
  void lend(int threads) { lent_ += threads; }
  // Runs tasks of the jobs posted, on the calling thread, until done() holds: done() is read
  // between tasks and, while asleep, whenever release() wakes the assistants. done() must be
  // cheap and thread-safe (an atomic read); whoever makes it true calls release() afterwards.
  void assist(const std::function<bool()>& done);
  void release();

  // Offers `work` to the threads that wait (nullptr: takes the offer back, then waits until no
  // thread is inside it). The offerer calls release() when more of it becomes available.
  void offer(SideWork* work);

 private:
  // Whether side work is available, and running one piece of it: false while none is offered.
  bool side_available();
  bool run_side();
  template <typename F>
  bool with_side(F&& f);
  void worker_loop();
  void run_tasks(uint64_t job);
  // Spins until ready() holds or a bounded while has passed (thread_pool.cpp); returns ready().
  template <typename Ready>
  bool spin(Ready ready);

  std::vector<std::thread> workers_;
  int lent_ = 0;
  std::atomic<int> assisting_{0};  // threads inside assist() now
  std::atomic<SideWork*> side_{nullptr};
  std::atomic<int> side_users_{0};  // threads reading side_ or inside its work now
  std::atomic<int64_t> short_spins_until_{0};  // steady_clock ns: spins are short until then
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
