// Implicit-GEMM Float32 filter gradient (see conv_implicit_gemm.h).
//
// dw[o, k] = Σ_p dy[o, p] · col[k, p] over the positions p = (image, oy, ox) of the whole batch
// and k = (c, i, j). Here the reduction runs over positions, which are contiguous in NCHW, so
// the micro-kernel vectorizes along them (simd.h's vector, L lanes: 16 on AVX-512, 8 on AVX2):
// it keeps kRowsO rows of dy × 3 rows of col as accumulators of L lane sums (8 × 3 in 24 zmm;
// 4 × 3 in 12 ymm), and per L positions does kRowsO + 3 vector loads and 3·kRowsO FMAs (no
// transposes while packing). The lane sums are folded into the result at the end of each block
// of 512 positions.
// - Positions come in vectors of L; for each vector, where its L positions read x (at tap
//   c = i = j = 0, in a zero-padded copy of x when the convolution pads) and dy is computed once
//   per call: contiguous (one load), every other element (two loads and a permute: stride 2) or
//   anything else (a gather). A tap (c, i, j) only adds a constant offset.
// - A pool task owns a range of k (and, when k is short, of o): for each position block it
//   packs its col rows and the dy rows as [tile][vector][row][L] and runs the micro-kernel
//   over every (o tile, k tile) pair; its results live in a k-major buffer until the end.
// Sum order: dw[o, k] = ((b_0 + b_1) + b_2) + … over the position blocks in order, each b a
// fixed tree over the L lanes of the lane sums of its block. It depends on the shapes only, so
// results are bitwise the same for any LOOM_NUM_THREADS and any split of the output.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "backends/cpu/conv_implicit_gemm.h"

#if defined(__AVX512F__)
// GCC 12 flags the self-initialized _mm512_undefined_ps inside the unpack and shuffle
// intrinsics as uninitialized (a false positive of the header).
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include "backends/cpu/simd.h"

namespace loom::backend::cpu {

namespace {

using std::int64_t;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

constexpr int64_t kLanes = simd::kLanes;
constexpr int64_t kRowsO = kLanes == 16 ? 8 : 4;  // dy rows per micro-tile
constexpr int64_t kRowsK = 3;                     // col rows per micro-tile
constexpr int64_t kBlockVectors = 512 / kLanes;   // position vectors per block (sets the sum order)
constexpr int64_t kChunkK = 288;            // col rows per task, at most (a multiple of kRowsK)

// x as the filter gradient reads it: x itself, or a copy padded so that every tap lands inside.
struct Source {
  int64_t hp, wp;        // extent of a plane
  int64_t top, left;     // where x's (0, 0) sits in it
};

Source padded_source(const ConvShape& s) {
  const int64_t top = std::max<int64_t>(s.pad_top, 0);
  const int64_t left = std::max<int64_t>(s.pad_left, 0);
  const int64_t last_y = (s.oh - 1) * s.sh - s.pad_top + (s.kh - 1) * s.dil_h;
  const int64_t last_x = (s.ow - 1) * s.sw - s.pad_left + (s.kw - 1) * s.dil_w;
  return {top + std::max(s.h, last_y + 1), left + std::max(s.w, last_x + 1), top, left};
}

enum class Access : std::uint8_t { kContiguous, kStride2, kGather };

// Where the L positions of each vector read a source: lane q reads base[index[v·L + q]]
// (positions past the end are masked off).
struct Positions {
  std::vector<std::int32_t> index;
  std::vector<Access> access;
  int64_t vectors = 0, count = 0;
};

template <typename Offset>
Positions position_vectors(int64_t count, const Offset& offset) {
  Positions pv;
  pv.count = count;
  pv.vectors = ceil_div(count, kLanes);
  pv.index.assign(static_cast<std::size_t>(pv.vectors * kLanes), 0);
  pv.access.assign(static_cast<std::size_t>(pv.vectors), Access::kGather);
  for (int64_t p = 0; p < count; ++p) pv.index[p] = static_cast<std::int32_t>(offset(p));
  for (int64_t v = 0; v < pv.vectors; ++v) {
    if ((v + 1) * kLanes > count) break;
    const std::int32_t* idx = pv.index.data() + v * kLanes;
    bool unit = true, two = true;
    for (int64_t q = 1; q < kLanes; ++q) {
      unit = unit && idx[q] == idx[0] + q;
      two = two && idx[q] == idx[0] + 2 * q;
    }
    pv.access[v] = unit ? Access::kContiguous : two ? Access::kStride2 : Access::kGather;
  }
  return pv;
}

#if defined(LOOM_CPU_SIMD)

using simd::Vec;

#if defined(__AVX512F__)
// The 16 values of vector v of `src` (positions past the end read as 0).
inline __m512 load_positions(const Positions& pv, const float* src, int64_t v) {
  const std::int32_t* idx = pv.index.data() + v * kLanes;
  switch (pv.access[v]) {
    case Access::kContiguous:
      return _mm512_loadu_ps(src + idx[0]);
    case Access::kStride2: {
      const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                             28, 30);
      const __m512 lo = _mm512_loadu_ps(src + idx[0]);
      const __m512 hi = _mm512_maskz_loadu_ps(0x7fff, src + idx[0] + 16);  // stops at idx + 30
      return _mm512_permutex2var_ps(lo, even, hi);
    }
    case Access::kGather:
    default: {
      const int64_t left = pv.count - v * kLanes;
      const __mmask16 mask =
          left >= kLanes ? __mmask16(0xffff) : static_cast<__mmask16>((1u << left) - 1);
      return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mask,
                                      _mm512_loadu_si512(idx), src, 4);
    }
  }
}
#else
// The 8 values of vector v of `src` (positions past the end read as 0).
inline __m256 load_positions(const Positions& pv, const float* src, int64_t v) {
  const std::int32_t* idx = pv.index.data() + v * kLanes;
  switch (pv.access[v]) {
    case Access::kContiguous:
      return _mm256_loadu_ps(src + idx[0]);
    case Access::kStride2: {
      // Elements 0, 2, ..., 14: 0-7 from lo, 7-14 from hi (which stops at idx + 14).
      const __m256 lo = _mm256_loadu_ps(src + idx[0]);
      const __m256 hi = _mm256_loadu_ps(src + idx[0] + 7);
      // [0 2 8 10 | 4 6 12 14], then the 64-bit pairs in order.
      const __m256 mixed = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 2, 0));
      return _mm256_castpd_ps(
          _mm256_permute4x64_pd(_mm256_castps_pd(mixed), _MM_SHUFFLE(3, 1, 2, 0)));
    }
    case Access::kGather:
    default: {
      const __m256 lanes = _mm256_castsi256_ps(simd::first(pv.count - v * kLanes));
      return _mm256_mask_i32gather_ps(_mm256_setzero_ps(), src,
                                      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(idx)),
                                      lanes, 4);
    }
  }
}
#endif

