// Tests of the oneDNN path of the Float32 convolutions (backends/cpu/conv_dnnl.h), which
// Conv2D, Conv2DBackpropInput and Conv2DBackpropFilter of group 1 with at least 16 input and 16
// output channels take outside deterministic mode where the build has oneDNN (Winograd for 3×3
// stride 1, direct otherwise). On shapes with odd sizes, stride 2, every padding mode, dilation,
// 1×1 and 7×7 kernels and batch 1, each op is compared with the im2col reference in Float64 on
// the same (widened) inputs, to 1e-5 of the largest element (Winograd too, whose transforms
// round more: the worst errors are printed); the
// op's result must be the oneDNN function's, bitwise, and the same call twice must give bitwise
// the same result. In deterministic mode the ops stay on loom's own kernels (bitwise equal to
// LOOM_CONV=loom and across pool sizes).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "backends/cpu/conv_dnnl.h"
#include "core/random/random.h"
#include "backends/thread_pool.h"
#include "tests/ops/conv_test_util.h"
#include "tests/ops/test_util.h"

namespace loom::testing {
namespace {

using Case = ConvCase;
using Ints = std::vector<std::int64_t>;

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      // ResNet's 3x3 pad 1 (Winograd), and the same on odd sizes and channel counts off 16.
      {{2, 16, 8, 8}, {16, 16, 3, 3}, "pad", {1, 1, 1, 1}, {1, 1}, {1, 1}},
      {{3, 19, 11, 7}, {21, 19, 3, 3}, "same", {0, 0, 0, 0}, {1, 1}, {1, 1}},
      // Batch 1, "valid", one output row.
      {{1, 32, 3, 9}, {16, 32, 3, 3}, "valid", {0, 0, 0, 0}, {1, 1}, {1, 1}},
      // Stride 2: MindSpore's "same" on an even size (0 before, 1 after) and explicit padding.
      {{2, 16, 12, 12}, {32, 16, 3, 3}, "same", {0, 0, 0, 0}, {2, 2}, {1, 1}},
      {{2, 24, 13, 11}, {17, 24, 3, 3}, "pad", {1, 1, 1, 1}, {2, 2}, {1, 1}},
      // Asymmetric explicit padding, a non-square kernel, strides that differ.
      {{2, 16, 9, 10}, {16, 16, 2, 4}, "pad", {2, 0, 1, 3}, {1, 2}, {1, 1}},
      // Dilation.
      {{1, 16, 12, 12}, {18, 16, 3, 3}, "same", {0, 0, 0, 0}, {1, 1}, {2, 2}},
      // Pointwise, and ResNet's strided pointwise down-sampling.
      {{4, 24, 5, 5}, {40, 24, 1, 1}, "valid", {0, 0, 0, 0}, {1, 1}, {1, 1}},
      {{3, 32, 8, 8}, {64, 32, 1, 1}, "same", {0, 0, 0, 0}, {2, 2}, {1, 1}},
      // A 7x7 stride-2 layer, and padding past the kernel's reach.
      {{2, 16, 23, 23}, {16, 16, 7, 7}, "pad", {3, 3, 3, 3}, {2, 2}, {1, 1}},
      {{1, 16, 4, 4}, {16, 16, 3, 3}, "pad", {3, 3, 3, 3}, {1, 1}, {1, 1}},
      // ResNet-18's layer4 at batch 2 (k = 4608), and a layer1 map.
      {{2, 512, 4, 4}, {512, 512, 3, 3}, "pad", {1, 1, 1, 1}, {1, 1}, {1, 1}},
      {{1, 64, 32, 32}, {64, 64, 3, 3}, "pad", {1, 1, 1, 1}, {1, 1}, {1, 1}},
  };
  return all;
}

bool winograd(const Case& c) {
  return c.w[2] == 3 && c.w[3] == 3 && c.stride == Ints{1, 1} && c.dilation == Ints{1, 1};
}

// max |a - e| / max |e|. (Element by element the im2col reference in Float32 itself is off
// Float64 by up to 6e-5 of max(1, |e|) at ResNet-18's layer1 and layer4 shapes.)
double relative_error(const Tensor& actual, const Tensor& expected) {
  double diff = 0, scale = 0;
  for (std::int64_t i = 0; i < actual.numel(); ++i) {
    diff = std::max(diff, std::abs(actual.get(i) - expected.get(i)));
    scale = std::max(scale, std::abs(expected.get(i)));
  }
  return scale > 0 ? diff / scale : diff;
}

