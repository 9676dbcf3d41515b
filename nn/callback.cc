// nn/callback.h: LossMonitor and TimeMonitor, printing as MindSpore 2.x's do.
#include "nn/callback.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/ir/error.h"

namespace loom::nn {

// numpy's float scalar str (see callback.h): the shortest round-trip digits from to_chars, laid
// out positionally or in scientific notation by numpy's rule.
template <class F>
std::string format_numpy_float(F x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  const std::to_chars_result r =
      std::to_chars(buf, buf + sizeof(buf), x, std::chars_format::scientific);
  const std::string s(buf, r.ptr);  // "[-]d[.ddd]e(+|-)XX"
  const std::size_t e_pos = s.find('e');
  const bool negative = s[0] == '-';
  std::string digits;
  for (std::size_t i = negative ? 1 : 0; i < e_pos; ++i) {
    if (s[i] != '.') digits += s[i];
  }
  const int exponent = std::stoi(s.substr(e_pos + 1));
  std::string out = negative ? "-" : "";
  const double absval = std::fabs(static_cast<double>(x));
  if (absval == 0 || (absval >= 1e-4 && absval < 1e16)) {
    const int ndigits = static_cast<int>(digits.size());
    const int point = exponent + 1;  // digits before the decimal point
    if (point <= 0) {
      out += "0." + std::string(static_cast<std::size_t>(-point), '0') + digits;
    } else if (point >= ndigits) {
      out += digits + std::string(static_cast<std::size_t>(point - ndigits), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<std::size_t>(point)) + "." +
             digits.substr(static_cast<std::size_t>(point));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char exp[16];
  std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + exp;
}

template std::string format_numpy_float<float>(float);
template std::string format_numpy_float<double>(double);

namespace {

// The loss as MindSpore's LossMonitor sees it: np.mean of its elements, printed in its own
// precision. Float64 prints as a double; every other dtype with float32's digits (a Float16 loss,
// which numpy would print with float16's, is the one difference).
std::string format_loss(const Tensor& loss, double* value) {
  double sum = 0;
  const std::vector<double> v = backend::to_host(loss).to_doubles();  // a device loss copied
  for (double x : v) sum += x;
  const double mean = v.empty() ? std::nan("") : sum / static_cast<double>(v.size());
  *value = mean;
  if (loss.dtype() == DType::kFloat64) return format_numpy_float(mean);
  return format_numpy_float(static_cast<float>(mean));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// LossMonitor

LossMonitor::LossMonitor(std::int64_t per_print_times) : LossMonitor(per_print_times, std::cout) {}

LossMonitor::LossMonitor(std::int64_t per_print_times, std::ostream& out)
    : per_print_times_(per_print_times), out_(&out) {
  if (per_print_times < 0) {
    throw ValueError("LossMonitor: expected per_print_times >= 0, got " +
                     std::to_string(per_print_times));
  }
}

void LossMonitor::on_train_step_end(RunContext& rc) {
  if (!rc.loss.defined()) return;
  double value = 0;
  const std::string text = format_loss(rc.loss, &value);
  if (std::isnan(value) || std::isinf(value)) {
    throw ValueError("epoch: " + std::to_string(rc.cur_epoch_num) + " step: " +
                     std::to_string(rc.step_in_epoch) + ". Invalid loss, terminating training.");
  }
  // A step counter that went back (a resumed run reusing this monitor) moves the last print back
  // by whole periods, as MindSpore's disaster-recovery rule does.
  while (rc.cur_step_num <= last_print_step_) {
    last_print_step_ -= std::max<std::int64_t>(per_print_times_, 1);
  }
  if (per_print_times_ != 0 && rc.cur_step_num - last_print_step_ >= per_print_times_) {
    last_print_step_ = rc.cur_step_num;
    *out_ << "epoch: " << rc.cur_epoch_num << " step: " << rc.step_in_epoch << ", loss is "
          << text << std::endl;
  }
}

void LossMonitor::on_train_epoch_end(RunContext& rc) {
  // MindSpore prints the metrics a caller put into the run context (an eval every epoch).
  if (rc.metrics.empty()) return;
  std::string dict = "{";
  for (const auto& [name, value] : rc.metrics) {
    if (dict.size() > 1) dict += ", ";
    dict += "'" + name + "': " + format_numpy_float(value);
  }
  *out_ << "Eval result: epoch " << rc.cur_epoch_num << ", metrics: " << dict << "}"
        << std::endl;
}

// ---------------------------------------------------------------------------------------------
// TimeMonitor

TimeMonitor::TimeMonitor() : TimeMonitor(std::cout) {}

TimeMonitor::TimeMonitor(std::ostream& out) : out_(&out) {}

void TimeMonitor::on_train_epoch_begin(RunContext& rc) {
  begin_step_ = rc.cur_step_num;
  begin_ = std::chrono::steady_clock::now();
}

void TimeMonitor::on_train_epoch_end(RunContext& rc) {
  last_epoch_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - begin_).count();
  // Per step over the steps this epoch actually ran (fewer than batch_num after a resume or a
  // stop request).
  const std::int64_t steps = rc.cur_step_num - begin_step_;
  const double epoch_ms = last_epoch_seconds_ * 1000.0;
  const double step_ms = steps > 0 ? epoch_ms / static_cast<double>(steps) : 0.0;
  char line[128];
  std::snprintf(line, sizeof(line), "epoch time: %5.3f ms, per step time: %5.3f ms", epoch_ms,
                step_ms);
  *out_ << line << std::endl;
}

}  // namespace loom::nn
