/// \file
/// Values: what a ValueNode holds and what a Primitive's attributes are.
///
/// A Value is one of: None, a scalar (Bool, Int32, Int64, Float32, Float64), a string, a DType, a
/// Tensor, a tuple of Values, a Primitive, or a FuncGraph (a graph used as a value: the callee of a
/// call, the branch of an If, the body of a While). Values are immutable and cheap to copy.
///
/// ```
/// Value v = Value::tuple({Value::i64(2), Value::i64(2)});
/// if (v.is_tuple()) int64_t h = v.elements()[0].as_int();
/// ```
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/ir/dtype.h"
#include "core/ir/tensor.h"

namespace loom::ir {

class FuncGraph;
class Primitive;
/// Primitives are immutable and shared by the CNodes that apply them.
using PrimitivePtr = std::shared_ptr<const Primitive>;

/// A typed scalar. dtype is one of Bool, Int32, Int64, Float32, Float64.
class Scalar {
 public:
  /// A scalar of dtype Bool, Int32, Int64, Float32, Float64 respectively.
  ///@{
  static Scalar boolean(bool v);
  static Scalar i32(std::int32_t v);
  static Scalar i64(std::int64_t v);
  static Scalar f32(float v);
  static Scalar f64(double v);
  ///@}

  /// Bool, Int32, Int64, Float32 or Float64.
  DType dtype() const { return dtype_; }
  bool as_bool() const;            ///< any scalar; nonzero is true
  std::int64_t as_int() const;     ///< Bool or integer scalars; TypeError for floats
  double as_double() const;        ///< any scalar
  /// Same dtype and value; floats compare bitwise (a NaN equals itself, 0 differs from -0).
  bool operator==(const Scalar& other) const;

 private:
  DType dtype_ = DType::kInt64;
  std::int64_t int_ = 0;  ///< Bool, Int32, Int64
  double float_ = 0;      ///< Float32 (exactly representable), Float64
};

/// A constant of the IR: None, a Scalar, a string, a DType, a Tensor, a tuple of Values, a
/// Primitive or a FuncGraph. Immutable and cheap to copy.
class Value {
 public:
  /// Which of the alternatives a value holds: kNone, kScalar, kString, kDType, kTensor, kTuple,
  /// kPrimitive, kGraph.
  enum class Kind { kNone, kScalar, kString, kDType, kTensor, kTuple, kPrimitive, kGraph };

  Value() = default;  ///< None
  /// None (the same as Value()).
  static Value none() { return Value(); }
  /// A scalar.
  static Value scalar(Scalar s);
  /// A scalar of dtype Bool, Int32, Int64, Float32, Float64 respectively.
  ///@{
  static Value boolean(bool v) { return scalar(Scalar::boolean(v)); }
  static Value i32(std::int32_t v) { return scalar(Scalar::i32(v)); }
  static Value i64(std::int64_t v) { return scalar(Scalar::i64(v)); }
  static Value f32(float v) { return scalar(Scalar::f32(v)); }
  static Value f64(double v) { return scalar(Scalar::f64(v)); }
  ///@}
  /// A string.
  static Value string(std::string s);
  /// A DType used as a value (Cast's target).
  static Value dtype(DType d);
  /// A tensor, sharing its storage; throws ValueError for an undefined tensor.
  static Value tensor(Tensor t);
  /// A tuple of values.
  static Value tuple(std::vector<Value> elements);
  static Value ints(const std::vector<std::int64_t>& values);  ///< a tuple of Int64 scalars
  /// A primitive; throws ValueError for null.
  static Value primitive(PrimitivePtr p);
  /// A graph used as a value (the graph is not owned); throws ValueError for null.
  static Value graph(FuncGraph* g);

  /// Which of the alternatives the value holds.
  Kind kind() const;
  /// Kind tests: true when kind() is the kind the function names.
  ///@{
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_scalar() const { return kind() == Kind::kScalar; }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_dtype() const { return kind() == Kind::kDType; }
  bool is_tensor() const { return kind() == Kind::kTensor; }
  bool is_tuple() const { return kind() == Kind::kTuple; }
  bool is_primitive() const { return kind() == Kind::kPrimitive; }
  bool is_graph() const { return kind() == Kind::kGraph; }
  ///@}

