// nn/train.h: WithLossCell and TrainOneStepCell (one traced, differentiated, optimized and
// compiled step graph per input signature).
#include "nn/train.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/autodiff/grad.h"
#include "core/trace/graph_emitter.h"
#include "core/ir/anf.h"
#include "core/ir/error.h"
#include "core/ir/verify.h"
#include "core/passes/infer.h"
#include "core/passes/pass.h"
#include "runtime/executable.h"
#include "runtime/interpreter.h"
#include "optim/update.h"

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

struct TrainOneStepCell::Compiled {
  std::unique_ptr<ir::Module> module;
  ir::FuncGraph* graph = nullptr;
  std::vector<Parameter*> weights;     // every graph weight, in parameter order after the inputs
  std::vector<Tensor*> updated;        // per new-weight/state output leaf (after the loss): target
  std::vector<std::string> state_names;
  std::vector<std::string> gradient_names;  // when return_gradients: the trailing outputs
  std::unique_ptr<runtime::Executable> exe;  // graph mode
};

TrainOneStepCell::TrainOneStepCell(std::shared_ptr<Cell> net_with_loss, OptimizerSpec opt,
                                   std::optional<ExecMode> mode)
    : net_(std::move(net_with_loss)), opt_(opt), mode_(mode.value_or(context_mode())) {
  if (!net_) throw ValueError("TrainOneStepCell: expected a network, got null");
  auto check = [](const char* what, double v, bool ok) {
    if (!ok) {
      throw ValueError(std::string("TrainOneStepCell: expected ") + what + ", got " +
                       ir::format_f64(v));
    }
  };
  check("learning_rate >= 0", opt_.learning_rate, opt_.learning_rate >= 0);
  check("weight_decay >= 0", opt_.weight_decay, opt_.weight_decay >= 0);
  if (opt_.kind == OptimizerKind::kMomentum) {
    check("momentum >= 0", opt_.momentum, opt_.momentum >= 0);
  } else {
    check("beta1 in [0, 1)", opt_.beta1, opt_.beta1 >= 0 && opt_.beta1 < 1);
    check("beta2 in [0, 1)", opt_.beta2, opt_.beta2 >= 0 && opt_.beta2 < 1);
    check("eps >= 0", opt_.eps, opt_.eps >= 0);
  }
}

TrainOneStepCell::~TrainOneStepCell() = default;

const Tensor* TrainOneStepCell::state(const std::string& name) const {
  auto it = states_.find(name);
  return it == states_.end() ? nullptr : &it->second;
}

void TrainOneStepCell::set_state(const std::string& name, const Tensor& value) {
  auto it = states_.find(name);
  if (it == states_.end()) {
    states_.emplace(name, value.clone());
    return;
  }
  Tensor& dst = it->second;
  if (dst.dtype() != value.dtype() || dst.shape() != value.shape()) {
    throw ValueError("TrainOneStepCell.set_state: state '" + name + "' is " +
                     std::string(dtype_name(dst.dtype())) + shape_to_string(dst.shape()) +
                     ", got " + std::string(dtype_name(value.dtype())) +
                     shape_to_string(value.shape()));
  }
  if (dst.nbytes() > 0) std::memcpy(dst.raw_data(), value.raw_data(), dst.nbytes());
}

void TrainOneStepCell::set_learning_rate(double lr) {
  if (!(lr >= 0)) {
    throw ValueError("TrainOneStepCell.set_learning_rate: expected a value >= 0, got " +
                     ir::format_f64(lr));
  }
  opt_.learning_rate = lr;
}

void TrainOneStepCell::set_num_steps(std::int64_t steps) {
  if (steps < 0) {
    throw ValueError("TrainOneStepCell.set_num_steps: expected steps >= 0, got " +
                     std::to_string(steps));
  }
  steps_ = steps;
}

namespace {

std::string signature(const Tensor& t) {
  return std::string(dtype_name(t.dtype())) + shape_to_string(t.shape());
}

}  // namespace

