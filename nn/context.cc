// nn/context.h: the process-wide execution mode and device.
#include "nn/context.h"

#include <atomic>
#include <cstring>
#include <string>

#include "backends/backend.h"
#include "core/ir/error.h"

namespace loom::nn {
namespace {

std::atomic<ExecMode>& mode() {
  static std::atomic<ExecMode> m{ExecMode::kGraph};
  return m;
}

std::atomic<Device>& device() {
  static std::atomic<Device> d{Device::kCPU};
  return d;
}

}  // namespace

void set_context_mode(ExecMode m) { mode().store(m); }
ExecMode context_mode() { return mode().load(); }

void set_context_device(Device d) {
  backend::get_backend(d);  // ValueError when there is none
  device().store(d);
}
Device context_device() { return device().load(); }
backend::Backend& context_backend() { return backend::get_backend(context_device()); }

void copy_into(Tensor& dst, const Tensor& src) {
  if (dst.dtype() != src.dtype() || dst.shape() != src.shape()) {
    throw ValueError("copy_into: expected a " + std::string(dtype_name(dst.dtype())) + " " +
                     shape_to_string(dst.shape()) + " tensor, got " + src.describe());
  }
  const std::size_t n = dst.nbytes();
  if (n == 0 || (dst.device() == src.device() && dst.raw_data() == src.raw_data())) return;
  if (dst.is_host() && src.is_host()) {
    std::memcpy(dst.raw_data(), src.raw_data(), n);
  } else if (dst.is_host()) {
    backend::get_backend(src.device()).copy_to_host(dst.raw_data(), src.raw_data(), n);
  } else if (src.is_host()) {
    backend::get_backend(dst.device()).copy_from_host(dst.raw_data(), src.raw_data(), n);
  } else if (src.device() == dst.device()) {
    backend::get_backend(dst.device()).copy(dst.raw_data(), src.raw_data(), n);
  } else {  // between two devices: through the host
    const Tensor host = backend::to_host(src);
    backend::get_backend(dst.device()).copy_from_host(dst.raw_data(), host.raw_data(), n);
  }
}

Device device_from_target(const char* target) {
  const std::string t = target;
  if (t == "CPU" || t == "cpu") return Device::kCPU;
  if (t == "GPU" || t == "gpu" || t == "CUDA" || t == "cuda") return Device::kCUDA;
  throw ValueError("device_target: expected CPU or GPU, got '" + t + "'");
}

}  // namespace loom::nn
