// Histograms as TensorBoard expects them: TensorFlow's default bucket limits (tensorflow/core/lib/
// histogram/histogram.cc) and its HistogramProto encoding.
//
// Limits: -DBL_MAX, -1e-12·1.1^K, ..., -1e-12, 0, 1e-12, 1e-12·1.1, ..., 1e-12·1.1^K, DBL_MAX
// (K the last k with 1e-12·1.1^k < 1e20; each limit is computed by repeated multiplication, as
// TensorFlow does). A value x counts in the bucket of the first limit > x, so bucket i holds
// [limit[i-1], limit[i]). HistogramProto lists, in order, each non-empty bucket and each run of
// empty buckets collapsed into one entry (count 0, limit = the run's last limit); an empty
// histogram has the single entry (DBL_MAX, 0). NaN and ±inf are left out (TensorFlow's histogram
// has no bucket for them) and counted in the returned `skipped`.
//
// Cost: two passes. The first sums min, max, Σx, Σx² in eight lanes (AVX-512 where built for
// it); the second buckets: a value's bucket comes from a table indexed by its exponent and top
// mantissa bits plus one comparison (the same bucket a binary search over the limits gives,
// checked by tests/summary). About 1.3 ns a Float32 value on the development machine, a third of
// the single pass with dependent double additions before (bench/README.md, "Summaries").
// Float32 / float64 tensors are read in place (no conversion copy).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/ir/tensor.h"
#include "summary/proto/tensorboard.pb.h"

namespace loom::summary {

const std::vector<double>& default_bucket_limits();

struct Histogram {
  tb::HistogramProto proto;
  std::int64_t skipped = 0;  // NaN and ±inf values left out
};

Histogram make_histogram(std::span<const double> values);
Histogram make_histogram(std::span<const float> values);
// Any numeric dtype (values converted to double).
Histogram make_histogram(const Tensor& t);

}  // namespace loom::summary
