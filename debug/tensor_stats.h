// Statistics of a host tensor in one pass, in double: what statistic.csv, --check-numerics and
// the watchpoints report. NaN values count as nan and are left out of max, min, mean and the
// L2 norm; infinities count as neg_inf / pos_inf and are included in max and min (MindSpore's
// statistics do the same: a tensor with +Inf has max inf) but left out of mean and L2 norm.
#pragma once

#include <cstdint>

#include "core/ir/tensor.h"

namespace loom::debug {

struct TensorStats {
  std::int64_t count = 0;     // elements
  std::int64_t nan = 0, neg_inf = 0, pos_inf = 0;
  std::int64_t negative = 0;  // < 0 (MindSpore's "negative zero count")
  std::int64_t positive = 0;  // > 0 ("positive zero count")
  std::int64_t zero = 0;      // == 0
  double max = 0, min = 0;    // NaN when every element is NaN (or there is none)
  double mean = 0;            // over the finite elements; NaN when there is none
  double l2norm = 0;          // over the finite elements
  double abs_mean = 0;        // mean of |x| over the finite elements
};

// A host tensor of any dtype (a device tensor is a TypeError: copy it to the host first).
TensorStats tensor_stats(const Tensor& t);

// The NaN and ±Inf elements of a floating tensor (0 for integer and Bool tensors), counted with
// a vectorized test of the exponent bits.
std::int64_t count_non_finite(const Tensor& t);

}  // namespace loom::debug
