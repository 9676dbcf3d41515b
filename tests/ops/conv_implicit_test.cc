// Tests of the implicit-GEMM Float32 convolution (backends/cpu/conv_implicit_gemm.cc), which
// Conv2D (group 1, stride 1, not 1x1) and Conv2DBackpropInput (group 1, stride 1, not 1x1, 8 or
// more input channels, maps of 64 pixels or more) use by default where the build has AVX-512,
// and of its filter-gradient counterpart (backends/cpu/conv_implicit_filter.cc), which
// Conv2DBackpropFilter (group 1, any stride, not pointwise stride 1) uses. On random shapes — odd sizes, strides, dilations, every padding mode, channel
// counts that are not multiples of the 8-row tile, position counts that are not multiples of
// the 32-column tile, k longer than one 256 block — the new path is compared with
//   - the im2col + GEMM path in Float32 (LOOM_CONV=im2col), and
//   - the im2col path in Float64 (the same inputs widened), the more accurate oracle;
// and its results must be bitwise the same on pools of 1, 2 and 3 threads. The tests set
// LOOM_CONV=loom: shapes of 16 channels and more would otherwise run on oneDNN. Float64 never takes
// the new path: its results with and without LOOM_CONV=im2col are bitwise equal.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <tuple>
#include <string>
#include <vector>

#include "backends/cpu/conv_implicit_gemm.h"
#include "backends/kernel.h"
#include "backends/thread_pool.h"
#include "core/ir/abstract.h"
#include "ops/op.h"
#include "tests/ops/conv_test_util.h"
#include "tests/ops/test_util.h"

namespace loom::testing {
namespace {

using Case = ConvCase;

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      // ResNet-like 3x3 pad 1, positions a multiple of the tile.
      {{2, 16, 8, 8}, {16, 16, 3, 3}, "pad", {1, 1, 1, 1}, {1, 1}, {1, 1}},
      // Odd sizes, channels not multiples of 8, k = 5·9 = 45.
      {{3, 5, 7, 9}, {11, 5, 3, 3}, "same", {0, 0, 0, 0}, {1, 1}, {1, 1}},
      // k = 40·9 = 360 > one 256 block; 3 chunks of panels.
      {{3, 40, 13, 11}, {19, 40, 3, 3}, "pad", {1, 1, 1, 1}, {1, 1}, {1, 1}},
      // Asymmetric explicit padding, non-square kernel (with 6 and with 9 input channels: the
      // input gradient takes the new path from 8).
      {{2, 6, 9, 10}, {7, 6, 2, 4}, "pad", {2, 0, 1, 3}, {1, 1}, {1, 1}},
      {{2, 9, 9, 10}, {7, 9, 2, 4}, "pad", {2, 0, 1, 3}, {1, 1}, {1, 1}},
      // Stride 2 (on im2col for now).
      {{2, 9, 11, 12}, {13, 9, 3, 3}, "same", {0, 0, 0, 0}, {2, 2}, {1, 1}},
      // Strides that differ, dilation.
      {{2, 4, 15, 13}, {6, 4, 3, 3}, "valid", {0, 0, 0, 0}, {2, 3}, {2, 1}},
      // Dilation at stride 1 (input gradient on the new path with a dilated flipped filter).
      {{1, 8, 12, 12}, {9, 8, 3, 3}, "same", {0, 0, 0, 0}, {1, 1}, {2, 2}},
      // Pointwise, and a strided pointwise (ResNet down-sampling).
      {{4, 24, 5, 5}, {10, 24, 1, 1}, "valid", {0, 0, 0, 0}, {1, 1}, {1, 1}},
      {{3, 16, 8, 8}, {32, 16, 1, 1}, "same", {0, 0, 0, 0}, {2, 2}, {1, 1}},
      // Padding larger than the kernel reach (output positions that see only zeros).
      {{1, 3, 4, 4}, {5, 3, 3, 3}, "pad", {3, 3, 3, 3}, {1, 1}, {1, 1}},
      // A 7x7 stride-2 stem on 3 channels.
      {{2, 3, 23, 23}, {16, 3, 7, 7}, "pad", {3, 3, 3, 3}, {2, 2}, {1, 1}},
      // Wider rows: a panel inside one row, rows split across panels, asymmetric padding with
      // dilation, pointwise.
      {{2, 5, 9, 37}, {7, 5, 3, 3}, "same", {0, 0, 0, 0}, {1, 1}, {1, 1}},
      {{1, 3, 6, 20}, {9, 3, 2, 5}, "pad", {1, 0, 2, 3}, {1, 1}, {1, 2}},
      {{2, 9, 5, 16}, {5, 9, 1, 1}, "valid", {0, 0, 0, 0}, {1, 1}, {1, 1}},
      {{3, 10, 18, 17}, {13, 10, 3, 3}, "pad", {1, 1, 1, 1}, {1, 1}, {1, 1}},
      // One output position per image, batch of 1.
      {{1, 12, 3, 3}, {8, 12, 3, 3}, "valid", {0, 0, 0, 0}, {1, 1}, {1, 1}},
      // Filter gradient: 32-wide rows at stride 1 (whole vectors of 16 positions read in one
      // load) over several 512-position blocks with a partial last vector; 16-wide rows at
      // stride 2 (read as every other element); more than 288 rows of k (several k chunks).
      {{3, 3, 20, 32}, {10, 3, 3, 3}, "same", {0, 0, 0, 0}, {1, 1}, {1, 1}},
      {{3, 5, 34, 32}, {7, 5, 3, 3}, "pad", {1, 1, 1, 1}, {2, 2}, {1, 1}},
      {{2, 70, 6, 6}, {17, 70, 3, 3}, "pad", {1, 1, 1, 1}, {1, 1}, {1, 1}},
  };
  return all;
}

