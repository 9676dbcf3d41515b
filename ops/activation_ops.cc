// The activation family: ReLU, ReLU6, Sigmoid, Tanh, GeLU, Softmax, LogSoftmax and Dropout, and
// ReLU's gradient ReluGrad.
//
// GeLU is MindSpore's primitive, the tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x +
// 0.044715 x^3))); MindSpore's own example (GeLU([1, 2, 3]) = [0.841192, 1.9545976,
// 2.9963627]) is that form, not the erf one (0.8413447...). Softmax takes a one-element axis
// tuple as MindSpore stores it, LogSoftmax an integer axis. Dropout(x, key) draws its mask from
// Philox-4x32-10 (core/random/philox.h): key[0] is the Philox key, key[1] the upper half of the
// counter and i / 4 its lower half for element i, so the mask depends only on the key and the
// flat index; it returns (x * mask / keep_prob, mask) with the mask in x's dtype, as MindSpore's
// CPU and GPU kernels do.
//
// Every bprop is written with differentiable ops (Mul, Sub, Select, ReduceSum, Exp, Tanh,
// ReluGrad), so second derivatives come from the same rules.
#include <algorithm>

#include "core/ir/error.h"
#include "ops/op.h"

namespace loom::ops {

namespace {

// MindSpore's GeLU constants (backends/cpu/activation_kernels.cc spells them out too).
constexpr double kGeluScale = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluCubic = 0.044715;

const ir::Abstract& tensor_input(const InferContext& c, std::size_t i, std::string_view what) {
  const ir::Abstract& a = *c.input(i);
  if (!a.is_tensor()) {
    throw TypeError(c.error("expected " + std::string(what) + " to be a tensor, got " +
                            a.to_string()));
  }
  return a;
}

void check_floating(const InferContext& c, const ir::Abstract& x) {
  if (!is_floating(x.dtype())) {
    throw TypeError(
        c.error("expected a floating tensor, got " + std::string(dtype_name(x.dtype()))));
  }
}

InferFn floating_unary_infer() {
  return [](const InferContext& c) -> AbstractPtr {
    check_floating(c, tensor_input(c, 0, "x"));
    return c.input(0);
  };
}

OpDef activation(std::string name, InferFn infer, BpropFn bprop, std::string summary) {
  OpDef def;
  def.name = std::move(name);
  def.num_inputs = 1;
  def.trait = Trait::kElementwise;
  def.infer = std::move(infer);
  def.bprop = std::move(bprop);
  def.summary = std::move(summary);
  return def;
}

// MindSpore's input_names / output_names of a one-input activation.
MindIRForm unary_mindir() { return {.input_names = {"x"}, .output_names = {"output"}}; }

// ---- Pointwise ----------------------------------------------------------------------------

// ReluGrad(dout, y): dout where y > 0, else 0 (MindSpore's primitive; y is ReLU's output). The
// gradient is 0 at y = 0, as PyTorch's threshold_backward, and a NaN in dout stays out of units
// that are off, as with a select.
OpDef relu_grad() {
  OpDef def;
  def.name = "ReluGrad";
  def.num_inputs = 2;
  def.trait = Trait::kElementwise;
  def.infer = [](const InferContext& c) -> AbstractPtr {
    const ir::Abstract& dout = tensor_input(c, 0, "dout");
    const ir::Abstract& y = tensor_input(c, 1, "y");
    check_floating(c, dout);
    if (dout.dtype() != y.dtype()) {
      throw TypeError(c.error("expected dout and y of the same dtype, got " +
                              std::string(dtype_name(dout.dtype())) + " and " +
                              std::string(dtype_name(y.dtype()))));
    }
    if (!dout.has_rank() || !y.has_rank()) return c.input(dout.has_rank() ? 0 : 1);
    const Shape& ds = dout.shape();
    const Shape& ys = y.shape();
    bool agree = ds.size() == ys.size();
    for (std::size_t d = 0; agree && d < ds.size(); ++d) {
      agree = ds[d] == ys[d] || ds[d] == ir::kUnknownDim || ys[d] == ir::kUnknownDim;
    }
    if (!agree) {
      throw ShapeError(c.error("expected dout and y of the same shape, got " +
                               shape_to_string(ds) + " and " + shape_to_string(ys)));
    }
    Shape shape = ds;
    for (std::size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] == ir::kUnknownDim) shape[d] = ys[d];
    }
    return shape == ds ? c.input(0) : ir::Abstract::tensor(dout.dtype(), shape);
  };
  def.bprop = [](Emitter& e, const BpropArgs& a) -> Grads {
    // Linear in dout with the same mask; piecewise constant in y.
    return {e.emit("ReluGrad", {a.dout, a.inputs[1]}), e.zeros_like(a.inputs[1])};
  };
  def.summary = "dout where y > 0, else 0 (ReLU's gradient; y is ReLU's output)";
  return def;
}

