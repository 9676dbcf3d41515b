// Mixed precision on the MLP of tests/nn/mlp_util.h (core/passes/amp.h, nn/train.h's set_amp
// and build_train_network): the O2 BFloat16 step's loss is the one computed by hand with every
// op's result rounded to BFloat16 (the CPU computes the low-precision ops on Float32 kernels,
// rounding after each), weights and optimizer states stay Float32, O0 is bitwise the plain
// step, O2 Float16 with MindSpore's dynamic loss scale skips the overflowing first steps and
// trains; misuse is a ValueError.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/ir/anf.h"
#include "core/ir/error.h"
#include "core/random/random.h"
#include "nn/layers.h"
#include "nn/train.h"
#include "runtime/compiled_function.h"
#include "tests/nn/mlp_util.h"
#include "tests/ops/test_util.h"

namespace loom::nn {
namespace {

using loom::testing::error_of;
using test_mlp::LocalMSE;
using test_mlp::kN, test_mlp::kIn, test_mlp::kHidden, test_mlp::kOut;
using test_mlp::pseudo;

std::shared_ptr<SequentialCell> make_backbone() {
  auto seq = std::make_shared<SequentialCell>();
  seq->append(std::make_shared<Dense>(kIn, kHidden))
      .append(std::make_shared<ReLU>())
      .append(std::make_shared<Dense>(kHidden, kOut));
  int k = 0;
  for (auto& [name, p] : seq->parameters_and_names()) {
    std::vector<double> v(static_cast<std::size_t>(p->value.numel()));
    for (double& x : v) x = pseudo(k++, 0.6);
    p->value = Tensor::from_doubles(DType::kFloat32, p->value.shape(), v);
  }
  return seq;
}

Tensor data(double scale = 1.0) {
  std::vector<double> v(kN * kIn);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = pseudo(static_cast<int>(i) + 100, scale);
  return Tensor::from_doubles(DType::kFloat32, {kN, kIn}, v);
}
Tensor label() {
  std::vector<double> v(kN * kOut);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = pseudo(static_cast<int>(i) + 200, 0.8);
  return Tensor::from_doubles(DType::kFloat32, {kN, kOut}, v);
}

const OptimizerSpec kSgd{.kind = OptimizerKind::kSGD, .learning_rate = 0.1, .momentum = 0.0,
                         .weight_decay = 0.0};

double f32(double x) { return static_cast<double>(static_cast<float>(x)); }
double bf16(double x) { return bfloat16_to_float(float_to_bfloat16(static_cast<float>(x))); }

// Dense at O2 BFloat16: MatMul and BiasAdd each round their Float32 result to BFloat16.
std::vector<double> dense_bf16(const std::vector<double>& x, std::int64_t rows, std::int64_t in,
                               const Tensor& w, const Tensor& b, bool relu) {
  const std::int64_t out = w.shape()[0];
  std::vector<double> y(static_cast<std::size_t>(rows * out));
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < out; ++j) {
      double acc = 0;
      for (std::int64_t k = 0; k < in; ++k) acc += x[i * in + k] * bf16(w.get(j * in + k));
      double v = bf16(f32(bf16(f32(acc)) + bf16(b.get(j))));
      y[i * out + j] = relu ? std::max(v, 0.0) : v;
    }
  }
  return y;
}

