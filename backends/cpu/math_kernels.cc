// CPU kernels of the math family: elementwise arithmetic, comparisons, Select, ZerosLike,
// OnesLike, Fill and Cast.
//
// Binary and ternary ops go through BroadcastPlan (elementwise.h): same-shape inputs become one
// flat run per chunk, broadcast ones become runs along the innermost merged dim, each with a
// plain inner loop the compiler vectorizes. Exp and Log use Eigen's vectorized functions
// on flat blocks. Work is split in kElementwiseGrain chunks; elementwise results do not depend
// on the chunking, so any thread count gives the same bits.

// GCC 12 reports Eigen's AVX-512 intrinsics (_mm512_undefined_* operands) as maybe
// uninitialized; the warnings point into the compiler's headers and are false positives.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#if defined(__F16C__) && defined(__AVX2__)
#include <immintrin.h>
#define LOOM_CPU_F16C 1
#endif

#include "backends/cpu/elementwise.h"
#include "backends/cpu/cpu.h"
#include "backends/kernel.h"
#include "backends/thread_pool.h"
#include "core/ir/error.h"

namespace loom::backend {

namespace {

using cpu::BroadcastPlan;
using cpu::kElementwiseGrain;

// ---- Loops --------------------------------------------------------------------------------

// y = f(a, b) over broadcast inputs of type T, results of type R.
template <typename T, typename R, typename F>
void binary_loop(const KernelContext& k, F f) {
  const Tensor& a = k.in(0);
  const Tensor& b = k.in(1);
  Tensor& y = k.out(0);
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  R* py = y.data<R>();
  if (a.shape() == y.shape() && b.shape() == y.shape()) {
    // Same shapes: one flat loop, without building a BroadcastPlan (its vectors are most of
    // the cost of a small op).
    cpu::pool(k).parallel_for(y.numel(), kElementwiseGrain, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) py[i] = f(pa[i], pb[i]);
    });
    return;
  }
  const BroadcastPlan plan(y.shape(), {&a.shape(), &b.shape()});
  cpu::pool(k).parallel_for(y.numel(), kElementwiseGrain, [&](std::int64_t begin, std::int64_t end) {
    plan.for_each_run(begin, end, [&](std::int64_t o, const std::int64_t* in,
                                      const std::int64_t* step, std::int64_t n) {
      const T* xa = pa + in[0];
      const T* xb = pb + in[1];
      R* out = py + o;
      if (step[0] == 1 && step[1] == 1) {
        for (std::int64_t i = 0; i < n; ++i) out[i] = f(xa[i], xb[i]);
      } else if (step[0] == 0 && step[1] == 1) {
        const T s = xa[0];
        for (std::int64_t i = 0; i < n; ++i) out[i] = f(s, xb[i]);
      } else if (step[0] == 1 && step[1] == 0) {
        const T s = xb[0];
        for (std::int64_t i = 0; i < n; ++i) out[i] = f(xa[i], s);
      } else {
        for (std::int64_t i = 0; i < n; ++i) out[i] = f(xa[i * step[0]], xb[i * step[1]]);
      }
    });
  });
}

// y = f(x) elementwise.
template <typename T, typename R, typename F>
void unary_loop(const KernelContext& k, F f) {
  const T* px = k.in(0).data<T>();
  R* py = k.out(0).data<R>();
  cpu::pool(k).parallel_for(k.out(0).numel(), kElementwiseGrain,
                      [&](std::int64_t begin, std::int64_t end) {
                        for (std::int64_t i = begin; i < end; ++i) py[i] = f(px[i]);
                      });
}

template <typename T>
void fill_with(const KernelContext& k, T value) {
  T* py = k.out(0).data<T>();
  cpu::pool(k).parallel_for(k.out(0).numel(), kElementwiseGrain,
                      [&](std::int64_t begin, std::int64_t end) {
                        std::fill(py + begin, py + end, value);
                      });
}

// ---- Arithmetic ---------------------------------------------------------------------------