TEST(ConvImplicitGemm, Float32MatchesIm2colAndFloat64) {
  const ScopedEnv loom_kernels("LOOM_CONV", "loom");  // not oneDNN (conv_dnnl_test.cc)
  if (!backend::cpu::implicit_gemm_available()) GTEST_SKIP() << "built without AVX-512 or AVX2";
  backend::ThreadPool two(2);
  for (const Case& c : cases()) {
    SCOPED_TRACE(describe(c));
    for (const auto& [op, args, attrs] : conv_calls(c, DType::kFloat32)) {
      SCOPED_TRACE(op);
      const Tensor fast = run_kernel(two, op, args, attrs);
      expect_close(fast, run_im2col(two, op, args, attrs), 1e-4);
      std::vector<Tensor> wide;
      for (const Tensor& t : args) wide.push_back(widen(t));
      expect_close(widen(fast), run_im2col(two, op, wide, attrs), 1e-4);
    }
  }
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  double worst = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) worst = std::max(worst, std::abs(a.get(i) - b.get(i)));
  return worst;
}

// The kernel itself on every case, strided ones included (Conv2D routes only stride 1 to it for
// now; bench/README.md says why): called directly, against the im2col Conv2D.
TEST(ConvImplicitGemm, KernelMatchesIm2colOnEveryCase) {
  const ScopedEnv loom_kernels("LOOM_CONV", "loom");  // not oneDNN (conv_dnnl_test.cc)
  if (!backend::cpu::implicit_gemm_available()) GTEST_SKIP() << "built without AVX-512 or AVX2";
  backend::ThreadPool two(2);
  for (const Case& c : cases()) {
    SCOPED_TRACE(describe(c));
    const ir::Primitive::Attrs attrs = conv_attrs(c);
    const Tensor x = random_normal(DType::kFloat32, c.x, 1);
    const Tensor w = random_normal(DType::kFloat32, c.w, 2);
    const Tensor ref = run_im2col(two, "Conv2D", {x, w}, attrs);
    const backend::cpu::ConvShape s = conv_shape_of(c, ref.shape());
    Tensor y(DType::kFloat32, ref.shape());
    backend::cpu::conv2d_implicit_gemm(s, x.data<float>(), w.data<float>(), y.data<float>(), two);
    expect_close(y, ref, 1e-4);
  }
}