TEST(Amp, O2BFloat16LossIsTheRoundedComputation) {
  auto backbone = make_backbone();
  // Expected: every op's result rounded to BFloat16; the loss (under "_loss_fn") in Float32.
  const Tensor x = data();
  std::vector<double> xb(static_cast<std::size_t>(x.numel()));
  for (std::size_t i = 0; i < xb.size(); ++i) xb[i] = bf16(x.get(static_cast<std::int64_t>(i)));
  auto params = backbone->parameters_and_names();
  ASSERT_EQ(params.size(), 4u);
  const std::vector<double> h = dense_bf16(xb, kN, kIn, params[0].second->value,
                                           params[1].second->value, /*relu=*/true);
  const std::vector<double> o = dense_bf16(h, kN, kHidden, params[2].second->value,
                                           params[3].second->value, /*relu=*/false);
  const Tensor y = label();
  double expected = 0;
  for (std::size_t i = 0; i < o.size(); ++i) {
    const double d = o[i] - y.get(static_cast<std::int64_t>(i));
    expected += d * d;
  }
  expected /= static_cast<double>(o.size());

  auto step = build_train_network(backbone, optim::make_optimizer(kSgd),
                                  std::make_shared<LocalMSE>(), "O2", DType::kBFloat16,
                                  LossScale{});
  const Tensor loss = backend::to_host(step->step(x, y));
  EXPECT_EQ(loss.dtype(), DType::kFloat32);
  EXPECT_NEAR(loss.get(0), expected, 1e-6 * expected);
  // Without the roundings the loss differs by far more than that.
  auto plain = make_backbone();
  TrainOneStepCell f32_step(std::make_shared<WithLossCell>(plain, std::make_shared<LocalMSE>()),
                            optim::make_optimizer(kSgd));
  const double f32_loss = backend::to_host(f32_step.step(x, y)).get(0);
  EXPECT_GT(std::abs(f32_loss - expected), 1e-4 * expected);
  EXPECT_NEAR(f32_loss, expected, 2e-2 * expected);

  // Master weights and states stay Float32; the CPU ran the products on Float32 kernels.
  for (auto& [name, p] : backbone->parameters_and_names()) {
    EXPECT_EQ(p->value.dtype(), DType::kFloat32) << name;
  }
  for (const auto& [name, st] : step->states()) EXPECT_EQ(st.dtype(), DType::kFloat32) << name;
  const std::vector<std::string>& slow = step->compiled_function().float32_fallbacks();
  EXPECT_NE(std::find(slow.begin(), slow.end(), "MatMul"), slow.end());
  EXPECT_NE(std::find(slow.begin(), slow.end(), "BiasAddGrad"), slow.end());
  EXPECT_EQ(std::find(slow.begin(), slow.end(), "Cast"), slow.end());
}

TEST(Amp, O0IsBitwiseThePlainStep) {
  auto a = make_backbone();
  auto b = make_backbone();
  auto amp = build_train_network(a, optim::make_optimizer(kSgd), std::make_shared<LocalMSE>(),
                                 "O0");
  TrainOneStepCell plain(std::make_shared<WithLossCell>(b, std::make_shared<LocalMSE>()),
                         optim::make_optimizer(kSgd));
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(backend::to_host(amp->step(data(), label()))
                    .bitwise_equal(backend::to_host(plain.step(data(), label()))));
  }
  auto pa = a->parameters_and_names();
  auto pb = b->parameters_and_names();
  for (std::size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(pa[i].second->value.bitwise_equal(pb[i].second->value)) << pa[i].first;
  }
  EXPECT_FALSE(amp->loss_scale_manager().enabled());
}

TEST(Amp, O2Float16DynamicLossScaleSkipsOverflowsAndTrains) {
  // MindSpore's O2 default: DynamicLossScaleManager(2**24, 2, 2000). 2**24 times these
  // gradients overflows Float16 (max 65504): the first steps are skipped, halving the scale,
  // until the scaled backward pass fits.
  auto backbone = make_backbone();
  auto step = build_train_network(backbone, optim::make_optimizer(kSgd),
                                  std::make_shared<LocalMSE>(), "O2", DType::kFloat16);
  ASSERT_EQ(step->loss_scale_manager().kind, LossScale::Kind::kDynamic);
  const double first = backend::to_host(step->step(data(), label())).get(0);
  EXPECT_TRUE(step->overflow());
  double last = first;
  for (int i = 0; i < 40; ++i) last = backend::to_host(step->step(data(), label())).get(0);
  EXPECT_GT(step->skipped_steps(), 0);
  EXPECT_LT(step->skipped_steps(), 41);
  EXPECT_LT(step->loss_scale(), 16777216.0);
  EXPECT_EQ(step->num_steps() + step->skipped_steps(), 41);
  EXPECT_LT(last, 0.8 * first);
}

