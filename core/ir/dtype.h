/// \file
/// Element types of tensors and scalars, named as MindSpore names them (Float32, Int64...).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace loom {

/// The element type of a tensor or scalar.
enum class DType : std::uint8_t {
  kFloat32,   ///< Float32: IEEE single precision.
  kFloat64,   ///< Float64: IEEE double precision.
  kFloat16,   ///< Float16: IEEE half precision (stored as 16-bit patterns).
  kBFloat16,  ///< BFloat16: bfloat16 (stored as 16-bit patterns).
  kInt32,     ///< Int32: signed 32-bit integer.
  kInt64,     ///< Int64: signed 64-bit integer.
  kUInt8,     ///< UInt8: unsigned 8-bit integer.
  kBool,      ///< Bool: one byte, 0 or 1.
};

/// Every DType, in declaration order.
inline constexpr DType kAllDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16,
                                       DType::kBFloat16, DType::kInt32,  DType::kInt64,
                                       DType::kUInt8,   DType::kBool};

/// Bytes per element.
std::size_t dtype_size(DType dtype);

/// MindSpore's spelling: "Float32", "BFloat16", "Bool"...
std::string_view dtype_name(DType dtype);

/// Inverse of dtype_name; nullopt for an unknown name.
std::optional<DType> dtype_from_name(std::string_view name);

/// True for Float32, Float64, Float16 and BFloat16.
bool is_floating(DType dtype);
/// True for Int32, Int64 and UInt8 (not Bool).
bool is_integral(DType dtype);

/// IEEE half and bfloat16 conversions, the 16-bit values as raw bit patterns: float to 16 bits
/// rounds to nearest even (NaN stays NaN), 16 bits to float is exact.
///@{
std::uint16_t float_to_half(float value);
float half_to_float(std::uint16_t bits);
std::uint16_t float_to_bfloat16(float value);
float bfloat16_to_float(std::uint16_t bits);
///@}

}  // namespace loom