// The filter-gradient kernel called directly on every case, pointwise stride 1 included (not
// routed to it), against im2col in Float64 and Float32; dw starts as NaN, so an element it does
// not write fails. Where Conv2DBackpropFilter routes to it, the op's result is the kernel's,
// bitwise; pointwise stride-1 shapes stay on im2col. Against Float64 it must be about as
// accurate as im2col + GEMM in Float32 (which of the two is closer varies by shape).
TEST(ConvImplicitGemm, FilterKernelMatchesIm2colOnEveryCase) {
  const ScopedEnv loom_kernels("LOOM_CONV", "loom");  // not oneDNN (conv_dnnl_test.cc)
  if (!backend::cpu::implicit_gemm_available()) GTEST_SKIP() << "built without AVX-512 or AVX2";
  backend::ThreadPool two(2);
  int routed = 0;
  for (const Case& c : cases()) {
    SCOPED_TRACE(describe(c));
    const auto calls = conv_calls(c, DType::kFloat32);
    const auto& [op, args, attrs] = calls[2];
    ASSERT_EQ(op, "Conv2DBackpropFilter");
    const Tensor& dy = args[0];
    const Tensor& x = args[1];
    Tensor dw(DType::kFloat32, c.w);
    std::fill(dw.data<float>(), dw.data<float>() + dw.numel(), std::numeric_limits<float>::quiet_NaN());
    const backend::cpu::ConvShape s = conv_shape_of(c, dy.shape());
    backend::cpu::conv2d_backprop_filter_implicit_gemm(s, dy.data<float>(), x.data<float>(),
                                                       dw.data<float>(), two);
    const Tensor exact = run_im2col(two, op, {widen(dy), widen(x)}, attrs);
    const Tensor blas = run_im2col(two, op, args, attrs);
    expect_close(widen(dw), exact, 1e-4);
    expect_close(dw, blas, 1e-4);
    EXPECT_LE(max_abs_diff(dw, exact), 4 * max_abs_diff(blas, exact) + 1e-6);
    const bool pointwise = c.w[2] == 1 && c.w[3] == 1 && c.stride[0] == 1 && c.stride[1] == 1;
    // Up to 8 input and 16 output channels the op may take the direct kernel (conv_direct.h).
    const bool few_channels = c.x[1] <= 8 && c.w[0] <= 16;
    const Tensor via_op = run_kernel(two, op, args, attrs);
    if (pointwise) {
      EXPECT_TRUE(via_op.bitwise_equal(blas));
    } else if (!few_channels) {
      EXPECT_TRUE(via_op.bitwise_equal(dw));
      ++routed;
    }
  }
  EXPECT_GE(routed, 8);
}

// The filter gradient on ResNet-18's shapes at batch 2 (layer1's 64 × 64 × 3 × 3 on 32 × 32
// maps spans 4 position blocks; the stride-2 3 × 3 and 1 × 1 down-sampling layers), against
// Float64, and bitwise the same on 1 and 3 threads.
TEST(ConvImplicitGemm, FilterGradientResNetShapes) {
  const ScopedEnv loom_kernels("LOOM_CONV", "loom");  // not oneDNN (conv_dnnl_test.cc)
  if (!backend::cpu::implicit_gemm_available()) GTEST_SKIP() << "built without AVX-512 or AVX2";
  backend::ThreadPool one(1), three(3);
  const std::vector<Case> resnet = {
      {{2, 64, 32, 32}, {64, 64, 3, 3}, "pad", {1, 1, 1, 1}, {1, 1}, {1, 1}},
      {{2, 64, 32, 32}, {128, 64, 1, 1}, "pad", {0, 0, 0, 0}, {2, 2}, {1, 1}},
      {{2, 128, 16, 16}, {256, 128, 3, 3}, "pad", {1, 1, 1, 1}, {2, 2}, {1, 1}},
      {{2, 512, 4, 4}, {512, 512, 3, 3}, "pad", {1, 1, 1, 1}, {1, 1}, {1, 1}},
  };
  for (const Case& c : resnet) {
    SCOPED_TRACE(describe(c));
    const auto calls = conv_calls(c, DType::kFloat32);
    const auto& [op, args, attrs] = calls[2];
    const Tensor got = run_kernel(three, op, args, attrs);
    EXPECT_TRUE(got.bitwise_equal(run_kernel(one, op, args, attrs)));
    expect_close(widen(got), run_im2col(three, op, {widen(args[0]), widen(args[1])}, attrs), 2e-4);
  }
}

