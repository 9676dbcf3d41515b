// optim/optimizer.h: the optimizers' bookkeeping (groups, decay filter, states, learning rates,
// checkpoint entries) and their updates as emitter calls.
#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "backends/backend.h"
#include "core/ir/error.h"
#include "core/ir/value.h"
#include "optim/update.h"

namespace loom::optim {

namespace {

[[noreturn]] void fail(const std::string& who, const std::string& what, double got) {
  throw ValueError(who + ": expected " + what + ", got " + ir::format_f64(got));
}

void check_common(const std::string& who, double weight_decay, double clip) {
  if (!(weight_decay >= 0)) fail(who, "weight_decay >= 0", weight_decay);
  if (!(clip >= 0)) fail(who, "clip_global_norm >= 0", clip);
}

void check_betas(const std::string& who, double beta1, double beta2, double eps) {
  if (!(beta1 >= 0 && beta1 < 1)) fail(who, "beta1 in [0, 1)", beta1);
  if (!(beta2 >= 0 && beta2 < 1)) fail(who, "beta2 in [0, 1)", beta2);
  if (!(eps >= 0)) fail(who, "eps >= 0", eps);
}

// MindSpore keeps its hyper-parameters as Float32 tensors: 1 - beta is computed in Float32 for
// a Float32 parameter (1 - 0.999f is 9.99987e-4, not 1e-3).
double one_minus(double beta, DType dtype) {
  if (dtype == DType::kFloat32) return static_cast<double>(1.0f - static_cast<float>(beta));
  return 1.0 - beta;
}

Tensor f32_scalar(double v) { return Tensor::scalar(DType::kFloat32, v); }

// A learning rate's checkpoint entry: () for a number, (N) for a list, none for a schedule.
std::optional<Tensor> lr_entry(const LearningRate& lr) {
  switch (lr.kind()) {
    case LearningRate::Kind::kConstant:
      return f32_scalar(lr.at(0));
    case LearningRate::Kind::kList: {
      const auto n = static_cast<std::int64_t>(lr.values().size());
      Tensor t(DType::kFloat32, {n});
      for (std::int64_t i = 0; i < n; ++i) t.set(i, lr.values()[static_cast<std::size_t>(i)]);
      return t;
    }
    case LearningRate::Kind::kSchedule:
      return std::nullopt;
  }
  return std::nullopt;
}

void check_lr(const std::string& who, const LearningRate& lr) {
  if (lr.kind() == LearningRate::Kind::kSchedule) return;
  for (double v : lr.values()) {
    if (!(v >= 0)) fail(who, "learning rates >= 0", v);
  }
}

std::string num(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

std::string lr_text(const LearningRate& lr) {
  switch (lr.kind()) {
    case LearningRate::Kind::kConstant: return num(lr.at(0));
    case LearningRate::Kind::kList: return "list of " + std::to_string(lr.values().size());
    case LearningRate::Kind::kSchedule: return "scheduled";
  }
  return "";
}

}  // namespace

Optimizer::Optimizer(Common common) : common_(std::move(common)) {}
Optimizer::~Optimizer() = default;

void Optimizer::init(const std::vector<ParamInfo>& params) {
  for (std::size_t g = 0; g < common_.groups.size(); ++g) {
    for (const std::string& name : common_.groups[g].params) {
      const bool known = std::any_of(params.begin(), params.end(),
                                     [&](const ParamInfo& p) { return p.name == name; });
      if (!known) {
        throw ValueError(this->name() + ": expected group " + std::to_string(g) +
                         "'s parameters to be trainable parameters of the network, got '" + name +
                         "'");
      }
    }
  }
  params_ = params;
  if (!params_.empty()) input_dtype_ = params_[0].dtype;
  for (const ParamInfo& p : params_) {
    if (!updates(p.name)) continue;
    for (const std::string& prefix : state_prefixes()) {
      const std::string name = prefix + "." + p.name;
      auto it = states_.find(name);
      if (it != states_.end() && it->second.dtype() == p.dtype && it->second.shape() == p.shape) {
        continue;
      }
      Tensor t(p.dtype, p.shape);
      const double init = state_init(prefix);
      if (init != 0.0) {
        for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, init);
      }
      states_.insert_or_assign(name, std::move(t));
    }
  }
}

bool Optimizer::updates(const std::string& param) const {
  const bool known = std::any_of(params_.begin(), params_.end(),
                                 [&](const ParamInfo& p) { return p.name == param; });
  if (!known) return false;
  if (common_.groups.empty()) return true;
  for (const ParamGroup& g : common_.groups) {
    if (std::find(g.params.begin(), g.params.end(), param) != g.params.end()) return true;
  }
  return false;
}

Tensor* Optimizer::state(const std::string& name) {
  auto it = states_.find(name);
  return it == states_.end() ? nullptr : &it->second;
}

void Optimizer::set_global_step(std::int64_t step) {
  if (step < 0) {
    throw ValueError(name() + ".set_global_step: expected steps >= 0, got " + std::to_string(step));
  }
  global_step_ = step;
  load_own_entries({});  // scalars that follow the step count (Adam's beta powers) recomputed
}

// The learning-rate inputs: the common rate first when any parameter uses it, then one per
// group that has its own.
std::vector<std::string> Optimizer::input_names() const {
  std::vector<std::string> names{"learning_rate"};
  for (std::size_t g = 0; g < common_.groups.size(); ++g) {
    if (common_.groups[g].learning_rate) names.push_back("learning_rate_group_" + std::to_string(g));
  }
  for (std::string& n : own_input_names()) names.push_back(std::move(n));
  return names;
}

std::vector<Tensor> Optimizer::input_values(DType dtype) const {
  input_dtype_ = dtype;
  std::vector<Tensor> out{Tensor::scalar(dtype, common_.learning_rate.at(global_step_))};
  for (const ParamGroup& g : common_.groups) {
    if (g.learning_rate) out.push_back(Tensor::scalar(dtype, g.learning_rate->at(global_step_)));
  }
  for (double v : own_input_values()) out.push_back(Tensor::scalar(dtype, v));
  return out;
}

std::vector<ops::Var> Optimizer::transform_gradients(ops::Emitter& e,
                                                     const std::vector<ops::Var>& grads) const {
  if (common_.clip_global_norm <= 0) return grads;
  return clip_by_global_norm(e, grads, common_.clip_global_norm);
}

void Optimizer::step_done() { ++global_step_; }

double Optimizer::learning_rate_at(std::int64_t step, std::size_t group) const {
  step = std::max<std::int64_t>(step, 0);
  if (group < common_.groups.size() && common_.groups[group].learning_rate) {
    return common_.groups[group].learning_rate->at(step);
  }
  return common_.learning_rate.at(step);
}

void Optimizer::set_learning_rate(double lr) {
  if (!(lr >= 0)) fail(name() + ".set_learning_rate", "a value >= 0", lr);
  common_.learning_rate = lr;
  for (ParamGroup& g : common_.groups) {
    if (g.learning_rate) g.learning_rate = lr;
  }
}

double Optimizer::weight_decay_of(const std::string& param) const {
  if (common_.groups.empty()) {
    // MindSpore's default decay filter: BatchNorm's beta and gamma (any name containing them).
    if (param.find("beta") != std::string::npos || param.find("gamma") != std::string::npos) {
      return 0.0;
    }
    return common_.weight_decay;
  }
  for (const ParamGroup& g : common_.groups) {
    if (std::find(g.params.begin(), g.params.end(), param) != g.params.end()) {
      return g.weight_decay.value_or(common_.weight_decay);
    }
  }
  return common_.weight_decay;
}

std::size_t Optimizer::group_of(const std::string& param) const {
  std::size_t input = 1;  // the group's own rate's index among the learning-rate inputs
  for (const ParamGroup& g : common_.groups) {
    const bool in = std::find(g.params.begin(), g.params.end(), param) != g.params.end();
    if (in) return g.learning_rate ? input : 0;
    if (g.learning_rate) ++input;
  }
  return 0;
}

ops::Var Optimizer::lr_of(ops::Emitter& e, const std::string& param, const ops::Var& value,
                          const std::vector<ops::Var>& inputs) const {
  ops::Var lr = inputs.at(group_of(param));
  const DType d = e.dtype_of(value);
  return e.dtype_of(lr) == d ? lr : e.cast(lr, d);
}

ops::Var Optimizer::l2(ops::Emitter& e, const ops::Var& value, const ops::Var& grad,
                       double weight_decay) {
  if (weight_decay == 0.0) return grad;
  // MindSpore: AddN((Mul(weight, weight_decay), grad)).
  return e.add(e.mul(value, e.scalar_like(value, weight_decay)), grad);
}

std::vector<std::pair<std::string, Tensor>> Optimizer::checkpoint_entries() const {
  std::vector<std::pair<std::string, Tensor>> out;
  Tensor step(DType::kInt32, {1});
  step.data<std::int32_t>()[0] = static_cast<std::int32_t>(global_step_);
  out.emplace_back("global_step", step);
  const bool common_used =
      common_.groups.empty() ||
      std::any_of(common_.groups.begin(), common_.groups.end(),
                  [](const ParamGroup& g) { return !g.learning_rate; });
  if (common_used) {
    if (auto t = lr_entry(common_.learning_rate)) out.emplace_back("learning_rate", *t);
  }
  for (std::size_t g = 0; g < common_.groups.size(); ++g) {
    if (!common_.groups[g].learning_rate) continue;
    if (auto t = lr_entry(*common_.groups[g].learning_rate)) {
      out.emplace_back("learning_rate_group_" + std::to_string(g), *t);
    }
  }
  for (auto& entry : own_entries()) out.push_back(std::move(entry));
  // The states grouped by prefix, parameters in order (MindSpore's layout).
  for (const std::string& prefix : state_prefixes()) {
    for (const ParamInfo& p : params_) {
      auto it = states_.find(prefix + "." + p.name);
      if (it != states_.end()) out.emplace_back(it->first, backend::to_host(it->second));
    }
  }
  return out;
}

void Optimizer::load_entries(const std::vector<std::pair<std::string, Tensor>>& entries) {
  auto find = [&](const std::string& name) -> const Tensor* {
    for (const auto& [n, t] : entries) {
      if (n == name) return &t;
    }
    return nullptr;
  };
  for (auto& [name, state] : states_) {
    const Tensor* t = find(name);
    if (t == nullptr) {
      throw ValueError(this->name() + ": expected the checkpoint to hold the optimizer state '" +
                       name + "', got none");
    }
    if (t->dtype() != state.dtype() || t->shape() != state.shape()) {
      throw ValueError(this->name() + ": expected state '" + name + "' to be " +
                       std::string(dtype_name(state.dtype())) + shape_to_string(state.shape()) +
                       ", got " + std::string(dtype_name(t->dtype())) +
                       shape_to_string(t->shape()));
    }
  }
  for (auto& [name, state] : states_) {
    const Tensor host = backend::to_host(*find(name));
    if (host.nbytes() == 0) continue;
    if (state.is_host()) {
      std::copy_n(static_cast<const char*>(host.raw_data()), host.nbytes(),
                  static_cast<char*>(state.raw_data()));
    } else {  // in place on the state's device
      backend::get_backend(state.device()).copy_from_host(state.raw_data(), host.raw_data(),
                                                          host.nbytes());
    }
  }
  if (const Tensor* gs = find("global_step"); gs != nullptr && gs->numel() == 1) {
    set_global_step(static_cast<std::int64_t>(gs->get(0)));
  }
  load_own_entries(entries);
}

// ---- Momentum -----------------------------------------------------------------------------

Momentum::Momentum(Options o)
    : Optimizer({o.learning_rate, o.weight_decay, std::move(o.groups), o.clip_global_norm}),
      momentum_(o.momentum),
      nesterov_(o.use_nesterov) {
  check_common("Momentum", o.weight_decay, o.clip_global_norm);
  check_lr("Momentum", o.learning_rate);
  if (!(o.momentum >= 0)) fail("Momentum", "momentum >= 0", o.momentum);
}

std::string Momentum::describe() const {
  std::string s = "Momentum(lr " + lr_text(common().learning_rate) + ", momentum " +
                  num(momentum_);
  if (common().weight_decay > 0) s += ", weight decay " + num(common().weight_decay);
  if (nesterov_) s += ", nesterov";
  return s + ")";
}

std::vector<ops::Var> Momentum::update(ops::Emitter& e, const std::string& param,
                                       const ops::Var& value, const std::vector<ops::Var>& states,
                                       const ops::Var& grad,
                                       const std::vector<ops::Var>& inputs) const {
  const ops::Var out = e.emit(
      "ApplyMomentum",
      {value, states[0], lr_of(e, param, value, inputs),
       l2(e, value, grad, weight_decay_of(param)), e.scalar_like(value, momentum_)},
      {{"use_nesterov", ir::Value::boolean(nesterov_)}});
  return {e.tuple_get(out, 0), e.tuple_get(out, 1)};
}

std::vector<std::pair<std::string, Tensor>> Momentum::own_entries() const {
  return {{"momentum", f32_scalar(momentum_)}};
}

// ---- SGD ----------------------------------------------------------------------------------

SGD::SGD(Options o)
    : Optimizer({o.learning_rate, o.weight_decay, std::move(o.groups), o.clip_global_norm}),
      momentum_(o.momentum),
      dampening_(o.dampening),
      nesterov_(o.nesterov) {
  check_common("SGD", o.weight_decay, o.clip_global_norm);
  check_lr("SGD", o.learning_rate);
  if (!(o.momentum >= 0)) fail("SGD", "momentum >= 0", o.momentum);
  if (!(o.dampening >= 0)) fail("SGD", "dampening >= 0", o.dampening);
  if (o.nesterov && (o.momentum <= 0 || o.dampening != 0)) {
    throw ValueError("SGD: expected momentum > 0 and dampening 0 with nesterov, got momentum " +
                     ir::format_f64(o.momentum) + ", dampening " + ir::format_f64(o.dampening));
  }
}

std::string SGD::describe() const {
  std::string s = "SGD(lr " + lr_text(common().learning_rate) + ", momentum " + num(momentum_);
  if (dampening_ != 0) s += ", dampening " + num(dampening_);
  if (nesterov_) s += ", nesterov";
  return s + ")";
}

std::vector<ops::Var> SGD::update(ops::Emitter& e, const std::string& param, const ops::Var& value,
                                  const std::vector<ops::Var>& states, const ops::Var& grad,
                                  const std::vector<ops::Var>& inputs) const {
  const ops::Var lr = lr_of(e, param, value, inputs);
  const ops::Var g = l2(e, value, grad, weight_decay_of(param));
  const ops::Var& accum = states[0];
  const ops::Var& stat = states[1];
  if (momentum_ == 0.0) return {e.sub(value, e.mul(lr, g)), accum, stat};
  const ops::Var mom = e.scalar_like(value, momentum_);
  const ops::Var damped =
      dampening_ == 0.0 ? g : e.mul(e.scalar_like(value, one_minus(dampening_, e.dtype_of(value))), g);
  // The first update of each element (stat > 0) takes g itself, undamped.
  const ops::Var first = e.emit("Greater", {stat, e.scalar_like(stat, 0.0)});
  const ops::Var acc = e.emit("Select", {first, g, e.add(e.mul(accum, mom), damped)});
  const ops::Var step = nesterov_ ? e.add(g, e.mul(mom, acc)) : acc;
  return {e.sub(value, e.mul(lr, step)), acc, e.zeros_like(stat)};
}

std::vector<std::pair<std::string, Tensor>> SGD::own_entries() const {
  return {{"momentum", f32_scalar(momentum_)}};
}

// ---- Adam ---------------------------------------------------------------------------------

Adam::Adam(Options o)
    : Optimizer({o.learning_rate, o.weight_decay, std::move(o.groups), o.clip_global_norm}),
      beta1_(o.beta1),
      beta2_(o.beta2),
      eps_(o.eps),
      nesterov_(o.use_nesterov) {
  check_common("Adam", o.weight_decay, o.clip_global_norm);
  check_lr("Adam", o.learning_rate);
  check_betas("Adam", o.beta1, o.beta2, o.eps);
}

std::string Adam::describe() const {
  return "Adam(lr " + lr_text(common().learning_rate) + ", beta1 " + num(beta1_) + ", beta2 " + num(beta2_) +
         ", eps " + num(eps_) + (nesterov_ ? ", nesterov" : "") + ")";
}

std::vector<std::string> Adam::own_input_names() const { return {"beta1_power", "beta2_power"}; }

double Adam::advance(double power, double beta) const {
  if (input_dtype() == DType::kFloat32) {
    return static_cast<double>(static_cast<float>(power) * static_cast<float>(beta));
  }
  return power * beta;
}

std::vector<double> Adam::own_input_values() const {
  // The powers of the coming step: advanced before the update (MindSpore's order).
  return {advance(beta1_power_, beta1_), advance(beta2_power_, beta2_)};
}

void Adam::step_done() {
  beta1_power_ = advance(beta1_power_, beta1_);
  beta2_power_ = advance(beta2_power_, beta2_);
  Optimizer::step_done();
}

std::vector<ops::Var> Adam::update(ops::Emitter& e, const std::string& param, const ops::Var& value,
                                   const std::vector<ops::Var>& states, const ops::Var& grad,
                                   const std::vector<ops::Var>& inputs) const {
  const DType d = e.dtype_of(value);
  const std::size_t n = inputs.size();
  ops::Var b1p = inputs[n - 2];
  ops::Var b2p = inputs[n - 1];
  if (e.dtype_of(b1p) != d) {
    b1p = e.cast(b1p, d);
    b2p = e.cast(b2p, d);
  }
  const ops::Var out = e.emit(
      "ApplyAdam",
      {value, states[0], states[1], b1p, b2p, lr_of(e, param, value, inputs),
       e.scalar_like(value, beta1_), e.scalar_like(value, beta2_), e.scalar_like(value, eps_),
       l2(e, value, grad, weight_decay_of(param))},
      {{"use_nesterov", ir::Value::boolean(nesterov_)}});
  return {e.tuple_get(out, 0), e.tuple_get(out, 1), e.tuple_get(out, 2)};
}

std::vector<std::pair<std::string, Tensor>> Adam::own_entries() const {
  // Float32 as MindSpore's (Float64 for a Float64 network, so that it resumes bitwise).
  const DType d = input_dtype() == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  return {{"beta1_power", Tensor::scalar(d, beta1_power_)},
          {"beta2_power", Tensor::scalar(d, beta2_power_)}};
}

void Adam::load_own_entries(const std::vector<std::pair<std::string, Tensor>>& entries) {
  // The powers as saved; a checkpoint without them (an older loom) gets them from the step count.
  beta1_power_ = beta2_power_ = 1.0;
  for (std::int64_t i = 0; i < global_step_; ++i) {
    beta1_power_ = advance(beta1_power_, beta1_);
    beta2_power_ = advance(beta2_power_, beta2_);
  }
  for (const auto& [name, t] : entries) {
    if (t.numel() != 1) continue;
    if (name == "beta1_power") beta1_power_ = t.get(0);
    if (name == "beta2_power") beta2_power_ = t.get(0);
  }
}

// ---- AdamWeightDecay ----------------------------------------------------------------------

AdamWeightDecay::AdamWeightDecay(Options o)
    : Optimizer({o.learning_rate, o.weight_decay, std::move(o.groups), o.clip_global_norm}),
      beta1_(o.beta1),
      beta2_(o.beta2),
      eps_(o.eps) {
  check_common("AdamWeightDecay", o.weight_decay, o.clip_global_norm);
  check_lr("AdamWeightDecay", o.learning_rate);
  check_betas("AdamWeightDecay", o.beta1, o.beta2, o.eps);
}

std::string AdamWeightDecay::describe() const {
  return "AdamWeightDecay(lr " + lr_text(common().learning_rate) + ", beta1 " + num(beta1_) + ", beta2 " +
         num(beta2_) + ", eps " + num(eps_) + ")";
}

std::vector<ops::Var> AdamWeightDecay::update(ops::Emitter& e, const std::string& param,
                                              const ops::Var& value,
                                              const std::vector<ops::Var>& states,
                                              const ops::Var& grad,
                                              const std::vector<ops::Var>& inputs) const {
  const DType d = e.dtype_of(value);
  const ops::Var& m = states[0];
  const ops::Var& v = states[1];
  // MindSpore's kernel: m += (g - m)(1 - beta1); v += (g² - v)(1 - beta2);
  // w -= lr (m / (sqrt(v) + eps) + decay w).
  const ops::Var m2 = e.add(m, e.mul(e.sub(grad, m), e.scalar_like(value, one_minus(beta1_, d))));
  const ops::Var v2 = e.add(
      v, e.mul(e.sub(e.mul(grad, grad), v), e.scalar_like(value, one_minus(beta2_, d))));
  ops::Var update = e.div(m2, e.add(e.emit("Sqrt", {v2}), e.scalar_like(value, eps_)));
  const double decay = weight_decay_of(param);
  if (decay != 0.0) update = e.add(update, e.mul(e.scalar_like(value, decay), value));
  return {e.sub(value, e.mul(lr_of(e, param, value, inputs), update)), m2, v2};
}

// ---- Specs --------------------------------------------------------------------------------

const char* kind_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kMomentum: return "momentum";
    case OptimizerKind::kSGD: return "sgd";
    case OptimizerKind::kAdam: return "adam";
    case OptimizerKind::kAdamW: return "adamw";
  }
  return "momentum";
}

