// The math family: elementwise arithmetic (Add, Sub, Mul, RealDiv, Neg, Square, Sqrt, Rsqrt,
// Exp, Log, Pow, Maximum, Minimum, Abs, Sign), comparisons (Equal, Less, Greater), Select,
// ZerosLike, OnesLike, Fill and Cast.
//
// Binary ops broadcast as NumPy and MindSpore do (shapes right-aligned, size-1 dims stretched;
// an unknown dim -1 stays unknown unless the other side fixes it) and demand one dtype for both
// inputs: there is no implicit promotion. Bprop rules are written with differentiable ops only
// (Select and comparisons for Maximum/Minimum, Pow and Log for Pow), so gradients can be
// differentiated again; a broadcast operand's gradient is summed back with sum_to_shape.
#include <algorithm>

#include "core/ir/error.h"
#include "ops/op.h"

namespace loom::ops {

namespace {

// The dtypes an op accepts; its inference rejects others with a TypeError.
enum class Accepts { kFloating, kNumeric, kNumericOrBool };

bool accepts(Accepts set, DType d) {
  switch (set) {
    case Accepts::kFloating: return is_floating(d);
    case Accepts::kNumeric: return is_floating(d) || is_integral(d);
    case Accepts::kNumericOrBool: return true;
  }
  return false;
}

std::string_view accepts_text(Accepts set) {
  switch (set) {
    case Accepts::kFloating: return "a floating tensor";
    case Accepts::kNumeric: return "a numeric tensor";
    case Accepts::kNumericOrBool: return "a tensor";
  }
  return "?";
}

// Input i as a tensor abstract; its rank may be unknown.
const ir::Abstract& tensor_input(const InferContext& c, std::size_t i) {
  const ir::Abstract& a = *c.input(i);
  if (!a.is_tensor()) {
    throw TypeError(c.error("expected input " + std::to_string(i) + " to be a tensor, got " +
                            a.to_string()));
  }
  return a;
}

void check_dtype(const InferContext& c, Accepts set, DType d) {
  if (!accepts(set, d)) {
    throw TypeError(c.error("expected " + std::string(accepts_text(set)) + ", got " +
                            std::string(dtype_name(d))));
  }
}

std::string shapes_text(const std::vector<const ir::Abstract*>& inputs) {
  std::string s;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (i > 0) s += i + 1 == inputs.size() ? " and " : ", ";
    s += inputs[i]->has_rank() ? shape_to_string(inputs[i]->shape()) : "(unknown rank)";
  }
  return s;
}

// The broadcast of the inputs' shapes, or nullopt when some rank is unknown.
std::optional<Shape> broadcast_shapes(const InferContext& c,
                                      const std::vector<const ir::Abstract*>& inputs) {
  std::size_t rank = 0;
  for (const ir::Abstract* a : inputs) {
    if (!a->has_rank()) return std::nullopt;
    rank = std::max(rank, a->shape().size());
  }
  Shape out(rank, 1);
  for (const ir::Abstract* a : inputs) {
    const Shape& s = a->shape();
    const std::size_t lead = rank - s.size();
    for (std::size_t i = 0; i < s.size(); ++i) {
      std::int64_t& o = out[lead + i];
      const std::int64_t d = s[i];
      if (d == 1 || d == o) continue;
      if (o == 1) {
        o = d;
      } else if (d == ir::kUnknownDim) {
        // o is known and > 1: the unknown dim must equal it (or be 1); o stands.
      } else if (o == ir::kUnknownDim) {
        o = d;
      } else {
        throw ShapeError(c.error("expected broadcastable shapes, got " + shapes_text(inputs)));
      }
    }
  }
  return out;
}

AbstractPtr tensor_result(DType dtype, const std::optional<Shape>& shape) {
  return shape ? ir::Abstract::tensor(dtype, *shape) : ir::Abstract::tensor_unranked(dtype);
}

// Inference of an elementwise op over broadcast inputs of one dtype from `set`; the result
// has that dtype, or `result` when given (Bool for comparisons).
InferFn broadcast_infer(Accepts set, std::optional<DType> result = std::nullopt) {
  return [set, result](const InferContext& c) -> AbstractPtr {
    std::vector<const ir::Abstract*> ins;
    for (std::size_t i = 0; i < c.inputs.size(); ++i) ins.push_back(&tensor_input(c, i));
    const DType d = ins[0]->dtype();
    for (std::size_t i = 1; i < ins.size(); ++i) {
      if (ins[i]->dtype() != d) {
        throw TypeError(c.error("expected inputs of one dtype, got " +
                                std::string(dtype_name(d)) + " and " +
                                std::string(dtype_name(ins[i]->dtype()))));
      }
    }
    check_dtype(c, set, d);
    return tensor_result(result.value_or(d), broadcast_shapes(c, ins));
  };
}

InferFn unary_infer(Accepts set) {
  return [set](const InferContext& c) -> AbstractPtr {
    const ir::Abstract& x = tensor_input(c, 0);
    check_dtype(c, set, x.dtype());
    return c.input(0);
  };
}

// Sums each operand's gradient back to its shape (undoing the broadcast of the forward).
Grads to_input_shapes(Emitter& e, const BpropArgs& a, const Grads& grads) {
  Grads out;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    out.push_back(grads[i].defined() ? e.sum_to_shape(grads[i], e.shape_of(a.inputs[i]))
                                     : grads[i]);
  }
  return out;
}

