// Kernels and the kernel registry, keyed by (op, dtype, device).
//
// A kernel computes an op's outputs from its inputs. The caller has already run inference and
// allocated every output with its final shape and dtype (so the scheduler can plan memory once);
// the kernel only fills them. Tuple-valued inputs and outputs are passed flattened, in order.
//
//   void relu_f32(const KernelContext& k) {
//     const float* x = k.in(0).data<float>();
//     float* y = k.out(0).data<float>();
//     k.pool.parallel_for(k.in(0).numel(), 4096, [&](int64_t b, int64_t e) { ... });
//   }
//   registry.add("ReLU", DType::kFloat32, Device::kCPU, relu_f32);
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/ir/tensor.h"
#include "core/ir/value.h"

namespace loom::backend {

class ThreadPool;

enum class Device { kCPU, kCUDA };
std::string_view device_name(Device device);

struct KernelContext {
  const ir::Primitive& prim;      // attributes complete (defaults filled in)
  std::span<const Tensor> inputs;
  std::span<Tensor> outputs;      // allocated by the caller, shapes from inference
  ThreadPool& pool;

  const Tensor& in(std::size_t i) const { return inputs[i]; }
  Tensor& out(std::size_t i) const { return outputs[i]; }
  const ir::Value& attr(std::string_view name) const { return prim.attr(name); }
};

using Kernel = void (*)(const KernelContext&);

class KernelRegistry {
 public:
  // Every built-in kernel (filled on first use).
  static const KernelRegistry& global();
  // The same registry, for a room that registers kernels at run time (parallel::init adds the
  // communication kernels, so that backends/ does not depend on MPI). Add before compiling.
  static KernelRegistry& global_mutable();

  // The dtype key is the dtype of the op's input OpDef::kernel_dtype_from (usually the first),
  // or of its first output (-1, or an op without inputs). Throws InternalError on a duplicate.
  void add(std::string_view op, DType dtype, Device device, Kernel kernel);
  Kernel find(std::string_view op, DType dtype, Device device) const;  // null when absent
  // The dtypes that have a kernel for (op, device).
  std::vector<DType> dtypes(std::string_view op, Device device) const;

 private:
  struct Entry {
    std::string op;
    DType dtype;
    Device device;
    Kernel kernel;
  };
  std::vector<Entry> entries_;
};

// The CPU kernel families, one file each under backends/cpu/ (called by global()).
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