OptimizerKind kind_from_name(const std::string& name) {
  for (OptimizerKind k : {OptimizerKind::kMomentum, OptimizerKind::kSGD, OptimizerKind::kAdam,
                          OptimizerKind::kAdamW}) {
    if (name == kind_name(k)) return k;
  }
  throw ValueError("optimizer: expected one of momentum, sgd, adam, adamw, got '" + name + "'");
}

std::shared_ptr<Optimizer> make_optimizer(const OptimizerSpec& s,
                                          std::optional<LearningRate> learning_rate) {
  const LearningRate lr = learning_rate.value_or(LearningRate(s.learning_rate));
  switch (s.kind) {
    case OptimizerKind::kMomentum:
      return std::make_shared<Momentum>(Momentum::Options{.learning_rate = lr,
                                                          .momentum = s.momentum,
                                                          .weight_decay = s.weight_decay,
                                                          .use_nesterov = s.nesterov,
                                                          .clip_global_norm = s.clip_global_norm});
    case OptimizerKind::kSGD:
      return std::make_shared<SGD>(SGD::Options{.learning_rate = lr,
                                                .momentum = s.momentum,
                                                .dampening = s.dampening,
                                                .weight_decay = s.weight_decay,
                                                .nesterov = s.nesterov,
                                                .clip_global_norm = s.clip_global_norm});
    case OptimizerKind::kAdam:
      return std::make_shared<Adam>(Adam::Options{.learning_rate = lr,
                                                  .beta1 = s.beta1,
                                                  .beta2 = s.beta2,
                                                  .eps = s.eps.value_or(1e-8),
                                                  .weight_decay = s.weight_decay,
                                                  .use_nesterov = s.nesterov,
                                                  .clip_global_norm = s.clip_global_norm});
    case OptimizerKind::kAdamW:
      return std::make_shared<AdamWeightDecay>(
          AdamWeightDecay::Options{.learning_rate = lr,
                                   .beta1 = s.beta1,
                                   .beta2 = s.beta2,
                                   .eps = s.eps.value_or(1e-6),
                                   .weight_decay = s.weight_decay,
                                   .clip_global_norm = s.clip_global_norm});
  }
  throw InternalError("make_optimizer: unknown kind");
}

}  // namespace loom::optim
