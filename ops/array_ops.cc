// The array family: ops that move data without arithmetic on it — Reshape, Transpose, Flatten,
// ExpandDims, Squeeze, Concat, Split, Slice, StridedSlice, Tile, BroadcastTo, Gather, OneHot —
// and the two gradient ops they need, StridedSliceGrad (scatter into zeros) and GatherGrad
// (deterministic scatter-add). Shape rules follow MindSpore; StridedSlice follows TensorFlow's
// sparse-to-dense mask resolution, which MindSpore shares. Unknown dims (-1) propagate where the
// rule allows; the kernels only ever see known shapes.
#include "ops/array_ops.h"

#include <algorithm>

#include "core/ir/error.h"
#include "ops/op.h"

namespace loom::ops {

// Declared in ops/array_ops.h (shared with backends/cpu/array_kernels.cc).
std::string strided_slice_plan(const Shape& x, const Primitive& prim, Shape& begin,
                               Shape& stride, Shape& size, Shape& out_shape) {
  const Shape sb = prim.attr("begin").as_ints();
  const Shape se = prim.attr("end").as_ints();
  const Shape ss = prim.attr("strides").as_ints();
  const std::int64_t begin_mask = prim.attr("begin_mask").as_int();
  const std::int64_t end_mask = prim.attr("end_mask").as_int();
  std::int64_t ellipsis_mask = prim.attr("ellipsis_mask").as_int();
  const std::int64_t new_axis_mask = prim.attr("new_axis_mask").as_int();
  const std::int64_t shrink_mask = prim.attr("shrink_axis_mask").as_int();
  if (sb.size() != se.size() || sb.size() != ss.size()) {
    return "expected begin, end and strides of one length, got " + shape_to_string(sb) + ", " +
           shape_to_string(se) + " and " + shape_to_string(ss);
  }
  if (sb.size() > 62) return "expected at most 62 index entries, got " + std::to_string(sb.size());
  if ((ellipsis_mask & (ellipsis_mask - 1)) != 0) {
    return "expected at most one bit in ellipsis_mask, got " + std::to_string(ellipsis_mask);
  }
  auto bit = [](std::int64_t mask, std::size_t i) { return ((mask >> i) & 1) != 0; };
  std::size_t sparse_dims = sb.size();
  int new_axes_after_ellipsis = 0;
  bool ellipsis_seen = false;
  for (std::size_t i = 0; i < sparse_dims; ++i) {
    if (ellipsis_seen && bit(new_axis_mask, i) && !bit(ellipsis_mask, i)) {
      ++new_axes_after_ellipsis;
    }
    if (bit(ellipsis_mask, i)) ellipsis_seen = true;
  }
  if (!ellipsis_seen) ellipsis_mask |= std::int64_t{1} << sparse_dims++;

  // Dense spec: one entry per input axis.
  constexpr std::int64_t kNewAxis = -1, kShrinkAxis = -2;
  const auto rank = static_cast<std::int64_t>(x.size());
  Shape db(x.size(), 0), de(x.size(), 0), ds(x.size(), 1);
  std::vector<bool> dbm(x.size(), false), dem(x.size(), false), dshrink(x.size(), false);
  std::vector<std::int64_t> gather;  // per output axis: input axis, kNewAxis or kShrinkAxis
  std::int64_t full = 0;
  for (std::size_t i = 0; i < sparse_dims; ++i) {
    if (bit(ellipsis_mask, i)) {
      const std::int64_t next = std::min<std::int64_t>(
          rank - static_cast<std::int64_t>(sparse_dims - i) + 1 + new_axes_after_ellipsis, rank);
      for (; full < next; ++full) {
        dbm[static_cast<std::size_t>(full)] = dem[static_cast<std::size_t>(full)] = true;
        gather.push_back(full);
      }
    } else if (bit(new_axis_mask, i)) {
      gather.push_back(kNewAxis);
    } else {
      if (full == rank) {
        return "expected at most " + std::to_string(rank) + " indexed axes for " +
               shape_to_string(x) + ", got begin " + shape_to_string(sb);
      }
      const auto f = static_cast<std::size_t>(full);
      db[f] = sb[i];
      de[f] = se[i];
      ds[f] = ss[i];
      dbm[f] = bit(begin_mask, i);
      dem[f] = bit(end_mask, i);
      dshrink[f] = bit(shrink_mask, i);
      gather.push_back(dshrink[f] ? kShrinkAxis : full);
      ++full;
    }
  }

  begin.assign(x.size(), 0);
  stride.assign(x.size(), 1);
  size.assign(x.size(), 0);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::int64_t dim = x[i], st = ds[i];
    if (st == 0) return "expected nonzero strides, got " + shape_to_string(ss);
    stride[i] = st;
    if (dshrink[i] && st < 0) {
      return "expected a positive stride on a shrunk axis, got " + shape_to_string(ss);
    }
    if (dim == ir::kUnknownDim) {
      size[i] = dshrink[i] ? 1 : ir::kUnknownDim;
      continue;
    }
    if (dshrink[i]) {
      const std::int64_t b = db[i] < 0 ? dim + db[i] : db[i];
      if (b < 0 || b >= dim) {
        return "expected an index in [" + std::to_string(-dim) + ", " + std::to_string(dim) +
               ") on axis " + std::to_string(i) + " of " + shape_to_string(x) + ", got " +
               std::to_string(db[i]);
      }
      begin[i] = b;
      size[i] = 1;
      continue;
    }
    // Where a masked or out-of-range bound lands: the first/last reachable index, or one past
    // it (-1 for backwards steps).
    const std::int64_t lo = st > 0 ? 0 : -1, hi = st > 0 ? dim : dim - 1;
    auto canonical = [&](std::int64_t v, bool masked, bool is_end) {
      if (masked) return (st > 0) != is_end ? lo : hi;
      const std::int64_t fwd = v < 0 ? dim + v : v;
      return std::clamp(fwd, lo, hi);
    };
    const std::int64_t b = canonical(db[i], dbm[i], false);
    const std::int64_t e = canonical(de[i], dem[i], true);
    const std::int64_t len = e - b;
    size[i] = (len == 0 || (len < 0) != (st < 0)) ? 0 : len / st + (len % st != 0 ? 1 : 0);
    begin[i] = b;
  }
  out_shape.clear();
  for (std::int64_t g : gather) {
    if (g == kNewAxis) out_shape.push_back(1);
    if (g >= 0) out_shape.push_back(size[static_cast<std::size_t>(g)]);
  }
  return "";
}

