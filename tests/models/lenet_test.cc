// models/lenet: LeNet5's parameters as MindSpore names them, its forward shape, and the job's
// Fashion-MNIST pipelines (shapes, dtypes, padding and normalization, batching).
#include "models/lenet/lenet.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "core/random/random.h"
#include "core/ir/error.h"
#include "core/ir/value.h"
#include "models/lenet/dataset.h"

namespace loom::models {
namespace {

TEST(LeNet5, ParametersAreNamedShapedAndCountedAsMindSpore) {
  random::seed_all(1);
  LeNet5 net;
  const std::vector<std::pair<std::string, Shape>> expected = {
      {"conv1.weight", {6, 1, 5, 5}}, {"conv2.weight", {16, 6, 5, 5}},
      {"fc1.weight", {120, 400}},     {"fc1.bias", {120}},
      {"fc2.weight", {84, 120}},      {"fc2.bias", {84}},
      {"fc3.weight", {10, 84}},       {"fc3.bias", {10}}};
  auto params = net.parameters_and_names();
  ASSERT_EQ(params.size(), expected.size());
  std::int64_t total = 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i].first, expected[i].first);
    EXPECT_EQ(params[i].second->value.shape(), expected[i].second) << expected[i].first;
    EXPECT_EQ(params[i].second->value.dtype(), DType::kFloat32);
    EXPECT_TRUE(params[i].second->requires_grad);
    total += params[i].second->value.numel();
  }
  EXPECT_EQ(total, 61684);
  EXPECT_EQ(LeNet5::num_parameter_values(), 61684);
  EXPECT_EQ(LeNet5(100, 3).parameters_and_names().size(), 8u);
  std::int64_t total_100_3 = 0;
  LeNet5 wide(100, 3);
  for (auto& [name, p] : wide.parameters_and_names()) total_100_3 += p->value.numel();
  EXPECT_EQ(total_100_3, LeNet5::num_parameter_values(100, 3));
}

TEST(LeNet5, SameSeedSameInitialWeights) {
  random::seed_all(7);
  LeNet5 a;
  random::seed_all(7);
  LeNet5 b;
  random::seed_all(8);
  LeNet5 c;
  auto pa = a.parameters_and_names(), pb = b.parameters_and_names(),
       pc = c.parameters_and_names();
  bool any_differs = false;
  for (std::size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(pa[i].second->value.bitwise_equal(pb[i].second->value)) << pa[i].first;
    any_differs |= !pa[i].second->value.bitwise_equal(pc[i].second->value);
  }
  EXPECT_TRUE(any_differs);
}

TEST(LeNet5, MapsBatchesOf32x32ImagesToTenLogits) {
  random::seed_all(1);
  LeNet5 net;
  Tensor x(DType::kFloat32, {3, 1, 32, 32});
  for (std::int64_t i = 0; i < x.numel(); ++i) x.set(i, std::sin(0.01 * i));
  ops::Var y = net(ops::Var(ir::Value::tensor(x)));
  ASSERT_TRUE(y.is_value());
  const Tensor out = y.value().as_tensor();
  EXPECT_EQ(out.shape(), (Shape{3, 10}));
  for (std::int64_t i = 0; i < out.numel(); ++i) EXPECT_TRUE(std::isfinite(out.get(i)));
}

TEST(LeNetDataset, TrainBatchesArePaddedNormalizedChwAndDropTheRemainder) {
  random::seed_all(1);
  data::DatasetPtr ds = lenet::create_train_dataset({.batch_size = 32, .num_samples = 100});
  EXPECT_EQ(ds->size(), 3);  // 100 / 32, the last partial batch dropped
  data::Row row = ds->get(0, 0);
  ASSERT_EQ(row.size(), 2u);
  EXPECT_EQ(row[0].dtype(), DType::kFloat32);
  EXPECT_EQ(row[0].shape(), (Shape{32, 1, 32, 32}));
  EXPECT_EQ(row[1].dtype(), DType::kInt32);
  EXPECT_EQ(row[1].shape(), (Shape{32}));
  // The 2-pixel border is padding: 0 scaled and normalized.
  const double border = (0 - lenet::kFashionMnistMean) / lenet::kFashionMnistStd;
  EXPECT_NEAR(row[0].get(0), border, 1e-5);
  EXPECT_NEAR(row[0].get(31 * 32 + 31), border, 1e-5);
  for (std::int64_t i = 0; i < row[1].numel(); ++i) {
    EXPECT_GE(row[1].get(i), 0);
    EXPECT_LT(row[1].get(i), 10);
  }
}

TEST(LeNetDataset, TestBatchesKeepOrderAndTheLastPartialBatch) {
  data::DatasetPtr ds = lenet::create_test_dataset({.batch_size = 32, .num_samples = 100});
  EXPECT_EQ(ds->size(), 4);
  EXPECT_EQ(ds->get(0, 3)[0].shape(), (Shape{4, 1, 32, 32}));
  // No shuffle: every epoch gives the same rows.
  EXPECT_TRUE(ds->get(0, 1)[0].bitwise_equal(ds->get(5, 1)[0]));
}

TEST(LeNetDataset, NormalizationGivesTheTrainingImagesMeanZeroStdOne) {
  // Over the first 2048 training images (the constants were measured over all 60,000).
  data::DatasetPtr ds = lenet::create_train_dataset({.batch_size = 2048, .num_samples = 2048});
  Tensor x = ds->get(0, 0)[0];
  double s = 0, s2 = 0;
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const double v = x.get(i);
    s += v;
    s2 += v * v;
  }
  const double mean = s / x.numel();
  const double std = std::sqrt(s2 / x.numel() - mean * mean);
  EXPECT_NEAR(mean, 0, 0.05);
  EXPECT_NEAR(std, 1, 0.05);
}

TEST(LeNetDataset, BadOptionsAreValueErrors) {
  EXPECT_THROW(lenet::create_train_dataset({.batch_size = 0}), ValueError);
  EXPECT_THROW(lenet::create_train_dataset({.data_dir = "/nonexistent/fashion"}), Error);
}

}  // namespace
}  // namespace loom::models
