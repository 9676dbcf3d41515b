// The registry of ops, attribute checking against each op's schema, arity-checked inference,
// and the Var handle of bprop rules.
#include <algorithm>
#include <mutex>

#include "core/ir/anf.h"
#include "core/ir/error.h"
#include "ops/op.h"

namespace loom::ops {

ir::Node* Var::node() const {
  if (kind_ != Kind::kNode) throw InternalError("Var::node: expected a node Var, got another kind");
  return node_;
}

const ir::Value& Var::value() const {
  if (kind_ == Kind::kNode) {
    // The usual way here: a construct reading a tensor on the host while it is traced.
    throw TypeError("Var::value: expected a concrete value, got a traced graph value (a construct "
                    "traced in graph mode cannot read tensors on the host; compute with ops, "
                    "branch on data with nn::cond, or run it in PyNative mode)");
  }
  if (kind_ != Kind::kValue) throw InternalError("Var::value: expected a value Var, got none");
  return value_;
}

const AbstractPtr& InferContext::input(std::size_t i) const {
  if (i >= inputs.size()) {
    throw InternalError(op.name + ": expected input " + std::to_string(i) + ", got " +
                        std::to_string(inputs.size()) + " inputs");
  }
  return inputs[i];
}

const ir::Abstract& InferContext::tensor(std::size_t i) const {
  const AbstractPtr& a = input(i);
  if (!a->is_tensor() || !a->has_rank()) {
    throw TypeError(error("expected input " + std::to_string(i) +
                          " to be a tensor of known rank, got " + a->to_string()));
  }
  return *a;
}

std::string InferContext::error(std::string_view message) const {
  std::string s = op.name + ": " + std::string(message);
  if (!where.empty()) s += " (in " + std::string(where) + ")";
  return s;
}

const Registry& Registry::global() { return global_mutable(); }

Registry& Registry::global_mutable() {
  static Registry* registry = [] {
    auto* r = new Registry();
    register_structural_ops(*r);
    register_math_ops(*r);
    register_activation_ops(*r);
    register_matmul_ops(*r);
    register_conv_pool_ops(*r);
    register_norm_loss_ops(*r);
    register_array_ops(*r);
    register_reduce_ops(*r);
    register_optimizer_ops(*r);
    register_fused_ops(*r);
    register_comm_ops(*r);
    return r;
  }();
  return *registry;
}

void Registry::add(OpDef def) {
  if (find(def.name)) throw InternalError("ops: expected a new op name, got duplicate " + def.name);
  if (!def.infer) throw InternalError("ops: expected an infer rule for " + def.name + ", got none");
  if (!def.bprop && def.not_differentiable_because.empty()) {
    throw InternalError("ops: expected a bprop rule or a reason it has none for " + def.name +
                        ", got neither");
  }
  ops_.push_back(std::make_unique<OpDef>(std::move(def)));
}

const OpDef* Registry::find(std::string_view name) const {
  for (const auto& op : ops_) {
    if (op->name == name) return op.get();
  }
  return nullptr;
}

const OpDef& Registry::get(std::string_view name) const {
  const OpDef* op = find(name);
  if (!op) throw ValueError("ops: expected a registered op, got '" + std::string(name) + "'");
  return *op;
}

std::vector<const OpDef*> Registry::all() const {
  std::vector<const OpDef*> out;
  for (const auto& op : ops_) out.push_back(op.get());
  std::sort(out.begin(), out.end(),
            [](const OpDef* a, const OpDef* b) { return a->name < b->name; });
  return out;
}

namespace {

std::string_view attr_kind_name(AttrKind kind) {
  switch (kind) {
    case AttrKind::kBool: return "Bool";
    case AttrKind::kInt: return "an integer";
    case AttrKind::kFloat: return "a float";
    case AttrKind::kString: return "a string";
    case AttrKind::kInts: return "a tuple of integers";
    case AttrKind::kDType: return "a DType";
    case AttrKind::kAny: return "any value";
  }
  return "?";
}

bool is_int_scalar(const Value& v) {
  return v.is_scalar() && (v.as_scalar().dtype() == DType::kInt32 ||
                           v.as_scalar().dtype() == DType::kInt64);
}

bool matches(AttrKind kind, const Value& v) {
  switch (kind) {
    case AttrKind::kBool: return v.is_scalar() && v.as_scalar().dtype() == DType::kBool;
    case AttrKind::kInt: return is_int_scalar(v);
    case AttrKind::kFloat: return v.is_scalar() && v.as_scalar().dtype() != DType::kBool;
    case AttrKind::kString: return v.is_string();
    case AttrKind::kInts:
      if (!v.is_tuple()) return false;
      return std::all_of(v.elements().begin(), v.elements().end(), is_int_scalar);
    case AttrKind::kDType: return v.is_dtype();
    case AttrKind::kAny: return true;
  }
  return false;
}

std::string describe(const Value& v) {
  if (v.is_scalar()) return std::string(dtype_name(v.as_scalar().dtype()));
  return std::string(Value::kind_name(v.kind()));
}

}  // namespace

PrimitivePtr make_op(std::string_view name, Primitive::Attrs attrs) {
  const OpDef& op = Registry::global().get(name);
  for (const auto& [key, value] : attrs) {
    auto spec = std::find_if(op.attrs.begin(), op.attrs.end(),
                             [&k = key](const AttrSpec& s) { return s.name == k; });
    if (spec == op.attrs.end()) {
      std::string known;
      for (const AttrSpec& s : op.attrs) known += (known.empty() ? "" : ", ") + s.name;
      throw ValueError(op.name + ": expected an attribute of (" + known + "), got '" + key + "'");
    }
  }
  for (const AttrSpec& spec : op.attrs) {
    auto it = attrs.find(spec.name);
    if (it == attrs.end()) {
      if (!spec.default_value) {
        throw ValueError(op.name + ": expected attribute '" + spec.name + "', got none");
      }
      attrs.emplace(spec.name, *spec.default_value);
      continue;
    }
    if (!matches(spec.kind, it->second)) {
      throw TypeError(op.name + ": expected attribute '" + spec.name + "' to be " +
                      std::string(attr_kind_name(spec.kind)) + ", got " + describe(it->second));
    }
    if (spec.kind == AttrKind::kFloat && !is_floating(it->second.as_scalar().dtype())) {
      it->second = Value::f32(static_cast<float>(it->second.as_double()));  // 1 → 1.0
    }
    if (spec.check) {
      std::string problem = spec.check(it->second);
      if (!problem.empty()) {
        throw ValueError(op.name + ": attribute '" + spec.name + "' " + problem);
      }
    }
  }
  return ir::make_primitive(std::string(name), std::move(attrs));
}

AbstractPtr infer(const Primitive& prim, std::span<const AbstractPtr> inputs,
                  std::string_view where) {
  const OpDef& op = Registry::global().get(prim.name());
  const auto n = static_cast<int>(inputs.size());
  if (op.num_inputs >= 0 ? n != op.num_inputs : n < op.min_inputs) {
    std::string expected = op.num_inputs >= 0 ? std::to_string(op.num_inputs)
                                              : "at least " + std::to_string(op.min_inputs);
    std::string msg = op.name + ": expected " + expected + " inputs, got " + std::to_string(n);
    if (!where.empty()) msg += " (in " + std::string(where) + ")";
    throw ValueError(msg);
  }
  for (int i = 0; i < n; ++i) {
    if (!inputs[static_cast<std::size_t>(i)]) {
      throw InternalError(op.name + ": expected an inferred input " + std::to_string(i) +
                          ", got none");
    }
  }
  InferContext ctx{op, prim, inputs, where};
  return op.infer(ctx);
}

}  // namespace loom::ops