OpDef elementwise(std::string name, int num_inputs, InferFn infer, std::string summary) {
  OpDef def;
  def.name = std::move(name);
  def.num_inputs = num_inputs;
  def.trait = Trait::kElementwise;
  def.infer = std::move(infer);
  def.summary = std::move(summary);
  return def;
}

OpDef binary(std::string name, Accepts set, BpropFn bprop, std::string summary) {
  OpDef def = elementwise(std::move(name), 2, broadcast_infer(set), std::move(summary));
  def.bprop = std::move(bprop);
  return def;
}

OpDef unary(std::string name, Accepts set, BpropFn bprop, std::string summary) {
  OpDef def = elementwise(std::move(name), 1, unary_infer(set), std::move(summary));
  def.bprop = std::move(bprop);
  return def;
}

OpDef comparison(std::string name, Accepts set, std::string summary) {
  OpDef def =
      elementwise(std::move(name), 2, broadcast_infer(set, DType::kBool), std::move(summary));
  def.not_differentiable_because = "its Bool result is piecewise constant in the inputs";
  return def;
}

// MindSpore's input_names / output_names of a two-input arithmetic op.
MindIRForm binary_mindir() { return {.input_names = {"x", "y"}, .output_names = {"output"}}; }

// Maximum and Minimum: dout goes to x where x wins, to y where y wins, half to each on a tie
// (as MindSpore's MaximumGrad/MinimumGrad and PyTorch do).
Grads extremum_grads(Emitter& e, const BpropArgs& a, const Var& x_wins) {
  const Var tie = e.emit("Equal", {a.inputs[0], a.inputs[1]});
  const Var half = e.mul(a.dout, e.scalar_like(a.dout, 0.5));
  const Var on_tie = e.emit("Select", {tie, half, e.zeros_like(a.dout)});
  const Var dx = e.emit("Select", {x_wins, a.dout, on_tie});
  return to_input_shapes(e, a, {dx, e.sub(a.dout, dx)});
}

