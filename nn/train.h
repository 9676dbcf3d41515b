// Training wrappers: MindSpore's nn.WithLossCell and nn.TrainOneStepCell.
//
//   auto net = std::make_shared<SequentialCell>(...);
//   auto with_loss = std::make_shared<WithLossCell>(net, std::make_shared<MyMSE>());
//   TrainOneStepCell train(with_loss, {.kind = OptimizerKind::kMomentum, .learning_rate = 0.1});
//   for (...) Tensor loss = train.step(x, y);   // updates net's Parameters in place
//
// TrainOneStepCell::step, graph mode (ExecMode::kGraph): on the first call with a new input
// signature (dtypes and shapes of data and label) and training flag of the network it traces
// net_with_loss, builds ONE step graph in the traced module —
//     (data, label, weights..., states..., [beta1_power, beta2_power])
//       → MakeTuple(loss, new weights..., new states..., new assigned values...)
// calling autodiff::grad(forward, {get_by_list, return_value}) and then the optimizer update per
// trainable weight (optim::momentum_update; Adam emits the same ApplyAdam node as
// optim::adam_update, but with beta1^t / beta2^t as rank-0 graph inputs computed on the host each
// step, so one compilation serves every step) — runs "inline,simplify,dce" and compiles it with
// runtime::compile, donating each new weight / state output to its input parameter: the Cells'
// Parameter tensors and the optimizer states are updated in place (same storage). Later calls
// with the same signature and training flag reuse the Executable (num_compilations();
// compile_seconds() is the time spent tracing, differentiating, running the passes and
// compiling, summed).
//
// State updates (Cell::assign, e.g. BatchNorm2d's moving statistics, Dropout's key): the traced
// forward then returns MakeTuple(loss, new values...) (nn/cell.h). The step differentiates the
// loss only: grad runs with sens_param and the sensitivity MakeTuple(ones_like(loss),
// zeros_like(new value)...) built as constants; the zero sensitivities contribute zero, so the
// gradients are exactly those of the loss. (This keeps one forward: differentiating a wrapper
// that returns the loss alone would need the forward again for the new values.) The new values
// are outputs of the step, donated to their Parameters like the weights, so the moving
// statistics and Dropout keys advance in place once per step. A Parameter both trainable and
// assigned is a ValueError.
//
// The mode is chosen in the constructor, by default the global context_mode() (nn/context.h) at
// construction. ExecMode::kPyNative builds the same step graph but runs it with
// runtime::interpret each step, then copies the new values into the same Parameter / state
// tensors. It is the simple reference path, not an eager
// op-by-op execution of the forward.
//
// Optimizer states are zero tensors created on first use and kept here, named as in MindSpore:
// "moments.<param name>" (Momentum), "moment1.<name>" / "moment2.<name>" (Adam). Parameters with
// requires_grad == false are inputs of the graph but get no gradient and no optimizer update
// (only their assigned values, above).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/ir/tensor.h"
#include "nn/cell.h"
#include "nn/context.h"

namespace loom::ir {
class FuncGraph;
}  // namespace loom::ir

namespace loom::runtime {
class Executable;
}  // namespace loom::runtime

namespace loom::nn {

// construct(data, label) = loss_fn(backbone(data), label). The children are registered as
// "_backbone" and "_loss_fn" without prefixing their parameter names (auto_prefix = false, as in
// MindSpore): the backbone's names stay "conv1.weight", and so do checkpoints and optimizer
// states ("moments.conv1.weight").
class WithLossCell : public Cell {
 public:
  WithLossCell(std::shared_ptr<Cell> backbone, std::shared_ptr<Cell> loss_fn);
  ops::Var construct(const std::vector<ops::Var>& inputs) override;
  Cell& backbone() { return *backbone_; }

 private:
  Cell* backbone_;
  Cell* loss_fn_;
};

enum class OptimizerKind { kMomentum, kAdam };

// Formulas: optim/update.h (momentum_update with nesterov = false; adam_update). L2 weight decay.
struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::kMomentum;
  double learning_rate = 0.1;
  double momentum = 0.9;  // Momentum
  double beta1 = 0.9;     // Adam
  double beta2 = 0.999;   // Adam
  double eps = 1e-8;      // Adam
  double weight_decay = 0.0;
};

