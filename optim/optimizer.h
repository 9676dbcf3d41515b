/// \file
/// Optimizers as objects, in MindSpore 2.10's shape: nn.Momentum, nn.SGD, nn.Adam and
/// nn.AdamWeightDecay with their formulas, their state tensors under MindSpore's names, parameter
/// groups with their own learning rate and weight decay, and a learning rate that is a number, a
/// per-step list or a schedule. The training step (nn::TrainOneStepCell, and through it
/// nn::Model) takes one and emits its update into the one compiled step graph.
///
/// ```
/// auto opt = std::make_shared<optim::Momentum>(optim::Momentum::Options{
///     .learning_rate = 0.01, .momentum = 0.9, .weight_decay = 1e-4});
/// nn::TrainOneStepCell step(with_loss, opt);
/// opt->states();   // {"moments.conv1.weight": ..., ...}, made when step was constructed
/// ```
///
/// What each one computes (g = grad + weight_decay * param where it says L2; all elementwise;
/// checked against MindSpore 2.10 in tests/optim, its data from tests/optim/reference):
/// - Momentum (ApplyMomentum), L2: accum' = momentum * accum + g; param' = param - lr * accum'
///   (use_nesterov: param' = param - (g * lr + accum' * momentum * lr), the documented formula;
///   MindSpore 2.10's CPU kernel ignores the flag). States "moments.<param>", zeros.
/// - SGD, L2: with momentum > 0, per element: the first update (stat > 0) sets accum' = g and
///   stat' = 0, later ones accum' = momentum * accum + (1 - dampening) * g; the step is accum'
///   (nesterov: g + momentum * accum'), param' = param - lr * step. With momentum 0: param' =
///   param - lr * g, accum and stat unchanged. States "accum.<param>" (zeros), "stat.<param>"
///   (ones). Nesterov needs momentum > 0 and dampening 0.
/// - Adam (ApplyAdam), L2: beta powers advance first (beta1_power *= beta1, in Float32 as
///   MindSpore keeps them), m' = m + (g - m)(1 - beta1), v' = v + (g² - v)(1 - beta2),
///   param' = param - lr sqrt(1 - beta2_power) / (1 - beta1_power) * m' / (sqrt(v') + eps)
///   (use_nesterov: m' replaced by beta1 m' + (1 - beta1) g). States "moment1.<param>",
///   "moment2.<param>" (zeros); scalars "beta1_power", "beta2_power" (start at 1).
/// - AdamWeightDecay (MindSpore's AdamW), decoupled decay, no bias correction:
///   m' = m + (g - m)(1 - beta1), v' = v + (g² - v)(1 - beta2),
///   param' = param - lr (m' / (sqrt(v') + eps) + weight_decay * param). States "adam_m.<param>",
///   "adam_v.<param>" (zeros).
///
/// Weight decay, as MindSpore's Optimizer: without groups it skips every parameter whose name
/// contains "beta" or "gamma" (BatchNorm's shift and scale); a group's weight decay applies to all
/// of its parameters. Global-norm clipping (clip_global_norm > 0) scales the gradients before the
/// update (MindSpore's ops.clip_by_global_norm).
///
/// Checkpoint entries (checkpoint_entries / load_entries), as MindSpore 2.10 writes them: the
/// states; "global_step" (Int32, (1)): the steps done; "learning_rate" (Float32, () for a number,
/// (N) for a list; none for a schedule; only when some parameter uses the common rate),
/// "learning_rate_group_<i>" for group i with its own rate; Momentum's and SGD's "momentum"
/// (Float32, ()); Adam's beta powers (Float32, (); Float64 for a Float64 network).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/ir/tensor.h"
#include "ops/emitter.h"
#include "optim/lr_schedule.h"

