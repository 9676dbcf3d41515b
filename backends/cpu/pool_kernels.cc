// CPU kernels of the pooling family (NCHW; Float32 and Float64).
//
// Max pooling and its gradients use the first maximum of each window in row-major order (NaN
// counts as a maximum, the first NaN wins); SAME average pooling divides by the number of
// elements inside the image, padding excluded, as MindSpore and TensorFlow do.
//
// Two paths compute bitwise the same results:
// - The reference path runs a generic loop over each window, one (image, channel) plane per
//   task. It takes any kernel, stride and padding. LOOM_POOL=reference (read at every call)
//   forces it, so that tests and benchmarks can compare the two.
// - The fast path takes 2x2 and 3x3 windows at stride 2 (LeNet's 2x2/2, the ResNet stem's 3x3/2
//   SAME). Work is split by output rows of all planes together, so that small planes still give
//   both threads work; where 2x2/2 windows tile the planes' rows exactly (LeNet), output row t
//   simply reads input rows 2t and 2t + 1 of the whole tensor. Windows wholly inside the image
//   run branch-free over a row at a time (compare and blend: AVX-512 or AVX2 for the Float32
//   maxima, plain loops otherwise; GCC 12 vectorizes the averages but not the maxima); windows
//   clipped by the padding use the reference's per-window code. The running maximum takes a value when
//   it is greater, or when it is a NaN and the maximum is not: the first maximum in the order
//   where NaN is above every number, as the reference. Where windows do not overlap (2x2/2),
//   MaxPoolGrad and AvgPoolGrad write every dx element once, with no zero pass; MaxPoolGrad of
//   overlapping windows adds into a zeroed plane in the reference's order, and AvgPoolGrad of
//   overlapping windows stays on the reference path.
// Every kernel writes every output element (declared at registration: KernelDef).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "backends/cpu/cpu.h"
#include "backends/kernel.h"
#include "backends/thread_pool.h"
#include "ops/conv_geometry.h"

#include "backends/cpu/simd.h"

namespace loom::backend {

namespace {

using std::int64_t;

// Elements of work a pool task should get at least (reference path: per plane).
constexpr int64_t kGrainElements = 16384;
// Input elements a fast-path task should read at least: small enough that LeNet's batch-32
// pools give both threads several tasks.
constexpr int64_t kFastGrainElements = 8192;
// Outputs of one row handled per block of the fast path (stack buffers).
constexpr int64_t kBlock = 64;

struct PoolGeometry {
  int64_t planes, h, w, oh, ow;
  int64_t kh, kw, sh, sw;
  int64_t pad_top, pad_left;

  // The window of output (oy, ox), clipped to the image: rows [y0, y1), columns [x0, x1).
  struct Window {
    int64_t y0, y1, x0, x1;
    int64_t count() const { return (y1 - y0) * (x1 - x0); }
  };
  Window window(int64_t oy, int64_t ox) const {
    const int64_t ys = oy * sh - pad_top;
    const int64_t xs = ox * sw - pad_left;
    return {std::max<int64_t>(ys, 0), std::min(ys + kh, h), std::max<int64_t>(xs, 0),
            std::min(xs + kw, w)};
  }
  // Planes per pool task.
  int64_t grain() const {
    return std::max<int64_t>(1, kGrainElements / std::max<int64_t>(1, oh * ow * kh * kw + h * w));
  }
  // Output rows (of all planes, plane-major) per fast-path task.
  int64_t row_grain() const {
    return std::max<int64_t>(1, kFastGrainElements / std::max<int64_t>(1, sh * w + ow));
  }
  bool overlapping() const { return kh > sh || kw > sw; }
  // Whether 2x2/2 windows tile each plane's rows from the top left with none clipped: then
  // output row t (of all planes) reads rows 2t and 2t + 1 of x seen as (planes·h, w).
  bool uniform_rows() const {
    return kh == 2 && kw == 2 && sh == 2 && sw == 2 && pad_top == 0 && pad_left == 0 &&
           h == 2 * oh && 2 * ow <= w;
  }
  // Whether output row oy's windows lie inside the image vertically.
  bool row_inside(int64_t oy) const {
    const int64_t ys = oy * sh - pad_top;
    return ys >= 0 && ys + kh <= h;
  }
  // The output columns [lo, hi) whose windows lie inside the image horizontally.
  struct Columns {
    int64_t lo, hi;
  };
  Columns inside_columns() const {
    const int64_t lo = std::min(ow, (pad_left + sw - 1) / sw);
    const int64_t last = w + pad_left - kw;  // the last inside window starts at most here
    const int64_t hi = last < 0 ? 0 : std::min(ow, last / sw + 1);
    return {lo, std::max(lo, hi)};
  }
};

// x: (n, c, h, w); pooled: (n, c, oh, ow) as inferred. The padding is ops/conv_geometry.h's
// (MindSpore's rule, shared with inference).
PoolGeometry pool_geometry(const ir::Primitive& prim, const Shape& x, const Shape& pooled) {
  const auto k = prim.attr("kernel_size").as_ints();
  const auto s = prim.attr("strides").as_ints();
  PoolGeometry g{.planes = x[0] * x[1], .h = x[2], .w = x[3], .oh = pooled[2], .ow = pooled[3],
                 .kh = k[0], .kw = k[1], .sh = s[0], .sw = s[1], .pad_top = 0, .pad_left = 0};
  const ops::PadMode mode = ops::pad_mode_of(prim);
  const auto pad = prim.attr("pad").as_ints();  // PAD mode's (top, bottom, left, right)
  g.pad_top = ops::window_axis(g.h, g.kh, g.sh, 1, mode, pad[0], pad[1]).pad_before;
  g.pad_left = ops::window_axis(g.w, g.kw, g.sw, 1, mode, pad[2], pad[3]).pad_before;
  return g;
}

// Flat index within the plane of the window's first maximum (row-major; a NaN wins).
template <typename T>
int64_t window_argmax(const T* plane, int64_t w, const PoolGeometry::Window& win) {
  int64_t best = win.y0 * w + win.x0;
  for (int64_t iy = win.y0; iy < win.y1; ++iy) {
    for (int64_t ix = win.x0; ix < win.x1; ++ix) {
      const T v = plane[iy * w + ix];
      if (v > plane[best] || (std::isnan(v) && !std::isnan(plane[best]))) best = iy * w + ix;
    }
  }
  return best;
}

bool reference_forced() {
  const char* env = std::getenv("LOOM_POOL");
  return env != nullptr && std::string(env) == "reference";
}

// ---------------------------------------------------------------------------------------------
// Reference path

template <typename T>
void reference_max_pool(const PoolGeometry& g, const T* x, T* y, ThreadPool& pool) {
  pool.parallel_for(g.planes, g.grain(), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const T* src = x + p * g.h * g.w;
      T* dst = y + p * g.oh * g.ow;
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          dst[oy * g.ow + ox] = src[window_argmax(src, g.w, g.window(oy, ox))];
        }
      }
    }
  });
}