// The oneDNN function of `call` run directly (output NaN-filled first); false if it declined.
bool run_dnnl(const Case& c, const ConvCall& call, const Tensor& like, Tensor& out, int threads) {
  out = Tensor(DType::kFloat32, like.shape());
  std::fill(out.data<float>(), out.data<float>() + out.numel(),
            std::numeric_limits<float>::quiet_NaN());
  const float* a = call.args[0].data<float>();
  const float* b = call.args[1].data<float>();
  if (call.op == "Conv2D") {
    return backend::cpu::conv2d_dnnl(conv_shape_of(c, like.shape()), a, b, out.data<float>(), threads);
  }
  const Shape y = call.args[0].shape();  // dy
  if (call.op == "Conv2DBackpropInput") {
    return backend::cpu::conv2d_backprop_input_dnnl(conv_shape_of(c, y), a, b, out.data<float>(), threads);
  }
  return backend::cpu::conv2d_backprop_filter_dnnl(conv_shape_of(c, y), a, b, out.data<float>(), threads);
}

TEST(ConvDnnl, MatchesFloat64Im2colAndIsTheOpsPath) {
  if (!backend::cpu::dnnl_conv_available()) {
    // setup.sh installs oneDNN: in CI (LOOM_REQUIRE_INTEROP=1) a build without it is a failure.
    if (const char* r = std::getenv("LOOM_REQUIRE_INTEROP"); r && std::string(r) == "1") {
      FAIL() << "built without oneDNN (scripts/setup.sh installs libdnnl-dev)";
    }
    GTEST_SKIP() << "built without oneDNN";
  }
  backend::ThreadPool two(2);
  double worst_direct = 0, worst_winograd = 0;
  for (const Case& c : cases()) {
    SCOPED_TRACE(describe(c));
    for (const ConvCall& call : conv_calls(c)) {
      SCOPED_TRACE(call.op);
      const Tensor got = run_kernel(two, call.op, call.args, call.attrs);
      const Tensor exact =
          run_im2col(two, call.op, {widen(call.args[0]), widen(call.args[1])}, call.attrs);
      const double err = relative_error(widen(got), exact);
      EXPECT_LT(err, 1e-5);
      double& worst = winograd(c) ? worst_winograd : worst_direct;
      worst = std::max(worst, err);
      // The op's result is the oneDNN function's (every element written), and repeatable.
      Tensor direct;
      ASSERT_TRUE(run_dnnl(c, call, got, direct, two.num_threads()));
      EXPECT_TRUE(direct.bitwise_equal(got));
      EXPECT_TRUE(run_kernel(two, call.op, call.args, call.attrs).bitwise_equal(got));
    }
  }
  std::cout << "[ oneDNN vs Float64 ] worst relative error: direct " << worst_direct
            << ", Winograd " << worst_winograd << "\n";
}

// Deterministic mode keeps loom's kernels: bitwise LOOM_CONV=loom's result on any pool size.
TEST(ConvDnnl, DeterministicModeUsesLoomsKernels) {
  backend::ThreadPool one(1), three(3);
  random::seed_all(0, /*deterministic=*/true);
  for (const Case& c : cases()) {
    SCOPED_TRACE(describe(c));
    for (const ConvCall& call : conv_calls(c)) {
      SCOPED_TRACE(call.op);
      const Tensor got = run_kernel(three, call.op, call.args, call.attrs);
      EXPECT_TRUE(got.bitwise_equal(run_kernel(one, call.op, call.args, call.attrs)));
      const ScopedEnv loom_kernels("LOOM_CONV", "loom");
      EXPECT_TRUE(got.bitwise_equal(run_kernel(three, call.op, call.args, call.attrs)));
    }
  }
  random::seed_all(0, /*deterministic=*/false);
}

// Shapes oneDNN is not given: a cropped input (negative padding) is declined without touching
// the output, and the op then runs loom's kernel.
TEST(ConvDnnl, DeclinesACroppedInput) {
  if (!backend::cpu::dnnl_conv_available()) {
    // setup.sh installs oneDNN: in CI (LOOM_REQUIRE_INTEROP=1) a build without it is a failure.
    if (const char* r = std::getenv("LOOM_REQUIRE_INTEROP"); r && std::string(r) == "1") {
      FAIL() << "built without oneDNN (scripts/setup.sh installs libdnnl-dev)";
    }
    GTEST_SKIP() << "built without oneDNN";
  }
  const backend::cpu::ConvShape s{.n = 1, .c = 16, .h = 8, .w = 8, .o = 16, .oh = 4, .ow = 4,
                                  .kh = 3, .kw = 3, .sh = 1, .sw = 1, .dil_h = 1, .dil_w = 1,
                                  .pad_top = -1, .pad_left = -1};
  std::vector<float> x(16 * 64, 1.0f), w(16 * 16 * 9, 1.0f), y(16 * 16, -7.0f);
  EXPECT_FALSE(backend::cpu::conv2d_dnnl(s, x.data(), w.data(), y.data(), 2));
  EXPECT_TRUE(std::all_of(y.begin(), y.end(), [](float v) { return v == -7.0f; }));
}

}  // namespace
}  // namespace loom::testing