namespace {

using Ints = std::vector<std::int64_t>;

std::string ints_to_string(const Ints& v) { return shape_to_string(v); }

// Accepts an axis in [-rank, rank) (or [-rank-1, rank] with `extra` = 1 for inserted axes) and
// returns it in [0, rank + extra).
std::int64_t normalize_axis(const InferContext& c, std::int64_t axis, std::int64_t rank,
                            const std::string& what, std::int64_t extra = 0) {
  const std::int64_t n = rank + extra;
  if (axis < -n || axis >= n) {
    throw ValueError(c.error("expected " + what + " in [" + std::to_string(-n) + ", " +
                             std::to_string(n) + "), got " + std::to_string(axis)));
  }
  return axis < 0 ? axis + n : axis;
}

// Product of known dims; -1 when any dim is unknown.
std::int64_t known_numel(const Shape& s) {
  std::int64_t n = 1;
  for (std::int64_t d : s) {
    if (d < 0) return -1;
    n *= d;
  }
  return n;
}

Var reshape_to_input(Emitter& e, const BpropArgs& a) {
  return e.reshape(a.dout, e.shape_of(a.inputs[0]));
}

// ---- Reshape, Transpose -------------------------------------------------------------------

AbstractPtr infer_reshape(const InferContext& c) {
  const ir::Abstract& x = *c.input(0);
  if (!x.is_tensor()) throw TypeError(c.error("expected a tensor, got " + x.to_string()));
  Shape shape = c.attr("shape").as_ints();
  int unknown_at = -1;
  std::int64_t known = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (unknown_at >= 0) {
        throw ValueError(c.error("expected at most one -1 in shape, got " +
                                 ints_to_string(shape)));
      }
      unknown_at = static_cast<int>(i);
    } else if (shape[i] < 0) {
      throw ValueError(c.error("expected dims >= -1 in shape, got " + ints_to_string(shape)));
    } else {
      known *= shape[i];
    }
  }
  const std::int64_t n = x.has_rank() ? known_numel(x.shape()) : -1;
  if (n < 0) return ir::Abstract::tensor(x.dtype(), shape);  // -1 stays unknown
  const bool fits = unknown_at < 0 ? known == n : known != 0 && n % known == 0;
  if (!fits) {
    throw ShapeError(c.error("expected a shape of " + std::to_string(n) + " elements, got " +
                             ints_to_string(shape)));
  }
  if (unknown_at >= 0) shape[static_cast<std::size_t>(unknown_at)] = n / known;
  return ir::Abstract::tensor(x.dtype(), shape);
}

