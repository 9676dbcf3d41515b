/// \file
/// The emitter: the one interface bprop rules are written against.
///
/// A bprop rule builds its gradient by calling ops through an Emitter. The graph emitter
/// (core/autodiff) turns each call into a CNode, so a gradient is itself IR and can be
/// differentiated again; the eager emitter (backends/eager.h) runs each call's kernel at once on
/// concrete tensors, which is how the rules are checked by finite differences and how PyNative
/// mode gets gradients. Rules never see which one they talk to.
///
///   Grads relu_bprop(Emitter& e, const BpropArgs& a) {
///     return {e.emit("ReluGrad", {a.dout, a.out})};
///   }
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/ir/abstract.h"
#include "core/ir/tensor.h"
#include "core/ir/value.h"

namespace loom::ir {
class Node;
}

namespace loom::ops {

/// A value inside a bprop rule: an IR node (graph emitter) or a concrete Value (eager emitter).
/// A default-constructed Var is "nothing" (no gradient).
class Var {
 public:
  Var() = default;
  explicit Var(ir::Node* node) : node_(node), kind_(Kind::kNode) {}
  explicit Var(ir::Value value) : value_(std::move(value)), kind_(Kind::kValue) {}

  bool defined() const { return kind_ != Kind::kNone; }
  bool is_node() const { return kind_ == Kind::kNode; }
  bool is_value() const { return kind_ == Kind::kValue; }
  ir::Node* node() const;              ///< throws InternalError unless is_node()
  const ir::Value& value() const;      ///< throws InternalError unless is_value()

 private:
  enum class Kind { kNone, kNode, kValue };
  ir::Node* node_ = nullptr;
  ir::Value value_;
  Kind kind_ = Kind::kNone;
};

class Emitter {
 public:
  virtual ~Emitter() = default;

  /// Applies the registered op `op` with `attrs` (defaults filled in) to `args`.
  virtual Var emit(std::string_view op, const std::vector<Var>& args,
                   ir::Primitive::Attrs attrs = {}) = 0;
  /// A constant.
  virtual Var constant(ir::Value value) = 0;
  /// What is known about a Var: dtype and shape of a tensor, elements of a tuple. Bprop rules
  /// use it for static shapes (shapes are known after inference).
  virtual ir::AbstractPtr abstract_of(const Var& v) = 0;

  /// Shorthands built on the three above.
  Var tuple_get(const Var& tuple, std::int64_t index);
  Var make_tuple(const std::vector<Var>& elements);
  Var scalar_like(const Var& like, double value);  ///< a rank-0 tensor of like's dtype
  Var zeros_like(const Var& v) { return emit("ZerosLike", {v}); }
  Var add(const Var& a, const Var& b) { return emit("Add", {a, b}); }
  Var sub(const Var& a, const Var& b) { return emit("Sub", {a, b}); }
  Var mul(const Var& a, const Var& b) { return emit("Mul", {a, b}); }
  Var div(const Var& a, const Var& b) { return emit("RealDiv", {a, b}); }
  Var neg(const Var& a) { return emit("Neg", {a}); }
  Var cast(const Var& a, DType dtype);
  Var reshape(const Var& a, const Shape& shape);
  Var reduce_sum(const Var& a, const std::vector<std::int64_t>& axes, bool keep_dims);
  /// Sums a broadcast gradient back to `shape` (the inverse of broadcasting an operand of that
  /// shape): reduces the leading and the size-1 axes, then reshapes.
  Var sum_to_shape(const Var& grad, const Shape& shape);

  /// The static shape / dtype of a tensor Var (InternalError when unknown).
  Shape shape_of(const Var& v);
  DType dtype_of(const Var& v);
};

}  // namespace loom::ops