  /// Accessors: the value held, as the kind each one names. They throw
  /// TypeError("Value: expected KIND, got KIND") on the wrong kind; as_bool, as_int and
  /// as_double take any scalar, converted as Scalar's accessors do (as_int throws TypeError for
  /// a floating scalar).
  ///@{
  const Scalar& as_scalar() const;
  bool as_bool() const { return as_scalar().as_bool(); }
  std::int64_t as_int() const { return as_scalar().as_int(); }
  double as_double() const { return as_scalar().as_double(); }
  const std::string& as_string() const;
  DType as_dtype() const;
  const Tensor& as_tensor() const;
  const std::vector<Value>& elements() const;  ///< The elements of a tuple (else TypeError).
  std::vector<std::int64_t> as_ints() const;   ///< A tuple's integer elements (else TypeError).
  const PrimitivePtr& as_primitive() const;
  FuncGraph* as_graph() const;
  ///@}

  /// Structural equality and its negation; tensors compare bitwise, graphs and primitives by
  /// identity of graph / by name and attributes.
  ///@{
  bool operator==(const Value& other) const;
  bool operator!=(const Value& other) const { return !(*this == other); }
  ///@}

  /// The kind's name as error messages spell it: "None", "scalar", "string", "dtype", "tensor",
  /// "tuple", "primitive", "graph".
  static std::string_view kind_name(Kind kind);

 private:
  using Elements = std::shared_ptr<const std::vector<Value>>;
  std::variant<std::monostate, Scalar, std::string, DType, Tensor, Elements, PrimitivePtr,
               FuncGraph*>
      v_;
};

/// An operator applied by a CNode: a name (MindSpore's primitive name: "Conv2D", "If") and its
/// attributes, ordered by name. Immutable once made; shared by every CNode that applies it.
class Primitive {
 public:
  /// Attributes by name, ordered by name.
  using Attrs = std::map<std::string, Value, std::less<>>;

  /// A primitive named `name` with `attrs`.
  explicit Primitive(std::string name, Attrs attrs = {})
      : name_(std::move(name)), attrs_(std::move(attrs)) {}

  /// The primitive's name ("Conv2D").
  const std::string& name() const { return name_; }
  /// The attributes, ordered by name.
  const Attrs& attrs() const { return attrs_; }
  /// True when the attribute `key` is present.
  bool has_attr(std::string_view key) const { return attrs_.find(key) != attrs_.end(); }
  /// The attribute `key`; throws ValueError("NAME: expected attribute 'KEY', got none") when
  /// absent.
  const Value& attr(std::string_view key) const;

  /// Same name and attributes.
  bool operator==(const Primitive& other) const {
    return name_ == other.name_ && attrs_ == other.attrs_;
  }

 private:
  std::string name_;
  Attrs attrs_;
};

/// A new shared Primitive named `name` with `attrs`.
inline PrimitivePtr make_primitive(std::string name, Primitive::Attrs attrs = {}) {
  return std::make_shared<const Primitive>(std::move(name), std::move(attrs));
}

/// Text helper shared by the printers: the shortest decimal that reads back to the same float
/// or double ("0.1", "1e-08"), and "nan", "inf", "-inf" for the values that are not finite.
///@{
std::string format_f32(float v);
std::string format_f64(double v);
///@}
/// Text helper shared by the printers: `s` double-quoted, with `\"` `\\` `\n` `\t` escaped and
/// other bytes below 0x20 or equal to 0x7f written as `\xNN`.
std::string quote_string(std::string_view s);

/// Names of the structured control-flow primitives of the IR.
///@{
inline constexpr std::string_view kIfPrim = "If";        ///< If(pred, \@then, \@else, args...)
inline constexpr std::string_view kWhilePrim = "While";  ///< While(\@cond, \@body, init...)
///@}

}  // namespace loom::ir
