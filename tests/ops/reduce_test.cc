// Rows and exact cases of the reduce family (ReduceSum, ReduceMean, ReduceMax, ReduceMin,
// ArgMax), the inference errors, and the two promises of the reduction kernels: bitwise the same
// result with 1 and 2 threads, and float32 sums of a million elements within 1e-6 of float64.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
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

namespace loom::testing {
namespace {

using ir::Value;

Value axis(std::vector<std::int64_t> a) { return Value::ints(a); }
Value yes() { return Value::boolean(true); }

OpCase row(std::string name, std::string op, ir::Primitive::Attrs attrs, InputSpec input,
           bool check_grad = true) {
  OpCase c;
  c.name = std::move(name);
  c.op = std::move(op);
  c.attrs = std::move(attrs);
  c.inputs = {std::move(input)};
  c.check_grad = check_grad;
  return c;
}

const Gen kDistinct = Gen::kDistinct;

static const CaseRegistrar kRows({
    row("reduce_sum_all", "ReduceSum", {}, {.shape = {3, 4}}),
    row("reduce_sum_axis1_keep", "ReduceSum", {{"axis", axis({1})}, {"keep_dims", yes()}},
        {.shape = {2, 3, 4}}),
    row("reduce_sum_outer_axes", "ReduceSum", {{"axis", axis({0, -1})}}, {.shape = {2, 3, 4}}),
    row("reduce_sum_scalar", "ReduceSum", {}, {.shape = {}}),
    row("reduce_mean_all", "ReduceMean", {}, {.shape = {4, 5}}),
    row("reduce_mean_axis0", "ReduceMean", {{"axis", axis({0})}}, {.shape = {3, 5}}),
    row("reduce_mean_outer_axes_keep", "ReduceMean", {{"axis", axis({0, 2})}, {"keep_dims", yes()}},
        {.shape = {2, 3, 4}}),
    row("reduce_max_all", "ReduceMax", {}, {.shape = {3, 4}, .gen = kDistinct}),
    row("reduce_max_axis1", "ReduceMax", {{"axis", axis({1})}},
        {.shape = {4, 6}, .gen = kDistinct}),
    row("reduce_max_outer_axes_keep", "ReduceMax", {{"axis", axis({0, 2})}, {"keep_dims", yes()}},
        {.shape = {2, 3, 4}, .gen = kDistinct}),
    row("reduce_min_all", "ReduceMin", {}, {.shape = {3, 4}, .gen = kDistinct}),
    row("reduce_min_axis0_keep", "ReduceMin", {{"axis", axis({0})}, {"keep_dims", yes()}},
        {.shape = {5, 3}, .gen = kDistinct}),
    row("argmax_last_axis", "ArgMax", {}, {.shape = {4, 6}, .gen = kDistinct}, false),
    row("argmax_axis0_int64", "ArgMax",
        {{"axis", Value::i64(0)}, {"output_type", Value::dtype(DType::kInt64)}},
        {.shape = {5, 3}, .gen = kDistinct}, false),
    row("float_status_finite", "FloatStatus", {}, {.shape = {4, 6}}, false),
});

Tensor f32(Shape shape, std::vector<float> v) { return Tensor::from_vector<float>(shape, v); }
Tensor f64(Shape shape, std::vector<double> v) { return Tensor::from_vector<double>(shape, v); }

Tensor run(std::string_view op, const Tensor& x, ir::Primitive::Attrs attrs = {}) {
  return backend::run_op(op, {Value::tensor(x)}, std::move(attrs)).as_tensor();
}

const Tensor k23 = f32({2, 3}, {1, 2, 3, 4, 5, 6});

TEST(Reduce, SumExact) {
  expect_tensor(run("ReduceSum", k23), {}, {21}, kDoubleEq);
  expect_tensor(run("ReduceSum", k23, {{"axis", axis({0})}}), {3}, {5, 7, 9}, kDoubleEq);
  expect_tensor(run("ReduceSum", k23, {{"axis", axis({1})}, {"keep_dims", yes()}}), {2, 1},
                {6, 15}, kDoubleEq);
  expect_tensor(run("ReduceSum", k23, {{"axis", axis({-1})}}), {2}, {6, 15}, kDoubleEq);
  expect_tensor(run("ReduceSum", k23, {{"axis", axis({0, 1})}, {"keep_dims", yes()}}), {1, 1},
                {21}, kDoubleEq);
}

TEST(Reduce, SumOverNonAdjacentAxes) {
  // x[i, j, k] = 12i + 4j + k; summing over i and k gives 60 + 32j.
  std::vector<double> v(24);
  for (int i = 0; i < 24; ++i) v[static_cast<std::size_t>(i)] = i;
  const Tensor x = f64({2, 3, 4}, v);
  expect_tensor(run("ReduceSum", x, {{"axis", axis({0, 2})}}), {3}, {60, 92, 124}, kDoubleEq);
  expect_tensor(run("ReduceSum", x, {{"axis", axis({2, 0})}, {"keep_dims", yes()}}), {1, 3, 1},
                {60, 92, 124}, kDoubleEq);
  // Summing over j keeps (i, k): 3 * (12i + k) + 12.
  expect_tensor(run("ReduceSum", x, {{"axis", axis({1})}}), {2, 4},
                {12, 15, 18, 21, 48, 51, 54, 57}, kDoubleEq);
}

TEST(Reduce, SumIntegersAndSizeOneAxes) {
  const Tensor xi = Tensor::from_vector<std::int32_t>({2, 1, 3}, {1, -2, 3, 40, 50, 60});
  const Tensor s = run("ReduceSum", xi, {{"axis", axis({0, 1})}});
  EXPECT_EQ(s.dtype(), DType::kInt32);
  expect_tensor(s, {3}, {41, 48, 63}, kDoubleEq);
  const Tensor xl = Tensor::from_vector<std::int64_t>({3}, {5000000000, 1, -2});
  expect_tensor(run("ReduceSum", xl), {}, {4999999999}, kDoubleEq);
  // Reducing only a size-1 axis copies.
  expect_tensor(run("ReduceSum", xi, {{"axis", axis({1})}}), {2, 3}, {1, -2, 3, 40, 50, 60},
                kDoubleEq);
}

TEST(Reduce, ScalarAndEmptyInputs) {
  const Tensor s = Tensor::scalar(DType::kFloat32, 2.5);
  expect_tensor(run("ReduceSum", s), {}, {2.5}, kDoubleEq);
  expect_tensor(run("ReduceMean", s, {{"axis", axis({0})}}), {}, {2.5}, kDoubleEq);
  expect_tensor(run("ReduceMax", s, {{"keep_dims", yes()}}), {}, {2.5}, kDoubleEq);
  const Tensor empty(DType::kFloat32, {0, 3});
  expect_tensor(run("ReduceSum", empty, {{"axis", axis({0})}}), {3}, {0, 0, 0}, kDoubleEq);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  expect_tensor(run("ReduceMean", empty, {{"axis", axis({0})}}), {3}, {nan, nan, nan}, kDoubleEq);
  expect_tensor(run("ReduceSum", empty, {{"axis", axis({1})}}), {0}, {}, kDoubleEq);
}

TEST(Reduce, MeanExact) {
  expect_tensor(run("ReduceMean", k23), {}, {3.5}, kDoubleEq);
  expect_tensor(run("ReduceMean", k23, {{"axis", axis({1})}}), {2}, {2, 5}, kDoubleEq);
  expect_tensor(run("ReduceMean", k23, {{"axis", axis({0})}, {"keep_dims", yes()}}), {1, 3},
                {2.5, 3.5, 4.5}, kDoubleEq);
}

TEST(Reduce, MaxMinExactWithTiesAndNaN) {
  const Tensor x = f32({2, 3}, {1, 3, 3, 2, -7, 1});
  expect_tensor(run("ReduceMax", x, {{"axis", axis({1})}}), {2}, {3, 2}, kDoubleEq);
  expect_tensor(run("ReduceMin", x, {{"axis", axis({1})}}), {2}, {1, -7}, kDoubleEq);
  expect_tensor(run("ReduceMax", x, {{"axis", axis({0})}, {"keep_dims", yes()}}), {1, 3},
                {2, 3, 3}, kDoubleEq);
  expect_tensor(run("ReduceMin", x), {}, {-7}, kDoubleEq);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor with_nan = f64({2, 2}, {1, nan, 4, 3});
  expect_tensor(run("ReduceMax", with_nan, {{"axis", axis({1})}}), {2}, {nan, 4}, kDoubleEq);
  expect_tensor(run("ReduceMin", with_nan, {{"axis", axis({0})}}), {2}, {1, nan}, kDoubleEq);
  const Tensor xi = Tensor::from_vector<std::int64_t>({4}, {3, -9, 12, 0});
  expect_tensor(run("ReduceMax", xi), {}, {12}, kDoubleEq);
  expect_tensor(run("ReduceMin", xi), {}, {-9}, kDoubleEq);
}

TEST(Reduce, ArgMaxTiesTakeTheFirstIndex) {
  const Tensor x = f32({2, 3}, {1, 3, 3, 5, 5, 0});
  const Tensor rows = run("ArgMax", x);
  EXPECT_EQ(rows.dtype(), DType::kInt32);
  expect_tensor(rows, {2}, {1, 0}, kDoubleEq);
  const Tensor cols =
      run("ArgMax", x, {{"axis", Value::i64(0)}, {"output_type", Value::dtype(DType::kInt64)}});
  EXPECT_EQ(cols.dtype(), DType::kInt64);
  expect_tensor(cols, {3}, {1, 1, 0}, kDoubleEq);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  expect_tensor(run("ArgMax", f64({4}, {1, nan, 5, nan})), {}, {1}, kDoubleEq);
  expect_tensor(run("ArgMax", Tensor::from_vector<std::int32_t>({3}, {-4, 8, 8})), {}, {1},
                kDoubleEq);
}

TEST(Reduce, FloatStatusFlagsInfAndNaNAnywhere) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const float big = std::numeric_limits<float>::max();
  EXPECT_EQ(run("FloatStatus", f32({4}, {1, -2, big, -big})).dtype(), DType::kFloat32);
  expect_tensor(run("FloatStatus", f32({4}, {1, -2, big, -big})), {1}, {0}, kDoubleEq);
  // Beyond Float32's range is finite in Float64.
  expect_tensor(run("FloatStatus", f64({3}, {1, double{big} * 4, 0})), {1}, {0}, kDoubleEq);
  for (const double bad : {inf, -inf, nan}) {
    // Anywhere in a tensor larger than one task's chunk, in both dtypes.
    for (const std::int64_t at : {std::int64_t{0}, std::int64_t{70000}, std::int64_t{199999}}) {
      Tensor x32(DType::kFloat32, {200000});
      Tensor x64(DType::kFloat64, {200000});
      x32.set(at, bad);
      x64.set(at, bad);
      expect_tensor(run("FloatStatus", x32), {1}, {1}, kDoubleEq);
      expect_tensor(run("FloatStatus", x64), {1}, {1}, kDoubleEq);
    }
  }
  expect_tensor(run("FloatStatus", Tensor(DType::kFloat32, {0})), {1}, {0}, kDoubleEq);
  EXPECT_EQ(op_error<TypeError>("FloatStatus",
                                {Value::tensor(Tensor::from_vector<std::int32_t>({1}, {1}))}, {}),
            "FloatStatus: expected a floating dtype, got Int32");
}

TEST(Reduce, MaxGradientSharesTiesEvenly) {
  // Row 0 has its maximum 3 twice: each copy gets half of dout.
  const std::vector<Value> x{Value::tensor(f64({2, 3}, {1, 3, 3, 2, 0, 1}))};
  ir::PrimitivePtr prim = ops::make_op("ReduceMax", {{"axis", axis({1})}});
  const Value out = backend::run_op(*prim, x);
  const std::vector<Value> g = backend::run_bprop(*prim, x, out, Value::tensor(f64({2}, {1, 4})));
  expect_tensor(g[0].as_tensor(), {2, 3}, {0, 0.5, 0.5, 4, 0, 0}, kDoubleEq);
}

TEST(Reduce, SumAndMeanGradientsBroadcastBack) {
  const std::vector<Value> x{Value::tensor(f64({2, 3}, {1, 2, 3, 4, 5, 6}))};
  ir::PrimitivePtr sum = ops::make_op("ReduceSum", {{"axis", axis({0})}});
  const std::vector<Value> gs =
      backend::run_bprop(*sum, x, backend::run_op(*sum, x), Value::tensor(f64({3}, {1, 2, 3})));
  expect_tensor(gs[0].as_tensor(), {2, 3}, {1, 2, 3, 1, 2, 3}, kDoubleEq);
  ir::PrimitivePtr mean = ops::make_op("ReduceMean", {{"axis", axis({1})}, {"keep_dims", yes()}});
  const std::vector<Value> gm =
      backend::run_bprop(*mean, x, backend::run_op(*mean, x), Value::tensor(f64({2, 1}, {3, 6})));
  expect_tensor(gm[0].as_tensor(), {2, 3}, {1, 1, 1, 2, 2, 2}, kDoubleEq);
}

TEST(Reduce, InferenceErrors) {
  EXPECT_EQ(op_error<ValueError>("ReduceSum", {Value::tensor(k23)}, {{"axis", axis({2})}}),
            "ReduceSum: expected axis in [-2, 2) for shape (2, 3), got 2");
  EXPECT_EQ(op_error<ValueError>("ReduceMean", {Value::tensor(k23)}, {{"axis", axis({1, -1})}}),
            "ReduceMean: expected distinct axes, got (1, -1) for shape (2, 3)");
  EXPECT_EQ(
      op_error<ValueError>("ReduceMax", {Value::tensor(Tensor(DType::kFloat32, {0, 3}))},
                           {{"axis", axis({0})}}),
      "ReduceMax: expected a non-empty reduced extent, got shape (0, 3) with axis (0)");
  EXPECT_EQ(op_error<TypeError>("ReduceMean", {Value::tensor(Tensor(DType::kInt32, {2}))}, {}),
            "ReduceMean: expected a floating dtype, got Int32");
  EXPECT_EQ(op_error<TypeError>("ReduceSum", {Value::tensor(Tensor(DType::kBool, {2}))}, {}),
            "ReduceSum: expected a floating or Int32/Int64 dtype, got Bool");
  EXPECT_EQ(op_error<ValueError>("ArgMax", {Value::tensor(k23)}, {{"axis", Value::i64(-3)}}),
            "ArgMax: expected axis in [-2, 2) for shape (2, 3), got -3");
  EXPECT_EQ(op_error<ValueError>("ArgMax", {Value::tensor(Tensor::scalar(DType::kFloat32, 1))}, {}),
            "ArgMax: expected an input of rank >= 1, got shape ()");
  EXPECT_EQ(op_error<ValueError>("ArgMax", {Value::tensor(Tensor(DType::kFloat32, {2, 0}))}, {}),
            "ArgMax: expected a non-empty axis 1, got shape (2, 0)");
  EXPECT_EQ(op_error<ValueError>("ArgMax", {Value::tensor(k23)},
                                 {{"output_type", Value::dtype(DType::kFloat32)}}),
            "ArgMax: attribute 'output_type' expected Int32 or Int64, got Float32");
}

TEST(Reduce, InferenceKeepsUnknownDims) {
  ir::PrimitivePtr p = ops::make_op("ReduceSum", {{"axis", axis({0})}});
  std::vector<ir::AbstractPtr> in{ir::Abstract::tensor(DType::kFloat32, {-1, 5})};
  EXPECT_EQ(ops::infer(*p, in)->to_string(), "<Tensor[Float32], (5)>");
  in = {ir::Abstract::tensor(DType::kFloat32, {4, -1, 2})};
  EXPECT_EQ(ops::infer(*p, in)->to_string(), "<Tensor[Float32], (-1, 2)>");
  in = {ir::Abstract::tensor_unranked(DType::kFloat32)};
  ir::PrimitivePtr all = ops::make_op("ReduceSum");
  EXPECT_EQ(ops::infer(*all, in)->to_string(), "<Tensor[Float32], ()>");
}

// Runs the registered CPU kernel of `op` on x with a pool of `threads` threads.
Tensor run_with_threads(std::string_view op, const Tensor& x, ir::Primitive::Attrs attrs,
                        int threads) {
  ir::PrimitivePtr prim = ops::make_op(op, std::move(attrs));
  std::vector<ir::AbstractPtr> in{ir::Abstract::of_value(Value::tensor(x))};
  const ir::AbstractPtr a = ops::infer(*prim, in);
  const backend::KernelDef* kernel = backend::cpu_backend().find_kernel(op, x.dtype());
  EXPECT_NE(kernel, nullptr);
  backend::ThreadPool pool(threads);
  std::vector<Tensor> inputs{x};
  std::vector<Tensor> outputs{Tensor(a->dtype(), a->shape())};
  backend::cpu::CpuContext ctx(&pool);
  backend::run_kernel(*kernel, *prim, inputs, outputs, backend::cpu_backend(), &ctx);
  return outputs[0];
}

Tensor random_f32(Shape shape, double lo, double hi, std::uint64_t seed) {
  Tensor t(DType::kFloat32, std::move(shape));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(static_cast<float>(lo), static_cast<float>(hi));
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = u(rng);
  return t;
}

// Reduces x over `axes` one element at a time in double: the oracle for the kernels' paths.
std::vector<double> naive_reduce(const Tensor& x, const std::vector<std::int64_t>& axes,
                                 const std::string& op) {
  const Shape& shape = x.shape();
  std::vector<bool> reduced(shape.size(), axes.empty());
  for (std::int64_t a : axes) reduced[static_cast<std::size_t>(a)] = true;
  std::int64_t out_n = 1;
  for (std::size_t d = 0; d < shape.size(); ++d) out_n *= reduced[d] ? 1 : shape[d];
  const bool sum = op == "ReduceSum";
  std::vector<double> out(static_cast<std::size_t>(out_n),
                          sum ? 0.0 : (op == "ReduceMax" ? -INFINITY : INFINITY));
  std::vector<std::int64_t> idx(shape.size(), 0);
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    std::int64_t o = 0;
    for (std::size_t d = 0; d < shape.size(); ++d) {
      if (!reduced[d]) o = o * shape[d] + idx[d];
    }
    double& acc = out[static_cast<std::size_t>(o)];
    const double v = x.get(i);
    acc = sum ? acc + v : (op == "ReduceMax" ? std::max(acc, v) : std::min(acc, v));
    for (std::size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

TEST(Reduce, EveryKernelPathAgreesWithANaiveLoop) {
  struct Case {
    Shape shape;
    std::vector<std::int64_t> axes;
  };
  const std::vector<Case> cases = {
      {{7, 130}, {1}},         // contiguous rows with a tail past the 64-wide fold
      {{100003}, {}},          // several chunks, ragged last chunk
      {{1000, 3}, {0}},        // narrow rows: 21 per wide row, 13 left over
      {{5000, 20}, {0}},       // narrow rows in 7 chunks
      {{300, 700}, {0}},       // wide rows, chunked, column blocks
      {{3, 70, 5}, {1}},       // middle axis
      {{2, 3, 4, 5}, {0, 2}},  // two reduced runs
      {{2, 3, 4, 5}, {1, 3}}, {{4, 1, 6}, {0, 1}},  // a size-1 reduced axis merges away
  };
  for (const char* op : {"ReduceSum", "ReduceMax", "ReduceMin"}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(op) + " " + shape_to_string(c.shape) + " axis " +
                   shape_to_string(c.axes));
      for (DType dt : {DType::kFloat64, DType::kInt32}) {
        Tensor x(dt, c.shape);
        std::mt19937_64 rng(11);
        std::uniform_int_distribution<int> u(-50, 50);
        for (std::int64_t i = 0; i < x.numel(); ++i)
          x.set(i, u(rng) / (dt == DType::kInt32 ? 1.0 : 8.0));
        const Tensor y = run(op, x, {{"axis", axis(c.axes)}});
        // Values are multiples of 1/8, so every sum here is exact.
        expect_tensor(y, y.shape(), naive_reduce(x, c.axes, op), kDoubleEq);
      }
    }
  }
}

TEST(Reduce, NaNPropagatesOnEveryPath) {
  for (const Shape& shape : {Shape{100000}, Shape{1000, 3}, Shape{300, 700}}) {
    SCOPED_TRACE(shape_to_string(shape));
    Tensor x = random_f32(shape, -1, 1, 5);
    x.set(x.numel() / 2 + 1, std::numeric_limits<double>::quiet_NaN());
    const Tensor mx = run("ReduceMax", x, {{"axis", axis({0})}});
    const Tensor mn = run("ReduceMin", x, {{"axis", axis({0})}});
    std::int64_t nans = 0;
    for (std::int64_t i = 0; i < mx.numel(); ++i)
      nans += std::isnan(mx.get(i)) + std::isnan(mn.get(i));
    EXPECT_EQ(nans, 2);
  }
}

TEST(Reduce, BitwiseIdenticalWithOneAndTwoThreads) {
  struct Case {
    Shape shape;
    std::vector<std::int64_t> axes;
  };
  const std::vector<Case> cases = {
      {{1000000}, {}},            // one contiguous run, 62 chunks
      {{4, 250000}, {1}},         // long rows
      {{250000, 4}, {0}},         // tall and narrow: chunked rows, strided
      {{1000, 1000}, {0}},        // column sums
      {{1000, 1000}, {1}},        // row sums
      {{100, 100, 100}, {0, 2}},  // two reduced runs
  };
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax"}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(op) + " " + shape_to_string(c.shape) + " axis " +
                   shape_to_string(c.axes));
      const Tensor x = random_f32(c.shape, -1, 1, 42);
      ir::Primitive::Attrs attrs{{"axis", axis(c.axes)}};
      const Tensor one = run_with_threads(op, x, attrs, 1);
      const Tensor two = run_with_threads(op, x, attrs, 2);
      EXPECT_TRUE(one.bitwise_equal(two));
    }
  }
  const Tensor x = random_f32({1000, 1000}, -1, 1, 7);
  for (std::int64_t ax : {0, 1}) {
    ir::Primitive::Attrs attrs{{"axis", Value::i64(ax)}};
    EXPECT_TRUE(run_with_threads("ArgMax", x, attrs, 1)
                    .bitwise_equal(run_with_threads("ArgMax", x, attrs, 2)));
  }
}

TEST(Reduce, Float32SumsOfAMillionElementsStayAccurate) {
  const Tensor x = random_f32({1000000}, 0, 1, 3);
  const float* p = x.data<float>();
  double exact = 0;
  for (std::int64_t i = 0; i < x.numel(); ++i) exact += p[i];
  const double sum = run_with_threads("ReduceSum", x, {}, 2).get(0);
  EXPECT_LT(std::abs(sum - exact) / exact, 1e-6) << sum << " vs " << exact;
  const double mean = run_with_threads("ReduceMean", x, {}, 2).get(0);
  EXPECT_LT(std::abs(mean - exact / 1e6) / (exact / 1e6), 1e-6);

  // Down the columns: the strided pairwise path.
  const Tensor cols =
      run_with_threads("ReduceSum", x.reshape({250000, 4}), {{"axis", axis({0})}}, 2);
  for (std::int64_t j = 0; j < 4; ++j) {
    double col = 0;
    for (std::int64_t i = 0; i < 250000; ++i) col += p[i * 4 + j];
    EXPECT_LT(std::abs(cols.get(j) - col) / col, 1e-6) << "column " << j;
  }
}

}  // namespace
}  // namespace loom::testing
