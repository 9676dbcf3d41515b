/// \file
/// Watchpoints: MindInsight's watch conditions on weights, gradients, activations and tensors,
/// checked while training runs (Watcher: an observer of the training step and a callback of the
/// training loop) or afterwards over a dump (watch_dump). A condition is written as MindInsight
/// names it, with its parameters and an optional regex choosing its targets:
///
/// ```
/// auto conditions = debug::parse_watch_spec(
///     "gradient_vanishing(abs_mean_lt=1e-9);weight_overflow@^fc;tensor_all_zero@ReLU");
/// auto watcher = std::make_shared<debug::Watcher>(conditions, debug::WatchOptions{.every = 10});
/// model.add_observer(watcher);                          // tensors and activations
/// model.train(epochs, ds, {watcher.get()});             // steps, gradients, weights
/// for (const debug::WatchHit& h : watcher->hits()) std::cout << format_watch_hit(h) << "\n";
/// // watch: step 12: gradient_vanishing on conv1.weight: abs_mean 3.2e-10 < 1e-09
/// ```
///
/// What MindInsight and MindSpore do (the sources read; loom follows them unless noted):
/// - [CL] mindspore-ai/mindinsight mindinsight/debugger/conditionmgr/condition_list.py: the ids,
///   abbreviations, targets, parameters and defaults of the conditions (table below).
/// - [CD] .../conditionmgr/condition.py: ParamNameEnum, ParamTypeEnum (CHECK_PARAM, SUPPORT_PARAM),
///   the value checks (percentages in [0, 100]; "abs" params >= 0; max_min_lt > 0; the others
///   finite), check_initialization_available (weight_initialization only at step 0).
/// - [WH] .../stream_handler/watchpoint_handler.py: the UI allows ONE check parameter per
///   watchpoint; support parameters must be exactly the check parameter's required_params
///   (range_percentage_lt/gt need range_start_inclusive and range_end_inclusive, and start <=
///   end); hidden parameters (atol, equal_nan, epsilon) are added with their defaults; a
///   check that could not be made is listed with error bits nan (1), inf (2), no_prev_tensor
///   (4) ("check failed" in the offline API), not as a triggered hit.
/// - [AC] .../debugger/api/conditions.py (the offline API): several check parameters may be set,
///   "a WatchpointHit happens for the parameters that the tensor triggered"; TensorTooLarge,
///   TensorTooSmall and TensorRange need at least one check parameter.
/// - [RC] .../conditionmgr/recommender.py: the recommended watchpoints: weight_initialization
///   (zero_percentage_ge=100), weight_change_too_large (abs_mean_update_ratio_gt=1),
///   gradient_vanishing (abs_mean_lt=1e-9), tensor_overflow, tensor_all_zero
///   (zero_percentage_ge=100), activation_range on ReLU (range_percentage_gt=99.9 in [-1, 0]),
///   on Tanh (range_percentage_lt=0.1 in [tanh(-8.8), tanh(8.8)]) and Sigmoid (its
///   _sigmoid(x) is 1/(1+exp(x)), so its start exceeds its end: a MindInsight bug).
///   weight_not_changed and weight_change_too_small are not recommended ("we cannot identify
///   trainable weights").
/// - [NT] .../stream_cache/node_type_identifier.py: a weight is a Parameter named *.weight or
///   *.bias outside the optimizer; a gradient is any node under the Gradients/ scope; an activation
///   is a non-gradient node of type ELU, FastGelu, GELU, HSigmoid, HSwish, LeakyReLU,
///   LogSigmoid, LogSoftmax, PReLU, ReLU, ReLU6, Sigmoid, Softmax or Tanh.
/// - [TS] mindspore-ai/mindspore mindspore/ccsrc/debug/debugger/tensor_summary.cc
///   (TensorSummary<T>): every element as double; abs_mean = mean|x|; mean; max; min;
///   max_min = max - min; zero_percentage = 100 * count(x == 0) / n; range_percentage =
///   100 * count(start <= x <= end) / n (an unset bound is -inf / +inf); abs_mean_update_ratio =
///   mean|cur - prev| / (mean|prev| + epsilon); not changed = every |cur - prev| <= atol +
///   rtol * |prev| (AllCloseCalculator); general overflow = nan_count + inf_count > 0.
///   IsWatchpointHit: a tensor holding NaN or Inf is not evaluated by any other condition (error
///   bits, no hit); a change condition without a previous tensor is not evaluated (bit
///   no_prev_tensor); else hit = OR over the enabled parameters of parameter_t::Evaluate ([DS]).
/// - [DS] mindspore debug/debug_services.{h,cc}: parameter_t::Evaluate compares by the name's
///   suffix (_gt >, _lt <, _ge >=, _le <=) and a NaN statistic never hits (so rtol, atol,
///   epsilon and the range bounds, which have no statistic, never hit by themselves);
///   AddWatchPointsToCheck checks weight_initialization (INIT) ONLY at the initial suspend
///   (before the first step) and change conditions only at step end; Bool tensors are skipped;
///   empty tensors are skipped; the previous tensor is the previous iteration's (offline:
///   GetPrevIteration).
///
/// The conditions (MindInsight id, abbreviation, target; parameters with [CL] defaults; C = check,
/// S = support/setting parameter):
///
/// ```
/// weight_initialization WI weight    C zero_percentage_ge (100), C max_gt, C min_lt
/// weight_overflow       WO weight    none: any NaN or +-Inf
/// weight_too_large      WL weight    C abs_mean_gt, C max_gt, C min_gt, C mean_gt
/// weight_too_small      WS weight    C abs_mean_lt, C max_lt, C min_lt, C mean_lt
/// gradient_vanishing    GV gradient  C abs_mean_lt, C max_lt, C min_lt, C mean_lt
/// gradient_too_large    GL gradient  C abs_mean_gt, C max_gt, C min_gt, C mean_gt
/// gradient_exploding    GE gradient  none: any NaN or +-Inf
/// tensor_overflow       TO tensor    none: any NaN or +-Inf
/// operator_overflow     OO tensor    none: Ascend's overflow status (not in loom: refused)
/// tensor_too_large      TL tensor    as weight_too_large
/// tensor_too_small      TS tensor    as weight_too_small
/// tensor_all_zero       TZ tensor    C zero_percentage_ge (100)
/// weight_not_changed   WNC weight    S rtol (1e-5), S atol (1e-8), S equal_nan (false):
///                                    hit when every |cur - prev| <= atol + rtol * |prev|
/// weight_change_too_large WCL weight C abs_mean_update_ratio_gt (0.1), S epsilon (1e-9)
/// weight_change_too_small WCS weight C abs_mean_update_ratio_lt (1e-4), S epsilon (1e-9)
/// activation_range      AR activation S range_start_inclusive, S range_end_inclusive,
///                                    C range_percentage_lt, C range_percentage_gt,
///                                    C max_min_lt, C max_min_gt
/// tensor_range          TR tensor    as activation_range
/// ```
///
/// loom's choices where MindInsight gives none or loom differs:
///  - Several check parameters may be set (as [AC]); the condition hits when ANY holds ([TS]).
///    A condition given no check parameter takes the defaults above (weight_initialization and
///    tensor_all_zero: zero_percentage_ge=100; the change conditions: their ratio); with none to
///    take (too_large, too_small, the ranges) it is a ValueError, as [AC]. The settings (rtol,
///    atol, equal_nan, epsilon) always have their defaults unless set.
///  - epsilon: [TS] uses a fixed 1e-9 and never reads the parameter; loom uses the parameter
///    (default 1e-9, so the same unless set). equal_nan: sent but never read by [TS] (a tensor with
///    NaN is not evaluated at all); in loom equal_nan=true makes weight_not_changed evaluate a
///    weight holding NaN or Inf with NumPy's isclose rule (NaN == NaN, equal infinities close).
///  - Targets. weight: the network's parameters (Cell::parameters_and_names: every parameter,
///    trainable or not, not only *.weight / *.bias as [NT]), their values after the step;
///    gradient: the gradient of every trainable parameter that the step returns
///    (TrainOneStepCell::gradients), named by its parameter ([NT]'s "every node under
///    Gradients/" is `tensor_*@^Gradients/` in loom); activation: the outputs of forward-role
///    launches (any op: fused MatMulBiasAct/Conv2DBiasAct carry no activation type to filter
///    on; narrow them with `@regex`, e.g. `@ReLU`); tensor: the outputs of every launch.
///  - Names matched by `@regex` (std::regex ECMAScript, regex_search): a launch's full name
///    (docs/design.md "debug/": the Cell scope with its last component replaced by
///    {OpType}-op{label}, e.g. WithLossCell/_backbone/conv1/Conv2D-op3); a parameter's name for
///    weights and gradients (conv1.weight).
///  - Integer and Bool tensors are not checked (MindSpore summarizes integers too).
///  - Initialization conditions are checked once: online at on_train_begin on the weights as
///    training starts (reported as step rc.cur_step_num, 0 on a fresh run); offline on the
///    iteration-0 Parameter files of a training graph (the weights before the first step).
///    MindSpore's offline debugger checks INIT only for a special iteration (UINT_MAX).
///  - A tensor holding NaN/Inf (for the non-overflow conditions) or a change condition without a
///    previous value is "not checked": no hit, counted (not_checked_*), as MindInsight's errors.
///  - On a healthy run (LeNet-5, the zoo's Momentum 0.01 / 0.9) every default is silent but
///    weight_change_too_small's 1e-4: momentum starts at zero, so the first update is a tenth of
///    the steady one and fc2.weight's ratio there is 5e-5 to 1.1e-4 depending on the seed
///    (tests/debug/watch_test.cc, WatchHealthy). Zero-initialized parameters (none in LeNet: its
///    biases are uniform) make weight_initialization hit, and the change ratio of a parameter
///    that was 0 is mean|change| / epsilon: huge for weight_change_too_large.
///
/// UNCONFIRMED: what GetPrevIteration returns for a dump that skips iterations (MindSpore 1.x
/// read iteration - 1); loom compares with the previous DUMPED iteration of the same graph, so
/// the change then spans several steps. tools-reference C3's "tensor initialization (TI)" is not
/// a MindInsight condition in the condition_list.py read (tensor_initialization is only the
/// MindSpore wire name of weight_initialization, debug_grpc.proto); loom refuses it, naming
/// weight_initialization.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/ir/tensor.h"
#include "nn/callback.h"
#include "runtime/observer.h"