// The perm checked to be a permutation of the input's axes, negative entries normalized.
Ints checked_perm(const InferContext& c, std::int64_t rank) {
  Ints perm = c.attr("perm").as_ints();
  std::vector<bool> seen(static_cast<std::size_t>(rank), false);
  bool ok = static_cast<std::int64_t>(perm.size()) == rank;
  for (std::int64_t& p : perm) {
    if (!ok) break;
    if (p < -rank || p >= rank) {
      ok = false;
      break;
    }
    if (p < 0) p += rank;
    ok = !seen[static_cast<std::size_t>(p)];
    seen[static_cast<std::size_t>(p)] = true;
  }
  if (!ok) {
    throw ValueError(c.error("expected perm to be a permutation of " + std::to_string(rank) +
                             " axes, got " + ints_to_string(c.attr("perm").as_ints())));
  }
  return perm;
}

AbstractPtr infer_transpose(const InferContext& c) {
  const ir::Abstract& x = c.tensor(0);
  const Shape& s = x.shape();
  Ints perm = checked_perm(c, static_cast<std::int64_t>(s.size()));
  Shape out;
  for (std::int64_t p : perm) out.push_back(s[static_cast<std::size_t>(p)]);
  return ir::Abstract::tensor(x.dtype(), out);
}

Grads transpose_bprop(Emitter& e, const BpropArgs& a) {
  const Ints perm = a.prim.attr("perm").as_ints();
  const auto rank = static_cast<std::int64_t>(perm.size());
  Ints inverse(perm.size());
  for (std::int64_t i = 0; i < rank; ++i) {
    std::int64_t p = perm[static_cast<std::size_t>(i)];
    inverse[static_cast<std::size_t>(p < 0 ? p + rank : p)] = i;
  }
  return {e.emit("Transpose", {a.dout}, {{"perm", Value::ints(inverse)}})};
}


// ---- Flatten, ExpandDims, Squeeze ---------------------------------------------------------

AbstractPtr infer_flatten(const InferContext& c) {
  const ir::Abstract& x = c.tensor(0);
  const Shape& s = x.shape();
  if (s.empty()) throw ShapeError(c.error("expected a tensor of rank >= 1, got ()"));
  return ir::Abstract::tensor(x.dtype(), {s[0], known_numel(Shape(s.begin() + 1, s.end()))});
}

AbstractPtr infer_expand_dims(const InferContext& c) {
  const ir::Abstract& x = c.tensor(0);
  Shape s = x.shape();
  const auto rank = static_cast<std::int64_t>(s.size());
  const std::int64_t axis = normalize_axis(c, c.attr("axis").as_int(), rank, "axis", 1);
  s.insert(s.begin() + axis, 1);
  return ir::Abstract::tensor(x.dtype(), s);
}

AbstractPtr infer_squeeze(const InferContext& c) {
  const ir::Abstract& x = c.tensor(0);
  const Shape& s = x.shape();
  const auto rank = static_cast<std::int64_t>(s.size());
  std::vector<bool> drop(s.size(), false);
  const Ints axes = c.attr("axis").as_ints();
  if (axes.empty()) {
    for (std::size_t i = 0; i < s.size(); ++i) drop[i] = s[i] == 1;
  }
  for (std::int64_t a : axes) {
    const std::int64_t i = normalize_axis(c, a, rank, "axis");
    const std::int64_t d = s[static_cast<std::size_t>(i)];
    if (d != 1 && d != ir::kUnknownDim) {
      throw ShapeError(c.error("expected dim 1 at axis " + std::to_string(a) + ", got " +
                               shape_to_string(s)));
    }
    drop[static_cast<std::size_t>(i)] = true;
  }
  Shape out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (!drop[i]) out.push_back(s[i]);
  }
  return ir::Abstract::tensor(x.dtype(), out);
}

// ---- Concat, Split ------------------------------------------------------------------------