void register_pointwise(Registry& r) {
  r.add(with_mindir(fusable(activation(
      "ReLU",
      [](const InferContext& c) -> AbstractPtr {
        const ir::Abstract& x = tensor_input(c, 0, "x");
        const DType d = x.dtype();
        if (!is_floating(d) && d != DType::kInt32 && d != DType::kInt64) {
          throw TypeError(c.error("expected a floating, Int32 or Int64 tensor, got " +
                                  std::string(dtype_name(d))));
        }
        return c.input(0);
      },
      [](Emitter& e, const BpropArgs& a) -> Grads {
        // MindSpore's rule: one kernel, no mask or zeros buffer (ReluGrad below).
        return {e.emit("ReluGrad", {a.dout, a.out})};
      },
      "max(x, 0)")), unary_mindir()));
  r.add(relu_grad());
  r.add(with_mindir(fusable(activation(
      "ReLU6", floating_unary_infer(),
      [](Emitter& e, const BpropArgs& a) -> Grads {
        // Zero at both kinks (x = 0 and x = 6), as PyTorch's hardtanh_backward.
        const Var zeros = e.zeros_like(a.dout);
        const Var above0 = e.emit("Greater", {a.out, e.scalar_like(a.out, 0.0)});
        const Var below6 = e.emit("Less", {a.out, e.scalar_like(a.out, 6.0)});
        return {e.emit("Select", {above0, e.emit("Select", {below6, a.dout, zeros}), zeros})};
      },
      "min(max(x, 0), 6)")), unary_mindir()));
  r.add(with_mindir(fusable(activation(
      "Sigmoid", floating_unary_infer(),
      [](Emitter& e, const BpropArgs& a) -> Grads {
        const Var one_minus = e.sub(e.scalar_like(a.out, 1.0), a.out);
        return {e.mul(a.dout, e.mul(a.out, one_minus))};
      },
      "1 / (1 + exp(-x))")), unary_mindir()));
  r.add(with_mindir(fusable(activation(
      "Tanh", floating_unary_infer(),
      [](Emitter& e, const BpropArgs& a) -> Grads {
        const Var one_minus_sq = e.sub(e.scalar_like(a.out, 1.0), e.mul(a.out, a.out));
        return {e.mul(a.dout, one_minus_sq)};
      },
      "hyperbolic tangent")), unary_mindir()));
  r.add(activation(
      "GeLU", floating_unary_infer(),
      [](Emitter& e, const BpropArgs& a) -> Grads {
        // With u = k (x + c x^3) and t = tanh(u):
        //   d/dx [x (1 + t) / 2] = (1 + t) / 2 + x (1 - t^2) k (1 + 3 c x^2) / 2.
        const Var& x = a.inputs[0];
        const Var x2 = e.mul(x, x);
        const Var u = e.mul(e.add(x, e.mul(e.scalar_like(x, kGeluCubic), e.mul(x, x2))),
                            e.scalar_like(x, kGeluScale));
        const Var t = e.emit("Tanh", {u});
        const Var half = e.scalar_like(x, 0.5);
        const Var one = e.scalar_like(x, 1.0);
        const Var left = e.mul(half, e.add(one, t));
        const Var du = e.mul(e.scalar_like(x, kGeluScale),
                             e.add(one, e.mul(e.scalar_like(x, 3 * kGeluCubic), x2)));
        const Var right = e.mul(e.mul(half, x), e.mul(e.sub(one, e.mul(t, t)), du));
        return {e.mul(a.dout, e.add(left, right))};
      },
      "0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (MindSpore's tanh form)"));
}

// ---- Softmax and LogSoftmax ---------------------------------------------------------------

// The axis in [0, rank) (a rank-0 input takes axis 0 or -1, as NumPy and MindSpore accept).
std::int64_t normalize_axis(const InferContext& c, std::int64_t axis, const Shape& shape) {
  const auto bound = std::max<std::int64_t>(static_cast<std::int64_t>(shape.size()), 1);
  if (axis < -bound || axis >= bound) {
    throw ValueError(c.error("expected axis in [" + std::to_string(-bound) + ", " +
                             std::to_string(bound) + ") for shape " + shape_to_string(shape) +
                             ", got " + std::to_string(axis)));
  }
  return axis < 0 ? axis + bound : axis;
}

// The axis attribute: Softmax stores a one-element tuple, LogSoftmax an integer.
std::int64_t axis_attr(const Value& v) { return v.is_tuple() ? v.as_ints().at(0) : v.as_int(); }

InferFn softmax_infer() {
  return [](const InferContext& c) -> AbstractPtr {
    const ir::Abstract& x = tensor_input(c, 0, "x");
    check_floating(c, x);
    if (x.has_rank()) normalize_axis(c, axis_attr(c.attr("axis")), x.shape());
    return c.input(0);
  };
}

// The normalized axis of a Softmax / LogSoftmax result of rank >= 1 (checked by inference).
std::int64_t softmax_axis(Emitter& e, const BpropArgs& a) {
  const std::int64_t axis = axis_attr(a.prim.attr("axis"));
  return axis < 0 ? axis + static_cast<std::int64_t>(e.shape_of(a.out).size()) : axis;
}

