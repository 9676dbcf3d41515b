/// \file
/// Training wrappers: MindSpore's nn.WithLossCell and nn.TrainOneStepCell.
///
/// ```
/// auto net = std::make_shared<SequentialCell>(...);
/// auto with_loss = std::make_shared<WithLossCell>(net, std::make_shared<MyMSE>());
/// auto opt = std::make_shared<optim::Momentum>(optim::Momentum::Options{.learning_rate = 0.1});
/// TrainOneStepCell train(with_loss, opt);
/// for (...) Tensor loss = train.step(x, y);   // updates net's Parameters in place
/// ```
///
/// TrainOneStepCell::step, graph mode (ExecMode::kGraph): on the first call with a new input
/// signature (dtypes and shapes of data and label) and training flag of the network it builds
/// ONE step graph (a runtime::CompiledFunction program, purpose kTrain)
///
/// ```
/// (data, label, weights..., states..., learning rates..., [optimizer inputs])
///   → MakeTuple(loss, new weights..., new states..., new assigned values..., [gradients])
/// ```
///
/// by tracing net_with_loss, differentiating it (autodiff::grad with get_by_list and
/// return_value) with respect to the parameters the optimizer updates, passing the gradients
/// through the gradient reducer (data parallelism) and the optimizer's transform (clipping), and
/// appending the optimizer's update of every parameter (optim/optimizer.h; its nodes carry role
/// optimizer). The CompiledFunction runs the training pipeline (core/passes/pipeline.h) and
/// compiles it, donating each new weight / state output to its input: the Cells' Parameter
/// tensors and the optimizer's states are updated in place (same storage). Later calls with the
/// same signature and training flag reuse the plan (num_compilations(); compile_seconds() is
/// the time spent tracing, differentiating, running the passes and compiling, summed). The
/// learning rates and the optimizer's own scalars (Adam's beta powers) are step inputs, computed
/// on the host from the optimizer's global step: schedules need no recompilation.
///
/// State updates (Cell::assign, e.g. BatchNorm2d's moving statistics, Dropout's key): the traced
/// forward then returns MakeTuple(loss, new values...) (nn/cell.h). The step differentiates the
/// loss only: grad runs with sens_param and the sensitivity MakeTuple(ones_like(loss),
/// zeros_like(new value)...) built as constants; the zero sensitivities contribute zero, so the
/// gradients are exactly those of the loss. (This keeps one forward: differentiating a wrapper
/// that returns the loss alone would need the forward again for the new values.) The new values
/// are outputs of the step, donated to their Parameters like the weights, so the moving
/// statistics and Dropout keys advance in place once per step. A Parameter both trainable and
/// assigned is a ValueError.
///
/// The mode is chosen in the constructor, by default the global context_mode() (nn/context.h) at
/// construction. ExecMode::kPyNative builds the same step graph but runs it through the reference
/// interpreter (runtime::interpret) each step; donation writes the new values into the same
/// Parameter and state tensors. It is the simple reference path, not an eager op-by-op execution
/// of the forward.
///
/// Devices: the step compiles for the context's device when the cell is constructed
/// (nn/context.h). step() copies the batch (data and label: host tensors, or tensors already there)
/// to that device, moves the Parameters and the optimizer states there at the first step (they
/// stay; set_state and checkpoint restores write in place wherever they are) and returns the loss
/// and the gradients on that device: backend::to_host reads them.
///
/// Optimizer states live in the optimizer, made for the network's trainable parameters when the
/// cell is constructed and named as in MindSpore ("moments.<param>"...). Parameters with
/// requires_grad == false are inputs of the graph but get no gradient and no optimizer update
/// (only their assigned values, above).
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "core/ir/tensor.h"
#include "core/passes/amp.h"
#include "nn/cell.h"
#include "nn/context.h"
#include "optim/optimizer.h"

namespace loom::ir {
class FuncGraph;
class Module;
}  // namespace loom::ir

namespace loom::runtime {
class CompiledFunction;
class Executable;
class Observer;
struct Program;
}  // namespace loom::runtime

