// The training display of `loom train`, as an nn::Callback.
//
// On a terminal (ProgressCallback(out, /*terminal=*/true)) one status line is redrawn in place
// with '\r' (at most 10 times a second, and at the last step of each epoch):
//   epoch 1/3 [#########...........] 812/1875  loss 0.6123  2480 img/s  ETA 0:04
// Elsewhere (a pipe, a log file, CI) a plain line every 10% of an epoch:
//   epoch 1/3 step 188/1875 (10%): loss 0.9876, 2480 img/s, ETA 0:07
// and in both cases, at the end of each epoch:
//   epoch 1/3: train loss 0.5834, test loss 0.4521, test accuracy 0.8342, 9.8 s (train 9.2 s,
//   eval 0.6 s)
// `loss` is the mean loss of the epoch's steps so far (on a GPU up to the last 64-step read of
// the losses, "-" before the first); images/s counts the epoch's wall time
// (data waits included), so the ETA is honest. The test figures are the "accuracy" and "loss"
// entries of RunContext::metrics, printed when a callback before this one filled them.
#pragma once

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <string>

#include "nn/callback.h"

namespace loom::tools {

class ProgressCallback : public nn::Callback {
 public:
  // ranks: under mpirun, the processes stepping together (images/s counts all of them; the loss
  // shown is this rank's).
  ProgressCallback(std::ostream& out, bool terminal, int ranks = 1);

  void on_train_epoch_begin(nn::RunContext& rc) override;
  void on_train_step_end(nn::RunContext& rc) override;
  void on_train_epoch_end(nn::RunContext& rc) override;

  // "1:05", "12:00:07": whole seconds as [h:]mm:ss (m:ss below an hour).
  static std::string format_duration(double seconds);

 private:
  using Clock = std::chrono::steady_clock;
  void draw(const nn::RunContext& rc, double elapsed);
  void log_line(const nn::RunContext& rc, double elapsed);

  std::ostream* out_;
  bool terminal_;
  Clock::time_point epoch_begin_;
  Clock::time_point last_step_end_;
  Clock::time_point last_draw_;
  bool drawn_ = false;        // a status line is on screen (terminal)
  std::int64_t steps_ = 0;
  std::int64_t samples_ = 0;
  std::int64_t logged_tenth_ = 0;  // non-terminal: tenths of the epoch logged so far
  int ranks_ = 1;
};

}  // namespace loom::tools