template <typename T>
void reference_max_pool_grad(const PoolGeometry& g, const T* x, const T* dout, T* dx,
                             ThreadPool& pool) {
  pool.parallel_for(g.planes, g.grain(), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const T* src = x + p * g.h * g.w;
      const T* d = dout + p * g.oh * g.ow;
      T* dst = dx + p * g.h * g.w;
      std::fill(dst, dst + g.h * g.w, T(0));
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          dst[window_argmax(src, g.w, g.window(oy, ox))] += d[oy * g.ow + ox];
        }
      }
    }
  });
}

template <typename T>
void reference_max_pool_grad_grad(const PoolGeometry& g, const T* x, const T* grad, T* y,
                                  ThreadPool& pool) {
  pool.parallel_for(g.planes, g.grain(), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const T* src = x + p * g.h * g.w;
      const T* gp = grad + p * g.h * g.w;
      T* dst = y + p * g.oh * g.ow;
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          dst[oy * g.ow + ox] = gp[window_argmax(src, g.w, g.window(oy, ox))];
        }
      }
    }
  });
}

template <typename T>
T window_average(const T* src, int64_t w, const PoolGeometry::Window& win) {
  T sum = 0;
  for (int64_t iy = win.y0; iy < win.y1; ++iy) {
    for (int64_t ix = win.x0; ix < win.x1; ++ix) sum += src[iy * w + ix];
  }
  return sum / static_cast<T>(win.count());
}

template <typename T>
void reference_avg_pool(const PoolGeometry& g, const T* x, T* y, ThreadPool& pool) {
  pool.parallel_for(g.planes, g.grain(), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const T* src = x + p * g.h * g.w;
      T* dst = y + p * g.oh * g.ow;
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          dst[oy * g.ow + ox] = window_average(src, g.w, g.window(oy, ox));
        }
      }
    }
  });
}

template <typename T>
void reference_avg_pool_grad(const PoolGeometry& g, const T* dout, T* dx, ThreadPool& pool) {
  pool.parallel_for(g.planes, g.grain(), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const T* d = dout + p * g.oh * g.ow;
      T* dst = dx + p * g.h * g.w;
      std::fill(dst, dst + g.h * g.w, T(0));
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          const PoolGeometry::Window win = g.window(oy, ox);
          const T share = d[oy * g.ow + ox] / static_cast<T>(win.count());
          for (int64_t iy = win.y0; iy < win.y1; ++iy) {
            for (int64_t ix = win.x0; ix < win.x1; ++ix) dst[iy * g.w + ix] += share;
          }
        }
      }
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Fast path: the window maxima of n inside windows of one output row

// Whether the fast path takes these windows: 2x2 or 3x3 at stride 2.
bool fast_path_takes(const PoolGeometry& g) {
  const bool shape = (g.kh == 2 && g.kw == 2) || (g.kh == 3 && g.kw == 3);
  return shape && g.sh == 2 && g.sw == 2 && !reference_forced();
}

// The running maximum takes v when it is greater, or when v is a NaN and the maximum is not.
template <typename T>
inline bool greater(T v, T best) {
  return (v > best) | ((v != v) & (best == best));
}

#if defined(LOOM_CPU_SIMD)
void window_maxima_3x3(const float* first, int64_t w, int64_t n, float* best, int32_t* tap);
#endif

// For the n windows whose first (top-left) elements are first[j * 2], j < n (n <= kBlock):
// best[j] = the maximum, tap[j] = r * K + c of its first position (r, c) in the window.
template <typename T, int K>
void window_maxima(const T* first, int64_t w, int64_t n, T* best, int32_t* tap) {
#if defined(LOOM_CPU_SIMD)
  if constexpr (std::is_same_v<T, float> && K == 3) return window_maxima_3x3(first, w, n, best, tap);
#endif
  for (int64_t j = 0; j < n; ++j) {
    const T* p = first + j * 2;
    T b = p[0];
    int32_t t = 0;
    for (int r = 0; r < K; ++r) {
      for (int c = 0; c < K; ++c) {
        if (r == 0 && c == 0) continue;
        const T v = p[r * w + c];
        const bool take = greater(v, b);
        b = take ? v : b;
        t = take ? r * K + c : t;
      }
    }
    best[j] = b;
    tap[j] = t;
  }
}

