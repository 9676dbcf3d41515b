// Math family tests: table rows (gradient-checked in float64), exact hand-written cases for
// every op (broadcasting, scalars, integer and Bool dtypes, every Cast pair), the inference
// errors with their messages, a few bprop results written out, and a check that a kernel gives
// the same bits with one and with two threads.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "backends/backend.h"
#include "backends/cpu/cpu.h"
#include "backends/cpu/elementwise.h"
#include "backends/eager.h"
#include "backends/kernel.h"
#include "backends/thread_pool.h"
#include "core/ir/error.h"
#include "ops/op.h"
#include "tests/ops/op_table.h"
#include "tests/ops/test_util.h"

namespace loom::testing {
namespace {

using ir::Value;

static const CaseRegistrar kRows({
    {.name = "add", .op = "Add", .inputs = {{.shape = {2, 3}}, {.shape = {2, 3}}}},
    {.name = "add_broadcast_3x1_1x4", .op = "Add",
     .inputs = {{.shape = {3, 1}}, {.shape = {1, 4}}}},
    {.name = "add_scalar", .op = "Add", .inputs = {{.shape = {}}, {.shape = {2, 3}}}},
    {.name = "add_rank3_vector", .op = "Add", .inputs = {{.shape = {2, 3, 4}}, {.shape = {4}}}},
    {.name = "sub", .op = "Sub", .inputs = {{.shape = {2, 3}}, {.shape = {2, 3}}}},
    {.name = "sub_broadcast", .op = "Sub", .inputs = {{.shape = {3, 1}}, {.shape = {1, 4}}}},
    {.name = "mul", .op = "Mul", .inputs = {{.shape = {2, 3}}, {.shape = {2, 3}}}},
    {.name = "mul_broadcast", .op = "Mul", .inputs = {{.shape = {2, 3, 4}}, {.shape = {3, 1}}}},
    {.name = "real_div", .op = "RealDiv",
     .inputs = {{.shape = {2, 3}}, {.shape = {2, 3}, .gen = Gen::kAwayFromZero}}},
    {.name = "real_div_broadcast", .op = "RealDiv",
     .inputs = {{.shape = {3, 1}}, {.shape = {4}, .gen = Gen::kPositive}}},
    {.name = "neg", .op = "Neg", .inputs = {{.shape = {2, 3}}}},
    {.name = "square", .op = "Square", .inputs = {{.shape = {2, 3}}}},
    {.name = "sqrt", .op = "Sqrt", .inputs = {{.shape = {2, 3}, .gen = Gen::kPositive}}},
    {.name = "rsqrt", .op = "Rsqrt", .inputs = {{.shape = {2, 3}, .gen = Gen::kPositive}}},
    {.name = "exp", .op = "Exp", .inputs = {{.shape = {2, 3}}}},
    {.name = "log", .op = "Log", .inputs = {{.shape = {2, 3}, .gen = Gen::kPositive}}},
    {.name = "pow", .op = "Pow",
     .inputs = {{.shape = {2, 3}, .gen = Gen::kPositive}, {.shape = {2, 3}}}},
    {.name = "pow_scalar_exponent", .op = "Pow",
     .inputs = {{.shape = {2, 3}, .gen = Gen::kPositive}, {.shape = {}}}},
    {.name = "pow_broadcast_base", .op = "Pow",
     .inputs = {{.shape = {3, 1}, .gen = Gen::kPositive}, {.shape = {1, 4}}}},
    {.name = "maximum", .op = "Maximum",
     .inputs = {{.shape = {3, 4}, .gen = Gen::kDistinct}, {.shape = {3, 4}}}},
    {.name = "maximum_broadcast", .op = "Maximum",
     .inputs = {{.shape = {3, 1}, .gen = Gen::kDistinct}, {.shape = {1, 4}}}},
    {.name = "minimum", .op = "Minimum",
     .inputs = {{.shape = {3, 4}, .gen = Gen::kDistinct}, {.shape = {3, 4}}}},
    {.name = "minimum_broadcast", .op = "Minimum",
     .inputs = {{.shape = {2, 3, 4}, .gen = Gen::kDistinct}, {.shape = {4}}}},
    {.name = "abs", .op = "Abs", .inputs = {{.shape = {2, 3}, .gen = Gen::kAwayFromZero}}},
    {.name = "sign", .op = "Sign", .inputs = {{.shape = {2, 3}, .gen = Gen::kAwayFromZero}}},
    {.name = "equal", .op = "Equal", .inputs = {{.shape = {2, 3}}, {.shape = {3}}},
     .check_grad = false},
    {.name = "less", .op = "Less", .inputs = {{.shape = {2, 3}}, {.shape = {2, 1}}},
     .check_grad = false},
    {.name = "greater", .op = "Greater", .inputs = {{.shape = {2, 3}}, {.shape = {}}},
     .check_grad = false},
    {.name = "select", .op = "Select",
     .inputs = {{.shape = {2, 3}, .dtype = DType::kBool, .gen = Gen::kBool,
                 .differentiable = false},
                {.shape = {2, 3}},
                {.shape = {2, 3}}}},
    {.name = "select_broadcast", .op = "Select",
     .inputs = {{.shape = {2, 1}, .dtype = DType::kBool, .gen = Gen::kBool,
                 .differentiable = false},
                {.shape = {2, 3}},
                {.shape = {3}}}},
    {.name = "zeros_like", .op = "ZerosLike", .inputs = {{.shape = {2, 3}}}},
    {.name = "ones_like", .op = "OnesLike", .inputs = {{.shape = {2, 3}}}},
    {.name = "fill", .op = "Fill",
     .attrs = {{"dtype", Value::dtype(DType::kFloat32)},
               {"shape", Value::ints({2, 3})},
               {"value", Value::f32(1.5f)}},
     .check_grad = false},
    // Inputs become Float64 in the gradient check, so a floating row casts to Float64; the
    // Float32 → Float64 gradient is checked exactly below.
    {.name = "cast_to_float64", .op = "Cast",
     .attrs = {{"dst_type", Value::dtype(DType::kFloat64)}},
     .inputs = {{.shape = {2, 3}}}},
    {.name = "cast_to_int32", .op = "Cast", .attrs = {{"dst_type", Value::dtype(DType::kInt32)}},
     .inputs = {{.shape = {2, 3}}}},
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
Tensor boolean(Shape shape, std::vector<bool> values) {
  Tensor t(DType::kBool, std::move(shape));
  for (std::size_t i = 0; i < values.size(); ++i) t.set(static_cast<std::int64_t>(i), values[i]);
  return t;
}

Tensor run(std::string_view op, const std::vector<Tensor>& inputs,
           ir::Primitive::Attrs attrs = {}) {
  std::vector<Value> args;
  for (const Tensor& t : inputs) args.push_back(Value::tensor(t));
  return backend::run_op(op, args, std::move(attrs)).as_tensor();
}

// ---- Binary arithmetic --------------------------------------------------------------------

TEST(Math, AddSameShape) {
  expect_tensor(run("Add", {f32({2, 2}, {1, 2, 3, 4}), f32({2, 2}, {10, 20, 30, 40})}),
                DType::kFloat32, {2, 2}, {11, 22, 33, 44});
}

TEST(Math, AddBroadcastsColumnAndRow) {
  expect_tensor(run("Add", {f32({3, 1}, {1, 2, 3}), f32({1, 4}, {10, 20, 30, 40})}),
                DType::kFloat32, {3, 4}, {11, 21, 31, 41, 12, 22, 32, 42, 13, 23, 33, 43});
}

TEST(Math, AddBroadcastsScalar) {
  expect_tensor(run("Add", {f32({}, {0.5f}), f32({2, 3}, {1, 2, 3, 4, 5, 6})}), DType::kFloat32,
                {2, 3}, {1.5, 2.5, 3.5, 4.5, 5.5, 6.5});
  expect_tensor(run("Add", {f32({}, {1}), f32({}, {2})}), DType::kFloat32, {}, {3});
}

TEST(Math, AddBroadcastsTrailingVector) {
  std::vector<double> x(24), expected(24);
  std::vector<float> xf(24);
  for (int i = 0; i < 24; ++i) {
    xf[static_cast<std::size_t>(i)] = static_cast<float>(i);
    expected[static_cast<std::size_t>(i)] = i + 100.0 * (i % 4 + 1);
  }
  expect_tensor(run("Add", {f32({2, 3, 4}, xf), f32({4}, {100, 200, 300, 400})}), DType::kFloat32,
                {2, 3, 4}, expected);
}

TEST(Math, AddBroadcastsMiddleAxis) {
  // (2, 1, 2) + (3, 1): a broadcast dim between two real ones on each side.
  expect_tensor(run("Add", {f64({2, 1, 2}, {1, 2, 3, 4}), f64({3, 1}, {10, 20, 30})}),
                DType::kFloat64, {2, 3, 2},
                {11, 12, 21, 22, 31, 32, 13, 14, 23, 24, 33, 34});
}

TEST(Math, AddIntegers) {
  expect_tensor(run("Add", {i32({3}, {1, -2, 3}), i32({1}, {5})}), DType::kInt32, {3}, {6, 3, 8});
  expect_tensor(run("Add", {i64({2}, {1LL << 40, 1}), i64({2}, {1, 2})}), DType::kInt64, {2},
                {static_cast<double>((1LL << 40) + 1), 3});
}

TEST(Math, Sub) {
  expect_tensor(run("Sub", {f32({2, 2}, {5, 6, 7, 8}), f32({2}, {1, 2})}), DType::kFloat32, {2, 2},
                {4, 4, 6, 6});
  expect_tensor(run("Sub", {f32({}, {1}), f32({3}, {1, 2, 3})}), DType::kFloat32, {3}, {0, -1, -2});
  expect_tensor(run("Sub", {i64({2}, {3, 4}), i64({2}, {5, 1})}), DType::kInt64, {2}, {-2, 3});
}

TEST(Math, Mul) {
  expect_tensor(run("Mul", {f64({3, 1}, {1, 2, 3}), f64({1, 2}, {-1, 0.5})}), DType::kFloat64,
                {3, 2}, {-1, 0.5, -2, 1, -3, 1.5});
  expect_tensor(run("Mul", {i32({2}, {3, -4}), i32({2}, {5, 6})}), DType::kInt32, {2}, {15, -24});
}

TEST(Math, RealDiv) {
  expect_tensor(run("RealDiv", {f32({2, 2}, {1, 2, 3, 4}), f32({2}, {2, 4})}), DType::kFloat32,
                {2, 2}, {0.5, 0.5, 1.5, 1});
  const Tensor y = run("RealDiv", {f64({3}, {1, -1, 0}), f64({}, {0})});
  EXPECT_EQ(y.get(0), std::numeric_limits<double>::infinity());
  EXPECT_EQ(y.get(1), -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(y.get(2)));
}

TEST(Math, Pow) {
  expect_tensor(run("Pow", {f32({3}, {2, 3, 4}), f32({3}, {3, 2, 0.5})}), DType::kFloat32, {3},
                {8, 9, 2}, 1e-6);
  expect_tensor(run("Pow", {f64({2, 1}, {2, 10}), f64({3}, {0, 1, -1})}), DType::kFloat64, {2, 3},
                {1, 2, 0.5, 1, 10, 0.1}, 1e-15);
}

TEST(Math, MaximumAndMinimum) {
  const Tensor a = f32({2, 2}, {1, 5, -3, 2});
  const Tensor b = f32({2}, {4, 0});
  expect_tensor(run("Maximum", {a, b}), DType::kFloat32, {2, 2}, {4, 5, 4, 2});
  expect_tensor(run("Minimum", {a, b}), DType::kFloat32, {2, 2}, {1, 0, -3, 0});
  expect_tensor(run("Maximum", {i64({3}, {1, 7, -2}), i64({3}, {2, 3, -5})}), DType::kInt64, {3},
                {2, 7, -2});
  expect_tensor(run("Minimum", {i32({3}, {1, 7, -2}), i32({}, {0})}), DType::kInt32, {3},
                {0, 0, -2});
}

TEST(Math, MaximumAndMinimumPropagateNaN) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  expect_tensor(run("Maximum", {f64({2}, {nan, 1}), f64({2}, {1, nan})}), DType::kFloat64, {2},
                {nan, nan});
  expect_tensor(run("Minimum", {f64({2}, {nan, 1}), f64({2}, {1, nan})}), DType::kFloat64, {2},
                {nan, nan});
}

// ---- Unary --------------------------------------------------------------------------------

TEST(Math, NegSquareAbsSign) {
  const Tensor x = f32({5}, {-2, -0.5, 0, 0.5, 3});
  expect_tensor(run("Neg", {x}), DType::kFloat32, {5}, {2, 0.5, 0, -0.5, -3});
  expect_tensor(run("Square", {x}), DType::kFloat32, {5}, {4, 0.25, 0, 0.25, 9});
  expect_tensor(run("Abs", {x}), DType::kFloat32, {5}, {2, 0.5, 0, 0.5, 3});
  expect_tensor(run("Sign", {x}), DType::kFloat32, {5}, {-1, -1, 0, 1, 1});
  const Tensor n = i32({3}, {-7, 0, 4});
  expect_tensor(run("Neg", {n}), DType::kInt32, {3}, {7, 0, -4});
  expect_tensor(run("Abs", {n}), DType::kInt32, {3}, {7, 0, 4});
  expect_tensor(run("Sign", {i64({3}, {-7, 0, 4})}), DType::kInt64, {3}, {-1, 0, 1});
  expect_tensor(run("Square", {i64({2}, {-3, 4})}), DType::kInt64, {2}, {9, 16});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  expect_tensor(run("Sign", {f64({1}, {nan})}), DType::kFloat64, {1}, {nan});
}

TEST(Math, SqrtRsqrtExpLog) {
  const Tensor x = f64({3}, {0.25, 1, 4});
  expect_tensor(run("Sqrt", {x}), DType::kFloat64, {3}, {0.5, 1, 2});
  expect_tensor(run("Rsqrt", {x}), DType::kFloat64, {3}, {2, 1, 0.5});
  expect_tensor(run("Exp", {f64({3}, {0, 1, -2})}), DType::kFloat64, {3},
                {1, 2.718281828459045, 0.1353352832366127}, 1e-15);
  expect_tensor(run("Log", {f64({3}, {1, 2.718281828459045, 0.5})}), DType::kFloat64, {3},
                {0, 1, -0.6931471805599453}, 1e-15);
  expect_tensor(run("Exp", {f32({2, 2}, {0, 1, -1, 2})}), DType::kFloat32, {2, 2},
                {1, 2.7182817, 0.36787945, 7.389056}, 1e-6);
  expect_tensor(run("Log", {f32({2}, {1, 10})}), DType::kFloat32, {2}, {0, 2.3025851}, 1e-6);
  expect_tensor(run("Sqrt", {f32({2}, {9, 2})}), DType::kFloat32, {2}, {3, 1.4142135}, 1e-7);
  expect_tensor(run("Rsqrt", {f32({2}, {16, 2})}), DType::kFloat32, {2}, {0.25, 0.70710677},
                1e-7);
  const Tensor special = run("Log", {f64({2}, {0, -1})});
  EXPECT_EQ(special.get(0), -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(special.get(1)));
}

TEST(Math, UnaryOpsOnLongInputsMatchTheScalarFunctions) {
  // Long enough for the vectorized paths and several chunks.
  const std::int64_t n = 40000;
  Tensor x(DType::kFloat32, {n});
  for (std::int64_t i = 0; i < n; ++i) x.set(i, 0.01 + 8.0 * static_cast<double>(i) / n);
  const Tensor e = run("Exp", {x}), l = run("Log", {x}), s = run("Sqrt", {x}),
               r = run("Rsqrt", {x});
  for (std::int64_t i = 0; i < n; i += 997) {
    const float v = x.data<float>()[i];
    EXPECT_NEAR(e.data<float>()[i], std::exp(v), 2e-7 * std::exp(v)) << v;
    EXPECT_NEAR(l.data<float>()[i], std::log(v), 2e-7) << v;
    EXPECT_EQ(s.data<float>()[i], std::sqrt(v)) << v;
    EXPECT_NEAR(r.data<float>()[i], 1 / std::sqrt(v), 2e-7 / std::sqrt(v)) << v;
  }
}

TEST(Math, ExpAndLogAtTheEdgesOfTheirRange) {
  // At the front of a long input so the vectorized path sees them.
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    Tensor x(dtype, {1000});
    const std::vector<double> edge = {-inf, inf, nan, 0, -1000, 1000, 88.5, 1e-40};
    for (std::size_t i = 0; i < edge.size(); ++i) x.set(static_cast<std::int64_t>(i), edge[i]);
    const Tensor e = run("Exp", {x});
    const Tensor l = run("Log", {x});
    EXPECT_EQ(e.get(0), 0);
    EXPECT_EQ(e.get(1), inf);
    EXPECT_TRUE(std::isnan(e.get(2)));
    EXPECT_EQ(e.get(3), 1);
    EXPECT_EQ(e.get(4), 0);
    EXPECT_EQ(e.get(5), inf);
    EXPECT_NEAR(e.get(6) / 2.7230878250681117e38, 1, 1e-6);  // below FLT_MAX: finite in float too
    EXPECT_EQ(l.get(1), inf);
    EXPECT_TRUE(std::isnan(l.get(2)));
    EXPECT_EQ(l.get(3), -inf);
    EXPECT_TRUE(std::isnan(l.get(4)));
    EXPECT_NEAR(l.get(7), -92.103403719761827, 1e-4);  // a float subnormal
  }
}

// ---- Comparisons and Select ---------------------------------------------------------------

TEST(Math, Comparisons) {
  const Tensor a = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor b = f32({3}, {1, 5, 2});
  expect_tensor(run("Equal", {a, b}), DType::kBool, {2, 3}, {1, 0, 0, 0, 1, 0});
  expect_tensor(run("Less", {a, b}), DType::kBool, {2, 3}, {0, 1, 0, 0, 0, 0});
  expect_tensor(run("Greater", {a, b}), DType::kBool, {2, 3}, {0, 0, 1, 1, 0, 1});
  expect_tensor(run("Greater", {i64({3}, {1, 2, 3}), i64({}, {2})}), DType::kBool, {3}, {0, 0, 1});
  expect_tensor(run("Less", {i32({2, 1}, {1, 3}), i32({2}, {2, 3})}), DType::kBool, {2, 2},
                {1, 1, 0, 0});
  expect_tensor(run("Equal", {boolean({3}, {true, false, true}), boolean({1}, {true})}),
                DType::kBool, {3}, {1, 0, 1});
}

TEST(Math, Select) {
  const Tensor cond = boolean({2, 2}, {true, false, false, true});
  expect_tensor(run("Select", {cond, f32({2, 2}, {1, 2, 3, 4}), f32({2, 2}, {-1, -2, -3, -4})}),
                DType::kFloat32, {2, 2}, {1, -2, -3, 4});
  expect_tensor(run("Select", {boolean({2, 1}, {true, false}), f64({2, 3}, {1, 2, 3, 4, 5, 6}),
                               f64({3}, {-1, -2, -3})}),
                DType::kFloat64, {2, 3}, {1, 2, 3, -1, -2, -3});
  expect_tensor(run("Select", {boolean({3}, {false, true, true}), i32({3}, {1, 2, 3}),
                               i32({}, {0})}),
                DType::kInt32, {3}, {0, 2, 3});
  expect_tensor(run("Select", {cond, i64({2, 2}, {1, 2, 3, 4}), i64({2, 2}, {5, 6, 7, 8})}),
                DType::kInt64, {2, 2}, {1, 6, 7, 4});
  expect_tensor(run("Select", {cond, boolean({2, 2}, {true, true, true, true}),
                               boolean({2, 2}, {false, false, false, false})}),
                DType::kBool, {2, 2}, {1, 0, 0, 1});
}

// ---- Creation and Cast --------------------------------------------------------------------

TEST(Math, ZerosLikeAndOnesLike) {
  expect_tensor(run("ZerosLike", {f32({2, 2}, {1, 2, 3, 4})}), DType::kFloat32, {2, 2},
                {0, 0, 0, 0});
  expect_tensor(run("OnesLike", {f64({3}, {1, 2, 3})}), DType::kFloat64, {3}, {1, 1, 1});
  expect_tensor(run("ZerosLike", {i32({2}, {5, 6})}), DType::kInt32, {2}, {0, 0});
  expect_tensor(run("OnesLike", {i64({}, {9})}), DType::kInt64, {}, {1});
  expect_tensor(run("ZerosLike", {boolean({2}, {true, true})}), DType::kBool, {2}, {0, 0});
}

TEST(Math, Fill) {
  auto fill = [](DType dtype, std::vector<std::int64_t> shape, double value) {
    return backend::run_op("Fill", {},
                           {{"dtype", Value::dtype(dtype)},
                            {"shape", Value::ints(shape)},
                            {"value", Value::f64(value)}})
        .as_tensor();
  };
  expect_tensor(fill(DType::kFloat32, {2, 3}, 1.5), DType::kFloat32, {2, 3},
                {1.5, 1.5, 1.5, 1.5, 1.5, 1.5});
  expect_tensor(fill(DType::kFloat64, {}, -2), DType::kFloat64, {}, {-2});
  expect_tensor(fill(DType::kInt32, {2}, 7), DType::kInt32, {2}, {7, 7});
  expect_tensor(fill(DType::kInt64, {1, 2}, -3), DType::kInt64, {1, 2}, {-3, -3});
  expect_tensor(fill(DType::kBool, {2}, 1), DType::kBool, {2}, {1, 1});
  expect_tensor(fill(DType::kFloat32, {0, 3}, 1), DType::kFloat32, {0, 3}, {});
  EXPECT_EQ(error_of<ValueError>([&] { fill(DType::kFloat32, {2, -1}, 0); }),
            "Fill: expected non-negative dims in shape, got (2, -1)");
}

TEST(Math, CastToFloat16AndBFloat16RoundsToNearestEven) {
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor x = f32({6}, {0.1f, 65520.0f, -1e-8f, 1.0f + 1.0f / 256, 3.0f, NAN});
  const Tensor h = run("Cast", {x}, {{"dst_type", Value::dtype(DType::kFloat16)}});
  const Tensor b = run("Cast", {x}, {{"dst_type", Value::dtype(DType::kBFloat16)}});
  const auto* hb = static_cast<const std::uint16_t*>(h.raw_data());
  const auto* bb = static_cast<const std::uint16_t*>(b.raw_data());
  // 0.1: half 0x2e66, bfloat16 0x3dcd; 65520 rounds to half's Inf; -1e-8 underflows to -0 in
  // half, stays in bfloat16's range; 1 + 2^-8 is a tie in bfloat16 (to even: 1).
  EXPECT_EQ(hb[0], 0x2e66);
  EXPECT_EQ(bb[0], 0x3dcd);
  EXPECT_EQ(h.get(1), inf);
  EXPECT_EQ(hb[2], 0x8000);
  EXPECT_NEAR(b.get(2), -1e-8, 1e-10);
  EXPECT_EQ(b.get(3), 1.0);
  EXPECT_EQ(h.get(4), 3.0);
  EXPECT_TRUE(std::isnan(h.get(5)));
  EXPECT_TRUE(std::isnan(b.get(5)));
  // Back to Float32 exactly; between the two 16-bit types through Float32.
  expect_tensor(run("Cast", {b}, {{"dst_type", Value::dtype(DType::kFloat32)}}), DType::kFloat32,
                {6}, b.to_doubles());
  const Tensor hb2 = run("Cast", {h}, {{"dst_type", Value::dtype(DType::kBFloat16)}});
  EXPECT_EQ(hb2.get(4), 3.0);
  EXPECT_EQ(hb2.get(1), inf);
}

// The Float32 <-> Float16 / BFloat16 casts run vectorized over long runs (F16C for Float16):
// every 16-bit pattern widened, and narrowings of Float32 patterns (specials, NaN payloads,
// subnormals, rounding ties, random bits), give the scalar functions' bits (core/ir/dtype.h),
// at every position of a vector (the runs are not multiples of 8).
TEST(Math, CastBetweenFloat32And16BitFloatsGivesTheScalarBits) {
  const std::int64_t n = 65536 + 5;
  for (DType d : {DType::kFloat16, DType::kBFloat16}) {
    SCOPED_TRACE(std::string(dtype_name(d)));
    Tensor bits(d, {n});
    auto* pb = static_cast<std::uint16_t*>(bits.raw_data());
    for (std::int64_t i = 0; i < n; ++i) pb[i] = static_cast<std::uint16_t>(i);
    const Tensor wide = run("Cast", {bits}, {{"dst_type", Value::dtype(DType::kFloat32)}});
    const auto* pw = static_cast<const std::uint32_t*>(wide.raw_data());
    std::int64_t differ = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const float want = d == DType::kFloat16 ? half_to_float(pb[i]) : bfloat16_to_float(pb[i]);
      differ += pw[i] != std::bit_cast<std::uint32_t>(want);
    }
    EXPECT_EQ(differ, 0) << "widened patterns that differ from the scalar function's";

    std::vector<std::uint32_t> patterns = {
        0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u,
        0x7f800001u, 0x7fbfffffu, 0x00000001u, 0x807fffffu, 0x33800000u, 0x33000000u,
        0x387fe000u, 0x38800000u, 0x477fe000u, 0x477ff000u, 0x477fefffu, 0x7f7fffffu,
        0x3f808000u, 0x3f818000u, 0x3f800fffu, 0x3f801000u, 0x3f803000u, 0xbf7fffffu};
    std::uint32_t state = 12345;
    while (patterns.size() < 200003) {
      state = state * 1664525u + 1013904223u;  // every bit pattern class, NaNs included
      patterns.push_back(state);
    }
    Tensor x(DType::kFloat32, {static_cast<std::int64_t>(patterns.size())});
    std::memcpy(x.raw_data(), patterns.data(), patterns.size() * sizeof(std::uint32_t));
    const Tensor narrow = run("Cast", {x}, {{"dst_type", Value::dtype(d)}});
    const auto* pn = static_cast<const std::uint16_t*>(narrow.raw_data());
    differ = 0;
    for (std::size_t i = 0; i < patterns.size(); ++i) {
      const float v = std::bit_cast<float>(patterns[i]);
      differ += pn[i] != (d == DType::kFloat16 ? float_to_half(v) : float_to_bfloat16(v));
    }
    EXPECT_EQ(differ, 0) << "narrowed patterns that differ from the scalar function's";
  }
}

TEST(Math, CastEveryPair) {
  // Each source holds values every destination can represent, so the expected result of any
  // pair is the source read as doubles and converted by the destination's rule.
  const std::vector<Tensor> sources = {
      f32({4}, {0, 1, 2.75f, -3.5f}), f64({4}, {0, 1, 2.75, -3.5}), i32({4}, {0, 1, 2, -3}),
      i64({4}, {0, 1, 2, -3}),
      Tensor::from_vector<std::uint8_t>({4}, {0, 1, 2, 200}),
      boolean({4}, {false, true, true, false}),
      Tensor::from_doubles(DType::kFloat16, {4}, {0, 1, 2.75, -3.5}),
      Tensor::from_doubles(DType::kBFloat16, {4}, {0, 1, 2.75, -3.5})};
  const DType dsts[] = {DType::kFloat32, DType::kFloat64, DType::kInt32,   DType::kInt64,
                        DType::kUInt8,   DType::kBool,    DType::kFloat16, DType::kBFloat16};
  for (const Tensor& src : sources) {
    for (DType dst : dsts) {
      SCOPED_TRACE(std::string(dtype_name(src.dtype())) + " -> " + std::string(dtype_name(dst)));
      std::vector<double> expected;
      for (double v : src.to_doubles()) {
        if (dst == DType::kBool) {
          expected.push_back(v != 0);
        } else if (is_integral(dst)) {
          double t = std::trunc(v);
          if (dst == DType::kUInt8 && t < 0) t += 256;  // -3 wraps to 253
          expected.push_back(t);
        } else {
          expected.push_back(v);
        }
      }
      expect_tensor(run("Cast", {src}, {{"dst_type", Value::dtype(dst)}}), dst, {4}, expected);
    }
  }
}

// ---- Gradients written out (these need ReduceSum/Reshape for the broadcast ones) -----------

std::vector<Tensor> grads(std::string_view op, const std::vector<Tensor>& inputs,
                          const Tensor& dout, ir::Primitive::Attrs attrs = {}) {
  ir::PrimitivePtr prim = ops::make_op(op, std::move(attrs));
  std::vector<Value> args;
  for (const Tensor& t : inputs) args.push_back(Value::tensor(t));
  const Value out = backend::run_op(*prim, args);
  std::vector<Tensor> g;
  for (const Value& v : backend::run_bprop(*prim, args, out, Value::tensor(dout))) {
    g.push_back(v.is_tensor() ? v.as_tensor() : Tensor());
  }
  return g;
}

TEST(Math, CastGradientCastsBack) {
  const auto g = grads("Cast", {f32({2}, {1, 2})}, f64({2}, {0.25, -4}),
                       {{"dst_type", Value::dtype(DType::kFloat64)}});
  expect_tensor(g[0], DType::kFloat32, {2}, {0.25, -4});
  const auto to_int = grads("Cast", {f64({2}, {1.5, 2})}, i32({2}, {0, 0}),
                            {{"dst_type", Value::dtype(DType::kInt32)}});
  expect_tensor(to_int[0], DType::kFloat64, {2}, {0, 0});
  const auto from_int = grads("Cast", {i32({2}, {1, 2})}, f32({2}, {1, 1}),
                              {{"dst_type", Value::dtype(DType::kFloat32)}});
  EXPECT_FALSE(from_int[0].defined());
}

TEST(Math, MaximumGradientGoesToTheLargerAndSplitsTies) {
  const auto g = grads("Maximum", {f64({3}, {1, 5, 2}), f64({3}, {4, 0, 2})},
                       f64({3}, {10, 20, 30}));
  expect_tensor(g[0], DType::kFloat64, {3}, {0, 20, 15});
  expect_tensor(g[1], DType::kFloat64, {3}, {10, 0, 15});
  const auto m = grads("Minimum", {f64({3}, {1, 5, 2}), f64({3}, {4, 0, 2})},
                       f64({3}, {10, 20, 30}));
  expect_tensor(m[0], DType::kFloat64, {3}, {10, 0, 15});
  expect_tensor(m[1], DType::kFloat64, {3}, {0, 20, 15});
  // Broadcast: y (a scalar) collects the gradient of every position it wins.
  const auto b = grads("Maximum", {f64({2, 2}, {1, 5, -1, 3}), f64({}, {2})},
                       f64({2, 2}, {1, 2, 3, 4}));
  expect_tensor(b[0], DType::kFloat64, {2, 2}, {0, 2, 0, 4});
  expect_tensor(b[1], DType::kFloat64, {}, {4});
}

TEST(Math, SelectAbsSignPowGradients) {
  const auto s = grads("Select", {boolean({2}, {true, false}), f64({2}, {1, 2}), f64({2}, {3, 4})},
                       f64({2}, {5, 6}));
  EXPECT_FALSE(s[0].defined());
  expect_tensor(s[1], DType::kFloat64, {2}, {5, 0});
  expect_tensor(s[2], DType::kFloat64, {2}, {0, 6});
  expect_tensor(grads("Abs", {f64({2}, {-2, 3})}, f64({2}, {1, 1}))[0], DType::kFloat64, {2},
                {-1, 1});
  expect_tensor(grads("Sign", {f64({2}, {-2, 3})}, f64({2}, {1, 1}))[0], DType::kFloat64, {2},
                {0, 0});
  // d(x^y)/dx = y x^(y-1); d(x^y)/dy = x^y log x, taken as 0 where x <= 0.
  const auto p = grads("Pow", {f64({3}, {2, 0, -2}), f64({3}, {3, 2, 2})}, f64({3}, {1, 1, 1}));
  expect_tensor(p[0], DType::kFloat64, {3}, {12, 0, -4}, 1e-12);
  expect_tensor(p[1], DType::kFloat64, {3}, {8 * std::log(2.0), 0, 0}, 1e-12);
}

TEST(Math, BroadcastGradientsAreSummed) {
  const auto g = grads("Add", {f64({3, 1}, {1, 2, 3}), f64({}, {5})},
                       f64({3, 2}, {1, 2, 3, 4, 5, 6}));
  expect_tensor(g[0], DType::kFloat64, {3, 1}, {3, 7, 11});
  expect_tensor(g[1], DType::kFloat64, {}, {21});
  const auto m = grads("Mul", {f64({2, 2}, {1, 2, 3, 4}), f64({2}, {10, 100})},
                       f64({2, 2}, {1, 1, 1, 1}));
  expect_tensor(m[0], DType::kFloat64, {2, 2}, {10, 100, 10, 100});
  expect_tensor(m[1], DType::kFloat64, {2}, {4, 6});
}

// ---- Inference errors ---------------------------------------------------------------------

TEST(Math, ShapeMismatchIsAShapeError) {
  EXPECT_EQ(error_of<ShapeError>([] {
              run("Add", {f32({2, 3}, std::vector<float>(6)), f32({4, 3}, std::vector<float>(12))});
            }),
            "Add: expected broadcastable shapes, got (2, 3) and (4, 3)");
  EXPECT_EQ(error_of<ShapeError>([] {
              run("Maximum", {f32({2}, {1, 2}), f32({3}, {1, 2, 3})});
            }),
            "Maximum: expected broadcastable shapes, got (2) and (3)");
  EXPECT_EQ(error_of<ShapeError>([] {
              run("Select", {boolean({2}, {true, false}), f32({3}, {1, 2, 3}), f32({}, {0})});
            }),
            "Select: expected broadcastable shapes, got (2), (3) and ()");
}

TEST(Math, DtypeMismatchIsATypeError) {
  EXPECT_EQ(error_of<TypeError>([] { run("Add", {f32({2}, {1, 2}), i32({2}, {1, 2})}); }),
            "Add: expected inputs of one dtype, got Float32 and Int32");
  EXPECT_EQ(error_of<TypeError>([] { run("Less", {f64({1}, {1}), f32({1}, {1})}); }),
            "Less: expected inputs of one dtype, got Float64 and Float32");
  EXPECT_EQ(error_of<TypeError>([] { run("Sqrt", {i32({1}, {4})}); }),
            "Sqrt: expected a floating tensor, got Int32");
  EXPECT_EQ(error_of<TypeError>([] { run("RealDiv", {i64({1}, {4}), i64({1}, {2})}); }),
            "RealDiv: expected a floating tensor, got Int64");
  EXPECT_EQ(error_of<TypeError>([] { run("Neg", {boolean({1}, {true})}); }),
            "Neg: expected a numeric tensor, got Bool");
  EXPECT_EQ(error_of<TypeError>([] {
              run("Select", {f32({1}, {1}), f32({1}, {1}), f32({1}, {1})});
            }),
            "Select: expected a Bool condition, got Float32");
  EXPECT_EQ(error_of<TypeError>([] {
              run("Select", {boolean({1}, {true}), f32({1}, {1}), f64({1}, {1})});
            }),
            "Select: expected x and y of one dtype, got Float32 and Float64");
}

TEST(Math, InferencePropagatesUnknownDims) {
  auto infer = [](const char* op, ir::AbstractPtr a, ir::AbstractPtr b) {
    std::vector<ir::AbstractPtr> in = {a, b};
    return ops::infer(*ops::make_op(op), in);
  };
  const auto t = [](Shape s) { return ir::Abstract::tensor(DType::kFloat32, std::move(s)); };
  EXPECT_EQ(infer("Add", t({-1, 3}), t({3}))->shape(), (Shape{-1, 3}));
  EXPECT_EQ(infer("Add", t({-1, 1}), t({2, 4}))->shape(), (Shape{2, 4}));
  EXPECT_EQ(infer("Mul", t({-1}), t({1}))->shape(), (Shape{-1}));
  EXPECT_FALSE(infer("Sub", ir::Abstract::tensor_unranked(DType::kFloat32), t({3}))->has_rank());
  EXPECT_EQ(infer("Equal", t({2}), t({2}))->dtype(), DType::kBool);
}

// ---- Broadcast iteration ------------------------------------------------------------------

TEST(Math, BroadcastPlanMergesDimsIntoRuns) {
  const Shape nchw = {2, 3, 4, 5}, bias = {3, 1, 1};
  const backend::cpu::BroadcastPlan same(nchw, {&nchw, &nchw});
  EXPECT_TRUE(same.contiguous());
  const backend::cpu::BroadcastPlan biased(nchw, {&nchw, &bias});
  EXPECT_FALSE(biased.contiguous());
  // (N, C, H*W): runs of 20 along H*W with the bias constant in each.
  std::vector<std::vector<std::int64_t>> runs;
  biased.for_each_run(0, 120, [&](std::int64_t o, const std::int64_t* in,
                                  const std::int64_t* step, std::int64_t n) {
    runs.push_back({o, in[0], in[1], step[0], step[1], n});
  });
  ASSERT_EQ(runs.size(), 6u);
  EXPECT_EQ(runs[4], (std::vector<std::int64_t>{80, 80, 1, 1, 0, 20}));
  // A range starting and ending inside runs.
  runs.clear();
  biased.for_each_run(25, 47, [&](std::int64_t o, const std::int64_t* in,
                                  const std::int64_t* step, std::int64_t n) {
    runs.push_back({o, in[0], in[1], step[0], step[1], n});
  });
  EXPECT_EQ(runs, (std::vector<std::vector<std::int64_t>>{{25, 25, 1, 1, 0, 15},
                                                           {40, 40, 2, 1, 0, 7}}));
}

TEST(Math, BroadcastingMatchesANaiveIndexComputation) {
  // Random shape pairs up to rank 4 with size-1 and missing dims on either side; the expected
  // sum is computed from multi-indices directly.
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int rank = 1 + static_cast<int>(rng() % 4);
    Shape out(static_cast<std::size_t>(rank));
    for (auto& d : out) d = 1 + static_cast<std::int64_t>(rng() % 4);
    auto operand = [&] {
      const auto drop = rng() % (static_cast<unsigned>(rank) + 1);
      Shape s(out.begin() + drop, out.end());
      for (auto& d : s) {
        if (rng() % 3 == 0) d = 1;
      }
      return s;
    };
    const Shape sa = operand(), sb = operand();
    Tensor a(DType::kFloat64, sa), b(DType::kFloat64, sb);
    for (std::int64_t i = 0; i < a.numel(); ++i) a.set(i, static_cast<double>(i));
    for (std::int64_t i = 0; i < b.numel(); ++i) b.set(i, 1000.0 * static_cast<double>(i));
    const Tensor y = run("Add", {a, b});
    auto offset = [&](const Shape& s, const std::vector<std::int64_t>& idx) {
      std::int64_t off = 0;
      const std::size_t lead = idx.size() - s.size();
      for (std::size_t d = 0; d < s.size(); ++d) off = off * s[d] + (s[d] == 1 ? 0 : idx[lead + d]);
      return off;
    };
    SCOPED_TRACE(shape_to_string(sa) + " + " + shape_to_string(sb));
    const Shape& ys = y.shape();
    std::vector<std::int64_t> idx(ys.size(), 0);
    for (std::int64_t i = 0; i < y.numel(); ++i) {
      std::int64_t rest = i;
      for (std::size_t d = ys.size(); d-- > 0;) {
        idx[d] = rest % ys[d];
        rest /= ys[d];
      }
      ASSERT_EQ(y.get(i), a.get(offset(sa, idx)) + b.get(offset(sb, idx))) << "element " << i;
    }
  }
}

