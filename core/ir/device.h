/// \file
/// Where a tensor's memory lives. A Device names a kind of memory, not an implementation: the
/// backends (backends/backend.h) say how to allocate, copy and compute there. Host memory is
/// kCPU; kCUDA is an NVIDIA GPU's memory (the CUDA backend's).
#pragma once

#include <cstdint>
#include <string_view>

namespace loom {

/// A kind of memory: kCPU (host memory) or kCUDA (an NVIDIA GPU's memory).
enum class Device : std::uint8_t { kCPU, kCUDA };

/// "CPU", "CUDA".
constexpr std::string_view device_name(Device device) {
  return device == Device::kCPU ? "CPU" : "CUDA";
}

}  // namespace loom