#if defined(__AVX512F__)
// AVX-512, Float32, 16 windows at stride 2 per step. The even and odd floats of up to 32.
struct Pairs {
  __m512 even, odd;
  __mmask16 lo, hi;  // the masks of the two 16-float halves that were read
};
// Splits `count` (<= 32) floats from row into even and odd; lanes past them read nothing and
// hold 0.
inline Pairs load_floats(const float* row, int64_t count) {
  const __mmask16 lo = count >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << count) - 1);
  const __mmask16 hi = count <= 16 ? 0
                                   : (count >= 32 ? 0xFFFF
                                                  : static_cast<__mmask16>((1u << (count - 16)) - 1));
  const __m512 a = _mm512_maskz_loadu_ps(lo, row);
  const __m512 b = _mm512_maskz_loadu_ps(hi, row + 16);
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  return {_mm512_permutex2var_ps(a, even, b), _mm512_permutex2var_ps(a, odd, b), lo, hi};
}
// The first (even) and second (odd) columns of m (<= 16) 2x2/2 windows whose row starts at row.
inline Pairs load_pairs(const float* row, int64_t m) { return load_floats(row, 2 * m); }
// Stores the even and odd columns interleaved back (the inverse of load_pairs).
inline void store_pairs(float* row, __m512 even, __m512 odd, __mmask16 lo, __mmask16 hi) {
  const __m512i first = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i second =
      _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  _mm512_mask_storeu_ps(row, lo, _mm512_permutex2var_ps(even, first, odd));
  _mm512_mask_storeu_ps(row + 16, hi, _mm512_permutex2var_ps(even, second, odd));
}
inline __mmask16 greater16(__m512 v, __m512 best) {
  return _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) |
         (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) & _mm512_cmp_ps_mask(best, best, _CMP_ORD_Q));
}
// The taps taken over the window order (0, 0), (0, 1), (1, 0), (1, 1): the winner is tap 3 where
// t3, else 2 where t2, else 1 where t1, else 0.
struct Taken {
  __mmask16 t1, t2, t3;
  __mmask16 only(int tap) const {
    switch (tap) {
      case 0: return static_cast<__mmask16>(~(t1 | t2 | t3));
      case 1: return static_cast<__mmask16>(t1 & ~t2 & ~t3);
      case 2: return static_cast<__mmask16>(t2 & ~t3);
      default: return t3;
    }
  }
};
inline Taken maxima(const Pairs& top, const Pairs& bottom, __m512& best) {
  Taken t;
  best = top.even;
  t.t1 = greater16(top.odd, best);
  best = _mm512_mask_blend_ps(t.t1, best, top.odd);
  t.t2 = greater16(bottom.even, best);
  best = _mm512_mask_blend_ps(t.t2, best, bottom.even);
  t.t3 = greater16(bottom.odd, best);
  best = _mm512_mask_blend_ps(t.t3, best, bottom.odd);
  return t;
}
// What the row loops below share with the AVX2 version: windows per step, their vector, the
// loads and stores of m (<= kWindows) of them, and the winners of 2x2 windows.
constexpr int64_t kWindows = 16;
using WindowVec = __m512;
inline __m512 load_windows(const float* p, int64_t m) {
  return _mm512_maskz_loadu_ps(cpu::simd::first(m), p);
}
inline void store_windows(float* p, __m512 v, int64_t m) {
  _mm512_mask_storeu_ps(p, cpu::simd::first(m), v);
}
inline __m512 plus_zero(__m512 v) { return _mm512_add_ps(_mm512_setzero_ps(), v); }
// v where the window's winner is `tap`, 0 elsewhere.
inline __m512 only(const Taken& t, int tap, __m512 v) {
  return _mm512_maskz_mov_ps(t.only(tap), v);
}
// The value at each window's winner among top's and bottom's columns.
inline __m512 at_winner(const Taken& t, const Pairs& top, const Pairs& bottom) {
  __m512 r = _mm512_mask_blend_ps(t.t1, top.even, top.odd);
  r = _mm512_mask_blend_ps(t.t2, r, bottom.even);
  return _mm512_mask_blend_ps(t.t3, r, bottom.odd);
}
// store_pairs with the masks `like` was read with.
inline void store_pairs(float* row, __m512 even, __m512 odd, const Pairs& like) {
  store_pairs(row, even, odd, like.lo, like.hi);
}
// window_maxima for Float32 3x3/2, 16 windows per step: the columns of window j are the even,
// odd and next even floats of each of its rows.
void window_maxima_3x3(const float* first, int64_t w, int64_t n, float* best, int32_t* tap) {
  for (int64_t j = 0; j < n; j += 16) {
    const int64_t m = std::min<int64_t>(16, n - j);
    __m512 b = _mm512_setzero_ps();
    __m512i t = _mm512_setzero_si512();
    for (int r = 0; r < 3; ++r) {
      const float* row = first + r * w + 2 * j;
      const Pairs head = load_pairs(row, m);
      const __m512 next = load_floats(row + 2, 2 * m - 1).even;
      const __m512 columns[3] = {head.even, head.odd, next};
      for (int c = 0; c < 3; ++c) {
        if (r == 0 && c == 0) {
          b = columns[0];
          continue;
        }
        const __mmask16 take = greater16(columns[c], b);
        b = _mm512_mask_blend_ps(take, b, columns[c]);
        t = _mm512_mask_mov_epi32(t, take, _mm512_set1_epi32(r * 3 + c));
      }
    }
    _mm512_mask_storeu_ps(best + j, cpu::simd::first(m), b);
    _mm512_mask_storeu_epi32(tap + j, cpu::simd::first(m), t);
  }
}
#elif defined(LOOM_CPU_SIMD)
// AVX2, Float32, 8 windows of 2x2/2 per step; masks are __m256 whose lanes are all ones or zeros.
// The first min(count, 8) floats at p, 0 in the other lanes; and their store. Masked moves only
// for fewer than 8: vmaskmovps is far slower than a plain move on some processors (on a Zen 3,
// the ResNet-50 stem's MaxPool took 22 ms with masked loads throughout, 5 ms without).
inline __m256 load8(const float* p, int64_t count) {
  return count >= 8 ? _mm256_loadu_ps(p)
                    : _mm256_maskload_ps(p, cpu::simd::first(count));
}
inline void store8(float* p, __m256 v, int64_t count) {
  if (count >= 8) {
    _mm256_storeu_ps(p, v);
  } else if (count > 0) {
    _mm256_maskstore_ps(p, cpu::simd::first(count), v);
  }
}
// Splits `count` (<= 16) floats from row into even and odd; lanes past them read nothing and
// hold 0.
struct Pairs {
  __m256 even, odd;
  int64_t count;  // the floats read
};
inline Pairs load_floats(const float* row, int64_t count) {
  const __m256 a = load8(row, count);
  const __m256 b = load8(row + 8, count - 8);
  // [a0 a2 b0 b2 | a4 a6 b4 b6] -> [a0 a2 a4 a6 b0 b2 b4 b6], and the odd ones alike.
  const __m256 even = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
  const __m256 odd = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
  return {_mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(even), _MM_SHUFFLE(3, 1, 2, 0))),
          _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(odd), _MM_SHUFFLE(3, 1, 2, 0))),
          count};
}
// The first (even) and second (odd) columns of m (<= 8) 2x2/2 windows whose row starts at row.
inline Pairs load_pairs(const float* row, int64_t m) { return load_floats(row, 2 * m); }
// Stores the even and odd columns interleaved back (the inverse of load_pairs).
inline void store_pairs(float* row, __m256 even, __m256 odd, int64_t count) {
  const __m256 l = _mm256_unpacklo_ps(even, odd);  // e0 o0 e1 o1 | e4 o4 e5 o5
  const __m256 h = _mm256_unpackhi_ps(even, odd);  // e2 o2 e3 o3 | e6 o6 e7 o7
  store8(row, _mm256_permute2f128_ps(l, h, 0x20), count);
  store8(row + 8, _mm256_permute2f128_ps(l, h, 0x31), count - 8);
}
inline __m256 greater8(__m256 v, __m256 best) {
  return _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ),
                      _mm256_and_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q),
                                    _mm256_cmp_ps(best, best, _CMP_ORD_Q)));
}
// The taps taken over the window order (0, 0), (0, 1), (1, 0), (1, 1), as the AVX-512 version.
struct Taken {
  __m256 t1, t2, t3;
};
// The AVX-512 version's names for the row loops below.
constexpr int64_t kWindows = 8;
using WindowVec = __m256;
inline __m256 load_windows(const float* p, int64_t m) { return load8(p, m); }
inline void store_windows(float* p, __m256 v, int64_t m) { store8(p, v, m); }
inline __m256 plus_zero(__m256 v) { return _mm256_add_ps(_mm256_setzero_ps(), v); }
inline __m256 only(const Taken& t, int tap, __m256 v) {
  switch (tap) {
    case 0: return _mm256_andnot_ps(_mm256_or_ps(t.t1, _mm256_or_ps(t.t2, t.t3)), v);
    case 1: return _mm256_andnot_ps(_mm256_or_ps(t.t2, t.t3), _mm256_and_ps(t.t1, v));
    case 2: return _mm256_andnot_ps(t.t3, _mm256_and_ps(t.t2, v));
    default: return _mm256_and_ps(t.t3, v);
  }
}
inline __m256 at_winner(const Taken& t, const Pairs& top, const Pairs& bottom) {
  __m256 r = _mm256_blendv_ps(top.even, top.odd, t.t1);
  r = _mm256_blendv_ps(r, bottom.even, t.t2);
  return _mm256_blendv_ps(r, bottom.odd, t.t3);
}
inline void store_pairs(float* row, __m256 even, __m256 odd, const Pairs& like) {
  store_pairs(row, even, odd, like.count);
}
inline Taken maxima(const Pairs& top, const Pairs& bottom, __m256& best) {
  Taken t;
  best = top.even;
  t.t1 = greater8(top.odd, best);
  best = _mm256_blendv_ps(best, top.odd, t.t1);
  t.t2 = greater8(bottom.even, best);
  best = _mm256_blendv_ps(best, bottom.even, t.t2);
  t.t3 = greater8(bottom.odd, best);
  best = _mm256_blendv_ps(best, bottom.odd, t.t3);
  return t;
}
// window_maxima for Float32 3x3/2, 8 windows per step, as the AVX-512 version.
void window_maxima_3x3(const float* first, int64_t w, int64_t n, float* best, int32_t* tap) {
  for (int64_t j = 0; j < n; j += 8) {
    const int64_t m = std::min<int64_t>(8, n - j);
    __m256 b = _mm256_setzero_ps();
    __m256 t = _mm256_setzero_ps();  // the taps as int32 bits
    for (int r = 0; r < 3; ++r) {
      const float* row = first + r * w + 2 * j;
      const Pairs head = load_pairs(row, m);
      // The third columns: 2m - 1 floats from row + 2, or 16 where windows follow (the 16th,
      // which no lane keeps, is then the next block's first column).
      const __m256 next = load_floats(row + 2, j + 8 < n ? 16 : 2 * m - 1).even;
      const __m256 columns[3] = {head.even, head.odd, next};
      for (int c = 0; c < 3; ++c) {
        if (r == 0 && c == 0) {
          b = columns[0];
          continue;
        }
        const __m256 take = greater8(columns[c], b);
        b = _mm256_blendv_ps(b, columns[c], take);
        t = _mm256_blendv_ps(t, _mm256_castsi256_ps(_mm256_set1_epi32(r * 3 + c)), take);
      }
    }
    store8(best + j, b, m);
    store8(reinterpret_cast<float*>(tap + j), t, m);  // the int32 bits as they are
  }
}
#endif

