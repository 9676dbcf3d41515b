/// \file
/// Dynamic learning rates: MindSpore's mindspore.nn.dynamic_lr functions, which compute the whole
/// per-step list up front, and LearningRate, the value an optimizer takes (a constant or such a
/// list).
///
/// ```
/// LearningRate lr = cosine_decay_lr(0.01, 0.1, /*total_step=*/6, /*step_per_epoch=*/2,
///                                   /*decay_epoch=*/2);
/// lr.at(0) == 0.1; lr.at(4) == 0.01; lr.at(100) == 0.01 (past the end: the last value)
/// ```
///
/// Semantics (CONFIRMED against MindSpore's nn/dynamic_lr.py), with
/// current_epoch = floor(i / step_per_epoch) for step i in [0, total_step):
/// - piecewise_constant_lr(milestone, learning_rates): learning_rates[t] for
///   i in [milestone[t-1], milestone[t]) (milestone[-1] = 0); the list has milestone.back() steps.
///   Milestones are positive and non-decreasing (an equal milestone gives an empty segment).
/// - exponential_decay_lr: lr * decay_rate^(current_epoch / decay_epoch), the exponent floored
///   when is_stair.
/// - cosine_decay_lr: min_lr + 0.5 (max_lr - min_lr)(1 + cos(pi * tmp / decay_epoch)) with
///   tmp = min(current_epoch, decay_epoch); min_lr < max_lr.
/// - polynomial_decay_lr: (lr - end_lr)(1 - tmp / tmp_decay)^power + end_lr with
///   tmp = min(current_epoch, decay_epoch), tmp_decay = decay_epoch; when update_decay_epoch,
///   tmp = current_epoch and tmp_decay = decay_epoch * max(ceil(current_epoch / decay_epoch), 1).
/// - warmup_lr: lr * min(current_epoch, warmup_epoch) / warmup_epoch (so epoch 0 gets 0).
///
/// MindSpore's TypeErrors (an int where a float is expected) have no counterpart here; every
/// range check is a ValueError("<function>: expected <argument> ..., got ...").
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace loom::optim {

/// A learning rate: one constant, one value per step (MindSpore's list or Tensor learning rate),
/// or a schedule — a function of the 0-based global step (MindSpore's LearningRateSchedule).
class LearningRate {
 public:
  /// The three kinds of learning rate: kConstant (one number for every step), kList (one value
  /// per step), kSchedule (a function of the step).
  enum class Kind { kConstant, kList, kSchedule };

  /// A constant rate (implicit, so that an optimizer's Options take a number).
  LearningRate(double constant) : values_{constant}, kind_(Kind::kConstant) {}  // NOLINT
  /// One rate per step, step 0 first (implicit, so that the dynamic_lr functions' lists convert);
  /// ValueError when `per_step` is empty.
  LearningRate(std::vector<double> per_step);  // NOLINT: implicit
  /// A schedule: `f(step)` is the rate at the 0-based global step. ValueError when `f` is empty.
  static LearningRate schedule(std::function<double(std::int64_t step)> f);

  /// Which of the three it is.
  Kind kind() const { return kind_; }
  /// Whether it is one constant.
  bool is_constant() const { return kind_ == Kind::kConstant; }
  /// The rate at `step` (ValueError when negative); steps past the end of a list get its last
  /// value (MindSpore fails there; a resumed run that trains longer than the list keeps its last
  /// rate).
  double at(std::int64_t step) const;
  /// The per-step values (one element for a constant, none for a schedule).
  const std::vector<double>& values() const { return values_; }

 private:
  LearningRate() = default;
  std::vector<double> values_;
  std::function<double(std::int64_t)> schedule_;
  Kind kind_ = Kind::kConstant;
};

/// MindSpore's piecewise_constant_lr: `learning_rates[t]` for the steps from `milestone[t-1]`
/// (0 for t = 0) up to, not including, `milestone[t]`; `milestone.back()` steps in all.
/// ValueError when the two differ in size, or a milestone is not positive or is less than the one
/// before.
std::vector<double> piecewise_constant_lr(const std::vector<std::int64_t>& milestone,
                                          const std::vector<double>& learning_rates);
/// MindSpore's exponential_decay_lr: total_step rates, learning_rate decayed by decay_rate every
/// decay_epoch epochs (continuously, or in stairs with is_stair). ValueError unless total_step,
/// step_per_epoch, decay_epoch, learning_rate and decay_rate are positive.
std::vector<double> exponential_decay_lr(double learning_rate, double decay_rate,
                                         std::int64_t total_step, std::int64_t step_per_epoch,
                                         std::int64_t decay_epoch, bool is_stair = false);
/// MindSpore's cosine_decay_lr: total_step rates falling from max_lr to min_lr along a half cosine
/// over decay_epoch epochs, then min_lr. ValueError unless 0 <= min_lr < max_lr and total_step,
/// step_per_epoch and decay_epoch are positive.
std::vector<double> cosine_decay_lr(double min_lr, double max_lr, std::int64_t total_step,
                                    std::int64_t step_per_epoch, std::int64_t decay_epoch);
/// MindSpore's polynomial_decay_lr: total_step rates falling from learning_rate to
/// end_learning_rate as a polynomial of degree `power` over decay_epoch epochs, then
/// end_learning_rate (with update_decay_epoch, the period grows instead to the next multiple of
/// decay_epoch once the epoch passes it). ValueError unless
/// learning_rate and power are positive, end_learning_rate >= 0, and total_step, step_per_epoch
/// and decay_epoch are positive.
std::vector<double> polynomial_decay_lr(double learning_rate, double end_learning_rate,
                                        std::int64_t total_step, std::int64_t step_per_epoch,
                                        std::int64_t decay_epoch, double power,
                                        bool update_decay_epoch = false);
/// MindSpore's warmup_lr: total_step rates rising linearly from 0 to learning_rate over
/// warmup_epoch epochs, then learning_rate. ValueError unless learning_rate >= 0 and warmup_epoch,
/// total_step and step_per_epoch are positive.
std::vector<double> warmup_lr(double learning_rate, std::int64_t total_step,
                              std::int64_t step_per_epoch, std::int64_t warmup_epoch);

}  // namespace loom::optim
