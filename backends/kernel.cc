// The kernel registry.
#include "backends/kernel.h"

#include "core/ir/error.h"

namespace loom::backend {

std::string_view device_name(Device device) {
  return device == Device::kCPU ? "CPU" : "CUDA";
}

const KernelRegistry& KernelRegistry::global() { return global_mutable(); }

KernelRegistry& KernelRegistry::global_mutable() {
  static KernelRegistry* registry = [] {
    auto* r = new KernelRegistry();
    register_cpu_math_kernels(*r);
    register_cpu_activation_kernels(*r);
    register_cpu_matmul_kernels(*r);
    register_cpu_conv_kernels(*r);
    register_cpu_pool_kernels(*r);
    register_cpu_norm_loss_kernels(*r);
    register_cpu_array_kernels(*r);
    register_cpu_reduce_kernels(*r);
    register_cpu_optimizer_kernels(*r);
    register_cpu_fused_kernels(*r);
    return r;
  }();
  return *registry;
}

void KernelRegistry::add(std::string_view op, DType dtype, Device device, Kernel kernel) {
  if (find(op, dtype, device)) {
    throw InternalError("kernels: expected one kernel per (op, dtype, device), got a second for " +
                        std::string(op) + " " + std::string(dtype_name(dtype)) + " " +
                        std::string(device_name(device)));
  }
  entries_.push_back({std::string(op), dtype, device, kernel});
}

Kernel KernelRegistry::find(std::string_view op, DType dtype, Device device) const {
  for (const Entry& e : entries_) {
    if (e.dtype == dtype && e.device == device && e.op == op) return e.kernel;
  }
  return nullptr;
}

std::vector<DType> KernelRegistry::dtypes(std::string_view op, Device device) const {
  std::vector<DType> out;
  for (const Entry& e : entries_) {
    if (e.device == device && e.op == op) out.push_back(e.dtype);
  }
  return out;
}

}  // namespace loom::backend
