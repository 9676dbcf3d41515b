// models/resnet, the slow checks (ctest label `slow`): the ImageNet ResNet-50 training graph
// compiles and one step runs at batch 2, 224×224; a few ResNet-18 steps on a Fashion-MNIST subset
// make the loss fall. Both print their timings (compile seconds, step seconds, peak RSS).
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "core/random/random.h"
#include "data/dataset.h"
#include "models/resnet/dataset.h"
#include "models/resnet/resnet.h"
#include "nn/loss.h"
#include "nn/train.h"

namespace loom::models {
namespace {

double peak_rss_mib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(ResNetSlow, ResNet50ImageNetTrainingStepAtBatch2) {
  random::seed_all(1);
  auto net = make_resnet(50, {.num_classes = 1000, .in_channels = 3});
  net->set_train(true);
  std::map<std::string, Tensor> before;
  for (auto& [name, p] : net->parameters_and_names()) {
    if (name == "conv1.weight" || name == "end_point.weight" || name == "bn1.moving_mean") {
      before[name] = p->value.clone();
    }
  }
  nn::TrainOneStepCell step(
      std::make_shared<nn::WithLossCell>(
          net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(/*sparse=*/true)),
      {.kind = nn::OptimizerKind::kMomentum, .learning_rate = 0.1, .momentum = 0.9,
       .weight_decay = 1e-4});
  Tensor x(DType::kFloat32, {2, 3, 224, 224});
  for (std::int64_t i = 0; i < x.numel(); ++i) x.set(i, std::sin(0.001 * i));
  const Tensor label = Tensor::from_vector<std::int32_t>({2}, {3, 917});

  const auto t0 = std::chrono::steady_clock::now();
  const Tensor loss = step.step(x, label);
  const double first = seconds_since(t0);
  const auto t1 = std::chrono::steady_clock::now();
  const Tensor loss2 = step.step(x, label);
  const double second = seconds_since(t1);
  std::cout << "[ resnet50 224x224 batch 2 ] compile " << step.compile_seconds()
            << " s (trace+grad+passes+compile), first step " << first << " s, second step "
            << second << " s, peak RSS " << peak_rss_mib() << " MiB, loss " << loss.get(0)
            << " -> " << loss2.get(0) << "\n";
  EXPECT_EQ(step.num_compilations(), 1u);
  ASSERT_TRUE(std::isfinite(loss.get(0)));
  // Near log(1000) at initialization: the zero-initialized bias and small logits.
  EXPECT_NEAR(loss.get(0), std::log(1000.0), 2.0);
  EXPECT_LT(loss2.get(0), loss.get(0));  // the same batch twice
  for (auto& [name, p] : net->parameters_and_names()) {
    if (before.count(name)) {
      EXPECT_FALSE(p->value.bitwise_equal(before[name])) << name;
    }
  }
}

TEST(ResNetSlow, ResNet18LossFallsOnAFashionMnistSubset) {
  random::seed_all(1);
  auto net = make_resnet(18, {.num_classes = 10, .in_channels = 1,
                              .layout = ResNetLayout::kSmallImage});
  net->set_train(true);
  nn::TrainOneStepCell step(
      std::make_shared<nn::WithLossCell>(
          net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(/*sparse=*/true)),
      {.kind = nn::OptimizerKind::kMomentum, .learning_rate = 0.01, .momentum = 0.9,
       .weight_decay = 1e-4});
  // 256 training images, 8 batches of 32, 3 epochs.
  data::DatasetPtr ds =
      resnet::create_train_dataset({.dataset = "fashion-mnist", .batch_size = 32,
                                    .num_samples = 256});
  double first_epoch = 0, last_epoch = 0, step_seconds = 0;
  std::int64_t steps = 0;
  const int epochs = 3;
  for (int e = 0; e < epochs; ++e) {
    double sum = 0;
    for (std::int64_t i = 0; i < ds->size(); ++i) {
      const data::Row row = ds->get(e, i);
      const auto t0 = std::chrono::steady_clock::now();
      const Tensor loss = step.step(row[0], row[1]);
      if (steps > 0) step_seconds += seconds_since(t0);  // the first step compiles
      ++steps;
      ASSERT_TRUE(std::isfinite(loss.get(0)));
      sum += loss.get(0);
    }
    const double mean = sum / static_cast<double>(ds->size());
    std::cout << "[ resnet18 fashion-mnist 256 ] epoch " << e + 1 << " mean loss " << mean << "\n";
    if (e == 0) first_epoch = mean;
    last_epoch = mean;
  }
  std::cout << "[ resnet18 fashion-mnist 256 ] compile " << step.compile_seconds() << " s, "
            << 32.0 * static_cast<double>(steps - 1) / step_seconds
            << " images/s after compilation, peak RSS " << peak_rss_mib() << " MiB\n";
  EXPECT_LT(last_epoch, 0.8 * first_epoch);
}

}  // namespace
}  // namespace loom::models
