// Implicit-GEMM Float32 convolution (see conv_implicit_gemm.h).
//
// The GEMM is Y[o, p] = Σ_k W[o, k] · col[k, p] over the output positions p = (image, oy, ox)
// of the whole batch and k = (c, i, j). Blocking, GotoBLAS-style:
// - W is packed once per call into row blocks of kMR channels, k-major ([block][k][kMR]),
//   zero-padded to a multiple of kMR rows.
// - The positions are cut into chunks of kChunkPanels panels of kNR positions; a chunk is one
//   pool task. For each k block of kKC, a chunk packs each of its panels of col (kKC × kNR,
//   32 KiB: L1) straight from x, and runs the micro-kernel over every row block of W (the W
//   k block, o × kKC, stays in L2 across the chunk's panels), accumulating into y directly
//   where a panel lies inside one image (its rows are then runs of y), else into the chunk's
//   result tile (o × kNR per panel), copied to y at the end.
// - The micro-kernel keeps a kMR × kNR block of results in registers (simd.h's vector): on
//   AVX-512 8 × 32 in 16 zmm, per k two vector loads of the panel and eight broadcasts of W; on
//   AVX2 4 × 24 in 12 ymm, three loads and four broadcasts.
// Each result is a dot product over k in ascending order, whatever the chunking or threads.
#include "backends/cpu/conv_implicit_gemm.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cpu/simd.h"

