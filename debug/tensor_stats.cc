// Tensor statistics and the non-finite count (debug/tensor_stats.h).
#include "debug/tensor_stats.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backends/thread_pool.h"

namespace loom::debug {

namespace {

constexpr int kLanes = 8;   // double accumulators of the sums
constexpr int kWide = 16;   // element-type lanes of the extremes and counts

struct Partial {
  std::int64_t non_finite = 0, zero = 0, negative = 0, positive = 0;
  double sum = 0, abs_sum = 0, sum_sq = 0;
  double min = std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
};

// The sums (every element: exact when all are finite), then extremes and counts.
template <typename T>
void accumulate(const T* p, std::int64_t n, Partial& b) {
  double s[kLanes] = {}, a[kLanes] = {}, q[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const double v = static_cast<double>(p[i + k]);
      s[k] += v;
      a[k] += std::fabs(v);
      q[k] += v * v;
    }
  }
  for (; i < n; ++i) {
    const double v = static_cast<double>(p[i]);
    s[0] += v;
    a[0] += std::fabs(v);
    q[0] += v * v;
  }
  for (int k = 0; k < kLanes; ++k) {
    b.sum += s[k];
    b.abs_sum += a[k];
    b.sum_sq += q[k];
  }
  constexpr std::int64_t kBlock = std::int64_t{1} << 24;  // 32-bit counters, flushed per block
  for (std::int64_t start = 0; start < n; start += kBlock) {
    const std::int64_t m = std::min(kBlock, n - start);
    const T* x = p + start;
    T lo[kWide], hi[kWide];
    std::int32_t z[kWide] = {}, bad[kWide] = {}, neg[kWide] = {}, pos[kWide] = {};
    for (int k = 0; k < kWide; ++k) {
      lo[k] = std::numeric_limits<T>::infinity();
      hi[k] = -std::numeric_limits<T>::infinity();
    }
    std::int64_t j = 0;
    for (; j + kWide <= m; j += kWide) {
      for (int k = 0; k < kWide; ++k) {
        const T v = x[j + k];
        lo[k] = v < lo[k] ? v : lo[k];  // NaN compares false: left out
        hi[k] = v > hi[k] ? v : hi[k];
        z[k] += v == 0;
        neg[k] += v < 0;
        pos[k] += v > 0;
        bad[k] += !(v - v == 0);  // NaN and ±Inf
      }
    }
    for (; j < m; ++j) {
      const T v = x[j];
      lo[0] = v < lo[0] ? v : lo[0];
      hi[0] = v > hi[0] ? v : hi[0];
      z[0] += v == 0;
      neg[0] += v < 0;
      pos[0] += v > 0;
      bad[0] += !(v - v == 0);
    }
    for (int k = 0; k < kWide; ++k) {
      b.min = std::min(b.min, static_cast<double>(lo[k]));
      b.max = std::max(b.max, static_cast<double>(hi[k]));
      b.zero += z[k];
      b.negative += neg[k];
      b.positive += pos[k];
      b.non_finite += bad[k];
    }
  }
}

// NaN and ±Inf counted apart, and the sums over the finite elements only.
template <typename T>
void exact_non_finite(const T* p, std::int64_t n, TensorStats& s, Partial& b) {
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(p[i]);
    if (std::isnan(v)) {
      ++s.nan;
    } else if (std::isinf(v)) {
      (v > 0 ? s.pos_inf : s.neg_inf)++;
    } else {
      b.sum += v;
      b.abs_sum += std::fabs(v);
      b.sum_sq += v * v;
    }
  }
}

template <typename Get>
TensorStats integer_stats(std::int64_t n, Get get) {
  TensorStats s;
  s.count = n;
  double max = -std::numeric_limits<double>::infinity();
  double min = std::numeric_limits<double>::infinity();
  double sum = 0, sum_sq = 0, sum_abs = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = get(i);
    max = std::max(max, v);
    min = std::min(min, v);
    s.negative += v < 0;
    s.positive += v > 0;
    s.zero += v == 0;
    sum += v;
    sum_sq += v * v;
    sum_abs += std::fabs(v);
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  s.max = n ? max : nan;
  s.min = n ? min : nan;
  s.mean = n ? sum / static_cast<double>(n) : nan;
  s.abs_mean = n ? sum_abs / static_cast<double>(n) : nan;
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
  if (!is_floating(t.dtype())) return integer_stats(n, [&t](std::int64_t i) { return t.get(i); });
  TensorStats s;
  s.count = n;
  Partial b;
  for_float_values(t, [&b](const auto* p, std::int64_t m) { accumulate(p, m, b); });
  s.zero = b.zero;
  s.negative = b.negative;
  s.positive = b.positive;
  if (b.non_finite > 0) {
    b.sum = b.abs_sum = b.sum_sq = 0;
    for_float_values(t, [&](const auto* p, std::int64_t m) { exact_non_finite(p, m, s, b); });
  }
  const std::int64_t finite = n - s.non_finite();
  const std::int64_t seen = n - s.nan;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  s.max = seen ? b.max : nan;
  s.min = seen ? b.min : nan;
  s.mean = finite ? b.sum / static_cast<double>(finite) : nan;
  s.abs_mean = finite ? b.abs_sum / static_cast<double>(finite) : nan;
  s.l2norm = std::sqrt(b.sum_sq);
  return s;
}

namespace {

std::int64_t count_range(DType dtype, const void* p, std::int64_t n) {
  switch (dtype) {
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

}  // namespace

std::int64_t count_non_finite(const Tensor& t) {
  if (!is_floating(t.dtype())) return 0;
  const auto* p = static_cast<const unsigned char*>(t.raw_data());
  const std::int64_t n = t.numel();
  const std::size_t size = dtype_size(t.dtype());
  // Large tensors are split over the thread pool (a memory-bound scan: ResNet-18's step at
  // batch 32 checks about 0.5 GB of outputs); small ones are not worth waking it.
  constexpr std::int64_t kGrain = std::int64_t{1} << 18;
  if (n < 2 * kGrain) return count_range(t.dtype(), p, n);
  std::vector<std::int64_t> partial(
      static_cast<std::size_t>(backend::ThreadPool::num_chunks(n, kGrain)), 0);
  backend::ThreadPool::global().parallel_for(n, kGrain, [&](std::int64_t lo, std::int64_t hi) {
    partial[static_cast<std::size_t>(lo / kGrain)] =
        count_range(t.dtype(), p + static_cast<std::size_t>(lo) * size, hi - lo);
  });
  std::int64_t total = 0;
  for (std::int64_t c : partial) total += c;
  return total;
}

}  // namespace loom::debug