void register_arithmetic(Registry& r) {
  r.add(with_mindir(fusable(binary(
      "Add", Accepts::kNumeric,
      [](Emitter& e, const BpropArgs& a) -> Grads {
        return to_input_shapes(e, a, {a.dout, a.dout});
      },
      "x + y, broadcasting")), binary_mindir()));
  r.add(with_mindir(fusable(binary(
      "Sub", Accepts::kNumeric,
      [](Emitter& e, const BpropArgs& a) -> Grads {
        return to_input_shapes(e, a, {a.dout, e.neg(a.dout)});
      },
      "x - y, broadcasting")), binary_mindir()));
  r.add(with_mindir(fusable(binary(
      "Mul", Accepts::kNumeric,
      [](Emitter& e, const BpropArgs& a) -> Grads {
        return to_input_shapes(e, a, {e.mul(a.dout, a.inputs[1]), e.mul(a.dout, a.inputs[0])});
      },
      "x * y, broadcasting")), binary_mindir()));
  r.add(with_mindir(fusable(binary(
      "RealDiv", Accepts::kFloating,
      [](Emitter& e, const BpropArgs& a) -> Grads {
        // d(x/y)/dy = -(x/y)/y: reuse out rather than squaring y.
        const Var dx = e.div(a.dout, a.inputs[1]);
        return to_input_shapes(e, a, {dx, e.neg(e.mul(dx, a.out))});
      },
      "x / y for floating tensors, broadcasting")), binary_mindir()));
  r.add(binary(
      "Pow", Accepts::kFloating,
      [](Emitter& e, const BpropArgs& a) -> Grads {
        const Var& x = a.inputs[0];
        const Var& y = a.inputs[1];
        const Var x_to_y_minus_1 = e.emit("Pow", {x, e.sub(y, e.scalar_like(y, 1.0))});
        const Var dx = e.mul(e.mul(a.dout, y), x_to_y_minus_1);
        // log(x) is undefined for x <= 0; as MindSpore and PyTorch, the exponent's gradient is
        // taken as 0 there (log(1) = 0).
        const Var positive = e.emit("Greater", {x, e.scalar_like(x, 0.0)});
        const Var safe_x = e.emit("Select", {positive, x, e.emit("OnesLike", {x})});
        const Var dy = e.mul(e.mul(a.dout, a.out), e.emit("Log", {safe_x}));
        return to_input_shapes(e, a, {dx, dy});
      },
      "x ** y for floating tensors, broadcasting"));
  r.add(fusable(binary(
      "Maximum", Accepts::kNumeric,
      [](Emitter& e, const BpropArgs& a) -> Grads {
        return extremum_grads(e, a, e.emit("Greater", {a.inputs[0], a.inputs[1]}));
      },
      "elementwise max(x, y), broadcasting")));
  r.add(fusable(binary(
      "Minimum", Accepts::kNumeric,
      [](Emitter& e, const BpropArgs& a) -> Grads {
        return extremum_grads(e, a, e.emit("Less", {a.inputs[0], a.inputs[1]}));
      },
      "elementwise min(x, y), broadcasting")));
}

void register_unary(Registry& r) {
  r.add(fusable(unary(
      "Neg", Accepts::kNumeric,
      [](Emitter& e, const BpropArgs& a) -> Grads { return {e.neg(a.dout)}; }, "-x")));
  r.add(fusable(unary(
      "Square", Accepts::kNumeric,
      [](Emitter& e, const BpropArgs& a) -> Grads {
        const Var& x = a.inputs[0];
        return {e.mul(a.dout, e.mul(x, e.scalar_like(x, 2.0)))};
      },
      "x * x")));
  r.add(fusable(unary(
      "Sqrt", Accepts::kFloating,
      [](Emitter& e, const BpropArgs& a) -> Grads {
        return {e.div(e.mul(a.dout, e.scalar_like(a.out, 0.5)), a.out)};
      },
      "square root")));
  r.add(unary(
      "Rsqrt", Accepts::kFloating,
      [](Emitter& e, const BpropArgs& a) -> Grads {
        // d(x^-1/2)/dx = -x^-3/2 / 2 = -out^3 / 2.
        const Var cube = e.mul(e.mul(a.out, a.out), a.out);
        return {e.mul(a.dout, e.mul(cube, e.scalar_like(a.out, -0.5)))};
      },
      "1 / sqrt(x)"));
  r.add(fusable(unary(
      "Exp", Accepts::kFloating,
      [](Emitter& e, const BpropArgs& a) -> Grads { return {e.mul(a.dout, a.out)}; }, "e ** x")));
  r.add(fusable(unary(
      "Log", Accepts::kFloating,
      [](Emitter& e, const BpropArgs& a) -> Grads { return {e.div(a.dout, a.inputs[0])}; },
      "natural logarithm")));
  r.add(fusable(unary(
      "Abs", Accepts::kNumeric,
      [](Emitter& e, const BpropArgs& a) -> Grads {
        return {e.mul(a.dout, e.emit("Sign", {a.inputs[0]}))};
      },
      "|x|")));
  r.add(unary(
      "Sign", Accepts::kNumeric,
      [](Emitter& e, const BpropArgs& a) -> Grads { return {e.zeros_like(a.inputs[0])}; },
      "-1, 0 or 1 by the sign of x (0 for 0, NaN for NaN)"));
}