namespace loom::optim {

/// Parameters with their own learning rate and / or weight decay (MindSpore's group_params).
struct ParamGroup {
  std::vector<std::string> params;  ///< full parameter names ("conv1.weight")
  std::optional<LearningRate> learning_rate;  ///< the group's own rate; none: the common one
  std::optional<double> weight_decay;  ///< the group's own weight decay; none: the common one
};

/// A trainable parameter as the optimizer sees it.
struct ParamInfo {
  std::string name;  ///< full parameter name ("conv1.weight")
  DType dtype;       ///< the parameter's dtype (and its states')
  Shape shape;       ///< the parameter's shape (and its states')
};

/// The base of the four optimizers: parameter groups, MindSpore's weight-decay filter, the
/// per-parameter states, the learning rates, the global step and the checkpoint entries. A
/// subclass names its states and emits its update of one parameter (update()). Not copyable.
class Optimizer {
 public:
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// MindSpore's class name: "Momentum", "SGD", "Adam", "AdamWeightDecay".
  virtual std::string name() const = 0;
  /// One line for logs: "Momentum(lr 0.01, momentum 0.9, weight decay 0.0001)".
  virtual std::string describe() const = 0;

  /// Makes the states of these trainable parameters (in order). The parameters with a group
  /// must all exist; with groups, parameters in none are not updated (as MindSpore's optimizer
  /// updates only the parameters it was given); ValueError naming the first group parameter that is
  /// not among them. Called by the training step; calling it again with the same parameters keeps
  /// the states.
  void init(const std::vector<ParamInfo>& params);
  /// Whether `param` is updated (init'ed and in a group, when there are groups).
  bool updates(const std::string& param) const;

  // ---- Inside the step graph ----
  /// The names of the step's scalar inputs, in order: "learning_rate" (the common rate), then
  /// "learning_rate_group_<i>" for each group i with its own rate, then the optimizer's own
  /// (Adam: "beta1_power", "beta2_power").
  std::vector<std::string> input_names() const;
  /// Their values for the next step, as rank-0 tensors of `dtype` (the rates at the global step;
  /// Adam's beta powers advanced for that step). Remembers `dtype` as input_dtype().
  std::vector<Tensor> input_values(DType dtype) const;
  /// The dtype of the step's scalar inputs: the first parameter's (set by init), or the one
  /// input_values() was last asked for.
  DType input_dtype() const { return input_dtype_; }
  /// The gradients after the optimizer's transform (clipping), in parameter order.
  std::vector<ops::Var> transform_gradients(ops::Emitter& e,
                                            const std::vector<ops::Var>& grads) const;
  /// The update of parameter `param` (init'ed), emitted into `e`: `value` is the parameter,
  /// `states` its states (state_prefixes() order), `grad` its gradient after
  /// transform_gradients(), `inputs` the Vars of input_names(). Returns the new parameter, then the
  /// new states in the same order.
  virtual std::vector<ops::Var> update(ops::Emitter& e, const std::string& param,
                                       const ops::Var& value, const std::vector<ops::Var>& states,
                                       const ops::Var& grad,
                                       const std::vector<ops::Var>& inputs) const = 0;
  /// After a step ran: the global step advances (and Adam's beta powers with it).
  virtual void step_done();

  // ---- State ----
  /// The per-parameter state prefixes, in order ("moments"; "accum", "stat"; ...).
  virtual std::vector<std::string> state_prefixes() const = 0;
  /// Every state tensor by name ("moments.conv1.weight"), made by init().
  const std::map<std::string, Tensor>& states() const { return states_; }
  /// The state tensor named `name`; null when there is none.
  Tensor* state(const std::string& name);
  /// The steps done (the 0-based index of the next step).
  std::int64_t global_step() const { return global_step_; }
  /// Sets the steps done (a resumed run); Adam's beta powers are recomputed from it. ValueError
  /// when `step` is negative.
  void set_global_step(std::int64_t step);
  /// The learning rate of a group at the current global step (the next step's), or at `step`.
  /// `group` is an index into the parameter groups; a group without its own rate, and any index
  /// when there are no groups, gives the common rate. A negative `step` gives step 0's rate.
  ///@{
  double learning_rate(std::size_t group = 0) const { return learning_rate_at(global_step_, group); }
  double learning_rate_at(std::int64_t step, std::size_t group = 0) const;
  ///@}
  /// Sets a constant learning rate: the common one and that of every group with its own
  /// (MindSpore's learning_rate.set_data). ValueError when negative.
  void set_learning_rate(double lr);

