// Tests of the convolution and pooling family: table rows for the float64 gradient check of
// every padding / stride / dilation / group mode; the PyTorch reference data
// (tests/ops/reference/conv_pool_reference.py) forward and backward in float32; a naive direct
// convolution as a second oracle on shapes that reach every GEMM path of the kernels (image
// blocks, uneven last block, single large images, pointwise); small cases worked out by hand;
// and the exact inference error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <tuple>

#include "backends/eager.h"
#include "backends/kernel.h"
#include "backends/thread_pool.h"
#include "core/ir/abstract.h"
#include "core/ir/error.h"
#include "ops/op.h"
#include "tests/ops/op_table.h"
#include "tests/ops/test_util.h"
#include "tests/ops/reference.h"

namespace loom::testing {
namespace {

using ir::Value;
using Attrs = ir::Primitive::Attrs;
using Ints = std::vector<std::int64_t>;

Attrs conv_attrs(std::int64_t out_channel, Ints kernel, std::string pad_mode = "valid",
                 Ints pad = {0, 0, 0, 0}, Ints stride = {1, 1}, Ints dilation = {1, 1},
                 std::int64_t group = 1) {
  return {{"out_channel", Value::i64(out_channel)}, {"kernel_size", Value::ints(kernel)},
          {"pad_mode", Value::string(pad_mode)},   {"pad", Value::ints(pad)},
          {"stride", Value::ints(stride)},          {"dilation", Value::ints(dilation)},
          {"group", Value::i64(group)}};
}

Attrs with(Attrs attrs, const std::string& key, const Ints& value) {
  attrs[key] = Value::ints(value);
  return attrs;
}

Attrs pool_attrs(Ints kernel, Ints strides, std::string pad_mode) {
  return {{"kernel_size", Value::ints(kernel)},
          {"strides", Value::ints(strides)},
          {"pad_mode", Value::string(pad_mode)}};
}

InputSpec normal(Shape shape) { return {.shape = std::move(shape)}; }
InputSpec distinct(Shape shape) { return {.shape = std::move(shape), .gen = Gen::kDistinct}; }

static const CaseRegistrar kRows({
    // Conv2D: one row per mode that changes the arithmetic.
    {.name = "conv2d_valid", .op = "Conv2D", .attrs = conv_attrs(4, {3, 3}),
     .inputs = {normal({2, 3, 5, 5}), normal({4, 3, 3, 3})}},
    {.name = "conv2d_same_odd", .op = "Conv2D", .attrs = conv_attrs(4, {3, 3}, "same"),
     .inputs = {normal({2, 3, 5, 5}), normal({4, 3, 3, 3})}},
    {.name = "conv2d_same_even_stride2", .op = "Conv2D",
     .attrs = conv_attrs(4, {2, 4}, "same", {0, 0, 0, 0}, {2, 2}),
     .inputs = {normal({2, 3, 5, 6}), normal({4, 3, 2, 4})}},
    {.name = "conv2d_pad_asymmetric", .op = "Conv2D",
     .attrs = conv_attrs(4, {3, 3}, "pad", {1, 2, 0, 1}),
     .inputs = {normal({2, 3, 4, 5}), normal({4, 3, 3, 3})}},
    {.name = "conv2d_stride2", .op = "Conv2D",
     .attrs = conv_attrs(4, {3, 3}, "valid", {0, 0, 0, 0}, {2, 2}),
     .inputs = {normal({1, 3, 7, 7}), normal({4, 3, 3, 3})}},
    {.name = "conv2d_dilation2", .op = "Conv2D",
     .attrs = conv_attrs(2, {3, 3}, "valid", {0, 0, 0, 0}, {1, 1}, {2, 2}),
     .inputs = {normal({1, 3, 7, 7}), normal({2, 3, 3, 3})}},
    {.name = "conv2d_same_dilation2_stride2", .op = "Conv2D",
     .attrs = conv_attrs(2, {3, 2}, "same", {0, 0, 0, 0}, {2, 2}, {2, 2}),
     .inputs = {normal({1, 3, 7, 6}), normal({2, 3, 3, 2})}},
    {.name = "conv2d_group2", .op = "Conv2D",
     .attrs = conv_attrs(6, {3, 3}, "valid", {0, 0, 0, 0}, {1, 1}, {1, 1}, 2),
     .inputs = {normal({2, 4, 5, 5}), normal({6, 2, 3, 3})}},
    {.name = "conv2d_depthwise", .op = "Conv2D",
     .attrs = conv_attrs(3, {3, 3}, "same", {0, 0, 0, 0}, {1, 1}, {1, 1}, 3),
     .inputs = {normal({2, 3, 5, 5}), normal({3, 1, 3, 3})}},
    {.name = "conv2d_pointwise", .op = "Conv2D", .attrs = conv_attrs(2, {1, 1}),
     .inputs = {normal({1, 3, 4, 4}), normal({2, 3, 1, 1})}},
    // Conv2DBackpropInput(dout, w): its bprop is Conv2D and Conv2DBackpropFilter.
    {.name = "conv2d_backprop_input_valid", .op = "Conv2DBackpropInput",
     .attrs = with(conv_attrs(4, {3, 3}), "input_size", {2, 3, 5, 5}),
     .inputs = {normal({2, 4, 3, 3}), normal({4, 3, 3, 3})}},
    {.name = "conv2d_backprop_input_same_stride2", .op = "Conv2DBackpropInput",
     .attrs = with(conv_attrs(4, {2, 4}, "same", {0, 0, 0, 0}, {2, 2}), "input_size",
                   {2, 3, 5, 6}),
     .inputs = {normal({2, 4, 3, 3}), normal({4, 3, 2, 4})}},
    {.name = "conv2d_backprop_input_pad_dilation2", .op = "Conv2DBackpropInput",
     .attrs = with(conv_attrs(2, {3, 3}, "pad", {1, 2, 0, 1}, {1, 1}, {2, 2}), "input_size",
                   {1, 3, 6, 6}),
     .inputs = {normal({1, 2, 5, 3}), normal({2, 3, 3, 3})}},
    {.name = "conv2d_backprop_input_group2", .op = "Conv2DBackpropInput",
     .attrs = with(conv_attrs(6, {3, 3}, "valid", {0, 0, 0, 0}, {1, 1}, {1, 1}, 2),
                   "input_size", {2, 4, 5, 5}),
     .inputs = {normal({2, 6, 3, 3}), normal({6, 2, 3, 3})}},
    // Conv2DBackpropFilter(dout, x): its bprop is Conv2D and Conv2DBackpropInput.
    {.name = "conv2d_backprop_filter_valid", .op = "Conv2DBackpropFilter",
     .attrs = with(conv_attrs(4, {3, 3}), "filter_size", {4, 3, 3, 3}),
     .inputs = {normal({2, 4, 3, 3}), normal({2, 3, 5, 5})}},
    {.name = "conv2d_backprop_filter_same_stride2", .op = "Conv2DBackpropFilter",
     .attrs = with(conv_attrs(4, {2, 4}, "same", {0, 0, 0, 0}, {2, 2}), "filter_size",
                   {4, 3, 2, 4}),
     .inputs = {normal({2, 4, 3, 3}), normal({2, 3, 5, 6})}},
    {.name = "conv2d_backprop_filter_pad_dilation2", .op = "Conv2DBackpropFilter",
     .attrs = with(conv_attrs(2, {3, 3}, "pad", {1, 2, 0, 1}, {1, 1}, {2, 2}), "filter_size",
                   {2, 3, 3, 3}),
     .inputs = {normal({1, 2, 5, 3}), normal({1, 3, 6, 6})}},
    {.name = "conv2d_backprop_filter_group2", .op = "Conv2DBackpropFilter",
     .attrs = with(conv_attrs(6, {3, 3}, "valid", {0, 0, 0, 0}, {1, 1}, {1, 1}, 2),
                   "filter_size", {6, 2, 3, 3}),
     .inputs = {normal({2, 6, 3, 3}), normal({2, 4, 5, 5})}},
    // Pooling; max pooling inputs are distinct so that no window has a tie.
    {.name = "maxpool_valid_k3_s2", .op = "MaxPool", .attrs = pool_attrs({3, 3}, {2, 2}, "VALID"),
     .inputs = {distinct({2, 2, 7, 7})}},
    {.name = "maxpool_same_k3_s2", .op = "MaxPool", .attrs = pool_attrs({3, 3}, {2, 2}, "SAME"),
     .inputs = {distinct({2, 2, 6, 6})}},
    {.name = "maxpool_same_k2_s1", .op = "MaxPool", .attrs = pool_attrs({2, 2}, {1, 1}, "same"),
     .inputs = {distinct({1, 2, 5, 5})}},
    {.name = "avgpool_valid_k3_s2", .op = "AvgPool", .attrs = pool_attrs({3, 3}, {2, 2}, "VALID"),
     .inputs = {normal({2, 2, 7, 7})}},
    {.name = "maxpool_pad_k3_s2", .op = "MaxPool",
     .attrs = with(pool_attrs({3, 3}, {2, 2}, "PAD"), "pad", {1, 1, 1, 1}),
     .inputs = {distinct({2, 2, 6, 6})}},
    {.name = "avgpool_pad_asymmetric", .op = "AvgPool",
     .attrs = with(pool_attrs({3, 2}, {2, 1}, "PAD"), "pad", {2, 0, 0, 1}),
     .inputs = {normal({1, 2, 5, 4})}},
    {.name = "avgpool_same_k3_s2", .op = "AvgPool", .attrs = pool_attrs({3, 3}, {2, 2}, "SAME"),
     .inputs = {normal({2, 2, 6, 6})}},
    {.name = "avgpool_same_k2_s1", .op = "AvgPool", .attrs = pool_attrs({2, 2}, {1, 1}, "SAME"),
     .inputs = {normal({1, 2, 5, 5})}},
    // Pooling gradient ops (x, out, dout); `out` only carries the pooled shape.
    {.name = "maxpool_grad_valid_k3_s2", .op = "MaxPoolGrad",
     .attrs = pool_attrs({3, 3}, {2, 2}, "VALID"),
     .inputs = {distinct({2, 2, 7, 7}), normal({2, 2, 3, 3}), normal({2, 2, 3, 3})}},
    {.name = "maxpool_grad_same_k3_s2", .op = "MaxPoolGrad",
     .attrs = pool_attrs({3, 3}, {2, 2}, "SAME"),
     .inputs = {distinct({2, 2, 6, 6}), normal({2, 2, 3, 3}), normal({2, 2, 3, 3})}},
    {.name = "maxpool_grad_grad_valid_k3_s2", .op = "MaxPoolGradGrad",
     .attrs = pool_attrs({3, 3}, {2, 2}, "VALID"),
     .inputs = {distinct({2, 2, 7, 7}), normal({2, 2, 3, 3}), normal({2, 2, 7, 7})}},
    {.name = "maxpool_grad_grad_same_k2_s1", .op = "MaxPoolGradGrad",
     .attrs = pool_attrs({2, 2}, {1, 1}, "SAME"),
     .inputs = {distinct({1, 2, 5, 5}), normal({1, 2, 5, 5}), normal({1, 2, 5, 5})}},
    {.name = "avgpool_grad_valid_k3_s2", .op = "AvgPoolGrad",
     .attrs = pool_attrs({3, 3}, {2, 2}, "VALID"),
     .inputs = {normal({2, 2, 7, 7}), normal({2, 2, 3, 3}), normal({2, 2, 3, 3})}},
    {.name = "avgpool_grad_same_k3_s2", .op = "AvgPoolGrad",
     .attrs = pool_attrs({3, 3}, {2, 2}, "SAME"),
     .inputs = {normal({2, 2, 6, 6}), normal({2, 2, 3, 3}), normal({2, 2, 3, 3})}},
    {.name = "avgpool_grad_same_k2_s1", .op = "AvgPoolGrad",
     .attrs = pool_attrs({2, 2}, {1, 1}, "SAME"),
     .inputs = {normal({1, 2, 5, 5}), normal({1, 2, 5, 5}), normal({1, 2, 5, 5})}},
});

Tensor run(const std::string& op, const std::vector<Tensor>& args, Attrs attrs) {
  std::vector<Value> values;
  for (const Tensor& t : args) values.push_back(Value::tensor(t));
  return backend::run_op(op, values, std::move(attrs)).as_tensor();
}

Tensor f32(Shape shape, const std::vector<double>& values) {
  return Tensor::from_doubles(DType::kFloat32, std::move(shape), values);
}

Tensor iota(DType dtype, Shape shape, double first = 1) {
  Tensor t(dtype, std::move(shape));
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, first + static_cast<double>(i));
  return t;
}

// ---------------------------------------------------------------------------------------------
// PyTorch reference data

constexpr double kReferenceTolerance = 1e-5;

struct ReferenceCase {
  std::string name;  // as in conv_pool_reference.py
  std::string op;
  Attrs attrs;
};

// Mirrors CONV_CASES and POOL_CASES of conv_pool_reference.py.
const std::vector<ReferenceCase>& reference_cases() {
  static const std::vector<ReferenceCase> cases = {
      {"conv_valid", "Conv2D", conv_attrs(4, {3, 3})},
      {"conv_same_odd", "Conv2D", conv_attrs(4, {3, 3}, "same")},
      {"conv_same_even_stride2", "Conv2D", conv_attrs(4, {4, 2}, "same", {0, 0, 0, 0}, {2, 2})},
      {"conv_pad_asymmetric", "Conv2D", conv_attrs(4, {3, 3}, "pad", {1, 2, 0, 1})},
      {"conv_stride2", "Conv2D", conv_attrs(4, {3, 3}, "valid", {0, 0, 0, 0}, {2, 2})},
      {"conv_dilation2", "Conv2D", conv_attrs(4, {3, 3}, "valid", {0, 0, 0, 0}, {1, 1}, {2, 2})},
      {"conv_same_dilation2_stride2", "Conv2D",
       conv_attrs(4, {3, 2}, "same", {0, 0, 0, 0}, {2, 2}, {2, 2})},
      {"conv_group2", "Conv2D", conv_attrs(6, {3, 3}, "pad", {1, 1, 1, 1}, {1, 1}, {1, 1}, 2)},
      {"conv_depthwise", "Conv2D", conv_attrs(3, {3, 3}, "same", {0, 0, 0, 0}, {1, 1}, {1, 1}, 3)},
      {"conv_pointwise", "Conv2D", conv_attrs(4, {1, 1})},
      {"maxpool_valid_k3_s2", "MaxPool", pool_attrs({3, 3}, {2, 2}, "VALID")},
      {"maxpool_same_k3_s2", "MaxPool", pool_attrs({3, 3}, {2, 2}, "SAME")},
      {"maxpool_same_k2_s1", "MaxPool", pool_attrs({2, 2}, {1, 1}, "SAME")},
      {"maxpool_valid_k2x3_s1x2", "MaxPool", pool_attrs({2, 3}, {1, 2}, "VALID")},
      {"avgpool_valid_k3_s2", "AvgPool", pool_attrs({3, 3}, {2, 2}, "VALID")},
      {"avgpool_same_k3_s2", "AvgPool", pool_attrs({3, 3}, {2, 2}, "SAME")},
      {"avgpool_same_k2_s1", "AvgPool", pool_attrs({2, 2}, {1, 1}, "SAME")},
      {"avgpool_same_k3_s1", "AvgPool", pool_attrs({3, 3}, {1, 1}, "SAME")},
  };
  return cases;
}

TEST(ConvPool, ReferenceFileHasExactlyTheTabledCases) {
  const auto ref = read_reference("conv_pool.txt");
  std::size_t outputs = 0;
  for (const auto& [name, t] : ref) outputs += name.ends_with(".y");
  EXPECT_EQ(outputs, reference_cases().size());
  for (const ReferenceCase& c : reference_cases()) EXPECT_TRUE(ref.count(c.name + ".y")) << c.name;
}

TEST(ConvPool, ForwardAndBackwardMatchPyTorch) {
  const auto ref = read_reference("conv_pool.txt");
  for (const ReferenceCase& c : reference_cases()) {
    SCOPED_TRACE(c.name);
    auto at = [&](const std::string& suffix) { return ref.at(c.name + "." + suffix); };
    const bool conv = c.op == "Conv2D";
    std::vector<Value> args{Value::tensor(at("x"))};
    if (conv) args.push_back(Value::tensor(at("w")));
    ir::PrimitivePtr prim = ops::make_op(c.op, c.attrs);
    const Value y = backend::run_op(*prim, args);
    EXPECT_LT(max_abs_diff(y.as_tensor(), at("y")), kReferenceTolerance);
    const std::vector<Value> grads = backend::run_bprop(*prim, args, y, Value::tensor(at("dy")));
    ASSERT_EQ(grads.size(), args.size());
    EXPECT_LT(max_abs_diff(grads[0].as_tensor(), at("dx")), kReferenceTolerance);
    if (conv) {
      EXPECT_LT(max_abs_diff(grads[1].as_tensor(), at("dw")), kReferenceTolerance);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// A naive direct convolution in float64: the second oracle, for shapes too large for the
// reference file.

struct NaiveConv {
  Shape x, w;  // (n, c, h, wd) and (o, c/group, kh, kw)
  Ints stride, dilation;
  std::int64_t group;
  std::int64_t pad_top, pad_left, oh, ow;

  std::int64_t out_size() const { return x[0] * w[0] * oh * ow; }

  // Calls fn(y index, x index, w index) for every product of the convolution.
  void for_each_tap(const std::function<void(std::int64_t, std::int64_t, std::int64_t)>& fn) const {
    const std::int64_t cg = w[1], og = w[0] / group;
    for (std::int64_t n = 0; n < x[0]; ++n)
      for (std::int64_t o = 0; o < w[0]; ++o)
        for (std::int64_t oy = 0; oy < oh; ++oy)
          for (std::int64_t ox = 0; ox < ow; ++ox)
            for (std::int64_t c = 0; c < cg; ++c)
              for (std::int64_t i = 0; i < w[2]; ++i)
                for (std::int64_t j = 0; j < w[3]; ++j) {
                  const std::int64_t iy = oy * stride[0] - pad_top + i * dilation[0];
                  const std::int64_t ix = ox * stride[1] - pad_left + j * dilation[1];
                  if (iy < 0 || iy >= x[2] || ix < 0 || ix >= x[3]) continue;
                  const std::int64_t ch = (o / og) * cg + c;
                  fn(((n * w[0] + o) * oh + oy) * ow + ox,
                     ((n * x[1] + ch) * x[2] + iy) * x[3] + ix,
                     ((o * cg + c) * w[2] + i) * w[3] + j);
                }
  }
};

Tensor random_f64(Shape shape, std::uint64_t seed) {
  Tensor t(DType::kFloat64, std::move(shape));
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, normal(rng));
  return t;
}

// Runs Conv2D and both gradient ops in float64 and checks them against the naive loops.
void check_against_naive(const Shape& xs, const Shape& ws, const std::string& pad_mode,
                         const Ints& pad, const Ints& stride, const Ints& dilation,
                         std::int64_t group) {
  const Attrs attrs = conv_attrs(ws[0], {ws[2], ws[3]}, pad_mode, pad, stride, dilation, group);
  const Tensor x = random_f64(xs, 1);
  const Tensor w = random_f64(ws, 2);
  const Tensor y = run("Conv2D", {x, w}, attrs);
  NaiveConv naive{.x = xs, .w = ws, .stride = stride, .dilation = dilation, .group = group,
                  .pad_top = 0, .pad_left = 0, .oh = y.dim(2), .ow = y.dim(3)};
  if (pad_mode == "pad") {
    naive.pad_top = pad[0];
    naive.pad_left = pad[2];
  } else if (pad_mode == "same") {
    naive.pad_top = std::max<std::int64_t>(
        (naive.oh - 1) * stride[0] + (ws[2] - 1) * dilation[0] + 1 - xs[2], 0) / 2;
    naive.pad_left = std::max<std::int64_t>(
        (naive.ow - 1) * stride[1] + (ws[3] - 1) * dilation[1] + 1 - xs[3], 0) / 2;
  }
  const Tensor dy = random_f64(y.shape(), 3);
  Tensor y_ref(DType::kFloat64, y.shape()), dx_ref(DType::kFloat64, xs),
      dw_ref(DType::kFloat64, ws);
  const double *xp = x.data<double>(), *wp = w.data<double>(), *dyp = dy.data<double>();
  double *yr = y_ref.data<double>(), *dxr = dx_ref.data<double>(), *dwr = dw_ref.data<double>();
  naive.for_each_tap([&](std::int64_t yi, std::int64_t xi, std::int64_t wi) {
    yr[yi] += xp[xi] * wp[wi];
    dxr[xi] += dyp[yi] * wp[wi];
    dwr[wi] += dyp[yi] * xp[xi];
  });
  expect_close(y, y_ref, 1e-12);
  expect_close(run("Conv2DBackpropInput", {dy, w}, with(attrs, "input_size", xs)), dx_ref, 1e-12);
  expect_close(run("Conv2DBackpropFilter", {dy, x}, with(attrs, "filter_size", ws)), dw_ref,
               1e-12);
}

TEST(ConvPool, Conv2DMatchesNaiveLoopsOnEveryGemmPath) {
  {
    SCOPED_TRACE("blocks of 21 images of 10x10 and an uneven last block of 3");
    check_against_naive({45, 3, 10, 10}, {4, 3, 3, 3}, "same", {0, 0, 0, 0}, {1, 1}, {1, 1}, 1);
  }
  {
    SCOPED_TRACE("46x46 outputs: one image per block, GEMM straight into y");
    check_against_naive({3, 2, 48, 48}, {3, 2, 3, 3}, "valid", {0, 0, 0, 0}, {1, 1}, {1, 1}, 1);
  }
  {
    SCOPED_TRACE("pointwise, single image: x is its own column matrix");
    check_against_naive({1, 5, 6, 7}, {3, 5, 1, 1}, "valid", {0, 0, 0, 0}, {1, 1}, {1, 1}, 1);
  }
  {
    SCOPED_TRACE("pointwise, large images");
    check_against_naive({2, 2, 50, 50}, {3, 2, 1, 1}, "same", {0, 0, 0, 0}, {1, 1}, {1, 1}, 1);
  }
  {
    SCOPED_TRACE("pointwise with stride");
    check_against_naive({2, 3, 7, 7}, {2, 3, 1, 1}, "valid", {0, 0, 0, 0}, {2, 2}, {1, 1}, 1);
  }
  {
    SCOPED_TRACE("groups, asymmetric padding, unequal strides and dilations");
    check_against_naive({4, 6, 11, 9}, {9, 2, 3, 2}, "pad", {2, 0, 1, 3}, {2, 3}, {1, 2}, 3);
  }
  {
    SCOPED_TRACE("depthwise, SAME, stride 2");
    check_against_naive({3, 4, 9, 8}, {4, 1, 3, 3}, "same", {0, 0, 0, 0}, {2, 2}, {1, 1}, 4);
  }
  {
    SCOPED_TRACE("stride 3 over a 2x2 kernel leaves rows and columns unread");
    check_against_naive({2, 2, 8, 8}, {2, 2, 2, 2}, "valid", {0, 0, 0, 0}, {3, 3}, {1, 1}, 1);
  }
}

TEST(ConvPool, ResultsDoNotDependOnThePoolSize) {
  backend::ThreadPool one(1), three(3);
  const Attrs conv = conv_attrs(4, {3, 3}, "same");
  const Attrs pool = pool_attrs({3, 3}, {1, 1}, "SAME");
  const Tensor x = random_f64({45, 3, 10, 10}, 4);
  const Tensor w = random_f64({4, 3, 3, 3}, 5);
  const Tensor dy = random_f64({45, 4, 10, 10}, 6);
  const Tensor dp = random_f64({45, 3, 10, 10}, 7);
  const std::vector<std::tuple<std::string, std::vector<Tensor>, Attrs>> calls = {
      {"Conv2D", {x, w}, conv},
      {"Conv2DBackpropInput", {dy, w}, with(conv, "input_size", {45, 3, 10, 10})},
      {"Conv2DBackpropFilter", {dy, x}, with(conv, "filter_size", {4, 3, 3, 3})},
      {"MaxPoolGrad", {x, dp, dp}, pool},
      {"AvgPoolGrad", {x, dp, dp}, pool},
  };
  for (const auto& [op, args, attrs] : calls) {
    SCOPED_TRACE(op);
    EXPECT_TRUE(run_kernel(one, op, args, attrs).bitwise_equal(run_kernel(three, op, args, attrs)));
  }
}

// ---------------------------------------------------------------------------------------------
// Cases worked out by hand

// x = 1..9 as 3x3, w = [[1, 2], [3, 4]].
Tensor hand_x() { return iota(DType::kFloat32, {1, 1, 3, 3}); }
Tensor hand_w() { return f32({1, 1, 2, 2}, {1, 2, 3, 4}); }

TEST(ConvPool, Conv2DValidByHand) {
  expect_tensor(run("Conv2D", {hand_x(), hand_w()}, conv_attrs(1, {2, 2})), {1, 1, 2, 2},
                {37, 47, 67, 77}, 1e-6);
}

TEST(ConvPool, Conv2DSamePutsTheOddPaddingAfter) {
  // Total padding 1 per axis: none before, one row / column after.
  expect_tensor(run("Conv2D", {hand_x(), hand_w()}, conv_attrs(1, {2, 2}, "SAME")), {1, 1, 3, 3},
                {37, 47, 21, 67, 77, 33, 23, 26, 9}, 1e-6);
}

TEST(ConvPool, Conv2DExplicitPadding) {
  expect_tensor(run("Conv2D", {hand_x(), hand_w()}, conv_attrs(1, {2, 2}, "pad", {1, 0, 1, 0})),
                {1, 1, 3, 3}, {4, 11, 18, 18, 37, 47, 36, 67, 77}, 1e-6);
}

TEST(ConvPool, Conv2DStrideAndDilation) {
  // x = 0..24 as 5x5, w = ones 2x2 dilated by 2: y(i, j) = 20i + 4j + 24 at i, j ∈ {0, 2}.
  const Tensor x = iota(DType::kFloat32, {1, 1, 5, 5}, 0);
  const Tensor w = f32({1, 1, 2, 2}, {1, 1, 1, 1});
  expect_tensor(run("Conv2D", {x, w}, conv_attrs(1, {2, 2}, "valid", {0, 0, 0, 0}, {2, 2}, {2, 2})),
                {1, 1, 2, 2}, {24, 32, 64, 72}, 1e-6);
}

TEST(ConvPool, Conv2DGroupsKeepChannelsApart) {
  const Tensor x = f32({1, 2, 1, 1}, {1, 2});
  const Tensor w = f32({4, 1, 1, 1}, {3, 4, 5, 6});
  // Outputs 0-1 see channel 0, outputs 2-3 see channel 1.
  expect_tensor(run("Conv2D", {x, w}, conv_attrs(4, {1, 1}, "valid", {0, 0, 0, 0}, {1, 1},
                                                 {1, 1}, 2)),
                {1, 4, 1, 1}, {3, 4, 10, 12}, 1e-6);
}

TEST(ConvPool, Conv2DFloat64) {
  const Tensor x = iota(DType::kFloat64, {1, 1, 3, 3});
  const Tensor w = Tensor::from_doubles(DType::kFloat64, {1, 1, 2, 2}, {1, 2, 3, 4});
  const Tensor y = run("Conv2D", {x, w}, conv_attrs(1, {2, 2}));
  EXPECT_EQ(y.dtype(), DType::kFloat64);
  expect_tensor(y, {1, 1, 2, 2}, {37, 47, 67, 77}, 0);
}

TEST(ConvPool, Conv2DBackpropInputByHand) {
  const Tensor dout = f32({1, 1, 2, 2}, {1, 1, 1, 1});
  expect_tensor(run("Conv2DBackpropInput", {dout, hand_w()},
                    with(conv_attrs(1, {2, 2}), "input_size", {1, 1, 3, 3})),
                {1, 1, 3, 3}, {1, 3, 2, 4, 10, 6, 3, 7, 4}, 1e-6);
}

TEST(ConvPool, Conv2DBackpropInputLeavesUncoveredPixelsZero) {
  // Stride 2 over 4x4 with a 1x1 kernel only reaches the even rows and columns.
  const Tensor dout = f32({1, 1, 2, 2}, {1, 2, 3, 4});
  const Tensor w = f32({1, 1, 1, 1}, {10});
  expect_tensor(run("Conv2DBackpropInput", {dout, w},
                    with(conv_attrs(1, {1, 1}, "valid", {0, 0, 0, 0}, {2, 2}), "input_size",
                         {1, 1, 4, 4})),
                {1, 1, 4, 4}, {10, 0, 20, 0, 0, 0, 0, 0, 30, 0, 40, 0, 0, 0, 0, 0}, 1e-6);
}

TEST(ConvPool, Conv2DBackpropFilterByHand) {
  const Tensor dout = f32({1, 1, 2, 2}, {1, 1, 1, 1});
  expect_tensor(run("Conv2DBackpropFilter", {dout, hand_x()},
                    with(conv_attrs(1, {2, 2}), "filter_size", {1, 1, 2, 2})),
                {1, 1, 2, 2}, {12, 16, 24, 28}, 1e-6);
}

TEST(ConvPool, Conv2DBpropCallsTheGradientOps) {
  ir::PrimitivePtr prim = ops::make_op("Conv2D", conv_attrs(1, {2, 2}));
  const std::vector<Value> args{Value::tensor(hand_x()), Value::tensor(hand_w())};
  const Value y = backend::run_op(*prim, args);
  const Value dy = Value::tensor(f32({1, 1, 2, 2}, {1, 1, 1, 1}));
  const std::vector<Value> g = backend::run_bprop(*prim, args, y, dy);
  expect_tensor(g[0].as_tensor(), {1, 1, 3, 3}, {1, 3, 2, 4, 10, 6, 3, 7, 4}, 1e-6);
  expect_tensor(g[1].as_tensor(), {1, 1, 2, 2}, {12, 16, 24, 28}, 1e-6);
}

// x = 1..16 as 4x4.
Tensor pool_x() { return iota(DType::kFloat32, {1, 1, 4, 4}); }

TEST(ConvPool, MaxPoolValidAndSame) {
  expect_tensor(run("MaxPool", {pool_x()}, pool_attrs({2, 2}, {2, 2}, "VALID")), {1, 1, 2, 2},
                {6, 8, 14, 16}, 1e-6);
  // SAME, kernel 3, stride 2: total padding 1, after; windows rows/cols [0, 3) and [2, 4).
  expect_tensor(run("MaxPool", {pool_x()}, pool_attrs({3, 3}, {2, 2}, "SAME")), {1, 1, 2, 2},
                {11, 12, 15, 16}, 1e-6);
}

TEST(ConvPool, AvgPoolSameAveragesOnlyTheInside) {
  expect_tensor(run("AvgPool", {pool_x()}, pool_attrs({3, 3}, {2, 2}, "SAME")), {1, 1, 2, 2},
                {54.0 / 9, 45.0 / 6, 72.0 / 6, 54.0 / 4}, 1e-6);
  // Kernel 3, stride 1 on 3x3: one row and column of padding on every side.
  expect_tensor(run("AvgPool", {hand_x()}, pool_attrs({3, 3}, {1, 1}, "same")), {1, 1, 3, 3},
                {3, 3.5, 4, 4.5, 5, 5.5, 6, 6.5, 7}, 1e-6);
}

// PAD mode: ONNX's and PyTorch's explicit padding (MaxPool2d(3, 2, padding=1)); windows start
// at -1 and are clipped to x; AvgPool averages the elements inside x.
TEST(ConvPool, PoolingWithExplicitPads) {
  const Attrs attrs = with(pool_attrs({3, 3}, {2, 2}, "PAD"), "pad", {1, 1, 1, 1});
  expect_tensor(run("MaxPool", {pool_x()}, attrs), {1, 1, 2, 2}, {6, 8, 14, 16}, 1e-6);
  expect_tensor(run("AvgPool", {pool_x()}, attrs), {1, 1, 2, 2}, {3.5, 5, 9.5, 11}, 1e-6);
  expect_error<ValueError>(
      [] { run("MaxPool", {pool_x()}, with(pool_attrs({3, 3}, {2, 2}, "PAD"), "pad", {3, 0, 0, 0})); },
      "MaxPool: expected every pad below the kernel's extent on its axis (kernel_size (3, 3)), "
      "got pad (3, 0, 0, 0): a window would hold padding only");
  expect_error<ValueError>(
      [] { run("MaxPool", {pool_x()}, with(pool_attrs({3, 3}, {2, 2}, "SAME"), "pad", {1, 1, 1, 1})); },
      "MaxPool: expected pad (0, 0, 0, 0) unless pad_mode is PAD, got pad (1, 1, 1, 1)");
}

TEST(ConvPool, AvgPoolValid) {
  expect_tensor(run("AvgPool", {pool_x()}, pool_attrs({2, 2}, {2, 2}, "VALID")), {1, 1, 2, 2},
                {3.5, 5.5, 11.5, 13.5}, 1e-6);
}

TEST(ConvPool, MaxPoolGradRoutesToTheFirstMaximum) {
  // Ties: each window's gradient goes to its first maximum in row-major order.
  const Tensor x = f32({1, 1, 2, 3}, {5, 5, 5, 5, 5, 5});
  const Tensor out = f32({1, 1, 1, 2}, {5, 5});
  const Tensor dout = f32({1, 1, 1, 2}, {1, 10});
  expect_tensor(run("MaxPoolGrad", {x, out, dout}, pool_attrs({2, 2}, {1, 1}, "VALID")),
                {1, 1, 2, 3}, {1, 10, 0, 0, 0, 0}, 1e-6);
  // Overlapping windows accumulate.
  const Tensor y = f32({1, 1, 1, 3}, {1, 9, 2});
  expect_tensor(run("MaxPoolGrad", {y, f32({1, 1, 1, 2}, {9, 9}), f32({1, 1, 1, 2}, {1, 2})},
                    pool_attrs({1, 2}, {1, 1}, "VALID")),
                {1, 1, 1, 3}, {0, 3, 0}, 1e-6);
}

TEST(ConvPool, MaxPoolPropagatesNaN) {
  const Tensor x = f32({1, 1, 2, 2}, {1, std::nan(""), 3, 2});
  const Tensor y = run("MaxPool", {x}, pool_attrs({2, 2}, {1, 1}, "VALID"));
  EXPECT_TRUE(std::isnan(y.get(0)));
  expect_tensor(run("MaxPoolGrad", {x, y, f32({1, 1, 1, 1}, {5})},
                    pool_attrs({2, 2}, {1, 1}, "VALID")),
                {1, 1, 2, 2}, {0, 5, 0, 0}, 1e-6);
}

TEST(ConvPool, MaxPoolGradGradReadsAtTheFirstMaximum) {
  const Tensor grad = iota(DType::kFloat32, {1, 1, 4, 4}, 100);
  const Tensor out = f32({1, 1, 2, 2}, {0, 0, 0, 0});
  // Maxima of x = 1..16 under SAME 3/2 sit at flat indices 10, 11, 14, 15.
  expect_tensor(run("MaxPoolGradGrad", {pool_x(), out, grad}, pool_attrs({3, 3}, {2, 2}, "SAME")),
                {1, 1, 2, 2}, {110, 111, 114, 115}, 1e-6);
}

TEST(ConvPool, AvgPoolGradSpreadsOverTheInside) {
  // SAME 2x2 stride 1 on 3x3: windows at the bottom and right edges are clipped.
  const Tensor dout = f32({1, 1, 3, 3}, {4, 4, 4, 4, 4, 4, 4, 4, 4});
  expect_tensor(run("AvgPoolGrad", {hand_x(), dout, dout}, pool_attrs({2, 2}, {1, 1}, "SAME")),
                {1, 1, 3, 3}, {1, 2, 3, 2, 4, 6, 3, 6, 9}, 1e-6);
}

TEST(ConvPool, PoolingFloat64) {
  const Tensor x = iota(DType::kFloat64, {1, 1, 4, 4});
  const Tensor y = run("AvgPool", {x}, pool_attrs({2, 2}, {2, 2}, "VALID"));
  EXPECT_EQ(y.dtype(), DType::kFloat64);
  expect_tensor(y, {1, 1, 2, 2}, {3.5, 5.5, 11.5, 13.5}, 0);
  expect_tensor(run("MaxPool", {x}, pool_attrs({2, 2}, {2, 2}, "VALID")), {1, 1, 2, 2},
                {6, 8, 14, 16}, 0);
}

TEST(ConvPool, InferenceKeepsUnknownDims) {
  ir::PrimitivePtr conv = ops::make_op("Conv2D", conv_attrs(4, {3, 3}, "same", {0, 0, 0, 0},
                                                            {2, 2}));
  const std::vector<ir::AbstractPtr> args{ir::Abstract::tensor(DType::kFloat32, {-1, 3, -1, 9}),
                                          ir::Abstract::tensor(DType::kFloat32, {4, 3, 3, 3})};
  EXPECT_EQ(ops::infer(*conv, args)->shape(), (Shape{-1, 4, -1, 5}));
  ir::PrimitivePtr pool = ops::make_op("MaxPool", pool_attrs({3, 3}, {2, 2}, "VALID"));
  const std::vector<ir::AbstractPtr> x{ir::Abstract::tensor(DType::kFloat64, {2, -1, 7, -1})};
  const ir::AbstractPtr y = ops::infer(*pool, x);
  EXPECT_EQ(y->shape(), (Shape{2, -1, 3, -1}));
  EXPECT_EQ(y->dtype(), DType::kFloat64);
}

// ---------------------------------------------------------------------------------------------
// Inference errors

Tensor zeros(Shape shape, DType dtype = DType::kFloat32) { return Tensor(dtype, std::move(shape)); }

TEST(ConvPool, Conv2DChannelMismatchIsAShapeError) {
  expect_error<ShapeError>(
      [] { run("Conv2D", {zeros({1, 3, 5, 5}), zeros({2, 4, 3, 3})}, conv_attrs(2, {3, 3})); },
      "Conv2D: expected input channels 3 to equal weight channels 4 × group 1, got x "
      "(1, 3, 5, 5) and w (2, 4, 3, 3)");
  expect_error<ShapeError>(
      [] {
        run("Conv2D", {zeros({1, 3, 5, 5}), zeros({4, 2, 3, 3})},
            conv_attrs(4, {3, 3}, "valid", {0, 0, 0, 0}, {1, 1}, {1, 1}, 2));
      },
      "Conv2D: expected input channels 3 to equal weight channels 2 × group 2, got x "
      "(1, 3, 5, 5) and w (4, 2, 3, 3)");
}

TEST(ConvPool, Conv2DShapeErrors) {
  expect_error<ShapeError>(
      [] { run("Conv2D", {zeros({3, 5, 5}), zeros({2, 3, 3, 3})}, conv_attrs(2, {3, 3})); },
      "Conv2D: expected x of rank 4 (N, C, H, W), got (3, 5, 5)");
  expect_error<ShapeError>(
      [] { run("Conv2D", {zeros({1, 3, 5, 5}), zeros({3, 3, 3})}, conv_attrs(2, {3, 3})); },
      "Conv2D: expected w of rank 4 (O, C/group, kh, kw), got (3, 3, 3)");
  expect_error<ShapeError>(
      [] { run("Conv2D", {zeros({1, 3, 5, 5}), zeros({2, 3, 3, 3})}, conv_attrs(3, {3, 3})); },
      "Conv2D: expected w's output channels to equal out_channel 3, got x (1, 3, 5, 5) and w "
      "(2, 3, 3, 3)");
  expect_error<ShapeError>(
      [] { run("Conv2D", {zeros({1, 3, 5, 5}), zeros({2, 3, 2, 2})}, conv_attrs(2, {3, 3})); },
      "Conv2D: expected w's spatial dims to equal kernel_size (3, 3), got x (1, 3, 5, 5) and w "
      "(2, 3, 2, 2)");
  expect_error<ShapeError>(
      [] {
        run("Conv2D", {zeros({1, 3, 4, 9}), zeros({2, 3, 3, 3})},
            conv_attrs(2, {3, 3}, "valid", {0, 0, 0, 0}, {1, 1}, {2, 2}));
      },
      "Conv2D: expected the input to be at least the dilated kernel (5, 5) in H and W, got x "
      "(1, 3, 4, 9)");
  expect_error<ShapeError>(
      [] {
        run("Conv2D", {zeros({1, 3, 1, 1}), zeros({2, 3, 3, 3})},
            conv_attrs(2, {3, 3}, "pad", {1, 0, 1, 0}));
      },
      "Conv2D: expected the padded input to be at least the dilated kernel (3, 3) in H and W, "
      "got x (1, 3, 1, 1)");
}

TEST(ConvPool, Conv2DAttributeAndDtypeErrors) {
  expect_error<ValueError>(
      [] {
        run("Conv2D", {zeros({1, 3, 5, 5}), zeros({2, 3, 3, 3})}, conv_attrs(2, {3, 3}, "full"));
      },
      "Conv2D: attribute 'pad_mode' expected one of valid, same, pad, got 'full'");
  expect_error<ValueError>(
      [] {
        run("Conv2D", {zeros({1, 3, 5, 5}), zeros({2, 3, 3, 3})},
            conv_attrs(2, {3, 3}, "valid", {1, 1, 1, 1}));
      },
      "Conv2D: expected pad (0, 0, 0, 0) unless pad_mode is 'pad', got pad (1, 1, 1, 1) with "
      "pad_mode 'valid'");
  expect_error<ValueError>(
      [] {
        run("Conv2D", {zeros({1, 3, 5, 5}), zeros({2, 3, 3, 3})},
            conv_attrs(2, {3, 3}, "valid", {0, 0, 0, 0}, {0, 1}));
      },
      "Conv2D: attribute 'stride' expected 2 positive integers, got (0, 1)");
  expect_error<ValueError>(
      [] {
        run("Conv2D", {zeros({1, 3, 5, 5}), zeros({2, 3, 3, 3})},
            conv_attrs(2, {3, 3}, "pad", {0, -1, 0, 0}));
      },
      "Conv2D: attribute 'pad' expected 4 non-negative integers, got (0, -1, 0, 0)");
  expect_error<ValueError>(
      [] {
        run("Conv2D", {zeros({1, 4, 5, 5}), zeros({3, 2, 3, 3})},
            conv_attrs(3, {3, 3}, "valid", {0, 0, 0, 0}, {1, 1}, {1, 1}, 2));
      },
      "Conv2D: expected out_channel divisible by group, got out_channel 3 and group 2");
  Attrs nhwc = conv_attrs(2, {3, 3});
  nhwc["format"] = Value::string("NHWC");
  expect_error<ValueError>(
      [&] { run("Conv2D", {zeros({1, 3, 5, 5}), zeros({2, 3, 3, 3})}, nhwc); },
      "Conv2D: attribute 'format' expected 'NCHW', got 'NHWC'");
  expect_error<TypeError>(
      [] {
        run("Conv2D", {zeros({1, 3, 5, 5}), zeros({2, 3, 3, 3}, DType::kFloat64)},
            conv_attrs(2, {3, 3}));
      },
      "Conv2D: expected x and w of the same dtype, got Float32 and Float64");
  expect_error<TypeError>(
      [] {
        run("Conv2D", {zeros({1, 3, 5, 5}, DType::kInt32), zeros({2, 3, 3, 3}, DType::kInt32)},
            conv_attrs(2, {3, 3}));
      },
      "Conv2D: expected a floating x, got Int32");
}

TEST(ConvPool, GradientOpsCheckDoutAgainstTheForwardShape) {
  expect_error<ShapeError>(
      [] {
        run("Conv2DBackpropInput", {zeros({1, 2, 4, 4}), zeros({2, 3, 3, 3})},
            with(conv_attrs(2, {3, 3}), "input_size", {1, 3, 5, 5}));
      },
      "Conv2DBackpropInput: expected dout (1, 2, 3, 3) for input_size (1, 3, 5, 5), got "
      "(1, 2, 4, 4)");
  expect_error<ShapeError>(
      [] {
        run("Conv2DBackpropFilter", {zeros({1, 2, 4, 4}), zeros({1, 3, 5, 5})},
            with(conv_attrs(2, {3, 3}), "filter_size", {2, 3, 3, 3}));
      },
      "Conv2DBackpropFilter: expected dout (1, 2, 3, 3) for x (1, 3, 5, 5) and filter_size "
      "(2, 3, 3, 3), got (1, 2, 4, 4)");
  expect_error<ShapeError>(
      [] {
        run("MaxPoolGrad", {zeros({1, 1, 4, 4}), zeros({1, 1, 2, 2}), zeros({1, 1, 3, 3})},
            pool_attrs({2, 2}, {2, 2}, "VALID"));
      },
      "MaxPoolGrad: expected dout (1, 1, 2, 2) for x (1, 1, 4, 4), got (1, 1, 3, 3)");
  expect_error<ShapeError>(
      [] {
        run("AvgPoolGrad", {zeros({1, 1, 4, 4}), zeros({1, 1, 1, 1}), zeros({1, 1, 2, 2})},
            pool_attrs({2, 2}, {2, 2}, "VALID"));
      },
      "AvgPoolGrad: expected out (1, 1, 2, 2) for x (1, 1, 4, 4), got (1, 1, 1, 1)");
}

TEST(ConvPool, PoolingErrors) {
  expect_error<ValueError>(
      [] { run("MaxPool", {zeros({1, 1, 4, 4})}, pool_attrs({2, 2}, {2, 2}, "full")); },
      "MaxPool: attribute 'pad_mode' expected one of VALID, SAME, PAD, got 'full'");
  expect_error<ShapeError>(
      [] { run("MaxPool", {zeros({2, 5, 5})}, pool_attrs({2, 2}, {2, 2}, "VALID")); },
      "MaxPool: expected x of rank 4 (N, C, H, W), got (2, 5, 5)");
  expect_error<ShapeError>(
      [] { run("AvgPool", {zeros({1, 1, 2, 5})}, pool_attrs({3, 3}, {1, 1}, "VALID")); },
      "AvgPool: expected the input to be at least kernel_size (3, 3) in H and W with pad_mode "
      "VALID, got x (1, 1, 2, 5)");
  expect_error<ValueError>(
      [] { run("AvgPool", {zeros({1, 1, 4, 4})}, pool_attrs({2, 2, 2}, {1, 1}, "VALID")); },
      "AvgPool: attribute 'kernel_size' expected 2 positive integers, got (2, 2, 2)");
  expect_error<TypeError>(
      [] {
        run("MaxPool", {zeros({1, 1, 4, 4}, DType::kInt32)}, pool_attrs({2, 2}, {2, 2}, "VALID"));
      },
      "MaxPool: expected a floating x, got Int32");
}

}  // namespace
}  // namespace loom::testing
