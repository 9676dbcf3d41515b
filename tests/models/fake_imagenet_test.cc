// The ResNet recipes' fake-imagenet dataset (models/resnet/dataset.h): rows of shape (3, 224, 224)
// Float32 whose every value is what data::Rescale(1/255) → Normalize(ImageNet mean, std) give a
// pixel byte (the data library's transforms are the oracle), Int32 labels in [0, 1000), rows
// that depend only on the seed, sizes and --train-samples cuts, and the ImageNet-layout network
// the recipe builds for it (ResNet-50: torchvision's 25,557,032 trainable values).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/ir/error.h"
#include "core/random/random.h"
#include "data/dataset.h"
#include "models/resnet/dataset.h"
#include "models/zoo.h"

namespace loom::models {
namespace {

constexpr std::int64_t kPlane = 224 * 224;

data::DatasetPtr test_set(std::int64_t batch, std::int64_t samples = 0) {
  return recipe("resnet18").make_test_dataset(
      {.dataset = "fake-imagenet", .batch_size = batch, .num_samples = samples});
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// For each channel, the Float32 value of every pixel byte 0..255 as the data pipeline's
// transforms compute it, mapped back to the byte.
std::vector<std::map<float, int>> normalized_bytes() {
  Tensor bytes(DType::kUInt8, {1, 256, 3});
  auto* b = static_cast<std::uint8_t*>(bytes.raw_data());
  for (int p = 0; p < 256; ++p) {
    for (int c = 0; c < 3; ++c) b[3 * p + c] = static_cast<std::uint8_t>(p);
  }
  Tensor x = data::Rescale(1.0 / 255, 0)->apply(bytes, nullptr);
  x = data::Normalize({resnet::kImageNetMean[0], resnet::kImageNetMean[1],
                       resnet::kImageNetMean[2]},
                      {resnet::kImageNetStd[0], resnet::kImageNetStd[1], resnet::kImageNetStd[2]})
          ->apply(x, nullptr);
  std::vector<std::map<float, int>> table(3);
  const float* v = x.data<float>();
  for (int p = 0; p < 256; ++p) {
    for (int c = 0; c < 3; ++c) table[c][v[3 * p + c]] = p;
  }
  return table;
}

TEST(FakeImageNet, RowsAreNormalizedPixelBytesWithLabelsBelow1000) {
  random::seed_all(1);
  const data::DatasetPtr test = test_set(4);
  EXPECT_EQ(test->size(), 250);  // 1,000 test rows
  const data::Row batch = test->get(0, 0);
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[0].dtype(), DType::kFloat32);
  EXPECT_EQ(batch[0].shape(), (Shape{4, 3, 224, 224}));
  EXPECT_EQ(batch[1].dtype(), DType::kInt32);
  EXPECT_EQ(batch[1].shape(), (Shape{4}));

  // Every value is one of a channel's 256 normalized bytes; in 50,176 pixels each byte occurs,
  // about 196 times (uniform), so the bytes' mean is near 127.5.
  const std::vector<std::map<float, int>> table = normalized_bytes();
  const float* x = batch[0].data<float>();
  for (int c = 0; c < 3; ++c) {
    std::vector<std::int64_t> count(256, 0);
    std::int64_t outside = 0;
    double sum = 0;
    for (std::int64_t p = 0; p < kPlane; ++p) {
      const auto it = table[c].find(x[c * kPlane + p]);
      if (it == table[c].end()) {
        ++outside;
        continue;
      }
      ++count[it->second];
      sum += it->second;
    }
    EXPECT_EQ(outside, 0) << "channel " << c;
    EXPECT_GT(*std::min_element(count.begin(), count.end()), 100) << "channel " << c;
    EXPECT_NEAR(sum / kPlane, 127.5, 2.0) << "channel " << c;
  }

  // Labels over the 1,000 test rows: in [0, 1000) and spread (a uniform draw gives about 632
  // distinct values).
  const data::Row all = test_set(1000)->get(0, 0);
  const auto* y = all[1].data<std::int32_t>();
  std::set<std::int32_t> distinct(y, y + 1000);
  EXPECT_GE(*distinct.begin(), 0);
  EXPECT_LT(*distinct.rbegin(), 1000);
  EXPECT_GT(distinct.size(), 550u);
  EXPECT_LT(distinct.size(), 720u);
}

TEST(FakeImageNet, RowsDependOnlyOnTheSeed) {
  random::seed_all(1);
  const data::Row a = test_set(2)->get(0, 1);
  const data::DatasetPtr again = test_set(2);
  random::seed_all(7);  // the seed in force when the dataset was made counts, not the current
  const data::Row b = again->get(5, 1);  // nor the epoch
  EXPECT_TRUE(same_bits(a[0], b[0]));
  EXPECT_TRUE(same_bits(a[1], b[1]));
  const data::Row other_seed = test_set(2)->get(0, 1);
  EXPECT_FALSE(same_bits(a[0], other_seed[0]));
  const data::Row other_rows = again->get(0, 0);
  EXPECT_FALSE(same_bits(a[0], other_rows[0]));

  // The training rows are another stream: a batch of the first four (shuffled) holds none of
  // the first four test images.
  random::seed_all(1);
  const data::Row train = recipe("resnet18").make_train_dataset(
      {.dataset = "fake-imagenet", .batch_size = 4, .num_samples = 4})->get(0, 0);
  const data::Row test = test_set(4)->get(0, 0);
  const std::size_t image_bytes = 3 * kPlane * sizeof(float);
  for (std::int64_t i = 0; i < 4; ++i) {
    for (std::int64_t j = 0; j < 4; ++j) {
      EXPECT_NE(std::memcmp(train[0].data<float>() + i * 3 * kPlane,
                            test[0].data<float>() + j * 3 * kPlane, image_bytes),
                0);
    }
  }
}

TEST(FakeImageNet, SizesAndSampleCuts) {
  random::seed_all(1);
  const Recipe& r = recipe("resnet50");
  EXPECT_EQ(r.make_train_dataset({.dataset = "fake-imagenet", .batch_size = 128})->size(),
            10'000 / 128);
  EXPECT_EQ(r.make_test_dataset({.dataset = "fake-imagenet", .batch_size = 128})->size(),
            (1'000 + 127) / 128);
  // --train-samples 5 at batch 2: two full batches (the last row dropped); test keeps the last.
  EXPECT_EQ(r.make_train_dataset(
                {.dataset = "fake-imagenet", .batch_size = 2, .num_samples = 5})->size(), 2);
  EXPECT_EQ(test_set(2, 5)->size(), 3);
  // The cut rows are the first ones.
  EXPECT_TRUE(same_bits(test_set(2, 5)->get(0, 1)[0], test_set(2)->get(0, 1)[0]));
  // Two shards of the test set split its rows.
  const DatasetOptions shard{.dataset = "fake-imagenet", .batch_size = 1, .num_samples = 4,
                             .num_shards = 2, .shard_id = 1};
  EXPECT_EQ(r.make_test_dataset(shard)->size(), 2);
  EXPECT_TRUE(same_bits(r.make_test_dataset(shard)->get(0, 0)[0], test_set(1)->get(0, 1)[0]));
  EXPECT_THROW(r.make_train_dataset({.dataset = "fake-imagenet", .data_dir = "/data"}),
               ValueError);
}

TEST(FakeImageNet, RecipesBuildTheImageNetLayoutWith1000Classes) {
  for (const std::string name : {"resnet18", "resnet34", "resnet50", "resnet101"}) {
    const Recipe& r = recipe(name);
    EXPECT_EQ(r.datasets, (std::vector<std::string>{"fashion-mnist", "cifar10", "fake-imagenet"}));
    EXPECT_EQ(r.input_shape("fake-imagenet"), (Shape{3, 224, 224}));
  }
  random::seed_all(1);
  std::shared_ptr<nn::Cell> net = recipe("resnet50").make_network({.dataset = "fake-imagenet"});
  std::int64_t trainable = 0;
  std::map<std::string, Shape> shapes;
  for (auto& [name, p] : net->parameters_and_names()) {
    if (p->requires_grad) trainable += p->value.numel();
    shapes[name] = p->value.shape();
  }
  EXPECT_EQ(trainable, 25'557'032);  // torchvision.models.resnet50(num_classes=1000)
  EXPECT_EQ(shapes["conv1.weight"], (Shape{64, 3, 7, 7}));  // the 7×7 stride-2 stem
  EXPECT_EQ(shapes["end_point.weight"], (Shape{1000, 2048}));
  std::shared_ptr<nn::Cell> ten =
      recipe("resnet18").make_network({.dataset = "fake-imagenet", .num_classes = 10});
  std::map<std::string, Shape> ten_shapes;
  for (auto& [name, p] : ten->parameters_and_names()) ten_shapes[name] = p->value.shape();
  EXPECT_EQ(ten_shapes["end_point.bias"], (Shape{10}));
}

}  // namespace
}  // namespace loom::models
