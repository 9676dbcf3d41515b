// Eager execution of single ops on concrete values, and the eager Emitter built on it.
#include "backends/eager.h"

#include "backends/backend.h"
#include "core/ir/abstract.h"
#include "core/ir/error.h"
#include "ops/op.h"

namespace loom::backend {

namespace {

void flatten_tensors(const ir::Value& v, std::vector<Tensor>& out, std::string_view op) {
  if (v.is_tensor()) {
    out.push_back(v.as_tensor());
  } else if (v.is_tuple()) {
    for (const ir::Value& e : v.elements()) flatten_tensors(e, out, op);
  } else {
    throw TypeError(std::string(op) + ": expected tensor arguments, got a " +
                    std::string(ir::Value::kind_name(v.kind())));
  }
}

// Allocates a zero-filled tensor on `b` per tensor leaf of `a`, appending to `leaves`.
void allocate(const ir::Abstract& a, Backend& b, std::vector<Tensor>& leaves,
              std::string_view op) {
  if (a.is_tensor()) {
    if (!a.shape_known()) {
      throw InternalError(std::string(op) + ": expected a known output shape, got " +
                          a.to_string());
    }
    if (b.device() == Device::kCPU) {
      leaves.emplace_back(a.dtype(), a.shape());  // zero-filled host storage
    } else {
      leaves.push_back(empty(b, a.dtype(), a.shape()));
      b.fill_zero(leaves.back().raw_data(), leaves.back().nbytes());
    }
  } else if (a.is_tuple()) {
    for (const auto& e : a.elements()) allocate(*e, b, leaves, op);
  } else {
    throw InternalError(std::string(op) + ": expected tensor outputs, got " + a.to_string());
  }
}

ir::Value rebuild(const ir::Abstract& a, const std::vector<Tensor>& leaves, std::size_t& next) {
  if (a.is_tensor()) return ir::Value::tensor(leaves[next++]);
  std::vector<ir::Value> elements;
  for (const auto& e : a.elements()) elements.push_back(rebuild(*e, leaves, next));
  return ir::Value::tuple(std::move(elements));
}

}  // namespace

ir::Value run_op(const ir::Primitive& given, std::span<const ir::Value> args) {
  const ops::OpDef& def = ops::Registry::global().get(given.name());
  // A primitive read from text may leave defaulted attributes out; kernels read every one.
  ir::PrimitivePtr completed;
  if (given.attrs().size() != def.attrs.size()) completed = ops::make_op(given.name(), given.attrs());
  const ir::Primitive& prim = completed ? *completed : given;
  const std::string& name = prim.name();
  std::vector<ir::AbstractPtr> abstracts;
  abstracts.reserve(args.size());
  for (const ir::Value& v : args) abstracts.push_back(ir::Abstract::of_value(v));
  ir::AbstractPtr out_abstract = ops::infer(prim, abstracts);

  if (def.trait == ops::Trait::kStructural) {
    if (name == "MakeTuple") return ir::Value::tuple({args.begin(), args.end()});
    if (name == "TupleGetItem") {
      std::int64_t i = args[1].as_int();
      const auto n = static_cast<std::int64_t>(args[0].elements().size());
      return args[0].elements()[static_cast<std::size_t>(i < 0 ? i + n : i)];
    }
    return args[0];  // Depend, StopGradient
  }
  if (def.trait == ops::Trait::kControlFlow) {
    throw ValueError(name + ": expected to be run by the interpreter, got an eager call");
  }

  std::vector<Tensor> inputs;
  for (const ir::Value& v : args) flatten_tensors(v, inputs, name);
  // The op runs where its tensors are: on the one device besides the host that any of them is
  // on, where host scalars (a learning rate, a constant the trace made) are copied first, as
  // PyTorch lets a 0-dim CPU tensor join a CUDA op; else on the CPU.
  Device device = Device::kCPU;
  for (const Tensor& t : inputs) {
    if (!t.is_host()) {
      device = t.device();
      break;
    }
  }
  for (Tensor& t : inputs) {
    if (device != Device::kCPU && t.is_host() && t.numel() == 1) t = to_device(t, get_backend(device));
    if (t.device() != device) {
      throw ValueError(name + ": expected every tensor on " + std::string(device_name(device)) +
                       ", got one on " + std::string(device_name(t.device())));
    }
  }
  Backend& backend = get_backend(device);
  std::vector<Tensor> outputs;
  allocate(*out_abstract, backend, outputs, name);
  const auto from = static_cast<std::size_t>(def.kernel_dtype_from);
  const DType key = def.kernel_dtype_from >= 0 && from < inputs.size() ? inputs[from].dtype()
                                                                      : outputs.at(0).dtype();
  const KernelDef* kernel = backend.find_kernel(name, key);
  if (!kernel) {
    throw TypeError(name + ": expected a " + std::string(backend.name()) + " kernel for " +
                    std::string(dtype_name(key)) + ", got none");
  }
  run_kernel(*kernel, prim, inputs, outputs, backend);
  std::size_t next = 0;
  return rebuild(*out_abstract, outputs, next);
}

ir::Value run_op(std::string_view op, const std::vector<ir::Value>& args,
                 ir::Primitive::Attrs attrs) {
  ir::PrimitivePtr prim = ops::make_op(op, std::move(attrs));
  return run_op(*prim, args);
}

ops::Var EagerEmitter::emit(std::string_view op, const std::vector<ops::Var>& args,
                            ir::Primitive::Attrs attrs) {
  std::vector<ir::Value> values;
  values.reserve(args.size());
  for (const ops::Var& a : args) values.push_back(a.value());
  return ops::Var(run_op(op, values, std::move(attrs)));
}

ops::Var EagerEmitter::constant(ir::Value value) { return ops::Var(std::move(value)); }

ir::AbstractPtr EagerEmitter::abstract_of(const ops::Var& v) {
  return ir::Abstract::of_value(v.value());
}

std::vector<ir::Value> run_bprop(const ir::Primitive& prim, std::span<const ir::Value> args,
                                 const ir::Value& out, const ir::Value& dout) {
  const ops::OpDef& def = ops::Registry::global().get(prim.name());
  if (!def.bprop) {
    throw ValueError(prim.name() + ": expected a differentiable op, got one without a bprop (" +
                     def.not_differentiable_because + ")");
  }
  EagerEmitter e;
  ops::BpropArgs a{prim, {}, ops::Var(out), ops::Var(dout)};
  for (const ir::Value& v : args) a.inputs.push_back(ops::Var(v));
  ops::Grads grads = def.bprop(e, a);
  if (grads.size() != args.size()) {
    throw InternalError(prim.name() + ": expected one gradient per input (" +
                        std::to_string(args.size()) + "), got " + std::to_string(grads.size()));
  }
  std::vector<ir::Value> out_values;
  for (const ops::Var& g : grads) out_values.push_back(g.defined() ? g.value() : ir::Value());
  return out_values;
}

}  // namespace loom::backend
