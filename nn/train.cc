// nn/train.h: WithLossCell and TrainOneStepCell (one traced, differentiated, optimized and
// compiled step graph per input signature, built for runtime::CompiledFunction).
#include "nn/train.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <limits>
#include <sstream>

#include "backends/backend.h"
#include "core/autodiff/grad.h"
#include "core/trace/graph_emitter.h"
#include "runtime/compiled_function.h"
#include "core/ir/anf.h"
#include "core/ir/error.h"
#include "core/ir/verify.h"
#include "core/passes/infer.h"
#include "core/passes/pass.h"
#include "runtime/executable.h"

namespace loom::nn {

using ir::Abstract;
using ir::Value;

WithLossCell::WithLossCell(std::shared_ptr<Cell> backbone, std::shared_ptr<Cell> loss_fn)
    : Cell("WithLossCell", /*auto_prefix=*/false) {
  if (!backbone || !loss_fn) {
    throw ValueError("WithLossCell: expected a backbone and a loss cell, got null");
  }
  backbone_ = &register_cell("_backbone", std::move(backbone));
  loss_fn_ = &register_cell("_loss_fn", std::move(loss_fn));
}

ops::Var WithLossCell::construct(const std::vector<ops::Var>& inputs) {
  if (inputs.size() != 2) {
    throw ValueError("WithLossCell: expected 2 inputs (data, label), got " +
                     std::to_string(inputs.size()));
  }
  return (*loss_fn_)(std::vector<ops::Var>{(*backbone_)(inputs[0]), inputs[1]});
}

// ---------------------------------------------------------------------------------------------

namespace {

std::vector<optim::ParamInfo> trainable_params(Cell& net) {
  std::vector<optim::ParamInfo> out;
  for (auto& [name, p] : net.parameters_and_names()) {
    if (p->requires_grad) out.push_back({name, p->value.dtype(), p->value.shape()});
  }
  return out;
}

// What a step program needs at run time: the weights it passes, the optimizer states after
// them, where its outputs end, and the names of the gradients it returns.
struct StepInfo {
  std::vector<Parameter*> weights;          // every graph weight, in parameter order
  std::vector<std::string> state_names;     // the states passed after the weights
  DType input_dtype = DType::kFloat32;      // of the learning rates and optimizer scalars
  std::size_t first_gradient = 0;           // output leaf of the first returned gradient
  std::vector<std::string> gradient_names;  // when return_gradients: the trailing outputs
  std::vector<std::string> loss_scale_names;  // the loss scaling states, after the inputs
  std::size_t overflow_leaf = 0;              // the overflow flag's output leaf (0: none)
};

constexpr const char* kScaleSense = "scale_sense";
constexpr const char* kCurIter = "current_iterator_step";
constexpr const char* kLastOverflowIter = "last_overflow_iterator_step";

std::string number(double v) {
  std::ostringstream s;
  s << std::setprecision(10) << v;  // 16777216, not 1.67772e+07
  return s.str();
}

}  // namespace

LossScale LossScale::fixed(double loss_scale, bool drop_overflow_update) {
  LossScale ls{.kind = Kind::kFixed, .scale = loss_scale,
               .drop_overflow_update = drop_overflow_update};
  ls.validate();
  return ls;
}

LossScale LossScale::dynamic(double init_loss_scale, double scale_factor,
                             std::int64_t scale_window) {
  LossScale ls{.kind = Kind::kDynamic, .scale = init_loss_scale, .factor = scale_factor,
               .window = scale_window};
  ls.validate();
  return ls;
}

std::string LossScale::describe() const {
  switch (kind) {
    case Kind::kNone: return "none";
    case Kind::kFixed:
      return "fixed " + number(scale) + (drop_overflow_update ? "" : " (updates kept on overflow)");
    case Kind::kDynamic:
      return "dynamic (init " + number(scale) + ", factor " + number(factor) + ", window " +
             std::to_string(window) + ")";
  }
  return "none";
}

void LossScale::validate() const {
  if (kind == Kind::kNone) return;
  if (!std::isfinite(scale) || scale <= 0 || static_cast<float>(scale) == 0 ||
      !std::isfinite(static_cast<float>(scale))) {
    throw ValueError("loss scale: expected a finite positive scale (as Float32), got " +
                     number(scale));
  }
  if (kind == Kind::kDynamic) {
    if (!std::isfinite(factor) || factor < 1) {
      throw ValueError("loss scale: expected a scale factor >= 1, got " + number(factor));
    }
    if (window < 1 || window > std::numeric_limits<std::int32_t>::max()) {
      throw ValueError("loss scale: expected a scale window in [1, 2147483647], got " +
                       std::to_string(window));
    }
  }
}

TrainOneStepCell::TrainOneStepCell(std::shared_ptr<Cell> net_with_loss,
                                   std::shared_ptr<optim::Optimizer> optimizer,
                                   std::optional<ExecMode> mode, int)
    : net_(std::move(net_with_loss)),
      optimizer_(std::move(optimizer)),
      mode_(mode.value_or(context_mode())) {
  if (!net_) throw ValueError("TrainOneStepCell: expected a network, got null");
  if (!optimizer_) throw ValueError("TrainOneStepCell: expected an optimizer, got null");
  optimizer_->init(trainable_params(*net_));
  fn_ = std::make_unique<runtime::CompiledFunction>(
      [this](const std::vector<ir::AbstractPtr>& signature,
             const runtime::CompiledFunction::Dump& dump) { return build(signature, dump); },
      runtime::FunctionOptions{.name = "train_step",
                               .purpose = passes::Purpose::kTrain,
                               .backend = &context_backend(),
                               .interpret = mode_ == ExecMode::kPyNative});
}

TrainOneStepCell::TrainOneStepCell(std::shared_ptr<Cell> net_with_loss, const OptimizerSpec& spec,
                                   std::optional<ExecMode> mode)
    : TrainOneStepCell(std::move(net_with_loss), optim::make_optimizer(spec), mode, 0) {}

TrainOneStepCell::~TrainOneStepCell() = default;

std::size_t TrainOneStepCell::num_compilations() const {
  return mode_ == ExecMode::kGraph ? fn_->num_compilations() : 0;
}

double TrainOneStepCell::compile_seconds() const { return fn_->compile_seconds(); }

const Tensor* TrainOneStepCell::state(const std::string& name) const {
  auto it = optimizer_->states().find(name);
  return it == optimizer_->states().end() ? nullptr : &it->second;
}

void TrainOneStepCell::set_state(const std::string& name, const Tensor& value) {
  Tensor* dst = optimizer_->state(name);
  if (dst == nullptr) {
    throw ValueError("TrainOneStepCell.set_state: expected a state of " + optimizer_->name() +
                     ", got '" + name + "'");
  }
  if (dst->dtype() != value.dtype() || dst->shape() != value.shape()) {
    throw ValueError("TrainOneStepCell.set_state: state '" + name + "' is " +
                     std::string(dtype_name(dst->dtype())) + shape_to_string(dst->shape()) +
                     ", got " + std::string(dtype_name(value.dtype())) +
                     shape_to_string(value.shape()));
  }
  copy_into(*dst, value);  // in place, on the state's device
}

void TrainOneStepCell::set_loss_scale(const LossScale& loss_scale) {
  if (fn_->num_compilations() > 0 || fn_->last() != nullptr) {
    throw ValueError("TrainOneStepCell.set_loss_scale: set it before the first step");
  }
  loss_scale.validate();
  loss_scale_ = loss_scale;
  loss_scale_states_.clear();
  if (!loss_scale.enabled()) return;
  loss_scale_states_.emplace(kScaleSense, Tensor::scalar(DType::kFloat32, loss_scale.scale));
  if (loss_scale.kind == LossScale::Kind::kDynamic) {
    loss_scale_states_.emplace(kCurIter, Tensor::scalar(DType::kInt32, 1));
    loss_scale_states_.emplace(kLastOverflowIter, Tensor::scalar(DType::kInt32, 0));
  }
}

void TrainOneStepCell::set_amp(const passes::AmpOptions& amp) {
  if (fn_->num_compilations() > 0 || fn_->last() != nullptr) {
    throw ValueError("TrainOneStepCell.set_amp: set it before the first step");
  }
  if (amp.dtype != DType::kFloat16 && amp.dtype != DType::kBFloat16) {
    throw ValueError("TrainOneStepCell.set_amp: expected the low precision dtype Float16 or "
                     "BFloat16, got " + std::string(dtype_name(amp.dtype)));
  }
  amp_ = amp;
}

double TrainOneStepCell::loss_scale() const {
  auto it = loss_scale_states_.find(kScaleSense);
  return it == loss_scale_states_.end() ? 1.0 : backend::to_host(it->second).get(0);
}

void TrainOneStepCell::set_loss_scale_state(const std::string& name, const Tensor& value) {
  auto it = loss_scale_states_.find(name);
  if (it == loss_scale_states_.end()) {
    throw ValueError("TrainOneStepCell.set_loss_scale_state: expected a state of loss scaling " +
                     loss_scale_.describe() + ", got '" + name + "'");
  }
  Tensor& dst = it->second;
  if (dst.dtype() != value.dtype() || dst.numel() != 1 || value.numel() != 1) {
    throw ValueError("TrainOneStepCell.set_loss_scale_state: state '" + name + "' is " +
                     std::string(dtype_name(dst.dtype())) + shape_to_string(dst.shape()) +
                     ", got " + std::string(dtype_name(value.dtype())) +
                     shape_to_string(value.shape()));
  }
  // MindSpore saves the scalars as () or (1,): the value, in this state's shape.
  Tensor host = backend::to_host(value).reshape(dst.shape());
  copy_into(dst, host);
}

const ir::FuncGraph* TrainOneStepCell::step_graph() const {
  return fn_->last() ? fn_->last()->program.graph : nullptr;
}

const runtime::Executable* TrainOneStepCell::last_executable() const {
  if (mode_ != ExecMode::kGraph || !fn_->last()) return nullptr;
  return fn_->last()->exe.get();
}

void TrainOneStepCell::add_observer(std::shared_ptr<runtime::Observer> observer) {
  fn_->add_observer(std::move(observer));
}

void TrainOneStepCell::remove_observer(const runtime::Observer* observer) {
  fn_->remove_observer(observer);
}

runtime::Program TrainOneStepCell::build(
    const std::vector<ir::AbstractPtr>& signature,
    const std::function<void(const ir::Module&, const std::string&)>& dump) {
  const ir::AbstractPtr data_abs = signature.at(0);
  const ir::AbstractPtr label_abs = signature.at(1);
  Traced t = trace(*net_, {data_abs, label_abs}, "forward");
  dump(*t.module, "traced");
  if (amp_.level != passes::AmpLevel::kO0) {
    passes::auto_mixed_precision(*t.graph, amp_);
    dump(*t.module, "amp");
  }
  auto info = std::make_shared<StepInfo>();
  info->weights = t.weights;
  ir::FuncGraph* fwd = t.graph;
  // The parameters the step updates: trainable, and given to the optimizer.
  std::vector<std::size_t> slots;  // indices into t.weights
  std::vector<ir::Parameter*> trainable;
  for (std::size_t i = 0; i < t.weights.size(); ++i) {
    if (t.weights[i]->requires_grad && optimizer_->updates(t.weights[i]->name)) {
      slots.push_back(i);
      trainable.push_back(fwd->parameter(2 + i));
    }
  }
  if (trainable.empty()) {
    throw ValueError("TrainOneStepCell: expected at least one trainable parameter, got none");
  }
  for (Parameter* p : t.updates) {
    if (p->requires_grad) {
      throw ValueError("TrainOneStepCell: expected assigned parameters to be non-trainable, got '" +
                       p->name + "' (requires_grad and assigned)");
    }
  }
  const bool has_updates = !t.updates.empty();
  // With loss scaling the sensitivity is a step value (the scale): a parameter of the gradient.
  const bool scaled = loss_scale_.enabled();
  ir::FuncGraph* g = autodiff::grad(fwd, {.weights = trainable,
                                          .get_by_list = true,
                                          .sens_param = has_updates || scaled,
                                          .return_value = true});
  passes::infer_graph(g);
  t.module->set_entry(g);  // the dump shows the gradient graph and what it calls
  dump(*t.module, "grad");

  // The step graph: (data, label, weights..., states..., optimizer inputs...).
  ir::Module& m = *t.module;
  ir::FuncGraph* step = m.add_graph("train_step");
  std::vector<ir::Node*> call_args;
  call_args.push_back(step->add_parameter("data", data_abs));
  call_args.push_back(step->add_parameter("label", label_abs));
  std::vector<ir::Parameter*> w_params;
  for (Parameter* p : t.weights) {
    ir::Parameter* w =
        step->add_parameter(p->name, Abstract::tensor(p->value.dtype(), p->value.shape()));
    w_params.push_back(w);
    call_args.push_back(w);
  }
  const std::vector<std::string> prefixes = optimizer_->state_prefixes();
  std::vector<std::vector<ir::Parameter*>> state_params(slots.size());
  for (std::size_t k = 0; k < slots.size(); ++k) {
    Parameter* p = t.weights[slots[k]];
    for (const std::string& prefix : prefixes) {
      const std::string name = prefix + "." + p->name;
      const Tensor* st = state(name);
      if (st == nullptr || st->dtype() != p->value.dtype() || st->shape() != p->value.shape()) {
        throw ValueError("TrainOneStepCell: expected optimizer state '" + name + "' like its " +
                         "parameter " + std::string(dtype_name(p->value.dtype())) +
                         shape_to_string(p->value.shape()) + ", got " +
                         (st ? std::string(dtype_name(st->dtype())) + shape_to_string(st->shape())
                             : std::string("none")));
      }
      state_params[k].push_back(
          step->add_parameter(name, Abstract::tensor(p->value.dtype(), p->value.shape())));
      info->state_names.push_back(name);
    }
  }
  info->input_dtype = t.weights[slots[0]]->value.dtype();
  std::vector<ops::Var> inputs;
  for (const std::string& name : optimizer_->input_names()) {
    inputs.emplace_back(static_cast<ir::Node*>(
        step->add_parameter(name, Abstract::tensor(info->input_dtype, {}))));
  }
  // Loss scaling's states (LossScale), after the optimizer's inputs.
  std::map<std::string, ops::Var> ls;
  for (const char* name : {kScaleSense, kCurIter, kLastOverflowIter}) {
    auto it = loss_scale_states_.find(name);
    if (it == loss_scale_states_.end()) continue;
    ls[name] = ops::Var(static_cast<ir::Node*>(step->add_parameter(
        name, Abstract::tensor(it->second.dtype(), it->second.shape()))));
    info->loss_scale_names.push_back(name);
  }
  const std::size_t num_params = step->parameters().size();

  trace::GraphEmitter e(step);
  std::vector<ir::Node*> grad_args = call_args;
  if (has_updates || scaled) {
    // The sensitivity: ones_like(loss) (times the loss scale), zeros_like(new value)...
    const ir::AbstractPtr out_abs = fwd->output()->abstract();
    const std::vector<ir::AbstractPtr> outs =
        has_updates ? out_abs->elements() : std::vector<ir::AbstractPtr>{out_abs};
    std::vector<ops::Var> sens;
    for (std::size_t i = 0; i < outs.size(); ++i) {
      Tensor s(outs[i]->dtype(), outs[i]->shape());  // zeros
      if (i == 0) {
        for (std::int64_t j = 0; j < s.numel(); ++j) s.set(j, 1.0);
      }
      sens.push_back(e.constant(Value::tensor(std::move(s))));
    }
    if (scaled) {
      e.set_debug({.scope = "LossScale", .role = ir::Role::kBackward});
      sens[0] = e.mul(sens[0], e.cast(ls[kScaleSense], outs[0]->dtype()));
    }
    grad_args.push_back(has_updates ? e.node_of(e.make_tuple(sens)) : e.node_of(sens[0]));
  }
  ir::CNode* call = step->add_call(g, grad_args);
  call->set_abstract(g->output()->abstract());
  const ops::Var result(static_cast<ir::Node*>(call));
  const ops::Var fwd_out = e.tuple_get(result, 0);
  const ops::Var loss = has_updates ? e.tuple_get(fwd_out, 0) : fwd_out;
  const ops::Var grads = e.tuple_get(result, 1);
  std::vector<ops::Var> grad_of(slots.size());
  std::vector<std::string> grad_names;
  for (std::size_t k = 0; k < slots.size(); ++k) {
    grad_of[k] = e.tuple_get(grads, static_cast<std::int64_t>(k));
    grad_names.push_back(t.weights[slots[k]]->name);
  }
  if (reducer_) {
    e.set_debug({.scope = "GradientReducer", .role = ir::Role::kBackward});
    grad_of = reducer_(e, grad_of, grad_names);
    if (grad_of.size() != slots.size()) {
      throw ValueError("TrainOneStepCell: the gradient reducer returned " +
                       std::to_string(grad_of.size()) + " gradients for " +
                       std::to_string(slots.size()) + " parameters");
    }
  }
  ops::Var overflow;  // Bool (): an Inf or NaN among the gradients (loss scaling)
  if (scaled) {
    // MindSpore's _grad_scale (times 1/scale) and, on the reduced gradients (the same on every
    // rank: an Inf or NaN of one rank's reaches every rank's sum), its overflow check.
    e.set_debug({.scope = "LossScale", .role = ir::Role::kBackward});
    const ops::Var one = e.constant(Value::tensor(Tensor::scalar(DType::kFloat32, 1.0)));
    const ops::Var inv = e.div(one, ls[kScaleSense]);
    for (ops::Var& g : grad_of) {
      const DType dt = g.node()->abstract()->dtype();
      g = e.mul(g, dt == DType::kFloat32 ? inv : e.cast(inv, dt));
    }
    if (loss_scale_.checks_overflow()) {
      ops::Var flags;
      for (const ops::Var& g : grad_of) {
        const ops::Var f = e.emit("FloatStatus", {g});
        flags = flags.defined() ? e.add(flags, f) : f;
      }
      overflow = e.emit("Greater", {e.reshape(flags, {}),
                                    e.constant(Value::tensor(Tensor::scalar(DType::kFloat32, 0)))});
    }
  }
  e.set_debug({.scope = optimizer_->name(), .role = ir::Role::kOptimizer});
  const std::vector<ops::Var> applied = optimizer_->transform_gradients(e, grad_of);

  std::vector<ops::Var> new_weights, new_states;
  std::vector<std::pair<std::size_t, std::size_t>> donate;  // (output leaf, parameter)
  std::vector<std::size_t> weight_params, state_param_index;
  for (std::size_t k = 0; k < slots.size(); ++k) {
    Parameter* p = t.weights[slots[k]];
    e.set_debug({.scope = optimizer_->name() + "/" + p->name, .role = ir::Role::kOptimizer});
    std::vector<ops::Var> states;
    for (ir::Parameter* sp : state_params[k]) states.emplace_back(static_cast<ir::Node*>(sp));
    const std::vector<ops::Var> updated =
        optimizer_->update(e, p->name, ops::Var(static_cast<ir::Node*>(w_params[slots[k]])),
                           states, applied[k], inputs);
    if (updated.size() != 1 + states.size()) {
      throw InternalError("TrainOneStepCell: " + optimizer_->name() + " returned " +
                          std::to_string(updated.size()) + " values for " + p->name);
    }
    // On overflow every weight and state keeps its value.
    const auto kept = [&](const ops::Var& old_value, const ops::Var& new_value) {
      return overflow.defined() ? e.emit("Select", {overflow, old_value, new_value}) : new_value;
    };
    new_weights.push_back(kept(ops::Var(static_cast<ir::Node*>(w_params[slots[k]])), updated[0]));
    weight_params.push_back(2 + slots[k]);
    for (std::size_t j = 0; j < states.size(); ++j) {
      new_states.push_back(kept(states[j], updated[1 + j]));
      state_param_index.push_back(2 + t.weights.size() + k * prefixes.size() + j);
    }
  }
  std::vector<ops::Var> new_values;
  std::vector<std::size_t> value_params;
  for (std::size_t i = 0; i < t.updates.size(); ++i) {
    new_values.push_back(e.tuple_get(fwd_out, static_cast<std::int64_t>(1 + i)));
    const auto w = std::find(t.weights.begin(), t.weights.end(), t.updates[i]);
    value_params.push_back(2 + static_cast<std::size_t>(w - t.weights.begin()));
  }
  std::vector<ops::Var> outs{loss};
  std::size_t leaf = 1;
  for (std::size_t i = 0; i < new_weights.size(); ++i) {
    outs.push_back(new_weights[i]);
    donate.emplace_back(leaf++, weight_params[i]);
  }
  for (std::size_t i = 0; i < new_states.size(); ++i) {
    outs.push_back(new_states[i]);
    donate.emplace_back(leaf++, state_param_index[i]);
  }
  for (std::size_t i = 0; i < new_values.size(); ++i) {
    outs.push_back(new_values[i]);
    donate.emplace_back(leaf++, value_params[i]);
  }
  if (scaled) {
    // The loss scale's update (MindSpore's DynamicLossScaleUpdateCell), donated to its states.
    e.set_debug({.scope = "LossScale", .role = ir::Role::kOptimizer});
    const auto f32 = [&](double v) {
      return e.constant(Value::tensor(Tensor::scalar(DType::kFloat32, v)));
    };
    const auto i32 = [&](double v) {
      return e.constant(Value::tensor(Tensor::scalar(DType::kInt32, v)));
    };
    std::map<std::string, ops::Var> next;
    if (loss_scale_.kind == LossScale::Kind::kDynamic) {
      const ops::Var scale = ls[kScaleSense], cur = ls[kCurIter], last = ls[kLastOverflowIter];
      const ops::Var on_overflow = e.emit(
          "Select", {overflow,
                     e.emit("Maximum", {e.mul(scale, e.div(f32(1), f32(loss_scale_.factor))), f32(1)}),
                     scale});
      // cur - last >= window, as cur - last > window - 1 (Int32).
      const ops::Var should_inc =
          e.emit("Greater", {e.sub(cur, last), i32(static_cast<double>(loss_scale_.window - 1))});
      const ops::Var grown = e.emit(
          "Select", {should_inc, e.mul(on_overflow, f32(loss_scale_.factor)), on_overflow});
      next[kScaleSense] = e.emit("Select", {overflow, on_overflow, grown});
      next[kLastOverflowIter] =
          e.emit("Select", {overflow, cur, e.emit("Select", {should_inc, cur, last})});
      next[kCurIter] = e.add(cur, i32(1));
    }
    const std::size_t first_ls_param = num_params - info->loss_scale_names.size();
    for (std::size_t i = 0; i < info->loss_scale_names.size(); ++i) {
      auto it = next.find(info->loss_scale_names[i]);
      if (it == next.end()) continue;  // a fixed scale: an input only
      outs.push_back(it->second);
      donate.emplace_back(leaf++, first_ls_param + i);
    }
    if (overflow.defined()) {
      outs.push_back(overflow);
      info->overflow_leaf = leaf++;
    }
  }
  info->first_gradient = leaf;
  if (return_gradients_) {  // after every donated output, so the donation indices hold
    for (std::size_t k = 0; k < slots.size(); ++k) {
      outs.push_back(grad_of[k]);
      info->gradient_names.push_back(grad_names[k]);
    }
  }
  step->set_output(e.node_of(e.make_tuple(outs)));
  m.set_entry(step);
  passes::infer_graph(step);
  ir::verify(m);
  if (step->parameters().size() != num_params) {
    throw InternalError("TrainOneStepCell: the step graph's signature changed");
  }
  return runtime::Program(std::move(t.module), step, std::move(donate), std::move(info));
}

Tensor TrainOneStepCell::step(const Tensor& data, const Tensor& label) {
  const std::string variant = std::string(net_->training() ? "train" : "eval") +
                              (return_gradients_ ? ";grads" : "");
  runtime::CompiledFunction::Entry& entry =
      fn_->entry({Abstract::tensor(data.dtype(), data.shape()),
                  Abstract::tensor(label.dtype(), label.shape())},
                 variant);
  const StepInfo& info = entry.program.info_as<StepInfo>();
  // Everything the step reads on its device: the batch copied there every step (through pinned
  // memory on a copy stream where the backend has an Uploader), the weights and the optimizer
  // states moved there at the first step (or after a restore replaced them) and kept there, the
  // learning rates and scalars copied. Nothing to do on the CPU.
  backend::Backend& b = fn_->options().backend ? *fn_->options().backend : backend::cpu_backend();
  const std::vector<Tensor> batch = batches_(b, std::vector<Tensor>{data, label});
  std::vector<Value> args{Value::tensor(batch[0]), Value::tensor(batch[1])};
  for (Parameter* p : info.weights) {
    to_device(*p, b);
    args.push_back(Value::tensor(p->value));
  }
  for (const std::string& name : info.state_names) {
    Tensor& st = *optimizer_->state(name);
    if (st.device() != b.device()) st = backend::to_device(st, b);
    args.push_back(Value::tensor(st));
  }
  for (Tensor& t : optimizer_->input_values(info.input_dtype)) {
    args.push_back(Value::tensor(backend::to_device(t, b)));
  }
  for (const std::string& name : info.loss_scale_names) {
    Tensor& st = loss_scale_states_.at(name);
    if (st.device() != b.device()) st = backend::to_device(st, b);
    args.push_back(Value::tensor(st));
  }
  // The donated outputs are written into the arguments: weights and states in place.
  const Value out = fn_->run(entry, std::move(args));
  const auto& el = out.elements();
  // A skipped update does not count as a step of the optimizer (MindSpore's is not run): its
  // learning rate schedule and Adam's bias corrections stay where they were.
  overflow_ = info.overflow_leaf != 0 &&
              backend::to_host(el[info.overflow_leaf].as_tensor()).get(0) != 0;
  if (overflow_) {
    ++skipped_steps_;
  } else {
    optimizer_->step_done();
  }
  gradients_.clear();
  for (std::size_t i = 0; i < info.gradient_names.size(); ++i) {
    gradients_.emplace_back(info.gradient_names[i], el[info.first_gradient + i].as_tensor());
  }
  return el[0].as_tensor();
}

void TrainOneStepCell::set_return_gradients(bool on) { return_gradients_ = on; }

void TrainOneStepCell::set_gradient_reducer(GradientReducer reducer) {
  if (fn_->num_compilations() > 0 || fn_->last() != nullptr) {
    throw ValueError("TrainOneStepCell.set_gradient_reducer: set it before the first step");
  }
  reducer_ = std::move(reducer);
}

std::unique_ptr<TrainOneStepCell> build_train_network(std::shared_ptr<Cell> network,
                                                      std::shared_ptr<optim::Optimizer> optimizer,
                                                      std::shared_ptr<Cell> loss_fn,
                                                      std::string_view level, DType dtype,
                                                      std::optional<LossScale> loss_scale) {
  if (!network) throw ValueError("build_train_network: expected a network, got null");
  if (!optimizer) throw ValueError("build_train_network: expected an optimizer, got null");
  const passes::AmpOptions amp{.level = passes::amp_level_from_name(level), .dtype = dtype};
  std::shared_ptr<Cell> with_loss =
      loss_fn ? std::make_shared<WithLossCell>(std::move(network), std::move(loss_fn))
              : std::move(network);
  auto step = std::make_unique<TrainOneStepCell>(std::move(with_loss), std::move(optimizer));
  step->set_amp(amp);
  step->set_loss_scale(loss_scale ? *loss_scale
                                  : (amp.level == passes::AmpLevel::kO2 ? LossScale::dynamic()
                                                                        : LossScale{}));
  return step;
}

}  // namespace loom::nn