namespace loom::debug {

struct DumpDir;

/// What a condition watches: kWeight (the network's parameters), kGradient (the training step's
/// gradients), kTensor (every launch's outputs) or kActivation (forward-role launches' outputs).
enum class WatchTarget { kWeight, kGradient, kTensor, kActivation };
/// The target's name: "weight", "gradient", "tensor" or "activation".
std::string_view watch_target_name(WatchTarget target);

/// One parsed condition: its definition's name and target, the parameters in force (set by the
/// spec or defaulted, in [CL]'s order) and the regex choosing its targets ("" = all).
struct WatchCondition {
  std::string name;  ///< "gradient_vanishing"
  WatchTarget target = WatchTarget::kTensor;  ///< what it watches (its definition's)
  std::vector<std::pair<std::string, double>> params;  ///< equal_nan as 0 / 1
  std::string pattern;                                 ///< the text after '@'
  std::shared_ptr<const std::regex> regex;             ///< null when pattern is empty

  /// The value in force of the parameter `key`; nullopt when it has none.
  std::optional<double> param(std::string_view key) const;
  /// True when there is no regex or it matches part of `target_name` (std::regex_search).
  bool matches(const std::string& target_name) const;
  /// True for the change conditions: weight_not_changed, weight_change_too_large / _small.
  bool is_change() const;
  /// True for weight_initialization.
  bool is_initialization() const;
  /// The canonical spec text: "gradient_vanishing(abs_mean_lt=1e-09)@conv".
  std::string to_string() const;
};

/// Parses a `--watch` spec:
///
/// ```
/// spec      = condition { ";" condition }
/// condition = name [ "(" [ param { "," param } ] ")" ] [ "@" regex ]
/// param     = key "=" number          (equal_nan: true | false | 1 | 0)
/// ```
///
/// Blanks around names, keys, values and separators are ignored. The regex runs to the next ';'
/// (write a ';' inside it as `\x3b`). ValueError, naming the spec and the 1-based column: an empty
/// spec or condition, an unknown condition (operator_overflow and tensor_initialization with
/// their reasons), a parameter unknown to the condition or given twice, a value that is not a
/// finite number or out of MindInsight's range, a missing '=' or ')', text after ')', a bad regex,
/// parameters on a condition that takes none, no check parameter where there is no default, a
/// range bound without a range_percentage parameter (or the reverse), range start > end.
std::vector<WatchCondition> parse_watch_spec(const std::string& spec);

/// Every condition name loom knows, in [CL]'s order.
std::vector<std::string> watch_condition_names();

/// A check parameter that fired: its name, the threshold set and the tensor's statistic.
struct WatchValue {
  std::string param;  ///< "abs_mean_lt"
  double threshold = 0;  ///< the parameter's value
  double actual = 0;     ///< the tensor's statistic ("abs_mean" for abs_mean_lt)
};

/// The outcome of one condition on one tensor.
struct WatchCheck {
  /// kSilent: evaluated, no hit; kHit: evaluated, a hit. Not evaluated: kNotFloat (an integer or
  /// Bool tensor), kEmpty (no elements), kNonFinite (NaN or Inf, for a condition other than the
  /// overflow ones and weight_not_changed with equal_nan), kNoPrevious (a change condition with no
  /// previous value, or one of another size or a non-floating dtype).
  enum class Outcome { kSilent, kHit, kNotFloat, kEmpty, kNonFinite, kNoPrevious };
  Outcome outcome = Outcome::kSilent;  ///< what came of it
  /// kHit: what triggered, "abs_mean 3.2e-10 < 1e-09" (several parameters joined by ", ").
  std::string detail;
  /// kHit of a threshold condition: the parameters that fired (empty for the overflow conditions
  /// and weight_not_changed, whose detail says what was found).
  std::vector<WatchValue> values;
  /// True when outcome is kHit.
  bool hit() const { return outcome == Outcome::kHit; }
};

/// Evaluates `c` on a host tensor (`previous`: the value before, for the change conditions; null
/// when there is none). The statistics are computed in double (debug/tensor_stats.h), with one
/// more pass for a range or change condition. ValueError for a condition loom does not know.
WatchCheck check_watch_condition(const WatchCondition& c, const Tensor& current,
                                 const Tensor* previous = nullptr);

/// One condition that hit, on one tensor.
struct WatchHit {
  /// Online: the global step (weights: after it; initialization: the steps done when training
  /// began); offline: the dump iteration.
  std::int64_t step = 0;
  std::int64_t graph = -1;  ///< offline: the dump's graph id; -1 online
  std::string condition;    ///< "gradient_vanishing"
  WatchTarget target = WatchTarget::kTensor;  ///< the condition's target
  std::string name;         ///< "conv1.weight", or a launch output "<full name>:<slot>"
  std::string detail;       ///< "abs_mean 3.2e-10 < 1e-09"
  std::vector<WatchValue> values;  ///< WatchCheck::values: {"abs_mean_lt", 1e-09, 3.2e-10}
};

/// "watch: step 12: gradient_vanishing on conv1.weight: abs_mean 3.2e-10 < 1e-09";
/// offline "watch: graph 0 iteration 11: ...".
std::string format_watch_hit(const WatchHit& hit);

/// How a Watcher checks.
struct WatchOptions {
  std::int64_t every = 1;    ///< check steps whose global step is a multiple (`--watch-every`)
  /// Request the training loop's stop at the first hit (`--watch-stop`): at the end of the step
  /// (at on_train_begin for an initialization hit: no step runs).
  bool stop_on_hit = false;
  std::function<void(const WatchHit&)> on_hit;  ///< called at each hit, as it happens
};

/// The online checker: install it as an observer of the training step (Model::add_observer or
/// TrainOneStepCell::add_observer) AND as a callback of the training loop; tensors are checked
/// only between on_train_step_begin and on_train_step_end of a checked step (evaluations are
/// not). On a checked step: tensor conditions on every launch's outputs, activation conditions
/// on forward-role launches' outputs (after_launch, execution order); at on_train_step_end,
/// gradient conditions on rc.train_network->gradients() (on_train_begin turns
/// set_return_gradients on when there is one) then weight conditions on rc.network's
/// parameters, the change conditions against a copy taken at on_train_step_begin (only of the
/// weights some change condition matches). Initialization conditions: once, at on_train_begin.
/// ValueError at on_train_begin when a gradient condition has no train_network or a weight
/// condition no network.
class Watcher : public runtime::Observer, public nn::Callback {
 public:
  /// ValueError when every < 1, conditions is empty or holds a condition loom does not know.
  explicit Watcher(std::vector<WatchCondition> conditions, WatchOptions options = {});
  ~Watcher() override;

