#include "tests/ops/conv_test_util.h"

#include <algorithm>

#include "backends/thread_pool.h"

namespace loom::testing {

using ir::Value;

std::string describe(const ConvCase& c) {
  std::string s = "x " + shape_to_string(c.x) + " w " + shape_to_string(c.w) + " " + c.pad_mode;
  if (c.pad_mode == "pad") {
    s += " " + std::to_string(c.pad[0]) + "," + std::to_string(c.pad[1]) + "," +
         std::to_string(c.pad[2]) + "," + std::to_string(c.pad[3]);
  }
  s += " stride " + std::to_string(c.stride[0]) + "," + std::to_string(c.stride[1]);
  s += " dilation " + std::to_string(c.dilation[0]) + "," + std::to_string(c.dilation[1]);
  return s;
}

ir::Primitive::Attrs conv_attrs(const ConvCase& c) {
  return {{"out_channel", Value::i64(c.w[0])}, {"kernel_size", Value::ints({c.w[2], c.w[3]})},
          {"pad_mode", Value::string(c.pad_mode)}, {"pad", Value::ints(c.pad)},
          {"stride", Value::ints(c.stride)}, {"dilation", Value::ints(c.dilation)},
          {"group", Value::i64(1)}};
}

std::vector<ConvCall> conv_calls(const ConvCase& c, DType dtype) {
  backend::ThreadPool one(1);
  const ir::Primitive::Attrs attrs = conv_attrs(c);
  const Tensor x = random_normal(dtype, c.x, 1);
  const Tensor w = random_normal(dtype, c.w, 2);
  const Tensor y = run_im2col(one, "Conv2D", {x, w}, attrs);
  const Tensor dy = random_normal(dtype, y.shape(), 3);
  ir::Primitive::Attrs bi = attrs;
  bi["input_size"] = Value::ints(std::vector<std::int64_t>(c.x.begin(), c.x.end()));
  ir::Primitive::Attrs bf = attrs;
  bf["filter_size"] = Value::ints(std::vector<std::int64_t>(c.w.begin(), c.w.end()));
  return {{"Conv2D", {x, w}, attrs},
          {"Conv2DBackpropInput", {dy, w}, bi},
          {"Conv2DBackpropFilter", {dy, x}, bf}};
}

backend::cpu::ConvShape conv_shape_of(const ConvCase& c, const Shape& y) {
  const std::int64_t oh = y[2], ow = y[3];
  std::int64_t top = c.pad[0], left = c.pad[2];
  if (c.pad_mode == "same") {
    top = std::max<std::int64_t>(
              (oh - 1) * c.stride[0] + (c.w[2] - 1) * c.dilation[0] + 1 - c.x[2], 0) / 2;
    left = std::max<std::int64_t>(
               (ow - 1) * c.stride[1] + (c.w[3] - 1) * c.dilation[1] + 1 - c.x[3], 0) / 2;
  } else if (c.pad_mode == "valid") {
    top = left = 0;
  }
  return {.n = c.x[0], .c = c.x[1], .h = c.x[2], .w = c.x[3], .o = c.w[0], .oh = oh, .ow = ow,
          .kh = c.w[2], .kw = c.w[3], .sh = c.stride[0], .sw = c.stride[1],
          .dil_h = c.dilation[0], .dil_w = c.dilation[1], .pad_top = top, .pad_left = left};
}

}  // namespace loom::testing