TrainOneStepCell::Compiled& TrainOneStepCell::compiled_for(const Tensor& data,
                                                           const Tensor& label) {
  const std::string key = signature(data) + ";" + signature(label) +
                          (net_->training() ? ";train" : ";eval") +
                          (return_gradients_ ? ";grads" : "");
  auto found = cache_.find(key);
  if (found != cache_.end()) return *found->second;

  const auto start = std::chrono::steady_clock::now();
  auto c = std::make_unique<Compiled>();
  Traced t = trace(*net_,
                   {Abstract::tensor(data.dtype(), data.shape()),
                    Abstract::tensor(label.dtype(), label.shape())},
                   "forward");
  c->weights = t.weights;
  ir::FuncGraph* fwd = t.graph;
  std::vector<ir::Parameter*> trainable;
  for (std::size_t i = 0; i < t.weights.size(); ++i) {
    if (t.weights[i]->requires_grad) trainable.push_back(fwd->parameter(2 + i));
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
  ir::FuncGraph* g = autodiff::grad(fwd, {.weights = trainable,
                                          .get_by_list = true,
                                          .sens_param = has_updates,
                                          .return_value = true});
  passes::infer_graph(g);

  // The step graph: (data, label, weights..., states..., learning_rate, [beta1_power,
  // beta2_power]).
  ir::Module& m = *t.module;
  ir::FuncGraph* step = m.add_graph("train_step");
  std::vector<ir::Node*> call_args;
  call_args.push_back(step->add_parameter("data", Abstract::tensor(data.dtype(), data.shape())));
  call_args.push_back(
      step->add_parameter("label", Abstract::tensor(label.dtype(), label.shape())));
  std::vector<ir::Parameter*> w_params;
  for (Parameter* p : t.weights) {
    ir::Parameter* w =
        step->add_parameter(p->name, Abstract::tensor(p->value.dtype(), p->value.shape()));
    w_params.push_back(w);
    call_args.push_back(w);
  }
  const bool adam = opt_.kind == OptimizerKind::kAdam;
  const std::vector<std::string> prefixes =
      adam ? std::vector<std::string>{"moment1.", "moment2."} : std::vector<std::string>{"moments."};
  struct Slot {
    std::size_t weight;                   // index into t.weights
    std::vector<ir::Parameter*> states;   // graph parameters of its states
    std::vector<Tensor*> tensors;
  };
  std::vector<Slot> slots;
  for (std::size_t i = 0; i < t.weights.size(); ++i) {
    Parameter* p = t.weights[i];
    if (!p->requires_grad) continue;
    Slot s{.weight = i};
    for (const std::string& prefix : prefixes) {
      const std::string name = prefix + p->name;
      auto it = states_.find(name);
      if (it == states_.end()) {
        it = states_.emplace(name, Tensor(p->value.dtype(), p->value.shape())).first;
      } else if (it->second.dtype() != p->value.dtype() ||
                 it->second.shape() != p->value.shape()) {
        throw ValueError("TrainOneStepCell: state '" + name + "' is " +
                         std::string(dtype_name(it->second.dtype())) +
                         shape_to_string(it->second.shape()) + " but its parameter is " +
                         std::string(dtype_name(p->value.dtype())) +
                         shape_to_string(p->value.shape()));
      }
      s.states.push_back(
          step->add_parameter(name, Abstract::tensor(p->value.dtype(), p->value.shape())));
      s.tensors.push_back(&it->second);
    }
    slots.push_back(std::move(s));
  }
  const DType pow_dtype = t.weights[slots[0].weight]->value.dtype();
  // The learning rate is a step input, so a schedule changes it without a new compilation.
  ir::Parameter* learning_rate =
      step->add_parameter("learning_rate", Abstract::tensor(pow_dtype, {}));
  ir::Parameter* beta1_power = nullptr;
  ir::Parameter* beta2_power = nullptr;
  if (adam) {
    beta1_power = step->add_parameter("beta1_power", Abstract::tensor(pow_dtype, {}));
    beta2_power = step->add_parameter("beta2_power", Abstract::tensor(pow_dtype, {}));
  }

  trace::GraphEmitter e(step);
  std::vector<ir::Node*> grad_args = call_args;
  if (has_updates) {
    // The sensitivity (ones_like(loss), zeros_like(new value)...), as constants.
    const auto& outs = fwd->output()->abstract()->elements();
    std::vector<ops::Var> sens;
    for (std::size_t i = 0; i < outs.size(); ++i) {
      Tensor s(outs[i]->dtype(), outs[i]->shape());  // zeros
      if (i == 0) {
        for (std::int64_t j = 0; j < s.numel(); ++j) s.set(j, 1.0);
      }
      sens.push_back(e.constant(Value::tensor(std::move(s))));
    }
    grad_args.push_back(e.node_of(e.make_tuple(sens)));
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
    grad_names.push_back(t.weights[slots[k].weight]->name);
  }
  if (reducer_) {
    grad_of = reducer_(e, grad_of, grad_names);
    if (grad_of.size() != slots.size()) {
      throw ValueError("TrainOneStepCell: the gradient reducer returned " +
                       std::to_string(grad_of.size()) + " gradients for " +
                       std::to_string(slots.size()) + " parameters");
    }
  }

  std::vector<ops::Var> new_weights, new_states;
  std::vector<Tensor*> weight_targets, state_targets;
  std::vector<std::size_t> weight_param_index, state_param_index;
  for (std::size_t k = 0; k < slots.size(); ++k) {
    const Slot& s = slots[k];
    Parameter* p = t.weights[s.weight];
    const ops::Var w(static_cast<ir::Node*>(w_params[s.weight]));
    const ops::Var grad = grad_of[k];
    ops::Var lr(static_cast<ir::Node*>(learning_rate));
    if (p->value.dtype() != pow_dtype) lr = e.cast(lr, p->value.dtype());
    if (!adam) {
      auto [w2, acc2] = optim::momentum_update(
          e, w, ops::Var(static_cast<ir::Node*>(s.states[0])), grad, lr, opt_.momentum,
          /*nesterov=*/false, opt_.weight_decay);
      new_weights.push_back(w2);
      new_states.push_back(acc2);
    } else {
      // optim::adam_update's ApplyAdam with the beta powers as graph inputs (its `step` would
      // bake beta^t into the graph as a constant and force a compilation per step).
      ops::Var g_l2 = grad;
      if (opt_.weight_decay != 0.0) {
        g_l2 = e.add(grad, e.mul(e.scalar_like(w, opt_.weight_decay), w));
      }
      ops::Var b1p(static_cast<ir::Node*>(beta1_power));
      ops::Var b2p(static_cast<ir::Node*>(beta2_power));
      if (p->value.dtype() != pow_dtype) {
        b1p = e.cast(b1p, p->value.dtype());
        b2p = e.cast(b2p, p->value.dtype());
      }
      const ops::Var out = e.emit(
          "ApplyAdam", {w, ops::Var(static_cast<ir::Node*>(s.states[0])),
                        ops::Var(static_cast<ir::Node*>(s.states[1])), b1p, b2p, lr,
                        e.scalar_like(w, opt_.beta1), e.scalar_like(w, opt_.beta2),
                        e.scalar_like(w, opt_.eps), g_l2});
      new_weights.push_back(e.tuple_get(out, 0));
      new_states.push_back(e.tuple_get(out, 1));
      new_states.push_back(e.tuple_get(out, 2));
    }
    weight_targets.push_back(&p->value);
    weight_param_index.push_back(2 + s.weight);
    for (std::size_t j = 0; j < s.states.size(); ++j) {
      state_targets.push_back(s.tensors[j]);
      state_param_index.push_back(2 + t.weights.size() + k * prefixes.size() + j);
    }
  }
  std::vector<ops::Var> new_values;
  std::vector<Tensor*> value_targets;
  std::vector<std::size_t> value_param_index;
  for (std::size_t i = 0; i < t.updates.size(); ++i) {
    new_values.push_back(e.tuple_get(fwd_out, static_cast<std::int64_t>(1 + i)));
    value_targets.push_back(&t.updates[i]->value);
    const auto w = std::find(t.weights.begin(), t.weights.end(), t.updates[i]);
    value_param_index.push_back(2 + static_cast<std::size_t>(w - t.weights.begin()));
  }
  std::vector<ops::Var> outs{loss};
  outs.insert(outs.end(), new_weights.begin(), new_weights.end());
  outs.insert(outs.end(), new_states.begin(), new_states.end());
  outs.insert(outs.end(), new_values.begin(), new_values.end());
  if (return_gradients_) {  // after every donated output, so the donation indices hold
    for (std::size_t k = 0; k < slots.size(); ++k) {
      outs.push_back(grad_of[k]);
      c->gradient_names.push_back(grad_names[k]);
    }
  }
  step->set_output(e.node_of(e.make_tuple(outs)));
  m.set_entry(step);
  passes::infer_graph(step);
  passes::PassManager::parse("inline,simplify,dce").run(m);
  ir::verify(m);
  if (m.entry() != step || step->parameters().size() != call_args.size() +
                                                           slots.size() * prefixes.size() + 1 +
                                                           (adam ? 2 : 0)) {
    throw InternalError("TrainOneStepCell: the passes changed the step graph's signature");
  }

  std::vector<std::pair<std::size_t, std::size_t>> donate;
  std::size_t leaf = 1;
  for (std::size_t i = 0; i < weight_targets.size(); ++i, ++leaf) {
    c->updated.push_back(weight_targets[i]);
    donate.emplace_back(leaf, weight_param_index[i]);
  }
  for (std::size_t i = 0; i < state_targets.size(); ++i, ++leaf) {
    c->updated.push_back(state_targets[i]);
    donate.emplace_back(leaf, state_param_index[i]);
  }
  for (std::size_t i = 0; i < value_targets.size(); ++i, ++leaf) {
    c->updated.push_back(value_targets[i]);
    donate.emplace_back(leaf, value_param_index[i]);
  }
  for (const Slot& s : slots) {
    for (ir::Parameter* sp : s.states) c->state_names.push_back(sp->name());
  }
  c->graph = step;
  if (mode_ == ExecMode::kGraph) {
    c->exe = runtime::compile(*step, backend::cpu_backend(), {.donate = std::move(donate)});
    ++num_compilations_;
  }
  c->module = std::move(t.module);
  compile_seconds_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return *cache_.emplace(key, std::move(c)).first->second;
}

Tensor TrainOneStepCell::step(const Tensor& data, const Tensor& label) {
  Compiled& c = compiled_for(data, label);
  std::vector<Value> args{Value::tensor(data), Value::tensor(label)};
  for (Parameter* p : c.weights) args.push_back(Value::tensor(p->value));
  for (const std::string& name : c.state_names) args.push_back(Value::tensor(states_.at(name)));
  const std::int64_t t = steps_ + 1;
  const DType dt = c.graph->parameters()[args.size()]->abstract()->dtype();
  args.push_back(Value::tensor(Tensor::scalar(dt, opt_.learning_rate)));
  if (opt_.kind == OptimizerKind::kAdam) {
    args.push_back(Value::tensor(Tensor::scalar(dt, std::pow(opt_.beta1, static_cast<double>(t)))));
    args.push_back(Value::tensor(Tensor::scalar(dt, std::pow(opt_.beta2, static_cast<double>(t)))));
  }
  Value out;
  if (mode_ == ExecMode::kGraph) {
    out = c.exe->run(std::move(args));  // the donated outputs are written into the arguments
    last_ = c.exe.get();
  } else {
    out = runtime::interpret(*c.graph, args);
    const auto& el = out.elements();
    for (std::size_t i = 0; i < c.updated.size(); ++i) {
      const Tensor& v = el[1 + i].as_tensor();
      Tensor& dst = *c.updated[i];
      if (v.raw_data() != dst.raw_data()) std::memcpy(dst.raw_data(), v.raw_data(), dst.nbytes());
    }
  }
  steps_ = t;
  last_graph_ = c.graph;
  gradients_.clear();
  const auto& el = out.elements();
  const std::size_t first_grad = 1 + c.updated.size();
  for (std::size_t i = 0; i < c.gradient_names.size(); ++i) {
    gradients_.emplace_back(c.gradient_names[i], el[first_grad + i].as_tensor());
  }
  return el[0].as_tensor();
}

void TrainOneStepCell::set_return_gradients(bool on) { return_gradients_ = on; }

void TrainOneStepCell::set_gradient_reducer(GradientReducer reducer) {
  if (!cache_.empty()) {
    throw ValueError("TrainOneStepCell.set_gradient_reducer: set it before the first step");
  }
  reducer_ = std::move(reducer);
}

}  // namespace loom::nn