TEST(ConvImplicitGemm, BitwiseTheSameForAnyPoolSize) {
  const ScopedEnv loom_kernels("LOOM_CONV", "loom");  // not oneDNN (conv_dnnl_test.cc)
  backend::ThreadPool one(1), two(2), three(3);
  for (const Case& c : cases()) {
    SCOPED_TRACE(describe(c));
    for (const auto& [op, args, attrs] : conv_calls(c, DType::kFloat32)) {
      SCOPED_TRACE(op);
      const Tensor ref = run_kernel(one, op, args, attrs);
      EXPECT_TRUE(ref.bitwise_equal(run_kernel(two, op, args, attrs)));
      EXPECT_TRUE(ref.bitwise_equal(run_kernel(three, op, args, attrs)));
    }
  }
}

TEST(ConvImplicitGemm, Float64StaysOnIm2col) {
  const ScopedEnv loom_kernels("LOOM_CONV", "loom");  // not oneDNN (conv_dnnl_test.cc)
  backend::ThreadPool two(2);
  for (const Case& c : cases()) {
    SCOPED_TRACE(describe(c));
    for (const auto& [op, args, attrs] : conv_calls(c, DType::kFloat64)) {
      SCOPED_TRACE(op);
      EXPECT_TRUE(run_kernel(two, op, args, attrs).bitwise_equal(run_im2col(two, op, args, attrs)));
    }
  }
}

// The ResNet-18 shapes at a small batch: the tiles are full and k spans several blocks.
TEST(ConvImplicitGemm, ResNetShapes) {
  const ScopedEnv loom_kernels("LOOM_CONV", "loom");  // not oneDNN (conv_dnnl_test.cc)
  if (!backend::cpu::implicit_gemm_available()) GTEST_SKIP() << "built without AVX-512 or AVX2";
  backend::ThreadPool two(2);
  const std::vector<Case> resnet = {
      {{2, 64, 32, 32}, {64, 64, 3, 3}, "pad", {1, 1, 1, 1}, {1, 1}, {1, 1}},
      {{2, 64, 32, 32}, {128, 64, 3, 3}, "pad", {1, 1, 1, 1}, {2, 2}, {1, 1}},
      {{2, 256, 8, 8}, {256, 256, 3, 3}, "pad", {1, 1, 1, 1}, {1, 1}, {1, 1}},
      {{3, 512, 4, 4}, {512, 512, 3, 3}, "pad", {1, 1, 1, 1}, {1, 1}, {1, 1}},
  };
  for (const Case& c : resnet) {
    SCOPED_TRACE(describe(c));
    for (const auto& [op, args, attrs] : conv_calls(c, DType::kFloat32)) {
      SCOPED_TRACE(op);
      std::vector<Tensor> wide;
      for (const Tensor& t : args) wide.push_back(widen(t));
      expect_close(widen(run_kernel(two, op, args, attrs)), run_im2col(two, op, wide, attrs), 2e-4);
    }
  }
}

}  // namespace
}  // namespace loom::testing
