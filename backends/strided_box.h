// The shape arithmetic of the array ops' strided copies, shared by the CPU and CUDA kernels (only
// the copy loops differ): a box of per-axis counts read and written through element strides, its
// simplification, and the boxes of Slice/StridedSlice, Concat/Split.
//
//   StridedBox box{y.shape(), contiguous_strides(x.shape()), contiguous_strides(y.shape())};
//   box = simplify(box);  // size-1 axes dropped, contiguous neighbours merged
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/kernel.h"
#include "core/ir/tensor.h"

namespace loom::backend {

using Ints = std::vector<std::int64_t>;

// Row-major element strides of `shape`.
Ints contiguous_strides(const Shape& shape);

// A box of `shape` read at src + Σ i_k·src_stride_k and written at dst + Σ i_k·dst_stride_k,
// strides in elements.
struct StridedBox {
  Shape shape;
  Ints src_stride;
  Ints dst_stride;
};

// Drops size-1 axes and merges neighbours that are contiguous on both sides (a box of one
// element stays one axis long).
StridedBox simplify(const StridedBox& box);

// Σ at_i · strides_i.
std::int64_t offset_of(const Ints& at, const Ints& strides);
// A negative axis counted from the end.
std::int64_t normalized_axis(std::int64_t axis, std::int64_t rank);
// The product of s[from..to).
std::int64_t product(const Shape& s, std::size_t from, std::size_t to);

// The StridedSlice box over `whole` (the sliced tensor's shape): per-axis counts, element strides
// into `whole`, and in `start` the offset of the first element. InternalError naming the op for a
// plan inference should have refused.
StridedBox strided_slice_box(const Shape& whole, const KernelContext& k, std::int64_t& start);

}  // namespace loom::backend