// MaxPool, n inside windows of one row: y[j] = the maximum of window j.
template <typename T, int K>
void max_row(const T* first, int64_t w, int64_t n, T* y) {
#if defined(LOOM_CPU_SIMD)
  if constexpr (std::is_same_v<T, float> && K == 2) {
    for (int64_t j = 0; j < n; j += kWindows) {
      const int64_t m = std::min<int64_t>(kWindows, n - j);
      WindowVec best;
      maxima(load_pairs(first + 2 * j, m), load_pairs(first + w + 2 * j, m), best);
      store_windows(y + j, best, m);
    }
    return;
  }
#endif
  int32_t tap[kBlock];
  for (int64_t j = 0; j < n; j += kBlock) {
    window_maxima<T, K>(first + 2 * j, w, std::min(kBlock, n - j), y + j, tap);
  }
}

// MaxPoolGradGrad, n inside windows of one row: y[j] = grad at window j's first maximum
// (grad_first: grad's element at first's position).
template <typename T, int K>
void grad_at_max_row(const T* first, const T* grad_first, int64_t w, int64_t n, T* y) {
#if defined(LOOM_CPU_SIMD)
  if constexpr (std::is_same_v<T, float> && K == 2) {
    for (int64_t j = 0; j < n; j += kWindows) {
      const int64_t m = std::min<int64_t>(kWindows, n - j);
      WindowVec best;
      const Taken t = maxima(load_pairs(first + 2 * j, m), load_pairs(first + w + 2 * j, m), best);
      store_windows(y + j,
                    at_winner(t, load_pairs(grad_first + 2 * j, m),
                              load_pairs(grad_first + w + 2 * j, m)),
                    m);
    }
    return;
  }
#endif
  T best[kBlock];
  int32_t tap[kBlock];
  for (int64_t j0 = 0; j0 < n; j0 += kBlock) {
    const int64_t m = std::min(kBlock, n - j0);
    window_maxima<T, K>(first + 2 * j0, w, m, best, tap);
    for (int64_t j = 0; j < m; ++j) {
      y[j0 + j] = grad_first[(tap[j] / K) * w + tap[j] % K + 2 * (j0 + j)];
    }
  }
}

