// Shared pieces of the convolution kernel tests (conv_direct_test, conv_implicit_test,
// conv_dnnl_test): a case (input and filter shapes, padding, stride, dilation), its attributes,
// its three op calls on random inputs, and the geometry conv_kernels.cc hands the kernels.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backends/cpu/conv_implicit_gemm.h"
#include "core/ir/value.h"
#include "tests/ops/test_util.h"

namespace loom::testing {

struct ConvCase {
  Shape x, w;            // (n, c, h, w) and (o, c, kh, kw)
  std::string pad_mode;  // "valid", "same" or "pad"
  std::vector<std::int64_t> pad;  // top, bottom, left, right ("pad" only)
  std::vector<std::int64_t> stride = {1, 1};
  std::vector<std::int64_t> dilation = {1, 1};
};

// "x (..) w (..) mode [pads] stride s,s dilation d,d", for SCOPED_TRACE.
std::string describe(const ConvCase& c);

// Conv2D's attributes for the case (group 1).
ir::Primitive::Attrs conv_attrs(const ConvCase& c);

struct ConvCall {
  std::string op;
  std::vector<Tensor> args;
  ir::Primitive::Attrs attrs;
};

// Conv2D (x, w), Conv2DBackpropInput (dy, w) and Conv2DBackpropFilter (dy, x) in `dtype`, on
// random_normal inputs with seeds 1 (x), 2 (w) and 3 (dy).
std::vector<ConvCall> conv_calls(const ConvCase& c, DType dtype = DType::kFloat32);

// The geometry conv_kernels.cc hands the kernels for output shape y (MindSpore's "same":
// floor(total / 2) before).
backend::cpu::ConvShape conv_shape_of(const ConvCase& c, const Shape& y);

}  // namespace loom::testing