  /// The checkpoint entries (optim/optimizer.h lists them), and loading them back: every state of
  /// an init'ed parameter must be there (ValueError naming the first missing one), with its dtype
  /// and shape; global_step and the beta powers are read, the learning rates and hyper-parameters
  /// are left (the run's own configuration rules). The states may live on a device
  /// (TrainOneStepCell moves them to its own): checkpoint_entries gives host copies of those,
  /// load_entries writes into them in place through their backend.
  ///@{
  std::vector<std::pair<std::string, Tensor>> checkpoint_entries() const;
  void load_entries(const std::vector<std::pair<std::string, Tensor>>& entries);
  ///@}

 protected:
  /// The settings every optimizer has (from its Options).
  struct Common {
    LearningRate learning_rate;      ///< the common learning rate
    double weight_decay;             ///< the common weight decay
    std::vector<ParamGroup> groups;  ///< the parameter groups (none: every parameter)
    double clip_global_norm;         ///< the gradients' global-norm bound (0: no clipping)
  };
  /// An optimizer with these settings (checked by the subclass).
  explicit Optimizer(Common common);
  /// The settings; set_learning_rate() changes their learning rates.
  const Common& common() const { return common_; }

  /// The optimizer's own step inputs and checkpoint entries (none here). own_input_names() and
  /// own_input_values() give the extra step inputs and their values for the next step (Adam's beta
  /// powers); own_entries() the extra checkpoint entries (Adam's beta powers, Momentum's and SGD's
  /// "momentum"); load_own_entries() reads them back, and recomputes what follows the global step
  /// when they are not there (set_global_step() calls it with none).
  ///@{
  virtual std::vector<std::string> own_input_names() const { return {}; }
  virtual std::vector<double> own_input_values() const { return {}; }
  virtual std::vector<std::pair<std::string, Tensor>> own_entries() const { return {}; }
  virtual void load_own_entries(const std::vector<std::pair<std::string, Tensor>>&) {}
  ///@}
  /// The initial value of a state with `prefix` (0 unless said otherwise).
  virtual double state_init(const std::string& prefix) const { return 0.0; }

  /// The weight decay of a parameter (after MindSpore's filter).
  double weight_decay_of(const std::string& param) const;
  /// The index among input_names() of a parameter's learning rate: its group's own rate, or 0
  /// (the common rate).
  std::size_t group_of(const std::string& param) const;
  /// The learning-rate Var of a parameter, cast to its dtype.
  ops::Var lr_of(ops::Emitter& e, const std::string& param, const ops::Var& value,
                 const std::vector<ops::Var>& inputs) const;
  /// The gradient with L2 weight decay, grad + weight_decay * value (MindSpore's
  /// AddN(Mul(weight, weight_decay), grad)); `grad` itself when weight_decay is 0.
  static ops::Var l2(ops::Emitter& e, const ops::Var& value, const ops::Var& grad,
                     double weight_decay);
  std::int64_t global_step_ = 0;  ///< the steps done (global_step())

