// Activation family tests: table rows (gradient-checked in float64), exact cases written out by
// hand, the Philox-4x32-10 known-answer vectors, Dropout's determinism and keep rate, bprop
// results, the inference errors with their messages, and kernels giving the same bits with one
// and two threads.
//
// Expected numbers come from PyTorch (torch.sigmoid, torch.tanh, torch.softmax,
// torch.log_softmax, torch.nn.functional.gelu(approximate="tanh"), autograd for the bprops),
// MindSpore's documented GeLU example, and, for Dropout's masks, an independent Python
// implementation of Philox-4x32-10 checked against the same known answers.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "backends/eager.h"
#include "backends/kernel.h"
#include "core/random/philox.h"
#include "backends/thread_pool.h"
#include "core/ir/error.h"
#include "ops/op.h"
#include "tests/ops/op_table.h"
#include "tests/ops/test_util.h"

namespace loom::testing {
namespace {

using ir::Value;

InputSpec key_spec() {
  return {.shape = {2}, .dtype = DType::kInt64, .gen = Gen::kIndices, .high = 1 << 20,
          .differentiable = false};
}

static const CaseRegistrar kRows({
    {.name = "relu", .op = "ReLU", .inputs = {{.shape = {3, 4}, .gen = Gen::kAwayFromZero}}},
    {.name = "relu6", .op = "ReLU6", .inputs = {{.shape = {3, 4}, .gen = Gen::kAwayFromZero}}},
    // y away from the kink at 0, so both of its signs occur and finite differences see a
    // constant mask.
    {.name = "relu_grad", .op = "ReluGrad",
     .inputs = {{.shape = {3, 4}}, {.shape = {3, 4}, .gen = Gen::kAwayFromZero}}},
    {.name = "sigmoid", .op = "Sigmoid", .inputs = {{.shape = {3, 4}}}},
    {.name = "tanh", .op = "Tanh", .inputs = {{.shape = {3, 4}}}},
    {.name = "gelu", .op = "GeLU", .inputs = {{.shape = {3, 4}}}},
    {.name = "softmax", .op = "Softmax", .inputs = {{.shape = {3, 4}}}},
    {.name = "softmax_axis0", .op = "Softmax", .attrs = {{"axis", Value::ints({0})}},
     .inputs = {{.shape = {3, 4}}}},
    {.name = "softmax_middle_axis", .op = "Softmax", .attrs = {{"axis", Value::ints({1})}},
     .inputs = {{.shape = {2, 3, 4}}}},
    {.name = "softmax_vector", .op = "Softmax", .inputs = {{.shape = {5}}}},
    {.name = "log_softmax", .op = "LogSoftmax", .inputs = {{.shape = {3, 4}}}},
    {.name = "log_softmax_axis0", .op = "LogSoftmax", .attrs = {{"axis", Value::i64(0)}},
     .inputs = {{.shape = {3, 4}}}},
    {.name = "log_softmax_middle_axis", .op = "LogSoftmax", .attrs = {{"axis", Value::i64(-2)}},
     .inputs = {{.shape = {2, 3, 4}}}},
    {.name = "dropout", .op = "Dropout", .inputs = {{.shape = {4, 8}}, key_spec()}},
    {.name = "dropout_keep_0_8", .op = "Dropout", .attrs = {{"keep_prob", Value::f32(0.8f)}},
     .inputs = {{.shape = {3, 5}}, key_spec()}},
    {.name = "dropout_keep_all", .op = "Dropout", .attrs = {{"keep_prob", Value::f32(1.0f)}},
     .inputs = {{.shape = {2, 3}}, key_spec()}},
});

// ---- Helpers ------------------------------------------------------------------------------

Tensor f32(Shape shape, std::vector<float> values) {
  return Tensor::from_vector<float>(std::move(shape), values);
}
Tensor f64(Shape shape, std::vector<double> values) {
  return Tensor::from_vector<double>(std::move(shape), values);
}
Tensor i32(Shape shape, std::vector<std::int32_t> values) {
  return Tensor::from_vector<std::int32_t>(std::move(shape), values);
}
Tensor i64(Shape shape, std::vector<std::int64_t> values) {
  return Tensor::from_vector<std::int64_t>(std::move(shape), values);
}

Value run_value(std::string_view op, const std::vector<Tensor>& inputs,
                ir::Primitive::Attrs attrs = {}) {
  std::vector<Value> args;
  for (const Tensor& t : inputs) args.push_back(Value::tensor(t));
  return backend::run_op(op, args, std::move(attrs));
}

Tensor run(std::string_view op, const std::vector<Tensor>& inputs,
           ir::Primitive::Attrs attrs = {}) {
  return run_value(op, inputs, std::move(attrs)).as_tensor();
}

// (y, mask) of Dropout.
std::pair<Tensor, Tensor> dropout(const Tensor& x, std::int64_t k0, std::int64_t k1,
                                  float keep_prob) {
  const Value out =
      run_value("Dropout", {x, i64({2}, {k0, k1})}, {{"keep_prob", Value::f32(keep_prob)}});
  return {out.elements()[0].as_tensor(), out.elements()[1].as_tensor()};
}

// The gradients the op's bprop gives for `inputs` and the cotangent `dout`.
std::vector<Value> bprop(std::string_view op, const std::vector<Tensor>& inputs,
                         const Value& dout, ir::Primitive::Attrs attrs = {}) {
  ir::PrimitivePtr prim = ops::make_op(op, std::move(attrs));
  std::vector<Value> args;
  for (const Tensor& t : inputs) args.push_back(Value::tensor(t));
  const Value out = backend::run_op(*prim, args);
  return backend::run_bprop(*prim, args, out, dout);
}

constexpr double kF32 = 1e-6;   // absolute, for results of magnitude about 1
constexpr double kF64 = 1e-14;

// ---- Pointwise ----------------------------------------------------------------------------

TEST(Activation, ReLU) {
  expect_tensor(run("ReLU", {f32({5}, {-2, -0.5, 0, 0.5, 3})}), DType::kFloat32, {5},
                {0, 0, 0, 0.5, 3});
  expect_tensor(run("ReLU", {f64({2, 2}, {-1e300, 1e300, -0.0, 7})}), DType::kFloat64, {2, 2},
                {0, 1e300, 0, 7});
  expect_tensor(run("ReLU", {i32({4}, {-7, 0, 3, -1})}), DType::kInt32, {4}, {0, 0, 3, 0});
  expect_tensor(run("ReLU", {i64({3}, {-5, 5, 0})}), DType::kInt64, {3}, {0, 5, 0});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  expect_tensor(run("ReLU", {f32({2}, {std::nanf(""), -INFINITY})}), DType::kFloat32, {2},
                {nan, 0});
}

// Bits, not values: units that are off give +0 whatever dout holds (NaN, inf, -0), units that
// are on give dout's bits unchanged (-0 stays -0).
TEST(Activation, ReluGrad) {
  const float nanf = std::numeric_limits<float>::quiet_NaN();
  const Tensor g32 = run("ReluGrad", {f32({10}, {1, 2, 3, 4, 5, nanf, nanf, -INFINITY, 7, -0.0f}),
                                      f32({10}, {-1, 0, -0.0f, 1e-30f, 2, -3, 4, 5, nanf, 1})});
  const Tensor e32 = f32({10}, {0, 0, 0, 4, 5, 0, nanf, -INFINITY, 0, -0.0f});
  ASSERT_EQ(g32.dtype(), DType::kFloat32);
  ASSERT_EQ(g32.shape(), (Shape{10}));
  for (std::int64_t i = 0; i < 10; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(std::bit_cast<std::uint32_t>(g32.data<float>()[i]),
              std::bit_cast<std::uint32_t>(e32.data<float>()[i]));
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor g64 = run("ReluGrad", {f64({2, 3}, {-2.5, nan, INFINITY, 1e300, 3, -0.0}),
                                      f64({2, 3}, {4e-320, -1e-300, -INFINITY, INFINITY, 0, 6})});
  const Tensor e64 = f64({2, 3}, {-2.5, 0, 0, 1e300, 0, -0.0});
  ASSERT_EQ(g64.dtype(), DType::kFloat64);
  ASSERT_EQ(g64.shape(), (Shape{2, 3}));
  for (std::int64_t i = 0; i < 6; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(std::bit_cast<std::uint64_t>(g64.data<double>()[i]),
              std::bit_cast<std::uint64_t>(e64.data<double>()[i]));
  }
  // Empty tensors are fine.
  EXPECT_EQ(run("ReluGrad", {f32({0, 3}, {}), f32({0, 3}, {})}).shape(), (Shape{0, 3}));
}

TEST(Activation, ReLU6) {
  expect_tensor(run("ReLU6", {f32({7}, {-1, 0, 0.25, 3, 6, 7.5, 1e30f})}), DType::kFloat32, {7},
                {0, 0, 0.25, 3, 6, 6, 6});
  expect_tensor(run("ReLU6", {f64({3}, {-INFINITY, 5.999, INFINITY})}), DType::kFloat64, {3},
                {0, 5.999, 6});
}

TEST(Activation, Sigmoid) {
  expect_tensor(run("Sigmoid", {f32({5}, {-3, -1, 0, 1, 3})}), DType::kFloat32, {5},
                {0.0474258736, 0.268941432, 0.5, 0.731058598, 0.952574134}, kF32);
  // Far tails keep their relative accuracy (no 1 - (1 - tiny)).
  const Tensor y = run("Sigmoid", {f64({4}, {-100, -20, 20, 100})});
  EXPECT_NEAR(y.get(0) / 3.7200759760208356e-44, 1, 1e-13);
  EXPECT_NEAR(y.get(1) / 2.0611536181902037e-09, 1, 1e-13);
  EXPECT_NEAR(y.get(2), 0.99999999793884631, kF64);
  EXPECT_EQ(y.get(3), 1.0);
  expect_tensor(run("Sigmoid", {f32({2}, {-INFINITY, INFINITY})}), DType::kFloat32, {2}, {0, 1});
}

TEST(Activation, Tanh) {
  expect_tensor(run("Tanh", {f32({5}, {-2, -0.5, 0, 0.5, 2})}), DType::kFloat32, {5},
                {-0.964027584, -0.462117165, 0, 0.462117165, 0.964027584}, kF32);
  expect_tensor(run("Tanh", {f64({3}, {-30, 1, 30})}), DType::kFloat64, {3},
                {-1, 0.76159415595576485, 1}, kF64);
}

TEST(Activation, GeLUIsMindSporesTanhForm) {
  // MindSpore's documented example; the erf form would give 0.8413447, 1.9544997, 2.9959505.
  expect_tensor(run("GeLU", {f32({3}, {1, 2, 3})}), DType::kFloat32, {3},
                {0.841192, 1.9545976, 2.9963627}, 1e-6);
  expect_tensor(run("GeLU", {f32({5}, {-3, -1, -0.5, 0, 0.5})}), DType::kFloat32, {5},
                {-0.00363743305, -0.158807993, -0.154285997, 0, 0.345714003}, kF32);
  expect_tensor(run("GeLU", {f64({6}, {-3, -1, -0.5, 0, 0.5, 1})}), DType::kFloat64, {6},
                {-0.0036373920817729943, -0.15880800939172324, -0.15428599017485606, 0,
                 0.34571400982514394, 0.84119199060827676},
                1e-15);
  // Far tails: x for large x, a signed zero for very negative x, never NaN.
  expect_tensor(run("GeLU", {f32({3}, {-1e20f, 50, 1e20f})}), DType::kFloat32, {3},
                {0, 50, static_cast<double>(1e20f)}, 0);
}

// The vectorized pointwise kernels agree with the scalar formulas over spans and chunks.
TEST(Activation, PointwiseOnLongInputsMatchesTheScalarFormulas) {
  const std::int64_t n = 40000;
  Tensor x32(DType::kFloat32, {n}), x64(DType::kFloat64, {n});
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = 12.0 * std::sin(0.37 * static_cast<double>(i));
    x32.set(i, v);
    x64.set(i, static_cast<double>(static_cast<float>(v)));
  }
  auto gelu = [](double x) {
    return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
  };
  auto sigmoid = [](double x) { return 1 / (1 + std::exp(-x)); };
  const Tensor s32 = run("Sigmoid", {x32}), s64 = run("Sigmoid", {x64});
  const Tensor t32 = run("Tanh", {x32}), t64 = run("Tanh", {x64});
  const Tensor g32 = run("GeLU", {x32}), g64 = run("GeLU", {x64});
  for (std::int64_t i = 0; i < n; ++i) {
    const double x = x64.get(i);
    ASSERT_NEAR(s64.get(i), sigmoid(x), 1e-15) << x;
    ASSERT_NEAR(t64.get(i), std::tanh(x), 1e-15) << x;
    ASSERT_NEAR(g64.get(i), gelu(x), 1e-14 * std::max(1.0, std::abs(x))) << x;
    ASSERT_NEAR(s32.get(i), sigmoid(x), 2e-7) << x;
    // Eigen's vectorized float tanh is within a few ulps; beyond |x| = 7.9 it rounds to +-1.
    ASSERT_NEAR(t32.get(i), std::tanh(x), 4e-7) << x;
    ASSERT_NEAR(g32.get(i), gelu(x), 2e-7 * std::max(1.0, std::abs(x))) << x;
  }
}

// ---- Softmax and LogSoftmax ---------------------------------------------------------------

TEST(Activation, Softmax) {
  expect_tensor(run("Softmax", {f32({3}, {1, 2, 3})}), DType::kFloat32, {3},
                {0.09003057, 0.24472847, 0.66524096}, 1e-7);
  // Subtracting the maximum first: no overflow.
  expect_tensor(run("Softmax", {f32({3}, {1000, 1001, 1002})}), DType::kFloat32, {3},
                {0.0900305733, 0.244728476, 0.665240943}, kF32);
  expect_tensor(run("Softmax", {f64({3}, {1, 2, 3})}), DType::kFloat64, {3},
                {0.090030573170380462, 0.24472847105479767, 0.6652409557748219}, kF64);
  const Tensor x = f32({3, 2}, {1, 2, 3, 4, 5, 7});
  expect_tensor(run("Softmax", {x}, {{"axis", Value::ints({0})}}), DType::kFloat32, {3, 2},
                {0.015876241, 0.0063774609, 0.117310427, 0.0471234173, 0.866813362,
                 0.946499169},
                kF32);
  expect_tensor(run("Softmax", {x}, {{"axis", Value::ints({-2})}}), DType::kFloat32, {3, 2},
                {0.015876241, 0.0063774609, 0.117310427, 0.0471234173, 0.866813362,
                 0.946499169},
                kF32);
  const Tensor x3 = f32({2, 3, 2}, {0, 1, 2, 0.5, -1, 3, 4, 4, 0, -2, 1, 1});
  expect_tensor(run("Softmax", {x3}, {{"axis", Value::ints({1})}}), DType::kFloat32, {2, 3, 2},
                {0.114195198, 0.111165613, 0.843794703, 0.0674253553, 0.0420100652, 0.821408987,
                 0.936239541, 0.950330257, 0.017147826, 0.0023556333, 0.0466126204,
                 0.0473141558},
                kF32);
  // A scalar is its own (single-element) axis.
  expect_tensor(run("Softmax", {f32({}, {-3})}), DType::kFloat32, {}, {1});
}

TEST(Activation, LogSoftmax) {
  expect_tensor(run("LogSoftmax", {f32({3}, {1, 2, 3})}), DType::kFloat32, {3},
                {-2.40760589, -1.40760589, -0.407605946}, kF32);
  expect_tensor(run("LogSoftmax", {f32({3}, {-1000, 0, 1000})}), DType::kFloat32, {3},
                {-2000, -1000, 0}, 0);
  expect_tensor(run("LogSoftmax", {f32({3, 2}, {1, 2, 3, 4, 5, 7})}, {{"axis", Value::i64(0)}}),
                DType::kFloat32, {3, 2},
                {-4.14293146, -5.05498505, -2.1429317, -3.05498528, -0.142931595, -0.054985214},
                2e-6);
  const Tensor x3 = f32({2, 3, 2}, {0, 1, 2, 0.5, -1, 3, 4, 4, 0, -2, 1, 1});
  expect_tensor(run("LogSoftmax", {x3}, {{"axis", Value::i64(1)}}), DType::kFloat32, {2, 3, 2},
                {-2.16984606, -2.19673419, -0.169846043, -2.69673419, -3.16984606, -0.196734145,
                 -0.0658839121, -0.0509457104, -4.06588411, -6.05094576, -3.06588387,
                 -3.05094576},
                2e-6);
  expect_tensor(run("LogSoftmax", {f64({}, {5})}), DType::kFloat64, {}, {0});
}

TEST(Activation, SoftmaxPropagatesNaNAlongItsLineOnly) {
  const Tensor y = run("Softmax", {f32({2, 2}, {std::nanf(""), 1, 0, 0})});
  EXPECT_TRUE(std::isnan(y.get(0)));
  EXPECT_TRUE(std::isnan(y.get(1)));
  EXPECT_FLOAT_EQ(y.get(2), 0.5f);
  EXPECT_FLOAT_EQ(y.get(3), 0.5f);
}

TEST(Activation, SoftmaxOfEmptyTensors) {
  EXPECT_EQ(run("Softmax", {Tensor(DType::kFloat32, {0, 3})}).shape(), (Shape{0, 3}));
  EXPECT_EQ(run("LogSoftmax", {Tensor(DType::kFloat64, {2, 0})}, {{"axis", Value::i64(0)}})
                .shape(),
            (Shape{2, 0}));
}

// ---- Philox and Dropout -------------------------------------------------------------------

TEST(Activation, PhiloxMatchesRandom123KnownAnswers) {
  using random::philox::Block;
  EXPECT_EQ(random::philox::block({0, 0, 0, 0}, {0, 0}),
            (Block{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(random::philox::block({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
                                   {0xffffffff, 0xffffffff}),
            (Block{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(random::philox::block({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
                                   {0xa4093822, 0x299f31d0}),
            (Block{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
  // The stream layout: seed is the key (low word first), index and stream fill the counter.
  EXPECT_EQ(random::philox::stream_block(0x299f31d0a4093822ull, 0x0370734413198a2eull,
                                          0x85a308d3243f6a88ull),
            (Block{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
  // The batched form gives the same blocks, including across a carry into the counter's
  // second word.
  for (std::uint64_t first : {std::uint64_t{0}, std::uint64_t{0xfffffff8}, ~std::uint64_t{20}}) {
    std::uint32_t words[4][random::philox::kBatch];
    random::philox::stream_batch(-5, 1234567, first, words);
    for (int j = 0; j < random::philox::kBatch; ++j) {
      const Block b = random::philox::stream_block(-5, 1234567, first + j);
      for (int w = 0; w < 4; ++w) ASSERT_EQ(words[w][j], b[w]) << first << " " << j << " " << w;
    }
  }
  EXPECT_EQ(random::philox::uniform01(0), 0.0f);
  EXPECT_EQ(random::philox::uniform01(0xffffffff), 1.0f - 0x1p-24f);
  EXPECT_EQ(random::philox::uniform01(0x80000000), 0.5f);
  // The integer bound agrees with comparing uniform01 with the probability.
  for (double p : {1e-9, 0.1, 0.5, static_cast<double>(0.3f), 0.75, 1.0 - 1e-12, 1.0}) {
    const std::uint32_t bound = random::philox::uniform01_bound(p);
    for (std::uint32_t w : {0u, 0xffu, 0x100u, 0x7fffffffu, 0x80000000u, 0xbfffff00u,
                            0xc0000000u, 0xffffffffu,
                            static_cast<std::uint32_t>(std::min(p * 0x1p32, 0x1p32 - 1))}) {
      EXPECT_EQ((w >> 8) < bound, random::philox::uniform01(w) < p) << p << " " << w;
    }
  }
}

TEST(Activation, DropoutMaskMatchesAnIndependentPhilox) {
  const Tensor x = f32({10}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  auto [y, mask] = dropout(x, 42, 7, 0.5f);
  expect_tensor(mask, DType::kFloat32, {10}, {1, 0, 1, 1, 0, 1, 0, 1, 1, 0});
  expect_tensor(y, DType::kFloat32, {10}, {2, 0, 6, 8, 0, 12, 0, 16, 18, 0});
  expect_tensor(dropout(x, 42, 7, 0.8f).second, DType::kFloat32, {10},
                {1, 0, 1, 1, 0, 1, 1, 1, 1, 0});
  // Either key word changes the draws, including the high half of the first.
  expect_tensor(dropout(x, 42, 8, 0.5f).second, DType::kFloat32, {10},
                {0, 1, 0, 1, 0, 1, 0, 0, 1, 0});
  expect_tensor(dropout(x, (std::int64_t{1} << 40) + 42, 7, 0.5f).second, DType::kFloat32, {10},
                {0, 0, 1, 0, 0, 1, 0, 0, 1, 0});
  // Float64 draws the same mask; y is x * mask / keep_prob in its dtype.
  const Tensor x64 = f64({10}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  auto [y64, mask64] = dropout(x64, 42, 7, 0.8f);
  expect_tensor(mask64, DType::kFloat64, {10}, {1, 0, 1, 1, 0, 1, 1, 1, 1, 0});
  const double s = 1.0 / static_cast<double>(0.8f);
  expect_tensor(y64, DType::kFloat64, {10}, {s, 0, 3 * s, 4 * s, 0, 6 * s, 7 * s, 8 * s, 9 * s, 0},
                1e-15);
}

TEST(Activation, DropoutIsAFunctionOfKeyAndIndexOnly) {
  const std::int64_t n = 100000;
  Tensor x(DType::kFloat32, {n});
  for (std::int64_t i = 0; i < n; ++i) x.set(i, std::cos(0.01 * static_cast<double>(i)));
  const Tensor m1 = dropout(x, 1234, 5, 0.5f).second;
  EXPECT_TRUE(m1.bitwise_equal(dropout(x, 1234, 5, 0.5f).second));
  EXPECT_FALSE(m1.bitwise_equal(dropout(x, 1235, 5, 0.5f).second));
  EXPECT_FALSE(m1.bitwise_equal(dropout(x, 1234, 6, 0.5f).second));
  // Not the values of x, nor its shape or length, only the flat index: a reshaped x and a prefix
  // of it draw the same mask.
  EXPECT_TRUE(m1.bitwise_equal(dropout(Tensor(DType::kFloat32, {n}), 1234, 5, 0.5f).second));
  EXPECT_TRUE(
      m1.reshape({100, 1000}).bitwise_equal(dropout(x.reshape({100, 1000}), 1234, 5, 0.5f).second));
  const Tensor prefix = dropout(Tensor(DType::kFloat32, {13}), 1234, 5, 0.5f).second;
  for (std::int64_t i = 0; i < 13; ++i) EXPECT_EQ(prefix.get(i), m1.get(i)) << i;
}

TEST(Activation, DropoutKeepsAboutKeepProbOfTheElements) {
  const std::int64_t n = 100000;
  const Tensor x = Tensor(DType::kFloat32, {n});
  for (float p : {0.1f, 0.5f, 0.9f}) {
    for (std::int64_t key : {0, 1, 987654321}) {
      const Tensor mask = dropout(x, key, 0, p).second;
      double kept = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const double m = mask.get(i);
        ASSERT_TRUE(m == 0 || m == 1);
        kept += m;
      }
      const double sigma = std::sqrt(p * (1.0 - p) / static_cast<double>(n));
      EXPECT_LT(std::abs(kept / static_cast<double>(n) - p), 3 * sigma)
          << "keep_prob " << p << " key " << key;
    }
  }
  const Tensor all = dropout(x, 3, 4, 1.0f).second;
  for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(all.get(i), 1.0) << i;
}

TEST(Activation, DropoutPropagatesNaNInDroppedUnits) {
  // y = x * mask / keep_prob, so a dropped NaN or inf stays NaN (mask[1] is 0 for this key).
  auto [y, mask] = dropout(f32({3}, {1, std::nanf(""), INFINITY}), 42, 7, 0.5f);
  EXPECT_EQ(mask.get(1), 0.0);
  EXPECT_TRUE(std::isnan(y.get(1)));
  EXPECT_EQ(y.get(2), INFINITY);
}

// ---- Bprops -------------------------------------------------------------------------------

TEST(Activation, ReLUAndReLU6GradientsAreZeroAtTheKinks) {
  const Value dout = Value::tensor(f64({6}, {1, 2, 3, 4, 5, 6}));
  expect_tensor(bprop("ReLU", {f64({6}, {-1, 0, 1e-300, 2, 6, 7})}, dout)[0].as_tensor(),
                DType::kFloat64, {6}, {0, 0, 3, 4, 5, 6});
  expect_tensor(bprop("ReLU6", {f64({6}, {-1, 0, 1e-300, 2, 6, 7})}, dout)[0].as_tensor(),
                DType::kFloat64, {6}, {0, 0, 3, 4, 0, 0});
  // A NaN cotangent does not leak into units that are off.
  const Value nan_dout = Value::tensor(f64({2}, {NAN, NAN}));
  const Tensor g = bprop("ReLU", {f64({2}, {-1, 1})}, nan_dout)[0].as_tensor();
  EXPECT_EQ(g.get(0), 0.0);
  EXPECT_TRUE(std::isnan(g.get(1)));
}

// ReluGrad is linear in dout with ReLU's mask and constant in y (away from 0).
TEST(Activation, ReluGradBprop) {
  const Tensor dout = f64({4}, {1, 2, 3, 4});
  const Tensor y = f64({4}, {-1, 0, 0.5, 2});
  const Value g = Value::tensor(f64({4}, {10, 20, NAN, 40}));
  const std::vector<Value> grads = bprop("ReluGrad", {dout, y}, g);
  ASSERT_EQ(grads.size(), 2u);
  expect_tensor(grads[0].as_tensor(), DType::kFloat64, {4}, {0, 0, NAN, 40});
  expect_tensor(grads[1].as_tensor(), DType::kFloat64, {4}, {0, 0, 0, 0});
}

TEST(Activation, BpropsMatchAutograd) {
  const Tensor x = f64({3}, {0.5, -1, 2});
  const Value dout = Value::tensor(f64({3}, {1, 2, -1}));
  expect_tensor(bprop("Softmax", {x}, dout)[0].as_tensor(), DType::kFloat64, {3},
                {0.26855916620818354, 0.09903622303604824, -0.3675953892442318}, kF64);
  expect_tensor(bprop("LogSoftmax", {x}, dout)[0].as_tensor(), DType::kFloat64, {3},
                {0.64941921571992656, 1.9217748534586252, -2.571194069178552}, kF64);
  expect_tensor(bprop("GeLU", {x}, dout)[0].as_tensor(), DType::kFloat64, {3},
                {0.86736990353464238, -0.16592816769156504, -1.0860992566236183}, kF64);
  // tanh'(x) = 1 - tanh^2, sigmoid'(x) = s (1 - s).
  const double t = std::tanh(0.5), s = 1 / (1 + std::exp(-0.5));
  expect_tensor(bprop("Tanh", {f64({1}, {0.5})}, Value::tensor(f64({1}, {3})))[0].as_tensor(),
                DType::kFloat64, {1}, {3 * (1 - t * t)}, kF64);
  expect_tensor(bprop("Sigmoid", {f64({1}, {0.5})}, Value::tensor(f64({1}, {3})))[0].as_tensor(),
                DType::kFloat64, {1}, {3 * s * (1 - s)}, kF64);
}

TEST(Activation, DropoutGradientIsDoutTimesMaskOverKeepProb) {
  const Tensor x = f32({10}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  const Value dout = Value::tuple({Value::tensor(f32({10}, {1, 1, 1, 1, 1, 2, 2, 2, 2, 2})),
                                   Value::tensor(f32({10}, {9, 9, 9, 9, 9, 9, 9, 9, 9, 9}))});
  const std::vector<Value> g = bprop("Dropout", {x, i64({2}, {42, 7})}, dout);
  ASSERT_EQ(g.size(), 2u);
  expect_tensor(g[0].as_tensor(), DType::kFloat32, {10}, {2, 0, 2, 2, 0, 4, 0, 4, 4, 0});
  EXPECT_TRUE(g[1].is_none());
}

// ---- Inference errors ---------------------------------------------------------------------

TEST(Activation, DtypeErrors) {
  EXPECT_EQ(error_of<TypeError>([] { run("Sigmoid", {i32({2}, {1, 2})}); }),
            "Sigmoid: expected a floating tensor, got Int32");
  EXPECT_EQ(error_of<TypeError>([] { run("GeLU", {i64({1}, {1})}); }),
            "GeLU: expected a floating tensor, got Int64");
  EXPECT_EQ(error_of<TypeError>([] { run("Softmax", {i32({2}, {1, 2})}); }),
            "Softmax: expected a floating tensor, got Int32");
  EXPECT_EQ(error_of<TypeError>([] {
              Tensor b(DType::kBool, {2});
              run("ReLU", {b});
            }),
            "ReLU: expected a floating, Int32 or Int64 tensor, got Bool");
  EXPECT_EQ(error_of<TypeError>([] { run("Dropout", {i32({2}, {1, 2}), i64({2}, {0, 0})}); }),
            "Dropout: expected a floating tensor, got Int32");
  EXPECT_EQ(error_of<TypeError>([] { run("ReluGrad", {i32({2}, {1, 2}), i32({2}, {1, 2})}); }),
            "ReluGrad: expected a floating tensor, got Int32");
  EXPECT_EQ(error_of<TypeError>([] { run("ReluGrad", {f32({2}, {1, 2}), f64({2}, {1, 2})}); }),
            "ReluGrad: expected dout and y of the same dtype, got Float32 and Float64");
  EXPECT_EQ(error_of<TypeError>([] { run("Dropout", {f32({2}, {1, 2}), i32({2}, {0, 0})}); }),
            "Dropout: expected an Int64 key, got Int32");
}

TEST(Activation, ShapeAndAttributeErrors) {
  EXPECT_EQ(error_of<ValueError>([] {
              run("Softmax", {f32({2, 3}, std::vector<float>(6))}, {{"axis", Value::ints({2})}});
            }),
            "Softmax: expected axis in [-2, 2) for shape (2, 3), got 2");
  EXPECT_EQ(error_of<ValueError>([] {
              run("Softmax", {f32({2, 3}, std::vector<float>(6))},
                  {{"axis", Value::ints({0, 1})}});
            }),
            "Softmax: attribute 'axis' expected one axis, got (0, 1)");
  EXPECT_EQ(error_of<ValueError>([] {
              run("Softmax", {f32({2}, {1, 2})}, {{"axis", Value::ints({})}});
            }),
            "Softmax: attribute 'axis' expected one axis, got ()");
  EXPECT_EQ(error_of<ValueError>([] {
              run("LogSoftmax", {f32({4}, {1, 2, 3, 4})}, {{"axis", Value::i64(-2)}});
            }),
            "LogSoftmax: expected axis in [-1, 1) for shape (4), got -2");
  EXPECT_EQ(error_of<ShapeError>([] {
              run("Dropout", {f32({2}, {1, 2}), i64({3}, {0, 0, 0})});
            }),
            "Dropout: expected a key of shape (2), got (3)");
  EXPECT_EQ(error_of<ShapeError>([] {
              run("Dropout", {f32({2}, {1, 2}), i64({1, 2}, {0, 0})});
            }),
            "Dropout: expected a key of shape (2), got (1, 2)");
  EXPECT_EQ(error_of<ValueError>([] {
              run("Dropout", {f32({2}, {1, 2}), i64({2}, {0, 0})},
                  {{"keep_prob", Value::f32(0.0f)}});
            }),
            "Dropout: attribute 'keep_prob' expected a value in (0, 1], got 0");
  EXPECT_EQ(error_of<ValueError>([] {
              run("Dropout", {f32({2}, {1, 2}), i64({2}, {0, 0})},
                  {{"keep_prob", Value::f32(1.5f)}});
            }),
            "Dropout: attribute 'keep_prob' expected a value in (0, 1], got 1.5");
  EXPECT_EQ(error_of<ValueError>([] { run("Dropout", {f32({2}, {1, 2})}); }),
            "Dropout: expected 2 inputs, got 1");
  EXPECT_EQ(error_of<ShapeError>([] {
              run("ReluGrad",
                  {f32({2, 3}, std::vector<float>(6)), f32({3, 2}, std::vector<float>(6))});
            }),
            "ReluGrad: expected dout and y of the same shape, got (2, 3) and (3, 2)");
  EXPECT_EQ(error_of<ShapeError>([] {
              run("ReluGrad",
                  {f32({6}, std::vector<float>(6)), f32({1, 6}, std::vector<float>(6))});
            }),
            "ReluGrad: expected dout and y of the same shape, got (6) and (1, 6)");
}

TEST(Activation, InferenceKeepsUnknownShapes) {
  auto infer = [](const char* op, ir::AbstractPtr x, ir::Primitive::Attrs attrs = {}) {
    std::vector<ir::AbstractPtr> in = {x};
    if (std::string_view(op) == "Dropout") in.push_back(ir::Abstract::tensor(DType::kInt64, {2}));
    return ops::infer(*ops::make_op(op, std::move(attrs)), in);
  };
  const auto t = [](Shape s) { return ir::Abstract::tensor(DType::kFloat32, std::move(s)); };
  EXPECT_EQ(infer("Softmax", t({-1, 5}))->shape(), (Shape{-1, 5}));
  EXPECT_FALSE(infer("LogSoftmax", ir::Abstract::tensor_unranked(DType::kFloat64))->has_rank());
  EXPECT_EQ(infer("GeLU", t({-1}))->shape(), (Shape{-1}));
  // ReluGrad takes each known dim from whichever input has it.
  const auto infer2 = [](ir::AbstractPtr a, ir::AbstractPtr b) {
    const std::vector<ir::AbstractPtr> in = {std::move(a), std::move(b)};
    return ops::infer(*ops::make_op("ReluGrad"), in);
  };
  const ir::AbstractPtr g = infer2(t({-1, 3}), t({2, -1}));
  EXPECT_EQ(g->shape(), (Shape{2, 3}));
  EXPECT_EQ(g->dtype(), DType::kFloat32);
  EXPECT_THROW(infer2(t({-1, 3}), t({2, 4})), ShapeError);
  const ir::AbstractPtr d = infer("Dropout", t({-1, 3}));
  ASSERT_TRUE(d->is_tuple());
  ASSERT_EQ(d->elements().size(), 2u);
  EXPECT_EQ(d->elements()[1]->shape(), (Shape{-1, 3}));
  EXPECT_EQ(d->elements()[1]->dtype(), DType::kFloat32);
}

// ---- Threads ------------------------------------------------------------------------------

TEST(Activation, KernelsGiveTheSameBitsWithOneAndTwoThreads) {
  const std::int64_t n = 120000;
  Tensor x(DType::kFloat32, {n});
  for (std::int64_t i = 0; i < n; ++i) x.set(i, 4 * std::sin(0.001 * static_cast<double>(i)));
  backend::ThreadPool one(1), two(2);
  for (const char* op : {"ReLU", "ReLU6", "Sigmoid", "Tanh", "GeLU"}) {
    SCOPED_TRACE(op);
    EXPECT_TRUE(run_kernel_outputs(one, op, {x})[0].bitwise_equal(run_kernel_outputs(two, op, {x})[0]));
  }
  const Tensor m = x.reshape({40, 30, 100});
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    for (std::int64_t axis : {0, 1, 2}) {
      SCOPED_TRACE(std::string(op) + " axis " + std::to_string(axis));
      const Value a = std::string_view(op) == "Softmax" ? Value::ints({axis}) : Value::i64(axis);
      EXPECT_TRUE(run_kernel_outputs(one, op, {m}, {{"axis", a}})[0].bitwise_equal(
          run_kernel_outputs(two, op, {m}, {{"axis", a}})[0]));
    }
  }
  // ReluGrad over many chunks: every element, on either thread count, is dout's or +0's bits.
  Tensor dout(DType::kFloat32, {n});
  for (std::int64_t i = 0; i < n; ++i) dout.set(i, std::cos(0.003 * static_cast<double>(i)));
  const Tensor g1 = run_kernel_outputs(one, "ReluGrad", {dout, x})[0];
  EXPECT_TRUE(g1.bitwise_equal(run_kernel_outputs(two, "ReluGrad", {dout, x})[0]));
  for (std::int64_t i = 0; i < n; ++i) {
    const float expected = x.data<float>()[i] > 0 ? dout.data<float>()[i] : 0.0f;
    ASSERT_EQ(std::bit_cast<std::uint32_t>(g1.data<float>()[i]),
              std::bit_cast<std::uint32_t>(expected)) << i;
  }
  const Tensor key = i64({2}, {77, 3});
  const std::vector<Tensor> d1 = run_kernel_outputs(one, "Dropout", {x, key});
  const std::vector<Tensor> d2 = run_kernel_outputs(two, "Dropout", {x, key});
  EXPECT_TRUE(d1[0].bitwise_equal(d2[0]));
  EXPECT_TRUE(d1[1].bitwise_equal(d2[1]));
}

// Softmax over a large strided axis agrees with the same softmax taken on the transpose.
TEST(Activation, SoftmaxAlongAnyAxisMatchesTheLastAxis) {
  const std::int64_t a = 7, b = 300;
  Tensor x(DType::kFloat64, {a, b}), xt(DType::kFloat64, {b, a});
  for (std::int64_t i = 0; i < a; ++i) {
    for (std::int64_t j = 0; j < b; ++j) {
      const double v = 3 * std::sin(0.7 * static_cast<double>(i) + 0.013 * static_cast<double>(j));
      x.set(i * b + j, v);
      xt.set(j * a + i, v);
    }
  }
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    const bool soft = std::string_view(op) == "Softmax";
    const Tensor y0 = run(op, {x}, {{"axis", soft ? Value::ints({0}) : Value::i64(0)}});
    const Tensor y1 = run(op, {xt});
    for (std::int64_t i = 0; i < a; ++i) {
      for (std::int64_t j = 0; j < b; ++j) {
        ASSERT_NEAR(y0.get(i * b + j), y1.get(j * a + i), 1e-15) << op << " " << i << "," << j;
      }
    }
  }
}

}  // namespace
}  // namespace loom::testing
