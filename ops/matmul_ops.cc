// The matrix-product family: MatMul (rank 2), BatchMatMul (batched, with broadcast batch dims),
// BiasAdd and its gradient BiasAddGrad.
//
// Products differentiate into products: every gradient is a MatMul / BatchMatMul with transpose
// flags (MindSpore's rules), so second-order gradients come for free. BatchMatMul gradients are
// summed back over broadcast batch dims. BiasAdd's bias gradient is BiasAddGrad (a sum over every
// axis but the channel axis); BiasAddGrad's own gradient broadcasts back with BiasAdd.
#include <algorithm>

#include "core/ir/error.h"
#include "ops/op.h"

namespace loom::ops {

namespace {

bool bool_attr(const InferContext& c, std::string_view name) { return c.attr(name).as_bool(); }

// Same floating dtype on both operands (MindSpore promotes nothing).
DType binary_float_dtype(const InferContext& c, const ir::Abstract& a, const ir::Abstract& b) {
  if (a.dtype() != b.dtype()) {
    throw TypeError(c.error("expected inputs of the same dtype, got " +
                            std::string(dtype_name(a.dtype())) + " and " +
                            std::string(dtype_name(b.dtype()))));
  }
  if (!is_floating(a.dtype())) {
    throw TypeError(c.error("expected floating-point inputs, got " +
                            std::string(dtype_name(a.dtype()))));
  }
  return a.dtype();
}

std::string transpose_note(bool ta, bool tb) {
  if (ta && tb) return " with transpose_a and transpose_b";
  if (ta) return " with transpose_a";
  if (tb) return " with transpose_b";
  return "";
}

// The (rows, cols) of op(X) from X's last two dims, and the check that the inner dims agree.
struct Product {
  std::int64_t m, n;
};

Product product_dims(const InferContext& c, const Shape& a, const Shape& b) {
  const bool ta = bool_attr(c, "transpose_a");
  const bool tb = bool_attr(c, "transpose_b");
  const std::size_t ra = a.size(), rb = b.size();
  const std::int64_t m = a[ra - (ta ? 1 : 2)], ka = a[ra - (ta ? 2 : 1)];
  const std::int64_t kb = b[rb - (tb ? 1 : 2)], n = b[rb - (tb ? 2 : 1)];
  if (ka != ir::kUnknownDim && kb != ir::kUnknownDim && ka != kb) {
    throw ShapeError(c.error("expected inner dims to agree, got " + shape_to_string(a) + " and " +
                             shape_to_string(b) + transpose_note(ta, tb)));
  }
  return {m, n};
}

AbstractPtr infer_matmul(const InferContext& c) {
  const ir::Abstract& a = c.tensor(0);
  const ir::Abstract& b = c.tensor(1);
  const DType dtype = binary_float_dtype(c, a, b);
  if (a.shape().size() != 2 || b.shape().size() != 2) {
    throw ShapeError(c.error("expected rank-2 inputs, got " + shape_to_string(a.shape()) +
                             " and " + shape_to_string(b.shape())));
  }
  const Product p = product_dims(c, a.shape(), b.shape());
  return ir::Abstract::tensor(dtype, {p.m, p.n});
}

// Right-aligned NumPy broadcasting of the batch dims (all but the last two); nullopt when two
// known dims differ and neither is 1.
std::optional<Shape> broadcast_batch(const Shape& a, const Shape& b) {
  const std::size_t na = a.size() - 2, nb = b.size() - 2;
  const std::size_t n = std::max(na, nb);
  Shape out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t da = i + na >= n ? a[i + na - n] : 1;
    const std::int64_t db = i + nb >= n ? b[i + nb - n] : 1;
    if (da == 1) {
      out[i] = db;
    } else if (db == 1) {
      out[i] = da;
    } else if (da == ir::kUnknownDim || db == ir::kUnknownDim) {
      out[i] = da == ir::kUnknownDim ? db : da;
    } else if (da == db) {
      out[i] = da;
    } else {
      return std::nullopt;
    }
  }
  return out;
}

AbstractPtr infer_batch_matmul(const InferContext& c) {
  const ir::Abstract& a = c.tensor(0);
  const ir::Abstract& b = c.tensor(1);
  const DType dtype = binary_float_dtype(c, a, b);
  if (a.shape().size() < 3 || b.shape().size() < 2) {
    throw ShapeError(c.error("expected x of rank >= 3 and y of rank >= 2, got " +
                             shape_to_string(a.shape()) + " and " + shape_to_string(b.shape())));
  }
  const Product p = product_dims(c, a.shape(), b.shape());
  std::optional<Shape> out = broadcast_batch(a.shape(), b.shape());
  if (!out) {
    throw ShapeError(c.error("expected broadcastable batch dims, got " +
                             shape_to_string(a.shape()) + " and " + shape_to_string(b.shape())));
  }
  out->push_back(p.m);
  out->push_back(p.n);
  return ir::Abstract::tensor(dtype, *out);
}

ir::Primitive::Attrs transposes(bool ta, bool tb) {
  return {{"transpose_a", Value::boolean(ta)}, {"transpose_b", Value::boolean(tb)}};
}

// Gradients of C = op(A)·op(B) for the four transpose modes, as products themselves:
//   (F, F): dA = dC·Bᵀ      dB = Aᵀ·dC
//   (F, T): dA = dC·B       dB = dCᵀ·A
//   (T, F): dA = B·dCᵀ      dB = A·dC
//   (T, T): dA = Bᵀ·dCᵀ     dB = dCᵀ·Aᵀ
// `b_first` is B as the first operand of a product (BatchMatMul needs rank >= 3 there).
Grads product_grads(Emitter& e, std::string_view op, const BpropArgs& args, const Var& b_first) {
  const bool ta = args.prim.attr("transpose_a").as_bool();
  const bool tb = args.prim.attr("transpose_b").as_bool();
  const Var& a = args.inputs[0];
  const Var& b = args.inputs[1];
  const Var& d = args.dout;
  Var da, db;
  if (!ta && !tb) {
    da = e.emit(op, {d, b}, transposes(false, true));
    db = e.emit(op, {a, d}, transposes(true, false));
  } else if (!ta && tb) {
    da = e.emit(op, {d, b}, transposes(false, false));
    db = e.emit(op, {d, a}, transposes(true, false));
  } else if (ta && !tb) {
    da = e.emit(op, {b_first, d}, transposes(false, true));
    db = e.emit(op, {a, d}, transposes(false, false));
  } else {
    da = e.emit(op, {b_first, d}, transposes(true, true));
    db = e.emit(op, {d, a}, transposes(true, true));
  }
  return {da, db};
}

Grads matmul_bprop(Emitter& e, const BpropArgs& a) {
  return product_grads(e, "MatMul", a, a.inputs[1]);
}

Grads batch_matmul_bprop(Emitter& e, const BpropArgs& a) {
  Shape b_shape = e.shape_of(a.inputs[1]);
  Var b_first = a.inputs[1];
  if (b_shape.size() == 2) {
    b_first = e.reshape(b_first, {1, b_shape[0], b_shape[1]});
  }
  Grads g = product_grads(e, "BatchMatMul", a, b_first);
  g[0] = e.sum_to_shape(g[0], e.shape_of(a.inputs[0]));
  g[1] = e.sum_to_shape(g[1], b_shape);
  return g;
}

AttrSpec transpose_attr(std::string name) {
  return {std::move(name), AttrKind::kBool, Value::boolean(false), {}};
}

AttrSpec format_attr() {
  return {"format", AttrKind::kString, Value::string("NCHW"), [](const Value& v) -> std::string {
            const std::string& s = v.as_string();
            if (s == "NCHW" || s == "NHWC" || s == "NCDHW") return "";
            return "expected one of NCHW, NHWC, NCDHW, got '" + s + "'";
          }};
}

// The channel axis of a rank-`rank` tensor in `format`: 1, or the last axis for NHWC.
std::size_t channel_axis(const InferContext& c, std::size_t rank) {
  return c.attr("format").as_string() == "NHWC" ? rank - 1 : 1;
}

AbstractPtr infer_bias_add(const InferContext& c) {
  const ir::Abstract& x = c.tensor(0);
  const ir::Abstract& b = c.tensor(1);
  const DType dtype = binary_float_dtype(c, x, b);
  const Shape& xs = x.shape();
  const Shape& bs = b.shape();
  if (xs.size() < 2) {
    throw ShapeError(c.error("expected x of rank >= 2, got " + shape_to_string(xs)));
  }
  const std::size_t axis = channel_axis(c, xs.size());
  const std::int64_t channels = xs[axis];
  const bool length_ok = bs.size() == 1 && (bs[0] == channels || bs[0] == ir::kUnknownDim ||
                                            channels == ir::kUnknownDim);
  if (!length_ok) {
    throw ShapeError(c.error("expected a rank-1 bias of length " + std::to_string(channels) +
                             " (axis " + std::to_string(axis) + " of x), got " +
                             shape_to_string(xs) + " and " + shape_to_string(bs)));
  }
  return ir::Abstract::tensor(dtype, xs);
}

AbstractPtr infer_bias_add_grad(const InferContext& c) {
  const ir::Abstract& d = c.tensor(0);
  if (!is_floating(d.dtype())) {
    throw TypeError(c.error("expected a floating-point input, got " +
                            std::string(dtype_name(d.dtype()))));
  }
  const Shape& ds = d.shape();
  if (ds.size() < 2) {
    throw ShapeError(c.error("expected an input of rank >= 2, got " + shape_to_string(ds)));
  }
  return ir::Abstract::tensor(d.dtype(), {ds[channel_axis(c, ds.size())]});
}

// The format attribute in MindIR: MindSpore's primitive-function form gives it as an enum int
// (NCHW 0, NHWC 1).
MindIRAttr format_mindir() {
  return {.name = "format", .encoding = MindIRAttrEncoding::kFormat, .also_written_as = {}};
}

ir::Primitive::Attrs format_of(const BpropArgs& a) {
  return {{"format", a.prim.attr("format")}};
}

}  // namespace