AbstractPtr infer_concat(const InferContext& c) {
  const ir::Abstract& first = c.tensor(0);
  Shape out = first.shape();
  const auto rank = static_cast<std::int64_t>(out.size());
  const std::int64_t axis = normalize_axis(c, c.attr("axis").as_int(), rank, "axis");
  for (std::size_t i = 1; i < c.inputs.size(); ++i) {
    const ir::Abstract& x = c.tensor(i);
    if (x.dtype() != first.dtype()) {
      throw TypeError(c.error("expected inputs of one dtype, got " +
                              std::string(dtype_name(first.dtype())) + " and " +
                              std::string(dtype_name(x.dtype()))));
    }
    const Shape& s = x.shape();
    bool agree = s.size() == out.size();
    for (std::size_t k = 0; agree && k < s.size(); ++k) {
      if (static_cast<std::int64_t>(k) == axis) continue;
      agree = s[k] == out[k] || s[k] == ir::kUnknownDim || out[k] == ir::kUnknownDim;
      if (out[k] == ir::kUnknownDim) out[k] = s[k];
    }
    if (!agree) {
      throw ShapeError(c.error("expected input shapes to agree except on axis " +
                               std::to_string(axis) + ", got " +
                               shape_to_string(first.shape()) + " and " + shape_to_string(s)));
    }
    const auto a = static_cast<std::size_t>(axis);
    std::int64_t sum = 0;
    if (out[a] != ir::kUnknownDim && s[a] != ir::kUnknownDim &&
        __builtin_add_overflow(out[a], s[a], &sum)) {
      throw ShapeError(c.error("expected the sizes along axis " + std::to_string(axis) +
                               " to add up within 64 bits, got " + shape_to_string(first.shape()) +
                               " and " + shape_to_string(s)));
    }
    out[a] = out[a] == ir::kUnknownDim || s[a] == ir::kUnknownDim ? ir::kUnknownDim : sum;
  }
  return ir::Abstract::tensor(first.dtype(), out);
}

Grads concat_bprop(Emitter& e, const BpropArgs& a) {
  const auto axis_attr = a.prim.attr("axis").as_int();
  Grads g;
  std::int64_t offset = 0;
  for (const Var& x : a.inputs) {
    const Shape s = e.shape_of(x);
    const auto rank = static_cast<std::int64_t>(s.size());
    const auto axis = static_cast<std::size_t>(axis_attr < 0 ? axis_attr + rank : axis_attr);
    Ints begin(s.size(), 0);
    begin[axis] = offset;
    offset += s[axis];
    g.push_back(e.emit("Slice", {a.dout}, {{"begin", Value::ints(begin)},
                                           {"size", Value::ints(s)}}));
  }
  return g;
}

AbstractPtr infer_split(const InferContext& c) {
  const ir::Abstract& x = c.tensor(0);
  Shape s = x.shape();
  const std::int64_t axis =
      normalize_axis(c, c.attr("axis").as_int(), static_cast<std::int64_t>(s.size()), "axis");
  const std::int64_t n = c.attr("output_num").as_int();
  if (n < 1) throw ValueError(c.error("expected output_num >= 1, got " + std::to_string(n)));
  std::int64_t& d = s[static_cast<std::size_t>(axis)];
  if (d != ir::kUnknownDim) {
    if (d % n != 0) {
      throw ShapeError(c.error("expected output_num " + std::to_string(n) + " to divide dim " +
                               std::to_string(d) + " of axis " + std::to_string(axis) +
                               ", got " + shape_to_string(x.shape())));
    }
    d /= n;
  }
  return ir::Abstract::tuple(
      std::vector<AbstractPtr>(static_cast<std::size_t>(n), ir::Abstract::tensor(x.dtype(), s)));
}

Grads split_bprop(Emitter& e, const BpropArgs& a) {
  // An output whose gradient never arrived is a zero of its shape.
  const AbstractPtr douts = e.abstract_of(a.dout);
  std::vector<Var> parts;
  const auto n = static_cast<std::int64_t>(douts->elements().size());
  for (std::int64_t i = 0; i < n; ++i) {
    if (douts->elements()[static_cast<std::size_t>(i)]->is_tensor()) {
      parts.push_back(e.tuple_get(a.dout, i));
    } else {
      parts.push_back(e.zeros_like(e.tuple_get(a.out, i)));
    }
  }
  return {e.emit("Concat", parts, {{"axis", a.prim.attr("axis")}})};
}

// ---- Slice, StridedSlice, StridedSliceGrad ------------------------------------------------

