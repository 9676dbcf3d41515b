// The idle thread and the hand-over of its jobs: every job is claimed once, under mu_, by the
// idle thread (oldest first) or by a caller (run_oldest, finish_all, the destructor), and run
// outside the lock.
#include "summary/idle_worker.h"

#include <pthread.h>
#include <sched.h>

namespace loom::summary {

void IdleWorker::Job::wait() {
  std::unique_lock<std::mutex> lock(owner_->mu_);
  owner_->done_cv_.wait(lock, [&] { return state_ == State::kDone; });
  if (error_) std::rethrow_exception(error_);
}

bool IdleWorker::Job::done() const {
  std::lock_guard<std::mutex> lock(owner_->mu_);
  return state_ == State::kDone;
}

IdleWorker::IdleWorker() {
  thread_ = std::thread([this] { loop(); });
#if defined(SCHED_IDLE)
  sched_param param{};
  param.sched_priority = 0;
  idle_priority_ = pthread_setschedparam(thread_.native_handle(), SCHED_IDLE, &param) == 0;
#endif
}

IdleWorker::~IdleWorker() {
  try {
    finish_all();
  } catch (...) {
    // A job's error was for its waiter; the destructor only makes sure nothing is left running.
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

std::shared_ptr<IdleWorker::Job> IdleWorker::post(std::function<void(bool)> fn) {
  auto job = std::make_shared<Job>();
  job->fn_ = std::move(fn);
  job->owner_ = this;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(job);
    ++unfinished_;
    wake = sleeping_;
  }
  if (wake) work_cv_.notify_one();
  return job;
}

std::size_t IdleWorker::unfinished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return unfinished_;
}

void IdleWorker::run(const std::shared_ptr<Job>& job, bool on_idle_thread,
                     std::unique_lock<std::mutex>& lock) {
  lock.unlock();
  std::exception_ptr error;
  try {
    job->fn_(on_idle_thread);
  } catch (...) {
    error = std::current_exception();
  }
  lock.lock();
  job->fn_ = nullptr;  // frees what it held
  job->error_ = error;
  job->state_ = Job::State::kDone;
  --unfinished_;
  done_cv_.notify_all();
}

void IdleWorker::run_oldest(std::size_t keep) {
  std::unique_lock<std::mutex> lock(mu_);
  while (unfinished_ > keep && !queue_.empty()) {
    std::shared_ptr<Job> job = std::move(queue_.front());
    queue_.pop_front();
    job->state_ = Job::State::kRunning;
    run(job, false, lock);
  }
}

void IdleWorker::finish_all() {
  run_oldest(0);
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return unfinished_ == 0; });
}

void IdleWorker::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  int quiet_polls = 0;
  for (;;) {
    if (queue_.empty() && !stop_) {
      // While jobs keep coming the thread looks for them every kPoll, so that posting wakes
      // nobody (a wake-up is a system call on the poster's thread); after a quiet spell it sleeps
      // until post() wakes it.
      if (quiet_polls < kQuietPolls) {
        work_cv_.wait_for(lock, kPoll);
        ++quiet_polls;
      } else {
        sleeping_ = true;
        work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        sleeping_ = false;
      }
      continue;
    }
    if (queue_.empty()) return;  // stopping, nothing left
    quiet_polls = 0;
    std::shared_ptr<Job> job = std::move(queue_.front());
    queue_.pop_front();
    job->state_ = Job::State::kRunning;
    run(job, true, lock);
  }
}

}  // namespace loom::summary
