// MindSpore 2.x callbacks: a Callback overrides the hooks it needs; Model calls them with a
// RunContext describing where training is.
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

struct RunContext {
  std::int64_t epoch_num = 0;       // total epochs of this train()
  std::int64_t cur_epoch_num = 0;   // 1-based
  std::int64_t batch_num = 0;       // steps per epoch
  std::int64_t cur_step_num = 0;    // 1-based, counted over all epochs (global step)
  std::int64_t step_in_epoch = 0;   // 1-based
  std::int64_t batch_size = 0;      // rows of the current batch
  Tensor loss;                      // the last step's loss (MindSpore's net_outputs)
  double step_seconds = 0;          // the last step's time in TrainOneStepCell::step
  double data_wait_seconds = 0;     // the last step's wait on the data iterator
  double epoch_loss_mean = 0;       // at on_train_epoch_end: mean loss of the epoch's steps
  std::map<std::string, double> metrics;  // eval results, when the caller filled them
  Cell* network = nullptr;
  TrainOneStepCell* train_network = nullptr;

  void request_stop() { stop_requested = true; }
  bool stop_requested = false;
};

class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_train_begin(RunContext&) {}
  virtual void on_train_epoch_begin(RunContext&) {}
  virtual void on_train_step_begin(RunContext&) {}
  virtual void on_train_step_end(RunContext&) {}
  virtual void on_train_epoch_end(RunContext&) {}
  virtual void on_train_end(RunContext&) {}
  virtual void on_eval_begin(RunContext&) {}
  virtual void on_eval_end(RunContext&) {}
};

// Prints "epoch: 1 step: 100, loss is 0.5123" every per_print_times steps (MindSpore's format)
// to `out` (std::cout by default). ValueError on a NaN/Inf loss, naming epoch and step, as
// MindSpore's LossMonitor raises.
class LossMonitor : public Callback {
 public:
  explicit LossMonitor(std::int64_t per_print_times = 1);
  LossMonitor(std::int64_t per_print_times, std::ostream& out);
  void on_train_step_end(RunContext& rc) override;

 private:
  std::int64_t per_print_times_;
  std::ostream* out_;
};

// Prints "epoch time: 1234.567 ms, per step time: 1.234 ms" at each epoch end.
class TimeMonitor : public Callback {
 public:
  TimeMonitor();
  explicit TimeMonitor(std::ostream& out);
  void on_train_epoch_begin(RunContext& rc) override;
  void on_train_epoch_end(RunContext& rc) override;
  double last_epoch_seconds() const { return last_epoch_seconds_; }

 private:
  std::ostream* out_;
  std::chrono::steady_clock::time_point begin_;
  double last_epoch_seconds_ = 0;
};

}  // namespace loom::nn
