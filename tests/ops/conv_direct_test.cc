// Tests of the direct Float32 convolutions for small channel counts (backends/cpu/conv_direct.cc),
// which Conv2D, Conv2DBackpropInput and Conv2DBackpropFilter use by default where the build has
// AVX-512 for group 1, stride 1, no dilation, at most 16 output and 8 input channels. On random
// shapes (odd sizes, batch 1, 1-8 input and 1-16 output channels, 1x1 / 3x3 / 5x5 and non-square
// kernels, "valid", "same" and explicit asymmetric padding, padding past the kernel's reach) and
// on LeNet-5's layers, each op is compared with
//   - the im2col + GEMM path in Float32 (LOOM_CONV=im2col), and
//   - the im2col path in Float64 on the same (widened) inputs,
// to 1e-5 of the largest magnitude of the reference (the filter gradient sums thousands of
// products: element-wise relative error is not meaningful for its near-zero elements); the
// kernels are also called directly; results must be bitwise the same on pools of 1, 2 and 3
// threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cpu/conv_direct.h"
#include "backends/kernel.h"
#include "backends/thread_pool.h"
#include "core/ir/abstract.h"
#include "ops/op.h"
#include "tests/ops/conv_test_util.h"
#include "tests/ops/test_util.h"

namespace loom::testing {
namespace {

using Case = ConvCase;
using Ints = std::vector<std::int64_t>;

// LeNet-5's two layers at batch 32 and 5.
std::vector<Case> lenet_cases() {
  return {{{32, 1, 32, 32}, {6, 1, 5, 5}, "valid", {0, 0, 0, 0}},
          {{32, 6, 14, 14}, {16, 6, 5, 5}, "valid", {0, 0, 0, 0}},
          {{5, 1, 32, 32}, {6, 1, 5, 5}, "valid", {0, 0, 0, 0}},
          {{5, 6, 14, 14}, {16, 6, 5, 5}, "valid", {0, 0, 0, 0}}};
}

// Hand-picked edge cases, then random shapes (fixed seed).
std::vector<Case> cases() {
  std::vector<Case> all = {
      // batch 1, one channel each way, 1x1
      {{1, 1, 7, 9}, {1, 1, 1, 1}, "valid", {0, 0, 0, 0}},
      // rows of exactly 16 and 32 outputs, and 33 (a second segment of one column; AVX-512's
      // vectors of 16 lanes and segments of 32 columns), and of 8 and 17 (AVX2's 8 and 16)
      {{2, 3, 10, 10}, {5, 3, 3, 3}, "valid", {0, 0, 0, 0}},
      {{1, 4, 10, 21}, {9, 4, 5, 5}, "valid", {0, 0, 0, 0}},
      {{2, 3, 18, 18}, {5, 3, 3, 3}, "valid", {0, 0, 0, 0}},
      {{2, 2, 36, 36}, {7, 2, 5, 5}, "valid", {0, 0, 0, 0}},
      {{1, 4, 10, 37}, {9, 4, 5, 5}, "valid", {0, 0, 0, 0}},
      // 8 in, 16 out (the rule's corner), "same"
      {{2, 8, 11, 13}, {16, 8, 3, 3}, "same", {0, 0, 0, 0}},
      // padding past the kernel's reach, asymmetric, non-square kernel
      {{1, 3, 4, 5}, {5, 3, 3, 3}, "pad", {3, 3, 3, 3}},
      {{3, 5, 9, 10}, {13, 5, 2, 4}, "pad", {2, 0, 1, 3}},
      // output channels that split into uneven blocks, 7-wide kernel rows
      {{2, 2, 15, 40}, {13, 2, 7, 7}, "same", {0, 0, 0, 0}},
      // rows up to 64 wide
      {{1, 1, 6, 64}, {3, 1, 1, 3}, "same", {0, 0, 0, 0}},
  };
  std::mt19937 rng(12345);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const int kernels[] = {1, 3, 5};
  const char* modes[] = {"valid", "same", "pad"};
  for (int t = 0; t < 24; ++t) {
    const std::int64_t k = kernels[pick(0, 2)];
    const std::int64_t n = pick(1, 4), c = pick(1, 8), o = pick(1, 16);
    const std::int64_t h = pick(static_cast<int>(k), 29), w = pick(static_cast<int>(k), 40);
    const std::string mode = modes[pick(0, 2)];
    Ints pad = {0, 0, 0, 0};
    if (mode == "pad") {
      for (auto& p : pad) p = pick(0, 3);
    }
    all.push_back({{n, c, h, w}, {o, c, k, k}, mode, pad});
  }
  for (const Case& c : lenet_cases()) all.push_back(c);
  return all;
}

// max |actual - expected| / max(1, max |expected|) < tolerance.
void expect_close_normwise(const Tensor& actual, const Tensor& expected, double tolerance) {
  ASSERT_EQ(actual.shape(), expected.shape());
  double worst = 0, scale = 1;
  for (std::int64_t i = 0; i < actual.numel(); ++i) {
    ASSERT_TRUE(std::isfinite(actual.get(i))) << "element " << i;
    worst = std::max(worst, std::abs(actual.get(i) - expected.get(i)));
    scale = std::max(scale, std::abs(expected.get(i)));
  }
  EXPECT_LT(worst / scale, tolerance);
}

TEST(ConvDirect, RuleTakesTheseShapes) {
  backend::ThreadPool one(1);
  for (const Case& c : cases()) {
    SCOPED_TRACE(describe(c));
    const Tensor y = run_im2col(one, "Conv2D", {random_normal(DType::kFloat32, c.x, 1),
                                                random_normal(DType::kFloat32, c.w, 2)},
                                conv_attrs(c));
    EXPECT_TRUE(backend::cpu::direct_conv_suits(conv_shape_of(c, y.shape())));
  }
  // Not for more channels, strides or dilation.
  backend::cpu::ConvShape s = conv_shape_of(lenet_cases()[1], {32, 16, 10, 10});
  s.o = 17;
  EXPECT_FALSE(backend::cpu::direct_conv_suits(s));
  s.o = 16;
  s.c = 9;
  EXPECT_FALSE(backend::cpu::direct_conv_suits(s));
  s.c = 6;
  s.sh = 2;
  EXPECT_FALSE(backend::cpu::direct_conv_suits(s));
  s.sh = 1;
  s.dil_w = 2;
  EXPECT_FALSE(backend::cpu::direct_conv_suits(s));
}

TEST(ConvDirect, OpsMatchIm2colAndFloat64) {
  if (!backend::cpu::direct_conv_available()) GTEST_SKIP() << "built without AVX-512 or AVX2";
  backend::ThreadPool two(2);
  for (const Case& c : cases()) {
    SCOPED_TRACE(describe(c));
    for (const auto& [op, args, attrs] : conv_calls(c)) {
      SCOPED_TRACE(op);
      const Tensor fast = run_kernel(two, op, args, attrs);
      expect_close_normwise(fast, run_im2col(two, op, args, attrs), 1e-5);
      std::vector<Tensor> wide;
      for (const Tensor& t : args) wide.push_back(widen(t));
      expect_close_normwise(widen(fast), run_im2col(two, op, wide, attrs), 1e-5);
    }
  }
}

// The kernels called directly (also where the build lacks AVX-512 and AVX2: the plain-loop
// versions).
TEST(ConvDirect, KernelsMatchFloat64) {
  backend::ThreadPool two(2);
  for (const Case& c : cases()) {
    SCOPED_TRACE(describe(c));
    const std::vector<ConvCall> calls = conv_calls(c);
    const auto& [fop, fargs, fattrs] = calls[0];
    const auto& [iop, iargs, iattrs] = calls[1];
    const auto& [wop, wargs, wattrs] = calls[2];
    const Tensor& x = fargs[0];
    const Tensor& w = fargs[1];
    const Tensor& dy = iargs[0];
    const backend::cpu::ConvShape s = conv_shape_of(c, dy.shape());
    Tensor y(DType::kFloat32, dy.shape()), dx(DType::kFloat32, x.shape()),
        dw(DType::kFloat32, w.shape());
    backend::cpu::conv2d_direct(s, x.data<float>(), w.data<float>(), y.data<float>(), two);
    backend::cpu::conv2d_backprop_input_direct(s, dy.data<float>(), w.data<float>(),
                                               dx.data<float>(), two);
    backend::cpu::conv2d_backprop_filter_direct(s, dy.data<float>(), x.data<float>(),
                                                dw.data<float>(), two);
    expect_close_normwise(widen(y), run_im2col(two, fop, {widen(x), widen(w)}, fattrs), 1e-5);
    expect_close_normwise(widen(dx), run_im2col(two, iop, {widen(dy), widen(w)}, iattrs), 1e-5);
    expect_close_normwise(widen(dw), run_im2col(two, wop, {widen(dy), widen(x)}, wattrs), 1e-5);
  }
}

TEST(ConvDirect, BitwiseTheSameForAnyPoolSize) {
  backend::ThreadPool one(1), two(2), three(3);
  for (const Case& c : cases()) {
    SCOPED_TRACE(describe(c));
    for (const auto& [op, args, attrs] : conv_calls(c)) {
      SCOPED_TRACE(op);
      const Tensor ref = run_kernel(one, op, args, attrs);
      EXPECT_TRUE(ref.bitwise_equal(run_kernel(two, op, args, attrs)));
      EXPECT_TRUE(ref.bitwise_equal(run_kernel(three, op, args, attrs)));
    }
  }
}

// Large batches (several filter-gradient chunks and partials): LeNet at 256 against Float64.
TEST(ConvDirect, LeNetBatch256) {
  if (!backend::cpu::direct_conv_available()) GTEST_SKIP() << "built without AVX-512 or AVX2";
  backend::ThreadPool two(2), three(3);
  const std::vector<Case> big = {{{256, 1, 32, 32}, {6, 1, 5, 5}, "valid", {0, 0, 0, 0}},
                                 {{256, 6, 14, 14}, {16, 6, 5, 5}, "valid", {0, 0, 0, 0}}};
  for (const Case& c : big) {
    SCOPED_TRACE(describe(c));
    for (const auto& [op, args, attrs] : conv_calls(c)) {
      SCOPED_TRACE(op);
      const Tensor fast = run_kernel(two, op, args, attrs);
      EXPECT_TRUE(fast.bitwise_equal(run_kernel(three, op, args, attrs)));
      std::vector<Tensor> wide;
      for (const Tensor& t : args) wide.push_back(widen(t));
      expect_close_normwise(widen(fast), run_im2col(two, op, wide, attrs), 1e-5);
    }
  }
}

}  // namespace
}  // namespace loom::testing
