// Tests of the normalization and loss family: table rows for the float64 gradient check (batch
// norm in training and inference, (N, C) and (N, C, H, W); dense and sparse cross entropy; L2
// loss); the PyTorch reference data (tests/ops/reference/norm_loss_reference.py) forward and
// backward in float32; small cases worked out by hand, every attribute mode included; bitwise
// equal results with 1 and 4 threads; and the exact error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "backends/backend.h"
#include "backends/cpu/cpu.h"
#include "backends/eager.h"
#include "backends/kernel.h"
#include "backends/thread_pool.h"
#include "core/ir/error.h"
#include "ops/op.h"
#include "tests/ops/op_table.h"
#include "tests/ops/test_util.h"
#include "tests/ops/reference.h"

namespace loom::testing {
namespace {

using ir::Value;
using Attrs = ir::Primitive::Attrs;

Attrs bn_attrs(bool training, double epsilon = 1e-5, double momentum = 0.1) {
  return {{"is_training", Value::boolean(training)},
          {"epsilon", Value::f32(static_cast<float>(epsilon))},
          {"momentum", Value::f32(static_cast<float>(momentum))}};
}

Attrs bn_grad_attrs(bool training, double epsilon = 1e-5) {
  return {{"is_training", Value::boolean(training)},
          {"epsilon", Value::f32(static_cast<float>(epsilon))}};
}

InputSpec normal(Shape shape) { return {.shape = std::move(shape)}; }
InputSpec positive(Shape shape) { return {.shape = std::move(shape), .gen = Gen::kPositive}; }
// Moving statistics: inputs without a gradient in MindSpore's rule.
InputSpec statistic(Shape shape, Gen gen) {
  return {.shape = std::move(shape), .gen = gen, .differentiable = false};
}
InputSpec labels(Shape shape, std::int64_t classes, DType dtype = DType::kInt32) {
  return {.shape = std::move(shape), .dtype = dtype, .gen = Gen::kIndices, .high = classes};
}

// BatchNorm rows: only y receives a cotangent (the statistics carry no gradient).
OpCase bn_row(std::string name, bool training, Shape x) {
  const std::int64_t c = x[1];
  return {.name = std::move(name), .op = "BatchNorm", .attrs = bn_attrs(training),
          .inputs = {normal(std::move(x)), positive({c}), normal({c}),
                     statistic({c}, Gen::kNormal), statistic({c}, Gen::kPositive)},
          .grad_outputs = {0}};
}

OpCase bn_grad_row(std::string name, bool training, Shape x) {
  const std::int64_t c = x[1];
  return {.name = std::move(name), .op = "BatchNormGrad", .attrs = bn_grad_attrs(training),
          .inputs = {normal(x), normal(x), positive({c}), normal({c}), positive({c})},
          .check_grad = false};
}

static const CaseRegistrar kRows({
    bn_row("batchnorm_train_nchw", true, {2, 3, 3, 3}),
    bn_row("batchnorm_train_nc", true, {6, 4}),
    bn_row("batchnorm_infer_nchw", false, {2, 3, 2, 3}),
    bn_row("batchnorm_infer_nc", false, {5, 3}),
    bn_grad_row("batchnorm_grad_train", true, {2, 3, 2, 2}),
    bn_grad_row("batchnorm_grad_infer", false, {4, 3}),
    {.name = "batchnorm_apply_relu", .op = "BatchNormApply",
     .attrs = {{"act", Value::string("relu")}},
     .inputs = {normal({2, 3, 2, 2}), normal({3}), normal({3}), normal({3}), positive({3})},
     .check_grad = false},
    // Labels are distributions (rows summing to 1), which the logits rule assumes.
    {.name = "softmax_cross_entropy", .op = "SoftmaxCrossEntropyWithLogits",
     .inputs = {normal({4, 5}), {.shape = {4, 5}, .gen = Gen::kProbability}},
     .grad_outputs = {0}},
    {.name = "sparse_softmax_cross_entropy_int32", .op = "SparseSoftmaxCrossEntropyWithLogits",
     .inputs = {normal({5, 4}), labels({5}, 4)}},
    {.name = "sparse_softmax_cross_entropy_int64", .op = "SparseSoftmaxCrossEntropyWithLogits",
     .inputs = {normal({3, 6}), labels({3}, 6, DType::kInt64)}},
    {.name = "sparse_softmax_cross_entropy_is_grad", .op = "SparseSoftmaxCrossEntropyWithLogits",
     .attrs = {{"is_grad", Value::boolean(true)}}, .inputs = {normal({4, 5}), labels({4}, 5)}},
    {.name = "l2loss", .op = "L2Loss", .inputs = {normal({3, 4})}},
    {.name = "l2loss_rank0", .op = "L2Loss", .inputs = {normal({})}},
});

Tensor f32(Shape shape, const std::vector<double>& values) {
  return Tensor::from_doubles(DType::kFloat32, std::move(shape), values);
}

Tensor i32(Shape shape, const std::vector<double>& values) {
  return Tensor::from_doubles(DType::kInt32, std::move(shape), values);
}

Value run(const std::string& op, const std::vector<Tensor>& args, Attrs attrs = {}) {
  std::vector<Value> values;
  for (const Tensor& t : args) values.push_back(Value::tensor(t));
  return backend::run_op(op, values, std::move(attrs));
}

std::vector<Value> run_bprop(const std::string& op, const std::vector<Tensor>& args, Attrs attrs,
                             const Value& dout) {
  ir::PrimitivePtr prim = ops::make_op(op, std::move(attrs));
  std::vector<Value> values;
  for (const Tensor& t : args) values.push_back(Value::tensor(t));
  const Value out = backend::run_op(*prim, values);
  return backend::run_bprop(*prim, values, out, dout);
}

const Value& part(const Value& tuple, std::size_t i) { return tuple.elements().at(i); }

// A cotangent of BatchNorm's 5-tuple: dy for y, zeros for the statistics.
Value bn_cotangent(const Tensor& dy, std::int64_t channels) {
  const Value zeros = Value::tensor(Tensor(dy.dtype(), {channels}));
  return Value::tuple({Value::tensor(dy), zeros, zeros, zeros, zeros});
}

// ---------------------------------------------------------------------------------------------
// PyTorch reference data

constexpr double kReferenceTolerance = 1e-5;

struct BatchNormReference {
  std::string name;  // as in norm_loss_reference.py's BN_CASES
  bool training;
};

const std::vector<BatchNormReference> kBatchNormReferences = {
    {"bn_train_nchw", true}, {"bn_train_nc", true}, {"bn_infer_nchw", false}};

TEST(NormLoss, BatchNormMatchesPyTorch) {
  const auto ref = read_reference("norm_loss.txt");
  for (const BatchNormReference& c : kBatchNormReferences) {
    SCOPED_TRACE(c.name);
    auto at = [&](const std::string& suffix) { return ref.at(c.name + "." + suffix); };
    const std::vector<Tensor> args{at("x"), at("scale"), at("bias"), at("mean"), at("variance")};
    const Value out = run("BatchNorm", args, bn_attrs(c.training));
    ASSERT_EQ(out.elements().size(), 5u);
    const char* names[] = {"y", "out1", "out2", "out3", "out4"};
    for (std::size_t i = 0; i < 5; ++i) {
      EXPECT_LT(max_abs_diff(part(out, i).as_tensor(), at(names[i])), kReferenceTolerance)
          << names[i];
    }
    const std::vector<Value> grads = run_bprop("BatchNorm", args, bn_attrs(c.training),
                                               bn_cotangent(at("dy"), args[1].numel()));
    ASSERT_EQ(grads.size(), 5u);
    EXPECT_LT(max_abs_diff(grads[0].as_tensor(), at("dx")), kReferenceTolerance);
    EXPECT_LT(max_abs_diff(grads[1].as_tensor(), at("dscale")), kReferenceTolerance);
    EXPECT_LT(max_abs_diff(grads[2].as_tensor(), at("dbias")), kReferenceTolerance);
    EXPECT_TRUE(grads[3].is_none());
    EXPECT_TRUE(grads[4].is_none());
  }
}

TEST(NormLoss, SoftmaxCrossEntropyMatchesPyTorch) {
  const auto ref = read_reference("norm_loss.txt");
  auto at = [&](const std::string& suffix) { return ref.at("sce_dense." + suffix); };
  const std::vector<Tensor> args{at("logits"), at("labels")};
  const Value out = run("SoftmaxCrossEntropyWithLogits", args);
  EXPECT_LT(max_abs_diff(part(out, 0).as_tensor(), at("loss")), kReferenceTolerance);
  EXPECT_LT(max_abs_diff(part(out, 1).as_tensor(), at("backprop")), kReferenceTolerance);
  const Value dout = Value::tuple(
      {Value::tensor(at("dloss")), Value::tensor(Tensor(DType::kFloat32, at("logits").shape()))});
  const std::vector<Value> grads = run_bprop("SoftmaxCrossEntropyWithLogits", args, {}, dout);
  EXPECT_LT(max_abs_diff(grads[0].as_tensor(), at("dlogits")), kReferenceTolerance);
  EXPECT_LT(max_abs_diff(grads[1].as_tensor(), at("dlabels")), kReferenceTolerance);
}

TEST(NormLoss, SparseSoftmaxCrossEntropyMatchesPyTorch) {
  const auto ref = read_reference("norm_loss.txt");
  auto at = [&](const std::string& suffix) { return ref.at("sce_sparse." + suffix); };
  const std::vector<Tensor> args{at("logits"), at("labels")};
  EXPECT_LT(max_abs_diff(run("SparseSoftmaxCrossEntropyWithLogits", args).as_tensor(),
                         at("loss")),
            kReferenceTolerance);
  const Value grad = run("SparseSoftmaxCrossEntropyWithLogits", args,
                         {{"is_grad", Value::boolean(true)}});
  EXPECT_LT(max_abs_diff(grad.as_tensor(), at("grad")), kReferenceTolerance);
  const std::vector<Value> grads =
      run_bprop("SparseSoftmaxCrossEntropyWithLogits", args, {}, Value::tensor(at("dout")));
  EXPECT_LT(max_abs_diff(grads[0].as_tensor(), at("dlogits")), kReferenceTolerance);
  EXPECT_TRUE(grads[1].is_none());
}

TEST(NormLoss, L2LossMatchesPyTorch) {
  const auto ref = read_reference("norm_loss.txt");
  auto at = [&](const std::string& suffix) { return ref.at("l2loss." + suffix); };
  EXPECT_LT(max_abs_diff(run("L2Loss", {at("x")}).as_tensor(), at("loss")), kReferenceTolerance);
  const std::vector<Value> grads = run_bprop("L2Loss", {at("x")}, {}, Value::tensor(at("dout")));
  EXPECT_LT(max_abs_diff(grads[0].as_tensor(), at("dx")), kReferenceTolerance);
}

// ---------------------------------------------------------------------------------------------
// Hand-worked cases

// Channel 0 holds 1, 3, 1, 3 and channel 1 holds 0, 0, 2, 2: batch means 2 and 1, biased
// variances 1 (unbiased 4/3). With ε = 0.5625 the inverse std is exactly 0.8.
const std::vector<double> kBnX = {1, 0, 3, 0, 1, 2, 3, 2};           // (4, 2)
const std::vector<double> kBnXNchw = {1, 3, 1, 3, 0, 0, 2, 2};       // (1, 2, 2, 2)
const std::vector<double> kBnDy = {1, 0, 0, 1, 2, 0, 0, -1};         // (4, 2)
const std::vector<double> kBnDyNchw = {1, 0, 2, 0, 0, 1, 0, -1};     // (1, 2, 2, 2)

std::vector<Tensor> bn_args(Shape x_shape, const std::vector<double>& x) {
  return {f32(std::move(x_shape), x), f32({2}, {1, 2}), f32({2}, {0, 1}), f32({2}, {0, 0}),
          f32({2}, {1, 1})};
}

TEST(NormLoss, BatchNormTrainingByHand) {
  const Value out = run("BatchNorm", bn_args({4, 2}, kBnX), bn_attrs(true, 0.5625));
  expect_tensor(part(out, 0), {4, 2}, {-0.8, -0.6, 0.8, -0.6, -0.8, 2.6, 0.8, 2.6}, 1e-6);
  // Moving statistics: 0.9·old + 0.1·batch, the variance's batch term unbiased.
  expect_tensor(part(out, 1), {2}, {0.2, 0.1}, 1e-6);
  expect_tensor(part(out, 2), {2}, {0.9 + 0.1 * 4 / 3.0, 0.9 + 0.1 * 4 / 3.0}, 1e-6);
  expect_tensor(part(out, 3), {2}, {2, 1}, 1e-6);
  expect_tensor(part(out, 4), {2}, {0.8, 0.8}, 1e-6);
}

TEST(NormLoss, BatchNormTrainingNchwByHand) {
  const Value out = run("BatchNorm", bn_args({1, 2, 2, 2}, kBnXNchw), bn_attrs(true, 0.5625));
  expect_tensor(part(out, 0), {1, 2, 2, 2}, {-0.8, 0.8, -0.8, 0.8, -0.6, -0.6, 2.6, 2.6}, 1e-6);
  expect_tensor(part(out, 3), {2}, {2, 1}, 1e-6);
  expect_tensor(part(out, 4), {2}, {0.8, 0.8}, 1e-6);
}

TEST(NormLoss, BatchNormMomentumWeighsTheBatchStatistic) {
  const Value half = run("BatchNorm", bn_args({4, 2}, kBnX), bn_attrs(true, 0.5625, 0.5));
  expect_tensor(part(half, 1), {2}, {1, 0.5}, 1e-6);
  expect_tensor(part(half, 2), {2}, {0.5 + 0.5 * 4 / 3.0, 0.5 + 0.5 * 4 / 3.0}, 1e-6);
  const Value frozen = run("BatchNorm", bn_args({4, 2}, kBnX), bn_attrs(true, 0.5625, 0.0));
  expect_tensor(part(frozen, 1), {2}, {0, 0}, 1e-6);
  expect_tensor(part(frozen, 2), {2}, {1, 1}, 1e-6);
  // y does not depend on momentum.
  expect_tensor(part(frozen, 0), {4, 2}, {-0.8, -0.6, 0.8, -0.6, -0.8, 2.6, 0.8, 2.6}, 1e-6);
}

TEST(NormLoss, BatchNormDefaultEpsilonAndMomentum) {
  // x (2, 2) = [[1, 2], [3, 6]]: variances 1 and 4.
  const Value out = run("BatchNorm", {f32({2, 2}, {1, 2, 3, 6}), f32({2}, {1, 2}),
                                      f32({2}, {0, 1}), f32({2}, {0, 0}), f32({2}, {1, 1})},
                        {{"is_training", Value::boolean(true)}});
  const double inv0 = 1 / std::sqrt(1.00001), inv1 = 1 / std::sqrt(4.00001);
  expect_tensor(part(out, 0), {2, 2}, {-inv0, 1 - 4 * inv1, inv0, 1 + 4 * inv1}, 1e-6);
  expect_tensor(part(out, 1), {2}, {0.2, 0.4}, 1e-6);
  expect_tensor(part(out, 2), {2}, {1.1, 1.7}, 1e-6);
  expect_tensor(part(out, 4), {2}, {inv0, inv1}, 1e-6);
}

TEST(NormLoss, BatchNormInferenceByHand) {
  // ε = 1 makes sqrt(variance + ε) = 2 and 4.
  const std::vector<Tensor> args{f32({2, 2}, {1, 2, 3, 6}), f32({2}, {1, 2}), f32({2}, {0, 1}),
                                 f32({2}, {1, 2}), f32({2}, {3, 15})};
  const Value out = run("BatchNorm", args, bn_attrs(false, 1.0, 0.5));
  expect_tensor(part(out, 0), {2, 2}, {0, 1, 1, 3}, 1e-6);
  expect_tensor(part(out, 1), {2}, {1, 2}, 1e-6);
  expect_tensor(part(out, 2), {2}, {3, 15}, 1e-6);
  expect_tensor(part(out, 3), {2}, {1, 2}, 1e-6);
  expect_tensor(part(out, 4), {2}, {3, 15}, 1e-6);
  // dx = dy·scale / 2 or 4, dscale = Σ dy·(x - mean) / sd, dbias = Σ dy.
  const std::vector<Value> grads = run_bprop("BatchNorm", args, bn_attrs(false, 1.0),
                                             bn_cotangent(f32({2, 2}, {1, 2, 3, 4}), 2));
  expect_tensor(grads[0], {2, 2}, {0.5, 1, 1.5, 2}, 1e-6);
  expect_tensor(grads[1], {2}, {3, 4}, 1e-6);
  expect_tensor(grads[2], {2}, {4, 6}, 1e-6);
  EXPECT_TRUE(grads[3].is_none());
  EXPECT_TRUE(grads[4].is_none());
}

TEST(NormLoss, BatchNormTrainingGradientByHand) {
  const std::vector<Value> grads = run_bprop("BatchNorm", bn_args({4, 2}, kBnX),
                                             bn_attrs(true, 0.5625),
                                             bn_cotangent(f32({4, 2}, kBnDy), 2));
  expect_tensor(grads[0], {4, 2},
                {-0.184, -0.512, -0.216, 1.088, 0.616, 0.512, -0.216, -1.088}, 1e-6);
  expect_tensor(grads[1], {2}, {-2.4, -1.6}, 1e-6);
  expect_tensor(grads[2], {2}, {3, 0}, 1e-6);
}

TEST(NormLoss, BatchNormGradOpByHand) {
  // Training: reserve spaces are the batch mean and inverse std.
  const Value train = run("BatchNormGrad",
                          {f32({1, 2, 2, 2}, kBnDyNchw), f32({1, 2, 2, 2}, kBnXNchw),
                           f32({2}, {1, 2}), f32({2}, {2, 1}), f32({2}, {0.8, 0.8})},
                          bn_grad_attrs(true, 0.5625));
  expect_tensor(part(train, 0), {1, 2, 2, 2},
                {-0.184, -0.216, 0.616, -0.216, -0.512, 1.088, 0.512, -1.088}, 1e-6);
  expect_tensor(part(train, 1), {2}, {-2.4, -1.6}, 1e-6);
  expect_tensor(part(train, 2), {2}, {3, 0}, 1e-6);
  // Inference: reserve spaces are the moving mean and variance.
  const Value infer = run("BatchNormGrad",
                          {f32({2, 2}, {1, 2, 3, 4}), f32({2, 2}, {1, 2, 3, 6}), f32({2}, {1, 2}),
                           f32({2}, {1, 2}), f32({2}, {3, 15})},
                          bn_grad_attrs(false, 1.0));
  expect_tensor(part(infer, 0), {2, 2}, {0.5, 1, 1.5, 2}, 1e-6);
  expect_tensor(part(infer, 1), {2}, {3, 4}, 1e-6);
  expect_tensor(part(infer, 2), {2}, {4, 6}, 1e-6);
}

TEST(NormLoss, BatchNormRunsInFloat64) {
  std::vector<Tensor> args = bn_args({4, 2}, kBnX);
  for (Tensor& t : args) {
    Tensor d(DType::kFloat64, t.shape());
    for (std::int64_t i = 0; i < t.numel(); ++i) d.set(i, t.get(i));
    t = d;
  }
  const Value out = run("BatchNorm", args, bn_attrs(true, 0.5625));
  EXPECT_EQ(part(out, 0).as_tensor().dtype(), DType::kFloat64);
  expect_tensor(part(out, 0), {4, 2}, {-0.8, -0.6, 0.8, -0.6, -0.8, 2.6, 0.8, 2.6}, 1e-14);
}

// Row 0: logits (0, 0, 0), label class 0; row 1: logits (1, 2, 3), label class 2.
const std::vector<double> kLogits = {0, 0, 0, 1, 2, 3};
const double kLn3 = std::log(3.0);
const double kLse123 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
const std::vector<double> kSoftmax = {1 / 3.0,
                                      1 / 3.0,
                                      1 / 3.0,
                                      std::exp(1.0 - kLse123),
                                      std::exp(2.0 - kLse123),
                                      std::exp(3.0 - kLse123)};

TEST(NormLoss, SoftmaxCrossEntropyByHand) {
  const std::vector<Tensor> args{f32({2, 3}, kLogits), f32({2, 3}, {1, 0, 0, 0, 0, 1})};
  const Value out = run("SoftmaxCrossEntropyWithLogits", args);
  expect_tensor(part(out, 0), {2}, {kLn3, kLse123 - 3}, 1e-6);
  expect_tensor(part(out, 1), {2, 3},
                {kSoftmax[0] - 1, kSoftmax[1], kSoftmax[2], kSoftmax[3], kSoftmax[4],
                 kSoftmax[5] - 1}, 1e-6);
  // dlogits = dloss · backprop, dlabels = -dloss · log_softmax.
  const Value dout = Value::tuple(
      {Value::tensor(f32({2}, {2, -1})), Value::tensor(Tensor(DType::kFloat32, {2, 3}))});
  const std::vector<Value> grads = run_bprop("SoftmaxCrossEntropyWithLogits", args, {}, dout);
  expect_tensor(grads[0], {2, 3},
                {2 * (kSoftmax[0] - 1), 2 * kSoftmax[1], 2 * kSoftmax[2], -kSoftmax[3],
                 -kSoftmax[4], -(kSoftmax[5] - 1)}, 1e-6);
  expect_tensor(grads[1], {2, 3},
                {2 * kLn3, 2 * kLn3, 2 * kLn3, 1 - kLse123, 2 - kLse123, 3 - kLse123}, 1e-6);
}

TEST(NormLoss, SoftmaxCrossEntropyIsStableForLargeLogits) {
  const Value out = run("SoftmaxCrossEntropyWithLogits",
                        {f32({2, 2}, {1000, 1000, -1000, 0}), f32({2, 2}, {0.5, 0.5, 1, 0})});
  expect_tensor(part(out, 0), {2}, {std::log(2.0), 1000}, 1e-4);
  expect_tensor(part(out, 1), {2, 2}, {0, 0, -1, 1}, 1e-6);
}

TEST(NormLoss, SparseSoftmaxCrossEntropyByHand) {
  for (DType label_dtype : {DType::kInt32, DType::kInt64}) {
    SCOPED_TRACE(std::string(dtype_name(label_dtype)));
    const std::vector<Tensor> args{f32({2, 3}, kLogits),
                                   Tensor::from_doubles(label_dtype, {2}, {0, 2})};
    expect_tensor(run("SparseSoftmaxCrossEntropyWithLogits", args), {},
                  {(kLn3 + kLse123 - 3) / 2}, 1e-6);
    const std::vector<double> grad = {(kSoftmax[0] - 1) / 2, kSoftmax[1] / 2, kSoftmax[2] / 2,
                                      kSoftmax[3] / 2,       kSoftmax[4] / 2,
                                      (kSoftmax[5] - 1) / 2};
    expect_tensor(run("SparseSoftmaxCrossEntropyWithLogits", args,
                      {{"is_grad", Value::boolean(true)}}),
                  {2, 3}, grad, 1e-6);
    const std::vector<Value> grads = run_bprop("SparseSoftmaxCrossEntropyWithLogits", args, {},
                                               Value::tensor(f32({}, {3})));
    std::vector<double> scaled = grad;
    for (double& g : scaled) g *= 3;
    expect_tensor(grads[0], {2, 3}, scaled, 1e-6);
    EXPECT_TRUE(grads[1].is_none());
  }
}

TEST(NormLoss, SparseSoftmaxCrossEntropyIsStableForLargeLogits) {
  expect_tensor(run("SparseSoftmaxCrossEntropyWithLogits",
                    {f32({2, 2}, {1000, -1000, -1000, 0}), i32({2}, {0, 0})}),
                {}, {500}, 1e-4);
}

TEST(NormLoss, L2LossByHand) {
  expect_tensor(run("L2Loss", {f32({3}, {1, 2, 3})}), {}, {7}, 1e-6);
  expect_tensor(run("L2Loss", {f32({2, 2}, {1, -1, 0.5, 2})}), {}, {3.125}, 1e-6);
  expect_tensor(run("L2Loss", {f32({}, {4})}), {}, {8}, 1e-6);
  const std::vector<Value> grads =
      run_bprop("L2Loss", {f32({3}, {1, 2, 3})}, {}, Value::tensor(f32({}, {2})));
  expect_tensor(grads[0], {3}, {2, 4, 6}, 1e-6);
}

// ---------------------------------------------------------------------------------------------
// Determinism: sums have a fixed order whatever the thread count.

std::vector<Tensor> run_kernel(const std::string& op, Attrs attrs,
                               const std::vector<Tensor>& inputs, backend::ThreadPool& pool) {
  ir::PrimitivePtr prim = ops::make_op(op, std::move(attrs));
  std::vector<Value> values;
  for (const Tensor& t : inputs) values.push_back(Value::tensor(t));
  std::vector<Tensor> outputs;
  std::function<void(const Value&)> collect = [&](const Value& v) {
    if (v.is_tensor()) {
      outputs.emplace_back(v.as_tensor().dtype(), v.as_tensor().shape());
    } else {
      for (const Value& e : v.elements()) collect(e);
    }
  };
  collect(backend::run_op(*prim, values));
  const backend::KernelDef* kernel = backend::cpu_backend().find_kernel(op, inputs[0].dtype());
  backend::cpu::CpuContext ctx(&pool);
  backend::run_kernel(*kernel, *prim, inputs, outputs, backend::cpu_backend(), &ctx);
  return outputs;
}

Tensor random_f32(Shape shape, std::uint64_t seed, double shift = 0) {
  Tensor t(DType::kFloat32, std::move(shape));
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(shift, 1.0);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, normal(rng));
  return t;
}

void expect_same_with_1_and_4_threads(const std::string& op, const Attrs& attrs,
                                      const std::vector<Tensor>& inputs) {
  backend::ThreadPool one(1), four(4);
  const std::vector<Tensor> a = run_kernel(op, attrs, inputs, one);
  const std::vector<Tensor> b = run_kernel(op, attrs, inputs, four);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(a[i].bitwise_equal(b[i])) << "output " << i;
  }
}

