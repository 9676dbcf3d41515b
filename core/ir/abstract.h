/// \file
/// Abstract values: what inference knows about a node's value without running it.
///
///   tensor    dtype + shape; a dim of -1 is unknown; the rank itself may be unknown
///   scalar    dtype, and maybe its value
///   string    maybe its value
///   type      a DType used as a value (Cast's target)
///   tuple     an abstract per element
///   func      a graph or primitive used as a value
///   none
///
/// Text form (shared with the .ir printer and parser):
///   <Tensor[Float32], (2, -1)>   <Tensor[Float32]> (unknown rank)   <Int64>   <Int64, value=3>
///   <String>   <String, value="a">   <Type>   <Tuple[<Int64>, <Tensor[Bool], ()>]>   <Func>
///   <None>
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
using AbstractPtr = std::shared_ptr<const Abstract>;

inline constexpr std::int64_t kUnknownDim = -1;

class Abstract {
 public:
  enum class Kind { kTensor, kScalar, kString, kType, kTuple, kFunc, kNone };

  static AbstractPtr tensor(DType dtype, Shape shape);
  static AbstractPtr tensor_unranked(DType dtype);
  static AbstractPtr scalar(DType dtype, std::optional<Value> value = std::nullopt);
  static AbstractPtr string(std::optional<std::string> value = std::nullopt);
  static AbstractPtr type();
  static AbstractPtr tuple(std::vector<AbstractPtr> elements);
  static AbstractPtr func();
  static AbstractPtr none();
  /// The abstract of a constant: tensors give their dtype and shape, scalars and strings keep
  /// their value, graphs and primitives give func.
  static AbstractPtr of_value(const Value& value);

  Kind kind() const { return kind_; }
  bool is_tensor() const { return kind_ == Kind::kTensor; }
  bool is_tuple() const { return kind_ == Kind::kTuple; }

  DType dtype() const { return dtype_; }  // tensor and scalar
  bool has_rank() const { return shape_.has_value(); }
  /// Tensor shape; throws InternalError when the rank is unknown.
  const Shape& shape() const;
  bool shape_known() const;  ///< rank known and no dim is -1
  const std::optional<Value>& value() const { return value_; }  // scalar and string
  const std::vector<AbstractPtr>& elements() const { return elements_; }  // tuple

  /// Exact equality (unknown dims equal only unknown dims).
  bool equals(const Abstract& other) const;
  /// True when a value described by `other` may be described by this one: same kinds and dtypes,
  /// an unknown dim or rank here accepts any, a known scalar value must agree.
  bool accepts(const Abstract& other) const;

  std::string to_string() const;

 private:
  Kind kind_ = Kind::kNone;
  DType dtype_ = DType::kFloat32;
  std::optional<Shape> shape_;
  std::optional<Value> value_;
  std::vector<AbstractPtr> elements_;
};


}  // namespace loom::ir