AbstractPtr infer_slice(const InferContext& c) {
  const ir::Abstract& x = c.tensor(0);
  const Shape& s = x.shape();
  const Ints begin = c.attr("begin").as_ints();
  const Ints size = c.attr("size").as_ints();
  if (begin.size() != s.size() || size.size() != s.size()) {
    throw ValueError(c.error("expected begin and size of " + std::to_string(s.size()) +
                             " values for " + shape_to_string(s) + ", got " +
                             ints_to_string(begin) + " and " + ints_to_string(size)));
  }
  Shape out(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    const std::int64_t d = s[i];
    const bool ok = begin[i] >= 0 && size[i] >= -1 &&
                    (d == ir::kUnknownDim ||
                     (begin[i] <= d && (size[i] == -1 || begin[i] + size[i] <= d)));
    if (!ok) {
      throw ValueError(c.error("expected 0 <= begin <= begin + size <= dim on axis " +
                               std::to_string(i) + " of " + shape_to_string(s) + ", got begin " +
                               ints_to_string(begin) + " and size " + ints_to_string(size)));
    }
    out[i] = size[i] != -1 ? size[i] : d == ir::kUnknownDim ? d : d - begin[i];
  }
  return ir::Abstract::tensor(x.dtype(), out);
}

std::vector<AttrSpec> strided_slice_attrs() {
  std::vector<AttrSpec> a = {{"begin", AttrKind::kInts, std::nullopt, {}},
                             {"end", AttrKind::kInts, std::nullopt, {}},
                             {"strides", AttrKind::kInts, std::nullopt, {}}};
  for (const char* mask : {"begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask",
                           "shrink_axis_mask"}) {
    a.push_back({mask, AttrKind::kInt, Value::i64(0), {}});
  }
  return a;
}

ir::Primitive::Attrs strided_slice_attrs_of(const Primitive& prim) {
  ir::Primitive::Attrs attrs;
  for (const AttrSpec& spec : strided_slice_attrs()) attrs[spec.name] = prim.attr(spec.name);
  return attrs;
}

AbstractPtr infer_strided_slice(const InferContext& c) {
  const ir::Abstract& x = c.tensor(0);
  Ints begin, stride;
  Shape size, out;
  const std::string problem = strided_slice_plan(x.shape(), c.prim, begin, stride, size, out);
  if (!problem.empty()) throw ValueError(c.error(problem));
  return ir::Abstract::tensor(x.dtype(), out);
}

AbstractPtr infer_strided_slice_grad(const InferContext& c) {
  const ir::Abstract& dout = c.tensor(0);
  const Shape shapex = c.attr("shapex").as_ints();
  Ints begin, stride;
  Shape size, out;
  const std::string problem = strided_slice_plan(shapex, c.prim, begin, stride, size, out);
  if (!problem.empty()) throw ValueError(c.error(problem));
  if (!ir::Abstract::tensor(dout.dtype(), out)->accepts(dout)) {
    throw ShapeError(c.error("expected a gradient of shape " + shape_to_string(out) +
                             " for a slice of " + shape_to_string(shapex) + ", got " +
                             shape_to_string(dout.shape())));
  }
  return ir::Abstract::tensor(dout.dtype(), shapex);
}

Grads slice_bprop(Emitter& e, const BpropArgs& a) {
  const Shape s = e.shape_of(a.inputs[0]);
  const Ints begin = a.prim.attr("begin").as_ints();
  const Ints size = a.prim.attr("size").as_ints();
  Ints end(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) end[i] = size[i] == -1 ? s[i] : begin[i] + size[i];
  ir::Primitive::Attrs attrs = {{"begin", Value::ints(begin)},
                                {"end", Value::ints(end)},
                                {"strides", Value::ints(Ints(s.size(), 1))},
                                {"shapex", Value::ints(s)}};
  return {e.emit("StridedSliceGrad", {a.dout}, std::move(attrs))};
}

Grads strided_slice_bprop(Emitter& e, const BpropArgs& a) {
  ir::Primitive::Attrs attrs = strided_slice_attrs_of(a.prim);
  attrs["shapex"] = Value::ints(e.shape_of(a.inputs[0]));
  return {e.emit("StridedSliceGrad", {a.dout}, std::move(attrs))};
}

Grads strided_slice_grad_bprop(Emitter& e, const BpropArgs& a) {
  return {e.emit("StridedSlice", {a.dout}, strided_slice_attrs_of(a.prim))};
}

// ---- Tile, BroadcastTo --------------------------------------------------------------------

// Input shape and multiples, the shorter padded with leading 1s to a common rank.
std::pair<Shape, Ints> tile_operands(const Shape& x, Ints m) {
  Shape s = x;
  if (s.size() < m.size()) s.insert(s.begin(), m.size() - s.size(), 1);
  if (m.size() < s.size()) m.insert(m.begin(), s.size() - m.size(), 1);
  return {s, m};
}

