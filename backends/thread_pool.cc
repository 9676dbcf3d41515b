// A fixed pool of worker threads running one parallel_for at a time. Chunks are claimed from an
// atomic counter, so which thread runs a chunk varies, but chunk boundaries never do. Idle
// workers spin briefly (LOOM_POOL_SPIN_US) before sleeping, so back-to-back kernels do not pay a
// futex wake-up each.
#include "backends/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/ir/error.h"

namespace loom::backend {

namespace {
thread_local bool t_inside_pool = false;

int threads_from_env() {
  const char* s = std::getenv("LOOM_NUM_THREADS");
  if (s && *s) {
    char* end = nullptr;
    long n = std::strtol(s, &end, 10);
    if (*end != '\0' || n < 1 || n > 1024) {
      throw ValueError(std::string("LOOM_NUM_THREADS: expected an integer in [1, 1024], got '") +
                       s + "'");
    }
    return static_cast<int>(n);
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

// How long an idle worker, and a caller waiting for workers, spin before sleeping on a condition
// variable: kernels come back to back within a few µs in a compiled plan, and a futex wake-up
// costs 5-50 µs (more on a loaded virtual machine), more than most LeNet-sized kernels take.
// 20 µs measured best on LeNet (bench/README.md: 100 µs kept a core from OpenBLAS's threads
// too long). LOOM_POOL_SPIN_US overrides it (0: sleep at once, as the pool did before).
std::int64_t spin_ns_from_env() {
  const char* s = std::getenv("LOOM_POOL_SPIN_US");
  if (s && *s) {
    char* end = nullptr;
    long us = std::strtol(s, &end, 10);
    if (*end != '\0' || us < 0 || us > 1'000'000) {
      throw ValueError(
          std::string("LOOM_POOL_SPIN_US: expected an integer in [0, 1000000], got '") + s + "'");
    }
    return static_cast<std::int64_t>(us) * 1000;
  }
  return 20'000;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spins until pred() holds or about `ns` have passed; true when pred() held.
template <typename Pred>
bool spin_until(std::int64_t ns, Pred pred) {
  if (ns <= 0) return pred();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 1;; ++i) {
    if (pred()) return true;
    cpu_relax();
    if ((i & 31) == 0) {
      if (std::chrono::steady_clock::now() - t0 > std::chrono::nanoseconds(ns)) return pred();
      // Let another runnable thread (OpenBLAS's workers, another process) have the core every
      // few µs: on 2 cores a spinner must not starve the thread it waits for, and under
      // SCHED_FIFO (chrt) nothing else would preempt it.
      std::this_thread::yield();
    }
  }
}
}  // namespace

// A job is published under `mu` (fields, then `generation` incremented, `open` set). A worker
// joins it (joined + 1) only while it is open; the caller runs chunks itself, then closes the job
// and waits only for the workers that joined. So a worker that wakes late, after the caller has
// done every chunk, never delays the caller, and never touches a job that has returned.
struct ThreadPool::State {
  std::mutex mu;
  std::condition_variable wake;
  std::condition_variable done;
  std::vector<std::thread> workers;
  std::mutex run_mu;  // one parallel_for at a time
  std::int64_t spin_ns = 0;

  // The job being run (written under mu before generation changes).
  const std::function<void(std::int64_t, std::int64_t)>* fn = nullptr;
  std::int64_t n = 0, grain = 1, chunks = 0;
  std::atomic<std::int64_t> next{0};
  std::atomic<std::uint64_t> generation{0};
  std::atomic<int> joined{0};   // workers inside the current job (changed under mu)
  std::atomic<int> sleepers{0};  // workers waiting on `wake`
  bool open = false;             // workers may still join the current job (under mu)
  bool caller_waiting = false;   // the caller sleeps on `done` (under mu)
  bool stop = false;
  std::exception_ptr error;
  std::atomic<TraceSink*> trace{nullptr};

  static std::int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // run_chunks, reporting this thread's share to the trace sink when there is one.
  void run_chunks_traced(int thread) {
    TraceSink* sink = trace.load(std::memory_order_relaxed);
    if (sink == nullptr) {
      run_chunks();
      return;
    }
    const std::int64_t begin = now_ns();
    if (run_chunks() > 0) sink->span(thread, begin, now_ns());
  }

  // Runs chunks until none is left; returns how many this thread ran.
  std::int64_t run_chunks() {
    std::int64_t ran = 0;
    for (;; ++ran) {
      std::int64_t c = next.fetch_add(1, std::memory_order_relaxed);
      if (c >= chunks) return ran;
      std::int64_t b = c * grain;
      std::int64_t e = std::min(n, b + grain);
      try {
        (*fn)(b, e);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
      }
    }
  }

  void worker_loop(int index) {
    t_inside_pool = true;
    std::uint64_t seen = 0;
    for (;;) {
      spin_until(spin_ns, [&] { return generation.load(std::memory_order_acquire) != seen; });
      std::unique_lock<std::mutex> lock(mu);
      if (generation.load(std::memory_order_relaxed) == seen && !stop) {
        sleepers.fetch_add(1, std::memory_order_relaxed);
        wake.wait(lock, [&] { return stop || generation.load(std::memory_order_relaxed) != seen; });
        sleepers.fetch_sub(1, std::memory_order_relaxed);
      }
      if (stop) return;
      seen = generation.load(std::memory_order_relaxed);
      if (!open) continue;  // woke after the caller finished that job
      joined.fetch_add(1, std::memory_order_relaxed);
      lock.unlock();
      run_chunks_traced(index);  // before leaving the job: the caller waits for it
      lock.lock();
      if (joined.fetch_sub(1, std::memory_order_acq_rel) == 1 && caller_waiting) {
        done.notify_one();
      }
    }
  }
};

ThreadPool::ThreadPool(int num_threads, std::int64_t spin_us)
    : state_(std::make_unique<State>()), num_threads_(std::max(1, num_threads)) {
  state_->spin_ns = spin_us < 0 ? spin_ns_from_env() : spin_us * 1000;
  for (int i = 1; i < num_threads_; ++i) {
    state_->workers.emplace_back([s = state_.get(), i] { s->worker_loop(i); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop = true;
    state_->generation.fetch_add(1, std::memory_order_release);
  }
  state_->wake.notify_all();
  for (auto& t : state_->workers) t.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool* pool = new ThreadPool(threads_from_env());
  return *pool;
}

std::int64_t ThreadPool::num_chunks(std::int64_t n, std::int64_t grain) {
  if (n <= 0) return 0;
  grain = std::max<std::int64_t>(1, grain);
  return (n + grain - 1) / grain;
}

void ThreadPool::parallel_for(std::int64_t n, std::int64_t grain,
                              const std::function<void(std::int64_t, std::int64_t)>& fn) {
  grain = std::max<std::int64_t>(1, grain);
  const std::int64_t chunks = num_chunks(n, grain);
  if (chunks == 0) return;
  if (chunks == 1 || num_threads_ == 1 || t_inside_pool) {
    for (std::int64_t c = 0; c < chunks; ++c) fn(c * grain, std::min(n, (c + 1) * grain));
    return;
  }
  State& s = *state_;
  std::lock_guard<std::mutex> run_lock(s.run_mu);
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.fn = &fn;
    s.n = n;
    s.grain = grain;
    s.chunks = chunks;
    s.next.store(0, std::memory_order_relaxed);
    s.error = nullptr;
    s.open = true;
    s.generation.fetch_add(1, std::memory_order_release);
  }
  // Sleeping workers are woken only for work they can share (at least one chunk each).
  const int sleeping = s.sleepers.load(std::memory_order_relaxed);
  if (sleeping > 0 && chunks > 1) {
    if (sleeping == 1) s.wake.notify_one(); else s.wake.notify_all();
  }
  t_inside_pool = true;
  s.run_chunks_traced(0);
  t_inside_pool = false;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.open = false;  // from here no worker joins; wait for those inside
  }
  if (!spin_until(s.spin_ns, [&] { return s.joined.load(std::memory_order_acquire) == 0; })) {
    std::unique_lock<std::mutex> lock(s.mu);
    s.caller_waiting = true;
    s.done.wait(lock, [&] { return s.joined.load(std::memory_order_relaxed) == 0; });
    s.caller_waiting = false;
  }
  std::lock_guard<std::mutex> lock(s.mu);  // orders the workers' writes (and error) before us
  if (s.error) std::rethrow_exception(s.error);
}

void ThreadPool::set_trace(TraceSink* sink) {
  std::lock_guard<std::mutex> run_lock(state_->run_mu);  // no parallel_for in flight
  state_->trace.store(sink, std::memory_order_relaxed);
}

}  // namespace loom::backend
