// The pool's job hand-off: a generation counter announces a job, tasks are claimed with an atomic
// index, and the caller waits for the finished count (spinning briefly, then asleep on it).
#include "runtime/thread_pool.h"

#include <immintrin.h>

#include <chrono>

namespace edb::runtime {

namespace {
// Pause instructions a waiting thread spins before it sleeps: about 200 us on znver5 (a pause is
// about 19 ns there), more on CPUs with longer pauses. A thread asleep takes tens of microseconds to
// wake on a virtual machine (its idle vCPU halts), most of a small batch's piece, and the threads
// that wait here (a caller assisting until its trace is done, a poster waiting for its job's last
// pieces, a worker between batches) have nothing else to run meanwhile. No yield in between: on a
// loaded machine a yield gives the core to another process for a whole time slice.
constexpr int kSpinIterations = 10000;
// Unless the machine is short of cores: a spinning thread that finds itself descheduled (more than
// kPreemptedNs between two looks at the clock, 64 pauses apart) sleeps at once, and every spin of
// the pool for the next kShortSpinsForNs is kShortSpinIterations (about 20 us), so that threads
// waiting for work do not take turns on a core with the ones doing it (a busy loop holding a core).
constexpr int kShortSpinIterations = 1000;
constexpr int64_t kPreemptedNs = 100'000;
constexpr int64_t kShortSpinsForNs = 50'000'000;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void cpu_pause() { _mm_pause(); }

template <typename Ready>
bool ThreadPool::spin(Ready ready) {
  int64_t last = now_ns();
  const int limit = last < short_spins_until_.load(std::memory_order_relaxed) ? kShortSpinIterations : kSpinIterations;
  for (int spins = 1; spins <= limit; ++spins) {
    if (ready()) return true;
    _mm_pause();
    if (spins % 64 == 0) {
      const int64_t now = now_ns();
      if (now - last > kPreemptedNs) {
        short_spins_until_.store(now + kShortSpinsForNs, std::memory_order_relaxed);
        return ready();
      }
      last = now;
    }
  }
  return ready();
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

// The users count goes up before side_ is read (both sequentially consistent), so offer(nullptr),
// which clears side_ and then waits for the count to reach zero, never returns while a thread can
// still reach the work it took back.
template <typename F>
bool ThreadPool::with_side(F&& f) {
  side_users_.fetch_add(1);
  SideWork* work = side_.load();
  const bool result = work && f(*work);
  side_users_.fetch_sub(1);
  return result;
}

bool ThreadPool::side_available() { return with_side([](SideWork& work) { return work.available(); }); }
bool ThreadPool::run_side() { return with_side([](SideWork& work) { return work.run_one(); }); }

void ThreadPool::offer(SideWork* work) {
  side_.store(work);
  if (work) return release();
  while (side_users_.load() != 0) std::this_thread::yield();
}

void ThreadPool::assist(const std::function<bool()>& done) {
  assisting_.fetch_add(1, std::memory_order_acq_rel);
  uint64_t seen = generation_.load(std::memory_order_acquire);
  run_tasks(seen);  // a job under way
  while (!done()) {
    if (generation_.load(std::memory_order_acquire) == seen && run_side()) continue;  // a job comes first
    int looks = 0;
    spin([&] {
      return generation_.load(std::memory_order_acquire) != seen || (++looks % 64 == 0 && (done() || side_available()));
    });
    if (generation_.load(std::memory_order_acquire) == seen && !side_available()) {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return generation_.load() != seen || done() || side_available(); });
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
    if (generation_.load(std::memory_order_acquire) == seen && run_side()) continue;
    int looks = 0;
    spin([&] { return generation_.load(std::memory_order_acquire) != seen || (++looks % 64 == 0 && side_available()); });
    if (generation_.load(std::memory_order_acquire) == seen && !side_available()) {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return generation_.load() != seen || side_available(); });
      if (generation_.load() == seen) continue;  // woken for side work
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
  spin([&] { return finished_.load(std::memory_order_acquire) >= count; });
  for (int finished; (finished = finished_.load(std::memory_order_acquire)) < count;)
    finished_.wait(finished, std::memory_order_acquire);
  if (error_) std::rethrow_exception(error_);
}

}  // namespace edb::runtime