AbstractPtr infer_tile(const InferContext& c) {
  const ir::Abstract& x = c.tensor(0);
  const Ints multiples = c.attr("multiples").as_ints();
  for (std::int64_t m : multiples) {
    if (m < 1) {
      throw ValueError(c.error("expected multiples >= 1, got " + ints_to_string(multiples)));
    }
  }
  auto [s, m] = tile_operands(x.shape(), multiples);
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != ir::kUnknownDim) s[i] *= m[i];
  }
  return ir::Abstract::tensor(x.dtype(), s);
}

Grads tile_bprop(Emitter& e, const BpropArgs& a) {
  const Shape x = e.shape_of(a.inputs[0]);
  auto [s, m] = tile_operands(x, a.prim.attr("multiples").as_ints());
  // dout viewed as (m0, d0, m1, d1, ...): every copy of x is one index of the m axes.
  Shape split;
  Ints axes;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (m[i] > 1) axes.push_back(static_cast<std::int64_t>(split.size()));
    split.push_back(m[i]);
    split.push_back(s[i]);
  }
  if (axes.empty()) return {e.reshape(a.dout, x)};
  Var summed = e.reduce_sum(e.reshape(a.dout, split), axes, /*keep_dims=*/false);
  return {e.reshape(summed, x)};
}

AbstractPtr infer_broadcast_to(const InferContext& c) {
  const ir::Abstract& x = c.tensor(0);
  const Shape& s = x.shape();
  Shape target = c.attr("shape").as_ints();
  auto fail = [&] {
    return ShapeError(c.error("expected a shape that " + shape_to_string(s) + " broadcasts to, got " +
                              ints_to_string(c.attr("shape").as_ints())));
  };
  if (target.size() < s.size()) throw fail();
  const std::size_t lead = target.size() - s.size();
  for (std::size_t i = 0; i < target.size(); ++i) {
    std::int64_t& t = target[i];
    if (t == -1) {
      if (i < lead) throw fail();
      t = s[i - lead];
      continue;
    }
    if (t < 0) throw fail();
    if (i < lead) continue;
    const std::int64_t d = s[i - lead];
    if (d != 1 && d != t && d != ir::kUnknownDim) throw fail();
  }
  return ir::Abstract::tensor(x.dtype(), target);
}

// ---- Gather, GatherGrad, OneHot -----------------------------------------------------------

void check_indices(const InferContext& c, const ir::Abstract& indices) {
  if (indices.dtype() != DType::kInt32 && indices.dtype() != DType::kInt64) {
    throw TypeError(c.error("expected Int32 or Int64 indices, got " +
                            std::string(dtype_name(indices.dtype()))));
  }
}

// params[:axis] + indices + params[axis+1:]
Shape gather_shape(const Shape& params, std::int64_t axis, const Shape& indices) {
  Shape out(params.begin(), params.begin() + axis);
  out.insert(out.end(), indices.begin(), indices.end());
  out.insert(out.end(), params.begin() + axis + 1, params.end());
  return out;
}

AbstractPtr infer_gather(const InferContext& c) {
  const ir::Abstract& params = c.tensor(0);
  const ir::Abstract& indices = c.tensor(1);
  check_indices(c, indices);
  const Shape& s = params.shape();
  const std::int64_t axis =
      normalize_axis(c, c.attr("axis").as_int(), static_cast<std::int64_t>(s.size()), "axis");
  return ir::Abstract::tensor(params.dtype(), gather_shape(s, axis, indices.shape()));
}

Grads gather_bprop(Emitter& e, const BpropArgs& a) {
  return {e.emit("GatherGrad", {a.dout, a.inputs[1]},
                 {{"axis", a.prim.attr("axis")},
                  {"x_shape", Value::ints(e.shape_of(a.inputs[0]))}}),
          Var()};
}

AbstractPtr infer_gather_grad(const InferContext& c) {
  const ir::Abstract& dout = c.tensor(0);
  const ir::Abstract& indices = c.tensor(1);
  check_indices(c, indices);
  const Shape x = c.attr("x_shape").as_ints();
  const std::int64_t axis =
      normalize_axis(c, c.attr("axis").as_int(), static_cast<std::int64_t>(x.size()), "axis");
  const Shape expected = gather_shape(x, axis, indices.shape());
  if (!ir::Abstract::tensor(dout.dtype(), expected)->accepts(dout)) {
    throw ShapeError(c.error("expected a gradient of shape " + shape_to_string(expected) +
                             ", got " + shape_to_string(dout.shape())));
  }
  return ir::Abstract::tensor(dout.dtype(), x);
}

