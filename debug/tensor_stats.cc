// One-pass tensor statistics and the non-finite count (debug/tensor_stats.h).
#include "debug/tensor_stats.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace loom::debug {

namespace {

template <typename Get>
TensorStats stats_of(std::int64_t n, Get get) {
  TensorStats s;
  s.count = n;
  double max = -std::numeric_limits<double>::infinity();
  double min = std::numeric_limits<double>::infinity();
  double sum = 0, sum_sq = 0, sum_abs = 0;
  std::int64_t finite = 0, seen = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = get(i);
    if (std::isnan(v)) {
      ++s.nan;
      continue;
    }
    ++seen;
    max = std::max(max, v);
    min = std::min(min, v);
    if (v < 0) ++s.negative;
    if (v > 0) ++s.positive;
    if (v == 0) ++s.zero;
    if (std::isinf(v)) {
      (v > 0 ? s.pos_inf : s.neg_inf)++;
      continue;
    }
    ++finite;
    sum += v;
    sum_sq += v * v;
    sum_abs += std::fabs(v);
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  s.max = seen ? max : nan;
  s.min = seen ? min : nan;
  s.mean = finite ? sum / static_cast<double>(finite) : nan;
  s.abs_mean = finite ? sum_abs / static_cast<double>(finite) : nan;
  s.l2norm = std::sqrt(sum_sq);
  return s;
}

// Elements whose exponent bits are all ones (NaN or ±Inf), over raw words.
template <typename Word>
std::int64_t count_exponent_all_ones(const void* data, std::int64_t n, Word exponent) {
  const Word* w = static_cast<const Word*>(data);
  std::int64_t count = 0;
  for (std::int64_t i = 0; i < n; ++i) count += (w[i] & exponent) == exponent;
  return count;
}

}  // namespace

TensorStats tensor_stats(const Tensor& t) {
  const std::int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::kFloat32: {
      const float* p = t.data<float>();
      return stats_of(n, [p](std::int64_t i) { return static_cast<double>(p[i]); });
    }
    case DType::kFloat64: {
      const double* p = t.data<double>();
      return stats_of(n, [p](std::int64_t i) { return p[i]; });
    }
    default:
      return stats_of(n, [&t](std::int64_t i) { return t.get(i); });
  }
}

std::int64_t count_non_finite(const Tensor& t) {
  const void* p = t.raw_data();
  const std::int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::kFloat32: return count_exponent_all_ones<std::uint32_t>(p, n, 0x7f800000u);
    case DType::kFloat64:
      return count_exponent_all_ones<std::uint64_t>(p, n, 0x7ff0000000000000ull);
    case DType::kFloat16:
      return count_exponent_all_ones<std::uint16_t>(p, n, static_cast<std::uint16_t>(0x7c00));
    case DType::kBFloat16:
      return count_exponent_all_ones<std::uint16_t>(p, n, static_cast<std::uint16_t>(0x7f80));
    default: return 0;
  }
}

}  // namespace loom::debug