// One functor per op. The casts narrow C++'s promotion to int back to the element type.
struct AddOp {
  template <typename T> T operator()(T a, T b) const { return static_cast<T>(a + b); }
};
struct SubOp {
  template <typename T> T operator()(T a, T b) const { return static_cast<T>(a - b); }
};
struct MulOp {
  template <typename T> T operator()(T a, T b) const { return static_cast<T>(a * b); }
};
struct DivOp {
  template <typename T> T operator()(T a, T b) const { return a / b; }
};
struct PowOp {
  template <typename T> T operator()(T a, T b) const { return std::pow(a, b); }
};
struct MaxOp {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (a != a) return a;  // NaN propagates, as in PyTorch and MindSpore
    }
    return a > b ? a : b;
  }
};
struct MinOp {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (a != a) return a;
    }
    return a < b ? a : b;
  }
};
struct EqualOp {
  template <typename T> bool operator()(T a, T b) const { return a == b; }
};
struct LessOp {
  template <typename T> bool operator()(T a, T b) const { return a < b; }
};
struct GreaterOp {
  template <typename T> bool operator()(T a, T b) const { return a > b; }
};

struct NegOp {
  template <typename T> T operator()(T x) const { return static_cast<T>(-x); }
};
struct SquareOp {
  template <typename T> T operator()(T x) const { return static_cast<T>(x * x); }
};
struct AbsOp {
  template <typename T> T operator()(T x) const { return x < T(0) ? static_cast<T>(-x) : x; }
};
struct SignOp {
  template <typename T> T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) {
      return x > T(0) ? T(1) : (x < T(0) ? T(-1) : x);  // keeps 0 and NaN
    } else {
      return static_cast<T>((x > 0) - (x < 0));
    }
  }
};
// Scalar std::sqrt rather than Eigen's: under EIGEN_FAST_MATH (Eigen's default) its vectorized
// sqrt is a Newton-refined approximation, and these must round correctly.
struct SqrtOp {
  template <typename T> T operator()(T x) const { return std::sqrt(x); }
};
struct RsqrtOp {
  template <typename T> T operator()(T x) const { return T(1) / std::sqrt(x); }
};

template <typename Op, typename T>
void binary(const KernelContext& k) {
  binary_loop<T, T>(k, Op{});
}
template <typename Op, typename T>
void compare(const KernelContext& k) {
  binary_loop<T, bool>(k, Op{});
}
template <typename Op, typename T>
void unary(const KernelContext& k) {
  unary_loop<T, T>(k, Op{});
}
// Block functors (KernelDef::block): out[i] = Op(a[i], b[i]) / Op(x[i]) over n contiguous
// elements, shared by the op's kernel and FusedElementwise.
template <typename Op, typename T>
void binary_block(const void* const* in, void* out, std::int64_t n) {
  const T* a = static_cast<const T*>(in[0]);
  const T* b = static_cast<const T*>(in[1]);
  T* y = static_cast<T*>(out);
  for (std::int64_t i = 0; i < n; ++i) y[i] = Op{}(a[i], b[i]);
}
template <typename Op, typename T>
void unary_block_fn(const void* const* in, void* out, std::int64_t n) {
  const T* x = static_cast<const T*>(in[0]);
  T* y = static_cast<T*>(out);
  for (std::int64_t i = 0; i < n; ++i) y[i] = Op{}(x[i]);
}

// Eigen's vectorized exp and log are accurate in the normal range but clamp near its edges:
// float exp overflows a little early, double exp never reaches 0 (exp(-inf) is 5.6e-309), and
// log treats subnormals as the smallest normal. Those elements (rare) are recomputed with the
// scalar functions. y may be x itself (the runtime runs elementwise ops in place), so a span
// holding such inputs is copied aside first. Spans start at multiples of kSpan from the block's
// start, so Eigen's packets fall on the same elements whatever the caller's blocking.
constexpr std::int64_t kSpan = 256;

