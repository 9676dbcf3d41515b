// The CUDA backend's kernel registrations, checked without a GPU (CI has none): the five kernel
// families registered into a plain registry (registration only stores function pointers) must
// cover every (op, dtype) the CPU backend has, with the same declared facts, since the runtime
// plans memory and in-place reuse from those facts whichever backend runs the step. An op added
// to the CPU without a CUDA kernel fails here, before anyone reaches a GPU.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "backends/backend.h"
#include "backends/gpu/cuda.h"
#include "core/ir/error.h"

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

// The Float16 / BFloat16 kernels of mixed precision, which the CPU lacks (it computes those ops
// on Float32 kernels between Casts): the convolutions, the products and the elementwise ops
// between them, each with the facts of its op's Float32 kernel.
TEST(CudaRegistry, HalfKernelsOfMixedPrecisionDeclareTheFloat32KernelsFacts) {
  const char* const ops[] = {"Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "MatMul",
                             "BatchMatMul", "Add", "Sub", "Mul", "Maximum", "Minimum", "Neg",
                             "Square", "ReLU", "ReLU6", "ReluGrad", "BiasAdd"};
  for (const char* op : ops) {
    const KernelDef* f32 = cuda_registrations().find(op, DType::kFloat32);
    ASSERT_NE(f32, nullptr) << op;
    for (DType d : {DType::kFloat16, DType::kBFloat16}) {
      SCOPED_TRACE(std::string(op) + "/" + std::string(dtype_name(d)));
      const KernelDef* g = cuda_registrations().find(op, d);
      ASSERT_NE(g, nullptr);
      EXPECT_EQ(g->writes_every_output, f32->writes_every_output);
      EXPECT_EQ(g->in_place, f32->in_place);
      EXPECT_EQ(g->elementwise_in_place, f32->elementwise_in_place);
      EXPECT_EQ(g->prepare != nullptr, f32->prepare != nullptr);
      EXPECT_TRUE(g->recordable);
    }
  }
}

// cuBLAS, cuBLASLt and cuDNN are loaded at their first call (backends/gpu/libraries.h), not at
// start-up: registering the kernels above maps none of them. Their version functions need no GPU,
// so the loading itself is checked here: the versions are the headers' (loom was built against
// them), and a symbol a library lacks is one message naming it.
bool mapped(const std::string& soname_prefix) {
  std::ifstream maps("/proc/self/maps");
  std::stringstream all;
  all << maps.rdbuf();
  return all.str().find("/" + soname_prefix) != std::string::npos;
}

TEST(CudaLibraries, LoadedAtTheirFirstCallOnly) {
  cuda_registrations();
  EXPECT_FALSE(mapped("libcublas.so.")) << "cuBLAS mapped before any call";
  EXPECT_FALSE(mapped("libcublasLt.so."));
  EXPECT_FALSE(mapped("libcudnn.so."));
  EXPECT_EQ(cuda::cudnnGetVersion(), static_cast<std::size_t>(CUDNN_VERSION));
  EXPECT_TRUE(mapped("libcudnn.so."));
  EXPECT_FALSE(mapped("libcublasLt.so."));
  EXPECT_EQ(cuda::cublasLtGetVersion(), static_cast<std::size_t>(CUBLAS_VERSION));
  EXPECT_TRUE(mapped("libcublasLt.so."));
  EXPECT_STREQ(cuda::cublasGetStatusString(CUBLAS_STATUS_NOT_INITIALIZED),
               "the library was not initialized");
  EXPECT_TRUE(mapped("libcublas.so."));
}

TEST(CudaLibraries, AMissingFunctionIsNamed) {
  try {
    cuda::library_symbol(cuda::Library::kCudnn, "cudnnNoSuchFunction");
    FAIL() << "expected an error";
  } catch (const InternalError& e) {
    const std::string what = e.what();  // dlerror's text names the file it found
    const std::string soname = cuda::library_soname(cuda::Library::kCudnn);
    EXPECT_EQ(what.rfind("CUDA: " + soname + " has no function cudnnNoSuchFunction (", 0), 0u)
        << what;
    EXPECT_NE(what.find(soname + ": undefined symbol: cudnnNoSuchFunction): a version older than "
                        "the headers loom was built with?"),
              std::string::npos)
        << what;
  }
}

}  // namespace
}  // namespace loom::backend
