#include "summary/histogram.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <limits>
#include <type_traits>

namespace loom::summary {

const std::vector<double>& default_bucket_limits() {
  static const std::vector<double> limits = [] {
    std::vector<double> pos;
    for (double v = 1.0e-12; v < 1.0e20; v *= 1.1) pos.push_back(v);
    pos.push_back(DBL_MAX);
    std::vector<double> all;
    all.reserve(2 * pos.size() + 1);
    for (auto it = pos.rbegin(); it != pos.rend(); ++it) all.push_back(-*it);
    all.push_back(0.0);
    all.insert(all.end(), pos.begin(), pos.end());
    return all;
  }();
  return limits;
}

namespace {

// The bucket of a value without a binary search over the limits. The limits are
// -pos[P-1..0], 0, pos[0..P-1] (pos = 1e-12·1.1^k ..., DBL_MAX; 0 at index P). For y = |x| the
// bucket needs the first k with pos[k] > y (x >= 0) or with pos[k] >= y (x < 0). A table indexed
// by y's exponent and top 6 mantissa bits gives the first k with pos[k] >= the cell's lower end;
// a cell spans a ratio < 1.011 (< 1.1), so at most one limit lies inside it and one comparison
// finishes the search: the same comparisons as upper_bound, so the same bucket, without
// data-dependent branches. Cells below pos[0]'s map to 0, cells past the last finite limit's to
// P-1 (DBL_MAX).
class BucketIndex {
 public:
  BucketIndex() {
    const std::vector<double>& limits = default_bucket_limits();
    p_ = (limits.size() - 1) / 2;
    pos_ = limits.data() + p_ + 1;
    base_ = (std::bit_cast<std::uint64_t>(pos_[0]) >> kShift) - 1;
    const std::uint64_t hi_cell = std::bit_cast<std::uint64_t>(pos_[p_ - 2]) >> kShift;
    table_.resize(hi_cell - base_ + 2);
    table_.front() = 0;
    std::size_t k = 0;
    for (std::uint64_t c = base_ + 1; c <= hi_cell; ++c) {
      const double lo = std::bit_cast<double>(c << kShift);
      while (k < p_ && pos_[k] < lo) ++k;
      table_[c - base_] = static_cast<std::uint16_t>(k);
    }
    table_.back() = static_cast<std::uint16_t>(p_ - 1);
  }

  // A copy of the fields in locals, so that the hot loop keeps them in registers.
  struct View {
    std::size_t p;
    const double* pos;
    const std::uint16_t* table;
    std::uint64_t base, last;

    // The index into the limits of the first limit > x (clamped to the last), x finite.
    std::size_t operator()(double x) const {
      const double y = std::fabs(x);
      const std::uint64_t cell = std::bit_cast<std::uint64_t>(y) >> kShift;
      std::size_t k = table[std::clamp<std::uint64_t>(cell, base, last) - base];
      // Branch-free (the sign of weights is random: a branch on it mispredicts half the time).
      const std::size_t neg = x < 0;  // -0.0 is not: it goes with 0
      const double lim = pos[k];
      k += static_cast<std::size_t>(lim < y) | (static_cast<std::size_t>(lim == y) & (neg ^ 1));
      const std::size_t up = p + 1 + std::min(k, p - 1), down = p - k;
      const std::size_t mask = std::size_t{0} - neg;  // all ones for x < 0
      return (down & mask) | (up & ~mask);
    }
  };
  View view() const { return {p_, pos_, table_.data(), base_, base_ + table_.size() - 1}; }

 private:
  static constexpr int kShift = 52 - 6;