  /// The conditions checked.
  const std::vector<WatchCondition>& conditions() const { return conditions_; }
  /// Every hit so far, in the order found.
  const std::vector<WatchHit>& hits() const { return hits_; }
  /// stop_on_hit: true once a hit asked the loop to stop; first_hit() is that hit.
  bool stopped() const { return stopped_; }
  /// The first hit, or null when there is none.
  const WatchHit* first_hit() const { return hits_.empty() ? nullptr : &hits_.front(); }
  /// Condition evaluations made (integer, Bool and empty tensors are not evaluated).
  std::int64_t checks() const { return checks_; }
  /// The evaluations of checks() not made because the tensor held NaN or Inf (kNonFinite).
  std::int64_t not_checked_non_finite() const { return not_checked_non_finite_; }

  /// The checks (above): after_launch the tensor and activation conditions, on_train_begin the
  /// initialization conditions, on_train_step_begin starts a step (checked when its global step
  /// is a multiple of every), on_train_step_end the gradient and weight conditions; a stop asked
  /// by a hit is requested (RunContext::request_stop) at the end of on_train_begin or the step.
  ///@{
  void after_launch(const runtime::LaunchEvent& e) override;
  void on_train_begin(nn::RunContext& rc) override;
  void on_train_step_begin(nn::RunContext& rc) override;
  void on_train_step_end(nn::RunContext& rc) override;
  ///@}

