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

#include <cstddef>
#include <cstdint>
#include <memory>
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

// One histogram's work as tasks that several threads can share: task 0 sums the moments over the
// whole tensor, each further task counts the buckets of one block of kBlock values (its own
// range pass first, so tasks need no order). finish() adds the blocks' counts (exact) and builds
// the proto: bit for bit make_histogram's (make_histogram runs the same tasks in turn). For a
// caller with several tensors (the collector at a collected step): a tensor much larger than the
// rest no longer keeps one thread busy while the others wait.
//
//   HistogramParts parts(tensor);  // reads the tensor in place: keep it alive and unchanged
//   pool.parallel_for(parts.num_tasks(), 1, [&](std::int64_t b, std::int64_t e) {
//     for (; b < e; ++b) parts.run(b);
//   });
//   Histogram h = parts.finish();
class HistogramParts {
 public:
  static constexpr std::size_t kBlock = 16384;

  explicit HistogramParts(std::span<const float> values);
  explicit HistogramParts(std::span<const double> values);
  // Float32 / float64 read in place; other dtypes converted to double here.
  explicit HistogramParts(const Tensor& t);
  HistogramParts(HistogramParts&&) noexcept;
  HistogramParts& operator=(HistogramParts&&) noexcept;
  ~HistogramParts();

  std::int64_t num_tasks() const;
  // Values task i reads (to hand out the largest first).
  std::int64_t task_size(std::int64_t i) const;
  // Tasks may run concurrently, each once, in any order.
  void run(std::int64_t i);
  // After every task ran.
  Histogram finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace loom::summary