  std::size_t p_;
  const double* pos_;
  std::uint64_t base_;  // the cell of table_[0] (one below pos[0]'s)
  std::vector<std::uint16_t> table_;
};

// For float32 values a finer shortcut: a table over the float's top 15 bits (sign, exponent, 6
// mantissa bits), each cell an interval of floats holding at most one limit (checked here), with
// k0 = the number of limits <= the cell's lowest value; then
// upper_bound(x) = k0 + (x >= limits[k0]).
class FloatBucketIndex {
 public:
  FloatBucketIndex() {
    const std::vector<double>& l = default_bucket_limits();
    limits_ = l.data();
    table_.resize(std::size_t{1} << 15);
    for (std::uint32_t c = 0; c < table_.size(); ++c) {
      const std::uint32_t first = c << 17, last = first | ((1u << 17) - 1);
      // The cell's values run from lo to hi (the sign bit reverses the order for negatives).
      double lo = std::bit_cast<float>(first), hi = std::bit_cast<float>(last);
      if (lo > hi) std::swap(lo, hi);
      if (std::isnan(lo) || std::isnan(hi) || std::isinf(lo) || std::isinf(hi)) continue;  // unused
      auto count_le = [&](double v) {
        return static_cast<std::size_t>(std::upper_bound(l.begin(), l.end(), v) - l.begin());
      };
      const std::size_t k0 = count_le(lo), k1 = count_le(hi);
      if (k1 > k0 + 1 || k0 >= l.size()) ok_ = false;
      table_[c] = static_cast<std::uint16_t>(std::min(k0, l.size() - 1));
    }
  }
  bool ok() const { return ok_; }
  // x finite.
  std::size_t operator()(float x) const {
    const std::size_t k0 = table_[std::bit_cast<std::uint32_t>(x) >> 17];
    return k0 + static_cast<std::size_t>(static_cast<double>(x) >= limits_[k0]);
  }

 private:
  const double* limits_;
  std::vector<std::uint16_t> table_;
  bool ok_ = true;
};

const FloatBucketIndex& float_bucket_index() {
  static const FloatBucketIndex index;
  return index;
}

const BucketIndex& bucket_index() {
  static const BucketIndex index;
  return index;
}

template <class T>
#if defined(__GNUC__) && !defined(__clang__)
// GCC's SLP vectorizer packs the accumulators into a vector spilled to the stack every value.
__attribute__((optimize("no-tree-slp-vectorize")))
#endif
Histogram build(const T* values, std::size_t n) {
  const std::vector<double>& limits = default_bucket_limits();
  const BucketIndex::View index = bucket_index().view();
  const FloatBucketIndex& findex = float_bucket_index();
  const bool use_float = findex.ok();
  // Four interleaved count arrays (reused by each thread): consecutive values that fall in the
  // same bucket (most of a weight tensor's values) then update different counters, not one
  // counter in a chain of dependent increments.
  const std::size_t nb = limits.size();
  thread_local std::vector<std::uint32_t> lanes;
  lanes.assign(4 * nb, 0);
  std::uint32_t* const lane = lanes.data();
  Histogram h;
  std::int64_t skipped = 0;
  double mn = std::numeric_limits<double>::max(), mx = -std::numeric_limits<double>::max();
  double num = 0, sum = 0, sum_sq = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double x = static_cast<double>(values[i]);
    if (!std::isfinite(x)) [[unlikely]] {
      ++skipped;
      continue;
    }
    std::size_t b;
    if constexpr (std::is_same_v<T, float>) {
      b = use_float ? std::min(findex(values[i]), nb - 1) : index(x);
    } else {
      b = index(x);
    }
    ++lane[(i & 3) * nb + b];
    mn = std::min(mn, x);
    mx = std::max(mx, x);
    num += 1;
    sum += x;
    sum_sq += x * x;
  }
  h.skipped = skipped;
  std::vector<double> counts(nb);
  for (std::size_t b = 0; b < nb; ++b)
    counts[b] = double(lanes[b]) + double(lanes[nb + b]) + double(lanes[2 * nb + b]) +
                double(lanes[3 * nb + b]);
  tb::HistogramProto& p = h.proto;
  p.set_min(mn);
  p.set_max(mx);
  p.set_num(num);
  p.set_sum(sum);
  p.set_sum_squares(sum_sq);
  // Each non-empty bucket, and each run of empty buckets collapsed into one entry.
  for (std::size_t i = 0; i < counts.size();) {
    double end = limits[i];
    double count = counts[i];
    ++i;
    if (count <= 0.0) {
      while (i < counts.size() && counts[i] <= 0.0) ++i;
      end = limits[i - 1];
    }
    p.add_bucket_limit(end);
    p.add_bucket(count);
  }
  return h;
}

}  // namespace

Histogram make_histogram(std::span<const double> values) {
  return build(values.data(), values.size());
}

Histogram make_histogram(std::span<const float> values) {
  return build(values.data(), values.size());
}

Histogram make_histogram(const Tensor& t) {
  const auto n = static_cast<std::size_t>(t.numel());
  if (t.dtype() == DType::kFloat32) return build(t.data<float>(), n);
  if (t.dtype() == DType::kFloat64) return build(t.data<double>(), n);
  const std::vector<double> v = t.to_doubles();
  return make_histogram(std::span<const double>(v));
}

}  // namespace loom::summary
