// The prefetching Iterator of data/dataset.h.
//
// Rows are numbered linearly across epochs, t = epoch * rows_per_epoch + index. Workers claim the
// next unclaimed t while it lies within `prefetch` rows of the consumer, compute it with
// Dataset::get (pure, so the order workers finish in does not matter), and leave the row or the
// exception in slot t % prefetch of a ring. next() takes slot t for its own t only, so rows come
// out in order and an error surfaces at the row that raised it. A slot is reused only after its
// row was taken, which is what bounds the window. The destructor raises `stop`, wakes everyone
// and joins; a worker in the middle of a row finishes that row first (Dataset::get is not
// interruptible), so a consumer that stops early waits at most one row's time per worker.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "core/ir/error.h"
#include "data/dataset.h"

namespace loom::data {

struct Iterator::Impl {
  struct Slot {
    bool ready = false;
    Row row;
    std::exception_ptr error;
  };

  DatasetPtr dataset;
  IteratorOptions options;
  std::int64_t n = 0;      // rows per epoch
  std::int64_t end = 0;    // one past the last linear row

  mutable std::mutex mu;
  std::condition_variable work_cv;   // workers: a row may be claimed, or stop
  std::condition_variable ready_cv;  // consumer: a slot became ready
  std::int64_t next_claim = 0;
  std::int64_t next_consume = 0;
  std::vector<Slot> slots;
  bool stop = false;
  double wait = 0;
  std::vector<std::thread> workers;

  // Row t, or the exception computing it raised, into `slot` (not under the lock).
  void compute(std::int64_t t, Slot& slot) const {
    try {
      slot.row = dataset->get(t / n, t % n);
    } catch (...) {
      slot.error = std::current_exception();
    }
  }

  void worker_loop() {
    const auto window = static_cast<std::int64_t>(slots.size());
    for (;;) {
      std::int64_t t;
      {
        std::unique_lock<std::mutex> lock(mu);
        work_cv.wait(lock, [&] {
          return stop || (next_claim < end && next_claim < next_consume + window);
        });
        if (stop) return;
        t = next_claim++;
      }
      Slot done;
      compute(t, done);
      {
        std::lock_guard<std::mutex> lock(mu);
        Slot& slot = slots[static_cast<std::size_t>(t % window)];
        slot.row = std::move(done.row);
        slot.error = done.error;
        slot.ready = true;
      }
      ready_cv.notify_all();
    }
  }
};

Iterator::Iterator(DatasetPtr dataset, IteratorOptions options) : impl_(std::make_unique<Impl>()) {
  if (!dataset) throw ValueError("Iterator: expected a dataset, got null");
  if (options.num_epochs < 0 || options.num_workers < 0 || options.prefetch < 1) {
    throw ValueError("Iterator: expected num_epochs >= 0, num_workers >= 0 and prefetch >= 1, "
                     "got " + std::to_string(options.num_epochs) + ", " +
                     std::to_string(options.num_workers) + " and " +
                     std::to_string(options.prefetch));
  }
  Impl& m = *impl_;
  m.dataset = std::move(dataset);
  m.options = options;
  m.n = m.dataset->size();
  const Position& s = options.start;
  if (s.epoch < 0 || s.index < 0 || s.index > m.n) {
    throw ValueError("Iterator: start position (epoch " + std::to_string(s.epoch) + ", index " +
                     std::to_string(s.index) + ") is outside " + m.dataset->describe() +
                     " of " + std::to_string(m.n) + " rows per epoch");
  }
  m.end = options.num_epochs * m.n;
  m.next_consume = std::min(s.epoch * m.n + s.index, m.end);
  m.next_claim = m.next_consume;
  m.slots.resize(static_cast<std::size_t>(options.prefetch));
  m.workers.reserve(static_cast<std::size_t>(options.num_workers));
  for (int w = 0; w < options.num_workers; ++w) {
    m.workers.emplace_back([&m] { m.worker_loop(); });
  }
}

Iterator::~Iterator() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->work_cv.notify_all();
  for (std::thread& t : impl_->workers) t.join();
}

std::optional<Row> Iterator::next() {
  Impl& m = *impl_;
  using Clock = std::chrono::steady_clock;
  Impl::Slot slot;
  if (m.workers.empty()) {
    // No workers: the row is computed here, and that time is the data wait.
    std::int64_t t;
    {
      std::lock_guard<std::mutex> lock(m.mu);
      if (m.next_consume >= m.end) return std::nullopt;
      t = m.next_consume++;
    }
    const Clock::time_point t0 = Clock::now();
    m.compute(t, slot);
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    std::lock_guard<std::mutex> lock(m.mu);
    m.wait += dt;
  } else {
    {
      std::unique_lock<std::mutex> lock(m.mu);
      if (m.next_consume >= m.end) return std::nullopt;
      Impl::Slot& s = m.slots[static_cast<std::size_t>(
          m.next_consume % static_cast<std::int64_t>(m.slots.size()))];
      if (!s.ready) {
        const Clock::time_point t0 = Clock::now();
        m.ready_cv.wait(lock, [&] { return s.ready; });
        m.wait += std::chrono::duration<double>(Clock::now() - t0).count();
      }
      slot = std::move(s);
      s = Impl::Slot{};
      ++m.next_consume;
    }
    m.work_cv.notify_all();
  }
  // The failed row counts as consumed: a caller that catches the error may go on to the next.
  if (slot.error) std::rethrow_exception(slot.error);
  return std::move(slot.row);
}

Position Iterator::position() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->n == 0) return impl_->options.start;
  return {impl_->next_consume / impl_->n, impl_->next_consume % impl_->n};
}

double Iterator::wait_seconds() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->wait;
}

std::int64_t Iterator::rows_per_epoch() const { return impl_->n; }

}  // namespace loom::data
