// The matrix-product family: table rows (every transpose mode, broadcast batch dims, each bias
// format), hand-computed cases, inference errors, and both GEMM implementations against a naive
// triple loop for every transpose mode, odd sizes, padded strides and alpha/beta.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>

#include "backends/cpu/gemm.h"
#include "backends/eager.h"
#include "core/ir/abstract.h"
#include "core/ir/error.h"
#include "ops/op.h"
#include "tests/ops/op_table.h"
#include "tests/ops/test_util.h"

namespace loom::testing {
namespace {

using ir::Value;

ir::Primitive::Attrs modes(bool ta, bool tb) {
  return {{"transpose_a", Value::boolean(ta)}, {"transpose_b", Value::boolean(tb)}};
}

ir::Primitive::Attrs format(const char* f) { return {{"format", Value::string(f)}}; }

static const CaseRegistrar kRows({
    {.name = "matmul", .op = "MatMul", .inputs = {{.shape = {3, 4}}, {.shape = {4, 5}}}},
    {.name = "matmul_transpose_a", .op = "MatMul", .attrs = modes(true, false),
     .inputs = {{.shape = {4, 3}}, {.shape = {4, 5}}}},
    {.name = "matmul_transpose_b", .op = "MatMul", .attrs = modes(false, true),
     .inputs = {{.shape = {3, 4}}, {.shape = {5, 4}}}},
    {.name = "matmul_transpose_ab", .op = "MatMul", .attrs = modes(true, true),
     .inputs = {{.shape = {4, 3}}, {.shape = {5, 4}}}},
    {.name = "batch_matmul", .op = "BatchMatMul",
     .inputs = {{.shape = {2, 3, 4}}, {.shape = {2, 4, 5}}}},
    {.name = "batch_matmul_transpose_a", .op = "BatchMatMul", .attrs = modes(true, false),
     .inputs = {{.shape = {2, 4, 3}}, {.shape = {2, 4, 5}}}},
    {.name = "batch_matmul_transpose_b", .op = "BatchMatMul", .attrs = modes(false, true),
     .inputs = {{.shape = {2, 3, 4}}, {.shape = {2, 5, 4}}}},
    {.name = "batch_matmul_transpose_ab", .op = "BatchMatMul", .attrs = modes(true, true),
     .inputs = {{.shape = {2, 4, 3}}, {.shape = {2, 5, 4}}}},
    {.name = "batch_matmul_broadcast", .op = "BatchMatMul",
     .inputs = {{.shape = {2, 1, 3, 4}}, {.shape = {3, 4, 2}}}},
    {.name = "batch_matmul_broadcast_transpose_ab", .op = "BatchMatMul",
     .attrs = modes(true, true), .inputs = {{.shape = {1, 3, 4, 3}}, {.shape = {2, 1, 2, 4}}}},
    {.name = "batch_matmul_rank2_y", .op = "BatchMatMul",
     .inputs = {{.shape = {2, 3, 4}}, {.shape = {4, 5}}}},
    {.name = "batch_matmul_rank2_y_transpose_a", .op = "BatchMatMul", .attrs = modes(true, false),
     .inputs = {{.shape = {2, 4, 3}}, {.shape = {4, 5}}}},
    {.name = "bias_add_nchw", .op = "BiasAdd", .inputs = {{.shape = {2, 3, 4, 5}}, {.shape = {3}}}},
    {.name = "bias_add_rank2", .op = "BiasAdd", .inputs = {{.shape = {4, 3}}, {.shape = {3}}}},
    {.name = "bias_add_nhwc", .op = "BiasAdd", .attrs = format("NHWC"),
     .inputs = {{.shape = {2, 3, 4}}, {.shape = {4}}}},
    {.name = "bias_add_grad_nchw", .op = "BiasAddGrad", .inputs = {{.shape = {2, 3, 4, 5}}}},
    {.name = "bias_add_grad_rank2", .op = "BiasAddGrad", .inputs = {{.shape = {4, 3}}}},
    {.name = "bias_add_grad_nhwc", .op = "BiasAddGrad", .attrs = format("NHWC"),
     .inputs = {{.shape = {2, 3, 4}}}},
});

template <typename T>
Value tensor(Shape shape, std::vector<T> values) {
  return Value::tensor(Tensor::from_vector<T>(std::move(shape), values));
}

// ---- MatMul ----------------------------------------------------------------------------------

TEST(MatMul, EveryTransposeModeFloat32) {
  const Value a = tensor<float>({2, 2}, {1, 2, 3, 4});
  const Value b = tensor<float>({2, 2}, {5, 6, 7, 8});
  expect_tensor(backend::run_op("MatMul", {a, b}), {2, 2}, {19, 22, 43, 50}, kDoubleEq);
  expect_tensor(backend::run_op("MatMul", {a, b}, modes(true, false)), {2, 2}, {26, 30, 38, 44},
                kDoubleEq);
  expect_tensor(backend::run_op("MatMul", {a, b}, modes(false, true)), {2, 2}, {17, 23, 39, 53},
                kDoubleEq);
  expect_tensor(backend::run_op("MatMul", {a, b}, modes(true, true)), {2, 2}, {23, 31, 34, 46},
                kDoubleEq);
}

TEST(MatMul, RectangularFloat64) {
  const Value a = tensor<double>({2, 3}, {1, 2, 3, 4, 5, 6});
  const Value b = tensor<double>({3, 1}, {1, 0, -1});
  const Value c = backend::run_op("MatMul", {a, b});
  EXPECT_EQ(c.as_tensor().dtype(), DType::kFloat64);
  expect_tensor(c, {2, 1}, {-2, -2}, kDoubleEq);
  // (3, 2)ᵀ · (3, 1): the transposed operand is read in place.
  const Value at = tensor<double>({3, 2}, {1, 4, 2, 5, 3, 6});
  expect_tensor(backend::run_op("MatMul", {at, b}, modes(true, false)), {2, 1}, {-2, -2},
                kDoubleEq);
}

TEST(MatMul, EmptyInnerDimGivesZeros) {
  const Value a(Value::tensor(Tensor(DType::kFloat32, {2, 0})));
  const Value b(Value::tensor(Tensor(DType::kFloat32, {0, 3})));
  expect_tensor(backend::run_op("MatMul", {a, b}), {2, 3}, {0, 0, 0, 0, 0, 0}, kDoubleEq);
}

TEST(MatMul, GradientsOfEachModeByHand) {
  // C = A·B with dC = ones: dA = ones·Bᵀ (row sums of B), dB = Aᵀ·ones (column sums of A).
  const Value a = tensor<double>({2, 2}, {1, 2, 3, 4});
  const Value b = tensor<double>({2, 2}, {5, 6, 7, 8});
  const Value ones = tensor<double>({2, 2}, {1, 1, 1, 1});
  auto grads = [&](bool ta, bool tb) {
    ir::PrimitivePtr p = ops::make_op("MatMul", modes(ta, tb));
    std::vector<Value> args = {a, b};
    return backend::run_bprop(*p, args, backend::run_op(*p, args), ones);
  };
  std::vector<Value> g = grads(false, false);
  expect_tensor(g[0], {2, 2}, {11, 15, 11, 15}, kDoubleEq);
  expect_tensor(g[1], {2, 2}, {4, 4, 6, 6}, kDoubleEq);
  // C = Aᵀ·B: dA[i][j] = Σ_n B[i][n] · 1, dB = A·ones.
  g = grads(true, false);
  expect_tensor(g[0], {2, 2}, {11, 11, 15, 15}, kDoubleEq);
  expect_tensor(g[1], {2, 2}, {3, 3, 7, 7}, kDoubleEq);
  // C = A·Bᵀ: dA = ones·B (column sums of B), dB = onesᵀ·A (column sums of A).
  g = grads(false, true);
  expect_tensor(g[0], {2, 2}, {12, 14, 12, 14}, kDoubleEq);
  expect_tensor(g[1], {2, 2}, {4, 6, 4, 6}, kDoubleEq);
  // C = Aᵀ·Bᵀ: dA = Bᵀ·ones, dB = ones·Aᵀ.
  g = grads(true, true);
  expect_tensor(g[0], {2, 2}, {12, 12, 14, 14}, kDoubleEq);
  expect_tensor(g[1], {2, 2}, {3, 7, 3, 7}, kDoubleEq);
}

TEST(MatMul, InferenceErrors) {
  const Value a23 = Value::tensor(Tensor(DType::kFloat32, {2, 3}));
  const Value b45 = Value::tensor(Tensor(DType::kFloat32, {4, 5}));
  const Value b25 = Value::tensor(Tensor(DType::kFloat32, {2, 5}));
  EXPECT_EQ(op_error<ShapeError>("MatMul", {a23, b45}),
            "MatMul: expected inner dims to agree, got (2, 3) and (4, 5)");
  EXPECT_EQ(op_error<ShapeError>("MatMul", {a23, b25}, modes(false, true)),
            "MatMul: expected inner dims to agree, got (2, 3) and (2, 5) with transpose_b");
  EXPECT_EQ(op_error<ShapeError>("MatMul", {a23, b45}, modes(true, true)),
            "MatMul: expected inner dims to agree, got (2, 3) and (4, 5) with transpose_a and "
            "transpose_b");
  const Value a234 = Value::tensor(Tensor(DType::kFloat32, {2, 3, 4}));
  EXPECT_EQ(op_error<ShapeError>("MatMul", {a234, b45}),
            "MatMul: expected rank-2 inputs, got (2, 3, 4) and (4, 5)");
  const Value d35 = Value::tensor(Tensor(DType::kFloat64, {3, 5}));
  EXPECT_EQ(op_error<TypeError>("MatMul", {a23, d35}),
            "MatMul: expected inputs of the same dtype, got Float32 and Float64");
  const Value i23 = Value::tensor(Tensor(DType::kInt32, {2, 3}));
  const Value i35 = Value::tensor(Tensor(DType::kInt32, {3, 5}));
  EXPECT_EQ(op_error<TypeError>("MatMul", {i23, i35}),
            "MatMul: expected floating-point inputs, got Int32");
}

TEST(MatMul, UnknownDimsPropagate) {
  ir::PrimitivePtr p = ops::make_op("MatMul", modes(false, true));
  std::vector<ir::AbstractPtr> in = {ir::Abstract::tensor(DType::kFloat32, {-1, 3}),
                                     ir::Abstract::tensor(DType::kFloat32, {-1, -1})};
  EXPECT_EQ(ops::infer(*p, in)->to_string(), "<Tensor[Float32], (-1, -1)>");
}

// ---- BatchMatMul -----------------------------------------------------------------------------

TEST(BatchMatMul, BatchesAndRank2Operand) {
  // x = [A, I], y = B (rank 2, broadcast over the batch): [A·B, B].
  const Value x = tensor<float>({2, 2, 2}, {1, 2, 3, 4, 1, 0, 0, 1});
  const Value y = tensor<float>({2, 2}, {5, 6, 7, 8});
  expect_tensor(backend::run_op("BatchMatMul", {x, y}), {2, 2, 2}, {19, 22, 43, 50, 5, 6, 7, 8},
                kDoubleEq);
  expect_tensor(backend::run_op("BatchMatMul", {x, y}, modes(true, true)), {2, 2, 2},
                {23, 31, 34, 46, 5, 7, 6, 8}, kDoubleEq);
}

TEST(BatchMatMul, EveryTransposeModeFloat64) {
  const Value x = tensor<double>({1, 2, 2}, {1, 2, 3, 4});
  const Value y = tensor<double>({1, 2, 2}, {5, 6, 7, 8});
  expect_tensor(backend::run_op("BatchMatMul", {x, y}), {1, 2, 2}, {19, 22, 43, 50}, kDoubleEq);
  expect_tensor(backend::run_op("BatchMatMul", {x, y}, modes(true, false)), {1, 2, 2},
                {26, 30, 38, 44}, kDoubleEq);
  expect_tensor(backend::run_op("BatchMatMul", {x, y}, modes(false, true)), {1, 2, 2},
                {17, 23, 39, 53}, kDoubleEq);
  expect_tensor(backend::run_op("BatchMatMul", {x, y}, modes(true, true)), {1, 2, 2},
                {23, 31, 34, 46}, kDoubleEq);
}

TEST(BatchMatMul, BroadcastBatchDims) {
  // x: two row vectors (2, 1, 1, 2); y: three column vectors (3, 2, 1); out[i][j] = x[i]·y[j].
  const Value x = tensor<float>({2, 1, 1, 2}, {1, 2, 3, 4});
  const Value y = tensor<float>({3, 2, 1}, {1, 0, 0, 1, 1, 1});
  expect_tensor(backend::run_op("BatchMatMul", {x, y}), {2, 3, 1, 1}, {1, 2, 3, 3, 4, 7},
                kDoubleEq);
}

// A product big enough to take the one-matrix-at-a-time path, and many small ones spread over
// the pool, both against a naive loop.
TEST(BatchMatMul, LargeAndManySmallMatchNaive) {
  for (const auto& [xs, ys] : std::vector<std::pair<Shape, Shape>>{
           {{3, 70, 65}, {1, 65, 80}}, {{40, 1, 5, 6}, {1, 9, 6, 7}}}) {
    Tensor x = make_tensor({.shape = xs}, 1, false);
    Tensor y = make_tensor({.shape = ys}, 2, false);
    const Tensor c = backend::run_op("BatchMatMul", {Value::tensor(x), Value::tensor(y)}).as_tensor();
    const std::int64_t m = xs[xs.size() - 2], k = xs.back(), n = ys.back();
    const std::int64_t batches = c.numel() / (m * n);
    const Shape out_batch(c.shape().begin(), c.shape().end() - 2);
    for (std::int64_t bi = 0; bi < batches; ++bi) {
      // Unravel the batch index and map it into each operand (size-1 dims broadcast).
      auto offset = [&](const Shape& s, std::int64_t mat) {
        std::int64_t idx = bi, off = 0, stride = mat;
        const std::size_t lead = out_batch.size() - (s.size() - 2);
        for (std::size_t i = out_batch.size(); i-- > 0;) {
          const std::int64_t coord = idx % out_batch[i];
          idx /= out_batch[i];
          if (i >= lead) {
            const std::int64_t dim = s[i - lead];
            if (dim != 1) off += coord * stride;
            stride *= dim;
          }
        }
        return off;
      };
      const std::int64_t ox = offset(xs, m * k), oy = offset(ys, k * n);
      for (std::int64_t i = 0; i < m; ++i) {
        for (std::int64_t j = 0; j < n; ++j) {
          double ref = 0;
          for (std::int64_t p = 0; p < k; ++p) {
            ref += x.get(ox + i * k + p) * y.get(oy + p * n + j);
          }
          ASSERT_NEAR(c.get(bi * m * n + i * n + j), ref, 1e-4 * (1 + std::abs(ref)));
        }
      }
    }
  }
}

TEST(BatchMatMul, InferenceErrors) {
  auto t = [](Shape s) { return Value::tensor(Tensor(DType::kFloat32, std::move(s))); };
  EXPECT_EQ(op_error<ShapeError>("BatchMatMul", {t({2, 3}), t({3, 4})}),
            "BatchMatMul: expected x of rank >= 3 and y of rank >= 2, got (2, 3) and (3, 4)");
  EXPECT_EQ(op_error<ShapeError>("BatchMatMul", {t({2, 3, 4}), t({3, 4, 5})}),
            "BatchMatMul: expected broadcastable batch dims, got (2, 3, 4) and (3, 4, 5)");
  EXPECT_EQ(op_error<ShapeError>("BatchMatMul", {t({2, 3, 4}), t({2, 5, 6})}),
            "BatchMatMul: expected inner dims to agree, got (2, 3, 4) and (2, 5, 6)");
  EXPECT_EQ(op_error<ShapeError>("BatchMatMul", {t({2, 3, 4}), t({2, 5, 6})}, modes(true, false)),
            "BatchMatMul: expected inner dims to agree, got (2, 3, 4) and (2, 5, 6) with "
            "transpose_a");
}

TEST(BatchMatMul, UnknownDimsPropagate) {
  ir::PrimitivePtr p = ops::make_op("BatchMatMul");
  std::vector<ir::AbstractPtr> in = {ir::Abstract::tensor(DType::kFloat32, {-1, 1, 2, 3}),
                                     ir::Abstract::tensor(DType::kFloat32, {5, 3, -1})};
  EXPECT_EQ(ops::infer(*p, in)->to_string(), "<Tensor[Float32], (-1, 5, 2, -1)>");
}

// ---- BiasAdd / BiasAddGrad -------------------------------------------------------------------

TEST(BiasAdd, Rank2AddsAlongTheLastAxis) {
  const Value x = tensor<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  const Value b = tensor<float>({3}, {10, 20, 30});
  expect_tensor(backend::run_op("BiasAdd", {x, b}), {2, 3}, {11, 22, 33, 14, 25, 36}, kDoubleEq);
}

TEST(BiasAdd, NchwAddsAlongAxis1AndNhwcAlongTheLast) {
  const Value x = tensor<double>({1, 2, 2, 2}, {0, 0, 0, 0, 0, 0, 0, 0});
  const Value b = tensor<double>({2}, {1, 2});
  expect_tensor(backend::run_op("BiasAdd", {x, b}), {1, 2, 2, 2}, {1, 1, 1, 1, 2, 2, 2, 2},
                kDoubleEq);
  const Value xh = tensor<double>({1, 2, 2}, {0, 0, 0, 0});
  expect_tensor(backend::run_op("BiasAdd", {xh, b}, format("NHWC")), {1, 2, 2}, {1, 2, 1, 2},
                kDoubleEq);
}

TEST(BiasAdd, GradientIsDoutAndItsChannelSums) {
  const Value x = tensor<double>({2, 2, 2}, {0, 0, 0, 0, 0, 0, 0, 0});
  const Value b = tensor<double>({2}, {0, 0});
  const Value d = tensor<double>({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  ir::PrimitivePtr p = ops::make_op("BiasAdd");
  std::vector<Value> args = {x, b};
  std::vector<Value> g = backend::run_bprop(*p, args, backend::run_op(*p, args), d);
  expect_tensor(g[0], {2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8}, kDoubleEq);
  expect_tensor(g[1], {2}, {14, 22}, kDoubleEq);
}

TEST(BiasAddGrad, SumsEveryAxisButTheChannelAxis) {
  const Value d = tensor<float>({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  expect_tensor(backend::run_op("BiasAddGrad", {d}), {2}, {14, 22}, kDoubleEq);
  expect_tensor(backend::run_op("BiasAddGrad", {d}, format("NHWC")), {2}, {16, 20}, kDoubleEq);
  const Value d2 = tensor<double>({3, 2}, {1, 2, 3, 4, 5, 6});
  expect_tensor(backend::run_op("BiasAddGrad", {d2}), {2}, {9, 12}, kDoubleEq);
}

TEST(BiasAddGrad, LargeInputsMatchAPlainSumAndRepeatBitwise) {
  for (const char* f : {"NCHW", "NHWC"}) {
    const Tensor d = make_tensor({.shape = {16, 37, 9, 31}}, 3, false);
    const Value out = backend::run_op("BiasAddGrad", {Value::tensor(d)}, format(f));
    const bool nhwc = std::string(f) == "NHWC";
    const std::int64_t channels = nhwc ? 31 : 37;
    std::vector<double> ref(static_cast<std::size_t>(channels), 0.0);
    for (std::int64_t i = 0; i < d.numel(); ++i) {
      const std::int64_t ch = nhwc ? i % 31 : (i / (9 * 31)) % 37;
      ref[static_cast<std::size_t>(ch)] += d.get(i);
    }
    const Tensor& t = out.as_tensor();
    for (std::int64_t ch = 0; ch < channels; ++ch) {
      EXPECT_NEAR(t.get(ch), ref[static_cast<std::size_t>(ch)], 1e-3) << f << " channel " << ch;
    }
    const Value again = backend::run_op("BiasAddGrad", {Value::tensor(d)}, format(f));
    EXPECT_TRUE(again.as_tensor().bitwise_equal(t));
  }
}

TEST(BiasAdd, InferenceErrors) {
  auto t = [](Shape s) { return Value::tensor(Tensor(DType::kFloat32, std::move(s))); };
  EXPECT_EQ(op_error<ShapeError>("BiasAdd", {t({2, 3, 4}), t({4})}),
            "BiasAdd: expected a rank-1 bias of length 3 (axis 1 of x), got (2, 3, 4) and (4)");
  EXPECT_EQ(op_error<ShapeError>("BiasAdd", {t({2, 3, 4}), t({3})}, format("NHWC")),
            "BiasAdd: expected a rank-1 bias of length 4 (axis 2 of x), got (2, 3, 4) and (3)");
  EXPECT_EQ(op_error<ShapeError>("BiasAdd", {t({3}), t({3})}),
            "BiasAdd: expected x of rank >= 2, got (3)");
  EXPECT_EQ(op_error<ValueError>("BiasAdd", {t({2, 3}), t({3})}, format("NCW")),
            "BiasAdd: attribute 'format' expected one of NCHW, NHWC, NCDHW, got 'NCW'");
  EXPECT_EQ(op_error<ShapeError>("BiasAddGrad", {t({3})}),
            "BiasAddGrad: expected an input of rank >= 2, got (3)");
}

// ---- cpu::gemm -------------------------------------------------------------------------------

// C = alpha·op(A)·op(B) + beta·C through `impl`, with row strides padded past the logical
// widths, against a naive loop in double.
template <typename T>
void check_gemm(backend::cpu::GemmImpl impl, bool ta, bool tb, std::int64_t m, std::int64_t n,
                std::int64_t k, T alpha, T beta) {
  SCOPED_TRACE(std::string(backend::cpu::gemm_name(impl)) + (ta ? " Aᵀ" : " A") +
               (tb ? " Bᵀ" : " B") + " m=" + std::to_string(m) + " n=" + std::to_string(n) +
               " k=" + std::to_string(k) + " alpha=" + std::to_string(alpha) +
               " beta=" + std::to_string(beta));
  const std::int64_t a_rows = ta ? k : m, a_cols = ta ? m : k;
  const std::int64_t b_rows = tb ? n : k, b_cols = tb ? k : n;
  const std::int64_t lda = a_cols + 3, ldb = b_cols + 1, ldc = n + 2;
  std::mt19937 rng(static_cast<unsigned>(m * 131 + n * 17 + k));
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<T> a(static_cast<std::size_t>(a_rows * lda)), b(static_cast<std::size_t>(b_rows * ldb));
  std::vector<T> c(static_cast<std::size_t>(m * ldc));
  for (T& v : a) v = static_cast<T>(u(rng));
  for (T& v : b) v = static_cast<T>(u(rng));
  for (T& v : c) v = static_cast<T>(u(rng));
  const std::vector<T> c0 = c;
  backend::cpu::gemm(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc,
                     impl);
  const double eps = std::is_same_v<T, float> ? 1e-6 : 1e-14;
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < ldc; ++j) {
      const std::size_t at = static_cast<std::size_t>(i * ldc + j);
      if (j >= n) {
        ASSERT_EQ(c[at], c0[at]) << "padding of row " << i << " was written";
        continue;
      }
      double sum = 0, mag = 0;
      for (std::int64_t p = 0; p < k; ++p) {
        const double av = a[static_cast<std::size_t>(ta ? p * lda + i : i * lda + p)];
        const double bv = b[static_cast<std::size_t>(tb ? j * ldb + p : p * ldb + j)];
        sum += av * bv;
        mag += std::abs(av * bv);
      }
      const double ref = alpha * sum + (beta == T(0) ? 0.0 : beta * double(c0[at]));
      const double tol = 4 * eps * (double(k) + 2) * (std::abs(alpha) * mag + std::abs(beta) + 1);
      ASSERT_NEAR(c[at], ref, tol) << "C[" << i << "][" << j << "]";
    }
  }
}

const backend::cpu::GemmImpl kImpls[] = {backend::cpu::GemmImpl::kOpenBLAS,
                                         backend::cpu::GemmImpl::kEigen};

struct Size {
  std::int64_t m, n, k;
};
// Odd sizes around vector widths and block edges, degenerate ones, and two large enough for
// the Eigen path to split across the pool (into row blocks, then column blocks).
const Size kSizes[] = {{1, 1, 1},    {1, 7, 3},      {5, 1, 9},     {7, 13, 5},
                       {17, 33, 65}, {31, 64, 1},    {130, 67, 129}, {3, 2000, 27},
                       {257, 96, 200}, {40, 1100, 400}};

TEST(Gemm, BothImplsMatchANaiveLoopFloat32) {
  for (auto impl : kImpls) {
    for (const Size& s : kSizes) {
      for (int mode = 0; mode < 4; ++mode) {
        check_gemm<float>(impl, mode & 1, mode & 2, s.m, s.n, s.k, 1.f, 0.f);
      }
    }
  }
}

TEST(Gemm, BothImplsMatchANaiveLoopFloat64) {
  for (auto impl : kImpls) {
    for (const Size& s : kSizes) {
      for (int mode = 0; mode < 4; ++mode) {
        check_gemm<double>(impl, mode & 1, mode & 2, s.m, s.n, s.k, 1.0, 0.0);
      }
    }
  }
}

TEST(Gemm, AlphaAndBeta) {
  for (auto impl : kImpls) {
    for (int mode = 0; mode < 4; ++mode) {
      check_gemm<float>(impl, mode & 1, mode & 2, 9, 11, 7, 1.5f, 1.f);
      check_gemm<float>(impl, mode & 1, mode & 2, 9, 11, 7, -0.5f, 0.25f);
      check_gemm<double>(impl, mode & 1, mode & 2, 130, 67, 129, 2.0, -1.0);
      check_gemm<double>(impl, mode & 1, mode & 2, 3, 2000, 27, 0.5, 3.0);
      check_gemm<float>(impl, mode & 1, mode & 2, 257, 96, 200, 0.5f, 2.f);
    }
  }
}

TEST(Gemm, ZeroInnerDimScalesC) {
  for (auto impl : kImpls) {
    std::vector<float> c = {1, 2, 3, 4};
    backend::cpu::gemm(false, false, 2, 2, 0, 1.f, nullptr, 1, nullptr, 2, 0.5f, c.data(), 2,
                       impl);
    EXPECT_EQ(c, (std::vector<float>{0.5f, 1, 1.5f, 2}));
    // beta = 0 overwrites whatever C held, NaN included (BLAS semantics).
    c = {NAN, 1, 2, 3};
    backend::cpu::gemm(false, false, 2, 2, 0, 1.f, nullptr, 1, nullptr, 2, 0.f, c.data(), 2,
                       impl);
    EXPECT_EQ(c, (std::vector<float>{0, 0, 0, 0}));
  }
}

TEST(Gemm, BetaZeroIgnoresNanInC) {
  for (auto impl : kImpls) {
    std::vector<double> a = {1, 2, 3, 4}, b = {5, 6, 7, 8}, c(4, NAN);
    backend::cpu::gemm(false, false, 2, 2, 2, 1.0, a.data(), 2, b.data(), 2, 0.0, c.data(), 2,
                       impl);
    EXPECT_EQ(c, (std::vector<double>{19, 22, 43, 50}));
  }
}

TEST(Gemm, EigenSplitRepeatsBitwise) {
  // Large enough to be cut into blocks over the pool; which thread runs a block varies, the
  // blocks (and so the bits) do not.
  const std::int64_t m = 96, n = 1500, k = 300;
  std::vector<float> a(m * k), b(k * n), c1(m * n), c2(m * n);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  for (float& v : a) v = u(rng);
  for (float& v : b) v = u(rng);
  backend::cpu::gemm(false, false, m, n, k, 1.f, a.data(), k, b.data(), n, 0.f, c1.data(), n,
                     backend::cpu::GemmImpl::kEigen);
  backend::cpu::gemm(false, false, m, n, k, 1.f, a.data(), k, b.data(), n, 0.f, c2.data(), n,
                     backend::cpu::GemmImpl::kEigen);
  EXPECT_EQ(c1, c2);
}

TEST(Gemm, Names) {
  EXPECT_EQ(backend::cpu::gemm_name(backend::cpu::GemmImpl::kOpenBLAS), "openblas");
  EXPECT_EQ(backend::cpu::gemm_name(backend::cpu::GemmImpl::kEigen), "eigen");
}

// Small products (LeNet's dense layers) go to Eigen on the calling thread, by shape only;
// large ones to the default; LOOM_GEMM (read once per process) would override both.
TEST(Gemm, ImplementationForShape) {
  using backend::cpu::GemmImpl;
  if (std::getenv("LOOM_GEMM") != nullptr) GTEST_SKIP() << "LOOM_GEMM set";
  EXPECT_EQ(backend::cpu::gemm_for_shape(32, 120, 400), GemmImpl::kEigen);  // 3.1 MFLOP
  EXPECT_EQ(backend::cpu::gemm_for_shape(256, 120, 400), GemmImpl::kEigen);  // 24.6 MFLOP
  EXPECT_EQ(backend::cpu::gemm_for_shape(8, 1000, 2048), backend::cpu::default_gemm());  // 32.8
  EXPECT_EQ(backend::cpu::gemm_for_shape(1024, 1024, 1024), backend::cpu::default_gemm());
}

}  // namespace
}  // namespace loom::testing