// ---- Threads ------------------------------------------------------------------------------

// Runs the registered CPU kernel of `op` on `inputs` with `pool`; the output has `out_shape`.
Tensor run_kernel_with(backend::ThreadPool& pool, std::string_view op,
                       const std::vector<Tensor>& inputs, DType out_dtype,
                       const Shape& out_shape) {
  const backend::KernelDef* kernel = backend::cpu_backend().find_kernel(op, inputs[0].dtype());
  EXPECT_NE(kernel, nullptr);
  ir::PrimitivePtr prim = ops::make_op(op);
  std::vector<Tensor> outputs = {Tensor(out_dtype, out_shape)};
  backend::cpu::CpuContext ctx(&pool);
  backend::run_kernel(*kernel, *prim, inputs, outputs, backend::cpu_backend(), &ctx);
  return outputs[0];
}

TEST(Math, KernelsGiveTheSameBitsWithOneAndTwoThreads) {
  const std::int64_t n = 100000;
  Tensor a(DType::kFloat32, {n}), b(DType::kFloat32, {n}), row(DType::kFloat32, {1000});
  for (std::int64_t i = 0; i < n; ++i) {
    a.set(i, std::sin(0.001 * static_cast<double>(i)));
    b.set(i, 1.5 + std::cos(0.003 * static_cast<double>(i)));
  }
  for (std::int64_t i = 0; i < 1000; ++i) row.set(i, 0.25 * static_cast<double>(i));
  backend::ThreadPool one(1), two(2);
  for (const char* op : {"Add", "Mul", "RealDiv", "Pow", "Maximum"}) {
    SCOPED_TRACE(op);
    const Tensor x = run_kernel_with(one, op, {a, b}, DType::kFloat32, {n});
    const Tensor y = run_kernel_with(two, op, {a, b}, DType::kFloat32, {n});
    EXPECT_TRUE(x.bitwise_equal(y));
  }
  for (const char* op : {"Exp", "Sqrt", "Neg"}) {
    SCOPED_TRACE(op);
    const Tensor x = run_kernel_with(one, op, {b}, DType::kFloat32, {n});
    const Tensor y = run_kernel_with(two, op, {b}, DType::kFloat32, {n});
    EXPECT_TRUE(x.bitwise_equal(y));
  }
  // A broadcast: (100, 1000) + (1000,), and the result checked against a plain loop.
  const Tensor m = a.reshape({100, 1000});
  const Tensor x = run_kernel_with(one, "Add", {m, row}, DType::kFloat32, {100, 1000});
  const Tensor y = run_kernel_with(two, "Add", {m, row}, DType::kFloat32, {100, 1000});
  EXPECT_TRUE(x.bitwise_equal(y));
  for (std::int64_t i = 0; i < n; i += 373) {
    ASSERT_EQ(x.data<float>()[i], a.data<float>()[i] + row.data<float>()[i % 1000]);
  }
}

}  // namespace
}  // namespace loom::testing
