// Float16 and BFloat16 in the library-backed CUDA kernels (blas.cu, dnn.cu): the element types
// that stand for them in a kernel template, the type a kernel computes in, and the conversions.
// A Float16 / BFloat16 tensor holds 16-bit patterns (core/ir/tensor.h); CUDA's __half and
// __nv_bfloat16 are those patterns, so a tensor's raw_data() is read as either. Loom's own
// arithmetic on them widens each element to Float32, computes in Float32 and rounds the result
// to the nearest (even) 16-bit value once, as the CPU's Float32 fallback for these dtypes does
// (docs/design.md, "Mixed precision").
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "backends/kernel.h"

namespace loom::backend::cuda {

// Whether the backend registers its Float16 / BFloat16 convolutions and matrix products (the
// tensor-core kernels of mixed precision): yes unless LOOM_CUDA_HALF_KERNELS=0, which leaves
// those ops to the runtime's Float32 fallback (Float32 kernels on widened inputs, the results
// rounded: the same numerics up to the order of the sums, without the tensor cores).
inline bool half_kernels_enabled() {
  const char* v = std::getenv("LOOM_CUDA_HALF_KERNELS");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

// Whether S is a 16-bit float storage type.
template <typename S>
inline constexpr bool kHalfStorage =
    std::is_same_v<S, __half> || std::is_same_v<S, __nv_bfloat16>;

// The type a kernel computes in for elements of type S: Float32 for the 16-bit floats, else S.
template <typename S>
using ComputeOf = std::conditional_t<kHalfStorage<S>, float, S>;

// The element type of the same size for plain copies (zero is the all-zero pattern for both).
template <typename S>
using BitsOf = std::conditional_t<kHalfStorage<S>, std::uint16_t, S>;

// The DType that S stands for.
template <typename S>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<S, __half>) {
    return DType::kFloat16;
  } else if constexpr (std::is_same_v<S, __nv_bfloat16>) {
    return DType::kBFloat16;
  } else {
    return DTypeOf<S>::value;
  }
}

template <typename S>
__device__ __forceinline__ ComputeOf<S> widen(S v) {
  if constexpr (std::is_same_v<S, __half>) {
    return __half2float(v);
  } else if constexpr (std::is_same_v<S, __nv_bfloat16>) {
    return __bfloat162float(v);
  } else {
    return v;
  }
}

template <typename S>
__device__ __forceinline__ S narrow(ComputeOf<S> v) {
  if constexpr (std::is_same_v<S, __half>) {
    return __float2half_rn(v);
  } else if constexpr (std::is_same_v<S, __nv_bfloat16>) {
    return __float2bfloat16_rn(v);
  } else {
    return v;
  }
}

// A kernel's input and output elements as S (the tensor's dtype is S's: the registry keys the
// kernel by it).
template <typename S>
const S* elements(const Tensor& t) {
  return static_cast<const S*>(t.raw_data());
}
template <typename S>
S* mutable_elements(Tensor& t) {
  return static_cast<S*>(t.raw_data());
}

}  // namespace loom::backend::cuda
