// Tests of the implicit-GEMM Float32 convolution (backends/cpu/conv_implicit_gemm.cc), which
// Conv2D (group 1, stride 1, not 1x1) and Conv2DBackpropInput (group 1, stride 1, not 1x1, 8 or
// more input channels, maps of 64 pixels or more) use by default where the build has AVX-512
// (the strided rows below check that they stay on im2col); Conv2DBackpropFilter stays on im2col + GEMM and is checked
// alongside. On random shapes — odd sizes, strides, dilations, every padding mode, channel
// counts that are not multiples of the 8-row tile, position counts that are not multiples of
// the 32-column tile, k longer than one 256 block — the new path is compared with
//   - the im2col + GEMM path in Float32 (LOOM_CONV=im2col), and
//   - the im2col path in Float64 (the same inputs widened), the more accurate oracle;
// and its results must be bitwise the same on pools of 1, 2 and 3 threads. Float64 never takes
// the new path: its results with and without LOOM_CONV=im2col are bitwise equal.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <tuple>
#include <string>
#include <vector>

#include "backends/cpu/conv_implicit_gemm.h"
#include "backends/kernel.h"
#include "backends/thread_pool.h"
#include "core/ir/abstract.h"
#include "ops/op.h"
#include "tests/ops/test_util.h"

namespace loom::testing {
namespace {

using ir::Value;
using Attrs = ir::Primitive::Attrs;
using Ints = std::vector<std::int64_t>;

struct Case {
  Shape x, w;
  std::string pad_mode;
  Ints pad, stride, dilation;
};

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
  };
  return all;
}

Attrs attrs_of(const Case& c) {
  return {{"out_channel", Value::i64(c.w[0])}, {"kernel_size", Value::ints({c.w[2], c.w[3]})},
          {"pad_mode", Value::string(c.pad_mode)}, {"pad", Value::ints(c.pad)},
          {"stride", Value::ints(c.stride)}, {"dilation", Value::ints(c.dilation)},
          {"group", Value::i64(1)}};
}

Tensor random_tensor(DType dtype, Shape shape, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  for (double& e : v) e = static_cast<float>(normal(rng));  // representable in both dtypes
  return Tensor::from_doubles(dtype, std::move(shape), v);
}

Tensor widen(const Tensor& t) { return Tensor::from_doubles(DType::kFloat64, t.shape(), t.to_doubles()); }

Tensor run_on(backend::ThreadPool& pool, const std::string& op, const std::vector<Tensor>& args,
              const Attrs& attrs) {
  ir::PrimitivePtr prim = ops::make_op(op, attrs);
  std::vector<ir::AbstractPtr> abstracts;
  for (const Tensor& t : args) abstracts.push_back(ir::Abstract::of_value(Value::tensor(t)));
  const ir::AbstractPtr result = ops::infer(*prim, abstracts);
  std::vector<Tensor> outputs{Tensor(result->dtype(), result->shape())};
  backend::KernelContext k{*prim, args, outputs, pool};
  backend::KernelRegistry::global().find(op, args[0].dtype(), backend::Device::kCPU)(k);
  return outputs[0];
}

// Runs with LOOM_CONV=im2col set for the call.
Tensor run_im2col(backend::ThreadPool& pool, const std::string& op,
                  const std::vector<Tensor>& args, const Attrs& attrs) {
  setenv("LOOM_CONV", "im2col", 1);
  Tensor out = run_on(pool, op, args, attrs);
  unsetenv("LOOM_CONV");
  return out;
}

// The op calls of one case: Conv2D and Conv2DBackpropInput in the given dtype.
struct Calls {
  std::vector<std::tuple<std::string, std::vector<Tensor>, Attrs>> list;
};

Calls calls_of(const Case& c, DType dtype) {
  backend::ThreadPool one(1);
  const Attrs attrs = attrs_of(c);
  const Tensor x = random_tensor(dtype, c.x, 1);
  const Tensor w = random_tensor(dtype, c.w, 2);
  const Tensor y = run_im2col(one, "Conv2D", {x, w}, attrs);
  const Tensor dy = random_tensor(dtype, y.shape(), 3);
  Attrs bi = attrs;
  bi["input_size"] = Value::ints(Ints(c.x.begin(), c.x.end()));
  Attrs bf = attrs;
  bf["filter_size"] = Value::ints(Ints(c.w.begin(), c.w.end()));
  return {{{"Conv2D", {x, w}, attrs},
           {"Conv2DBackpropInput", {dy, w}, bi},
           {"Conv2DBackpropFilter", {dy, x}, bf}}};
}

std::string describe(const Case& c) {
  std::string s = "x " + shape_to_string(c.x) + " w " + shape_to_string(c.w) + " " + c.pad_mode;
  s += " stride " + std::to_string(c.stride[0]) + "," + std::to_string(c.stride[1]);
  s += " dilation " + std::to_string(c.dilation[0]) + "," + std::to_string(c.dilation[1]);
  return s;
}