Grads softmax_bprop(Emitter& e, const BpropArgs& a) {
  // A scalar's softmax is the constant 1.
  if (e.shape_of(a.out).empty()) return {e.zeros_like(a.dout)};
  // dx = y (dout - sum(dout y)) along the axis.
  const Var dot = e.reduce_sum(e.mul(a.dout, a.out), {softmax_axis(e, a)}, /*keep_dims=*/true);
  return {e.mul(a.out, e.sub(a.dout, dot))};
}

Grads log_softmax_bprop(Emitter& e, const BpropArgs& a) {
  // A scalar's log-softmax is the constant 0.
  if (e.shape_of(a.out).empty()) return {e.zeros_like(a.dout)};
  // dx = dout - exp(y) sum(dout) along the axis.
  const Var total = e.reduce_sum(a.dout, {softmax_axis(e, a)}, /*keep_dims=*/true);
  return {e.sub(a.dout, e.mul(e.emit("Exp", {a.out}), total))};
}

void register_softmax(Registry& r) {
  OpDef softmax = activation("Softmax", softmax_infer(), softmax_bprop,
                             "exp(x) / sum(exp(x)) along axis (one axis), computed stably");
  softmax.trait = Trait::kOpaque;
  softmax.attrs = {{.name = "axis",
                    .kind = AttrKind::kInts,
                    .default_value = Value::ints({-1}),
                    .check = [](const Value& v) -> std::string {
                      const std::vector<std::int64_t> axes = v.as_ints();
                      return axes.size() == 1
                                 ? ""
                                 : "expected one axis, got " + shape_to_string(axes);
                    }}};
  // MindSpore's attribute form may give the axis as a scalar.
  softmax.mindir = {.function_args = {"axis"},
                    .input_names = {"x"},
                    .output_names = {"output"},
                    .attrs = {{.name = "axis",
                               .encoding = MindIRAttrEncoding::kAxisList,
                               .also_written_as = {}}}};
  r.add(std::move(softmax));

  OpDef log_softmax = activation("LogSoftmax", softmax_infer(), log_softmax_bprop,
                                 "x - log(sum(exp(x))) along axis, computed stably");
  log_softmax.trait = Trait::kOpaque;
  log_softmax.attrs = {
      {.name = "axis", .kind = AttrKind::kInt, .default_value = Value::i64(-1), .check = {}}};
  log_softmax.mindir = {.function_args = {"axis"}};
  r.add(std::move(log_softmax));
}

// ---- Dropout ------------------------------------------------------------------------------

void register_dropout(Registry& r) {
  OpDef def;
  def.name = "Dropout";
  def.attrs = {{.name = "keep_prob",
                .kind = AttrKind::kFloat,
                .default_value = Value::f32(0.5f),
                .check = [](const Value& v) -> std::string {
                  const double p = v.as_double();
                  if (p > 0 && p <= 1) return "";
                  return "expected a value in (0, 1], got " +
                         (v.as_scalar().dtype() == DType::kFloat32
                              ? ir::format_f32(static_cast<float>(p))
                              : ir::format_f64(p));
                }}};
  def.num_inputs = 2;
  def.num_outputs = 2;
  // Not elementwise for fusion: the key is not broadcast against x.
  def.trait = Trait::kOpaque;
  def.infer = [](const InferContext& c) -> AbstractPtr {
    const ir::Abstract& x = tensor_input(c, 0, "x");
    check_floating(c, x);
    const ir::Abstract& key = tensor_input(c, 1, "key");
    if (key.dtype() != DType::kInt64) {
      throw TypeError(
          c.error("expected an Int64 key, got " + std::string(dtype_name(key.dtype()))));
    }
    if (key.has_rank() && !(key.shape().size() == 1 && (key.shape()[0] == 2 ||
                                                        key.shape()[0] == ir::kUnknownDim))) {
      throw ShapeError(c.error("expected a key of shape (2), got " + shape_to_string(key.shape())));
    }
    return ir::Abstract::tuple({c.input(0), c.input(0)});
  };
  def.bprop = [](Emitter& e, const BpropArgs& a) -> Grads {
    // The mask depends on the key only, so the mask output passes no gradient to x; the
    // product is taken in the kernel's order, (dout * mask) * (1 / keep_prob).
    const Var dy = e.tuple_get(a.dout, 0);
    const Var mask = e.tuple_get(a.out, 1);
    const double scale = 1.0 / a.prim.attr("keep_prob").as_double();
    return {e.mul(e.mul(dy, mask), e.scalar_like(dy, scale)), Var()};
  };
  def.summary =
      "(x * mask / keep_prob, mask): mask[i] = 1 with probability keep_prob, drawn by "
      "Philox-4x32-10 from (key, i)";
  r.add(std::move(def));
}

}  // namespace

void register_activation_ops(Registry& r) {
  register_pointwise(r);
  register_softmax(r);
  register_dropout(r);
}

}  // namespace loom::ops