 private:
  mutable DType input_dtype_ = DType::kFloat32;
  Common common_;
  std::vector<ParamInfo> params_;
  std::map<std::string, Tensor> states_;
};

/// MindSpore's nn.Momentum (ApplyMomentum, L2 weight decay); states "moments.<param>".
class Momentum final : public Optimizer {
 public:
  /// Momentum's settings.
  struct Options {
    LearningRate learning_rate = 0.1;  ///< a number or a per-step list (>= 0), or a schedule
    double momentum = 0.9;             ///< >= 0
    double weight_decay = 0.0;         ///< L2 weight decay (>= 0)
    bool use_nesterov = false;         ///< Nesterov momentum
    std::vector<ParamGroup> groups;    ///< parameter groups (none: every parameter, one rate)
    double clip_global_norm = 0.0;     ///< the gradients' global-norm bound (0: no clipping)
  };
  /// ValueError when a setting is out of range (naming it).
  explicit Momentum(Options options);
  std::string name() const override { return "Momentum"; }
  std::string describe() const override;
  std::vector<std::string> state_prefixes() const override { return {"moments"}; }
  std::vector<ops::Var> update(ops::Emitter& e, const std::string& param, const ops::Var& value,
                               const std::vector<ops::Var>& states, const ops::Var& grad,
                               const std::vector<ops::Var>& inputs) const override;
  /// The momentum.
  double momentum() const { return momentum_; }

 protected:
  std::vector<std::pair<std::string, Tensor>> own_entries() const override;

 private:
  double momentum_;
  bool nesterov_;
};

/// MindSpore's nn.SGD (momentum, dampening, Nesterov, L2 weight decay); states "accum.<param>"
/// and "stat.<param>".
class SGD final : public Optimizer {
 public:
  /// SGD's settings.
  struct Options {
    LearningRate learning_rate = 0.1;  ///< a number or a per-step list (>= 0), or a schedule
    double momentum = 0.0;             ///< >= 0; 0: plain SGD
    double dampening = 0.0;            ///< >= 0
    double weight_decay = 0.0;         ///< L2 weight decay (>= 0)
    bool nesterov = false;             ///< Nesterov momentum (needs momentum > 0, dampening 0)
    std::vector<ParamGroup> groups;    ///< parameter groups (none: every parameter, one rate)
    double clip_global_norm = 0.0;     ///< the gradients' global-norm bound (0: no clipping)
  };
  /// ValueError when a setting is out of range (naming it), or with nesterov unless momentum > 0
  /// and dampening 0.
  explicit SGD(Options options);
  std::string name() const override { return "SGD"; }
  std::string describe() const override;
  std::vector<std::string> state_prefixes() const override { return {"accum", "stat"}; }
  std::vector<ops::Var> update(ops::Emitter& e, const std::string& param, const ops::Var& value,
                               const std::vector<ops::Var>& states, const ops::Var& grad,
                               const std::vector<ops::Var>& inputs) const override;

 protected:
  std::vector<std::pair<std::string, Tensor>> own_entries() const override;
  double state_init(const std::string& prefix) const override { return prefix == "stat"; }

 private:
  double momentum_, dampening_;
  bool nesterov_;
};

/// MindSpore's nn.Adam (ApplyAdam, bias-corrected, L2 weight decay); states "moment1.<param>"
/// and "moment2.<param>", scalars "beta1_power" and "beta2_power".
class Adam final : public Optimizer {
 public:
  /// Adam's settings.
  struct Options {
    LearningRate learning_rate = 1e-3;  ///< a number or a per-step list (>= 0), or a schedule
    double beta1 = 0.9;                 ///< in [0, 1)
    double beta2 = 0.999;               ///< in [0, 1)
    double eps = 1e-8;                  ///< >= 0
    double weight_decay = 0.0;          ///< L2 weight decay (>= 0)
    bool use_nesterov = false;          ///< Nesterov momentum
    std::vector<ParamGroup> groups;     ///< parameter groups (none: every parameter, one rate)
    double clip_global_norm = 0.0;      ///< the gradients' global-norm bound (0: no clipping)
  };
  /// ValueError when a setting is out of range (naming it).
  explicit Adam(Options options);
  std::string name() const override { return "Adam"; }
  std::string describe() const override;
  std::vector<std::string> state_prefixes() const override { return {"moment1", "moment2"}; }
  std::vector<ops::Var> update(ops::Emitter& e, const std::string& param, const ops::Var& value,
                               const std::vector<ops::Var>& states, const ops::Var& grad,
                               const std::vector<ops::Var>& inputs) const override;
  void step_done() override;

