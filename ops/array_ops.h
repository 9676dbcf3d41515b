// What the array family (ops/array_ops.cc) shares with the kernels.
#pragma once

#include <string>

#include "core/ir/tensor.h"
#include "core/ir/value.h"

namespace loom::ops {

// TensorFlow's resolution of a strided slice, which MindSpore shares: StridedSlice's and
// StridedSliceGrad's attributes (begin, end, strides and the five masks) against an input of
// shape x. The sparse spec (one entry per index expression) becomes a dense one with an entry
// per input axis: the ellipsis (implicitly at the end when absent) expands to full ranges, new
// axes take no input axis. Yields, per input axis, the first index (`begin`), the step
// (`stride`) and the number of elements taken (`size`, rank of x: shrunk axes have size 1), and
// the output shape (new axes inserted as 1, shrunk axes removed). The output's row-major order
// is `size`'s row-major order, which is what the kernels walk. Returns "" or the problem
// ("expected ..."), for inference to throw with the op's name. Used by inference and by
// backends/cpu/array_kernels.cc.
std::string strided_slice_plan(const Shape& x, const ir::Primitive& prim, Shape& begin,
                               Shape& stride, Shape& size, Shape& out_shape);

}  // namespace loom::ops
