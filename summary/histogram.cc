#include "summary/histogram.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <limits>
#include <type_traits>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

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
// k0 = the number of limits <= the cell's lowest value; then upper_bound(x) = k0 + (x >=
// limits[k0]). That comparison is made in float against flimits[k0], the smallest float >=
// limits[k0] (+inf above the float range, -FLT_MAX for -DBL_MAX): for a float x, x >= that float
// exactly when double(x) >= limits[k0].
class FloatBucketIndex {
 public:
  FloatBucketIndex() {
    const std::vector<double>& l = default_bucket_limits();
    flimits_.resize(l.size());
    for (std::size_t k = 0; k < l.size(); ++k) {
      float f = static_cast<float>(l[k]);  // nearest; step up to the first float >= l[k]
      if (std::isinf(f) || static_cast<double>(f) < l[k]) f = std::nextafter(f, INFINITY);
      if (l[k] > FLT_MAX) f = INFINITY;
      if (l[k] < -FLT_MAX) f = -FLT_MAX;
      flimits_[k] = f;
    }
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

  // A copy of the pointers in locals, so that the hot loop keeps them in registers.
  struct View {
    const std::uint16_t* table;
    const float* flimits;
    // The bucket of a finite x.
    std::size_t operator()(float x) const {
      const std::size_t k0 = table[std::bit_cast<std::uint32_t>(x) >> 17];
      return k0 + static_cast<std::size_t>(x >= flimits[k0]);
    }
  };
  View view() const { return {table_.data(), flimits_.data()}; }

 private:
  std::vector<float> flimits_;
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

// The moments of the finite values: pass one. Eight independent lanes (the compiler keeps them
// in one vector register), combined in a fixed order, so the result depends only on the values
// (not on the machine's vector width), and no loop-carried chain of dependent additions limits
// the pass.
struct Moments {
  double mn = std::numeric_limits<double>::max(), mx = -std::numeric_limits<double>::max();
  double sum = 0, sum_sq = 0;
  std::int64_t finite = 0;
};

// The portable pass: lanes j = i mod 8.
template <class T>
void moments_lanes(const T* values, std::size_t n, double* mn, double* mx, double* s, double* q,
                   double* c) {
  constexpr std::size_t L = 8;
  constexpr double kBig = std::numeric_limits<double>::max();
  auto add = [&](std::size_t j, double x) {
    const bool finite = std::fabs(x) <= kBig;  // false for NaN and ±inf
    const double v = finite ? x : 0.0;
    s[j] += v;
    q[j] += v * v;
    c[j] += finite ? 1.0 : 0.0;
    mn[j] = std::min(mn[j], finite ? x : kBig);
    mx[j] = std::max(mx[j], finite ? x : -kBig);
  };
  std::size_t i = 0;
  for (; i + L <= n; i += L) {
    for (std::size_t j = 0; j < L; ++j) add(j, static_cast<double>(values[i + j]));
  }
  for (std::size_t j = 0; i < n; ++i, ++j) add(j, static_cast<double>(values[i]));
}

#if defined(__AVX512F__)
// The same lanes with AVX-512, 16 floats a step: elements 0-7 into one set of accumulators,
// 8-15 into a second, the two added lane by lane at the end. Lane j still sums the elements
// i ≡ j mod 8, grouped differently, so sum and sum_squares may differ from the portable pass in
// their last bits; each build's result depends only on the values. (GCC 12 warns about its own
// intrinsics' undefined registers here.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
void moments_lanes(const float* values, std::size_t n, double* mn, double* mx, double* s,
                   double* q, double* c) {
  const __m512d big = _mm512_set1_pd(std::numeric_limits<double>::max());
  const __m512d one = _mm512_set1_pd(1.0);
  __m512d s0 = _mm512_loadu_pd(s), q0 = _mm512_loadu_pd(q), c0 = _mm512_loadu_pd(c);
  __m512d mn0 = _mm512_loadu_pd(mn), mx0 = _mm512_loadu_pd(mx);
  __m512d s1 = _mm512_setzero_pd(), q1 = s1, c1 = s1;
  __m512d mn1 = big, mx1 = _mm512_sub_pd(s1, big);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(values + i);
    const __m512d a = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
    const __m512d b = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    const __mmask8 fa = _mm512_cmp_pd_mask(_mm512_abs_pd(a), big, _CMP_LE_OQ);
    const __mmask8 fb = _mm512_cmp_pd_mask(_mm512_abs_pd(b), big, _CMP_LE_OQ);
    s0 = _mm512_mask_add_pd(s0, fa, s0, a);
    s1 = _mm512_mask_add_pd(s1, fb, s1, b);
    q0 = _mm512_mask3_fmadd_pd(a, a, q0, fa);
    q1 = _mm512_mask3_fmadd_pd(b, b, q1, fb);
    c0 = _mm512_mask_add_pd(c0, fa, c0, one);
    c1 = _mm512_mask_add_pd(c1, fb, c1, one);
    mn0 = _mm512_mask_min_pd(mn0, fa, mn0, a);
    mn1 = _mm512_mask_min_pd(mn1, fb, mn1, b);
    mx0 = _mm512_mask_max_pd(mx0, fa, mx0, a);
    mx1 = _mm512_mask_max_pd(mx1, fb, mx1, b);
  }
  _mm512_storeu_pd(s, _mm512_add_pd(s0, s1));
  _mm512_storeu_pd(q, _mm512_add_pd(q0, q1));
  _mm512_storeu_pd(c, _mm512_add_pd(c0, c1));
  _mm512_storeu_pd(mn, _mm512_min_pd(mn0, mn1));
  _mm512_storeu_pd(mx, _mm512_max_pd(mx0, mx1));
  moments_lanes<float>(values + i, n - i, mn, mx, s, q, c);
}
#pragma GCC diagnostic pop
#endif

template <class T>
Moments moments(const T* values, std::size_t n) {
  constexpr std::size_t L = 8;
  constexpr double kBig = std::numeric_limits<double>::max();
  double mn[L], mx[L], s[L], q[L], c[L];
  for (std::size_t j = 0; j < L; ++j) mn[j] = kBig, mx[j] = -kBig, s[j] = q[j] = c[j] = 0;
  moments_lanes(values, n, mn, mx, s, q, c);
  Moments m;
  double count = 0;
  for (std::size_t j = 0; j < L; ++j) {
    m.mn = std::min(m.mn, mn[j]);
    m.mx = std::max(m.mx, mx[j]);
    m.sum += s[j];
    m.sum_sq += q[j];
    count += c[j];
  }
  m.finite = static_cast<std::int64_t>(count);
  return m;
}

// The bucket counts: pass two. Four count arrays (reused by each thread) taken in turn:
// consecutive values that fall in the same bucket (most of a weight tensor's values) then update
// different counters, not one counter in a chain of dependent increments.
template <class T, class Index>
#if defined(__GNUC__) && !defined(__clang__)
// GCC's SLP vectorizer packs the index arithmetic into vectors spilled to the stack every value.
__attribute__((optimize("no-tree-slp-vectorize")))
#endif
void count_with(const T* values, std::size_t n, bool all_finite, std::uint32_t* lane,
                std::size_t nb, Index bucket) {
  std::uint32_t* __restrict l0 = lane;
  std::uint32_t* __restrict l1 = lane + nb;
  std::uint32_t* __restrict l2 = lane + 2 * nb;
  std::uint32_t* __restrict l3 = lane + 3 * nb;
  std::size_t i = 0;
  if (all_finite) {
    for (; i + 4 <= n; i += 4) {
      const std::size_t b0 = bucket(values[i]), b1 = bucket(values[i + 1]);
      const std::size_t b2 = bucket(values[i + 2]), b3 = bucket(values[i + 3]);
      ++l0[b0];
      ++l1[b1];
      ++l2[b2];
      ++l3[b3];
    }
    for (; i < n; ++i) ++l0[bucket(values[i])];
    return;
  }
  for (; i < n; ++i) {
    if (std::isfinite(values[i])) [[likely]] ++l0[bucket(values[i])];
  }
}

void count_buckets(const float* values, std::size_t n, bool all_finite, std::uint32_t* lane,
                   std::size_t nb) {
  const FloatBucketIndex& findex = float_bucket_index();
  if (findex.ok()) {
    count_with(values, n, all_finite, lane, nb, findex.view());
  } else {
    count_with(values, n, all_finite, lane, nb,
               [index = bucket_index().view()](float x) { return index(x); });
  }
}

void count_buckets(const double* values, std::size_t n, bool all_finite, std::uint32_t* lane,
                   std::size_t nb) {
  count_with(values, n, all_finite, lane, nb, bucket_index().view());
}

// The finite values' min, max and count in one block: where its buckets lie (pass one of a
// block; the moments are the whole tensor's, task 0).
template <class T>
struct Range {
  T mn = std::numeric_limits<T>::max(), mx = -std::numeric_limits<T>::max();
  std::size_t finite = 0;
};

template <class T>
Range<T> finite_range(const T* values, std::size_t n) {
  constexpr T kBig = std::numeric_limits<T>::max();
  // A vector register's worth of independent lanes, in the form GCC vectorizes (compare and
  // select; counters as wide as T): ≈ 0.09 ns a Float32 value, against 0.6 for the plain loop.
  constexpr std::size_t L = 64 / sizeof(T);
  using Count = std::conditional_t<sizeof(T) == 4, std::int32_t, std::int64_t>;
  T mn[L], mx[L];
  Count finite[L];
  for (std::size_t j = 0; j < L; ++j) mn[j] = kBig, mx[j] = -kBig, finite[j] = 0;
  std::size_t i = 0;
  for (; i + L <= n; i += L) {
    for (std::size_t j = 0; j < L; ++j) {
      const T x = values[i + j];
      const bool f = std::fabs(x) <= kBig;  // false for NaN and ±inf
      const T low = f ? x : kBig, high = f ? x : -kBig;
      mn[j] = low < mn[j] ? low : mn[j];
      mx[j] = high > mx[j] ? high : mx[j];
      finite[j] += f ? Count{1} : Count{0};
    }
  }
  for (std::size_t j = 0; i < n; ++i, ++j) {
    const T x = values[i];
    const bool f = std::fabs(x) <= kBig;
    mn[j] = std::min(mn[j], f ? x : kBig);
    mx[j] = std::max(mx[j], f ? x : -kBig);
    finite[j] += f ? Count{1} : Count{0};
  }
  Range<T> r;
  for (std::size_t j = 0; j < L; ++j) {
    r.mn = std::min(r.mn, mn[j]);
    r.mx = std::max(r.mx, mx[j]);
    r.finite += static_cast<std::size_t>(finite[j]);
  }
  return r;
}

// One block's bucket counts: buckets lo .. lo + counts.size() - 1.
struct BlockCounts {
  std::size_t lo = 0;
  std::vector<std::uint32_t> counts;
};

template <class T>
void count_block(const T* values, std::size_t n, BlockCounts& out) {
  const Range<T> r = finite_range(values, n);
  out.counts.clear();
  if (r.finite == 0) return;
  const std::size_t nb = default_bucket_limits().size();
  const BucketIndex::View index = bucket_index().view();
  const std::size_t lo = index(static_cast<double>(r.mn)), hi = index(static_cast<double>(r.mx));
  // Four count arrays reused by each thread; only buckets lo..hi can be hit: only they are
  // cleared and read.
  thread_local std::vector<std::uint32_t> lanes;
  if (lanes.size() != 4 * nb) lanes.assign(4 * nb, 0);
  std::uint32_t* lane = lanes.data();
  for (std::size_t l = 0; l < 4; ++l) std::fill(lane + l * nb + lo, lane + l * nb + hi + 1, 0u);
  count_buckets(values, n, r.finite == n, lane, nb);
  out.lo = lo;
  out.counts.resize(hi - lo + 1);
  for (std::size_t b = lo; b <= hi; ++b)
    out.counts[b - lo] = lane[b] + lane[nb + b] + lane[2 * nb + b] + lane[3 * nb + b];
}

}  // namespace