 protected:
  std::vector<std::string> own_input_names() const override;
  std::vector<double> own_input_values() const override;
  std::vector<std::pair<std::string, Tensor>> own_entries() const override;
  void load_own_entries(const std::vector<std::pair<std::string, Tensor>>& entries) override;

 private:
  /// beta^t after t steps, advanced in the dtype of the step's inputs (Float32 for a Float32
  /// network, as MindSpore keeps them; Float64 for a Float64 one).
  double advance(double power, double beta) const;
  double beta1_, beta2_, eps_;
  bool nesterov_;
  double beta1_power_ = 1.0, beta2_power_ = 1.0;  ///< after the steps done
};

/// MindSpore's nn.AdamWeightDecay (AdamW: decoupled weight decay, no bias correction); states
/// "adam_m.<param>" and "adam_v.<param>".
class AdamWeightDecay final : public Optimizer {
 public:
  /// AdamWeightDecay's settings.
  struct Options {
    LearningRate learning_rate = 1e-3;  ///< a number or a per-step list (>= 0), or a schedule
    double beta1 = 0.9;                 ///< in [0, 1)
    double beta2 = 0.999;               ///< in [0, 1)
    double eps = 1e-6;                  ///< >= 0
    double weight_decay = 0.0;          ///< decoupled weight decay (>= 0)
    std::vector<ParamGroup> groups;     ///< parameter groups (none: every parameter, one rate)
    double clip_global_norm = 0.0;      ///< the gradients' global-norm bound (0: no clipping)
  };
  /// ValueError when a setting is out of range (naming it).
  explicit AdamWeightDecay(Options options);
  std::string name() const override { return "AdamWeightDecay"; }
  std::string describe() const override;
  std::vector<std::string> state_prefixes() const override { return {"adam_m", "adam_v"}; }
  std::vector<ops::Var> update(ops::Emitter& e, const std::string& param, const ops::Var& value,
                               const std::vector<ops::Var>& states, const ops::Var& grad,
                               const std::vector<ops::Var>& inputs) const override;

 private:
  double beta1_, beta2_, eps_;
};

/// The four optimizers, as OptimizerSpec names them: kMomentum (Momentum, "momentum"), kSGD (SGD,
/// "sgd"), kAdam (Adam, "adam"), kAdamW (AdamWeightDecay, "adamw").
enum class OptimizerKind { kMomentum, kSGD, kAdam, kAdamW };
/// One description of any of the four, for recipes and the command line (`loom train
/// --optimizer momentum|sgd|adam|adamw`); make_optimizer() makes the optimizer.
struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::kMomentum;  ///< which optimizer
  double learning_rate = 0.1;  ///< a constant learning rate
  double momentum = 0.9;   ///< Momentum, SGD
  double dampening = 0.0;  ///< SGD
  bool nesterov = false;   ///< Momentum, SGD, Adam
  double beta1 = 0.9;      ///< Adam, AdamWeightDecay
  double beta2 = 0.999;    ///< Adam, AdamWeightDecay
  std::optional<double> eps;  ///< default: Adam 1e-8, AdamWeightDecay 1e-6 (MindSpore's)
  double weight_decay = 0.0;      ///< all four (AdamWeightDecay's is decoupled, the others' L2)
  double clip_global_norm = 0.0;  ///< the gradients' global-norm bound (0: no clipping)
};
/// A kind's name ("momentum", "sgd", "adam", "adamw") and back (kind_from_name: ValueError listing
/// them for any other name).
///@{
const char* kind_name(OptimizerKind kind);
OptimizerKind kind_from_name(const std::string& name);
///@}
/// The optimizer of a spec; `learning_rate` replaces spec.learning_rate when given (a list or a
/// schedule). Hyper-parameters out of range are ValueError naming the optimizer.
std::shared_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec,
                                          std::optional<LearningRate> learning_rate = {});

}  // namespace loom::optim
