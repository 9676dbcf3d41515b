// The project's thread pool. Kernels split work with parallel_for; the number of threads comes
// from LOOM_NUM_THREADS (default: the number of cores). OpenBLAS is given the same count and is
// only ever called from the thread that runs the kernel, so the two never oversubscribe.
//
// Determinism: parallel_for hands out chunks whose boundaries depend only on (n, grain), never
// on the thread count (nor on which threads happen to be awake); a reduction that keeps one partial per chunk and combines the partials
// in chunk order gives bitwise the same result with 1 or N threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace loom::backend {

class ThreadPool {
 public:
  // spin_us: how long an idle worker (and a caller waiting for workers) spins before sleeping;
  // -1 reads LOOM_POOL_SPIN_US (default 20 µs). Spinning only changes timing, never results.
  explicit ThreadPool(int num_threads, std::int64_t spin_us = -1);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // The pool every CPU kernel uses: LOOM_NUM_THREADS threads, or the core count.
  static ThreadPool& global();

  int num_threads() const { return num_threads_; }

  // Runs fn(begin, end) over [0, n) in chunks of `grain` elements (the last may be shorter).
  // The calling thread takes part. Returns when every chunk is done. Nested calls from inside
  // fn run serially on the calling thread. Sleeping workers are woken only when there are at
  // least two chunks, and the caller waits only for workers that joined before it ran out of
  // chunks, so tiny jobs (one chunk) never pay a wake-up and late workers never delay a job.
  void parallel_for(std::int64_t n, std::int64_t grain,
                    const std::function<void(std::int64_t, std::int64_t)>& fn);

  // Number of chunks parallel_for(n, grain, ...) uses: ceil(n / grain), at least 1 when n > 0.
  static std::int64_t num_chunks(std::int64_t n, std::int64_t grain);

  // Tracing (the profiler, debug/profiler.h): while a sink is set, each thread's share of every
  // parallel_for that runs on several threads — from its first chunk's start to its last
  // chunk's end, steady_clock nanoseconds — is reported by that thread: 0 the caller, 1..n-1
  // the workers. Calls come from several threads at once. set_trace waits for the running
  // parallel_for, so after it returns the previous sink is no longer called. Without a sink a
  // parallel_for pays one relaxed atomic load.
  struct TraceSink {
    virtual ~TraceSink() = default;
    virtual void span(int thread, std::int64_t begin_ns, std::int64_t end_ns) = 0;
  };
  void set_trace(TraceSink* sink);

 private:
  struct State;
  std::unique_ptr<State> state_;
  int num_threads_;
};

}  // namespace loom::backend
