// The CPU backend: host memory with 64-byte alignment (the same as Tensor storage), memcpy
// copies, the global thread pool, and the CPU kernel families.
#include <cstdlib>
#include <cstring>
#include <new>

#include "backends/backend.h"
#include "backends/cpu/cpu.h"

namespace loom::backend {

namespace {

class CpuBackend final : public Backend {
 public:
  CpuBackend() {
    register_cpu_math_kernels(kernels_);
    register_cpu_activation_kernels(kernels_);
    register_cpu_matmul_kernels(kernels_);
    register_cpu_conv_kernels(kernels_);
    register_cpu_pool_kernels(kernels_);
    register_cpu_norm_loss_kernels(kernels_);
    register_cpu_array_kernels(kernels_);
    register_cpu_reduce_kernels(kernels_);
    register_cpu_optimizer_kernels(kernels_);
    register_cpu_fused_kernels(kernels_);
  }

  Device device() const override { return Device::kCPU; }

  std::shared_ptr<Storage> allocate(std::size_t bytes) override {
    constexpr std::size_t kAlignment = Storage::kAlignment;
    const std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    void* p = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
    if (!p) throw std::bad_alloc();
    return std::make_shared<Storage>(p, bytes, Device::kCPU, [](void* q) { std::free(q); });
  }

  void copy_from_host(void* dst, const void* src, std::size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    if (bytes) std::memmove(dst, src, bytes);
  }
  void fill_zero(void* dst, std::size_t bytes) override {
    if (bytes) std::memset(dst, 0, bytes);
  }

  ExecutionContext& context() override { return context_; }

  std::string describe() const override {
    return "CPU: " + std::to_string(context_.pool().num_threads()) + " threads";
  }

 private:
  cpu::CpuContext context_;
};

}  // namespace

Backend& cpu_backend() {
  static CpuBackend* backend = new CpuBackend();  // never destroyed: kernels may run at exit
  return *backend;
}

}  // namespace loom::backend
