// The CPU backend's side of the kernel interface: its execution context (the thread pool every
// CPU kernel splits its work over) and the kernel families it registers, one file each.
//
//   void relu_f32(const KernelContext& k) {
//     cpu::pool(k).parallel_for(n, cpu::kElementwiseGrain, [&](int64_t b, int64_t e) { ... });
//   }
#pragma once

#include "backends/kernel.h"
#include "backends/thread_pool.h"

namespace loom::backend::cpu {

// `pool` null: the global pool (ThreadPool::global(), what the CPU backend gives its kernels); a
// test passes a pool of its own to run a kernel with another thread count.
class CpuContext final : public ExecutionContext {
 public:
  explicit CpuContext(ThreadPool* pool = nullptr) : pool_(pool) {}
  Device device() const override { return Device::kCPU; }
  ThreadPool& pool() const { return pool_ ? *pool_ : ThreadPool::global(); }

 private:
  ThreadPool* pool_;
};

// The pool of a CPU kernel's context.
inline ThreadPool& pool(const KernelContext& k) {
  return static_cast<const CpuContext&>(k.exec).pool();
}
inline ThreadPool& pool(const PrepareContext& c) {
  return static_cast<const CpuContext&>(c.exec).pool();
}

}  // namespace loom::backend::cpu

namespace loom::backend {

// The CPU kernel families (backends/cpu/*_kernels.cc), registered by the CPU backend.
void register_cpu_math_kernels(KernelRegistry& r);
void register_cpu_activation_kernels(KernelRegistry& r);
void register_cpu_matmul_kernels(KernelRegistry& r);
void register_cpu_conv_kernels(KernelRegistry& r);
void register_cpu_pool_kernels(KernelRegistry& r);
void register_cpu_norm_loss_kernels(KernelRegistry& r);
void register_cpu_array_kernels(KernelRegistry& r);
void register_cpu_reduce_kernels(KernelRegistry& r);
void register_cpu_optimizer_kernels(KernelRegistry& r);
void register_cpu_fused_kernels(KernelRegistry& r);

}  // namespace loom::backend
