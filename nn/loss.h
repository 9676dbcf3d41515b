/// \file
/// Losses: MindSpore's nn loss Cells. Each takes two inputs, construct({logits, labels}), and a
/// reduction of its per-element (or per-sample) loss: "mean" (the default; a rank-0 tensor),
/// "sum" (rank 0) or "none" (the unreduced loss). Any other reduction throws ValueError when the
/// loss is made ("MSELoss: expected reduction 'mean', 'sum' or 'none', got 'avg'").
///
///     auto loss = std::make_shared<SoftmaxCrossEntropyWithLogits>(true);  // sparse
///     ops::Var l = (*loss)({logits, labels});   // labels: Int32/Int64 class indices (N)
#pragma once

#include <string>
#include <vector>

#include "nn/cell.h"

namespace loom::nn {

/// The reduction shared by the losses (MindSpore's LossBase).
class LossBase : public Cell {
 public:
  /// Throws ValueError unless reduction is "mean", "sum" or "none".
  LossBase(std::string cls_name, std::string reduction);
  /// The reduction: "mean", "sum" or "none".
  const std::string& reduction() const { return reduction_; }

 protected:
  /// The reduction of x over all its axes ("none": x itself).
  ops::Var get_loss(const ops::Var& x);
  /// inputs must be exactly {logits, labels}; throws ValueError otherwise.
  void check_inputs(const std::vector<ops::Var>& inputs) const;

 private:
  std::string reduction_;
};

/// MindSpore's nn.SoftmaxCrossEntropyWithLogits(sparse=False, reduction="none" in MindSpore;
/// "mean" here as in the common training use). logits (N, C).
///   - dense: labels (N, C) probabilities; per-sample loss = output 0 of the
///     SoftmaxCrossEntropyWithLogits op, then reduced.
///   - sparse: labels (N) Int32/Int64 class indices. With "mean", the
///     SparseSoftmaxCrossEntropyWithLogits op (which returns the mean itself); with "sum" or
///     "none", labels are one-hot encoded (OneHot, cast to the logits' dtype) and go the dense
///     way, as MindSpore's Cell does for every reduction.
class SoftmaxCrossEntropyWithLogits : public LossBase {
 public:
  /// `sparse`: labels are class indices, not probabilities. Throws ValueError unless reduction
  /// is "mean", "sum" or "none".
  explicit SoftmaxCrossEntropyWithLogits(bool sparse = false, std::string reduction = "mean");
  /// The loss of {logits, labels}. Throws ValueError unless there are exactly two inputs, and
  /// (sparse, "sum" or "none") ShapeError unless logits are (N, C) with a known C.
  ops::Var construct(const std::vector<ops::Var>& inputs) override;
  /// Whether labels are class indices (the constructor's `sparse`).
  bool sparse() const { return sparse_; }

 private:
  bool sparse_;
};

/// MindSpore's nn.MSELoss: (logits − labels)², reduced.
class MSELoss : public LossBase {
 public:
  /// Throws ValueError unless reduction is "mean", "sum" or "none".
  explicit MSELoss(std::string reduction = "mean");
  /// The loss of {logits, labels} (broadcasting); throws ValueError unless there are exactly two
  /// inputs.
  ops::Var construct(const std::vector<ops::Var>& inputs) override;
};

/// MindSpore's nn.L1Loss: |logits − labels|, reduced.
class L1Loss : public LossBase {
 public:
  /// Throws ValueError unless reduction is "mean", "sum" or "none".
  explicit L1Loss(std::string reduction = "mean");
  /// The loss of {logits, labels} (broadcasting); throws ValueError unless there are exactly two
  /// inputs.
  ops::Var construct(const std::vector<ops::Var>& inputs) override;
};

}  // namespace loom::nn