// MaxPoolGrad of non-overlapping 2x2/2 windows, n inside windows of one row: writes the window's
// 2x2 dx cells, 0 + dout at the first maximum (as the reference's zero plus dout), 0 elsewhere.
template <typename T>
void scatter_row_2x2(const T* first, T* dx_first, const T* d, int64_t w, int64_t n) {
#if defined(LOOM_CPU_SIMD)
  if constexpr (std::is_same_v<T, float>) {
    for (int64_t j = 0; j < n; j += kWindows) {
      const int64_t m = std::min<int64_t>(kWindows, n - j);
      WindowVec best;
      const Pairs top = load_pairs(first + 2 * j, m);
      const Taken t = maxima(top, load_pairs(first + w + 2 * j, m), best);
      const WindowVec dv = plus_zero(load_windows(d + j, m));
      store_pairs(dx_first + 2 * j, only(t, 0, dv), only(t, 1, dv), top);
      store_pairs(dx_first + w + 2 * j, only(t, 2, dv), only(t, 3, dv), top);
    }
    return;
  }
#endif
  T best[kBlock];
  int32_t tap[kBlock];
  for (int64_t j0 = 0; j0 < n; j0 += kBlock) {
    const int64_t m = std::min(kBlock, n - j0);
    window_maxima<T, 2>(first + 2 * j0, w, m, best, tap);
    T* top = dx_first + 2 * j0;
    T* bottom = top + w;
    for (int64_t j = 0; j < m; ++j) {
      const T v = T(0) + d[j0 + j];
      top[2 * j] = tap[j] == 0 ? v : T(0);
      top[2 * j + 1] = tap[j] == 1 ? v : T(0);
      bottom[2 * j] = tap[j] == 2 ? v : T(0);
      bottom[2 * j + 1] = tap[j] == 3 ? v : T(0);
    }
  }
}

