/// \file
/// Abstract values: what inference knows about a node's value without running it.
///
/// - tensor: dtype + shape; a dim of -1 is unknown; the rank itself may be unknown
/// - scalar: dtype, and maybe its value
/// - string: maybe its value
/// - type: a DType used as a value (Cast's target)
/// - tuple: an abstract per element
/// - func: a graph or primitive used as a value
/// - none
///
/// Text form (shared with the .ir printer and parser):
/// ```
/// <Tensor[Float32], (2, -1)>   <Tensor[Float32]> (unknown rank)   <Int64>   <Int64, value=3>
/// <String>   <String, value="a">   <Type>   <Tuple[<Int64>, <Tensor[Bool], ()>]>   <Func>
/// <None>
/// ```
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/ir/dtype.h"
#include "core/ir/tensor.h"
#include "core/ir/value.h"

namespace loom::ir {

class Abstract;
/// Abstracts are immutable and shared.
using AbstractPtr = std::shared_ptr<const Abstract>;

/// A tensor dim whose size is unknown.
inline constexpr std::int64_t kUnknownDim = -1;

/// What inference knows about a value without running it: its kind and, by kind, its dtype,
/// shape, value or elements. Made by the static factory functions; immutable once made.
class Abstract {
 public:
  /// The kind of value: kTensor, kScalar, kString, kType (a DType used as a value), kTuple,
  /// kFunc (a graph or primitive used as a value), kNone.
  enum class Kind { kTensor, kScalar, kString, kType, kTuple, kFunc, kNone };

  /// A tensor of known rank; a dim of kUnknownDim (-1) is unknown. Throws ValueError for a dim
  /// below -1.
  static AbstractPtr tensor(DType dtype, Shape shape);
  /// A tensor of unknown rank.
  static AbstractPtr tensor_unranked(DType dtype);
  /// A scalar of `dtype` (Bool, Int32, Int64, Float32 or Float64), with its value when known.
  /// Throws TypeError for another dtype, or for a value that is not a scalar of `dtype`.
  static AbstractPtr scalar(DType dtype, std::optional<Value> value = std::nullopt);
  /// A string, with its value when known.
  static AbstractPtr string(std::optional<std::string> value = std::nullopt);
  /// A DType used as a value.
  static AbstractPtr type();
  /// A tuple with one abstract per element; throws ValueError for a null element.
  static AbstractPtr tuple(std::vector<AbstractPtr> elements);
  /// A graph or primitive used as a value.
  static AbstractPtr func();
  /// None.
  static AbstractPtr none();
  /// The abstract of a constant: tensors give their dtype and shape, scalars and strings keep
  /// their value, graphs and primitives give func.
  static AbstractPtr of_value(const Value& value);

  /// The kind of value.
  Kind kind() const { return kind_; }
  /// Kind tests: true when kind() is the kind the function names (kTensor, kTuple).
  ///@{
  bool is_tensor() const { return kind_ == Kind::kTensor; }
  bool is_tuple() const { return kind_ == Kind::kTuple; }
  ///@}

  DType dtype() const { return dtype_; }  ///< The dtype of a tensor or scalar.
  /// True for a tensor of known rank.
  bool has_rank() const { return shape_.has_value(); }
  /// Tensor shape; throws InternalError when the rank is unknown.
  const Shape& shape() const;
  /// True for a tensor whose rank is known and no dim is -1.
  bool shape_known() const;
  /// The value of a scalar or string when known; nullopt otherwise.
  const std::optional<Value>& value() const { return value_; }
  /// The element abstracts of a tuple (empty for other kinds).
  const std::vector<AbstractPtr>& elements() const { return elements_; }

  /// Exact equality (unknown dims equal only unknown dims).
  bool equals(const Abstract& other) const;
  /// True when a value described by `other` may be described by this one: same kinds and dtypes,
  /// an unknown dim or rank here accepts any, a known scalar value must agree.
  bool accepts(const Abstract& other) const;

  /// The text form, e.g. `<Tensor[Float32], (2, 3)>`.
  std::string to_string() const;

 private:
  Kind kind_ = Kind::kNone;
  DType dtype_ = DType::kFloat32;
  std::optional<Shape> shape_;
  std::optional<Value> value_;
  std::vector<AbstractPtr> elements_;
};


}  // namespace loom::ir