// Rows [0, rows) of a source (row r at src + offset(r); rows ≥ valid are zero) over vectors
// [v0, v0 + nv), into dst as [tile][vector][row in tile][L] with `tile_rows` rows per tile.
template <typename RowOffset>
void pack_rows(const Positions& pv, const float* src, int64_t rows, int64_t valid,
               const RowOffset& offset, int64_t tile_rows, int64_t v0, int64_t nv, float* dst,
               bool prefetch_next) {
  for (int64_t r = 0; r < rows; ++r) {
    float* d = dst + ((r / tile_rows) * nv * tile_rows + r % tile_rows) * kLanes;
    if (r >= valid) {
      for (int64_t v = 0; v < nv; ++v) simd::store(d + v * tile_rows * kLanes, simd::zero());
      continue;
    }
    const float* base = src + offset(r);
    for (int64_t v = 0; v < nv; ++v) {
      simd::store(d + v * tile_rows * kLanes, load_positions(pv, base, v0 + v));
    }
    if (prefetch_next) {
      // The next block's reads of this row, towards L2 while this block computes.
      const int64_t end = std::min(pv.vectors, v0 + 2 * nv);
      for (int64_t v = v0 + nv; v < end; ++v) {
        const std::int32_t* idx = pv.index.data() + v * kLanes;
        _mm_prefetch(reinterpret_cast<const char*>(base + idx[0]), _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(base + idx[kLanes - 1]), _MM_HINT_T1);
      }
    }
  }
}

