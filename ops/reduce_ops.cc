// Reductions: ReduceSum, ReduceMean, ReduceMax, ReduceMin over a set of axes (empty: all of
// them; negative axes count from the end; keep_dims leaves the reduced axes as size 1) and
// ArgMax over one axis. Their bprops send dout back over the reduced axes: a Reshape to the
// keep_dims shape and a BroadcastTo for the sums and means, and for max/min a mask of the
// positions equal to the result that shares dout evenly among ties (MindSpore's rule).
#include <algorithm>

#include "core/ir/error.h"
#include "ops/op.h"

namespace loom::ops {

namespace {

// The reduced axes of a rank-`rank` input, in [0, rank), ascending; empty `axis` means all.
std::vector<std::int64_t> normalize_axes(const std::vector<std::int64_t>& axis, std::int64_t rank,
                                         const std::function<std::string(std::string_view)>& err,
                                         const std::string& shape_text) {
  std::vector<std::int64_t> out;
  if (axis.empty()) {
    for (std::int64_t i = 0; i < rank; ++i) out.push_back(i);
    return out;
  }
  // A rank-0 input accepts axis 0 / -1 as MindSpore and NumPy do: it names the whole scalar.
  const std::int64_t bound = std::max<std::int64_t>(rank, 1);
  for (std::int64_t a : axis) {
    if (a < -bound || a >= bound) {
      throw ValueError(err("expected axis in [" + std::to_string(-bound) + ", " +
                           std::to_string(bound) + ") for shape " + shape_text + ", got " +
                           std::to_string(a)));
    }
    out.push_back(a < 0 ? a + bound : a);
  }
  std::sort(out.begin(), out.end());
  if (std::adjacent_find(out.begin(), out.end()) != out.end()) {
    throw ValueError(
        err("expected distinct axes, got " + shape_to_string(axis) + " for shape " + shape_text));
  }
  if (rank == 0) out.clear();
  return out;
}

std::vector<std::int64_t> reduced_axes(const Primitive& prim, const Shape& shape,
                                       const std::string& op) {
  auto err = [&](std::string_view m) { return op + ": " + std::string(m); };
  return normalize_axes(prim.attr("axis").as_ints(), static_cast<std::int64_t>(shape.size()), err,
                        shape_to_string(shape));
}

enum class DTypes { kFloating, kNumeric };

InferFn reduce_infer(DTypes allowed, bool needs_elements) {
  return [=](const InferContext& c) -> AbstractPtr {
    const ir::Abstract& x = *c.input(0);
    if (!x.is_tensor()) throw TypeError(c.error("expected a tensor, got " + x.to_string()));
    const DType dt = x.dtype();
    if (allowed == DTypes::kFloating
            ? !is_floating(dt)
            : !(is_floating(dt) || dt == DType::kInt32 || dt == DType::kInt64)) {
      throw TypeError(
          c.error(std::string("expected ") +
                  (allowed == DTypes::kFloating ? "a floating" : "a floating or Int32/Int64") +
                  " dtype, got " + std::string(dtype_name(dt))));
    }
    const std::vector<std::int64_t> axis = c.attr("axis").as_ints();
    const bool keep = c.attr("keep_dims").as_bool();
    if (!x.has_rank()) {
      if (axis.empty() && !keep) return ir::Abstract::tensor(dt, {});
      return ir::Abstract::tensor_unranked(dt);
    }
    const Shape& shape = x.shape();
    auto err = [&](std::string_view m) { return c.error(m); };
    const std::vector<std::int64_t> axes =
        normalize_axes(axis, static_cast<std::int64_t>(shape.size()), err, shape_to_string(shape));
    Shape out;
    for (std::size_t i = 0; i < shape.size(); ++i) {
      const bool reduced =
          std::binary_search(axes.begin(), axes.end(), static_cast<std::int64_t>(i));
      if (reduced && needs_elements && shape[i] == 0) {
        throw ValueError(c.error("expected a non-empty reduced extent, got shape " +
                                 shape_to_string(shape) + " with axis " + shape_to_string(axis)));
      }
      if (!reduced)
        out.push_back(shape[i]);
      else if (keep)
        out.push_back(1);
    }
    return ir::Abstract::tensor(dt, out);
  };
}

std::vector<AttrSpec> reduce_attrs() {
  return {{.name = "axis", .kind = AttrKind::kInts, .default_value = Value::ints({}), .check = {}},
          {.name = "keep_dims",
           .kind = AttrKind::kBool,
           .default_value = Value::boolean(false),
           .check = {}}};
}

// x's shape with the reduced axes set to 1.
Shape kept_shape(const Shape& x_shape, const std::vector<std::int64_t>& axes) {
  Shape kept = x_shape;
  for (std::int64_t a : axes) kept[static_cast<std::size_t>(a)] = 1;
  return kept;
}

// Spreads a reduced value (either keep_dims layout) back over x's shape.
Var broadcast_back(Emitter& e, const Var& reduced, const Shape& x_shape,
                   const std::vector<std::int64_t>& axes) {
  const Shape kept = kept_shape(x_shape, axes);
  Var r = e.reshape(reduced, kept);
  if (kept == x_shape) return r;
  return e.emit("BroadcastTo", {r}, {{"shape", Value::ints(x_shape)}});
}

Grads sum_bprop(Emitter& e, const BpropArgs& a) {
  const Shape xs = e.shape_of(a.inputs[0]);
  return {broadcast_back(e, a.dout, xs, reduced_axes(a.prim, xs, a.prim.name()))};
}

Grads mean_bprop(Emitter& e, const BpropArgs& a) {
  const Shape xs = e.shape_of(a.inputs[0]);
  const std::vector<std::int64_t> axes = reduced_axes(a.prim, xs, a.prim.name());
  double count = 1;
  for (std::int64_t ax : axes) count *= static_cast<double>(xs[static_cast<std::size_t>(ax)]);
  Var scaled = e.mul(a.dout, e.scalar_like(a.dout, 1.0 / count));
  return {broadcast_back(e, scaled, xs, axes)};
}

// dx = dout * mask / (number of positions attaining the extremum), so ties share dout evenly.
Grads extremum_bprop(Emitter& e, const BpropArgs& a) {
  const Var& x = a.inputs[0];
  const Shape xs = e.shape_of(x);
  const std::vector<std::int64_t> axes = reduced_axes(a.prim, xs, a.prim.name());
  if (axes.empty()) return {a.dout};
  const Shape kept = kept_shape(xs, axes);
  Var mask = e.cast(e.emit("Equal", {x, e.reshape(a.out, kept)}), e.dtype_of(x));
  Var count = e.reduce_sum(mask, axes, /*keep_dims=*/true);
  return {e.mul(mask, e.div(e.reshape(a.dout, kept), count))};
}

// MindSpore's attribute form passes the axis as a Constant input; it comes as a scalar, a tuple
// or an integer tensor.
MindIRForm reduce_mindir(bool with_io_names) {
  MindIRForm form{.const_inputs = {"axis"},
                  .function_args = {"axis", "keep_dims"},
                  .attrs = {{.name = "axis",
                             .encoding = MindIRAttrEncoding::kAxisList,
                             .also_written_as = {}}}};
  if (with_io_names) {
    form.input_names = {"input_x", "axis"};
    form.output_names = {"y"};
  }
  return form;
}

OpDef reduce_op(std::string name, DTypes allowed, bool needs_elements, BpropFn bprop,
                std::string summary, bool mindir_io_names) {
  OpDef def;
  def.name = std::move(name);
  def.attrs = reduce_attrs();
  def.mindir = reduce_mindir(mindir_io_names);
  def.trait = Trait::kReduction;
  def.infer = reduce_infer(allowed, needs_elements);
  def.bprop = std::move(bprop);
  def.summary = std::move(summary);
  return def;
}

}  // namespace

void register_reduce_ops(Registry& r) {
  r.add(reduce_op("ReduceSum", DTypes::kNumeric, false, sum_bprop,
                  "sum over `axis` (empty: all axes); deterministic across thread counts",
                  true));
  r.add(reduce_op("ReduceMean", DTypes::kFloating, false, mean_bprop,
                  "mean over `axis` (empty: all axes)", true));
  r.add(
      reduce_op("ReduceMax", DTypes::kNumeric, true, extremum_bprop,
                "maximum over `axis` (empty: all axes); NaN propagates; ties share the gradient",
                true));
  r.add(
      reduce_op("ReduceMin", DTypes::kNumeric, true, extremum_bprop,
                "minimum over `axis` (empty: all axes); NaN propagates; ties share the gradient",
                // Written without input_names / output_names so far (MindSpore's _Reduce
                // declares them as for the others).
                false));
  OpDef argmax;
  argmax.name = "ArgMax";
  argmax.attrs = {
      {.name = "axis", .kind = AttrKind::kInt, .default_value = Value::i64(-1), .check = {}},
      {.name = "output_type",
       .kind = AttrKind::kDType,
       .default_value = Value::dtype(DType::kInt32),
       .check = [](const Value& v) -> std::string {
         DType d = v.as_dtype();
         if (d == DType::kInt32 || d == DType::kInt64) return "";
         return "expected Int32 or Int64, got " + std::string(dtype_name(d));
       }}};
  argmax.trait = Trait::kReduction;
  argmax.infer = [](const InferContext& c) -> AbstractPtr {
    const ir::Abstract& x = c.tensor(0);
    const DType dt = x.dtype();
    if (!(is_floating(dt) || dt == DType::kInt32 || dt == DType::kInt64)) {
      throw TypeError(
          c.error("expected a floating or Int32/Int64 dtype, got " + std::string(dtype_name(dt))));
    }
    const Shape& shape = x.shape();
    const auto rank = static_cast<std::int64_t>(shape.size());
    const DType out_type = c.attr("output_type").as_dtype();
    if (rank == 0) {
      throw ValueError(c.error("expected an input of rank >= 1, got shape ()"));
    }
    std::int64_t axis = c.attr("axis").as_int();
    if (axis < -rank || axis >= rank) {
      throw ValueError(c.error("expected axis in [" + std::to_string(-rank) + ", " +
                               std::to_string(rank) + ") for shape " + shape_to_string(shape) +
                               ", got " + std::to_string(axis)));
    }
    if (axis < 0) axis += rank;
    if (shape[static_cast<std::size_t>(axis)] == 0) {
      throw ValueError(c.error("expected a non-empty axis " + std::to_string(axis) +
                               ", got shape " + shape_to_string(shape)));
    }
    Shape out = shape;
    out.erase(out.begin() + axis);
    return ir::Abstract::tensor(out_type, out);
  };
  argmax.not_differentiable_because = "it returns indices, which are piecewise constant";
  argmax.summary = "index of the first maximum along `axis` (NaN counts as the maximum)";
  argmax.mindir = {.function_args = {"axis", "output_type"}};
  r.add(std::move(argmax));

  // MindSpore's FloatStatus: the overflow check of loss scaling (nn/train.h) sums one per
  // gradient.
  OpDef status;
  status.name = "FloatStatus";
  status.trait = Trait::kReduction;
  status.infer = [](const InferContext& c) -> AbstractPtr {
    const DType dt = c.tensor(0).dtype();
    if (!is_floating(dt)) {
      throw TypeError(c.error("expected a floating dtype, got " + std::string(dtype_name(dt))));
    }
    return ir::Abstract::tensor(DType::kFloat32, {1});
  };
  status.not_differentiable_because = "it is a 0/1 flag, piecewise constant";
  status.summary = "[1.] when x has an Inf or NaN element, else [0.] (Float32, shape (1,))";
  r.add(std::move(status));
}

}  // namespace loom::ops
