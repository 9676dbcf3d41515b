// A launch log: every kernel launch of one training step, as CSV — an observer on the compiled
// step (runtime/observer.h) that a callback switches on for the chosen step. `loom train
// --launch-log FILE [--launch-log-step N]` writes one.
//
//   auto log = std::make_shared<train::LaunchLog>("step1.csv", /*step=*/1);
//   model.add_observer(log);
//   model.train(1, ds, {log.get()});
//
// Columns: step, index (in its plan), depth (0, +1 inside If / While), graph, op, name, scope
// (the Cell path), file, line, role (forward / backward / optimizer), forward (for a backward
// launch, the scope of the forward node it differentiates), inputs and outputs (dtype and shape
// of each tensor, ';'-separated), us (the launch's wall time in microseconds). The file is
// written when the step ends; an unwritable path is a FormatError naming it.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

#include "nn/callback.h"
#include "runtime/observer.h"

namespace loom::train {

class LaunchLog final : public runtime::Observer, public nn::Callback {
 public:
  LaunchLog(std::string path, std::int64_t step);

  void after_launch(const runtime::LaunchEvent& e) override;
  void on_train_step_begin(nn::RunContext& rc) override;
  void on_train_step_end(nn::RunContext& rc) override;

  const std::string& path() const { return path_; }
  std::int64_t launches() const { return launches_; }
  bool written() const { return written_; }

 private:
  std::string path_;
  std::int64_t step_;
  std::int64_t current_ = -1;  // the step running while active
  bool active_ = false;
  bool written_ = false;
  std::int64_t launches_ = 0;
  std::string rows_;
};

}  // namespace loom::train