TEST(ConvImplicitGemm, Float32MatchesIm2colAndFloat64) {
  if (!backend::cpu::implicit_gemm_available()) GTEST_SKIP() << "built without AVX-512";
  backend::ThreadPool two(2);
  for (const Case& c : cases()) {
    SCOPED_TRACE(describe(c));
    for (const auto& [op, args, attrs] : calls_of(c, DType::kFloat32).list) {
      SCOPED_TRACE(op);
      const Tensor fast = run_on(two, op, args, attrs);
      expect_close(fast, run_im2col(two, op, args, attrs), 1e-4);
      std::vector<Tensor> wide;
      for (const Tensor& t : args) wide.push_back(widen(t));
      expect_close(widen(fast), run_im2col(two, op, wide, attrs), 1e-4);
    }
  }
}

// The kernel itself on every case, strided ones included (Conv2D routes only stride 1 to it for
// now; bench/README.md says why): called directly, against the im2col Conv2D.
TEST(ConvImplicitGemm, KernelMatchesIm2colOnEveryCase) {
  if (!backend::cpu::implicit_gemm_available()) GTEST_SKIP() << "built without AVX-512";
  backend::ThreadPool two(2);
  for (const Case& c : cases()) {
    SCOPED_TRACE(describe(c));
    const Attrs attrs = attrs_of(c);
    const Tensor x = random_tensor(DType::kFloat32, c.x, 1);
    const Tensor w = random_tensor(DType::kFloat32, c.w, 2);
    const Tensor ref = run_im2col(two, "Conv2D", {x, w}, attrs);
    const std::int64_t oh = ref.shape()[2], ow = ref.shape()[3];
    std::int64_t top = c.pad[0], left = c.pad[2];
    if (c.pad_mode == "same") {  // MindSpore's split: floor(total / 2) before
      top = std::max<std::int64_t>((oh - 1) * c.stride[0] + (c.w[2] - 1) * c.dilation[0] + 1 - c.x[2], 0) / 2;
      left = std::max<std::int64_t>((ow - 1) * c.stride[1] + (c.w[3] - 1) * c.dilation[1] + 1 - c.x[3], 0) / 2;
    } else if (c.pad_mode == "valid") {
      top = left = 0;
    }
    const backend::cpu::ConvShape s{.n = c.x[0], .c = c.x[1], .h = c.x[2], .w = c.x[3],
                                    .o = c.w[0], .oh = oh, .ow = ow, .kh = c.w[2], .kw = c.w[3],
                                    .sh = c.stride[0], .sw = c.stride[1],
                                    .dil_h = c.dilation[0], .dil_w = c.dilation[1],
                                    .pad_top = top, .pad_left = left};
    Tensor y(DType::kFloat32, ref.shape());
    backend::cpu::conv2d_implicit_gemm(s, x.data<float>(), w.data<float>(), y.data<float>(), two);
    expect_close(y, ref, 1e-4);
  }
}

TEST(ConvImplicitGemm, BitwiseTheSameForAnyPoolSize) {
  backend::ThreadPool one(1), two(2), three(3);
  for (const Case& c : cases()) {
    SCOPED_TRACE(describe(c));
    for (const auto& [op, args, attrs] : calls_of(c, DType::kFloat32).list) {
      SCOPED_TRACE(op);
      const Tensor ref = run_on(one, op, args, attrs);
      EXPECT_TRUE(ref.bitwise_equal(run_on(two, op, args, attrs)));
      EXPECT_TRUE(ref.bitwise_equal(run_on(three, op, args, attrs)));
    }
  }
}

TEST(ConvImplicitGemm, Float64StaysOnIm2col) {
  backend::ThreadPool two(2);
  for (const Case& c : cases()) {
    SCOPED_TRACE(describe(c));
    for (const auto& [op, args, attrs] : calls_of(c, DType::kFloat64).list) {
      SCOPED_TRACE(op);
      EXPECT_TRUE(run_on(two, op, args, attrs).bitwise_equal(run_im2col(two, op, args, attrs)));
    }
  }
}

// The ResNet-18 shapes at a small batch: the tiles are full and k spans several blocks.
TEST(ConvImplicitGemm, ResNetShapes) {
  if (!backend::cpu::implicit_gemm_available()) GTEST_SKIP() << "built without AVX-512";
  backend::ThreadPool two(2);
  const std::vector<Case> resnet = {
      {{2, 64, 32, 32}, {64, 64, 3, 3}, "pad", {1, 1, 1, 1}, {1, 1}, {1, 1}},
      {{2, 64, 32, 32}, {128, 64, 3, 3}, "pad", {1, 1, 1, 1}, {2, 2}, {1, 1}},
      {{2, 256, 8, 8}, {256, 256, 3, 3}, "pad", {1, 1, 1, 1}, {1, 1}, {1, 1}},
      {{3, 512, 4, 4}, {512, 512, 3, 3}, "pad", {1, 1, 1, 1}, {1, 1}, {1, 1}},
  };
  for (const Case& c : resnet) {
    SCOPED_TRACE(describe(c));
    for (const auto& [op, args, attrs] : calls_of(c, DType::kFloat32).list) {
      SCOPED_TRACE(op);
      std::vector<Tensor> wide;
      for (const Tensor& t : args) wide.push_back(widen(t));
      expect_close(widen(run_on(two, op, args, attrs)), run_im2col(two, op, wide, attrs), 2e-4);
    }
  }
}

}  // namespace
}  // namespace loom::testing
