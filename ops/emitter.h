/// \file
/// The emitter: the one interface bprop rules are written against.
///
/// A bprop rule builds its gradient by calling ops through an Emitter. The graph emitter
/// (core/autodiff) turns each call into a CNode, so a gradient is itself IR and can be
/// differentiated again; the eager emitter (backends/eager.h) runs each call's kernel at once on
/// concrete tensors, which is how the rules are checked by finite differences and how PyNative
/// mode gets gradients. Rules never see which one they talk to.
///
///     Grads relu_bprop(Emitter& e, const BpropArgs& a) {
///       return {e.emit("ReluGrad", {a.dout, a.out})};
///     }
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
  /// A Var for an IR node (the graph emitter's kind).
  explicit Var(ir::Node* node) : node_(node), kind_(Kind::kNode) {}
  /// A Var holding a concrete value (the eager emitter's kind).
  explicit Var(ir::Value value) : value_(std::move(value)), kind_(Kind::kValue) {}

  /// True unless the Var is "nothing" (default-constructed).
  bool defined() const { return kind_ != Kind::kNone; }
  /// True when the Var is an IR node.
  bool is_node() const { return kind_ == Kind::kNode; }
  /// True when the Var holds a concrete value.
  bool is_value() const { return kind_ == Kind::kValue; }
  /// The IR node; throws InternalError unless is_node().
  ir::Node* node() const;
  /// The concrete value; throws TypeError for a node Var (a traced graph value read on the host)
  /// and InternalError for "nothing".
  const ir::Value& value() const;

 private:
  enum class Kind { kNone, kNode, kValue };
  ir::Node* node_ = nullptr;
  ir::Value value_;
  Kind kind_ = Kind::kNone;
};

/// The interface bprop rules emit ops through: implemented by the graph emitter
/// (core/trace/graph_emitter.h), which builds CNodes, and the eager emitter (backends/eager.h),
/// which runs kernels at once.
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

  // Shorthands built on the three above.

  /// Element `index` of a tuple (TupleGetItem).
  Var tuple_get(const Var& tuple, std::int64_t index);
  /// A tuple of `elements` (MakeTuple).
  Var make_tuple(const std::vector<Var>& elements);
  /// A constant rank-0 tensor of `like`'s dtype holding `value`.
  Var scalar_like(const Var& like, double value);
  /// A tensor of zeros with `v`'s dtype and shape (ZerosLike).
  Var zeros_like(const Var& v) { return emit("ZerosLike", {v}); }
  /// Elementwise (broadcasting) arithmetic: Add, Sub, Mul, RealDiv.
  ///@{
  Var add(const Var& a, const Var& b) { return emit("Add", {a, b}); }
  Var sub(const Var& a, const Var& b) { return emit("Sub", {a, b}); }
  Var mul(const Var& a, const Var& b) { return emit("Mul", {a, b}); }
  Var div(const Var& a, const Var& b) { return emit("RealDiv", {a, b}); }
  ///@}
  /// The elementwise negation (Neg).
  Var neg(const Var& a) { return emit("Neg", {a}); }
  /// `a` cast to `dtype` (Cast); `a` itself when it already has that dtype.
  Var cast(const Var& a, DType dtype);
  /// `a` reshaped to `shape` (Reshape); `a` itself when it already has that shape.
  Var reshape(const Var& a, const Shape& shape);
  /// The sum of `a` over `axes` (ReduceSum), keeping them as size-1 axes when `keep_dims`.
  Var reduce_sum(const Var& a, const std::vector<std::int64_t>& axes, bool keep_dims);
  /// Sums a broadcast gradient back to `shape` (the inverse of broadcasting an operand of that
  /// shape): reduces the leading and the size-1 axes, then reshapes. Throws InternalError when
  /// `grad` has a lower rank than `shape`.
  Var sum_to_shape(const Var& grad, const Shape& shape);

  /// The static shape of a tensor Var; throws InternalError unless it is a tensor of known shape.
  Shape shape_of(const Var& v);
  /// The dtype of a tensor or scalar Var; throws InternalError for anything else.
  DType dtype_of(const Var& v);
};

}  // namespace loom::ops
