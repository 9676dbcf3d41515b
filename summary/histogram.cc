#include "summary/histogram.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>

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

Histogram make_histogram(std::span<const double> values) {
  const std::vector<double>& limits = default_bucket_limits();
  std::vector<double> counts(limits.size(), 0.0);
  Histogram h;
  double mn = std::numeric_limits<double>::max(), mx = -std::numeric_limits<double>::max();
  double num = 0, sum = 0, sum_sq = 0;
  for (double x : values) {
    if (!std::isfinite(x)) {
      ++h.skipped;
      continue;
    }
    // The first limit > x; x < DBL_MAX always for a finite x except DBL_MAX itself, which TF
    // would also put past the end: clamp it into the last bucket.
    auto idx = static_cast<std::size_t>(std::upper_bound(limits.begin(), limits.end(), x) -
                                        limits.begin());
    if (idx >= limits.size()) idx = limits.size() - 1;
    counts[idx] += 1.0;
    mn = std::min(mn, x);
    mx = std::max(mx, x);
    num += 1;
    sum += x;
    sum_sq += x * x;
  }
  tb::HistogramProto& p = h.proto;
  p.set_min(mn);
  p.set_max(mx);
  p.set_num(num);
  p.set_sum(sum);
  p.set_sum_squares(sum_sq);
  for (std::size_t i = 0; i < counts.size();) {
    double end = limits[i];
    double count = counts[i];
    ++i;
    if (count <= 0.0) {
      while (i < counts.size() && counts[i] <= 0.0) {
        end = limits[i];
        count = counts[i];
        ++i;
      }
    }
    p.add_bucket_limit(end);
    p.add_bucket(count);
  }
  if (p.bucket_size() == 0) {
    p.add_bucket_limit(DBL_MAX);
    p.add_bucket(0.0);
  }
  return h;
}

Histogram make_histogram(const Tensor& t) {
  const std::vector<double> v = t.to_doubles();
  return make_histogram(std::span<const double>(v));
}

}  // namespace loom::summary
