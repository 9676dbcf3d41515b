// The prefetching Iterator: the same rows in the same order for any worker count and window,
// exact resume from a Position, errors at the right row, clean early shutdown, the data wait;
// and the Fashion-MNIST throughput figure.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "core/random/random.h"
#include "core/ir/error.h"
#include "data/dataset.h"
#include "tests/data/test_util.h"

namespace loom::data {
namespace {

using testing::error_of;

// n rows: "x" Float32 (1, 2) image = [[i, -i]], "y" Int32 () = i.
DatasetPtr numbers(std::int64_t n) {
  std::vector<float> x;
  std::vector<std::int32_t> y;
  for (std::int64_t i = 0; i < n; ++i) {
    x.insert(x.end(), {static_cast<float>(i), static_cast<float>(-i)});
    y.push_back(static_cast<std::int32_t>(i));
  }
  return TensorSlicesDataset({"x", "y"}, {Tensor::from_vector<float>({n, 1, 2}, x),
                                          Tensor::from_vector<std::int32_t>({n}, y)});
}

// Sleeps `ms` per row; throws ValueError on the row whose first value is `bad`.
class SlowOrBad final : public Transform {
 public:
  SlowOrBad(int ms, double bad) : ms_(ms), bad_(bad) {}
  std::string name() const override { return "SlowOrBad"; }
  Tensor apply(const Tensor& x, random::RandomStream*) const override {
    if (ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms_));
    if (x.get(0) == bad_) throw ValueError("SlowOrBad: value " + std::to_string(x.get(0)));
    return x;
  }

