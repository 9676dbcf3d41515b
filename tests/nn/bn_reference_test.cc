// BatchNorm2d in training against PyTorch: a small CNN with BatchNorm2d (Conv2d -> BatchNorm2d
// -> ReLU -> MaxPool2d -> Flatten -> Dense) trained ten steps of Momentum from the initial
// weights and data written by tests/nn/reference/bn_reference.py (tests/nn/reference/
// train_bn.txt; torch.nn.BatchNorm2d(momentum = 1 - 0.9) is loom's BatchNorm2d(momentum 0.9)).
// Losses, final weights, moving_mean and moving_variance agree to 1e-5 (relative above magnitude
// 1), in graph mode and in PyNative mode, and so do the eval-mode outputs after training.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>

#include "nn/context.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/train.h"
#include "tests/ops/reference.h"

namespace loom::nn {
namespace {

constexpr int kSteps = 10;

std::shared_ptr<SequentialCell> make_bn_cnn() {
  auto seq = std::make_shared<SequentialCell>();
  seq->append(std::make_shared<Conv2d>(Conv2dOptions(1, 4, 3).pad_mode("valid")))
      .append(std::make_shared<BatchNorm2d>(4))
      .append(std::make_shared<ReLU>())
      .append(std::make_shared<MaxPool2d>(2, 2))
      .append(std::make_shared<Flatten>())
      .append(std::make_shared<Dense>(36, 3));
  return seq;
}

double max_rel_diff(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  if (got.shape() != want.shape()) return INFINITY;
  double m = 0;
  for (std::int64_t i = 0; i < got.numel(); ++i) {
    const double w = want.get(i);
    m = std::max(m, std::abs(got.get(i) - w) / std::max(1.0, std::abs(w)));
  }
  return m;
}

void run_bn_reference(ExecMode mode) {
  // This reference file lives with its script (tests/nn/reference/bn_reference.py).
  static const std::map<std::string, Tensor> ref =
      testing::read_reference("tests/nn/reference/train_bn.txt");
  auto at = [&](const std::string& key) -> const Tensor& {
    auto it = ref.find(key);
    if (it == ref.end()) throw std::runtime_error("reference lacks " + key);
    return it->second;
  };
  ModeScope scope(mode);
  const char* mode_name = mode == ExecMode::kGraph ? "graph" : "pynative";
  auto backbone = make_bn_cnn();
  auto net = std::make_shared<WithLossCell>(
      backbone, std::make_shared<SoftmaxCrossEntropyWithLogits>(/*sparse=*/true));
  const auto params = net->parameters_and_names();
  ASSERT_EQ(params.size(), 7u);
  for (auto& [name, p] : params) {
    const Tensor& init = at("init." + name);
    ASSERT_EQ(p->value.shape(), init.shape()) << name;
    p->value = Tensor::from_doubles(DType::kFloat32, init.shape(), init.to_doubles());
  }
  const Tensor& x = at("x");
  const Tensor& label = at("label");
  const Tensor& want_loss = at("loss");
  net->set_train(true);
  TrainOneStepCell train(net, {.kind = OptimizerKind::kMomentum, .learning_rate = 0.01,
                               .momentum = 0.9});
  EXPECT_EQ(train.mode(), mode);
  double loss_diff = 0;
  for (int s = 0; s < kSteps; ++s) {
    const double got = train.step(x, label).to_doubles()[0];
    const double want = want_loss.get(s);
    const double d = std::abs(got - want) / std::max(1.0, std::abs(want));
    loss_diff = std::max(loss_diff, d);
    EXPECT_LE(d, 1e-5) << mode_name << " step " << s << ": loss " << got << " vs torch " << want;
  }
  double weight_diff = 0, stat_diff = 0;
  for (auto& [name, p] : params) {
    const double d = max_rel_diff(p->value, at("final." + name));
    double& slot = p->requires_grad ? weight_diff : stat_diff;
    slot = std::max(slot, d);
    EXPECT_LE(d, 1e-5) << mode_name << " final " << name;
  }
  // Eval mode: the moving statistics normalize.
  backbone->set_train(false);
  const Tensor y = (*backbone)(ops::Var(ir::Value::tensor(at("x_eval")))).value().as_tensor();
  const double eval_diff = max_rel_diff(y, at("eval.y"));
  EXPECT_LE(eval_diff, 1e-5) << mode_name << " eval output";
  std::cout << "[ reference ] bn cnn momentum (" << mode_name << "): max loss diff " << loss_diff
            << ", max final weight diff " << weight_diff << ", max moving statistics diff "
            << stat_diff << ", max eval output diff " << eval_diff << "\n";
}

TEST(BatchNormReference, CnnMomentumMatchesTorchInGraphMode) { run_bn_reference(ExecMode::kGraph); }
TEST(BatchNormReference, CnnMomentumMatchesTorchInPyNativeMode) {
  run_bn_reference(ExecMode::kPyNative);
}

}  // namespace
}  // namespace loom::nn
