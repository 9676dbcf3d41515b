// cuBLAS, cuBLASLt and cuDNN, loaded when the CUDA backend first calls them (dlopen), not when
// loom starts: a process that never uses the GPU does not map them. Loading cuBLAS alone costs a
// process about 150 MiB of resident memory (its relocations and static initialisers), which every
// CPU-only `loom train`, `loom run` and test paid while they were linked (bench/README.md, "CPU
// speed, measured fairly").
//
// Each library function the backend calls is declared below as an object of the same name in
// namespace loom::backend::cuda. Inside that namespace an unqualified call such as
// `cudnnCreate(&h)` finds the object before the library's global declaration, so the call sites
// read as the libraries' documentation writes them; the object's type comes from the library's own
// header (decltype), so a wrong signature does not compile. The first call resolves the symbol
// (dlopen of the library by its soname, then dlsym) and keeps the pointer; a library or symbol that
// cannot be found throws InternalError naming it and the loader's message.
//
// A function the backend starts to use is added to the list of its library below: a call site
// that is not in the list fails to link (the libraries are not linked).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cudnn.h>

#include <atomic>
#include <cstdint>

namespace loom::backend::cuda {

enum class Library { kCublas, kCublasLt, kCudnn };

// The library's address of `symbol`, loading the library at the first call (thread-safe).
// Throws InternalError when the library or the symbol cannot be found.
void* library_symbol(Library library, const char* symbol);

// The file name the library is loaded by ("libcudnn.so.9": the major version of the headers loom
// was built with).
const char* library_soname(Library library);

template <typename Signature>
class LibraryFunction;

template <typename R, typename... Args>
class LibraryFunction<R(Args...)> {
 public:
  constexpr LibraryFunction(Library library, const char* name) : library_(library), name_(name) {}
  R operator()(Args... args) const {
    void* f = fn_.load(std::memory_order_acquire);
    if (f == nullptr) {
      f = library_symbol(library_, name_);
      fn_.store(f, std::memory_order_release);
    }
    return reinterpret_cast<R (*)(Args...)>(f)(args...);
  }

 private:
  Library library_;
  const char* name_;
  mutable std::atomic<void*> fn_{nullptr};
};

// The functions, per library. The names go through the headers' macros (cublasCreate is
// cublasCreate_v2), so the symbol looked up is the one a linker would have bound.
#define LOOM_CUBLAS_FUNCTIONS(X) \
  X(cublasCreate)                \
  X(cublasSetStream)             \
  X(cublasSetMathMode)           \
  X(cublasGetStatusString)
#define LOOM_CUBLASLT_FUNCTIONS(X)         \
  X(cublasLtCreate)                        \
  X(cublasLtGetVersion)                    \
  X(cublasLtMatmul)                        \
  X(cublasLtMatmulAlgoGetHeuristic)        \
  X(cublasLtMatmulDescSetAttribute)        \
  X(cublasLtMatrixLayoutSetAttribute)      \
  X(cublasLtMatmulPreferenceSetAttribute)  \
  X(cublasLtMatmulDescInit_internal)       \
  X(cublasLtMatrixLayoutInit_internal)     \
  X(cublasLtMatmulPreferenceInit_internal)
#define LOOM_CUDNN_FUNCTIONS(X)                    \
  X(cudnnGetVersion)                               \
  X(cudnnGetErrorString)                           \
  X(cudnnCreate)                                   \
  X(cudnnSetStream)                                \
  X(cudnnCreateTensorDescriptor)                   \
  X(cudnnSetTensor4dDescriptor)                    \
  X(cudnnDestroyTensorDescriptor)                  \
  X(cudnnCreateFilterDescriptor)                   \
  X(cudnnSetFilter4dDescriptor)                    \
  X(cudnnDestroyFilterDescriptor)                  \
  X(cudnnCreateConvolutionDescriptor)              \
  X(cudnnSetConvolution2dDescriptor)               \
  X(cudnnSetConvolutionMathType)                   \
  X(cudnnSetConvolutionGroupCount)                 \
  X(cudnnDestroyConvolutionDescriptor)             \
  X(cudnnGetConvolution2dForwardOutputDim)         \
  X(cudnnGetConvolutionForwardAlgorithm_v7)        \
  X(cudnnGetConvolutionBackwardDataAlgorithm_v7)   \
  X(cudnnGetConvolutionBackwardFilterAlgorithm_v7) \
  X(cudnnFindConvolutionForwardAlgorithmEx)        \
  X(cudnnFindConvolutionBackwardDataAlgorithmEx)   \
  X(cudnnFindConvolutionBackwardFilterAlgorithmEx) \
  X(cudnnGetConvolutionForwardWorkspaceSize)       \
  X(cudnnGetConvolutionBackwardDataWorkspaceSize)  \
  X(cudnnGetConvolutionBackwardFilterWorkspaceSize) \
  X(cudnnConvolutionForward)                       \
  X(cudnnConvolutionBackwardData)                  \
  X(cudnnConvolutionBackwardFilter)

#define LOOM_CUDA_LIBRARY_STRING_(name) #name
#define LOOM_CUDA_LIBRARY_STRING(name) LOOM_CUDA_LIBRARY_STRING_(name)
#define LOOM_CUDA_LIBRARY_FUNCTION(library, name)            \
  inline const LibraryFunction<decltype(::name)> name{library, \
                                                      LOOM_CUDA_LIBRARY_STRING(name)};
#define LOOM_CUBLAS_FUNCTION(name) LOOM_CUDA_LIBRARY_FUNCTION(Library::kCublas, name)
#define LOOM_CUBLASLT_FUNCTION(name) LOOM_CUDA_LIBRARY_FUNCTION(Library::kCublasLt, name)
#define LOOM_CUDNN_FUNCTION(name) LOOM_CUDA_LIBRARY_FUNCTION(Library::kCudnn, name)
LOOM_CUBLAS_FUNCTIONS(LOOM_CUBLAS_FUNCTION)
LOOM_CUBLASLT_FUNCTIONS(LOOM_CUBLASLT_FUNCTION)
LOOM_CUDNN_FUNCTIONS(LOOM_CUDNN_FUNCTION)
#undef LOOM_CUBLAS_FUNCTION
#undef LOOM_CUBLASLT_FUNCTION
#undef LOOM_CUDNN_FUNCTION

// cublasLt.h's static inline initialisers call the *_internal functions by their global names;
// these objects call the ones above instead (objects, like those: argument-dependent lookup
// would find the header's functions beside functions of the same name).
inline constexpr struct {
  cublasStatus_t operator()(cublasLtMatmulDesc_t desc, cublasComputeType_t compute,
                            cudaDataType_t scale) const {
    return cublasLtMatmulDescInit_internal(desc, sizeof(*desc), compute, scale);
  }
} cublasLtMatmulDescInit{};
inline constexpr struct {
  cublasStatus_t operator()(cublasLtMatrixLayout_t layout, cudaDataType type, std::uint64_t rows,
                            std::uint64_t cols, std::int64_t ld) const {
    return cublasLtMatrixLayoutInit_internal(layout, sizeof(*layout), type, rows, cols, ld);
  }
} cublasLtMatrixLayoutInit{};
inline constexpr struct {
  cublasStatus_t operator()(cublasLtMatmulPreference_t pref) const {
    return cublasLtMatmulPreferenceInit_internal(pref, sizeof(*pref));
  }
} cublasLtMatmulPreferenceInit{};

}  // namespace loom::backend::cuda