double product_flops(const Primitive& prim, std::span<const Shape> inputs,
                     std::span<const Shape> outputs) {
  if (inputs.empty() || outputs.empty() || inputs[0].size() < 2) return 0;
  const Shape& a = inputs[0];
  const bool ta = prim.has_attr("transpose_a") && prim.attr("transpose_a").as_bool();
  const double k = static_cast<double>(ta ? a[a.size() - 2] : a[a.size() - 1]);
  return 2.0 * static_cast<double>(shape_numel(outputs[0])) * k;
}

void register_matmul_ops(Registry& r) {
  r.add(OpDef{
      .name = "MatMul",
      .attrs = {transpose_attr("transpose_a"), transpose_attr("transpose_b")},
      .num_inputs = 2,
      .trait = Trait::kOpaque,
      .infer = infer_matmul,
      .bprop = matmul_bprop,
      .summary = "op(x) · op(y) of rank-2 tensors, op transposing where transpose_a/_b is set",
      .mindir = {.function_args = {"transpose_a", "transpose_b"},
                 .input_names = {"x1", "x2"},
                 .output_names = {"output"},
                 .attrs = {{.name = "transpose_a",
                            .encoding = MindIRAttrEncoding::kAsIs,
                            .also_written_as = "transpose_x1"},
                           {.name = "transpose_b",
                            .encoding = MindIRAttrEncoding::kAsIs,
                            .also_written_as = "transpose_x2"}}},
      .flops = product_flops,
  });
  r.add(OpDef{
      .name = "BatchMatMul",
      .attrs = {transpose_attr("transpose_a"), transpose_attr("transpose_b")},
      .num_inputs = 2,
      .trait = Trait::kOpaque,
      .infer = infer_batch_matmul,
      .bprop = batch_matmul_bprop,
      .summary = "MatMul over the last two dims of x (rank >= 3) and y (rank >= 2); the batch "
                 "dims broadcast",
      .mindir = {.function_args = {"transpose_a", "transpose_b"}},
      .flops = product_flops,
  });
  r.add(OpDef{
      .name = "BiasAdd",
      .attrs = {format_attr()},
      .num_inputs = 2,
      .trait = Trait::kOpaque,
      .infer = infer_bias_add,
      .bprop = [](Emitter& e, const BpropArgs& a) -> Grads {
        return {a.dout, e.emit("BiasAddGrad", {a.dout}, format_of(a))};
      },
      .summary = "x + b with the rank-1 b along the channel axis (1; last for NHWC)",
      .mindir = {.function_args = {"format"},
                 .input_names = {"x", "b"},
                 .output_names = {"output"},
                 .attrs = {format_mindir()}},
  });
  r.add(OpDef{
      .name = "BiasAddGrad",
      .attrs = {format_attr()},
      .num_inputs = 1,
      .trait = Trait::kReduction,
      .infer = infer_bias_add_grad,
      .bprop = [](Emitter& e, const BpropArgs& a) -> Grads {
        // The adjoint of summing to the channel axis: broadcast back along it.
        return {e.emit("BiasAdd", {e.zeros_like(a.inputs[0]), a.dout}, format_of(a))};
      },
      .summary = "the sum of dout over every axis but the channel axis (BiasAdd's bias gradient)",
      .mindir = {.attrs = {format_mindir()}},
  });
}

}  // namespace loom::ops
