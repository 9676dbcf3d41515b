// The optimizers (optim/optimizer.h) against MindSpore 2.10 itself: the same small network, the
// same initial weights and batch, three TrainOneStepCell steps per optimizer configuration; the
// losses, the weights and every optimizer entry of the checkpoint, by MindSpore's names, as
// MindSpore computed them (tests/optim/reference/ms_optimizers_reference.py wrote the data).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/ir/error.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/train.h"
#include "optim/optimizer.h"
#include "tests/ops/reference.h"

namespace loom::optim {
namespace {

const std::map<std::string, Tensor>& reference() {
  static const auto* r = new std::map<std::string, Tensor>(
      testing::read_reference("tests/optim/reference/data/ms_optimizers.txt"));
  return *r;
}

std::shared_ptr<Optimizer> make(const std::string& config) {
  if (config == "momentum") return std::make_shared<Momentum>(Momentum::Options{.learning_rate = 0.1});
  if (config == "momentum_wd") {
    return std::make_shared<Momentum>(Momentum::Options{.learning_rate = 0.1, .weight_decay = 0.01});
  }
  if (config == "sgd") {
    return std::make_shared<SGD>(SGD::Options{.learning_rate = 0.1, .momentum = 0.9});
  }
  if (config == "sgd_nesterov") {
    return std::make_shared<SGD>(
        SGD::Options{.learning_rate = 0.1, .momentum = 0.9, .nesterov = true});
  }
  if (config == "adam") return std::make_shared<Adam>(Adam::Options{.learning_rate = 0.01});
  if (config == "adam_wd") {
    return std::make_shared<Adam>(Adam::Options{.learning_rate = 0.01, .weight_decay = 0.01});
  }
  if (config == "adamw") {
    return std::make_shared<AdamWeightDecay>(
        AdamWeightDecay::Options{.learning_rate = 0.01, .weight_decay = 0.01});
  }
  if (config == "momentum_lr_list") {
    return std::make_shared<Momentum>(
        Momentum::Options{.learning_rate = std::vector<double>{0.1, 0.05, 0.025}});
  }
  if (config == "groups") {
    return std::make_shared<Momentum>(Momentum::Options{
        .learning_rate = 0.1,
        .groups = {{.params = {"0.weight", "2.weight"}, .learning_rate = 0.05, .weight_decay = 0.01},
                   {.params = {"0.bias", "2.bias"}, .learning_rate = 0.1}}});
  }
  throw ValueError("no such configuration: " + config);
}

struct TrainedRun {
  std::vector<double> losses;
  std::map<std::string, Tensor> entries;  // parameters and optimizer entries
};

TrainedRun train(const std::string& config) {
  auto net = std::make_shared<nn::SequentialCell>();
  net->append(std::make_shared<nn::Dense>(6, 5));
  net->append(std::make_shared<nn::ReLU>());
  net->append(std::make_shared<nn::Dense>(5, 3));
  for (auto& [name, p] : net->parameters_and_names()) {
    const Tensor& init = reference().at("init." + name);
    std::copy_n(init.data<float>(), init.numel(), p->value.data<float>());
  }
  std::shared_ptr<Optimizer> opt = make(config);
  nn::TrainOneStepCell step(
      std::make_shared<nn::WithLossCell>(
          net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(/*sparse=*/true, "mean")),
      opt, nn::ExecMode::kGraph);
  TrainedRun r;
  for (int i = 0; i < 3; ++i) {
    r.losses.push_back(step.step(reference().at("x"), reference().at("label")).get(0));
  }
  for (auto& [name, p] : net->parameters_and_names()) r.entries.emplace(name, p->value);
  for (auto& [name, t] : opt->checkpoint_entries()) r.entries.emplace(name, t);
  return r;
}

// momentum_nesterov is not here: MindSpore 2.10's CPU kernel ignores use_nesterov (the file holds
// plain Momentum's numbers there); loom follows the documented formula, checked by the SGD
// Nesterov case, which MindSpore does compute.
class MindSporeOptimizers : public ::testing::TestWithParam<std::string> {};

TEST_P(MindSporeOptimizers, ThreeStepsMatchMindSpore) {
  const std::string config = GetParam();
  const TrainedRun r = train(config);
  const Tensor& losses = reference().at(config + ".loss");
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(r.losses[i], losses.get(i), 2e-6 * std::max(1.0, std::abs(losses.get(i))))
        << "loss " << i;
  }
  // The same entries as MindSpore's checkpoint, by name, with equal values.
  std::set<std::string> want;
  const std::string prefix = config + ".final.";
  for (const auto& [name, t] : reference()) {
    if (name.rfind(prefix, 0) == 0) want.insert(name.substr(prefix.size()));
  }
  std::set<std::string> got;
  for (const auto& [name, t] : r.entries) got.insert(name);
  EXPECT_EQ(got, want);
  for (const std::string& name : want) {
    if (!r.entries.count(name)) continue;
    const Tensor& ms = reference().at(prefix + name);
    const Tensor& mine = r.entries.at(name);
    ASSERT_EQ(mine.dtype(), ms.dtype()) << name;
    ASSERT_EQ(mine.numel(), ms.numel()) << name;
    double worst = 0, scale = 0;
    for (std::int64_t i = 0; i < ms.numel(); ++i) {
      worst = std::max(worst, std::abs(mine.get(i) - ms.get(i)));
      scale = std::max(scale, std::abs(ms.get(i)));
    }
    // Float32 arithmetic in both, summed in different orders: a few ulps of the largest value.
    EXPECT_LE(worst, 4e-7 * std::max(1.0, scale)) << name << " (largest " << scale << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, MindSporeOptimizers,
                         ::testing::Values("momentum", "momentum_wd", "sgd", "sgd_nesterov",
                                           "adam", "adam_wd", "adamw", "momentum_lr_list",
                                           "groups"),
                         [](const auto& info) { return info.param; });

TEST(Optimizers, MindSporesDecayFilterSkipsBetaAndGamma) {
  Momentum m({.learning_rate = 0.1, .weight_decay = 0.5});
  m.init({{"bn.gamma", DType::kFloat32, {2}}, {"bn.beta", DType::kFloat32, {2}},
          {"fc.weight", DType::kFloat32, {2, 2}}});
  EXPECT_EQ(m.states().size(), 3u);
  // With groups there is no filter, and parameters in no group are not updated.
  Momentum g({.learning_rate = 0.1,
              .groups = {{.params = {"bn.gamma"}, .weight_decay = 0.5}}});
  g.init({{"bn.gamma", DType::kFloat32, {2}}, {"fc.weight", DType::kFloat32, {2, 2}}});
  EXPECT_TRUE(g.updates("bn.gamma"));
  EXPECT_FALSE(g.updates("fc.weight"));
  EXPECT_EQ(g.states().size(), 1u);
  EXPECT_THROW(g.init({{"fc.weight", DType::kFloat32, {2, 2}}}), ValueError);  // group names a stranger
}

TEST(Optimizers, HyperParametersOutOfRangeAreValueErrors) {
  EXPECT_THROW(Momentum({.momentum = -1}), ValueError);
  EXPECT_THROW(Adam({.beta1 = 1.0}), ValueError);
  EXPECT_THROW(AdamWeightDecay({.eps = -1}), ValueError);
  EXPECT_THROW(SGD({.momentum = 0, .nesterov = true}), ValueError);
  EXPECT_THROW(Momentum({.learning_rate = -0.1}), ValueError);
  EXPECT_THROW(kind_from_name("adagrad"), ValueError);
  EXPECT_EQ(make_optimizer({.kind = OptimizerKind::kAdamW})->name(), "AdamWeightDecay");
}

// Loading the entries back restores the state: three steps, save, a fresh optimizer loads them,
// three more steps equal six straight, bitwise.
TEST(Optimizers, EntriesLoadBackAndTrainingContinuesBitwise) {
  for (const std::string config : {"momentum", "sgd", "adam", "adamw", "momentum_lr_list"}) {
    SCOPED_TRACE(config);
    auto make_net = [] {
      auto net = std::make_shared<nn::SequentialCell>();
      net->append(std::make_shared<nn::Dense>(6, 5));
      net->append(std::make_shared<nn::ReLU>());
      net->append(std::make_shared<nn::Dense>(5, 3));
      for (auto& [name, p] : net->parameters_and_names()) {
        const Tensor& init = reference().at("init." + name);
        std::copy_n(init.data<float>(), init.numel(), p->value.data<float>());
      }
      return net;
    };
    auto loss = [] {
      return std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(/*sparse=*/true, "mean");
    };
    const Tensor& x = reference().at("x");
    const Tensor& y = reference().at("label");
    auto straight_net = make_net();
    auto straight_opt = make(config);
    nn::TrainOneStepCell straight(std::make_shared<nn::WithLossCell>(straight_net, loss()),
                                  straight_opt, nn::ExecMode::kGraph);
    for (int i = 0; i < 6; ++i) straight.step(x, y);

    auto first_net = make_net();
    auto first_opt = make(config);
    nn::TrainOneStepCell first(std::make_shared<nn::WithLossCell>(first_net, loss()), first_opt,
                               nn::ExecMode::kGraph);
    for (int i = 0; i < 3; ++i) first.step(x, y);
    std::vector<std::pair<std::string, Tensor>> saved;
    for (auto& [name, t] : first_opt->checkpoint_entries()) saved.emplace_back(name, t.clone());
    auto second_opt = make(config);
    nn::TrainOneStepCell second(std::make_shared<nn::WithLossCell>(first_net, loss()), second_opt,
                                nn::ExecMode::kGraph);
    second_opt->load_entries(saved);
    EXPECT_EQ(second_opt->global_step(), 3);
    for (int i = 0; i < 3; ++i) second.step(x, y);
    auto a = straight_net->parameters_and_names();
    auto b = first_net->parameters_and_names();
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(a[i].second->value.bitwise_equal(b[i].second->value)) << a[i].first;
    }
  }
}

}  // namespace
}  // namespace loom::optim
