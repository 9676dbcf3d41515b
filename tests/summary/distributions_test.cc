// The collector's off-step work: HistogramParts (one histogram as tasks in any order and on any
// thread: bit for bit make_histogram), compute_distributions (the same events on the pool and on
// one thread; the norms), and the IdleWorker that runs it (every job once, on the idle
// thread or on a caller that needs it done; errors reach the waiter).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <mutex>
#include <numeric>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "summary/distributions.h"
#include "summary/histogram.h"
#include "summary/idle_worker.h"

using namespace loom;
using namespace loom::summary;

namespace {

std::vector<float> random_values(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.f, 0.3f);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

// Runs the parts' tasks last to first, each on its own thread.
Histogram run_backwards_on_threads(HistogramParts parts) {
  std::vector<std::thread> threads;
  for (std::int64_t i = parts.num_tasks() - 1; i >= 0; --i)
    threads.emplace_back([&parts, i] { parts.run(i); });
  for (std::thread& t : threads) t.join();
  return parts.finish();
}

}  // namespace

TEST(HistogramParts, AnyOrderOnAnyThreadIsMakeHistogramBitForBit) {
  // Three full blocks and a partial one, NaN and ±inf included (left out, counted as skipped).
  std::vector<float> f = random_values(3 * HistogramParts::kBlock + 7, 1);
  f[5] = std::numeric_limits<float>::quiet_NaN();
  f[HistogramParts::kBlock + 3] = std::numeric_limits<float>::infinity();
  f[f.size() - 1] = -std::numeric_limits<float>::infinity();
  f[100] = 1e30f;
  const Histogram want = make_histogram(std::span<const float>(f));
  HistogramParts parts{std::span<const float>(f)};
  EXPECT_EQ(parts.num_tasks(), 1 + 4);  // the moments, then one task per block
  EXPECT_EQ(parts.task_size(4), 7);
  const Histogram got = run_backwards_on_threads(std::move(parts));
  EXPECT_EQ(got.skipped, 3);
  EXPECT_EQ(want.skipped, 3);
  EXPECT_EQ(got.proto.SerializeAsString(), want.proto.SerializeAsString());
  EXPECT_EQ(got.proto.num(), static_cast<double>(f.size() - 3));

  std::vector<double> d(f.begin(), f.begin() + 40000);
  d[7] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(run_backwards_on_threads(HistogramParts{std::span<const double>(d)})
                .proto.SerializeAsString(),
            make_histogram(std::span<const double>(d)).proto.SerializeAsString());

  const Tensor ints = Tensor::from_vector<std::int32_t>({4}, {-3, 0, 7, 7});
  EXPECT_EQ(run_backwards_on_threads(HistogramParts{ints}).proto.SerializeAsString(),
            make_histogram(ints).proto.SerializeAsString());
  // No values: one empty histogram, as make_histogram's.
  EXPECT_EQ(run_backwards_on_threads(HistogramParts{std::span<const float>()})
                .proto.SerializeAsString(),
            make_histogram(std::span<const float>()).proto.SerializeAsString());
}

TEST(Distributions, SameEventsOnThePoolAndOnOneThreadWithTheNorms) {
  const std::vector<float> w = random_values(50000, 2), b = random_values(10, 3);
  Tensor weight = Tensor::from_vector<float>({250, 200}, w);
  Tensor bias = Tensor::from_vector<float>({10}, b);
  auto sel = std::make_shared<DistributionSelection>();
  sel->param_tags = {"fc.weight/auto"};
  sel->params = {&weight};
  sel->gradient_names = {"fc.weight", "fc.bias"};
  sel->gradient_histogram = {1, 0};  // the bias's gradient: only in the global norm
  const std::vector<std::pair<std::string, Tensor>> grads = {
      {"fc.weight", Tensor::from_vector<float>({2}, {3.f, 4.f})},
      {"fc.bias", Tensor::from_vector<float>({1}, {12.f})}};
  StepValues v;
  v.take(sel, 7, &grads);
  // The parameters are copied at take(): a later in-place update changes nothing recorded.
  weight.data<float>()[0] = 1000.f;

  const std::vector<tb::Event> pool = compute_distributions(v, true);
  const std::vector<tb::Event> one = compute_distributions(v, false);
  ASSERT_EQ(pool.size(), 4u);
  ASSERT_EQ(one.size(), 4u);
  for (std::size_t i = 0; i < pool.size(); ++i)
    EXPECT_EQ(pool[i].SerializeAsString(), one[i].SerializeAsString()) << i;
  const char* tags[] = {"fc.weight/auto", "fc.weight/grad", "gradient_norm/fc.weight",
                        "gradient_norm"};
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(pool[i].step(), 7);
    EXPECT_EQ(pool[i].summary().value(0).tag(), tags[i]);
  }
  const Histogram want = make_histogram(std::span<const float>(w));
  EXPECT_EQ(pool[0].summary().value(0).histo().SerializeAsString(),
            want.proto.SerializeAsString());
  EXPECT_EQ(pool[2].summary().value(0).simple_value(), 5.f);   // √(3² + 4²)
  EXPECT_EQ(pool[3].summary().value(0).simple_value(), 13.f);  // √(3² + 4² + 12²)
}

TEST(IdleWorker, EveryJobRunsOnceOnTheIdleThreadOrTheCaller) {
  IdleWorker idle;
  std::vector<int> order;
  std::mutex mu;
  std::atomic<int> on_idle{0}, on_caller{0};
  std::vector<std::shared_ptr<IdleWorker::Job>> jobs;
  for (int i = 0; i < 200; ++i) {
    jobs.push_back(idle.post([&, i](bool on_idle_thread) {
      (on_idle_thread ? on_idle : on_caller)++;
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(i);
    }));
    idle.run_oldest(4);
    EXPECT_LE(idle.unfinished(), 5u);  // 4 waiting and at most the one the idle thread runs
  }
  idle.finish_all();
  EXPECT_EQ(idle.unfinished(), 0u);
  for (auto& j : jobs) EXPECT_TRUE(j->done());
  ASSERT_EQ(order.size(), 200u);
  // Every job ran exactly once (the idle thread and the caller both take the oldest).
  std::vector<int> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> want(200);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(sorted, want);
  EXPECT_EQ(on_idle + on_caller, 200);
}

TEST(IdleWorker, AJobsErrorReachesItsWaiterAndTheDestructorRunsWhatIsLeft) {
  std::atomic<int> ran{0};
  std::shared_ptr<IdleWorker::Job> bad;
  {
    IdleWorker idle;
    bad = idle.post([](bool) { throw std::runtime_error("bucket overflow"); });
    EXPECT_THROW(
        {
          try {
            bad->wait();
          } catch (const std::runtime_error& e) {
            EXPECT_STREQ(e.what(), "bucket overflow");
            throw;
          }
        },
        std::runtime_error);
    EXPECT_TRUE(bad->done());
    for (int i = 0; i < 50; ++i) idle.post([&](bool) { ++ran; });
  }  // the destructor: every job done before it returns
  EXPECT_EQ(ran, 50);
}