TEST(NormLoss, ResultsDoNotDependOnTheThreadCount) {
  // Long planes split into two runs each; short planes summed in blocks of rows.
  for (const Shape& x : {Shape{2, 3, 130, 130}, Shape{5000, 7}, Shape{300, 5, 4, 4}}) {
    SCOPED_TRACE(shape_to_string(x));
    const std::int64_t c = x[1];
    const std::vector<Tensor> args{random_f32(x, 1, 3.0), random_f32({c}, 2), random_f32({c}, 3),
                                   random_f32({c}, 4), random_f32({c}, 5, 4.0)};
    expect_same_with_1_and_4_threads("BatchNorm", bn_attrs(true), args);
    expect_same_with_1_and_4_threads(
        "BatchNormGrad", bn_grad_attrs(true),
        {random_f32(x, 6), args[0], args[1], random_f32({c}, 7, 3.0), random_f32({c}, 8, 4.0)});
  }
  Tensor labels(DType::kInt64, {20000});
  for (std::int64_t i = 0; i < labels.numel(); ++i) labels.set(i, static_cast<double>(i % 10));
  expect_same_with_1_and_4_threads("SparseSoftmaxCrossEntropyWithLogits", {},
                                   {random_f32({20000, 10}, 9), labels});
  expect_same_with_1_and_4_threads("L2Loss", {}, {random_f32({100000}, 10)});
}

