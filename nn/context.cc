// nn/context.h: the process-wide execution mode and device.
#include "nn/context.h"

#include <atomic>
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

Device device_from_target(const char* target) {
  const std::string t = target;
  if (t == "CPU" || t == "cpu") return Device::kCPU;
  if (t == "GPU" || t == "gpu" || t == "CUDA" || t == "cuda") return Device::kCUDA;
  throw ValueError("device_target: expected CPU or GPU, got '" + t + "'");
}

}  // namespace loom::nn