struct HistogramParts::State {
  const float* f = nullptr;
  const double* d = nullptr;
  std::size_t n = 0;
  std::vector<double> converted;  // other dtypes' values
  Moments moments;
  std::vector<BlockCounts> blocks;

  std::size_t blocks_needed() const { return (n + kBlock - 1) / kBlock; }
};

HistogramParts::HistogramParts(std::span<const float> values) : state_(std::make_unique<State>()) {
  state_->f = values.data();
  state_->n = values.size();
  state_->blocks.resize(state_->blocks_needed());
}

HistogramParts::HistogramParts(std::span<const double> values)
    : state_(std::make_unique<State>()) {
  state_->d = values.data();
  state_->n = values.size();
  state_->blocks.resize(state_->blocks_needed());
}

HistogramParts::HistogramParts(const Tensor& t) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.n = static_cast<std::size_t>(t.numel());
  if (t.dtype() == DType::kFloat32) {
    s.f = t.data<float>();
  } else if (t.dtype() == DType::kFloat64) {
    s.d = t.data<double>();
  } else {
    s.converted = t.to_doubles();
    s.d = s.converted.data();
  }
  s.blocks.resize(s.blocks_needed());
}

HistogramParts::HistogramParts(HistogramParts&&) noexcept = default;
HistogramParts& HistogramParts::operator=(HistogramParts&&) noexcept = default;
HistogramParts::~HistogramParts() = default;

