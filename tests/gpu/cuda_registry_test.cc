// The CUDA backend's kernel registrations, checked without a GPU (CI has none): the five kernel
// families registered into a plain registry (registration only stores function pointers) must
// cover every (op, dtype) the CPU backend has, with the same declared facts, since the runtime
// plans memory and in-place reuse from those facts whichever backend runs the step. An op added
// to the CPU without a CUDA kernel fails here, before anyone reaches a GPU.
#include <gtest/gtest.h>

#include <string>

#include "backends/backend.h"
#include "backends/gpu/cuda.h"

namespace loom::backend {
namespace {

const KernelRegistry& cuda_registrations() {
  static const KernelRegistry* r = [] {
    auto* reg = new KernelRegistry;
    cuda::register_elementwise_kernels(*reg);
    cuda::register_reduce_kernels(*reg);
    cuda::register_optimizer_kernels(*reg);
    cuda::register_blas_kernels(*reg);
    cuda::register_dnn_kernels(*reg);
    return reg;
  }();
  return *r;
}

std::string key(const KernelDef& k) { return k.op + "/" + std::string(dtype_name(k.dtype)); }

TEST(CudaRegistry, EveryCpuKernelHasACudaKernel) {
  std::string missing;
  for (const KernelDef* k : cpu_backend().kernels().all()) {
    if (k->op.rfind("AllReduce", 0) == 0) continue;  // parallel/'s, registered per device
    if (cuda_registrations().find(k->op, k->dtype) == nullptr) missing += " " + key(*k);
  }
  EXPECT_TRUE(missing.empty()) << "CPU kernels without a CUDA kernel:" << missing;
}

TEST(CudaRegistry, TheCudaKernelsDeclareTheCpusFacts) {
  for (const KernelDef* c : cpu_backend().kernels().all()) {
    const KernelDef* g = cuda_registrations().find(c->op, c->dtype);
    if (g == nullptr) continue;  // reported above
    SCOPED_TRACE(key(*c));
    EXPECT_EQ(g->writes_every_output, c->writes_every_output);
    EXPECT_EQ(g->in_place, c->in_place);
    EXPECT_EQ(g->elementwise_in_place, c->elementwise_in_place);
    EXPECT_TRUE(g->recordable);  // every CUDA kernel can be part of a CUDA graph
  }
}

}  // namespace
}  // namespace loom::backend