// BatchNormApply on training BatchNorm's saved statistics (outputs 3 and 4) gives its y again,
// and ReLU(y) / ReLU6(y) with act relu / relu6, bitwise: what the recompute pass relies on.
// Float32 and Float64; long planes, short planes and rank 2; 1 and 4 threads.
TEST(NormLoss, BatchNormApplyReproducesTrainingBatchNormBitwise) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const Shape& x : {Shape{2, 3, 130, 130}, Shape{8, 5, 4, 4}, Shape{300, 7}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + shape_to_string(x));
      const std::int64_t c = x[1];
      Tensor scale = random_normal(dtype, {c}, 2);
      scale.set(0, 0.0);  // a zero scale
      Tensor var = random_normal(dtype, {c}, 5);
      for (std::int64_t i = 0; i < c; ++i) var.set(i, std::abs(var.get(i)) + 0.5);
      const std::vector<Tensor> args{random_normal(dtype, x, 1), scale,
                                     random_normal(dtype, {c}, 3), random_normal(dtype, {c}, 4),
                                     var};
      const Value bn = run("BatchNorm", args, bn_attrs(true));
      const Tensor y = part(bn, 0).as_tensor();
      for (const char* act : {"none", "relu", "relu6"}) {
        SCOPED_TRACE(act);
        const Attrs attrs{{"act", Value::string(act)}};
        const std::vector<Tensor> apply_args{args[0], args[1], args[2], part(bn, 3).as_tensor(),
                                             part(bn, 4).as_tensor()};
        const Tensor again = run("BatchNormApply", apply_args, attrs).as_tensor();
        ASSERT_EQ(again.shape(), y.shape());
        ASSERT_EQ(again.dtype(), dtype);
        std::int64_t differ = 0;
        for (std::int64_t i = 0; i < y.numel(); ++i) {
          double want = y.get(i);
          if (std::string(act) != "none") want = want < 0 ? 0 : want;
          if (std::string(act) == "relu6") want = want > 6 ? 6 : want;
          differ += again.get(i) != want;
        }
        EXPECT_EQ(differ, 0) << "elements that differ from act(BatchNorm's y)";
        expect_same_with_1_and_4_threads("BatchNormApply", attrs, apply_args);
      }
    }
  }
}

