/// \file
/// MindSpore's metrics: clear(), update(...), eval(). Model::eval feeds each batch's
/// (loss, logits, label).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/ir/tensor.h"

namespace loom::nn {

/// One batch's tensors, as Metric::update takes them. On any device: the metrics read device
/// tensors through backend::to_host (Model gives host ones).
struct MetricInputs {
  Tensor loss;    ///< rank 0 (the batch mean)
  Tensor logits;  ///< (N, C)
  Tensor label;   ///< (N,) class indices (Int32/Int64/UInt8) or (N, C) one-hot / probabilities
};

/// A metric accumulated over batches (MindSpore's Metric): clear(), update() per batch, eval().
class Metric {
 public:
  virtual ~Metric() = default;
  /// Forgets everything accumulated.
  virtual void clear() = 0;
  /// Accumulates one batch.
  virtual void update(const MetricInputs& in) = 0;
  /// The metric's value; ValueError when nothing was accumulated (as MindSpore raises
  /// RuntimeError).
  virtual double eval() const = 0;
  /// The accumulated state as numbers that add up across data-parallel ranks (Accuracy: correct
  /// and total; Loss: the loss sum and the samples), and setting it back: Model sums them over
  /// the ranks before eval(), so every rank reports the metric of the whole dataset.
  ///@{
  virtual std::vector<double> sums() const = 0;
  virtual void set_sums(const std::vector<double>& sums) = 0;
  ///@}
};

/// Fraction of samples whose arg-max logit equals the label (arg-max of a 2-D label).
class Accuracy : public Metric {
 public:
  void clear() override;
  /// Counts the batch's samples and the correct ones (logits and label on the host or a device).
  /// ShapeError unless logits are (N, C) with C >= 1 (when N > 0) and the label (N,) or (N, C);
  /// TypeError for (N,) class indices of a non-integer dtype; ValueError when either is undefined.
  void update(const MetricInputs& in) override;
  double eval() const override;
  std::vector<double> sums() const override;
  void set_sums(const std::vector<double>& sums) override;
  /// The samples counted correct, and all the samples counted, since clear().
  ///@{
  std::int64_t correct() const { return correct_; }
  std::int64_t total() const { return total_; }
  ///@}

 private:
  std::int64_t correct_ = 0;
  std::int64_t total_ = 0;
};

/// Mean of the batch losses, weighted by batch size (MindSpore's Loss averages per batch; with
/// equal batches the two agree).
class Loss : public Metric {
 public:
  void clear() override;
  /// Adds the batch's loss times its size (the logits' first dimension, else the label's, else 1).
  /// ShapeError unless the loss is defined, with one element.
  void update(const MetricInputs& in) override;
  double eval() const override;
  std::vector<double> sums() const override;
  void set_sums(const std::vector<double>& sums) override;

 private:
  double sum_ = 0;
  std::int64_t samples_ = 0;
};

}  // namespace loom::nn
