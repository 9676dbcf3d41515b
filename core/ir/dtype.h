/// \file
/// Element types of tensors and scalars, named as MindSpore names them (Float32, Int64...).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace loom {

enum class DType : std::uint8_t {
  kFloat32,
  kFloat64,
  kFloat16,
  kBFloat16,
  kInt32,
  kInt64,
  kUInt8,
  kBool,
};

inline constexpr DType kAllDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16,
                                       DType::kBFloat16, DType::kInt32,  DType::kInt64,
                                       DType::kUInt8,   DType::kBool};

/// Bytes per element.
std::size_t dtype_size(DType dtype);

/// MindSpore's spelling: "Float32", "BFloat16", "Bool"...
std::string_view dtype_name(DType dtype);

/// Inverse of dtype_name; nullopt for an unknown name.
std::optional<DType> dtype_from_name(std::string_view name);

bool is_floating(DType dtype);
bool is_integral(DType dtype);  ///< Int32, Int64, UInt8 (not Bool)

/// IEEE half and bfloat16 conversions (round to nearest even).
std::uint16_t float_to_half(float value);
float half_to_float(std::uint16_t bits);
std::uint16_t float_to_bfloat16(float value);
float bfloat16_to_float(std::uint16_t bits);

}  // namespace loom