// Runs fn(plane, oy) over every output row of every plane, split across the pool by rows.
template <typename Fn>
void for_each_row(const PoolGeometry& g, ThreadPool& pool, const Fn& fn) {
  pool.parallel_for(g.planes * g.oh, g.row_grain(), [&](int64_t begin, int64_t end) {
    int64_t p = begin / g.oh;
    int64_t oy = begin % g.oh;
    for (int64_t t = begin; t < end; ++t) {
      fn(p, oy);
      if (++oy == g.oh) {
        oy = 0;
        ++p;
      }
    }
  });
}

template <typename T, int K>
void fast_max_pool(const PoolGeometry& g, const T* x, T* y, ThreadPool& pool) {
  if (g.uniform_rows()) {
    pool.parallel_for(g.planes * g.oh, g.row_grain(), [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) max_row<T, 2>(x + t * 2 * g.w, g.w, g.ow, y + t * g.ow);
    });
    return;
  }
  const PoolGeometry::Columns in = g.inside_columns();
  for_each_row(g, pool, [&](int64_t p, int64_t oy) {
    const T* src = x + p * g.h * g.w;
    T* dst = y + (p * g.oh + oy) * g.ow;
    const bool inside = g.row_inside(oy);
    const int64_t lo = inside ? in.lo : g.ow;
    for (int64_t ox = 0; ox < lo; ++ox) dst[ox] = src[window_argmax(src, g.w, g.window(oy, ox))];
    if (!inside) return;
    const T* first = src + (oy * 2 - g.pad_top) * g.w + (in.lo * 2 - g.pad_left);
    max_row<T, K>(first, g.w, in.hi - in.lo, dst + in.lo);
    for (int64_t ox = in.hi; ox < g.ow; ++ox) {
      dst[ox] = src[window_argmax(src, g.w, g.window(oy, ox))];
    }
  });
}

template <typename T, int K>
void fast_max_pool_grad_grad(const PoolGeometry& g, const T* x, const T* grad, T* y,
                             ThreadPool& pool) {
  if (g.uniform_rows()) {
    pool.parallel_for(g.planes * g.oh, g.row_grain(), [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        grad_at_max_row<T, 2>(x + t * 2 * g.w, grad + t * 2 * g.w, g.w, g.ow, y + t * g.ow);
      }
    });
    return;
  }
  const PoolGeometry::Columns in = g.inside_columns();
  for_each_row(g, pool, [&](int64_t p, int64_t oy) {
    const T* src = x + p * g.h * g.w;
    const T* gp = grad + p * g.h * g.w;
    T* dst = y + (p * g.oh + oy) * g.ow;
    const bool inside = g.row_inside(oy);
    const int64_t lo = inside ? in.lo : g.ow;
    for (int64_t ox = 0; ox < lo; ++ox) dst[ox] = gp[window_argmax(src, g.w, g.window(oy, ox))];
    if (!inside) return;
    const int64_t offset = (oy * 2 - g.pad_top) * g.w + (in.lo * 2 - g.pad_left);
    grad_at_max_row<T, K>(src + offset, gp + offset, g.w, in.hi - in.lo, dst + in.lo);
    for (int64_t ox = in.hi; ox < g.ow; ++ox) {
      dst[ox] = gp[window_argmax(src, g.w, g.window(oy, ox))];
    }
  });
}

// dx of the cells of a clipped window that no other window covers: 0 + dout at the first
// maximum, 0 elsewhere.
template <typename T>
void scatter_window_alone(const T* src, T* dst, int64_t w, const PoolGeometry::Window& win,
                          T dout) {
  for (int64_t iy = win.y0; iy < win.y1; ++iy) std::fill(dst + iy * w + win.x0, dst + iy * w + win.x1, T(0));
  dst[window_argmax(src, w, win)] += dout;
}

// Zeroes the dx cells of output row oy's input rows that no window covers (VALID: the columns
// right of the last window; below the last row of windows), for windows with kernel == stride.
template <typename T>
void zero_uncovered(const PoolGeometry& g, T* dst, int64_t oy) {
  const int64_t y0 = std::max<int64_t>(oy * g.sh - g.pad_top, 0);
  const int64_t y1 = oy + 1 == g.oh ? g.h : std::min(oy * g.sh - g.pad_top + g.kh, g.h);
  const int64_t x_end = std::min(g.ow * g.sw - g.pad_left, g.w);
  const int64_t rows_end = std::min(oy * g.sh - g.pad_top + g.kh, g.h);
  for (int64_t iy = y0; iy < y1; ++iy) {
    if (iy >= rows_end) {
      std::fill(dst + iy * g.w, dst + (iy + 1) * g.w, T(0));
    } else {
      std::fill(dst + iy * g.w + x_end, dst + (iy + 1) * g.w, T(0));
    }
  }
}

