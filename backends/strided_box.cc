// The array ops' box arithmetic (backends/strided_box.h).
#include "backends/strided_box.h"

#include <string>

#include "core/ir/error.h"
#include "ops/array_ops.h"

namespace loom::backend {

Ints contiguous_strides(const Shape& shape) {
  Ints s(shape.size(), 1);
  for (std::size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * shape[i];
  return s;
}

StridedBox simplify(const StridedBox& box) {
  StridedBox out;
  for (std::size_t i = 0; i < box.shape.size(); ++i) {
    if (box.shape[i] == 1) continue;
    if (!out.shape.empty() && out.src_stride.back() == box.src_stride[i] * box.shape[i] &&
        out.dst_stride.back() == box.dst_stride[i] * box.shape[i]) {
      out.shape.back() *= box.shape[i];
      out.src_stride.back() = box.src_stride[i];
      out.dst_stride.back() = box.dst_stride[i];
      continue;
    }
    out.shape.push_back(box.shape[i]);
    out.src_stride.push_back(box.src_stride[i]);
    out.dst_stride.push_back(box.dst_stride[i]);
  }
  if (out.shape.empty()) {
    out.shape = {1};
    out.src_stride = {1};
    out.dst_stride = {1};
  }
  return out;
}

std::int64_t offset_of(const Ints& at, const Ints& strides) {
  std::int64_t o = 0;
  for (std::size_t i = 0; i < at.size(); ++i) o += at[i] * strides[i];
  return o;
}

std::int64_t normalized_axis(std::int64_t axis, std::int64_t rank) {
  return axis < 0 ? axis + rank : axis;
}

std::int64_t product(const Shape& s, std::size_t from, std::size_t to) {
  std::int64_t p = 1;
  for (std::size_t i = from; i < to; ++i) p *= s[i];
  return p;
}

StridedBox strided_slice_box(const Shape& whole, const KernelContext& k, std::int64_t& start) {
  Shape begin, stride, size, out;
  const std::string problem = ops::strided_slice_plan(whole, k.prim, begin, stride, size, out);
  if (!problem.empty()) throw InternalError(k.prim.name() + ": " + problem);
  const Ints ws = contiguous_strides(whole);
  StridedBox box{size, {}, contiguous_strides(size)};
  for (std::size_t i = 0; i < whole.size(); ++i) box.src_stride.push_back(ws[i] * stride[i]);
  start = offset_of(begin, ws);
  return box;
}

}  // namespace loom::backend
