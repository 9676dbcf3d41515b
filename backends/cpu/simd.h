// The Float32 vector of the build's instruction set, for kernels written once for AVX-512 and
// AVX2 (loom builds with -march=native: the choice is made at compile time).
//
// - AVX-512F: 16 lanes, 32 registers, masks are __mmask16.
// - AVX2 with FMA: 8 lanes, 16 registers, masks are __m256i (a lane is on when all its bits are
//   set); masked loads read nothing past the mask and give 0 there, masked stores write nothing
//   there, as AVX-512's.
// load_partial(m, p) gives the lanes of m from p and anything in the others: the caller keeps
// kLanes floats readable from p and never uses those lanes (a masked load on AVX-512, a plain
// one on AVX2, where masked loads are slow).
// kSimd is false on other processors; the kernels then keep their plain loops.
#pragma once

#include <algorithm>
#include <cstdint>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
// For preprocessor tests: the build has one of the two vectors.
#define LOOM_CPU_SIMD 1
#endif

namespace loom::backend::cpu::simd {

#if defined(__AVX512F__)

inline constexpr bool kSimd = true;
inline constexpr int kLanes = 16;
inline constexpr int kRegisters = 32;
using Vec = __m512;
using Mask = __mmask16;

inline Vec zero() { return _mm512_setzero_ps(); }
inline Vec broadcast(float x) { return _mm512_set1_ps(x); }
inline Vec load(const float* p) { return _mm512_loadu_ps(p); }
inline Vec load(Mask m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
inline Vec load_partial(Mask m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
inline void store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
inline void store(Mask m, float* p, Vec v) { _mm512_mask_storeu_ps(p, m, v); }
inline Vec fmadd(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline Mask all() { return static_cast<Mask>(0xFFFF); }
// The first min(count, 16) lanes (none for count <= 0).
inline Mask first(int64_t count) {
  return static_cast<Mask>((1u << std::clamp<int64_t>(count, 0, 16)) - 1u);
}

#elif defined(__AVX2__) && defined(__FMA__)

inline constexpr bool kSimd = true;
inline constexpr int kLanes = 8;
inline constexpr int kRegisters = 16;
using Vec = __m256;
using Mask = __m256i;

inline Vec zero() { return _mm256_setzero_ps(); }
inline Vec broadcast(float x) { return _mm256_set1_ps(x); }
inline Vec load(const float* p) { return _mm256_loadu_ps(p); }
inline Vec load(Mask m, const float* p) { return _mm256_maskload_ps(p, m); }
// A plain load: vmaskmovps costs several times a plain load on some processors (Zen 3).
inline Vec load_partial(Mask, const float* p) { return _mm256_loadu_ps(p); }
inline void store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
inline void store(Mask m, float* p, Vec v) { _mm256_maskstore_ps(p, m, v); }
inline Vec fmadd(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline Mask all() { return _mm256_set1_epi32(-1); }
// The first min(count, 8) lanes.
inline Mask first(int64_t count) {
  const auto n = static_cast<int>(std::clamp<int64_t>(count, 0, 8));
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

#else

inline constexpr bool kSimd = false;
inline constexpr int kLanes = 1;
inline constexpr int kRegisters = 16;

#endif

#if defined(LOOM_CPU_SIMD)
// The sum of the lanes in a fixed order (pairs of halves), the same on every call.
inline float lane_sum(Vec v) {
  alignas(64) float t[kLanes];
  store(t, v);
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int k = 0; k < width; ++k) t[k] += t[k + width];
  }
  return t[0];
}
#endif

}  // namespace loom::backend::cpu::simd
