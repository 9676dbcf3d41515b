// Convolution and pooling ops, NCHW, with MindSpore's names and attributes: Conv2D and its two
// gradient ops Conv2DBackpropInput / Conv2DBackpropFilter; MaxPool, AvgPool and their gradient
// ops MaxPoolGrad, AvgPoolGrad, MaxPoolGradGrad.
//
// Padding follows MindSpore (ops/conv_geometry.h, shared with the kernels): 'valid' uses no
// padding, 'same' gives out = ceil(in / stride) with total padding
// max((out - 1)·stride + (k - 1)·dilation + 1 - in, 0) split floor(total / 2) before and the rest
// after, 'pad' (Conv2D only) takes the explicit (top, bottom, left, right).
//
// The convolution ops are linear in each argument, so each one's gradient is the other two
// applied to the incoming gradient: every order of derivative of a convolution stays within
// these three ops. Pooling gradients are linear in dout as well: MaxPoolGrad and MaxPoolGradGrad
// are each other's adjoint (scatter to / gather from the window's first maximum), and
// AvgPoolGrad's adjoint is AvgPool itself.
#include <cctype>

#include "core/ir/error.h"
#include "ops/conv_geometry.h"
#include "ops/op.h"

namespace loom::ops {

namespace {

using Ints = std::vector<std::int64_t>;

std::string to_lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::string ints_text(const Ints& v) { return shape_to_string(v); }

// An Ints attribute of exactly `count` values, each at least `min`.
AttrSpec ints_attr(std::string name, std::size_t count, std::int64_t min,
                   std::optional<Ints> default_value) {
  std::optional<Value> def;
  if (default_value) def = Value::ints(*default_value);
  const std::string what = std::to_string(count) +
                           (min > 0 ? " positive integers" : " non-negative integers");
  return AttrSpec{
      .name = std::move(name),
      .kind = AttrKind::kInts,
      .default_value = def,
      .check = [count, min, what](const Value& v) -> std::string {
        const Ints ints = v.as_ints();
        bool ok = ints.size() == count;
        for (std::int64_t i : ints) ok = ok && i >= min;
        return ok ? "" : "expected " + what + ", got " + ints_text(ints);
      },
  };
}

AttrSpec positive_int_attr(std::string name, std::optional<std::int64_t> default_value) {
  std::optional<Value> def;
  if (default_value) def = Value::i64(*default_value);
  return AttrSpec{
      .name = std::move(name),
      .kind = AttrKind::kInt,
      .default_value = def,
      .check = [](const Value& v) -> std::string {
        return v.as_int() > 0 ? "" : "expected a positive integer, got " +
                                         std::to_string(v.as_int());
      },
  };
}

AttrSpec format_attr() {
  return AttrSpec{
      .name = "format",
      .kind = AttrKind::kString,
      .default_value = Value::string("NCHW"),
      .check = [](const Value& v) -> std::string {
        return v.as_string() == "NCHW" ? "" : "expected 'NCHW', got '" + v.as_string() + "'";
      },
  };
}

// ---------------------------------------------------------------------------------------------
// Convolution

struct ConvAttrs {
  std::int64_t out_channel;
  std::int64_t group;
  PadMode pad_mode;
  std::string pad_mode_text;
  Ints kernel, stride, dilation, pad;
};

ConvAttrs conv_attrs(const Primitive& p) {
  ConvAttrs a{
      .out_channel = p.attr("out_channel").as_int(),
      .group = p.attr("group").as_int(),
      .pad_mode = pad_mode_of(p),
      .pad_mode_text = to_lower(p.attr("pad_mode").as_string()),
      .kernel = p.attr("kernel_size").as_ints(),
      .stride = p.attr("stride").as_ints(),
      .dilation = p.attr("dilation").as_ints(),
      .pad = p.attr("pad").as_ints(),
  };
  return a;
}

std::vector<AttrSpec> conv_attr_specs() {
  return {
      positive_int_attr("out_channel", std::nullopt),
      ints_attr("kernel_size", 2, 1, std::nullopt),
      AttrSpec{
          .name = "mode",
          .kind = AttrKind::kInt,
          .default_value = Value::i64(1),
          .check = [](const Value& v) -> std::string {
            return v.as_int() == 1 ? "" : "expected 1 (cross-correlation), got " +
                                              std::to_string(v.as_int());
          },
      },
      AttrSpec{
          .name = "pad_mode",
          .kind = AttrKind::kString,
          .default_value = Value::string("valid"),
          .check = [](const Value& v) -> std::string {
            const std::string m = to_lower(v.as_string());
            return m == "valid" || m == "same" || m == "pad"
                       ? ""
                       : "expected one of valid, same, pad, got '" + v.as_string() + "'";
          },
      },
      ints_attr("pad", 4, 0, Ints{0, 0, 0, 0}),
      ints_attr("stride", 2, 1, Ints{1, 1}),
      ints_attr("dilation", 2, 1, Ints{1, 1}),
      positive_int_attr("group", 1),
      format_attr(),
  };
}

// Input i as a floating tensor of rank 4 (`layout` names its axes in the message).
const ir::Abstract& floating_rank4(const InferContext& c, std::size_t i, std::string_view name,
                                   std::string_view layout) {
  const ir::Abstract& t = c.tensor(i);
  if (t.shape().size() != 4) {
    throw ShapeError(c.error("expected " + std::string(name) + " of rank 4 " +
                             std::string(layout) + ", got " + shape_to_string(t.shape())));
  }
  if (!is_floating(t.dtype())) {
    throw TypeError(c.error("expected a floating " + std::string(name) + ", got " +
                            std::string(dtype_name(t.dtype()))));
  }
  return t;
}

void check_same_dtype(const InferContext& c, const ir::Abstract& a, std::string_view a_name,
                      const ir::Abstract& b, std::string_view b_name) {
  if (a.dtype() != b.dtype()) {
    throw TypeError(c.error("expected " + std::string(a_name) + " and " + std::string(b_name) +
                            " of the same dtype, got " + std::string(dtype_name(a.dtype())) +
                            " and " + std::string(dtype_name(b.dtype()))));
  }
}

bool known(std::int64_t d) { return d != ir::kUnknownDim; }

// Equal where both dims are known.
bool shapes_agree(const Shape& a, const Shape& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (known(a[i]) && known(b[i]) && a[i] != b[i]) return false;
  }
  return true;
}

// Output extent along one spatial axis: unknown when the input extent is, 0 when the (dilated)
// kernel does not fit.
std::int64_t conv_out_dim(const ConvAttrs& a, int axis, std::int64_t in) {
  return window_axis(in, a.kernel[axis], a.stride[axis], a.dilation[axis], a.pad_mode,
                     a.pad[2 * axis], a.pad[2 * axis + 1])
      .out;
}

// Checks x (N, C, H, W) against w (O, C/group, kh, kw) and the attributes; returns the output
// shape (N, O, oh, ow). Shared by the three convolution ops, whose x or w may come from an
// attribute (input_size, filter_size).
Shape conv_output_shape(const InferContext& c, const ConvAttrs& a, const Shape& x,
                        const Shape& w) {
  if (a.pad_mode != PadMode::kPad && a.pad != Ints{0, 0, 0, 0}) {
    throw ValueError(c.error("expected pad (0, 0, 0, 0) unless pad_mode is 'pad', got pad " +
                             ints_text(a.pad) + " with pad_mode '" + a.pad_mode_text + "'"));
  }
  const std::string shapes = "x " + shape_to_string(x) + " and w " + shape_to_string(w);
  if (a.out_channel % a.group != 0) {
    throw ValueError(c.error("expected out_channel divisible by group, got out_channel " +
                             std::to_string(a.out_channel) + " and group " +
                             std::to_string(a.group)));
  }
  if (known(w[0]) && w[0] != a.out_channel) {
    throw ShapeError(c.error("expected w's output channels to equal out_channel " +
                             std::to_string(a.out_channel) + ", got " + shapes));
  }
  if (known(x[1]) && known(w[1]) && x[1] != w[1] * a.group) {
    throw ShapeError(c.error("expected input channels " + std::to_string(x[1]) +
                             " to equal weight channels " + std::to_string(w[1]) + " × group " +
                             std::to_string(a.group) + ", got " + shapes));
  }
  if ((known(w[2]) && w[2] != a.kernel[0]) || (known(w[3]) && w[3] != a.kernel[1])) {
    throw ShapeError(c.error("expected w's spatial dims to equal kernel_size " +
                             ints_text(a.kernel) + ", got " + shapes));
  }
  Shape out{x[0], a.out_channel, conv_out_dim(a, 0, x[2]), conv_out_dim(a, 1, x[3])};
  if (a.pad_mode != PadMode::kSame && (out[2] == 0 || out[3] == 0)) {
    const Ints span{a.dilation[0] * (a.kernel[0] - 1) + 1, a.dilation[1] * (a.kernel[1] - 1) + 1};
    throw ShapeError(c.error("expected the " + std::string(a.pad_mode == PadMode::kPad
                                                               ? "padded input"
                                                               : "input") +
                             " to be at least the dilated kernel " + ints_text(span) +
                             " in H and W, got x " + shape_to_string(x)));
  }
  return out;
}

// dout of a gradient op must have the shape the forward convolution gives.
void check_dout(const InferContext& c, const Shape& dout, const Shape& expected,
                std::string_view given_by) {
  if (!shapes_agree(dout, expected)) {
    throw ShapeError(c.error("expected dout " + shape_to_string(expected) + " for " +
                             std::string(given_by) + ", got " + shape_to_string(dout)));
  }
}

AbstractPtr infer_conv2d(const InferContext& c) {
  const ir::Abstract& x = floating_rank4(c, 0, "x", "(N, C, H, W)");
  const ir::Abstract& w = floating_rank4(c, 1, "w", "(O, C/group, kh, kw)");
  check_same_dtype(c, x, "x", w, "w");
  return ir::Abstract::tensor(x.dtype(), conv_output_shape(c, conv_attrs(c.prim), x.shape(),
                                                           w.shape()));
}

AbstractPtr infer_conv2d_backprop_input(const InferContext& c) {
  const ir::Abstract& dout = floating_rank4(c, 0, "dout", "(N, O, oh, ow)");
  const ir::Abstract& w = floating_rank4(c, 1, "w", "(O, C/group, kh, kw)");
  check_same_dtype(c, dout, "dout", w, "w");
  const Shape x = c.attr("input_size").as_ints();
  const Shape expected = conv_output_shape(c, conv_attrs(c.prim), x, w.shape());
  check_dout(c, dout.shape(), expected, "input_size " + shape_to_string(x));
  return ir::Abstract::tensor(dout.dtype(), x);
}

AbstractPtr infer_conv2d_backprop_filter(const InferContext& c) {
  const ir::Abstract& dout = floating_rank4(c, 0, "dout", "(N, O, oh, ow)");
  const ir::Abstract& x = floating_rank4(c, 1, "x", "(N, C, H, W)");
  check_same_dtype(c, dout, "dout", x, "x");
  const Shape w = c.attr("filter_size").as_ints();
  const Shape expected = conv_output_shape(c, conv_attrs(c.prim), x.shape(), w);
  check_dout(c, dout.shape(), expected, "x " + shape_to_string(x.shape()) + " and filter_size " +
                                            shape_to_string(w));
  return ir::Abstract::tensor(dout.dtype(), w);
}

// The attributes shared by the three convolution ops (without input_size / filter_size).
ir::Primitive::Attrs shared_conv_attrs(const Primitive& p) {
  ir::Primitive::Attrs attrs = p.attrs();
  attrs.erase("input_size");
  attrs.erase("filter_size");
  return attrs;
}

Var conv2d(Emitter& e, const Var& x, const Var& w, const Primitive& p) {
  return e.emit("Conv2D", {x, w}, shared_conv_attrs(p));
}

Var conv2d_backprop_input(Emitter& e, const Var& dout, const Var& w, const Shape& input_size,
                          const Primitive& p) {
  ir::Primitive::Attrs attrs = shared_conv_attrs(p);
  attrs.emplace("input_size", Value::ints(input_size));
  return e.emit("Conv2DBackpropInput", {dout, w}, std::move(attrs));
}

Var conv2d_backprop_filter(Emitter& e, const Var& dout, const Var& x, const Shape& filter_size,
                           const Primitive& p) {
  ir::Primitive::Attrs attrs = shared_conv_attrs(p);
  attrs.emplace("filter_size", Value::ints(filter_size));
  return e.emit("Conv2DBackpropFilter", {dout, x}, std::move(attrs));
}

// y = conv(x, w): dx = convᵀ_w(dout), dw = dout ⋆ x.
Grads conv2d_bprop(Emitter& e, const BpropArgs& a) {
  const Var& x = a.inputs[0];
  const Var& w = a.inputs[1];
  return {conv2d_backprop_input(e, a.dout, w, e.shape_of(x), a.prim),
          conv2d_backprop_filter(e, a.dout, x, e.shape_of(w), a.prim)};
}

// y = convᵀ_w(dy): <g, convᵀ_w(dy)> = <conv(g, w), dy>, so d(dy) = conv(g, w) and
// dw = filter gradient of (dy, g).
Grads conv2d_backprop_input_bprop(Emitter& e, const BpropArgs& a) {
  const Var& dy = a.inputs[0];
  const Var& w = a.inputs[1];
  return {conv2d(e, a.dout, w, a.prim), conv2d_backprop_filter(e, dy, a.dout, e.shape_of(w),
                                                               a.prim)};
}

// y = dy ⋆ x: <g, dy ⋆ x> = <dy, conv(x, g)>, so d(dy) = conv(x, g) and dx = convᵀ_g(dy).
Grads conv2d_backprop_filter_bprop(Emitter& e, const BpropArgs& a) {
  const Var& dy = a.inputs[0];
  const Var& x = a.inputs[1];
  return {conv2d(e, x, a.dout, a.prim), conv2d_backprop_input(e, dy, a.dout, e.shape_of(x),
                                                              a.prim)};
}

// ---------------------------------------------------------------------------------------------
// Pooling

std::vector<AttrSpec> pool_attr_specs() {
  return {
      ints_attr("kernel_size", 2, 1, Ints{1, 1}),
      ints_attr("strides", 2, 1, Ints{1, 1}),
      AttrSpec{
          .name = "pad_mode",
          .kind = AttrKind::kString,
          .default_value = Value::string("VALID"),
          .check = [](const Value& v) -> std::string {
            const std::string m = to_lower(v.as_string());
            return m == "valid" || m == "same" || m == "pad"
                       ? ""
                       : "expected one of VALID, SAME, PAD, got '" + v.as_string() + "'";
          },
      },
      format_attr(),
      // PAD mode's explicit padding (top, bottom, left, right), each below the kernel's extent
      // on its axis so that every window holds an element of x (ONNX's and PyTorch's padding).
      ints_attr("pad", 4, 0, Ints{0, 0, 0, 0}),
  };
}

// The pooled shape of x (N, C, H, W) under the prim's window attributes.
Shape pool_output_shape(const InferContext& c, const Shape& x) {
  const Ints k = c.attr("kernel_size").as_ints();
  const Ints s = c.attr("strides").as_ints();
  const PadMode mode = pad_mode_of(c.prim);
  const Ints pad = c.attr("pad").as_ints();
  Shape out{x[0], x[1], 0, 0};
  for (int axis = 0; axis < 2; ++axis) {
    const std::int64_t in = x[2 + axis];
    if (mode != PadMode::kPad && (pad[2 * axis] != 0 || pad[2 * axis + 1] != 0)) {
      throw ValueError(c.error("expected pad (0, 0, 0, 0) unless pad_mode is PAD, got pad " +
                               ints_text(pad)));
    }
    if (pad[2 * axis] >= k[axis] || pad[2 * axis + 1] >= k[axis]) {
      throw ValueError(c.error("expected every pad below the kernel's extent on its axis "
                               "(kernel_size " + ints_text(k) + "), got pad " + ints_text(pad) +
                               ": a window would hold padding only"));
    }
    out[2 + axis] =
        window_axis(in, k[axis], s[axis], 1, mode, pad[2 * axis], pad[2 * axis + 1]).out;
    if (mode != PadMode::kSame && known(in) && out[2 + axis] == 0) {
      throw ShapeError(c.error(
          "expected the input to be at least kernel_size " + ints_text(k) + " in H and W" +
          (mode == PadMode::kPad ? " with its pad " + ints_text(pad) : " with pad_mode VALID") +
          ", got x " + shape_to_string(x)));
    }
  }
  return out;
}

AbstractPtr infer_pool(const InferContext& c) {
  const ir::Abstract& x = floating_rank4(c, 0, "x", "(N, C, H, W)");
  return ir::Abstract::tensor(x.dtype(), pool_output_shape(c, x.shape()));
}

// The pooling gradient ops take (x, out, third). MaxPoolGrad and AvgPoolGrad: third is dout
// (pooled shape), the result is shaped like x. MaxPoolGradGrad: third is the gradient of dx
// (x's shape), the result is pooled.
AbstractPtr infer_pool_grad(const InferContext& c, bool third_is_pooled) {
  const ir::Abstract& x = floating_rank4(c, 0, "x", "(N, C, H, W)");
  const ir::Abstract& out = floating_rank4(c, 1, "out", "(N, C, oh, ow)");
  const ir::Abstract& third = third_is_pooled ? floating_rank4(c, 2, "dout", "(N, C, oh, ow)")
                                              : floating_rank4(c, 2, "grad", "(N, C, H, W)");
  check_same_dtype(c, x, "x", out, "out");
  check_same_dtype(c, x, "x", third, third_is_pooled ? "dout" : "grad");
  const Shape pooled = pool_output_shape(c, x.shape());
  if (!shapes_agree(out.shape(), pooled)) {
    throw ShapeError(c.error("expected out " + shape_to_string(pooled) + " for x " +
                             shape_to_string(x.shape()) + ", got " +
                             shape_to_string(out.shape())));
  }
  const Shape& want = third_is_pooled ? pooled : x.shape();
  if (!shapes_agree(third.shape(), want)) {
    throw ShapeError(c.error("expected " + std::string(third_is_pooled ? "dout " : "grad ") +
                             shape_to_string(want) + " for x " + shape_to_string(x.shape()) +
                             ", got " + shape_to_string(third.shape())));
  }
  return ir::Abstract::tensor(x.dtype(), third_is_pooled ? x.shape() : pooled);
}

// ---------------------------------------------------------------------------------------------
// MindIR

// MindSpore's pad_list of a Conv2D: the padding applied, (top, bottom, left, right); zeros where
// it is not known (x's shape unknown).
Value conv_pad_list(const Primitive& p, std::span<const ir::Abstract* const> inputs) {
  const std::optional<PadMode> mode = parse_pad_mode(p.attr("pad_mode").as_string());
  if (mode == PadMode::kPad) return p.attr("pad");
  const Value zeros = Value::ints({0, 0, 0, 0});
  const ir::Abstract* x = inputs.empty() ? nullptr : inputs[0];
  if (mode != PadMode::kSame || !x || !x->is_tensor() || !x->shape_known() ||
      x->shape().size() != 4) {
    return zeros;
  }
  const Ints k = p.attr("kernel_size").as_ints();
  const Ints s = p.attr("stride").as_ints();
  const Ints d = p.attr("dilation").as_ints();
  if (k.size() != 2 || s.size() != 2 || d.size() != 2 || s[0] <= 0 || s[1] <= 0) return zeros;
  Ints out;
  for (int i = 0; i < 2; ++i) {
    const WindowAxis a = window_axis(x->shape()[2 + i], k[i], s[i], d[i], PadMode::kSame);
    out.push_back(a.pad_before);
    out.push_back(a.pad_after);
  }
  return Value::ints(out);
}

// The convolution ops' attribute spellings. Conv2D is written as MindSpore's exporter writes it:
// stride and dilation as (1, 1, h, w), group also as groups; the gradient ops read the same
// spellings and are written with loom's.
std::vector<MindIRAttr> conv_mindir_attrs(bool forward) {
  using enum MindIRAttrEncoding;
  const MindIRAttrEncoding window = forward ? kSpatialQuad : kSpatialPair;
  return {
      {.name = "kernel_size", .encoding = kSpatialPair, .also_written_as = {}},
      {.name = "stride", .encoding = window, .also_written_as = {}},
      {.name = "dilation", .encoding = window, .also_written_as = {}},
      {.name = "pad", .encoding = kPad4, .also_written_as = {}},
      {.name = "pad_mode", .encoding = kPadModeLower, .also_written_as = {}},
      {.name = "format", .encoding = kFormat, .also_written_as = {}},
      {.name = "group", .encoding = kAsIs, .also_written_as = forward ? "groups" : ""},
  };
}

// The pooling ops' attribute spellings; `window` for kernel_size and strides.
std::vector<MindIRAttr> pool_mindir_attrs(MindIRAttrEncoding window) {
  using enum MindIRAttrEncoding;
  return {
      {.name = "kernel_size", .encoding = window, .also_written_as = {}},
      {.name = "strides", .encoding = window, .also_written_as = {}},
      {.name = "pad_mode", .encoding = kPadModeUpper, .also_written_as = {}},
      {.name = "format", .encoding = kFormat, .also_written_as = {}},
  };
}

// MaxPool and AvgPool: MindSpore's primitive functions take the window as init arguments.
MindIRForm pool_mindir(MindIRAttrEncoding window) {
  return {.function_args = {"kernel_size", "strides", "pad_mode", "format"},
          .input_names = {"x"},
          .output_names = {"output"},
          .attrs = pool_mindir_attrs(window)};
}

}  // namespace