namespace loom::nn {

/// construct(data, label) = loss_fn(backbone(data), label). The children are registered as
/// "_backbone" and "_loss_fn" without prefixing their parameter names (auto_prefix = false, as in
/// MindSpore): the backbone's names stay "conv1.weight", and so do checkpoints and optimizer
/// states ("moments.conv1.weight").
class WithLossCell : public Cell {
 public:
  /// ValueError when either Cell is null.
  WithLossCell(std::shared_ptr<Cell> backbone, std::shared_ptr<Cell> loss_fn);
  /// The loss of `inputs` = (data, label): loss_fn(backbone(data), label). ValueError unless there
  /// are two inputs.
  ops::Var construct(const std::vector<ops::Var>& inputs) override;
  /// The backbone (the network without the loss).
  Cell& backbone() { return *backbone_; }

 private:
  Cell* backbone_;
  Cell* loss_fn_;
};

/// The optimizers' description for recipes and quick construction (optim/optimizer.h).
///@{
using OptimizerKind = optim::OptimizerKind;
using OptimizerSpec = optim::OptimizerSpec;
///@}

/// Loss scaling, as MindSpore's loss scale managers (mindspore.amp) configure
/// TrainOneStepWithLossScaleCell: FixedLossScaleManager(loss_scale, drop_overflow_update) and
/// DynamicLossScaleManager(init_loss_scale, scale_factor, scale_window). With it, the step seeds
/// the backward pass with the scale instead of 1, multiplies every gradient by 1/scale (after
/// the gradient reducer, before the optimizer's transform), and, unless a fixed scale keeps its
/// updates, checks the gradients (FloatStatus, summed): on an Inf or NaN every weight and
/// optimizer state keeps its value (the step skips the update; the optimizer's step count does
/// not advance, as MindSpore's optimizer is not run). The dynamic rule, inside the step graph:
///   on overflow: scale = max(scale / factor, 1);
///   should_inc = cur_iter - last_overflow_iter >= window;
///   on overflow or should_inc: last_overflow_iter = cur_iter;
///   should_inc and no overflow: scale *= factor;   cur_iter += 1 (from 1).
/// The states are MindSpore's parameters: "scale_sense" (Float32, ()), and for the dynamic rule
/// "current_iterator_step" and "last_overflow_iterator_step" (Int32, ()). They are step inputs
/// donated to the step's outputs, so checkpoints hold them (checkpoint/train_state.h).
struct LossScale {
  /// No loss scaling, FixedLossScaleManager's or DynamicLossScaleManager's.
  enum class Kind { kNone, kFixed, kDynamic };
  Kind kind = Kind::kNone;           ///< which of the three
  double scale = 1;                  ///< loss_scale (fixed), init_loss_scale (dynamic)
  double factor = 2;                 ///< scale_factor (dynamic)
  std::int64_t window = 2000;        ///< scale_window (dynamic)
  bool drop_overflow_update = true;  ///< fixed: skip the update on overflow (dynamic always does)

  /// MindSpore's FixedLossScaleManager (defaults 128, true).
  static LossScale fixed(double loss_scale = 128, bool drop_overflow_update = true);
  /// MindSpore's DynamicLossScaleManager (defaults 2**24, 2, 2000).
  static LossScale dynamic(double init_loss_scale = 16777216, double scale_factor = 2,
                           std::int64_t scale_window = 2000);
  /// Whether the loss is scaled at all (kind is not kNone).
  bool enabled() const { return kind != Kind::kNone; }
  /// Whether the step checks the gradients for Inf and NaN (and skips the update on overflow).
  bool checks_overflow() const {
    return kind == Kind::kDynamic || (kind == Kind::kFixed && drop_overflow_update);
  }
  /// "none", "fixed 128", "fixed 128 (updates kept on overflow)", "dynamic (init 16777216,
  /// factor 2, window 2000)".
  std::string describe() const;
  /// ValueError naming the field: a scale that is not finite and positive, a factor below 1, a
  /// window below 1.
  void validate() const;
};

/// MindSpore's nn.TrainOneStepCell: one training step of a network with its loss, compiled into
/// one step graph with the optimizer's update (see nn/train.h). Not copyable.
class TrainOneStepCell {
 public:
  /// The step of `net_with_loss` (construct(data, label) returns the loss) with `optimizer`, which
  /// makes its states for the network's trainable parameters now; `mode` nullopt:
  /// context_mode(). ValueError when either is null, or when the optimizer's groups name a
  /// parameter the network does not train. (A template so that `{...}` always means an
  /// OptimizerSpec.)
  template <std::derived_from<optim::Optimizer> O>
  TrainOneStepCell(std::shared_ptr<Cell> net_with_loss, std::shared_ptr<O> optimizer,
                   std::optional<ExecMode> mode = std::nullopt)
      : TrainOneStepCell(std::move(net_with_loss),
                         std::static_pointer_cast<optim::Optimizer>(std::move(optimizer)), mode,
                         0) {}
  /// As the other constructor, with the optimizer optim::make_optimizer(spec) makes.
  TrainOneStepCell(std::shared_ptr<Cell> net_with_loss, const OptimizerSpec& spec,
                   std::optional<ExecMode> mode = std::nullopt);
  ~TrainOneStepCell();
  TrainOneStepCell(const TrainOneStepCell&) = delete;
  TrainOneStepCell& operator=(const TrainOneStepCell&) = delete;