template <typename T, typename Vectorized, typename Scalar, typename Outside>
void eigen_block(const T* x, T* y, std::int64_t n, Vectorized vec, Scalar scalar,
                 Outside outside) {
  using Array = Eigen::Array<T, Eigen::Dynamic, 1>;
  for (std::int64_t s = 0; s < n; s += kSpan) {
    const std::int64_t m = std::min(kSpan, n - s);
    Eigen::Map<const Array> xs(x + s, m);
    Eigen::Map<Array> ys(y + s, m);
    bool edge = false;
    for (std::int64_t i = 0; i < m; ++i) edge |= outside(x[s + i]);
    if (!edge) {
      ys = vec(xs);
      continue;
    }
    T saved[kSpan];
    std::copy(x + s, x + s + m, saved);
    ys = vec(Eigen::Map<const Array>(saved, m));
    for (std::int64_t i = 0; i < m; ++i) {
      if (outside(saved[i])) y[s + i] = scalar(saved[i]);
    }
  }
}

template <typename T>
void exp_block(const void* const* in, void* out, std::int64_t n) {
  constexpr bool kFloat = std::is_same_v<T, float>;
  constexpr T kLow = kFloat ? T(-87) : T(-708);
  constexpr T kHigh = kFloat ? T(88) : T(709);
  eigen_block<T>(static_cast<const T*>(in[0]), static_cast<T*>(out), n,
                 [](const auto& x) { return x.exp(); }, [](T v) { return std::exp(v); },
                 [](T v) { return !(v >= kLow && v <= kHigh); });
}
template <typename T>
void log_block(const void* const* in, void* out, std::int64_t n) {
  constexpr T kMinNormal = std::numeric_limits<T>::min();
  eigen_block<T>(static_cast<const T*>(in[0]), static_cast<T*>(out), n,
                 [](const auto& x) { return x.log(); }, [](T v) { return std::log(v); },
                 [](T v) { return !(v >= kMinNormal); });
}

// A same-shape unary op through its block functor, chunk by chunk.
template <typename T, BlockFn Block>
void unary_by_block(const KernelContext& k) {
  const void* px = k.in(0).raw_data();
  void* py = k.out(0).raw_data();
  cpu::pool(k).parallel_for(k.out(0).numel(), kElementwiseGrain,
                            [&](std::int64_t begin, std::int64_t end) {
                              const void* in[1] = {static_cast<const T*>(px) + begin};
                              Block(in, static_cast<T*>(py) + begin, end - begin);
                            });
}

// ---- Select -------------------------------------------------------------------------------

// c ? a : b without a branch: a mask from the condition byte (bool is 0 or 1) and bitwise
// selection, which the compiler cannot turn back into a branch and vectorizes.
template <typename T>
inline T blend(bool c, T a, T b) {
  using U = std::conditional_t<sizeof(T) == 8, std::uint64_t,
            std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint8_t>>;
  static_assert(sizeof(U) == sizeof(T));
  const U m = static_cast<U>(U(0) - static_cast<U>(c));
  return std::bit_cast<T>(static_cast<U>((std::bit_cast<U>(a) & m) |
                                         (std::bit_cast<U>(b) & static_cast<U>(~m))));
}

