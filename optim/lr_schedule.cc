// optim/lr_schedule.h: MindSpore's dynamic learning-rate lists.
#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "core/ir/error.h"
#include "core/ir/value.h"

namespace loom::optim {

namespace {

[[noreturn]] void fail(const char* fn, const std::string& what, const std::string& got) {
  throw ValueError(std::string(fn) + ": expected " + what + ", got " + got);
}

std::string num(double v) { return ir::format_f64(v); }

void positive_int(const char* fn, const char* name, std::int64_t v) {
  if (v <= 0) fail(fn, std::string(name) + " to be a positive int", std::to_string(v));
}
void positive_float(const char* fn, const char* name, double v) {
  if (!(v > 0)) fail(fn, std::string(name) + " to be a positive float", num(v));
}
void non_negative_float(const char* fn, const char* name, double v) {
  if (!(v >= 0)) fail(fn, std::string(name) + " to be a non-negative float", num(v));
}

// floor(i / step_per_epoch) for non-negative i.
std::int64_t epoch_of(std::int64_t i, std::int64_t step_per_epoch) { return i / step_per_epoch; }

}  // namespace

LearningRate::LearningRate(std::vector<double> per_step)
    : values_(std::move(per_step)), kind_(Kind::kList) {
  if (values_.empty()) fail("LearningRate", "a non-empty per-step list", "an empty list");
}

LearningRate LearningRate::schedule(std::function<double(std::int64_t)> f) {
  if (!f) fail("LearningRate::schedule", "a function", "none");
  LearningRate r;
  r.schedule_ = std::move(f);
  r.kind_ = Kind::kSchedule;
  return r;
}

double LearningRate::at(std::int64_t step) const {
  if (step < 0) fail("LearningRate.at", "a non-negative step", std::to_string(step));
  if (kind_ == Kind::kSchedule) return schedule_(step);
  const auto n = static_cast<std::int64_t>(values_.size());
  return values_[static_cast<std::size_t>(std::min(step, n - 1))];
}

std::vector<double> piecewise_constant_lr(const std::vector<std::int64_t>& milestone,
                                          const std::vector<double>& learning_rates) {
  constexpr const char* fn = "piecewise_constant_lr";
  if (milestone.size() != learning_rates.size()) {
    fail(fn, "milestone and learning_rates of the same size",
         std::to_string(milestone.size()) + " and " + std::to_string(learning_rates.size()));
  }
  std::vector<double> lr;
  std::int64_t last = 0;
  for (std::size_t i = 0; i < milestone.size(); ++i) {
    const std::string name = "milestone[" + std::to_string(i) + "]";
    positive_int(fn, name.c_str(), milestone[i]);
    if (milestone[i] < last) {
      fail(fn, name + " >= milestone[" + std::to_string(i - 1) + "] (" + std::to_string(last) + ")",
           std::to_string(milestone[i]));
    }
    lr.insert(lr.end(), static_cast<std::size_t>(milestone[i] - last), learning_rates[i]);
    last = milestone[i];
  }
  return lr;
}

std::vector<double> exponential_decay_lr(double learning_rate, double decay_rate,
                                         std::int64_t total_step, std::int64_t step_per_epoch,
                                         std::int64_t decay_epoch, bool is_stair) {
  constexpr const char* fn = "exponential_decay_lr";
  positive_int(fn, "total_step", total_step);
  positive_int(fn, "step_per_epoch", step_per_epoch);
  positive_int(fn, "decay_epoch", decay_epoch);
  positive_float(fn, "learning_rate", learning_rate);
  positive_float(fn, "decay_rate", decay_rate);
  std::vector<double> lr;
  lr.reserve(static_cast<std::size_t>(total_step));
  for (std::int64_t i = 0; i < total_step; ++i) {
    const auto epoch = static_cast<double>(epoch_of(i, step_per_epoch));
    double p = epoch / static_cast<double>(decay_epoch);
    if (is_stair) p = std::floor(p);
    lr.push_back(learning_rate * std::pow(decay_rate, p));
  }
  return lr;
}

std::vector<double> cosine_decay_lr(double min_lr, double max_lr, std::int64_t total_step,
                                    std::int64_t step_per_epoch, std::int64_t decay_epoch) {
  constexpr const char* fn = "cosine_decay_lr";
  non_negative_float(fn, "min_lr", min_lr);
  positive_float(fn, "max_lr", max_lr);
  positive_int(fn, "total_step", total_step);
  positive_int(fn, "step_per_epoch", step_per_epoch);
  positive_int(fn, "decay_epoch", decay_epoch);
  if (min_lr >= max_lr) fail(fn, "max_lr greater than min_lr (" + num(min_lr) + ")", num(max_lr));
  const double delta = 0.5 * (max_lr - min_lr);
  std::vector<double> lr;
  lr.reserve(static_cast<std::size_t>(total_step));
  for (std::int64_t i = 0; i < total_step; ++i) {
    const auto tmp = static_cast<double>(std::min(epoch_of(i, step_per_epoch), decay_epoch));
    lr.push_back(min_lr +
                 delta * (1 + std::cos(std::numbers::pi * tmp / static_cast<double>(decay_epoch))));
  }
  return lr;
}

std::vector<double> polynomial_decay_lr(double learning_rate, double end_learning_rate,
                                        std::int64_t total_step, std::int64_t step_per_epoch,
                                        std::int64_t decay_epoch, double power,
                                        bool update_decay_epoch) {
  constexpr const char* fn = "polynomial_decay_lr";
  positive_float(fn, "learning_rate", learning_rate);
  non_negative_float(fn, "end_learning_rate", end_learning_rate);
  positive_float(fn, "power", power);
  positive_int(fn, "total_step", total_step);
  positive_int(fn, "step_per_epoch", step_per_epoch);
  positive_int(fn, "decay_epoch", decay_epoch);
  const double delta = learning_rate - end_learning_rate;
  std::vector<double> lr;
  lr.reserve(static_cast<std::size_t>(total_step));
  for (std::int64_t i = 0; i < total_step; ++i) {
    const std::int64_t epoch = epoch_of(i, step_per_epoch);
    std::int64_t tmp_decay = decay_epoch;
    std::int64_t tmp = std::min(epoch, decay_epoch);
    if (update_decay_epoch) {
      // decay_epoch * max(ceil(epoch / decay_epoch), 1), epoch unclamped.
      tmp_decay = decay_epoch * std::max<std::int64_t>((epoch + decay_epoch - 1) / decay_epoch, 1);
      tmp = epoch;
    }
    lr.push_back(delta * std::pow(1 - static_cast<double>(tmp) / static_cast<double>(tmp_decay),
                                  power) +
                 end_learning_rate);
  }
  return lr;
}

std::vector<double> warmup_lr(double learning_rate, std::int64_t total_step,
                              std::int64_t step_per_epoch, std::int64_t warmup_epoch) {
  constexpr const char* fn = "warmup_lr";
  non_negative_float(fn, "learning_rate", learning_rate);
  positive_int(fn, "warmup_epoch", warmup_epoch);
  positive_int(fn, "total_step", total_step);
  positive_int(fn, "step_per_epoch", step_per_epoch);
  std::vector<double> lr;
  lr.reserve(static_cast<std::size_t>(total_step));
  for (std::int64_t i = 0; i < total_step; ++i) {
    const auto tmp = static_cast<double>(std::min(epoch_of(i, step_per_epoch), warmup_epoch));
    lr.push_back(learning_rate * tmp / static_cast<double>(warmup_epoch));
  }
  return lr;
}

}  // namespace loom::optim