void register_selection(Registry& r) {
  r.add(comparison("Equal", Accepts::kNumericOrBool, "x == y as Bool, broadcasting"));
  r.add(comparison("Less", Accepts::kNumeric, "x < y as Bool, broadcasting"));
  r.add(comparison("Greater", Accepts::kNumeric, "x > y as Bool, broadcasting"));
  OpDef select = elementwise(
      "Select", 3,
      [](const InferContext& c) -> AbstractPtr {
        const ir::Abstract& cond = tensor_input(c, 0);
        const ir::Abstract& x = tensor_input(c, 1);
        const ir::Abstract& y = tensor_input(c, 2);
        if (cond.dtype() != DType::kBool) {
          throw TypeError(c.error("expected a Bool condition, got " +
                                  std::string(dtype_name(cond.dtype()))));
        }
        if (x.dtype() != y.dtype()) {
          throw TypeError(c.error("expected x and y of one dtype, got " +
                                  std::string(dtype_name(x.dtype())) + " and " +
                                  std::string(dtype_name(y.dtype()))));
        }
        return tensor_result(x.dtype(), broadcast_shapes(c, {&cond, &x, &y}));
      },
      "cond ? x : y elementwise (cond Bool), broadcasting all three");
  select.kernel_dtype_from = 1;  // the condition is always Bool; kernels are keyed by x
  select.bprop = [](Emitter& e, const BpropArgs& a) -> Grads {
    const Var zeros = e.zeros_like(a.dout);
    return to_input_shapes(e, a, {Var(), e.emit("Select", {a.inputs[0], a.dout, zeros}),
                                  e.emit("Select", {a.inputs[0], zeros, a.dout})});
  };
  r.add(std::move(select));
}

void register_creation(Registry& r) {
  // Their results do not depend on x's values.
  const BpropFn zero_grad = [](Emitter& e, const BpropArgs& a) -> Grads {
    return {e.zeros_like(a.inputs[0])};
  };
  OpDef zeros = elementwise("ZerosLike", 1, unary_infer(Accepts::kNumericOrBool),
                            "zeros of x's shape and dtype");
  zeros.bprop = zero_grad;
  r.add(std::move(zeros));
  OpDef ones = elementwise("OnesLike", 1, unary_infer(Accepts::kNumericOrBool),
                           "ones of x's shape and dtype");
  ones.bprop = zero_grad;
  r.add(std::move(ones));

  OpDef fill;
  fill.name = "Fill";
  fill.attrs = {{"dtype", AttrKind::kDType, std::nullopt, {}},
                {"shape", AttrKind::kInts, std::nullopt, {}},
                {"value", AttrKind::kFloat, std::nullopt, {}}};
  fill.num_inputs = 0;
  fill.trait = Trait::kOpaque;
  fill.infer = [](const InferContext& c) -> AbstractPtr {
    const Shape shape = c.attr("shape").as_ints();
    for (std::int64_t d : shape) {
      if (d < 0) {
        throw ValueError(
            c.error("expected non-negative dims in shape, got " + shape_to_string(shape)));
      }
    }
    return ir::Abstract::tensor(c.attr("dtype").as_dtype(), shape);
  };
  fill.not_differentiable_because = "it has no tensor inputs";
  fill.summary = "a tensor of dtype and shape with every element equal to value";
  fill.mindir = {.attrs = {{.name = "shape",
                            .encoding = MindIRAttrEncoding::kIntsFromTensor,
                            .also_written_as = {}}}};
  r.add(std::move(fill));

  OpDef cast = elementwise(
      "Cast", 1,
      [](const InferContext& c) -> AbstractPtr {
        const ir::Abstract& x = tensor_input(c, 0);
        const DType dst = c.attr("dst_type").as_dtype();
        return x.has_rank() ? ir::Abstract::tensor(dst, x.shape())
                            : ir::Abstract::tensor_unranked(dst);
      },
      "converts to dst_type (floats to integers truncate toward zero; to Bool is x != 0)");
  cast.attrs = {{"dst_type", AttrKind::kDType, std::nullopt, {}}};
  cast.mindir = {.function_args = {"dst_type"}};
  cast.bprop = [](Emitter& e, const BpropArgs& a) -> Grads {
    const DType src = e.dtype_of(a.inputs[0]);
    const DType dst = a.prim.attr("dst_type").as_dtype();
    if (!is_floating(src)) return {Var()};
    // Rounding to an integer or Bool is flat almost everywhere.
    if (!is_floating(dst)) return {e.zeros_like(a.inputs[0])};
    return {e.cast(a.dout, src)};
  };
  r.add(std::move(cast));
}

}  // namespace

void register_math_ops(Registry& r) {
  register_arithmetic(r);
  register_unary(r);
  register_selection(r);
  register_creation(r);
}

}  // namespace loom::ops