double conv_flops(const Primitive& prim, std::span<const Shape> inputs,
                  std::span<const Shape> outputs) {
  if (inputs.size() < 2 || outputs.empty()) return 0;
  const std::string& op = prim.name();
  const bool gradient = op == "Conv2DBackpropInput" || op == "Conv2DBackpropFilter";
  const Shape& y = gradient ? inputs[0] : outputs[0];
  const Shape& w = op == "Conv2DBackpropFilter" ? outputs[0] : inputs[1];
  if (w.size() != 4) return 0;
  return 2.0 * static_cast<double>(shape_numel(y)) * static_cast<double>(w[1] * w[2] * w[3]);
}

void register_conv_pool_ops(Registry& r) {
  std::vector<AttrSpec> input_attrs = conv_attr_specs();
  input_attrs.push_back(ints_attr("input_size", 4, 0, std::nullopt));
  std::vector<AttrSpec> filter_attrs = conv_attr_specs();
  filter_attrs.push_back(ints_attr("filter_size", 4, 0, std::nullopt));

  r.add(OpDef{
      .name = "Conv2D",
      .attrs = conv_attr_specs(),
      .num_inputs = 2,
      .trait = Trait::kOpaque,
      .infer = infer_conv2d,
      .bprop = conv2d_bprop,
      .summary = "2-D cross-correlation of x (N, C, H, W) with w (O, C/group, kh, kw)",
      .mindir = {.input_names = {"x", "w"},
                 .output_names = {"output"},
                 .attrs = conv_mindir_attrs(true),
                 .derived = {{.name = "pad_list", .value = conv_pad_list}}},
      .flops = conv_flops,
  });
  r.add(OpDef{
      .name = "Conv2DBackpropInput",
      .attrs = std::move(input_attrs),
      .num_inputs = 2,
      .trait = Trait::kOpaque,
      .infer = infer_conv2d_backprop_input,
      .bprop = conv2d_backprop_input_bprop,
      .summary = "gradient of Conv2D with respect to x, from (dout, w); x's shape is input_size",
      .mindir = {.attrs = conv_mindir_attrs(false)},
      .flops = conv_flops,
  });
  r.add(OpDef{
      .name = "Conv2DBackpropFilter",
      .attrs = std::move(filter_attrs),
      .num_inputs = 2,
      .trait = Trait::kOpaque,
      .infer = infer_conv2d_backprop_filter,
      .bprop = conv2d_backprop_filter_bprop,
      .summary = "gradient of Conv2D with respect to w, from (dout, x); w's shape is filter_size",
      .mindir = {.attrs = conv_mindir_attrs(false)},
      .flops = conv_flops,
  });
  r.add(OpDef{
      .name = "MaxPool",
      .attrs = pool_attr_specs(),
      .num_inputs = 1,
      .trait = Trait::kOpaque,
      .infer = infer_pool,
      .bprop = [](Emitter& e, const BpropArgs& a) -> Grads {
        return {e.emit("MaxPoolGrad", {a.inputs[0], a.out, a.dout}, a.prim.attrs())};
      },
      .summary = "maximum over kernel_size windows of x (N, C, H, W), VALID, SAME or PAD (explicit "
                 "pad) padding",
      // MaxPool is not a primitive function in MindSpore 2.10: MindSpore's (1, 1, h, w).
      .mindir = pool_mindir(MindIRAttrEncoding::kSpatialQuad),
  });
  r.add(OpDef{
      .name = "AvgPool",
      .attrs = pool_attr_specs(),
      .num_inputs = 1,
      .trait = Trait::kOpaque,
      .infer = infer_pool,
      .bprop = [](Emitter& e, const BpropArgs& a) -> Grads {
        return {e.emit("AvgPoolGrad", {a.inputs[0], a.out, a.dout}, a.prim.attrs())};
      },
      .summary = "mean over kernel_size windows of x (N, C, H, W); SAME and PAD average only the "
                 "elements inside x",
      // Written as (h, w): AvgPool is a primitive function from MindSpore 2.3 on, and 2.10
      // converts the attribute straight into its (h, w) kernel_size input (docs/formats.md).
      .mindir = pool_mindir(MindIRAttrEncoding::kSpatialPair),
  });
  r.add(OpDef{
      .name = "MaxPoolGrad",
      .attrs = pool_attr_specs(),
      .num_inputs = 3,
      .trait = Trait::kOpaque,
      .infer = [](const InferContext& c) { return infer_pool_grad(c, true); },
      // Piecewise constant in x and out; linear in dout with MaxPoolGradGrad as its adjoint.
      .bprop = [](Emitter& e, const BpropArgs& a) -> Grads {
        const Var& x = a.inputs[0];
        const Var& out = a.inputs[1];
        return {e.zeros_like(x), e.zeros_like(out),
                e.emit("MaxPoolGradGrad", {x, out, a.dout}, a.prim.attrs())};
      },
      .summary = "gradient of MaxPool from (x, out, dout): dout goes to each window's first "
                 "maximum",
      .mindir = {.attrs = pool_mindir_attrs(MindIRAttrEncoding::kSpatialPair)},
  });
  r.add(OpDef{
      .name = "MaxPoolGradGrad",
      .attrs = pool_attr_specs(),
      .num_inputs = 3,
      .trait = Trait::kOpaque,
      .infer = [](const InferContext& c) { return infer_pool_grad(c, false); },
      .bprop = [](Emitter& e, const BpropArgs& a) -> Grads {
        const Var& x = a.inputs[0];
        const Var& out = a.inputs[1];
        return {e.zeros_like(x), e.zeros_like(out),
                e.emit("MaxPoolGrad", {x, out, a.dout}, a.prim.attrs())};
      },
      .summary = "gradient of MaxPoolGrad from (x, out, grad): grad at each window's first "
                 "maximum of x",
      .mindir = {.attrs = pool_mindir_attrs(MindIRAttrEncoding::kSpatialPair)},
  });
  r.add(OpDef{
      .name = "AvgPoolGrad",
      .attrs = pool_attr_specs(),
      .num_inputs = 3,
      .trait = Trait::kOpaque,
      .infer = [](const InferContext& c) { return infer_pool_grad(c, true); },
      .bprop = [](Emitter& e, const BpropArgs& a) -> Grads {
        return {e.zeros_like(a.inputs[0]), e.zeros_like(a.inputs[1]),
                e.emit("AvgPool", {a.dout}, a.prim.attrs())};
      },
      .summary = "gradient of AvgPool from (x, out, dout): dout spread evenly over each window",
      .mindir = {.attrs = pool_mindir_attrs(MindIRAttrEncoding::kSpatialPair)},
  });
}

}  // namespace loom::ops