class TrainOneStepCell {
 public:
  TrainOneStepCell(std::shared_ptr<Cell> net_with_loss, OptimizerSpec opt,
                   std::optional<ExecMode> mode = std::nullopt);  // nullopt: context_mode()
  ~TrainOneStepCell();
  TrainOneStepCell(const TrainOneStepCell&) = delete;
  TrainOneStepCell& operator=(const TrainOneStepCell&) = delete;

  // One training step; returns the loss (computed before the update).
  Tensor step(const Tensor& data, const Tensor& label);

  std::size_t num_compilations() const { return num_compilations_; }  // graph mode
  // Seconds spent building step graphs (trace, grad, passes, compile), summed over them.
  double compile_seconds() const { return compile_seconds_; }
  ExecMode mode() const { return mode_; }
  std::int64_t num_steps() const { return steps_; }
  // The optimizer states by name ("moments.fc.weight"); null when not created yet.
  const Tensor* state(const std::string& name) const;
  // Every optimizer state made so far, by name (states are made at the first step of a
  // signature, zero-filled, unless set_state gave one).
  const std::map<std::string, Tensor>& states() const { return states_; }
  // Restoring a training run (checkpoints): sets state `name` to a copy of `value`. Before the
  // state exists it is created with this value (the first step checks its dtype and shape
  // against the parameter's: ValueError naming it); afterwards the value is copied into the
  // existing storage (ValueError on a dtype or shape mismatch).
  void set_state(const std::string& name, const Tensor& value);
  // The learning rate of the next steps (a step input: no new compilation). Schedules call it
  // before each step; ValueError when negative.
  void set_learning_rate(double lr);
  // Sets the number of steps done (Adam's bias corrections use it).
  void set_num_steps(std::int64_t steps);
  const OptimizerSpec& optimizer() const { return opt_; }
  // With return_gradients on, each step also outputs the gradient of every trainable parameter
  // (extra step outputs, so one more compilation per signature; off by default), readable after
  // the step as gradients(): (parameter name, gradient) in parameter order. Summaries use it.
  void set_return_gradients(bool on);
  bool return_gradients() const { return return_gradients_; }
  const std::vector<std::pair<std::string, Tensor>>& gradients() const { return gradients_; }
  // A transform of the gradients between autodiff and the optimizer update, emitted into the step
  // graph: gets every trainable parameter's gradient (parameter order) and name, returns the
  // gradients to apply, one per parameter (data parallelism inserts its all-reduce here, as
  // MindSpore's DistributedGradReducer does). Set it before the first step (ValueError after).
  using GradientReducer = std::function<std::vector<ops::Var>(
      ops::Emitter& e, const std::vector<ops::Var>& grads, const std::vector<std::string>& names)>;
  void set_gradient_reducer(GradientReducer reducer);
  // The step graph the last step ran (null before the first step). Lives as long as this cell.
  const ir::FuncGraph* step_graph() const { return last_graph_; }
  Cell& network() { return *net_; }
  // The Executable the last graph-mode step ran (null before the first or in PyNative mode).
  const runtime::Executable* last_executable() const { return last_; }

 private:
  struct Compiled;
  Compiled& compiled_for(const Tensor& data, const Tensor& label);

  std::shared_ptr<Cell> net_;
  OptimizerSpec opt_;
  ExecMode mode_;
  std::map<std::string, std::unique_ptr<Compiled>> cache_;  // per input signature
  std::map<std::string, Tensor> states_;
  std::size_t num_compilations_ = 0;
  double compile_seconds_ = 0;
  std::int64_t steps_ = 0;
  const runtime::Executable* last_ = nullptr;
  const ir::FuncGraph* last_graph_ = nullptr;
  bool return_gradients_ = false;
  GradientReducer reducer_;
  std::vector<std::pair<std::string, Tensor>> gradients_;
};

}  // namespace loom::nn
