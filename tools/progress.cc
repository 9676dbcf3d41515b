#include "tools/progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <string>

#include "nn/train.h"

namespace loom::tools {
namespace {

constexpr double kRedrawSeconds = 0.1;
constexpr int kBarWidth = 20;

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}


std::string fixed(double v, int digits);

// The epoch's mean loss so far; "-" before any was read (a GPU's losses are read 64 steps at a
// time).
std::string loss_so_far(const nn::RunContext& rc) {
  return rc.epoch_loss_steps > 0 ? fixed(rc.epoch_loss_mean, 4) : std::string("-");
}

std::string fixed(double v, int digits) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

}  // namespace

ProgressCallback::ProgressCallback(std::ostream& out, bool terminal, int ranks)
    : out_(&out), terminal_(terminal), ranks_(ranks) {}

std::string ProgressCallback::format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  auto total = static_cast<std::int64_t>(std::llround(seconds));
  const std::int64_t h = total / 3600, m = total / 60 % 60, s = total % 60;
  char buf[32];
  if (h > 0) {
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(h),
                  static_cast<long long>(m), static_cast<long long>(s));
  } else {
    std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(m),
                  static_cast<long long>(s));
  }
  return buf;
}

void ProgressCallback::on_train_epoch_begin(nn::RunContext& rc) {
  epoch_begin_ = Clock::now();
  last_step_end_ = epoch_begin_;
  last_draw_ = epoch_begin_;
  drawn_ = false;
  steps_ = 0;
  samples_ = 0;
  logged_tenth_ = 0;
}

void ProgressCallback::on_train_step_end(nn::RunContext& rc) {
  ++steps_;
  samples_ += rc.batch_size * ranks_;
  last_step_end_ = Clock::now();
  const double elapsed = std::chrono::duration<double>(last_step_end_ - epoch_begin_).count();
  const bool last = rc.step_in_epoch >= rc.batch_num;
  if (rc.train_network && rc.train_network->overflow()) {
    // Loss scaling skipped this step's update: said on a line of its own.
    if (terminal_ && drawn_) *out_ << "\r\033[K";
    drawn_ = false;
    *out_ << "step " << rc.cur_step_num << ": an Inf or NaN gradient, update skipped; loss scale "
          << rc.train_network->loss_scale() << std::endl;
  }
  if (terminal_) {
    if (last || !drawn_ || seconds_since(last_draw_) >= kRedrawSeconds) {
      draw(rc, elapsed);
      last_draw_ = Clock::now();
    }
  } else if (!last && rc.batch_num > 0) {
    // A line each time the epoch passes another tenth (10%, 20%, ... 90%).
    const std::int64_t tenth = rc.step_in_epoch * 10 / rc.batch_num;
    if (tenth > logged_tenth_) {
      logged_tenth_ = tenth;
      log_line(rc, elapsed);
    }
  }
}

void ProgressCallback::draw(const nn::RunContext& rc, double elapsed) {
  const std::int64_t total = std::max<std::int64_t>(1, rc.batch_num);
  const auto filled =
      static_cast<int>(std::min<std::int64_t>(kBarWidth, rc.step_in_epoch * kBarWidth / total));
  const double rate = elapsed > 0 ? samples_ / elapsed : 0;
  const double eta = steps_ > 0 ? (total - rc.step_in_epoch) * elapsed / steps_ : NAN;
  *out_ << "\repoch " << rc.cur_epoch_num << "/" << rc.epoch_num << " ["
        << std::string(filled, '#') << std::string(kBarWidth - filled, '.') << "] "
        << rc.step_in_epoch << "/" << rc.batch_num << "  loss " << loss_so_far(rc)
        << "  " << fixed(rate, 0) << " img/s  ETA " << format_duration(eta) << "\033[K"
        << std::flush;
  drawn_ = true;
}

void ProgressCallback::log_line(const nn::RunContext& rc, double elapsed) {
  const std::int64_t total = std::max<std::int64_t>(1, rc.batch_num);
  const double rate = elapsed > 0 ? samples_ / elapsed : 0;
  const double eta = steps_ > 0 ? (total - rc.step_in_epoch) * elapsed / steps_ : NAN;
  *out_ << "epoch " << rc.cur_epoch_num << "/" << rc.epoch_num << " step " << rc.step_in_epoch
        << "/" << rc.batch_num << " (" << rc.step_in_epoch * 100 / total
        << "%): loss " << loss_so_far(rc) << ", " << fixed(rate, 0)
        << " img/s, ETA " << format_duration(eta) << std::endl;
}

void ProgressCallback::on_train_epoch_end(nn::RunContext& rc) {
  if (terminal_ && drawn_) *out_ << "\r\033[K";
  drawn_ = false;
  *out_ << "epoch " << rc.cur_epoch_num << "/" << rc.epoch_num << ": train loss "
        << fixed(rc.epoch_loss_mean, 4);
  if (rc.epoch_loss_first_step > 1) {  // resumed in the middle of this epoch
    *out_ << " (steps " << rc.epoch_loss_first_step << "-" << rc.batch_num << ", since the resume)";
  }
  if (rc.train_network &&
      rc.train_network->loss_scale_manager().enabled()) {
    const std::int64_t skipped = rc.train_network->skipped_steps();
    *out_ << ", loss scale " << rc.train_network->loss_scale() << " (" << skipped << " step"
          << (skipped == 1 ? "" : "s") << " skipped)";
  }
  if (auto it = rc.metrics.find("loss"); it != rc.metrics.end()) {
    *out_ << ", test loss " << fixed(it->second, 4);
  }
  if (auto it = rc.metrics.find("accuracy"); it != rc.metrics.end()) {
    *out_ << ", test accuracy " << fixed(it->second, 4);
  }
  // Callbacks before this one (the test-set evaluation) ran after the last step.
  const double train_s = std::chrono::duration<double>(last_step_end_ - epoch_begin_).count();
  const double after_s = seconds_since(last_step_end_);
  *out_ << ", " << fixed(train_s + after_s, 1) << " s";
  if (!rc.metrics.empty()) {
    *out_ << " (train " << fixed(train_s, 1) << " s, eval " << fixed(after_s, 1) << " s)";
  }
  *out_ << std::endl;
}

}  // namespace loom::tools