template <typename T>
void select_typed(const KernelContext& k) {
  const Tensor& c = k.in(0);
  const Tensor& a = k.in(1);
  const Tensor& b = k.in(2);
  Tensor& y = k.out(0);
  const bool* pc = c.data<bool>();
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* py = y.data<T>();
  if (c.numel() == 1 && a.shape() == y.shape() && b.shape() == y.shape()) {
    // One condition for the whole tensor (loss scaling's skip of an update): a copy of the
    // chosen input, or nothing where the output is that input (in place).
    const T* src = pc[0] ? pa : pb;
    if (src != py && y.numel() > 0) {
      cpu::pool(k).parallel_for(y.numel(), kElementwiseGrain, [&](std::int64_t begin, std::int64_t end) {
        std::memcpy(py + begin, src + begin, static_cast<std::size_t>(end - begin) * sizeof(T));
      });
    }
    return;
  }
  if (c.shape() == y.shape() && a.shape() == y.shape() && b.shape() == y.shape()) {
    cpu::pool(k).parallel_for(y.numel(), kElementwiseGrain, [&](std::int64_t begin, std::int64_t end) {
#pragma GCC ivdep
      for (std::int64_t i = begin; i < end; ++i) py[i] = blend<T>(pc[i], pa[i], pb[i]);
    });
    return;
  }
  const BroadcastPlan plan(y.shape(), {&c.shape(), &a.shape(), &b.shape()});
  cpu::pool(k).parallel_for(y.numel(), kElementwiseGrain, [&](std::int64_t begin, std::int64_t end) {
    plan.for_each_run(begin, end, [&](std::int64_t o, const std::int64_t* in,
                                      const std::int64_t* step, std::int64_t n) {
      const bool* xc = pc + in[0];
      const T* xa = pa + in[1];
      const T* xb = pb + in[2];
      T* out = py + o;
      // Branchless: `c ? a[i] : b[i]` compiled to a branch, mispredicted half the time on a
      // ReLU gradient's mask (5-10 ns an element); both loads and a bitwise blend vectorize.
      // The output may be one of the inputs (in place) but only at the same index, so the loop
      // has no carried dependence (ivdep spares the compiler a branchy alias check).
      if (step[0] == 1 && step[1] == 1 && step[2] == 1) {
#pragma GCC ivdep
        for (std::int64_t i = 0; i < n; ++i) {
          out[i] = blend<T>(xc[i], xa[i], xb[i]);
        }
      } else if (step[0] == 1 && step[1] == 1 && step[2] == 0) {
        const T vb = xb[0];
#pragma GCC ivdep
        for (std::int64_t i = 0; i < n; ++i) {
          out[i] = blend<T>(xc[i], xa[i], vb);
        }
      } else {
        for (std::int64_t i = 0; i < n; ++i) {
          out[i] = blend<T>(xc[i * step[0]], xa[i * step[1]], xb[i * step[2]]);
        }
      }
    });
  });
}

// The registry keys a kernel by its first input's dtype, which for Select is always the Bool
// condition; the value dtype is read from the output.
void select(const KernelContext& k) {
  switch (k.out(0).dtype()) {
    case DType::kFloat32: return select_typed<float>(k);
    case DType::kFloat64: return select_typed<double>(k);
    case DType::kInt32: return select_typed<std::int32_t>(k);
    case DType::kInt64: return select_typed<std::int64_t>(k);
    case DType::kUInt8: return select_typed<std::uint8_t>(k);
    case DType::kBool: return select_typed<bool>(k);
    default: break;
  }
  throw TypeError("Select: expected x and y with a CPU kernel dtype, got " +
                  std::string(dtype_name(k.out(0).dtype())));
}

// ---- Creation -----------------------------------------------------------------------------

template <typename T> void zeros_like(const KernelContext& k) { fill_with<T>(k, T(0)); }
template <typename T> void ones_like(const KernelContext& k) { fill_with<T>(k, T(1)); }

template <typename T>
void fill(const KernelContext& k) {
  const double v = k.attr("value").as_double();
  if constexpr (std::is_same_v<T, bool>) {
    fill_with<bool>(k, v != 0);
  } else {
    fill_with<T>(k, static_cast<T>(v));
  }
}

// ---- Cast ---------------------------------------------------------------------------------

template <typename S, typename D>
D convert(S x) {
  if constexpr (std::is_same_v<D, bool>) {
    return x != S(0);
  } else if constexpr (std::is_floating_point_v<S> && std::is_integral_v<D>) {
    // Through Int64 so that UInt8 wraps like an integer conversion instead of being undefined.
    return static_cast<D>(static_cast<std::int64_t>(x));
  } else {
    return static_cast<D>(x);
  }
}

template <typename S, typename D>
void cast_to(const KernelContext& k) {
  if constexpr (std::is_same_v<S, D>) {
    const S* px = k.in(0).data<S>();
    S* py = k.out(0).data<S>();
    if (k.out(0).numel() > 0) std::memcpy(py, px, k.out(0).nbytes());
  } else {
    unary_loop<S, D>(k, convert<S, D>);
  }
}

// Float16 and BFloat16 tensors hold 16-bit patterns (core/ir/dtype.h): converted through
// Float32, rounding to nearest even (a Float64 source is rounded to Float32 first).
using ToBits = std::uint16_t (*)(float);
using FromBits = float (*)(std::uint16_t);
ToBits to_bits(DType d) { return d == DType::kFloat16 ? &float_to_half : &float_to_bfloat16; }
FromBits from_bits(DType d) { return d == DType::kFloat16 ? &half_to_float : &bfloat16_to_float; }

