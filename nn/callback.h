/// \file
/// MindSpore 2.x callbacks: a Callback overrides the hooks it needs; Model calls them with a
/// RunContext describing where training is. Order per train(): on_train_begin, then per epoch
/// on_train_epoch_begin, (on_train_step_begin, on_train_step_end) per step, on_train_epoch_end,
/// and on_train_end last; each hook goes to the callbacks in the order given. A hook that throws
/// ends training with that error. Model::eval calls on_eval_begin and, with metrics filled and
/// cur_step_num = the batches evaluated, on_eval_end.
#pragma once

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>

#include "core/ir/tensor.h"

namespace loom::nn {

class Cell;
class TrainOneStepCell;

/// Where training or evaluation is, as the callbacks see it (MindSpore's RunContext).
/// Model::train fills it before each hook. On a resumed run (TrainOptions) the counters continue
/// from the resume point: at on_train_begin cur_epoch_num is the epochs already done (0 on a fresh
/// run) and cur_step_num the steps already done; at on_train_epoch_begin step_in_epoch is the
/// number of the epoch's rows already consumed (0 unless resuming mid-epoch).
struct RunContext {
  std::int64_t epoch_num = 0;      ///< total epochs of this train()
  std::int64_t cur_epoch_num = 0;  ///< 1-based
  std::int64_t batch_num = 0;      ///< steps per epoch (the dataset's size)
  std::int64_t cur_step_num = 0;   ///< 1-based, counted over all epochs (global step)
  std::int64_t step_in_epoch = 0;  ///< 1-based
  std::int64_t batch_size = 0;     ///< rows of the current batch
  Tensor data;                     ///< the current batch's input (column 0), from step begin on
  /// The last step's loss (MindSpore's net_outputs), on the step's device: backend::to_host
  /// reads it (on a GPU that waits for the step; Model::train itself reads a device's losses 64
  /// steps at a time). In Model::eval, the last batch's loss, in host memory.
  Tensor loss;
  double step_seconds = 0;         ///< the last step's time in TrainOneStepCell::step
  double data_wait_seconds = 0;    ///< the last step's wait on the data iterator
  /// Mean loss of the epoch's steps so far (this call's steps of the epoch; on a device, up to
  /// the last 64-step read); final at on_train_epoch_end.
  double epoch_loss_mean = 0;
  std::int64_t epoch_loss_steps = 0;  ///< the steps epoch_loss_mean counts (0: none read yet)
  /// The first step of the epoch (1-based) that epoch_loss_mean covers: 1, or after a resume in
  /// the middle of the epoch the step it resumed at (the earlier steps ran in another process).
  std::int64_t epoch_loss_first_step = 1;
  std::map<std::string, double> metrics;  ///< eval results, when the caller filled them
  Cell* network = nullptr;  ///< the Model's network (without the loss)
  /// The training step (null in an eval() before the first train()).
  TrainOneStepCell* train_network = nullptr;

  /// Ends training after the current step (MindSpore's request_stop()): the epoch's
  /// on_train_epoch_end and on_train_end still run.
  void request_stop() { stop_requested = true; }
  bool stop_requested = false;  ///< whether a callback called request_stop()
};

/// A training and evaluation callback (MindSpore's Callback): each hook does nothing unless
/// overridden. Model::train and Model::eval call the hooks in the order given in nn/callback.h.
class Callback {
 public:
  virtual ~Callback() = default;
  /// Once, before the first epoch of a train().
  virtual void on_train_begin(RunContext&) {}
  /// Before each epoch's first step.
  virtual void on_train_epoch_begin(RunContext&) {}
  /// Before each step, with RunContext::data holding its batch's input.
  virtual void on_train_step_begin(RunContext&) {}
  /// After each step, with RunContext::loss holding its loss.
  virtual void on_train_step_end(RunContext&) {}
  /// After each epoch's steps (and after fit()'s evaluation of that epoch).
  virtual void on_train_epoch_end(RunContext&) {}
  /// Once, after the last epoch (or the one a stop request ended).
  virtual void on_train_end(RunContext&) {}
  /// In Model::eval, before the first batch.
  virtual void on_eval_begin(RunContext&) {}
  /// In Model::eval, after the last batch, with RunContext::metrics filled and cur_step_num the
  /// batches evaluated.
  virtual void on_eval_end(RunContext&) {}
};

/// Prints "epoch: 1 step: 100, loss is 0.5123" every per_print_times steps (MindSpore's format)
/// to `out` (std::cout by default). ValueError on a NaN/Inf loss, naming epoch and step, as
/// MindSpore's LossMonitor raises ("epoch: 2 step: 3. Invalid loss, terminating training.").
/// As MindSpore's: "step" is the step in the epoch, a print happens when the global step is
/// per_print_times past the last print (0: never), the loss is shown as numpy shows a scalar of
/// its dtype (format_numpy_float), and at an epoch end the run context's metrics, when a caller
/// filled them, are printed as "Eval result: epoch 1, metrics: {'accuracy': 0.5}".
class LossMonitor : public Callback {
 public:
  /// Prints to std::cout. ValueError when per_print_times < 0.
  explicit LossMonitor(std::int64_t per_print_times = 1);
  /// Prints to `out`, which must outlive the monitor. ValueError when per_print_times < 0.
  LossMonitor(std::int64_t per_print_times, std::ostream& out);
  /// Prints the loss every per_print_times steps; ValueError on a NaN or Inf loss.
  void on_train_step_end(RunContext& rc) override;
  /// Prints the run context's metrics, when there are any.
  void on_train_epoch_end(RunContext& rc) override;

 private:
  std::int64_t per_print_times_;
  std::ostream* out_;
  std::int64_t last_print_step_ = 0;  ///< the global step of the last print
};

/// Prints "epoch time: 1234.567 ms, per step time: 1.234 ms" at each epoch end; per step over the
/// steps the epoch actually ran.
class TimeMonitor : public Callback {
 public:
  /// Prints to std::cout.
  TimeMonitor();
  /// Prints to `out`, which must outlive the monitor.
  explicit TimeMonitor(std::ostream& out);
  /// Starts the epoch's clock.
  void on_train_epoch_begin(RunContext& rc) override;
  /// Prints the epoch's time and its time per step.
  void on_train_epoch_end(RunContext& rc) override;
  /// The last epoch's wall time in seconds (0 before the first epoch end).
  double last_epoch_seconds() const { return last_epoch_seconds_; }

 private:
  std::ostream* out_;
  std::chrono::steady_clock::time_point begin_;
  std::int64_t begin_step_ = 0;  ///< the global step count at the epoch's begin
  double last_epoch_seconds_ = 0;
};

/// numpy's str() of a float32 / float64 scalar (how MindSpore prints a loss): the shortest digits
/// that round-trip in F, positional when x is 0 or 1e-4 <= |x| < 1e16 ("0.5123", "3.0"), else
/// scientific with two or more exponent digits ("1e-05", "1.5e+16"); "nan", "inf", "-inf".
/// Defined for float and double.
template <class F>
std::string format_numpy_float(F x);

}  // namespace loom::nn
