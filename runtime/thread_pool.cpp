// The pool's job hand-off: a generation counter announces a job, tasks are claimed with an atomic
// index, and the caller waits for the finished count (spinning briefly, then asleep on it).
#include "runtime/thread_pool.h"

#include <immintrin.h>

namespace edb::runtime {

namespace {
// Pause instructions before sleeping: about 20 us on znver5 (a pause is about 19 ns there), more
// on CPUs with longer pauses. No yield in between: on a loaded machine a yield gives the core to
// another process for a whole time slice.
constexpr int kSpinIterations = 1000;

void spin_once(int) { _mm_pause(); }
}

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (std::thread& w : workers_) w.join();
}

void ThreadPool::run_tasks(uint64_t job) {
  for (;;) {
    uint64_t ticket = ticket_.load(std::memory_order_acquire);
    if ((ticket >> 32) != (job & 0xffffffffu)) return;
    const int i = static_cast<int>(ticket & 0xffffffffu);
    // The job's count: a count of a later job cannot be read here once the claim below succeeds
    // (that job closes the ticket before it stores its count).
    const int count = count_.load(std::memory_order_acquire);
    if (i >= count) return;
    if (!ticket_.compare_exchange_weak(ticket, ticket + 1, std::memory_order_acq_rel)) continue;
    try {
      (*task_.load(std::memory_order_acquire))(i);
    } catch (...) {
      std::lock_guard lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
    // The last task wakes a caller asleep on the count.
    if (finished_.fetch_add(1, std::memory_order_acq_rel) + 1 == count) finished_.notify_all();
  }
}

void ThreadPool::assist(const std::function<bool()>& done) {
  assisting_.fetch_add(1, std::memory_order_acq_rel);
  uint64_t seen = generation_.load(std::memory_order_acquire);
  run_tasks(seen);  // a job under way
  while (!done()) {
    int spins = 0;
    while (generation_.load(std::memory_order_acquire) == seen && spins < kSpinIterations) {
      spin_once(spins);
      if (++spins % 64 == 0 && done()) break;
    }
    if (generation_.load(std::memory_order_acquire) == seen) {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return generation_.load() != seen || done(); });
    }
    seen = generation_.load(std::memory_order_acquire);
    run_tasks(seen);
  }
  assisting_.fetch_sub(1, std::memory_order_acq_rel);
}

void ThreadPool::release() {
  { std::lock_guard lock(mutex_); }  // an assistant between its check of done() and its sleep
  wake_.notify_all();
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    int spins = 0;
    while (generation_.load(std::memory_order_acquire) == seen && spins < kSpinIterations) spin_once(spins++);
    if (generation_.load(std::memory_order_acquire) == seen) {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return generation_.load() != seen; });
    }
    seen = generation_.load(std::memory_order_acquire);
    {
      std::lock_guard lock(mutex_);
      if (stop_) return;
    }
    run_tasks(seen);
  }
}

void ThreadPool::parallel_for(int count, const std::function<void(int)>& task) {
  if (count <= 0) return;
  if (count == 1 || (workers_.empty() && assisting_.load(std::memory_order_acquire) == 0)) {
    for (int i = 0; i < count; ++i) task(i);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    // Close the previous job's ticket first: a worker still in it that reads the new count
    // must not be able to claim an index (its compare-and-swap now fails).
    uint64_t job = generation_.load() + 1;
    if ((job & 0xffffffffu) == 0xffffffffu) ++job;  // that number marks "no job" in the ticket
    ticket_.store(uint64_t{0xffffffffu} << 32, std::memory_order_release);
    task_.store(&task, std::memory_order_release);
    count_.store(count, std::memory_order_release);
    finished_.store(0);
    error_ = nullptr;
    ticket_.store((job & 0xffffffffu) << 32, std::memory_order_release);
    generation_.store(job, std::memory_order_release);
  }
  wake_.notify_all();
  run_tasks(generation_.load());
  // Spin while the others finish their last tasks, then sleep: a thread the OS descheduled in the
  // middle of a task may take a time slice to come back.
  int spins = 0;
  for (int finished; (finished = finished_.load(std::memory_order_acquire)) < count;) {
    if (spins < kSpinIterations)
      spin_once(spins++);
    else
      finished_.wait(finished, std::memory_order_acquire);
  }
  if (error_) std::rethrow_exception(error_);
}

}  // namespace edb::runtime
