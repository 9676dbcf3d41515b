/// \file
/// Statistics of a host tensor, in double: what statistic.csv, `--check-numerics` and the
/// watchpoints report. NaN values count as nan and are left out of max, min, mean and the L2
/// norm; infinities count as neg_inf / pos_inf and are included in max and min (a tensor with
/// +Inf has max inf) but left out of mean, abs_mean and the L2 norm.
///
/// Floating tensors take two passes simple enough to vectorize (the sums in double, eight lanes;
/// the extremes and counts in the element type, sixteen lanes) — one pass doing both measured 6x
/// slower (2 against 11 GB/s on float32); a tensor holding NaN or Inf takes a third, exact pass
/// for the non-finite counts and the finite-only sums.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "core/ir/error.h"
#include "core/ir/tensor.h"

namespace loom::debug {

/// The statistics of one tensor, as tensor_stats() computes them.
struct TensorStats {
  std::int64_t count = 0;     ///< elements
  /// NaN, -Inf and +Inf elements (nan, neg_inf, pos_inf); 0 for integer and Bool tensors.
  ///@{
  std::int64_t nan = 0, neg_inf = 0, pos_inf = 0;
  ///@}
  std::int64_t negative = 0;  ///< elements < 0 (MindSpore's "negative zero count")
  std::int64_t positive = 0;  ///< elements > 0 ("positive zero count")
  std::int64_t zero = 0;      ///< elements == 0
  /// The largest and smallest element (max, min); NaN when every element is NaN (or there is
  /// none).
  ///@{
  double max = 0, min = 0;
  ///@}
  double mean = 0;            ///< over the finite elements; NaN when there is none
  double abs_mean = 0;        ///< mean of |x| over the finite elements
  double l2norm = 0;          ///< over the finite elements

  /// The NaN and ±Inf elements: nan + neg_inf + pos_inf.
  std::int64_t non_finite() const { return nan + neg_inf + pos_inf; }
};

/// A host tensor of any dtype (a device tensor is a TypeError: copy it to the host first).
TensorStats tensor_stats(const Tensor& t);

/// The NaN and ±Inf elements of a floating tensor (0 for integer and Bool tensors), counted with
/// a vectorized test of the exponent bits.
std::int64_t count_non_finite(const Tensor& t);

/// Calls f(p, n) over a floating tensor's values, p a const float* or const double*: Float32 and
/// Float64 in place, Float16 and BFloat16 widened to float in chunks. InternalError otherwise.
template <typename F>
void for_float_values(const Tensor& t, F&& f) {
  constexpr std::int64_t kChunk = 1024;
  const std::int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::kFloat32: f(t.data<float>(), n); return;
    case DType::kFloat64: f(t.data<double>(), n); return;
    case DType::kFloat16:
    case DType::kBFloat16: {
      const auto* bits = static_cast<const std::uint16_t*>(t.raw_data());
      const bool half = t.dtype() == DType::kFloat16;
      std::array<float, kChunk> buf;
      for (std::int64_t i = 0; i < n; i += kChunk) {
        const std::int64_t m = std::min(kChunk, n - i);
        for (std::int64_t k = 0; k < m; ++k) {
          buf[k] = half ? half_to_float(bits[i + k]) : bfloat16_to_float(bits[i + k]);
        }
        f(static_cast<const float*>(buf.data()), m);
      }
      return;
    }
    default: throw InternalError("for_float_values: expected a floating tensor");
  }
}

}  // namespace loom::debug