 private:
  void record(const WatchCondition& c, const WatchCheck& r, const std::string& name);
  void check_weights(nn::RunContext& rc, bool initialization);
  nn::Cell* network_of(nn::RunContext& rc) const;
  const std::vector<std::size_t>& launch_conditions(const runtime::LaunchEvent& e,
                                                     std::string* full_name);

  std::vector<WatchCondition> conditions_;
  WatchOptions options_;
  std::vector<WatchHit> hits_;
  bool stopped_ = false;
  bool stop_pending_ = false;
  bool in_checked_step_ = false;
  std::int64_t step_ = 0;
  std::int64_t checks_ = 0, not_checked_non_finite_ = 0;
  std::map<std::string, Tensor> previous_;  ///< weight name -> value before the step
  /// Per launch (full name + role): its full name and the conditions matching it.
  struct LaunchEntry {
    std::string full_name;
    std::vector<std::size_t> conditions;
  };
  std::unordered_map<std::string, LaunchEntry> launch_cache_;
};

/// Options of watch_dump().
struct WatchDumpOptions {
  std::function<void(const WatchHit&)> on_hit;  ///< called at each hit, in order
};

/// What watch_dump() found.
struct WatchDumpResult {
  std::vector<WatchHit> hits;  ///< by graph, iteration, then execution order (timestamp)
  std::int64_t tensors = 0;    ///< files read
  std::int64_t checks = 0;     ///< condition evaluations made
  std::int64_t not_checked_non_finite = 0;   ///< evaluations not made: the tensor held NaN or Inf
  std::int64_t not_checked_no_previous = 0;  ///< change conditions with no previous value
  std::vector<std::string> notes;  ///< what could not be checked, and why
};

/// Offline: the conditions over a dump (debug/dump_reader.h).
/// - weights: the Parameter.{name} files that hold a network parameter: all but the step's inputs
///   (data, label, learning_rate, learning_rate_group_{g}, beta1_power, beta2_power; x0, x1...:
///   the inputs of a Cell's compiled function, e.g. the evaluation graph's) and the
///   optimizer states ({moments, accum, stat, moment1, moment2, adam_m, adam_v}.{another
///   Parameter file's name}); read from the graphs that have Gradient files (training steps) when
///   the dump has any, else from every graph. They hold the values before the iteration's step,
///   i.e. after step `iteration` (the same step numbers as online). weight_initialization: at
///   iteration 0 of a graph with Gradient files. Change conditions: against the same file of the
///   graph's previous dumped iteration (none for its first: not checked).
/// - gradients: the Gradient.{name} files. tensors: the launches' output files; activations: those
///   whose execution-order row (ms_execution_order_graph_{g}.csv) has role forward (a graph
///   without that file: activation conditions skip it, with a note). A launch's regex name is
///   its execution-order full name (its op name when the row is missing).
///
/// Reads every file a condition selects (load); ValueError naming the file on an unreadable one.
WatchDumpResult watch_dump(const DumpDir& dump, const std::vector<WatchCondition>& conditions,
                           const WatchDumpOptions& options = {});

}  // namespace loom::debug