template <typename T, int K>
void fast_max_pool_grad(const PoolGeometry& g, const T* x, const T* dout, T* dx,
                        ThreadPool& pool) {
  if (g.uniform_rows()) {  // and the columns right of the last window (odd w) are zero
    pool.parallel_for(g.planes * g.oh, g.row_grain(), [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        T* dst = dx + t * 2 * g.w;
        scatter_row_2x2<T>(x + t * 2 * g.w, dst, dout + t * g.ow, g.w, g.ow);
        std::fill(dst + 2 * g.ow, dst + g.w, T(0));
        std::fill(dst + g.w + 2 * g.ow, dst + 2 * g.w, T(0));
      }
    });
    return;
  }
  const PoolGeometry::Columns in = g.inside_columns();
  if (!g.overlapping()) {  // 2x2/2: every dx element written once
    for_each_row(g, pool, [&](int64_t p, int64_t oy) {
      const T* src = x + p * g.h * g.w;
      const T* d = dout + (p * g.oh + oy) * g.ow;
      T* dst = dx + p * g.h * g.w;
      const bool inside = g.row_inside(oy);
      const int64_t lo = inside ? in.lo : g.ow;
      for (int64_t ox = 0; ox < lo; ++ox) scatter_window_alone(src, dst, g.w, g.window(oy, ox), d[ox]);
      if (inside) {
        const int64_t offset = (oy * 2 - g.pad_top) * g.w + (in.lo * 2 - g.pad_left);
        scatter_row_2x2<T>(src + offset, dst + offset, d + in.lo, g.w, in.hi - in.lo);
        for (int64_t ox = in.hi; ox < g.ow; ++ox) {
          scatter_window_alone(src, dst, g.w, g.window(oy, ox), d[ox]);
        }
      }
      zero_uncovered(g, dst, oy);
    });
    return;
  }
  // Overlapping windows add up in the reference's order (rows, then columns), on a zeroed plane.
  const int64_t grain = std::max<int64_t>(1, g.row_grain() / std::max<int64_t>(1, g.oh));
  pool.parallel_for(g.planes, grain, [&](int64_t begin, int64_t end) {
    T best[kBlock];
    int32_t tap[kBlock];
    for (int64_t p = begin; p < end; ++p) {
      const T* src = x + p * g.h * g.w;
      const T* d = dout + p * g.oh * g.ow;
      T* dst = dx + p * g.h * g.w;
      std::fill(dst, dst + g.h * g.w, T(0));
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        const T* drow = d + oy * g.ow;
        const bool inside = g.row_inside(oy);
        const int64_t lo = inside ? in.lo : g.ow;
        for (int64_t ox = 0; ox < lo; ++ox) dst[window_argmax(src, g.w, g.window(oy, ox))] += drow[ox];
        if (!inside) continue;
        const int64_t row0 = (oy * 2 - g.pad_top) * g.w;
        for (int64_t j0 = in.lo; j0 < in.hi; j0 += kBlock) {
          const int64_t m = std::min(kBlock, in.hi - j0);
          const int64_t x0 = row0 + j0 * 2 - g.pad_left;
          window_maxima<T, K>(src + x0, g.w, m, best, tap);
          for (int64_t j = 0; j < m; ++j) {
            dst[x0 + 2 * j + (tap[j] / K) * g.w + tap[j] % K] += drow[j0 + j];
          }
        }
        for (int64_t ox = in.hi; ox < g.ow; ++ox) {
          dst[window_argmax(src, g.w, g.window(oy, ox))] += drow[ox];
        }
      }
    }
  });
}

// AvgPool, inside windows: the same sum, in the same order, as window_average.
template <typename T, int K>
void fast_avg_pool(const PoolGeometry& g, const T* x, T* y, ThreadPool& pool) {
  const PoolGeometry::Columns in = g.inside_columns();
  for_each_row(g, pool, [&](int64_t p, int64_t oy) {
    const T* src = x + p * g.h * g.w;
    T* dst = y + (p * g.oh + oy) * g.ow;
    const bool inside = g.row_inside(oy);
    const int64_t lo = inside ? in.lo : g.ow;
    for (int64_t ox = 0; ox < lo; ++ox) dst[ox] = window_average(src, g.w, g.window(oy, ox));
    if (!inside) return;
    const T* first = src + (oy * 2 - g.pad_top) * g.w + (in.lo * 2 - g.pad_left);
    const int64_t w = g.w;
    for (int64_t j = 0; j < in.hi - in.lo; ++j) {
      const T* q = first + 2 * j;
      T sum = 0;
      for (int r = 0; r < K; ++r) {
        for (int c = 0; c < K; ++c) sum += q[r * w + c];
      }
      dst[in.lo + j] = sum / static_cast<T>(K * K);
    }
    for (int64_t ox = in.hi; ox < g.ow; ++ox) dst[ox] = window_average(src, g.w, g.window(oy, ox));
  });
}

// AvgPoolGrad of non-overlapping 2x2/2 windows: every dx cell is 0 + its window's share.
template <typename T>
void fast_avg_pool_grad_2x2(const PoolGeometry& g, const T* dout, T* dx, ThreadPool& pool) {
  const PoolGeometry::Columns in = g.inside_columns();
  for_each_row(g, pool, [&](int64_t p, int64_t oy) {
    const T* d = dout + (p * g.oh + oy) * g.ow;
    T* dst = dx + p * g.h * g.w;
    auto clipped = [&](int64_t ox) {
      const PoolGeometry::Window win = g.window(oy, ox);
      const T share = T(0) + d[ox] / static_cast<T>(win.count());
      for (int64_t iy = win.y0; iy < win.y1; ++iy) {
        std::fill(dst + iy * g.w + win.x0, dst + iy * g.w + win.x1, share);
      }
    };
    const bool inside = g.row_inside(oy);
    const int64_t lo = inside ? in.lo : g.ow;
    for (int64_t ox = 0; ox < lo; ++ox) clipped(ox);
    if (inside) {
      T* top = dst + (oy * 2 - g.pad_top) * g.w + (in.lo * 2 - g.pad_left);
      T* bottom = top + g.w;
      const T* dd = d + in.lo;
      for (int64_t j = 0; j < in.hi - in.lo; ++j) {
        const T share = T(0) + dd[j] / T(4);
        top[2 * j] = share;
        top[2 * j + 1] = share;
        bottom[2 * j] = share;
        bottom[2 * j + 1] = share;
      }
      for (int64_t ox = in.hi; ox < g.ow; ++ox) clipped(ox);
    }
    zero_uncovered(g, dst, oy);
  });
}

