/// \file
/// MindSpore's metrics: clear(), update(...), eval(). Model::eval feeds each batch's
/// (loss, logits, label).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/ir/tensor.h"

namespace loom::nn {

/// On any device: the metrics read device tensors through backend::to_host (Model gives host ones).
struct MetricInputs {
  Tensor loss;    ///< rank 0 (the batch mean)
  Tensor logits;  ///< (N, C)
  Tensor label;   ///< (N,) class indices (Int32/Int64) or (N, C) one-hot / probabilities
};

class Metric {
 public:
  virtual ~Metric() = default;
  virtual void clear() = 0;
  virtual void update(const MetricInputs& in) = 0;
  /// ValueError when nothing was accumulated (as MindSpore raises RuntimeError).
  virtual double eval() const = 0;
  /// The accumulated state as numbers that add up across data-parallel ranks (Accuracy: correct
  /// and total; Loss: the loss sum and the samples), and setting it back: Model sums them over
  /// the ranks before eval(), so every rank reports the metric of the whole dataset.
  virtual std::vector<double> sums() const = 0;
  virtual void set_sums(const std::vector<double>& sums) = 0;
};

/// Fraction of samples whose arg-max logit equals the label (arg-max of a 2-D label).
class Accuracy : public Metric {
 public:
  void clear() override;
  void update(const MetricInputs& in) override;
  double eval() const override;
  std::vector<double> sums() const override;
  void set_sums(const std::vector<double>& sums) override;
  std::int64_t correct() const { return correct_; }
  std::int64_t total() const { return total_; }

 private:
  std::int64_t correct_ = 0;
  std::int64_t total_ = 0;
};

/// Mean of the batch losses, weighted by batch size (MindSpore's Loss averages per batch; with
/// equal batches the two agree).
class Loss : public Metric {
 public:
  void clear() override;
  void update(const MetricInputs& in) override;
  double eval() const override;
  std::vector<double> sums() const override;
  void set_sums(const std::vector<double>& sums) override;

 private:
  double sum_ = 0;
  std::int64_t samples_ = 0;
};

}  // namespace loom::nn