  /// One training step; returns the loss (computed before the update), on the step's device.
  Tensor step(const Tensor& data, const Tensor& label);

  std::size_t num_compilations() const;  ///< step graphs compiled (graph mode; 0 in PyNative)
  /// Seconds spent building step graphs (trace, grad, passes, compile), summed over them.
  double compile_seconds() const;
  /// The execution mode, chosen at construction.
  ExecMode mode() const { return mode_; }
  /// Steps done: the optimizer's global step.
  std::int64_t num_steps() const { return optimizer_->global_step(); }
  /// The optimizer, and the shared pointer that holds it.
  ///@{
  optim::Optimizer& optimizer() { return *optimizer_; }
  const optim::Optimizer& optimizer() const { return *optimizer_; }
  const std::shared_ptr<optim::Optimizer>& optimizer_ptr() const { return optimizer_; }
  ///@}
  /// The optimizer states by name ("moments.fc.weight"); null when there is none of that name.
  const Tensor* state(const std::string& name) const;
  /// Every optimizer state by name (the optimizer's states()).
  const std::map<std::string, Tensor>& states() const { return optimizer_->states(); }
  /// Restoring a training run: copies `value` into state `name` (ValueError when there is no such
  /// state, or on a dtype or shape mismatch).
  void set_state(const std::string& name, const Tensor& value);
  /// A constant learning rate for the next steps (a step input: no new compilation); ValueError
  /// when negative.
  void set_learning_rate(double lr) { optimizer_->set_learning_rate(lr); }
  /// Sets the number of steps done (schedules and Adam's bias corrections use it).
  void set_num_steps(std::int64_t steps) { optimizer_->set_global_step(steps); }
  /// With return_gradients on, each step also outputs the gradient of every trainable parameter
  /// (extra step outputs, so one more compilation per signature; off by default), readable after
  /// the step as gradients(): (parameter name, gradient) in parameter order. Summaries use it.
  void set_return_gradients(bool on);
  /// Whether the steps return the gradients (set_return_gradients()).
  bool return_gradients() const { return return_gradients_; }
  /// The last step's gradients, (parameter name, gradient) in parameter order, on the step's
  /// device; empty before the first step and when the last step did not return them.
  const std::vector<std::pair<std::string, Tensor>>& gradients() const { return gradients_; }
  /// A transform of the gradients between autodiff and the optimizer update, emitted into the step
  /// graph: gets every trainable parameter's gradient (parameter order) and name, returns the
  /// gradients to apply, one per parameter (data parallelism inserts its all-reduce here, as
  /// MindSpore's DistributedGradReducer does).
  using GradientReducer = std::function<std::vector<ops::Var>(
      ops::Emitter& e, const std::vector<ops::Var>& grads, const std::vector<std::string>& names)>;
  /// Sets the gradient reducer; before the first step (ValueError after).
  void set_gradient_reducer(GradientReducer reducer);
  /// Loss scaling for the steps (LossScale above); before the first step (ValueError after, or
  /// for an invalid LossScale). LossScale{} (kNone) turns it off.
  void set_loss_scale(const LossScale& loss_scale);
  /// The loss scaling the steps use.
  const LossScale& loss_scale_manager() const { return loss_scale_; }
  /// Mixed precision (core/passes/amp.h): the traced forward graph is cast for `amp` (its level
  /// and low dtype; AmpLevel::kAuto as MindSpore 2.10's "auto") before autodiff, so the
  /// gradients reach the Float32 weights through the casts. Before the first step (ValueError
  /// after). The loss scaling is set apart (set_loss_scale; build_train_network picks
  /// MindSpore's per level).
  void set_amp(const passes::AmpOptions& amp);
  /// The mixed precision the steps use (level O0: none).
  const passes::AmpOptions& amp() const { return amp_; }
  /// The current loss scale (1 without loss scaling), read from its state.
  double loss_scale() const;
  /// Whether the last step found an Inf or NaN gradient and skipped its update (false before
  /// the first step and when the steps do not check).
  bool overflow() const { return overflow_; }
  /// Steps skipped on overflow (since this cell was made, or as set by a restore), and its
  /// restore.
  ///@{
  std::int64_t skipped_steps() const { return skipped_steps_; }
  void set_skipped_steps(std::int64_t n) { skipped_steps_ = n; }
  ///@}
  /// The loss scaling states by name ("scale_sense"...; empty without loss scaling), and a
  /// restore of one (ValueError for an unknown name, a dtype or shape mismatch).
  ///@{
  const std::map<std::string, Tensor>& loss_scale_states() const { return loss_scale_states_; }
  void set_loss_scale_state(const std::string& name, const Tensor& value);
  ///@}
  /// The step graph the last step ran (null before the first step). Lives as long as this cell.
  const ir::FuncGraph* step_graph() const;
  /// The network with its loss (net_with_loss).
  Cell& network() { return *net_; }
  /// The Executable the last graph-mode step ran (null before the first or in PyNative mode).
  const runtime::Executable* last_executable() const;