// Float32 batch statistics stay within two ulps of the exact ones (long double, two passes)
// where a one-pass Σx² - (Σx)²/m loses them: channel 0 has mean 3e4 and standard deviation 0.05
// (mean² / var about 4e11), channel 1's first element lies 1000 standard deviations out, channel
// 2 is plain. Long planes (runs) and short ones (blocks of rows) both.
TEST(NormLoss, BatchNormFloat32StatisticsAreAccurateForLargeMeans) {
  for (const Shape& shape : {Shape{4, 3, 10, 10}, Shape{2, 3, 130, 130}}) {
    SCOPED_TRACE(shape_to_string(shape));
    const std::int64_t n = shape[0], c = shape[1], s = shape[2] * shape[3];
    Tensor x(DType::kFloat32, shape);
    std::mt19937_64 rng(21);
    std::normal_distribution<double> normal(0.0, 1.0);
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const std::int64_t ch = (i / s) % c;
      x.set(i, ch == 0 ? 3e4 + 0.05 * normal(rng) : ch == 1 ? 5 + normal(rng) : normal(rng));
    }
    x.set(s, 1005);  // channel 1's first element
    const Tensor ones = Tensor::from_doubles(DType::kFloat32, {c}, std::vector<double>(c, 1.0));
    const Tensor zero(DType::kFloat32, {c});
    backend::ThreadPool two(2);
    const std::vector<Tensor> out =
        run_kernel("BatchNorm", bn_attrs(true), {x, ones, zero, zero, ones}, two);
    for (std::int64_t ch = 0; ch < c; ++ch) {
      SCOPED_TRACE(ch);
      long double sum = 0, squares = 0;
      for (std::int64_t b = 0; b < n; ++b) {
        for (std::int64_t i = 0; i < s; ++i) sum += x.data<float>()[(b * c + ch) * s + i];
      }
      const long double mean = sum / static_cast<long double>(n * s);
      for (std::int64_t b = 0; b < n; ++b) {
        for (std::int64_t i = 0; i < s; ++i) {
          const long double d = x.data<float>()[(b * c + ch) * s + i] - mean;
          squares += d * d;
        }
      }
      const long double var = squares / static_cast<long double>(n * s);
      const double inv_std = static_cast<double>(1 / std::sqrt(var + 1e-5L));
      EXPECT_NEAR(out[3].get(ch), static_cast<double>(mean),
                  2.4e-7 * std::fabs(static_cast<double>(mean)));
      EXPECT_NEAR(out[4].get(ch), inv_std, 2.4e-7 * inv_std);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Errors

Tensor zeros(Shape shape, DType dtype = DType::kFloat32) { return Tensor(dtype, std::move(shape)); }

std::vector<Tensor> bn_inputs(Shape x, Shape scale = {3}, Shape stat = {3}) {
  return {zeros(std::move(x)), zeros(scale), zeros(scale), zeros(stat), zeros(stat)};
}

TEST(NormLoss, BatchNormShapeErrors) {
  expect_error<ShapeError>([] { run("BatchNorm", bn_inputs({2, 3, 4, 4}, {4})); },
                           "BatchNorm: expected scale of shape (3), got (4)");
  expect_error<ShapeError>([] { run("BatchNorm", bn_inputs({2, 3, 4, 4}, {3}, {3, 1})); },
                           "BatchNorm: expected mean of shape (3), got (3, 1)");
  expect_error<ShapeError>(
      [] { run("BatchNorm", bn_inputs({2, 3, 4})); },
      "BatchNorm: expected x of rank 2 (N, C) or 4 (N, C, H, W), got (2, 3, 4)");
  expect_error<ValueError>(
      [] { run("BatchNorm", bn_inputs({1, 3, 1, 1}), bn_attrs(true)); },
      "BatchNorm: expected more than one value per channel in training, got x (1, 3, 1, 1)");
  // One value per channel is fine for inference.
  EXPECT_NO_THROW(run("BatchNorm", bn_inputs({1, 3}), bn_attrs(false)));
}

TEST(NormLoss, BatchNormTypeAndAttributeErrors) {
  expect_error<TypeError>(
      [] {
        run("BatchNorm", {zeros({2, 3}), zeros({3}, DType::kFloat64), zeros({3}), zeros({3}),
                          zeros({3})});
      },
      "BatchNorm: expected scale of dtype Float32 (as x), got Float64");
  expect_error<TypeError>(
      [] {
        run("BatchNorm", {zeros({2, 3}, DType::kInt32), zeros({3}), zeros({3}), zeros({3}),
                          zeros({3})});
      },
      "BatchNorm: expected a floating x, got Int32");
  expect_error<ValueError>([] { ops::make_op("BatchNorm", {{"format", Value::string("NHWC")}}); },
                           "BatchNorm: attribute 'format' expected 'NCHW', got 'NHWC'");
  expect_error<ValueError>([] { ops::make_op("BatchNorm", {{"momentum", Value::f32(1.5f)}}); },
                           "BatchNorm: attribute 'momentum' expected a value in [0, 1], got 1.5");
  expect_error<ValueError>([] { ops::make_op("BatchNorm", {{"epsilon", Value::f32(0.0f)}}); },
                           "BatchNorm: attribute 'epsilon' expected a value in (0, 1], got 0");
  expect_error<ValueError>(
      [] { run("BatchNorm", {zeros({2, 3}), zeros({3}), zeros({3}), zeros({3})}); },
      "BatchNorm: expected 5 inputs, got 4");
}

TEST(NormLoss, BatchNormGradErrors) {
  expect_error<ShapeError>(
      [] {
        run("BatchNormGrad", {zeros({2, 3}), zeros({2, 4}), zeros({3}), zeros({3}), zeros({3})});
      },
      "BatchNormGrad: expected dy and x of the same shape, got (2, 3) and (2, 4)");
  expect_error<ShapeError>(
      [] {
        run("BatchNormGrad", {zeros({2, 3}), zeros({2, 3}), zeros({3}), zeros({2}), zeros({3})});
      },
      "BatchNormGrad: expected reserve_space_1 of shape (3), got (2)");
}

TEST(NormLoss, BatchNormApplyErrors) {
  expect_error<ShapeError>(
      [] {
        run("BatchNormApply", {zeros({2, 3, 4, 4}), zeros({3}), zeros({3}), zeros({3}),
                               zeros({4})});
      },
      "BatchNormApply: expected inv_std of shape (3), got (4)");
  expect_error<ValueError>(
      [] { ops::make_op("BatchNormApply", {{"act", Value::string("gelu")}}); },
      "BatchNormApply: attribute 'act' expected one of none, relu, relu6, got 'gelu'");
}

TEST(NormLoss, CrossEntropyErrors) {
  expect_error<ShapeError>(
      [] { run("SoftmaxCrossEntropyWithLogits", {zeros({2, 3}), zeros({2, 4})}); },
      "SoftmaxCrossEntropyWithLogits: expected labels of shape (2, 3), got (2, 4)");
  expect_error<ShapeError>(
      [] { run("SoftmaxCrossEntropyWithLogits", {zeros({6}), zeros({6})}); },
      "SoftmaxCrossEntropyWithLogits: expected logits of rank 2 (N, C), got (6)");
  expect_error<TypeError>(
      [] {
        run("SoftmaxCrossEntropyWithLogits", {zeros({2, 3}), zeros({2, 3}, DType::kFloat64)});
      },
      "SoftmaxCrossEntropyWithLogits: expected labels of dtype Float32 (as logits), got Float64");
  expect_error<TypeError>(
      [] { run("SparseSoftmaxCrossEntropyWithLogits", {zeros({2, 3}), zeros({2})}); },
      "SparseSoftmaxCrossEntropyWithLogits: expected labels of dtype Int32 or Int64, got "
      "Float32");
  expect_error<ShapeError>(
      [] {
        run("SparseSoftmaxCrossEntropyWithLogits", {zeros({2, 3}), zeros({3}, DType::kInt32)});
      },
      "SparseSoftmaxCrossEntropyWithLogits: expected labels of shape (2), got (3)");
  expect_error<ShapeError>(
      [] {
        run("SparseSoftmaxCrossEntropyWithLogits", {zeros({2, 3, 1}), zeros({2}, DType::kInt32)});
      },
      "SparseSoftmaxCrossEntropyWithLogits: expected logits of rank 2 (N, C), got (2, 3, 1)");
  expect_error<TypeError>([] { run("L2Loss", {zeros({2}, DType::kInt32)}); },
                          "L2Loss: expected a floating tensor x, got <Tensor[Int32], (2)>");
}

TEST(NormLoss, SparseLabelsOutOfRangeAreValueErrors) {
  expect_error<ValueError>(
      [] { run("SparseSoftmaxCrossEntropyWithLogits", {zeros({2, 3}), i32({2}, {0, 3})}); },
      "SparseSoftmaxCrossEntropyWithLogits: expected labels in [0, 3), got 3 at index 1");
  expect_error<ValueError>(
      [] {
        run("SparseSoftmaxCrossEntropyWithLogits",
            {zeros({2, 3}), Tensor::from_doubles(DType::kInt64, {2}, {-1, 0})},
            {{"is_grad", Value::boolean(true)}});
      },
      "SparseSoftmaxCrossEntropyWithLogits: expected labels in [0, 3), got -1 at index 0");
}

}  // namespace
}  // namespace loom::testing
