#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "backends/thread_pool.h"
#include "core/ir/error.h"

namespace loom::backend {
namespace {

TEST(ThreadPool, CoversEveryIndexOnce) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> hits(10007);
  pool.parallel_for(10007, 100, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) hits[static_cast<std::size_t>(i)]++;
  });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
}

TEST(ThreadPool, ChunkSumsAreIndependentOfThreadCount) {
  std::vector<float> x(100000);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 1.0f / static_cast<float>(i + 1);
  auto chunked_sum = [&](ThreadPool& pool) {
    const std::int64_t grain = 1000;
    std::vector<float> partial(static_cast<std::size_t>(ThreadPool::num_chunks(100000, grain)));
    pool.parallel_for(100000, grain, [&](std::int64_t b, std::int64_t e) {
      float s = 0;
      for (std::int64_t i = b; i < e; ++i) s += x[static_cast<std::size_t>(i)];
      partial[static_cast<std::size_t>(b / grain)] = s;
    });
    float total = 0;
    for (float p : partial) total += p;
    return total;
  };
  ThreadPool one(1), two(2), five(5);
  const float a = chunked_sum(one);
  EXPECT_EQ(a, chunked_sum(two));
  EXPECT_EQ(a, chunked_sum(five));
}

TEST(ThreadPool, NestedCallsRunAndExceptionsPropagate) {
  ThreadPool pool(2);
  std::atomic<int> count{0};
  pool.parallel_for(4, 1, [&](std::int64_t, std::int64_t) {
    pool.parallel_for(4, 1, [&](std::int64_t, std::int64_t) { count++; });
  });
  EXPECT_EQ(count.load(), 16);
  EXPECT_THROW(pool.parallel_for(8, 1,
                                 [&](std::int64_t b, std::int64_t) {
                                   if (b == 5) throw ValueError("boom");
                                 }),
               ValueError);
}

// Many back-to-back jobs, with and without spinning, and with gaps longer than the spin (workers
// asleep, woken late: the caller may finish every chunk before they join). Every index is
// covered exactly once per job, and the per-chunk partial sums are the same as with one thread.
TEST(ThreadPool, BackToBackAndLateWorkersGiveTheSameChunks) {
  for (std::int64_t spin_us : {0, 5, 100000}) {
    ThreadPool pool(3, spin_us);
    ThreadPool one(1, 0);
    for (int job = 0; job < 300; ++job) {
      const std::int64_t n = 1 + (job * 7919) % 5000;
      const std::int64_t grain = 1 + job % 300;
      std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
      std::vector<std::int64_t> ends(static_cast<std::size_t>(ThreadPool::num_chunks(n, grain)));
      pool.parallel_for(n, grain, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) hits[static_cast<std::size_t>(i)]++;
        ends[static_cast<std::size_t>(b / grain)] = e;
      });
      for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "spin " << spin_us << " job " << job;
      for (std::size_t c = 0; c < ends.size(); ++c) {
        ASSERT_EQ(ends[c], std::min<std::int64_t>(n, static_cast<std::int64_t>(c + 1) * grain));
      }
      if (job % 50 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    EXPECT_THROW(pool.parallel_for(64, 1,
                                   [&](std::int64_t b, std::int64_t) {
                                     if (b == 63) throw ValueError("boom");
                                   }),
                 ValueError);
    std::atomic<int> after{0};
    pool.parallel_for(10, 1, [&](std::int64_t, std::int64_t) { after++; });
    EXPECT_EQ(after.load(), 10);
  }
}

TEST(ThreadPool, SpinEnvironmentVariableIsChecked) {
  setenv("LOOM_POOL_SPIN_US", "abc", 1);
  EXPECT_THROW(ThreadPool(2), ValueError);
  setenv("LOOM_POOL_SPIN_US", "0", 1);
  EXPECT_NO_THROW(ThreadPool(2));
  unsetenv("LOOM_POOL_SPIN_US");
}

}  // namespace
}  // namespace loom::backend