#if defined(__AVX512F__)
// The 8 sums of a[0..7], each over its 16 lanes in a fixed tree.
inline __m256 sum_lanes8(const __m512* a) {
  __m512 s[4];
  for (int t = 0; t < 4; ++t) {
    s[t] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * t], a[2 * t + 1]),
                         _mm512_unpackhi_ps(a[2 * t], a[2 * t + 1]));
  }
  // Per 128-bit lane: partial sums of rows 0-3 and of rows 4-7.
  const __m512 s0123 =
      _mm512_add_ps(_mm512_shuffle_ps(s[0], s[1], _MM_SHUFFLE(1, 0, 1, 0)),
                    _mm512_shuffle_ps(s[0], s[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 s4567 =
      _mm512_add_ps(_mm512_shuffle_ps(s[2], s[3], _MM_SHUFFLE(1, 0, 1, 0)),
                    _mm512_shuffle_ps(s[2], s[3], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 u = _mm512_add_ps(_mm512_shuffle_f32x4(s0123, s4567, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_f32x4(s0123, s4567, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 t = _mm512_add_ps(u, _mm512_shuffle_f32x4(u, u, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm512_castps512_ps256(_mm512_shuffle_f32x4(t, t, _MM_SHUFFLE(0, 0, 2, 0)));
}
// t[r] += the sum of acc[r]'s lanes, r < 8.
inline void add_lane_sums(float* t, const __m512* acc) {
  _mm256_storeu_ps(t, _mm256_add_ps(_mm256_loadu_ps(t), sum_lanes8(acc)));
}
#else
// t[r] += the sum of acc[r]'s 8 lanes, r < 4, each in a fixed tree.
inline void add_lane_sums(float* t, const __m256* acc) {
  const __m256 s01 = _mm256_hadd_ps(acc[0], acc[1]);  // a0 01 23, a1 01 23 | a0 45 67, a1 45 67
  const __m256 s23 = _mm256_hadd_ps(acc[2], acc[3]);
  const __m256 u = _mm256_hadd_ps(s01, s23);  // a0..a3 over lanes 0-3 | over lanes 4-7
  const __m128 sums = _mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1));
  _mm_storeu_ps(t, _mm_add_ps(_mm_loadu_ps(t), sums));
}
#endif

// acc_t[j·ldt + r] += Σ over nv vectors of a[r] · b[j] (r < kRowsO dy rows, j < 3 col rows).
void micro_kernel(const float* a, const float* b, int64_t nv, float* acc_t, int64_t ldt) {
  Vec acc[kRowsK][kRowsO];
  for (int j = 0; j < kRowsK; ++j)
    for (int r = 0; r < kRowsO; ++r) acc[j][r] = simd::zero();
  for (int64_t v = 0; v < nv; ++v) {
    Vec b0 = simd::load(b);
    Vec b1 = simd::load(b + kLanes);
    Vec b2 = simd::load(b + 2 * kLanes);
    // On AVX2, the col vectors in registers too: folded into each FMA they made 16 loads per 12
    // FMAs, more than Zen 3's load ports give.
    if constexpr (kLanes == 8) asm("" : "+x"(b0), "+x"(b1), "+x"(b2));
#pragma GCC unroll 8
    for (int r = 0; r < kRowsO; ++r) {
      Vec av = simd::load(a + r * kLanes);
      asm("" : "+v"(av));  // one load, three FMAs (GCC would fold the load into each FMA)
      acc[0][r] = simd::fmadd(av, b0, acc[0][r]);
      acc[1][r] = simd::fmadd(av, b1, acc[1][r]);
      acc[2][r] = simd::fmadd(av, b2, acc[2][r]);
    }
    a += kRowsO * kLanes;
    b += kRowsK * kLanes;
  }
  for (int j = 0; j < kRowsK; ++j) add_lane_sums(acc_t + j * ldt, acc[j]);
}

#endif  // LOOM_CPU_SIMD

}  // namespace

bool conv2d_filter_implicit_fits(const ConvShape& s) {
  const Source src = padded_source(s);
  const int64_t limit = std::numeric_limits<std::int32_t>::max();
  return s.n * s.c * src.hp * src.wp < limit && s.n * s.o * s.oh * s.ow < limit;
}

void conv2d_backprop_filter_implicit_gemm(const ConvShape& s, const float* dy, const float* x,
                                          float* dw, ThreadPool& pool) {
#if defined(LOOM_CPU_SIMD)
  const int64_t taps = s.kh * s.kw;
  const int64_t k_total = s.c * taps;
  const int64_t plane = s.oh * s.ow;
  const int64_t positions = s.n * plane;
  if (k_total == 0 || s.o == 0) return;
  if (positions == 0) {
    std::fill(dw, dw + s.o * k_total, 0.f);
    return;
  }
  // x, zero-padded where a tap would leave it.
  const Source src = padded_source(s);
  const int64_t src_plane = src.hp * src.wp;
  // Scratch kept by the calling thread between calls (fresh pages cost more than the copies).
  // (Lambdas run on other threads must reach them through these pointers: a thread_local named
  // inside a lambda is that thread's own.)
  thread_local std::vector<float> padded_buffer, dy_buffer;
  const float* xs = x;
  if (src.hp != s.h || src.wp != s.w) {
    padded_buffer.resize(static_cast<std::size_t>(s.n * s.c * src_plane));
    float* padded = padded_buffer.data();
    pool.parallel_for(s.n * s.c, 16, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        float* d = padded + t * src_plane;
        std::fill(d, d + src_plane, 0.f);
        for (int64_t iy = 0; iy < s.h; ++iy) {
          std::memcpy(d + (iy + src.top) * src.wp + src.left, x + (t * s.h + iy) * s.w,
                      static_cast<std::size_t>(s.w) * sizeof(float));
        }
      }
    });
    xs = padded;
  }
  // Tap (0, 0) of channel 0 for each position, and the dy of channel 0.
  const Positions px = position_vectors(positions, [&](int64_t p) {
    const int64_t image = p / plane, oy = p % plane / s.ow, ox = p % s.ow;
    return image * s.c * src_plane + (oy * s.sh + src.top - s.pad_top) * src.wp +
           ox * s.sw + src.left - s.pad_left;
  });
  const Positions pd = position_vectors(positions, [&](int64_t p) {
    return p / plane * s.o * plane + p % plane;
  });
  const auto tap_offset = [&](int64_t k) {
    const int64_t c = k / taps, i = k % taps / s.kw, j = k % s.kw;
    return c * src_plane + i * s.dil_h * src.wp + j * s.dil_w;
  };

  // dy packed once, block after block, each as [o tile][vector][row][L] (read in sequence by
  // every task).
  const int64_t o_tiles = ceil_div(s.o, kRowsO);
  const int64_t o_pad = o_tiles * kRowsO;
  const int64_t blocks = ceil_div(px.vectors, kBlockVectors);
  const int64_t block_stride = o_pad * kBlockVectors * kLanes;
  dy_buffer.resize(static_cast<std::size_t>(blocks * block_stride));
  float* dy_packed = dy_buffer.data();
  pool.parallel_for(blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t v0 = b * kBlockVectors;
      pack_rows(pd, dy, o_pad, s.o, [&](int64_t r) { return r * plane; }, kRowsO, v0,
                std::min(kBlockVectors, px.vectors - v0), dy_packed + b * block_stride, false);
    }
  });

  // Tasks: chunks of k, and of o when there are too few k chunks to keep the threads busy
  // (the split changes no sum). Fewer, longer k chunks read dy fewer times.
  const int64_t want = 2 * static_cast<int64_t>(pool.num_threads());
  const int64_t chunk_k =
      std::clamp(ceil_div(ceil_div(k_total, want), kRowsK) * kRowsK, kRowsK * 16, kChunkK);
  const int64_t k_chunks = ceil_div(k_total, chunk_k);
  const int64_t o_chunks = std::min(o_tiles, std::max<int64_t>(1, ceil_div(want, k_chunks)));
  const int64_t o_chunk = ceil_div(o_tiles, o_chunks) * kRowsO;
  pool.parallel_for(k_chunks * ceil_div(s.o, o_chunk), 1, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> col, acc;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t k0 = task % k_chunks * chunk_k;
      const int64_t o0 = task / k_chunks * o_chunk;
      const int64_t kc = std::min(chunk_k, k_total - k0);
      const int64_t oc = std::min(o_chunk, s.o - o0);
      const int64_t kc_pad = ceil_div(kc, kRowsK) * kRowsK;
      const int64_t oc_pad = ceil_div(oc, kRowsO) * kRowsO;
      col.resize(static_cast<std::size_t>(kc_pad * kBlockVectors * kLanes));
      acc.assign(static_cast<std::size_t>(kc_pad * oc_pad), 0.f);  // acc[k][o]
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t v0 = b * kBlockVectors;
        const int64_t nv = std::min(kBlockVectors, px.vectors - v0);
        pack_rows(px, xs, kc_pad, kc, [&](int64_t r) { return tap_offset(k0 + r); }, kRowsK, v0,
                  nv, col.data(), true);
        const float* dyp = dy_packed + b * block_stride + o0 * nv * kLanes;
        for (int64_t ot = 0; ot < oc_pad / kRowsO; ++ot) {
          const float* a = dyp + ot * nv * kRowsO * kLanes;
          for (int64_t kt = 0; kt < kc_pad / kRowsK; ++kt) {
            micro_kernel(a, col.data() + kt * nv * kRowsK * kLanes, nv,
                         acc.data() + kt * kRowsK * oc_pad + ot * kRowsO, oc_pad);
          }
        }
      }
      for (int64_t o = 0; o < oc; ++o) {
        float* d = dw + (o0 + o) * k_total + k0;
        for (int64_t k = 0; k < kc; ++k) d[k] = acc[k * oc_pad + o];
      }
    }
  });
#else
  (void)s, (void)dy, (void)x, (void)dw, (void)pool;
#endif
}

}  // namespace loom::backend::cpu