// conv → BatchNorm → ReLU → conv → Flatten → Dense, seeded weights.
std::shared_ptr<SequentialCell> make_conv_bn(std::uint64_t seed) {
  random::seed_all(seed, false);
  auto seq = std::make_shared<SequentialCell>();
  seq->append(std::make_shared<Conv2d>(Conv2dOptions(1, 4, 3).pad_mode("valid")))
      .append(std::make_shared<BatchNorm2d>(4))
      .append(std::make_shared<ReLU>())
      .append(std::make_shared<Conv2d>(Conv2dOptions(4, 4, 3).pad_mode("valid")))
      .append(std::make_shared<Flatten>())
      .append(std::make_shared<Dense>(4 * 2 * 2, 3));
  return seq;
}

TEST(Amp, RecomputeIsBitwiseTheKeptActivations) {
  // At O2 the recompute pass widens BatchNorm's BFloat16 input again and recomputes the ReLU
  // after it in the backward pass (core/passes/recompute.cc); at auto the ReLU computes in
  // Float32 and is narrowed after, and both the ReLU's and the narrowing's backward users get a
  // recomputation: the same step, bit for bit, as the pipeline without recompute.
  std::vector<double> xv(2 * 1 * 6 * 6), yv(2 * 3);
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = pseudo(static_cast<int>(i), 1.0);
  for (std::size_t i = 0; i < yv.size(); ++i) yv[i] = pseudo(static_cast<int>(i) + 50, 0.5);
  const Tensor x = Tensor::from_doubles(DType::kFloat32, {2, 1, 6, 6}, xv);
  const Tensor y = Tensor::from_doubles(DType::kFloat32, {2, 3}, yv);
  for (const auto& [level, applies] : {std::pair<const char*, int>{"O2", 1}, {"auto", 2}}) {
    SCOPED_TRACE(level);
    std::vector<Tensor> results[2];
    for (int variant = 0; variant < 2; ++variant) {
      auto net = make_conv_bn(3);
      net->set_train(true);  // BatchNorm on batch statistics
      auto step = build_train_network(net, optim::make_optimizer(kSgd),
                                      std::make_shared<LocalMSE>(), level, DType::kBFloat16,
                                      LossScale{});
      if (variant == 1) {
        step->compiled_function().set_passes("inline,repeat(simplify,cse,dce),fuse,dce");
      }
      for (int i = 0; i < 2; ++i) results[variant].push_back(backend::to_host(step->step(x, y)));
      int recomputed = 0;
      for (const ir::CNode* c : step->step_graph()->topo_order()) {
        recomputed += c->is_call_to("BatchNormApply") ? 1 : 0;
      }
      EXPECT_EQ(recomputed, variant == 0 ? applies : 0);
      for (auto& [name, p] : net->parameters_and_names()) results[variant].push_back(p->value);
    }
    ASSERT_EQ(results[0].size(), results[1].size());
    for (std::size_t i = 0; i < results[0].size(); ++i) {
      EXPECT_TRUE(results[0][i].bitwise_equal(results[1][i])) << i;
    }
  }
}

TEST(Amp, Misuse) {
  auto backbone = make_backbone();
  EXPECT_EQ(error_of([&] {
              build_train_network(backbone, optim::make_optimizer(kSgd),
                                  std::make_shared<LocalMSE>(), "O4");
            }),
            "amp: expected a level of O0, O1, O2, O3, auto, got 'O4'");
  EXPECT_EQ(error_of([&] {
              build_train_network(backbone, optim::make_optimizer(kSgd),
                                  std::make_shared<LocalMSE>(), "O2", DType::kFloat64);
            }),
            "TrainOneStepCell.set_amp: expected the low precision dtype Float16 or BFloat16, got "
            "Float64");
  EXPECT_EQ(error_of([&] {
              build_train_network(nullptr, optim::make_optimizer(kSgd));
            }),
            "build_train_network: expected a network, got null");
  auto step = build_train_network(backbone, optim::make_optimizer(kSgd),
                                  std::make_shared<LocalMSE>(), "O1");
  step->step(data(), label());
  EXPECT_EQ(error_of([&] { step->set_amp({.level = passes::AmpLevel::kO2}); }),
            "TrainOneStepCell.set_amp: set it before the first step");
}

}  // namespace
}  // namespace loom::nn
