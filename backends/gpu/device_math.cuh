// Scalar arithmetic for loom's own CUDA kernels (elementwise.cu, reduce.cu, optimizer.cu), one
// rounding per operation.
//
// nvcc contracts a * b + c into one fused multiply-add by default. That changes the last bit of
// a result, and, worse, makes the same formula round differently depending on what the compiler
// inlined next to it: FusedElementwise would stop agreeing with the unfused kernels whose
// functors it composes. The floating add, sub, mul, div and sqrt here are CUDA's _rn intrinsics,
// which are never contracted, so every formula rounds as it is written, as the CPU kernels'
// source reads. Integer add, sub and mul wrap (through the unsigned type, so device code has no
// signed overflow), as the CPU kernels' integer arithmetic does in practice.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <type_traits>

namespace loom::backend::cuda::dm {

template <typename T>
inline constexpr bool kFloating = std::is_floating_point_v<T>;

template <typename T>
__device__ __forceinline__ T add(T a, T b) {
  if constexpr (std::is_same_v<T, float>) {
    return __fadd_rn(a, b);
  } else if constexpr (std::is_same_v<T, double>) {
    return __dadd_rn(a, b);
  } else {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  }
}

template <typename T>
__device__ __forceinline__ T sub(T a, T b) {
  if constexpr (std::is_same_v<T, float>) {
    return __fsub_rn(a, b);
  } else if constexpr (std::is_same_v<T, double>) {
    return __dsub_rn(a, b);
  } else {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) - static_cast<U>(b)));
  }
}

template <typename T>
__device__ __forceinline__ T mul(T a, T b) {
  if constexpr (std::is_same_v<T, float>) {
    return __fmul_rn(a, b);
  } else if constexpr (std::is_same_v<T, double>) {
    return __dmul_rn(a, b);
  } else {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  }
}

template <typename T>
__device__ __forceinline__ T neg(T a) {
  if constexpr (kFloating<T>) {
    return -a;
  } else {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(U(0) - static_cast<U>(a)));
  }
}

// Floating only.
template <typename T>
__device__ __forceinline__ T div(T a, T b) {
  if constexpr (std::is_same_v<T, float>) {
    return __fdiv_rn(a, b);
  } else {
    return __ddiv_rn(a, b);
  }
}

template <typename T>
__device__ __forceinline__ T sqrt(T a) {
  if constexpr (std::is_same_v<T, float>) {
    return __fsqrt_rn(a);
  } else {
    return __dsqrt_rn(a);
  }
}

template <typename T>
__device__ __forceinline__ T exp(T a) {
  if constexpr (std::is_same_v<T, float>) {
    return ::expf(a);
  } else {
    return ::exp(a);
  }
}

template <typename T>
__device__ __forceinline__ T log(T a) {
  if constexpr (std::is_same_v<T, float>) {
    return ::logf(a);
  } else {
    return ::log(a);
  }
}

template <typename T>
__device__ __forceinline__ T tanh(T a) {
  if constexpr (std::is_same_v<T, float>) {
    return ::tanhf(a);
  } else {
    return ::tanh(a);
  }
}

template <typename T>
__device__ __forceinline__ T pow(T a, T b) {
  if constexpr (std::is_same_v<T, float>) {
    return ::powf(a, b);
  } else {
    return ::pow(a, b);
  }
}

template <typename T>
__device__ __forceinline__ T fabs(T a) {
  if constexpr (std::is_same_v<T, float>) {
    return ::fabsf(a);
  } else {
    return ::fabs(a);
  }
}

template <typename T>
__device__ __forceinline__ bool is_nan(T a) {
  if constexpr (kFloating<T>) {
    return a != a;
  } else {
    return false;
  }
}

// The identities of max and min: -inf / +inf for floating types, the extreme values otherwise.
template <typename T>
__device__ __forceinline__ T lowest() {
  if constexpr (kFloating<T>) {
    return -std::numeric_limits<T>::infinity();
  } else {
    return std::numeric_limits<T>::lowest();
  }
}
template <typename T>
__device__ __forceinline__ T highest() {
  if constexpr (kFloating<T>) {
    return std::numeric_limits<T>::infinity();
  } else {
    return std::numeric_limits<T>::max();
  }
}

}  // namespace loom::backend::cuda::dm
