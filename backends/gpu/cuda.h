// The CUDA backend's side of the kernel interface: its execution context (one stream and the
// library handles every CUDA kernel launches on), error checks, launch helpers, and the kernel
// families it registers, one file each (backends/gpu/*.cu).
//
//   void relu_f32(const KernelContext& k) {
//     const CudaContext& c = cuda::context(k);
//     relu_kernel<<<cuda::blocks(n), cuda::kThreads, 0, c.stream>>>(x, y, n);
//     LOOM_CUDA_CHECK(cudaGetLastError());
//   }
//
// Every kernel launches asynchronously on c.stream and never synchronizes: the runtime's step is a
// sequence of launches on one stream (and, replayed, one CUDA graph). A kernel never allocates:
// scratch memory is its planned workspace (Prepared::workspace_bytes), cuBLAS's and cuDNN's too.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/gpu/libraries.h"  // cuBLAS, cuBLASLt and cuDNN, loaded at their first call
#include "backends/kernel.h"

namespace loom::backend::cuda {

// What a CUDA kernel receives. One per backend (one device): the stream the step runs on and the
// library handles bound to it.
class CudaContext final : public ExecutionContext {
 public:
  Device device() const override { return Device::kCUDA; }

  int device_index = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  cublasLtHandle_t cublas_lt = nullptr;
  cudnnHandle_t cudnn = nullptr;
  cudaDeviceProp props{};
  // Deterministic algorithms only (cuDNN's deterministic convolution algorithms, fixed-order
  // reductions everywhere): set from the context's deterministic mode when a step is prepared.
  bool deterministic() const;
};

inline const CudaContext& context(const KernelContext& k) {
  return static_cast<const CudaContext&>(k.exec);
}
inline const CudaContext& context(const PrepareContext& c) {
  return static_cast<const CudaContext&>(c.exec);
}

// Throws InternalError naming the call, the file and line and CUDA's / cuBLAS's / cuDNN's message.
[[noreturn]] void fail(const char* what, const std::string& message, const char* file, int line);
#define LOOM_CUDA_CHECK(call)                                                              \
  do {                                                                                     \
    const cudaError_t loom_e_ = (call);                                                    \
    if (loom_e_ != cudaSuccess)                                                            \
      ::loom::backend::cuda::fail(#call, cudaGetErrorString(loom_e_), __FILE__, __LINE__); \
  } while (0)
#define LOOM_CUBLAS_CHECK(call)                                                              \
  do {                                                                                       \
    const cublasStatus_t loom_s_ = (call);                                                   \
    if (loom_s_ != CUBLAS_STATUS_SUCCESS)                                                    \
      ::loom::backend::cuda::fail(#call, cublasGetStatusString(loom_s_), __FILE__, __LINE__); \
  } while (0)
#define LOOM_CUDNN_CHECK(call)                                                              \
  do {                                                                                      \
    const cudnnStatus_t loom_s_ = (call);                                                   \
    if (loom_s_ != CUDNN_STATUS_SUCCESS)                                                    \
      ::loom::backend::cuda::fail(#call, cudnnGetErrorString(loom_s_), __FILE__, __LINE__); \
  } while (0)

// Launch geometry for elementwise work: 256 threads a block, at most 65,535 × 4 blocks (grid-
// stride loops cover the rest).
constexpr int kThreads = 256;
inline unsigned blocks(std::int64_t n) {
  const std::int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 262140 ? 262140 : b));
}

// Whether prepare() times a library's candidate algorithms, by the setting's value
// (LOOM_CUDNN_SEARCH for the convolutions, LOOM_CUBLASLT_SEARCH for the matrix products): unset
// or empty, outside deterministic mode (timings vary between processes, and so would the choice
// and the bits); "0", never; anything else, in deterministic mode too.
inline bool timed_search_on(const char* setting, bool deterministic) {
  if (setting == nullptr || *setting == '\0') return !deterministic;
  return std::string(setting) != "0";
}

// The device memory of one algorithm search (the prepare-time timing of cuDNN's and cuBLASLt's
// candidates): cudaMalloc'd on demand; freed on every path once the stream's work (the timed
// runs) has finished.
class SearchBuffers {
 public:
  explicit SearchBuffers(cudaStream_t stream) : stream_(stream) {}
  SearchBuffers(const SearchBuffers&) = delete;
  SearchBuffers& operator=(const SearchBuffers&) = delete;
  ~SearchBuffers() {
    if (owned_.empty()) return;
    cudaStreamSynchronize(stream_);
    for (void* q : owned_) cudaFree(q);
  }
  // `bytes` (at least 1) of device memory; nullptr when the allocation fails (the error cleared).
  void* get(std::size_t bytes) {
    void* q = nullptr;
    if (cudaMalloc(&q, std::max<std::size_t>(bytes, 1)) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    owned_.push_back(q);
    return q;
  }

 private:
  cudaStream_t stream_;
  std::vector<void*> owned_;
};

// Makes `device` current for a scope (a search's cudaMalloc / cudaFree), then restores the
// previous one; ok() is false where CUDA refused.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    ok_ = cudaGetDevice(&previous_) == cudaSuccess &&
          (previous_ == device || cudaSetDevice(device) == cudaSuccess);
    if (!ok_) cudaGetLastError();
    restore_ = ok_ && previous_ != device;
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  ~DeviceScope() {
    if (restore_) cudaSetDevice(previous_);
  }
  bool ok() const { return ok_; }

 private:
  int previous_ = 0;
  bool ok_ = false, restore_ = false;
};

// The kernel families (backends/gpu/*.cu), registered by the CUDA backend.
void register_elementwise_kernels(KernelRegistry& r);  // elementwise, fused chains, array ops
void register_reduce_kernels(KernelRegistry& r);       // reductions, losses, bias gradients
void register_optimizer_kernels(KernelRegistry& r);    // ApplyMomentum, SGD, Adam...
void register_blas_kernels(KernelRegistry& r);         // MatMul, BatchMatMul, MatMulBiasAct
void register_dnn_kernels(KernelRegistry& r);          // convolutions, pooling, BatchNorm

}  // namespace loom::backend::cuda