Grads gather_grad_bprop(Emitter& e, const BpropArgs& a) {
  return {e.emit("Gather", {a.dout, a.inputs[1]}, {{"axis", a.prim.attr("axis")}}), Var()};
}

AbstractPtr infer_one_hot(const InferContext& c) {
  const ir::Abstract& indices = c.tensor(0);
  check_indices(c, indices);
  Shape s = indices.shape();
  const std::int64_t depth = c.attr("depth").as_int();
  if (depth < 0) throw ValueError(c.error("expected depth >= 0, got " + std::to_string(depth)));
  std::int64_t axis = c.attr("axis").as_int();
  const auto rank = static_cast<std::int64_t>(s.size());
  if (axis < -1 || axis > rank) {
    throw ValueError(c.error("expected axis in [-1, " + std::to_string(rank) + "], got " +
                             std::to_string(axis)));
  }
  s.insert(axis == -1 ? s.end() : s.begin() + axis, depth);
  return ir::Abstract::tensor(DType::kFloat32, s);
}

// An operand MindSpore's attribute form passes as a Constant input (and its primitive-function
// form as its one init argument), given in MindIR as a tuple or an integer tensor.
// input_names, where given, come with output_names ("output").
MindIRForm operand_mindir(const std::string& attr, MindIRAttrEncoding encoding,
                          std::vector<std::string> input_names = {}) {
  MindIRForm form{.const_inputs = {attr},
                  .function_args = {attr},
                  .attrs = {{.name = attr, .encoding = encoding, .also_written_as = {}}}};
  if (!input_names.empty()) {
    form.input_names = std::move(input_names);
    form.output_names = {"output"};
  }
  return form;
}

}  // namespace