// ---------------------------------------------------------------------------------------------
// Kernels

// A node's geometry and path, fixed when its graph is compiled (LOOM_POOL read then).
struct PoolPlan {
  PoolGeometry g;
  bool fast;
};

// x is input 0; the pooled shape is the output's (MaxPool, AvgPool, MaxPoolGradGrad) or input
// 2's, dout (the gradients).
template <bool kPooledIsInput2>
Prepared prepare_pool(const PrepareContext& c) {
  const Shape& pooled = kPooledIsInput2 ? c.inputs[2].shape : c.outputs[0].shape;
  PoolPlan plan{pool_geometry(c.prim, c.inputs[0].shape, pooled), false};
  plan.fast = fast_path_takes(plan.g);
  return {std::make_shared<PoolPlan>(plan), 0};
}

template <typename T>
void max_pool(const KernelContext& k) {
  const PoolPlan& p = k.state<PoolPlan>();
  const T* x = k.in(0).data<T>();
  T* y = k.out(0).data<T>();
  if (!p.fast) return reference_max_pool(p.g, x, y, cpu::pool(k));
  if (p.g.kh == 2) return fast_max_pool<T, 2>(p.g, x, y, cpu::pool(k));
  fast_max_pool<T, 3>(p.g, x, y, cpu::pool(k));
}

// MaxPoolGrad(x, out, dout) → dx: each dout added at its window's first maximum.
template <typename T>
void max_pool_grad(const KernelContext& k) {
  const PoolPlan& p = k.state<PoolPlan>();
  const T* x = k.in(0).data<T>();
  const T* dout = k.in(2).data<T>();
  T* dx = k.out(0).data<T>();
  if (!p.fast) return reference_max_pool_grad(p.g, x, dout, dx, cpu::pool(k));
  if (p.g.kh == 2) return fast_max_pool_grad<T, 2>(p.g, x, dout, dx, cpu::pool(k));
  fast_max_pool_grad<T, 3>(p.g, x, dout, dx, cpu::pool(k));
}

// MaxPoolGradGrad(x, out, grad) → pooled: grad read at each window's first maximum.
template <typename T>
void max_pool_grad_grad(const KernelContext& k) {
  const PoolPlan& p = k.state<PoolPlan>();
  const T* x = k.in(0).data<T>();
  const T* grad = k.in(2).data<T>();
  T* y = k.out(0).data<T>();
  if (!p.fast) return reference_max_pool_grad_grad(p.g, x, grad, y, cpu::pool(k));
  if (p.g.kh == 2) return fast_max_pool_grad_grad<T, 2>(p.g, x, grad, y, cpu::pool(k));
  fast_max_pool_grad_grad<T, 3>(p.g, x, grad, y, cpu::pool(k));
}

template <typename T>
void avg_pool(const KernelContext& k) {
  const PoolPlan& p = k.state<PoolPlan>();
  const T* x = k.in(0).data<T>();
  T* y = k.out(0).data<T>();
  if (!p.fast) return reference_avg_pool(p.g, x, y, cpu::pool(k));
  if (p.g.kh == 2) return fast_avg_pool<T, 2>(p.g, x, y, cpu::pool(k));
  fast_avg_pool<T, 3>(p.g, x, y, cpu::pool(k));
}

// AvgPoolGrad(x, out, dout) → dx: each dout spread evenly over its window.
template <typename T>
void avg_pool_grad(const KernelContext& k) {
  const PoolPlan& p = k.state<PoolPlan>();
  const T* dout = k.in(2).data<T>();
  T* dx = k.out(0).data<T>();
  if (!p.fast || p.g.overlapping()) return reference_avg_pool_grad(p.g, dout, dx, cpu::pool(k));
  fast_avg_pool_grad_2x2(p.g, dout, dx, cpu::pool(k));
}

// Every kernel writes every output element (tested against NaN-filled outputs).
template <typename T>
void add_kernels(KernelRegistry& r) {
  constexpr DType dtype = DTypeOf<T>::value;
  r.add("MaxPool", dtype, max_pool<T>).with_prepare(prepare_pool<false>)
      .writes_every_output_element();
  r.add("MaxPoolGrad", dtype, max_pool_grad<T>).with_prepare(prepare_pool<true>)
      .writes_every_output_element();
  r.add("MaxPoolGradGrad", dtype, max_pool_grad_grad<T>).with_prepare(prepare_pool<false>)
      .writes_every_output_element();
  r.add("AvgPool", dtype, avg_pool<T>).with_prepare(prepare_pool<false>)
      .writes_every_output_element();
  r.add("AvgPoolGrad", dtype, avg_pool_grad<T>).with_prepare(prepare_pool<true>)
      .writes_every_output_element();
}

}  // namespace

void register_cpu_pool_kernels(KernelRegistry& r) {
  add_kernels<float>(r);
  add_kernels<double>(r);
}

}  // namespace loom::backend
