/// \file
/// Eager execution: calling an op on concrete values runs its kernel at once. This is the
/// PyNative path, the executor of bprop rules in gradient checks, and how constant folding
/// evaluates. Structural ops (MakeTuple, TupleGetItem, Depend, StopGradient) are handled here
/// without kernels.
///
///     Value y = run_op("MatMul", {Value::tensor(a), Value::tensor(b)},
///                      {{"transpose_b", Value::boolean(true)}});
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "backends/kernel.h"
#include "ops/emitter.h"

namespace loom::backend {

/// Runs one op on concrete values: the primitive `prim`, or the registered op `op` with `attrs`
/// (checked and completed by ops::make_op). Infers the result from the arguments' values,
/// allocates it (zero-filled) on the device the tensor arguments live on (all on one, where
/// single-element host tensors are copied first; the CPU when every tensor is on the host), finds
/// that backend's kernel for (op, the dtype named by OpDef::kernel_dtype_from) and runs it.
/// Throws the inference errors, ValueError for arguments on two devices or a control-flow op, or
/// TypeError (`"<Op>: expected a <Device> kernel for <dtype>, got none"`) when no kernel exists.
///@{
ir::Value run_op(const ir::Primitive& prim, std::span<const ir::Value> args);
ir::Value run_op(std::string_view op, const std::vector<ir::Value>& args,
                 ir::Primitive::Attrs attrs = {});
///@}

/// An Emitter that computes at once: Vars hold concrete Values.
class EagerEmitter final : public ops::Emitter {
 public:
  /// Runs `op` at once on the arguments' values (run_op); every argument must hold a value.
  ops::Var emit(std::string_view op, const std::vector<ops::Var>& args,
                ir::Primitive::Attrs attrs = {}) override;
  /// A Var holding `value`.
  ops::Var constant(ir::Value value) override;
  /// The abstract of the Var's value.
  ir::AbstractPtr abstract_of(const ops::Var& v) override;
};

/// Runs op's bprop rule eagerly: the gradients of `args` given the forward result `out` and its
/// gradient `dout`. Entries for inputs without a gradient are None values. Throws ValueError
/// when the op has no bprop rule.
std::vector<ir::Value> run_bprop(const ir::Primitive& prim, std::span<const ir::Value> args,
                                 const ir::Value& out, const ir::Value& dout);

}  // namespace loom::backend
