// nn/metrics.h: Accuracy and Loss, accumulated on the host from each batch's tensors.
#include "nn/metrics.h"

#include <cmath>
#include <string>

#include "backends/backend.h"
#include "core/ir/error.h"

namespace loom::nn {
namespace {

// The index of the largest of row[0..n), as numpy's argmax: ties go to the first index and a NaN
// counts as the largest (the first NaN wins).
std::int64_t argmax_row(const std::vector<double>& v, std::int64_t row, std::int64_t n) {
  const double* r = v.data() + row * n;
  std::int64_t best = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    if (std::isnan(r[j])) return j;
    if (r[j] > r[best]) best = j;
  }
  return best;
}

bool is_integer_dtype(DType dtype) {
  return dtype == DType::kInt32 || dtype == DType::kInt64 || dtype == DType::kUInt8;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Accuracy

void Accuracy::clear() {
  correct_ = 0;
  total_ = 0;
}

void Accuracy::update(const MetricInputs& in) {
  const Tensor& logits = in.logits;
  const Tensor& label = in.label;
  if (!logits.defined() || !label.defined()) {
    throw ValueError("Accuracy.update: expected logits and label tensors, got an undefined one");
  }
  if (logits.rank() != 2) {
    throw ShapeError("Accuracy.update: expected logits of rank 2 (N, C), got " +
                     shape_to_string(logits.shape()));
  }
  const std::int64_t n = logits.dim(0), c = logits.dim(1);
  const bool sparse = label.rank() == 1;
  if (sparse ? label.dim(0) != n : label.shape() != logits.shape()) {
    throw ShapeError("Accuracy.update: expected a label of shape (" + std::to_string(n) +
                     ") (class indices) or " + shape_to_string(logits.shape()) +
                     " (one-hot / probabilities) for logits " + shape_to_string(logits.shape()) +
                     ", got " + shape_to_string(label.shape()));
  }
  if (sparse && !is_integer_dtype(label.dtype())) {
    throw TypeError("Accuracy.update: expected class indices of an integer dtype, got " +
                    std::string(dtype_name(label.dtype())));
  }
  if (n > 0 && c == 0) {
    throw ShapeError("Accuracy.update: expected at least one class, got logits " +
                     shape_to_string(logits.shape()));
  }
  // Device tensors (a caller's own, Model hands host ones) are copied to the host first.
  const std::vector<double> y = backend::to_host(logits).to_doubles();
  const std::vector<double> t = backend::to_host(label).to_doubles();
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t pred = argmax_row(y, i, c);
    const double target =
        sparse ? t[static_cast<std::size_t>(i)] : static_cast<double>(argmax_row(t, i, c));
    if (static_cast<double>(pred) == target) ++correct_;
  }
  total_ += n;
}

double Accuracy::eval() const {
  if (total_ == 0) {
    throw ValueError("Accuracy.eval: expected samples accumulated by update(), got 0 (the "
                     "accuracy of no samples can not be calculated)");
  }
  return static_cast<double>(correct_) / static_cast<double>(total_);
}

std::vector<double> Accuracy::sums() const {
  return {static_cast<double>(correct_), static_cast<double>(total_)};
}

void Accuracy::set_sums(const std::vector<double>& sums) {
  if (sums.size() != 2) throw InternalError("Accuracy.set_sums: expected 2 values");
  correct_ = static_cast<std::int64_t>(sums[0]);
  total_ = static_cast<std::int64_t>(sums[1]);
}

// ---------------------------------------------------------------------------------------------
// Loss

void Loss::clear() {
  sum_ = 0;
  samples_ = 0;
}

void Loss::update(const MetricInputs& in) {
  if (!in.loss.defined() || in.loss.numel() != 1) {
    throw ShapeError("Loss.update: expected a loss with one element (the batch mean), got " +
                     (in.loss.defined() ? shape_to_string(in.loss.shape()) : std::string("none")));
  }
  // The batch size: from the logits, else from the label; a batch without either counts as one.
  std::int64_t n = 1;
  if (in.logits.defined() && in.logits.rank() >= 1) {
    n = in.logits.dim(0);
  } else if (in.label.defined() && in.label.rank() >= 1) {
    n = in.label.dim(0);
  }
  sum_ += backend::to_host(in.loss).get(0) * static_cast<double>(n);
  samples_ += n;
}

double Loss::eval() const {
  if (samples_ == 0) {
    throw ValueError("Loss.eval: expected samples accumulated by update(), got 0 (the loss of "
                     "no samples can not be calculated)");
  }
  return sum_ / static_cast<double>(samples_);
}

std::vector<double> Loss::sums() const { return {sum_, static_cast<double>(samples_)}; }

void Loss::set_sums(const std::vector<double>& sums) {
  if (sums.size() != 2) throw InternalError("Loss.set_sums: expected 2 values");
  sum_ = sums[0];
  samples_ = static_cast<std::int64_t>(sums[1]);
}

}  // namespace loom::nn
