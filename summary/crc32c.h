// CRC32C (Castagnoli, reflected polynomial 0x82F63B78) and the masked form that TFRecord /
// TensorBoard event files store (shared/formats.md §3.1).
//
//   crc32c("123456789", 9) == 0xE3069283
//   masked_crc32c(data, n) == mask_crc(crc32c(data, n))
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace loom::summary {

// The CRC32C of n bytes; `crc` continues a previous value (crc32c(a+b) ==
// crc32c(b, crc32c(a))). SSE 4.2's crc32 instruction where the processor has it, else
// crc32c_portable.
std::uint32_t crc32c(const void* data, std::size_t n, std::uint32_t crc = 0);
// The same by a byte table, on any processor.
std::uint32_t crc32c_portable(const void* data, std::size_t n, std::uint32_t crc = 0);
inline std::uint32_t crc32c(std::string_view s) { return crc32c(s.data(), s.size()); }

// ((crc >> 15) | (crc << 17)) + 0xA282EAD8, mod 2^32.
constexpr std::uint32_t mask_crc(std::uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}
constexpr std::uint32_t unmask_crc(std::uint32_t masked) {
  const std::uint32_t rot = masked - 0xA282EAD8u;
  return (rot >> 17) | (rot << 15);
}
inline std::uint32_t masked_crc32c(const void* data, std::size_t n) {
  return mask_crc(crc32c(data, n));
}

}  // namespace loom::summary