  /// The compiled step (runtime/compiled_function.h): its pipeline (set_passes), its dumps
  /// (set_save_graphs_dir) and its observers, which see every launch of the step.
  runtime::CompiledFunction& compiled_function() { return *fn_; }
  /// Adds and removes an observer of every launch of the step (the compiled function's;
  /// add_observer: ValueError when null).
  ///@{
  void add_observer(std::shared_ptr<runtime::Observer> observer);
  void remove_observer(const runtime::Observer* observer);
  ///@}

 private:
  TrainOneStepCell(std::shared_ptr<Cell> net_with_loss, std::shared_ptr<optim::Optimizer> optimizer,
                   std::optional<ExecMode> mode, int);
  runtime::Program build(const std::vector<ir::AbstractPtr>& signature,
                         const std::function<void(const ir::Module&, const std::string&)>& dump);

  std::shared_ptr<Cell> net_;
  std::shared_ptr<optim::Optimizer> optimizer_;
  ExecMode mode_;
  std::unique_ptr<runtime::CompiledFunction> fn_;
  bool return_gradients_ = false;
  GradientReducer reducer_;
  LossScale loss_scale_;
  std::map<std::string, Tensor> loss_scale_states_;
  passes::AmpOptions amp_;
  bool overflow_ = false;
  std::int64_t skipped_steps_ = 0;
  std::vector<std::pair<std::string, Tensor>> gradients_;
  backend::BatchMover batches_;  ///< the batches' copies to the step's device
};

/// MindSpore's mindspore.amp.build_train_network: the training step of `network` with
/// `loss_fn` (null: the network computes its loss from (data, label) itself) and `optimizer` at
/// amp `level` ("O0", "O1", "O2", "O3", "auto"; core/passes/amp.h) in `dtype` (Float16 or
/// BFloat16), with the level's loss scaling unless `loss_scale` is given: O2 scales dynamically
/// (LossScale::dynamic(): 2**24, 2, 2000), the others not. A loss_fn is wrapped in a WithLossCell,
/// whose "_loss_fn" computes in Float32 at every level. ValueError for a null network or
/// optimizer, an unknown level or a dtype that is not a low-precision float.
///
/// ```
/// auto step = nn::build_train_network(net, opt, std::make_shared<SoftmaxCrossEntropyWithLogits>(),
///                                     "O2", DType::kBFloat16);
/// Tensor loss = step->step(x, y);
/// ```
std::unique_ptr<TrainOneStepCell> build_train_network(
    std::shared_ptr<Cell> network, std::shared_ptr<optim::Optimizer> optimizer,
    std::shared_ptr<Cell> loss_fn = nullptr, std::string_view level = "O0",
    DType dtype = DType::kFloat16, std::optional<LossScale> loss_scale = std::nullopt);

}  // namespace loom::nn