// Float32 to and from the 16-bit floats over a run, the scalar functions' bits (the casts of
// mixed precision, between every low-precision op and its Float32 kernel): BFloat16 as plain
// integer loops the compiler vectorizes, Float16 through F16C's conversions where the build has
// them (8 at a time, NaNs redone by the scalar function, which keeps no payload going down and
// sets no quiet bit going up), else the scalar functions. Measured on a Zen 3 (LeNet-5 at O2
// bfloat16, batch 32): Cast was 72% of the step at 1.3 GB/s through the function pointers.
void floats_to_bfloat16(const float* x, std::uint16_t* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint32_t f;
    std::memcpy(&f, &x[i], sizeof f);
    const std::uint32_t rounded = (f + 0x7fffu + ((f >> 16) & 1u)) >> 16;
    const std::uint32_t nan = (f >> 16) | 0x40u;
    y[i] = static_cast<std::uint16_t>((f & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
  }
}

void bfloat16_to_floats(const std::uint16_t* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint32_t f = static_cast<std::uint32_t>(x[i]) << 16;
    std::memcpy(&y[i], &f, sizeof f);
  }
}

void floats_to_half(const float* x, std::uint16_t* y, std::int64_t n) {
  std::int64_t i = 0;
#ifdef LOOM_CPU_F16C
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf = _mm256_set1_epi32(0x7f800000);
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), h);
    const __m256i a = _mm256_and_si256(_mm256_castps_si256(v), abs_mask);
    if (!_mm256_testz_si256(_mm256_cmpgt_epi32(a, inf), _mm256_set1_epi32(-1))) {
      for (std::int64_t j = i; j < i + 8; ++j) y[j] = float_to_half(x[j]);
    }
  }
#endif
  for (; i < n; ++i) y[i] = float_to_half(x[i]);
}

void half_to_floats(const std::uint16_t* x, float* y, std::int64_t n) {
  std::int64_t i = 0;
#ifdef LOOM_CPU_F16C
  const __m128i exp_mask = _mm_set1_epi16(0x7c00);
  const __m128i abs_mask = _mm_set1_epi16(0x7fff);
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i));
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(h));
    // NaN: |h| > 0x7c00 (as signed 16-bit, |h| is non-negative).
    const __m128i nan = _mm_cmpgt_epi16(_mm_and_si128(h, abs_mask), exp_mask);
    if (!_mm_testz_si128(nan, nan)) {
      for (std::int64_t j = i; j < i + 8; ++j) y[j] = half_to_float(x[j]);
    }
  }
#endif
  for (; i < n; ++i) y[i] = half_to_float(x[i]);
}

template <typename S>
void cast_to_bits(const KernelContext& k) {
  const S* px = k.in(0).data<S>();
  auto* py = static_cast<std::uint16_t*>(k.out(0).raw_data());
  const DType to_dtype = k.out(0).dtype();
  cpu::pool(k).parallel_for(k.out(0).numel(), kElementwiseGrain,
                            [&](std::int64_t begin, std::int64_t end) {
                              if constexpr (std::is_same_v<S, float>) {
                                if (to_dtype == DType::kBFloat16) {
                                  floats_to_bfloat16(px + begin, py + begin, end - begin);
                                } else {
                                  floats_to_half(px + begin, py + begin, end - begin);
                                }
                              } else {
                                const ToBits to = to_bits(to_dtype);
                                for (std::int64_t i = begin; i < end; ++i) {
                                  py[i] = to(static_cast<float>(px[i]));
                                }
                              }
                            });
}

template <typename D>
void cast_bits_to(const KernelContext& k) {
  const auto* px = static_cast<const std::uint16_t*>(k.in(0).raw_data());
  D* py = k.out(0).data<D>();
  const DType from_dtype = k.in(0).dtype();
  cpu::pool(k).parallel_for(k.out(0).numel(), kElementwiseGrain,
                            [&](std::int64_t begin, std::int64_t end) {
                              if constexpr (std::is_same_v<D, float>) {
                                if (from_dtype == DType::kBFloat16) {
                                  bfloat16_to_floats(px + begin, py + begin, end - begin);
                                } else {
                                  half_to_floats(px + begin, py + begin, end - begin);
                                }
                              } else {
                                const FromBits from = from_bits(from_dtype);
                                for (std::int64_t i = begin; i < end; ++i) {
                                  py[i] = convert<float, D>(from(px[i]));
                                }
                              }
                            });
}