std::int64_t HistogramParts::num_tasks() const {
  return 1 + static_cast<std::int64_t>(state_->blocks.size());
}

std::int64_t HistogramParts::task_size(std::int64_t i) const {
  const State& s = *state_;
  if (i == 0) return static_cast<std::int64_t>(s.n);
  const std::size_t begin = static_cast<std::size_t>(i - 1) * kBlock;
  return static_cast<std::int64_t>(std::min(kBlock, s.n - begin));
}

void HistogramParts::run(std::int64_t i) {
  State& s = *state_;
  if (i == 0) {
    s.moments = s.f ? moments(s.f, s.n) : moments(s.d, s.n);
    return;
  }
  const std::size_t begin = static_cast<std::size_t>(i - 1) * kBlock;
  const std::size_t len = std::min(kBlock, s.n - begin);
  BlockCounts& out = s.blocks[static_cast<std::size_t>(i - 1)];
  if (s.f) {
    count_block(s.f + begin, len, out);
  } else {
    count_block(s.d + begin, len, out);
  }
}

Histogram HistogramParts::finish() {
  const State& s = *state_;
  const std::vector<double>& limits = default_bucket_limits();
  const std::size_t nb = limits.size();
  const Moments& m = s.moments;
  // Only buckets lo..hi (those of min and max) can be non-empty: only they are listed; the empty
  // runs on either side are one entry each, as the full scan gives.
  std::size_t lo = 0, hi = nb - 1;
  if (m.finite > 0) {
    const BucketIndex::View index = bucket_index().view();
    lo = index(m.mn);
    hi = index(m.mx);
  }
  std::vector<std::uint64_t> counts(hi - lo + 1, 0);
  for (const BlockCounts& b : s.blocks)
    for (std::size_t k = 0; k < b.counts.size(); ++k) counts[b.lo + k - lo] += b.counts[k];
  Histogram h;
  h.skipped = static_cast<std::int64_t>(s.n) - m.finite;
  tb::HistogramProto& p = h.proto;
  p.set_min(m.mn);
  p.set_max(m.mx);
  p.set_num(static_cast<double>(m.finite));
  p.set_sum(m.sum);
  p.set_sum_squares(m.sum_sq);
  auto count = [&](std::size_t b) { return static_cast<double>(counts[b - lo]); };
  // At most one entry per bucket in lo..hi, plus one on each side.
  p.mutable_bucket_limit()->Reserve(static_cast<int>(hi - lo + 3));
  p.mutable_bucket()->Reserve(static_cast<int>(hi - lo + 3));
  // Each non-empty bucket, and each run of empty buckets collapsed into one entry.
  if (lo > 0) {
    p.add_bucket_limit(limits[lo - 1]);
    p.add_bucket(0.0);
  }
  for (std::size_t i = lo; i <= hi;) {
    double end = limits[i];
    const double c = count(i);
    ++i;
    if (c <= 0.0) {
      while (i <= hi && count(i) <= 0.0) ++i;
      end = limits[i - 1];
    }
    p.add_bucket_limit(end);
    p.add_bucket(c);
  }
  if (hi < nb - 1) {
    p.add_bucket_limit(limits[nb - 1]);
    p.add_bucket(0.0);
  }
  return h;
}

namespace {

Histogram build(HistogramParts parts) {
  for (std::int64_t i = 0; i < parts.num_tasks(); ++i) parts.run(i);
  return parts.finish();
}

}  // namespace

Histogram make_histogram(std::span<const double> values) {
  return build(HistogramParts(values));
}

Histogram make_histogram(std::span<const float> values) {
  return build(HistogramParts(values));
}

Histogram make_histogram(const Tensor& t) { return build(HistogramParts(t)); }

}  // namespace loom::summary