namespace loom::backend::cpu {

namespace {

using std::int64_t;

// Output channels and vectors of output positions per micro-tile.
constexpr int64_t kMR = simd::kLanes == 16 ? 8 : 4;
constexpr int64_t kNV = simd::kLanes == 16 ? 2 : 3;
constexpr int64_t kNR = kNV * simd::kLanes;  // output positions per micro-tile (32 or 24)
constexpr int64_t kKC = 256;          // k per block
constexpr int64_t kChunkPanels = 8;   // panels per pool task

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A run of positions of one panel that lie on one output row: panel slots [q0, q0 + len) are
// output (image, oy, ox0 .. ox0 + len).
struct Segment {
  int64_t image, oy, ox0, q0, len;
};

void panel_segments(const ConvShape& s, int64_t p0, int64_t count, std::vector<Segment>& out) {
  out.clear();
  const int64_t plane = s.oh * s.ow;
  int64_t p = p0;
  int64_t q = 0;
  while (q < count) {
    const int64_t image = p / plane;
    const int64_t rest = p % plane;
    const int64_t oy = rest / s.ow;
    const int64_t ox = rest % s.ow;
    const int64_t len = std::min(s.ow - ox, count - q);
    out.push_back({image, oy, ox, q, len});
    p += len;
    q += len;
  }
}

// dst[t][q] (kc × kNR) = col[k0 + t, panel slot q], zero for slots past the segments.
void pack_panel(const ConvShape& s, const float* x, const std::vector<Segment>& segs,
                int64_t count, int64_t k0, int64_t kc, float* dst) {
  const int64_t taps = s.kh * s.kw;
  int64_t c = k0 / taps;
  int64_t i = (k0 / s.kw) % s.kh;
  int64_t j = k0 % s.kw;
  for (int64_t t = 0; t < kc; ++t) {
    float* d = dst + t * kNR;
    if (count < kNR) std::fill(d + count, d + kNR, 0.f);
    const int64_t off_x = j * s.dil_w - s.pad_left;
    // Output columns whose tap lands inside [0, w).
    const int64_t lo_all = off_x >= 0 ? 0 : ceil_div(-off_x, s.sw);
    const int64_t hi_all = s.w - off_x <= 0 ? 0 : ceil_div(s.w - off_x, s.sw);
    for (const Segment& g : segs) {
      float* dq = d + g.q0;
      const int64_t iy = g.oy * s.sh - s.pad_top + i * s.dil_h;
      if (iy < 0 || iy >= s.h) {
        std::fill(dq, dq + g.len, 0.f);
        continue;
      }
      const float* row = x + ((g.image * s.c + c) * s.h + iy) * s.w;
      const int64_t lo = std::clamp(lo_all - g.ox0, int64_t{0}, g.len);
      const int64_t hi = std::clamp(hi_all - g.ox0, lo, g.len);
#if defined(__AVX512F__)
      if (s.sw == 1) {
        // Slot q of the panel takes row[ox0 - q0 + off_x + q]: masked loads read only the
        // slots in [q0 + lo, q0 + hi) (masked-out lanes never touch memory) and masked stores
        // write only this segment's slots, zeros outside the valid range.
        const float* src = row + g.ox0 + off_x - g.q0;
        const std::uint64_t seg = ((std::uint64_t{1} << g.len) - 1) << g.q0;
        const std::uint64_t valid = ((std::uint64_t{1} << (hi - lo)) - 1) << (g.q0 + lo);
        for (int64_t b = 0; b < kNR; b += 16) {
          const auto store = static_cast<__mmask16>(seg >> b);
          if (store == 0) continue;
          const auto load = static_cast<__mmask16>(valid >> b);
          _mm512_mask_storeu_ps(d + b, store, _mm512_maskz_loadu_ps(load, src + b));
        }
        continue;
      }
#endif
      std::fill(dq, dq + lo, 0.f);
      if (s.sw == 1) {
        const float* src = row + g.ox0 + off_x;
        for (int64_t q = lo; q < hi; ++q) dq[q] = src[q];
      } else {
        const float* src = row + g.ox0 * s.sw + off_x;
        for (int64_t q = lo; q < hi; ++q) dq[q] = src[q * s.sw];
      }
      std::fill(dq + hi, dq + g.len, 0.f);
    }
    if (++j == s.kw) {
      j = 0;
      if (++i == s.kh) {
        i = 0;
        ++c;
      }
    }
  }
}

// c[r·ldc + q] (kMR × kNR) (+)= Σ_t a[t][r] · b[t][q].
void micro_kernel(const float* a, const float* b, float* c, int64_t ldc, int64_t kc,
                  bool accumulate) {
#if defined(LOOM_CPU_SIMD)
  using simd::kLanes;
  using simd::Vec;
  Vec acc[kMR][kNV];
  if (accumulate) {
#pragma GCC unroll 8
    for (int r = 0; r < kMR; ++r) {
#pragma GCC unroll 4
      for (int v = 0; v < kNV; ++v) acc[r][v] = simd::load(c + r * ldc + v * kLanes);
    }
  } else {
#pragma GCC unroll 8
    for (int r = 0; r < kMR; ++r) {
#pragma GCC unroll 4
      for (int v = 0; v < kNV; ++v) acc[r][v] = simd::zero();
    }
  }
  for (int64_t t = 0; t < kc; ++t) {
    Vec bv[kNV];
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) {
      bv[v] = simd::load(b + t * kNR + v * kLanes);
      // On AVX2, one load per vector: GCC would fold the load into each of the kMR FMAs, and
      // 16 loads per k is more than Zen 3's load ports give alongside 12 FMAs.
      if constexpr (kLanes == 8) asm("" : "+x"(bv[v]));
    }
#pragma GCC unroll 8
    for (int r = 0; r < kMR; ++r) {
      const Vec av = simd::broadcast(a[t * kMR + r]);
#pragma GCC unroll 4
      for (int v = 0; v < kNV; ++v) acc[r][v] = simd::fmadd(av, bv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kMR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) simd::store(c + r * ldc + v * kLanes, acc[r][v]);
  }
#else
  (void)a, (void)b, (void)c, (void)ldc, (void)kc, (void)accumulate;
#endif
}

}  // namespace

bool implicit_gemm_available() { return simd::kSimd; }

void conv2d_implicit_gemm(const ConvShape& s, const float* x, const float* w, float* y,
                          ThreadPool& pool) {
  const int64_t k_total = s.c * s.kh * s.kw;
  const int64_t plane = s.oh * s.ow;
  const int64_t positions = s.n * plane;
  const int64_t row_blocks = ceil_div(s.o, kMR);
  if (positions == 0 || s.o == 0) return;
  if (k_total == 0) {
    std::fill(y, y + s.n * s.o * plane, 0.f);
    return;
  }
  // y is written while x is still being read: if the caller's memory plan put them in
  // overlapping memory (an input that dies at this launch), read from a copy of x.
  std::vector<float> x_copy;
  const float* x_end = x + s.n * s.c * s.h * s.w;
  const float* y_end = y + s.n * s.o * plane;
  if (x < y_end && y < x_end) {
    x_copy.assign(x, x_end);
    x = x_copy.data();
  }
  // W packed as [row block][k][kMR], rows past o zero.
  std::vector<float> wp(static_cast<std::size_t>(row_blocks * k_total * kMR));
  pool.parallel_for(row_blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t rb = begin; rb < end; ++rb) {
      float* dst = wp.data() + rb * k_total * kMR;
      for (int64_t r = 0; r < kMR; ++r) {
        const int64_t o = rb * kMR + r;
        if (o >= s.o) {
          for (int64_t k = 0; k < k_total; ++k) dst[k * kMR + r] = 0.f;
          continue;
        }
        const float* src = w + o * k_total;
        for (int64_t k = 0; k < k_total; ++k) dst[k * kMR + r] = src[k];
      }
    }
  });
  const int64_t panels = ceil_div(positions, kNR);
  // (Fewer panels per task for small maps was tried: with one panel per task ResNet-50's 7x7
  // layers re-read all of W per panel, 9.4 MB, and lost 15-30%.)
  const int64_t chunk_panels = kChunkPanels;
  const int64_t chunks = ceil_div(panels, chunk_panels);
  const int64_t tile = row_blocks * kMR * kNR;  // one panel's results
  pool.parallel_for(chunks, 1, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> result, packed;
    thread_local std::vector<Segment> segs[kChunkPanels];
    result.resize(static_cast<std::size_t>(kChunkPanels * tile));
    packed.resize(static_cast<std::size_t>(kKC * kNR));
    for (int64_t chunk = begin; chunk < end; ++chunk) {
      const int64_t first = chunk * chunk_panels;
      const int64_t count = std::min(chunk_panels, panels - first);
      for (int64_t pi = 0; pi < count; ++pi) {
        const int64_t p0 = (first + pi) * kNR;
        panel_segments(s, p0, std::min(kNR, positions - p0), segs[pi]);
      }
      // A full panel inside one image, with o a multiple of kMR, is accumulated in y itself
      // (row o of the panel is y[image, o, s0 .. s0 + kNR), stride plane); any other goes
      // through the chunk's result tile and is copied out at the end.
      bool direct[kChunkPanels];
      for (int64_t pi = 0; pi < count; ++pi) {
        const int64_t p0 = (first + pi) * kNR;
        direct[pi] = s.o % kMR == 0 && p0 + kNR <= positions && p0 / plane == (p0 + kNR - 1) / plane;
      }
      for (int64_t k0 = 0; k0 < k_total; k0 += kKC) {
        const int64_t kc = std::min(kKC, k_total - k0);
        for (int64_t pi = 0; pi < count; ++pi) {
          const int64_t p0 = (first + pi) * kNR;
          pack_panel(s, x, segs[pi], std::min(kNR, positions - p0), k0, kc, packed.data());
          float* res = result.data() + pi * tile;
          int64_t ldc = kNR;
          if (direct[pi]) {
            res = y + (p0 / plane) * s.o * plane + p0 % plane;
            ldc = plane;
          }
          for (int64_t rb = 0; rb < row_blocks; ++rb) {
            micro_kernel(wp.data() + (rb * k_total + k0) * kMR, packed.data(),
                         res + rb * kMR * ldc, ldc, kc, k0 > 0);
          }
        }
      }
      // Results to y: row o of a panel's tile sits at res[(o / kMR)·kMR·kNR + (o % kMR)·kNR].
      for (int64_t pi = 0; pi < count; ++pi) {
        if (direct[pi]) continue;
        const float* res = result.data() + pi * tile;
        for (const Segment& g : segs[pi]) {
          float* out = y + g.image * s.o * plane + g.oy * s.ow + g.ox0;
          for (int64_t o = 0; o < s.o; ++o) {
            std::memcpy(out + o * plane, res + o * kNR + g.q0,
                        static_cast<std::size_t>(g.len) * sizeof(float));
          }
        }
      }
    }
  });
}

}  // namespace loom::backend::cpu
