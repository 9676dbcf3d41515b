/// \file
/// `--check-numerics`: the first NaN or Inf a kernel produces stops the run with one message naming
/// the node — op, dump name, Cell path, source line, role (for a gradient node, the forward node
/// it differentiates), the training step — and its inputs' statistics, after writing the node's
/// inputs and outputs as .npy files in the dump layout (debug/dump.h). In graph mode, without a
/// re-run: every floating output is tested as it is produced (a vectorized test of the exponent
/// bits, debug/tensor_stats.h). It asks for intact inputs (a plan without in-place reuse), so the
/// inputs it reports are the ones the kernel read.
///
/// ```
/// auto check = std::make_shared<debug::NumericsChecker>(
///     debug::NumericsOptions{.dump_dir = "numerics", .net_name = "lenet"});
/// model.add_observer(check);
/// model.fit(epochs, train, test, {check.get()});   // the callback gives it the step numbers
/// // throws debug::NumericsError at the first non-finite value
/// ```
///
/// debug::set_check_numerics(true) installs one checker into every compiled function made
/// afterwards (runtime::add_default_observer), the context setting of a C++ program: its messages
/// count runs instead of training steps.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "core/ir/error.h"
#include "nn/callback.h"
#include "runtime/observer.h"

namespace loom::debug {

/// What NumericsChecker found: the node whose output first held a NaN or Inf, and where.
struct NumericsReport {
  std::string function;          ///< "train_step", "eval", ...
  std::int64_t graph = 0;        ///< the dump layout's graph id
  std::int64_t iteration = 0;    ///< the training step - 1, or the program's run count
  bool in_training_step = false;  ///< the run was in a training step (iteration is its step - 1)
  /// The node: its op ("Conv2D"), dump name (op_name, dump_op_name()), full name
  /// (dump_full_name()), Cell scope, source file, and the graph holding it (graph_name).
  ///@{
  std::string op, op_name, full_name, scope, file, graph_name;
  ///@}
  int line = 0;                  ///< the node's source line
  ir::Role role = ir::Role::kForward;  ///< forward, backward or optimizer
  std::string forward;           ///< a gradient node: the forward node's scope
  std::int64_t output = 0;       ///< the first output with non-finite values
  /// In that output: the NaN elements, the ±Inf elements and all elements (nan, inf, count).
  ///@{
  std::int64_t nan = 0, inf = 0, count = 0;
  ///@}
  std::string dump_dir;          ///< where its inputs and outputs were written ("" when not)
};

/// What NumericsChecker throws: what() is the message for a person, report() the same facts as
/// data.
class NumericsError : public Error {
 public:
  /// An error with `message` as what() and `report` as report().
  NumericsError(const std::string& message, NumericsReport report)
      : Error(message), report_(std::move(report)) {}
  /// The node and where it ran.
  const NumericsReport& report() const { return report_; }

 private:
  NumericsReport report_;
};

/// Where NumericsChecker writes the failing node's tensors.
struct NumericsOptions {
  /// The dump folder: the node's inputs and outputs go to
  /// {dump_dir}/rank_{rank}/{net_name}/{graph}/{iteration}/ in the dump layout; "" writes nothing.
  std::string dump_dir = "numerics_dump";
  std::string net_name = "Net";  ///< the {net_name} folder
  int rank = 0;                  ///< the rank_{rank} folder
  /// false: record instead of stopping. The first non-finite node of each run is written as
  /// above and reported to `on_found` (one line, "step N: first non-finite value: ..."), and the
  /// run goes on: loss scaling, whose overflowing steps are skipped, not errors
  /// (`loom train --check-numerics` with a loss scale).
  bool stop = true;
  /// With stop false: called at each run's first non-finite node, with the report and one line.
  std::function<void(const NumericsReport&, const std::string& line)> on_found;
};

/// The check (above): an observer of the compiled functions it is added to, and a training
/// callback for the step numbers.
class NumericsChecker : public runtime::Observer, public nn::Callback {
 public:
  /// A checker writing the failing node's tensors as `options` say.
  explicit NumericsChecker(NumericsOptions options = {});
  ~NumericsChecker() override;

  /// runtime::Observer: run_begin and run_end follow the program running and its iteration (each
  /// program is one graph id, in the order first run); after_launch tests the launch's floating
  /// outputs (not those of an If or While launch, whose inner launches are tested) and, at the
  /// first with a NaN or Inf, writes the node's inputs and outputs (unless dump_dir is "") and
  /// throws NumericsError.
  ///@{
  void run_begin(const runtime::RunEvent& e) override;
  void run_end(const runtime::RunEvent& e) override;
  void after_launch(const runtime::LaunchEvent& e) override;
  ///@}
  /// True: the inputs reported must be the ones the kernel read.
  bool needs_intact_inputs() const override { return true; }
  /// nn::Callback: during a training step the iteration is the global step - 1.
  ///@{
  void on_train_step_begin(nn::RunContext& rc) override;
  void on_train_step_end(nn::RunContext& rc) override;
  ///@}

  /// The launches tested so far (If and While launches not counted).
  std::int64_t launches_checked() const { return launches_checked_; }
  /// With stop false: the first non-finite node of the last run (nullopt when it had none).
  const std::optional<NumericsReport>& last_found() const { return found_; }

 private:
  struct Program {
    std::int64_t id = 0;
    std::int64_t runs = 0;
    std::string function;
  };
  NumericsOptions options_;
  std::unordered_map<const ir::FuncGraph*, Program> programs_;
  const Program* current_ = nullptr;
  std::int64_t iteration_ = 0;
  std::optional<std::int64_t> step_;
  std::int64_t launches_checked_ = 0;
  std::int64_t last_timestamp_ = 0;
  std::optional<NumericsReport> found_;
};

/// Installs (true) or removes (false) a process-wide checker in the default observers of
/// runtime::CompiledFunction: functions made afterwards check their launches.
void set_check_numerics(bool on, NumericsOptions options = {});
/// True while set_check_numerics(true) has a checker installed.
bool check_numerics();

}  // namespace loom::debug
