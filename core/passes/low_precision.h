// Dtype facts the mixed-precision rewrites share (amp.cc, recompute.cc, simplify.cc).
#pragma once

#include "core/ir/dtype.h"

namespace loom::passes {

// Float16 or BFloat16: the low-precision floats of mixed precision.
inline bool is_half_float(DType d) { return d == DType::kFloat16 || d == DType::kBFloat16; }

// Whether every value of dtype `from` is a value of dtype `to` (a Cast from → to is exact): a
// half float to Float32 or Float64, Float32 to Float64.
inline bool widens_exactly(DType from, DType to) {
  return (is_half_float(from) && (to == DType::kFloat32 || to == DType::kFloat64)) ||
         (from == DType::kFloat32 && to == DType::kFloat64);
}

}  // namespace loom::passes