 private:
  int ms_;
  double bad_;
};

// Rows flattened to their values, for comparisons.
using Flat = std::vector<std::vector<double>>;
Flat flat(const Row& r) {
  Flat f;
  for (const Tensor& t : r) f.push_back(t.to_doubles());
  return f;
}

DatasetPtr pipeline() {
  random::seed_all(8);
  DatasetPtr d =
      numbers(37)->map({RandomHorizontalFlip(0.5), Rescale(2, 0)}, "x")->shuffle()->batch(4);
  random::seed_all(0);
  return d;
}

std::vector<Flat> expected(const DatasetPtr& d, Position from, std::int64_t num_epochs) {
  std::vector<Flat> rows;
  for (std::int64_t e = from.epoch; e < num_epochs; ++e) {
    for (std::int64_t i = e == from.epoch ? from.index : 0; i < d->size(); ++i) {
      rows.push_back(flat(d->get(e, i)));
    }
  }
  return rows;
}

TEST(Iterator, SameRowsForAnyWorkersAndPrefetch) {
  const DatasetPtr d = pipeline();
  ASSERT_EQ(d->size(), 10);
  const std::vector<Flat> want = expected(d, {}, 3);
  ASSERT_EQ(want.size(), 30u);
  for (int workers : {0, 1, 3}) {
    for (int prefetch : {1, 8}) {
      Iterator it(d, {.num_epochs = 3, .num_workers = workers, .prefetch = prefetch});
      EXPECT_EQ(it.rows_per_epoch(), 10);
      std::vector<Flat> got;
      while (std::optional<Row> r = it.next()) got.push_back(flat(*r));
      EXPECT_EQ(got, want) << workers << " workers, prefetch " << prefetch;
      EXPECT_EQ(it.position().epoch, 3);
      EXPECT_EQ(it.position().index, 0);
      EXPECT_FALSE(it.next().has_value());
    }
  }
}

TEST(Iterator, ResumeFromAPositionGivesTheRemainingRows) {
  const DatasetPtr d = pipeline();
  // Stop after 13 rows (epoch 1, index 3), then resume there in a new iterator.
  std::vector<Flat> first;
  Position stopped;
  {
    Iterator it(d, {.num_epochs = 3, .num_workers = 2, .prefetch = 4});
    for (int k = 0; k < 13; ++k) first.push_back(flat(*it.next()));
    stopped = it.position();
  }
  EXPECT_EQ(stopped.epoch, 1);
  EXPECT_EQ(stopped.index, 3);
  Iterator resumed(d, {.num_epochs = 3, .num_workers = 3, .prefetch = 2, .start = stopped});
  EXPECT_EQ(resumed.position().epoch, 1);
  EXPECT_EQ(resumed.position().index, 3);
  std::vector<Flat> rest;
  while (std::optional<Row> r = resumed.next()) rest.push_back(flat(*r));
  EXPECT_EQ(rest, expected(d, stopped, 3));
  ASSERT_EQ(rest.size(), 17u);
  first.insert(first.end(), rest.begin(), rest.end());
  EXPECT_EQ(first, expected(d, {}, 3));
  EXPECT_EQ(error_of<ValueError>([&] {
              Iterator(d, {.start = {0, 11}});
            }),
            "Iterator: start position (epoch 0, index 11) is outside batch(4) of 10 rows per "
            "epoch");
}

TEST(Iterator, ErrorIsRethrownAtItsRow) {
  const DatasetPtr d = numbers(12)->map({std::make_shared<SlowOrBad>(0, 7)}, "x");
  for (int workers : {0, 3}) {
    Iterator it(d, {.num_epochs = 1, .num_workers = workers, .prefetch = 8});
    for (int k = 0; k < 7; ++k) EXPECT_EQ((*it.next())[1].get(0), k);
    EXPECT_EQ(error_of<ValueError>([&] { it.next(); }),
              "SlowOrBad: value 7.000000 (in map(SlowOrBad), column 'x', row 7 of epoch 0)");
    EXPECT_EQ(it.position().index, 8);  // the failed row counts as consumed
    for (int k = 8; k < 12; ++k) EXPECT_EQ((*it.next())[1].get(0), k);
    EXPECT_FALSE(it.next().has_value());
  }
}

TEST(Iterator, DestroyedMidEpochJoinsPromptly) {
  const DatasetPtr d = numbers(1000)->map({std::make_shared<SlowOrBad>(2, -1)}, "x");
  const auto t0 = std::chrono::steady_clock::now();
  {
    Iterator it(d, {.num_epochs = 5, .num_workers = 3, .prefetch = 16});
    for (int k = 0; k < 3; ++k) EXPECT_EQ((*it.next())[1].get(0), k);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 1.0);  // 5000 rows at 2 ms would take 3 s over 3 workers
  { Iterator never_read(d, {.num_workers = 2}); }
}

TEST(Iterator, WaitSecondsGrowsWhenTransformsAreSlow) {
  {
    Iterator fast(numbers(50), {.num_workers = 2});
    while (fast.next()) {
    }
    EXPECT_GE(fast.wait_seconds(), 0.0);
    EXPECT_LT(fast.wait_seconds(), 0.5);
  }
  for (int workers : {0, 1}) {
    Iterator slow(numbers(6)->map({std::make_shared<SlowOrBad>(20, -1)}, "x"),
                  {.num_workers = workers, .prefetch = 1});
    while (slow.next()) {
    }
    // 6 rows of 20 ms on one thread, the consumer doing nothing else: ~120 ms of waiting.
    EXPECT_GE(slow.wait_seconds(), 0.09) << workers << " workers";
  }
}

TEST(Iterator, EmptyDatasetAndZeroEpochs) {
  Iterator empty(numbers(3)->take(0), {.num_epochs = 2});
  EXPECT_FALSE(empty.next().has_value());
  Iterator none(numbers(3), {.num_epochs = 0});
  EXPECT_FALSE(none.next().has_value());
}

// The figure the brief asks for: one Fashion-MNIST train epoch through the LeNet pipeline.
TEST(Iterator, FashionMnistTrainEpochThroughput) {
  const auto c0 = std::clock();
  const auto t0 = std::chrono::steady_clock::now();
  random::seed_all(1);
  const DatasetPtr train =
      MnistDataset(fashion_mnist_dir(""), "train")
          ->map({Pad({2}), Rescale(1.0 / 255, 0), Normalize({0.2860}, {0.3530}), HWC2CHW()},
                "image")
          ->shuffle()
          ->batch(32, true);
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Iterator it(train, {.num_epochs = 1, .num_workers = 1});
  std::int64_t batches = 0;
  double checksum = 0;
  while (std::optional<Row> b = it.next()) {
    ++batches;
    checksum += (*b)[1].get(0);
    EXPECT_EQ((*b)[0].shape(), (Shape{32, 1, 32, 32}));
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
  EXPECT_EQ(batches, 1875);
  std::printf(
      "Fashion-MNIST train epoch: load %.3f s, total wall %.3f s, cpu %.3f s, "
      "data wait %.3f s\n",
      load_s, wall, cpu, it.wait_seconds());
  random::seed_all(0);
}

}  // namespace
}  // namespace loom::data