// Cast from Float16 or BFloat16 (keyed by the source dtype).
void cast_from_bits(const KernelContext& k) {
  const DType src = k.in(0).dtype();
  switch (k.out(0).dtype()) {
    case DType::kFloat32: return cast_bits_to<float>(k);
    case DType::kFloat64: return cast_bits_to<double>(k);
    case DType::kInt32: return cast_bits_to<std::int32_t>(k);
    case DType::kInt64: return cast_bits_to<std::int64_t>(k);
    case DType::kUInt8: return cast_bits_to<std::uint8_t>(k);
    case DType::kBool: return cast_bits_to<bool>(k);
    case DType::kFloat16:
    case DType::kBFloat16: {
      const auto* px = static_cast<const std::uint16_t*>(k.in(0).raw_data());
      auto* py = static_cast<std::uint16_t*>(k.out(0).raw_data());
      if (k.out(0).dtype() == src) {
        if (k.out(0).numel() > 0) std::memcpy(py, px, k.out(0).nbytes());
        return;
      }
      const FromBits from = from_bits(src);
      const ToBits to = to_bits(k.out(0).dtype());
      for (std::int64_t i = 0; i < k.out(0).numel(); ++i) py[i] = to(from(px[i]));
      return;
    }
    default: break;
  }
  throw TypeError("Cast: expected a dst_type with a CPU kernel, got " +
                  std::string(dtype_name(k.out(0).dtype())));
}

template <typename S>
void cast(const KernelContext& k) {
  switch (k.out(0).dtype()) {
    case DType::kFloat16:
    case DType::kBFloat16: return cast_to_bits<S>(k);
    case DType::kFloat32: return cast_to<S, float>(k);
    case DType::kFloat64: return cast_to<S, double>(k);
    case DType::kInt32: return cast_to<S, std::int32_t>(k);
    case DType::kInt64: return cast_to<S, std::int64_t>(k);
    case DType::kUInt8: return cast_to<S, std::uint8_t>(k);
    case DType::kBool: return cast_to<S, bool>(k);
    default: break;
  }
  throw TypeError("Cast: expected a dst_type with a CPU kernel, got " +
                  std::string(dtype_name(k.out(0).dtype())));
}

// ---- Registration -------------------------------------------------------------------------

template <typename... Ts>
struct Types {};
constexpr Types<float, double> kFloating;
constexpr Types<float, double, std::int32_t, std::int64_t> kNumeric;
constexpr Types<float, double, std::int32_t, std::int64_t, std::uint8_t, bool> kAll;

// An elementwise op (runs in place); floating dtypes also give FusedElementwise their block.
template <typename... Ts, typename Make, typename MakeBlock>
void add_elementwise(KernelRegistry& r, std::string_view op, Types<Ts...>, Make make,
                     MakeBlock block) {
  (r.add(op, DTypeOf<Ts>::value, make.template operator()<Ts>())
       .writes_every_output_element()
       .elementwise(std::is_floating_point_v<Ts> ? block.template operator()<Ts>() : nullptr),
   ...);
}
template <typename... Ts, typename Make>
void add_elementwise(KernelRegistry& r, std::string_view op, Types<Ts...> types, Make make) {
  add_elementwise(r, op, types, make, []<typename T>() -> BlockFn { return nullptr; });
}

}  // namespace

