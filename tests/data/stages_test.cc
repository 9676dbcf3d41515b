// The dataset stages over TensorSlicesDataset: exact rows for map, batch, repeat, shard and take;
// shuffle's permutations and their dependence on the epoch, the repetition and the seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <thread>

#include "core/random/random.h"
#include "core/ir/error.h"
#include "data/dataset.h"
#include "tests/data/test_util.h"

namespace loom::data {
namespace {

using testing::all_rows;
using testing::column_values;
using testing::error_of;

// n rows: "x" Float32 (2) = [i, 10 i], "y" Int32 () = i.
DatasetPtr numbers(std::int64_t n) {
  std::vector<float> x;
  std::vector<std::int32_t> y;
  for (std::int64_t i = 0; i < n; ++i) {
    x.push_back(static_cast<float>(i));
    x.push_back(static_cast<float>(10 * i));
    y.push_back(static_cast<std::int32_t>(i));
  }
  return TensorSlicesDataset({"x", "y"}, {Tensor::from_vector<float>({n, 2}, x),
                                          Tensor::from_vector<std::int32_t>({n}, y)});
}

std::vector<double> ys(const DatasetPtr& d, std::int64_t epoch = 0) {
  return column_values(all_rows(d, epoch), 1);
}

std::vector<double> iota(int n) {
  std::vector<double> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0.0);
  return v;
}

TEST(TensorSlices, RowsAndErrors) {
  const DatasetPtr d = numbers(3);
  EXPECT_EQ(d->size(), 3);
  EXPECT_EQ(d->depth(), 0);
  const Row r = d->get(5, 2);
  EXPECT_EQ(r[0].shape(), Shape{2});
  EXPECT_EQ(r[0].to_doubles(), (std::vector<double>{2, 20}));
  EXPECT_EQ(r[1].shape(), Shape{});
  EXPECT_EQ(r[1].get(0), 2);
  EXPECT_EQ(error_of<ValueError>([&] { d->get(0, 3); }),
            "TensorSlicesDataset: row 3 out of range [0, 3)");
  EXPECT_EQ(error_of<ShapeError>([] {
              TensorSlicesDataset({"a", "b"},
                                  {Tensor(DType::kFloat32, {3}), Tensor(DType::kFloat32, {4})});
            }),
            "TensorSlicesDataset: expected every column to have 3 rows (as 'a'), got 4 in 'b'");
}

TEST(Stages, MapAppliesOpsInOrderToItsColumn) {
  const DatasetPtr d = numbers(3)->map({Rescale(2, 1), Rescale(1, -0.5)}, "x");
  EXPECT_EQ(d->depth(), 1);
  EXPECT_EQ(d->describe(), "map(Rescale, Rescale)");
  EXPECT_EQ(column_values(all_rows(d), 0), (std::vector<double>{0.5, 0.5, 2.5, 20.5, 4.5, 40.5}));
  EXPECT_EQ(ys(d), iota(3));
  EXPECT_EQ(error_of<ValueError>([] { numbers(2)->map({Rescale(1, 0)}, "image"); }),
            "map: no column 'image' in TensorSlicesDataset (columns: 'x', 'y')");
  // A transform's error names the stage, the column and the row.
  const DatasetPtr bad = numbers(2)->map({Pad({1})}, "x");
  EXPECT_EQ(error_of<ShapeError>([&] { bad->get(3, 1); }),
            "Pad: expected an HW or HWC image, got Tensor[Float32](2) (in map(Pad), column 'x', "
            "row 1 of epoch 3)");
}

TEST(Stages, BatchKeepsOrDropsTheRemainder) {
  const DatasetPtr keep = numbers(7)->batch(3);
  ASSERT_EQ(keep->size(), 3);
  EXPECT_EQ(keep->describe(), "batch(3)");
  const Row b2 = keep->get(0, 2);
  EXPECT_EQ(b2[0].shape(), (Shape{1, 2}));
  EXPECT_EQ(b2[1].shape(), Shape{1});
  EXPECT_EQ(b2[1].get(0), 6);
  const Row b1 = keep->get(0, 1);
  EXPECT_EQ(b1[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(b1[0].to_doubles(), (std::vector<double>{3, 30, 4, 40, 5, 50}));
  EXPECT_EQ(b1[1].to_doubles(), (std::vector<double>{3, 4, 5}));
  const DatasetPtr drop = numbers(7)->batch(3, true);
  ASSERT_EQ(drop->size(), 2);
  EXPECT_EQ(column_values(all_rows(drop), 1), iota(6));
  EXPECT_EQ(numbers(6)->batch(3, true)->size(), 2);
  EXPECT_EQ(numbers(6)->batch(3, false)->size(), 2);
}

// Rows of differing shape: row 2 is (3, 2), the others (2, 2).
class Ragged final : public Dataset {
 public:
  std::int64_t size() const override { return 3; }
  Row get(std::int64_t, std::int64_t i) const override {
    return {Tensor(DType::kUInt8, {i == 2 ? 3 : 2, 2})};
  }
  std::vector<std::string> column_names() const override { return {"image"}; }
  std::string describe() const override { return "Ragged"; }
};

TEST(Stages, BatchShapeMismatchNamesColumnAndRows) {
  const DatasetPtr by2 = std::make_shared<Ragged>()->batch(2);
  EXPECT_EQ(by2->get(0, 0)[0].shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(by2->get(0, 1)[0].shape(), (Shape{1, 3, 2}));  // a batch of its own: fine
  const DatasetPtr by3 = std::make_shared<Ragged>()->batch(3);
  EXPECT_EQ(error_of<ShapeError>([&] { by3->get(4, 0); }),
            "batch(3): column 'image': row 2 is Tensor[UInt8](3, 2) but row 0 is "
            "Tensor[UInt8](2, 2) (batch 0 of epoch 4)");
}

TEST(Stages, RepeatAndTake) {
  EXPECT_EQ(ys(numbers(3)->repeat(3)), (std::vector<double>{0, 1, 2, 0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(ys(numbers(5)->take(2)), (std::vector<double>{0, 1}));
  EXPECT_EQ(ys(numbers(5)->take(9)), iota(5));
  EXPECT_EQ(numbers(5)->take(0)->size(), 0);
  EXPECT_EQ(error_of<ValueError>([] { numbers(2)->repeat(0); }),
            "repeat: expected count >= 1, got 0");
}

TEST(Stages, ShardWrapsAroundToEqualSizes) {
  // 10 rows over 4 shards: ceil(10 / 4) = 3 rows each; shards 2 and 3 wrap to rows 0 and 1.
  EXPECT_EQ(ys(numbers(10)->shard(4, 0)), (std::vector<double>{0, 4, 8}));
  EXPECT_EQ(ys(numbers(10)->shard(4, 1)), (std::vector<double>{1, 5, 9}));
  EXPECT_EQ(ys(numbers(10)->shard(4, 2)), (std::vector<double>{2, 6, 0}));
  EXPECT_EQ(ys(numbers(10)->shard(4, 3)), (std::vector<double>{3, 7, 1}));
  EXPECT_EQ(ys(numbers(6)->shard(3, 2)), (std::vector<double>{2, 5}));
  EXPECT_EQ(error_of<ValueError>([] { numbers(6)->shard(3, 3); }),
            "shard: expected num_shards >= 1 and 0 <= shard_id < num_shards, got 3 and 3");
}

bool is_permutation_of_iota(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v == iota(static_cast<int>(v.size()));
}

TEST(Stages, ShufflePermutesDifferentlyPerEpochAndSeed) {
  random::seed_all(1);
  const DatasetPtr d = numbers(50)->shuffle();
  EXPECT_EQ(d->describe(), "shuffle");
  const std::vector<double> e0 = ys(d, 0), e1 = ys(d, 1);
  EXPECT_TRUE(is_permutation_of_iota(e0));
  EXPECT_TRUE(is_permutation_of_iota(e1));
  EXPECT_NE(e0, iota(50));
  EXPECT_NE(e0, e1);
  EXPECT_EQ(ys(d, 0), e0);  // asking again (after epoch 1 was cached) gives the same
  // Rebuilt under the same seed: the same permutations, whatever the seed in force at get().
  random::seed_all(1);
  const DatasetPtr again = numbers(50)->shuffle();
  random::seed_all(99);
  EXPECT_EQ(ys(again, 0), e0);
  EXPECT_EQ(ys(again, 1), e1);
  // Another seed: another permutation.
  const DatasetPtr other = numbers(50)->shuffle();
  EXPECT_TRUE(is_permutation_of_iota(ys(other, 0)));
  EXPECT_NE(ys(other, 0), e0);
  // Columns stay together.
  for (const Row& r : all_rows(d, 0)) EXPECT_EQ(r[0].get(0), r[1].get(0));
  random::seed_all(0);
}

TEST(Stages, RepeatedShufflesDiffer) {
  random::seed_all(3);
  const DatasetPtr d = numbers(20)->shuffle()->repeat(3);
  const std::vector<double> all = ys(d, 0);
  const std::vector<double> r0(all.begin(), all.begin() + 20),
      r1(all.begin() + 20, all.begin() + 40), r2(all.begin() + 40, all.end());
  EXPECT_TRUE(is_permutation_of_iota(r0));
  EXPECT_TRUE(is_permutation_of_iota(r1));
  EXPECT_TRUE(is_permutation_of_iota(r2));
  EXPECT_NE(r0, r1);
  EXPECT_NE(r1, r2);
  // Repetition k of epoch e is the shuffle's epoch 3 e + k.
  const DatasetPtr inner = numbers(20)->shuffle();
  EXPECT_EQ(ys(inner, 1), r1);
  const std::vector<double> epoch1 = ys(d, 1);
  EXPECT_EQ(std::vector<double>(epoch1.begin(), epoch1.begin() + 20), ys(inner, 3));
  random::seed_all(0);
}

TEST(Stages, ShuffleIsSafeUnderConcurrentEpochs) {
  random::seed_all(5);
  const DatasetPtr d = numbers(200)->shuffle();
  const std::vector<double> e0 = ys(d, 0), e1 = ys(d, 1);
  std::vector<std::vector<double>> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 5; ++rep) got[t] = ys(d, t % 2);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(got[t], t % 2 ? e1 : e0);
  random::seed_all(0);
}

}  // namespace
}  // namespace loom::data
