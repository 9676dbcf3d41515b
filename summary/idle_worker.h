/// \file
/// IdleWorker: work done on a core the caller's other work leaves idle. One thread at the lowest
/// scheduling priority (Linux's SCHED_IDLE: it runs only where a core would otherwise idle, and is
/// switched out as soon as any other thread becomes runnable there) runs posted jobs in order,
/// picking them up within a millisecond (posting wakes no thread while jobs keep coming: a
/// wake-up is a system call on the poster's thread, ≈ 6 µs on the development VM).
/// A job can also be run by the thread that needs it done (run_oldest, finish_all), so progress
/// never depends on the idle thread being scheduled: when the machine has no idle time (another
/// process keeps both cores busy), the caller does the work itself, at its own priority.
///
///     IdleWorker idle;
///     auto job = idle.post([&](bool) {...});  // runs on the idle thread, or below
///     idle.run_oldest(4);                     // here: the oldest jobs not started, till <= 4 left
///     job->wait();                            // until it is done (by whichever thread)
///     idle.finish_all();                      // here: jobs not started, then wait for the rest
///
/// A job's function gets `on_idle_thread`: true on the idle thread, false on a caller (which may
/// then use the kernels' thread pool; the idle thread must not: a parallel_for from it would hold
/// the pool while the training's kernels wait). Where the priority cannot be lowered (not Linux,
/// or refused), the thread runs at normal priority: the jobs then compete with the caller's work.
/// The destructor runs every job not started on the calling thread and joins the idle thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace loom::summary {

/// Runs posted jobs on its idle-priority thread, or on the callers that need them done (see
/// above).
class IdleWorker {
 public:
  /// A posted job, shared by the worker and the poster.
  class Job {
   public:
    /// Blocks until the job ran (on any thread); rethrows what it threw. Only while its
    /// IdleWorker lives (the job waits on the worker's lock), as done().
    void wait();
    /// Whether the job has run (on any thread).
    bool done() const;

   private:
    friend class IdleWorker;
    std::function<void(bool on_idle_thread)> fn_;
    enum class State { kQueued, kRunning, kDone } state_ = State::kQueued;  ///< under the worker's mu_
    std::exception_ptr error_;
    IdleWorker* owner_ = nullptr;
  };

  IdleWorker();
  ~IdleWorker();
  IdleWorker(const IdleWorker&) = delete;
  IdleWorker& operator=(const IdleWorker&) = delete;

  /// Queues `fn` as the newest job and returns it; `fn` gets whether it runs on the idle thread.
  std::shared_ptr<Job> post(std::function<void(bool on_idle_thread)> fn);
  /// Jobs posted and not yet done.
  std::size_t unfinished() const;
  /// Runs, on the caller, the oldest jobs not started while more than `keep` are unfinished.
  void run_oldest(std::size_t keep);
  /// Runs every job not started on the caller, then waits for the one the idle thread runs.
  void finish_all();
  /// Whether the thread got the idle priority (false: it runs at normal priority).
  bool idle_priority() const { return idle_priority_; }

 private:
  void loop();
  /// Runs `job` (claimed: state kRunning) and marks it done; `lock` is held on entry and exit.
  void run(const std::shared_ptr<Job>& job, bool on_idle_thread,
           std::unique_lock<std::mutex>& lock);

  mutable std::mutex mu_;
  std::condition_variable work_cv_;  ///< the idle thread: a job posted, or stopping
  std::condition_variable done_cv_;  ///< waiters: a job done
  std::deque<std::shared_ptr<Job>> queue_;  ///< not started, oldest first
  std::size_t unfinished_ = 0;
  bool stop_ = false;
  bool sleeping_ = false;  ///< the idle thread waits for post() to wake it (else it polls)
  static constexpr std::chrono::milliseconds kPoll{1};
  static constexpr int kQuietPolls = 100;  ///< polls without a job before it sleeps
  bool idle_priority_ = false;
  std::thread thread_;
};

}  // namespace loom::summary