void register_cpu_math_kernels(KernelRegistry& r) {
  add_elementwise(r, "Add", kNumeric, []<typename T>() { return &binary<AddOp, T>; },
                  []<typename T>() { return &binary_block<AddOp, T>; });
  add_elementwise(r, "Sub", kNumeric, []<typename T>() { return &binary<SubOp, T>; },
                  []<typename T>() { return &binary_block<SubOp, T>; });
  add_elementwise(r, "Mul", kNumeric, []<typename T>() { return &binary<MulOp, T>; },
                  []<typename T>() { return &binary_block<MulOp, T>; });
  add_elementwise(r, "RealDiv", kFloating, []<typename T>() { return &binary<DivOp, T>; },
                  []<typename T>() { return &binary_block<DivOp, T>; });
  add_elementwise(r, "Pow", kFloating, []<typename T>() { return &binary<PowOp, T>; });
  add_elementwise(r, "Maximum", kNumeric, []<typename T>() { return &binary<MaxOp, T>; },
                  []<typename T>() { return &binary_block<MaxOp, T>; });
  add_elementwise(r, "Minimum", kNumeric, []<typename T>() { return &binary<MinOp, T>; },
                  []<typename T>() { return &binary_block<MinOp, T>; });
  add_elementwise(r, "Equal", kAll, []<typename T>() { return &compare<EqualOp, T>; });
  add_elementwise(r, "Less", kNumeric, []<typename T>() { return &compare<LessOp, T>; });
  add_elementwise(r, "Greater", kNumeric, []<typename T>() { return &compare<GreaterOp, T>; });
  add_elementwise(r, "Neg", kNumeric, []<typename T>() { return &unary<NegOp, T>; },
                  []<typename T>() { return &unary_block_fn<NegOp, T>; });
  add_elementwise(r, "Square", kNumeric, []<typename T>() { return &unary<SquareOp, T>; },
                  []<typename T>() { return &unary_block_fn<SquareOp, T>; });
  add_elementwise(r, "Abs", kNumeric, []<typename T>() { return &unary<AbsOp, T>; },
                  []<typename T>() { return &unary_block_fn<AbsOp, T>; });
  add_elementwise(r, "Sign", kNumeric, []<typename T>() { return &unary<SignOp, T>; });
  add_elementwise(r, "Sqrt", kFloating, []<typename T>() { return &unary<SqrtOp, T>; },
                  []<typename T>() { return &unary_block_fn<SqrtOp, T>; });
  add_elementwise(r, "Rsqrt", kFloating, []<typename T>() { return &unary<RsqrtOp, T>; });
  add_elementwise(r, "Exp", kFloating,
                  []<typename T>() { return &unary_by_block<T, &exp_block<T>>; },
                  []<typename T>() { return &exp_block<T>; });
  add_elementwise(r, "Log", kFloating,
                  []<typename T>() { return &unary_by_block<T, &log_block<T>>; },
                  []<typename T>() { return &log_block<T>; });
  // Keyed by the value dtype (Select's kernel_dtype_from is input 1, x).
  for (DType d : {DType::kBool, DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64,
                  DType::kUInt8}) {
    r.add("Select", d, &select).writes_every_output_element().elementwise();
  }
  add_elementwise(r, "ZerosLike", kAll, []<typename T>() { return &zeros_like<T>; });
  add_elementwise(r, "OnesLike", kAll, []<typename T>() { return &ones_like<T>; });
  // Not on the runtime's every-element list (no NaN-output case in tests/runtime yet): their
  // fresh outputs are zero-filled first.
  r.add("Fill", DType::kFloat32, &fill<float>);
  r.add("Fill", DType::kFloat64, &fill<double>);
  r.add("Fill", DType::kInt32, &fill<std::int32_t>);
  r.add("Fill", DType::kInt64, &fill<std::int64_t>);
  r.add("Fill", DType::kUInt8, &fill<std::uint8_t>);
  r.add("Fill", DType::kBool, &fill<bool>);
  r.add("Cast", DType::kFloat32, &cast<float>).elementwise();
  r.add("Cast", DType::kFloat64, &cast<double>).elementwise();
  r.add("Cast", DType::kInt32, &cast<std::int32_t>).elementwise();
  r.add("Cast", DType::kInt64, &cast<std::int64_t>).elementwise();
  r.add("Cast", DType::kUInt8, &cast<std::uint8_t>).elementwise();
  r.add("Cast", DType::kBool, &cast<bool>).elementwise();
  r.add("Cast", DType::kFloat16, &cast_from_bits).elementwise();
  r.add("Cast", DType::kBFloat16, &cast_from_bits).elementwise();
}

}  // namespace loom::backend