void register_array_ops(Registry& r) {
  using enum MindIRAttrEncoding;
  const auto none = std::nullopt;
  r.add(OpDef{
      .name = "Reshape",
      .attrs = {{"shape", AttrKind::kInts, none, {}}},
      .num_inputs = 1,
      .infer = infer_reshape,
      .bprop = [](Emitter& e, const BpropArgs& a) -> Grads { return {reshape_to_input(e, a)}; },
      .not_differentiable_because = {},
      .summary = "the same elements in another shape (one dim of shape may be -1: inferred)",
      .mindir = operand_mindir("shape", kIntsFromTensor, {"tensor", "shape"}),
  });
  r.add(OpDef{
      .name = "Transpose",
      .attrs = {{"perm", AttrKind::kInts, none, {}}},
      .num_inputs = 1,
      .infer = infer_transpose,
      .bprop = transpose_bprop,
      .not_differentiable_because = {},
      .summary = "permutes the axes: output axis i is input axis perm[i]",
      .mindir = operand_mindir("perm", kIntsFromTensor, {"x", "perm"}),
  });
  r.add(OpDef{
      .name = "Flatten",
      .attrs = {},
      .num_inputs = 1,
      .infer = infer_flatten,
      .bprop = [](Emitter& e, const BpropArgs& a) -> Grads { return {reshape_to_input(e, a)}; },
      .not_differentiable_because = {},
      .summary = "(N, ...) to (N, product of the rest)",
  });
  r.add(OpDef{
      .name = "ExpandDims",
      .attrs = {{"axis", AttrKind::kInt, none, {}}},
      .num_inputs = 1,
      .infer = infer_expand_dims,
      .bprop = [](Emitter& e, const BpropArgs& a) -> Grads { return {reshape_to_input(e, a)}; },
      .not_differentiable_because = {},
      .summary = "inserts an axis of size 1 at `axis` (in [-rank-1, rank])",
      .mindir = operand_mindir("axis", kAsIs),
  });
  r.add(OpDef{
      .name = "Squeeze",
      .attrs = {{"axis", AttrKind::kInts, Value::ints({}), {}}},
      .num_inputs = 1,
      .infer = infer_squeeze,
      .bprop = [](Emitter& e, const BpropArgs& a) -> Grads { return {reshape_to_input(e, a)}; },
      .not_differentiable_because = {},
      .summary = "removes the size-1 axes listed in `axis` (empty: all of them)",
  });
  r.add(OpDef{
      .name = "Concat",
      .attrs = {{"axis", AttrKind::kInt, Value::i64(0), {}}},
      .num_inputs = -1,
      .min_inputs = 1,
      .infer = infer_concat,
      .bprop = concat_bprop,
      .not_differentiable_because = {},
      .summary = "joins its tensor inputs along `axis`",
      .mindir = {.function_args = {"axis"}},
  });
  r.add(OpDef{
      .name = "Split",
      .attrs = {{"axis", AttrKind::kInt, Value::i64(0), {}},
                {"output_num", AttrKind::kInt, Value::i64(1), {}}},
      .num_inputs = 1,
      .num_outputs = -1,  // output_num decides; the header has no spelling for that
      .infer = infer_split,
      .bprop = split_bprop,
      .not_differentiable_because = {},
      .summary = "cuts `axis` into output_num equal parts (a tuple)",
      .mindir = {.function_args = {"axis", "output_num"}},
  });
  r.add(OpDef{
      .name = "Slice",
      .attrs = {{"begin", AttrKind::kInts, none, {}}, {"size", AttrKind::kInts, none, {}}},
      .num_inputs = 1,
      .infer = infer_slice,
      .bprop = slice_bprop,
      .not_differentiable_because = {},
      .summary = "the box starting at `begin` of extent `size` (-1: to the end)",
  });
  r.add(OpDef{
      .name = "StridedSlice",
      .attrs = strided_slice_attrs(),
      .num_inputs = 1,
      .infer = infer_strided_slice,
      .bprop = strided_slice_bprop,
      .not_differentiable_because = {},
      .summary = "x[begin:end:strides] per axis with TensorFlow's five masks",
  });
  std::vector<AttrSpec> grad_attrs = strided_slice_attrs();
  grad_attrs.push_back({"shapex", AttrKind::kInts, none, {}});
  r.add(OpDef{
      .name = "StridedSliceGrad",
      .attrs = std::move(grad_attrs),
      .num_inputs = 1,
      .infer = infer_strided_slice_grad,
      .bprop = strided_slice_grad_bprop,
      .not_differentiable_because = {},
      .summary = "zeros of shape shapex with the StridedSlice positions set from the input",
  });
  r.add(OpDef{
      .name = "Tile",
      .attrs = {{"multiples", AttrKind::kInts, none, {}}},
      .num_inputs = 1,
      .infer = infer_tile,
      .bprop = tile_bprop,
      .not_differentiable_because = {},
      .summary = "repeats x multiples[i] times along axis i",
      .mindir = operand_mindir("multiples", kIntsFromTensor),
  });
  r.add(OpDef{
      .name = "BroadcastTo",
      .attrs = {{"shape", AttrKind::kInts, none, {}}},
      .num_inputs = 1,
      .infer = infer_broadcast_to,
      .bprop = [](Emitter& e, const BpropArgs& a) -> Grads {
        return {e.sum_to_shape(a.dout, e.shape_of(a.inputs[0]))};
      },
      .not_differentiable_because = {},
      .summary = "broadcasts x to `shape` (-1 keeps x's dim)",
      .mindir = operand_mindir("shape", kIntsFromTensor),
  });
  r.add(OpDef{
      .name = "Gather",
      .attrs = {{"axis", AttrKind::kInt, Value::i64(0), {}}},
      .num_inputs = 2,
      .infer = infer_gather,
      .bprop = gather_bprop,
      .not_differentiable_because = {},
      .summary = "slices of params along `axis` picked by integer indices",
      .mindir = {.function_args = {"axis"}},
  });
  r.add(OpDef{
      .name = "GatherGrad",
      .attrs = {{"axis", AttrKind::kInt, Value::i64(0), {}},
                {"x_shape", AttrKind::kInts, none, {}}},
      .num_inputs = 2,
      .infer = infer_gather_grad,
      .bprop = gather_grad_bprop,
      .not_differentiable_because = {},
      .summary = "Gather's gradient: adds dout's slices into zeros of x_shape at the indices",
  });
  r.add(OpDef{
      .name = "OneHot",
      .attrs = {{"depth", AttrKind::kInt, none, {}},
                {"on_value", AttrKind::kFloat, Value::f32(1), {}},
                {"off_value", AttrKind::kFloat, Value::f32(0), {}},
                {"axis", AttrKind::kInt, Value::i64(-1), {}}},
      .num_inputs = 1,
      .kernel_dtype_from = -1,
      .infer = infer_one_hot,
      .bprop = {},
      .not_differentiable_because = "its input is integer indices",
      .summary = "Float32 one-hot encoding of indices along a new axis (out-of-range: all off)",
  });
}

}  // namespace loom::ops
