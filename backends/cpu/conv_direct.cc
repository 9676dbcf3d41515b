// Direct Float32 convolutions for small channel counts (see conv_direct.h).
//
// Every call first copies what it reads into zero-padded planes (a thread's scratch buffer), so
// the inner loops see a "valid" convolution: for an output of oh × ow and a kh × kw kernel the
// padded input is (oh + kh - 1) × (ow + kw - 1) and an output row's tap (i, j) reads the padded
// row oy + i from column j on. The copy is 1/(o·kh·kw) of the arithmetic for these shapes and
// also means the kernels never read what they write (the runtime may hand out overlapping
// buffers to an op whose input dies).
//
// Register blocking, written once for the build's vector (simd.h: AVX-512, 16 lanes and 32
// registers; AVX2, 8 lanes and 16 registers), L lanes below:
// - rows: OB output channels × NV vectors (NV = 1 for rows up to L wide, 2 up to 2L; wider rows
//   go in 2L-column segments) of accumulators; per tap NV loads of the input row and OB
//   broadcast weights, OB·NV FMAs. OB ≤ 16 (NV = 1) or 12 (NV = 2) on AVX-512, 12 or 6 on AVX2.
// - filter gradient: OB output channels × JB taps j of one kernel row i; per L output columns
//   OB loads of dy, JB loads of x (shifted by j), OB·JB FMAs; the lane sums stay in registers
//   over all rows of all images of a chunk and are added up once per chunk.
// - the output channels as the vector (up to 16: one zmm, two ymm) for narrow rows
//   (channel_row_kernel) and for the filter gradient with more than 8 output channels
//   (channel_filter_kernel).
// The channel counts are split into equal blocks (6 = 6, 16 = 16 for rows; 6 = 3 + 3 for the
// 5-wide filter blocks) so no lanes of the blocking go to waste.
#include "backends/cpu/conv_direct.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backends/cpu/simd.h"

namespace loom::backend::cpu {

namespace {

using std::int64_t;

// Floating-point operations a pool task of the forward / input gradient should get at least,
// and of the filter gradient (fewer, larger chunks: each ends with horizontal sums and adds a
// partial to reduce).
constexpr double kTaskFlops = 2e6;
constexpr double kFilterChunkFlops = 8e6;
// A batch is cut into at least this many chunks (when it has as many images), so that both
// cores work at batch 32.
constexpr int64_t kMinChunks = 8;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Images per chunk: a function of the shapes only (the filter gradient's sum order rests on it).
int64_t images_per_chunk(const ConvShape& s, double task_flops) {
  const double per_image =
      std::max(2.0 * static_cast<double>(s.o * s.c * s.kh * s.kw * s.oh * s.ow), 1.0);
  const auto by_work = static_cast<int64_t>(std::ceil(task_flops / per_image));
  return std::max<int64_t>(1, std::min(by_work, ceil_div(s.n, kMinChunks)));
}

// Copies `planes` planes of h × w into planes of hp × wp, zero elsewhere, source (0, 0) at
// (top, left) (negative offsets crop the source).
void pad_planes(const float* src, int64_t planes, int64_t h, int64_t w, int64_t top, int64_t left,
                int64_t hp, int64_t wp, float* dst) {
  const int64_t q0 = std::clamp<int64_t>(left, 0, wp);
  const int64_t q1 = std::clamp<int64_t>(w + left, q0, wp);
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t r = 0; r < hp; ++r) {
      float* d = dst + (p * hp + r) * wp;
      const int64_t sr = r - top;
      if (sr < 0 || sr >= h) {
        std::fill(d, d + wp, 0.f);
        continue;
      }
      const float* s = src + (p * h + sr) * w - left;
      std::fill(d, d + q0, 0.f);
      std::copy(s + q0, s + q1, d + q0);
      std::fill(d + q1, d + wp, 0.f);
    }
  }
}

// A "valid" stride-1 convolution of one padded image: in (cin, oh + kh - 1, ow + kw - 1),
// weights packed as [cin][kh][kw][cout], out (cout, oh, ow). Only the padded rows
// [row_lo, row_hi) hold data (the rest are the zeros of the padding): an output row's taps on
// the others are skipped (the input gradient's padding of kh - 1 rows above and below is 30% of
// LeNet's conv2 taps; the sums are the same, a product with zero adds nothing).
struct Valid {
  int64_t cin, cout, oh, ow, kh, kw;
  int64_t row_lo = 0, row_hi = 0;  // within [0, hp()]; conv_images sets them
  int64_t hp() const { return oh + kh - 1; }
  int64_t wp() const { return ow + kw - 1; }
};

#if defined(LOOM_CPU_SIMD)

using simd::kLanes;
using simd::Mask;
using simd::Vec;

// Accumulators a kernel keeps in registers at most: 24 of AVX-512's 32, 12 of AVX2's 16 (the
// rest hold the loaded inputs and the broadcast weight).
constexpr int kAccumulators = simd::kRegisters * 3 / 4;

struct RowArgs {
  const float* x;  // padded input, channel 0, at (oy, x0)
  const float* w;  // packed weights at output channel o0
  float* y;        // output at (o0, oy, x0)
  int64_t cin, x_plane, wp, kh, kw, cout, y_plane, ow;
  Mask tail;       // the lanes of the last vector
  bool tail_full = false;  // whether they are all of them (AVX2 then stores it unmasked)
  int64_t i0 = 0, i1 = 0;  // the kernel rows [i0, i1) a call runs (row_block sets them)
};

// Output rows per call: enough independent accumulators (FMA latency × 2 ports = 8) for the few
// output channels of an input gradient, within kAccumulators.
constexpr int rows_per_call(int ob, int nv) {
  return std::clamp(kAccumulators / (ob * nv), 1, 4);
}

// R output rows × OB output channels × NV vectors of one 2L-column segment.
template <int R, int OB, int NV>
void row_kernel(const RowArgs& a) {
  Vec acc[R][OB][NV];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int b = 0; b < OB; ++b) {
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) acc[r][b][v] = simd::zero();
    }
  }
  for (int64_t ch = 0; ch < a.cin; ++ch) {
    for (int64_t i = a.i0; i < a.i1; ++i) {
      const float* xr = a.x + ch * a.x_plane + i * a.wp;
      const float* wtap = a.w + (ch * a.kh + i) * a.kw * a.cout;
      for (int64_t j = 0; j < a.kw; ++j, wtap += a.cout) {
        Vec xv[R][NV];
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
          for (int v = 0; v < NV; ++v) {
            const float* src = xr + r * a.wp + j + kLanes * v;
            xv[r][v] = v + 1 < NV ? simd::load(src) : simd::load_partial(a.tail, src);
          }
        }
#pragma GCC unroll 16
        for (int b = 0; b < OB; ++b) {
          const Vec wb = simd::broadcast(wtap[b]);
#pragma GCC unroll 16
          for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
            for (int v = 0; v < NV; ++v) acc[r][b][v] = simd::fmadd(wb, xv[r][v], acc[r][b][v]);
          }
        }
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int b = 0; b < OB; ++b) {
      float* yb = a.y + b * a.y_plane + r * a.ow;
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) {
        // A masked store costs several plain ones on AVX2 (Zen 3): only where the row ends
        // inside the vector.
        if (v + 1 < NV || (kLanes == 8 && a.tail_full)) {
          simd::store(yb + kLanes * v, acc[r][b][v]);
        } else {
          simd::store(a.tail, yb + kLanes * v, acc[r][b][v]);
        }
      }
    }
  }
}

// Every output row of a segment: `kernel.template operator()<Rows>(args)` computes Rows rows from
// args (x and y at the first of them, the kernel rows [i0, i1)). The rows whose every tap reads
// data (padded rows [row_lo, row_hi)) go R at a time, then one at a time; the rows above and
// below them one at a time with only the kernel rows that read data (none: the row is zero).
template <int R, typename Args, typename Kernel>
void walk_rows(Args a, int64_t oh, int64_t row_lo, int64_t row_hi, const Kernel& kernel) {
  const int64_t full_lo = std::clamp<int64_t>(row_lo, 0, oh);
  const int64_t full_hi = std::clamp<int64_t>(row_hi - a.kh + 1, full_lo, oh);
  const auto at = [&](int64_t oy) {
    Args r = a;
    r.x += oy * a.wp;
    r.y += oy * a.ow;
    return r;
  };
  const auto clipped = [&](int64_t oy) {
    Args r = at(oy);
    r.i0 = std::max<int64_t>(0, row_lo - oy);
    r.i1 = std::min<int64_t>(a.kh, row_hi - oy);
    kernel.template operator()<1>(r);  // i0 >= i1: no taps, zeros stored
  };
  for (int64_t oy = 0; oy < full_lo; ++oy) clipped(oy);
  a.i0 = 0;
  a.i1 = a.kh;
  int64_t oy = full_lo;
  for (; oy + R <= full_hi; oy += R) kernel.template operator()<R>(at(oy));
  for (; oy < full_hi; ++oy) kernel.template operator()<1>(at(oy));
  for (; oy < oh; ++oy) clipped(oy);
}

// All output rows of one segment and channel block.
template <int OB, int NV>
void row_block(const RowArgs& a, int64_t oh, int64_t row_lo, int64_t row_hi) {
  walk_rows<rows_per_call(OB, NV)>(a, oh, row_lo, row_hi, []<int Rows>(const RowArgs& r) {
    row_kernel<Rows, OB, NV>(r);
  });
}

// The output channels as the vector, for 9 to 16 of them on narrow rows (LeNet's conv2: 16
// channels on rows 10 wide, where rows as vectors leave 6 of 16 lanes idle): acc[r][q] holds the
// channels of output position (oy + r, x0 + q) in kChannelVectors vectors; per tap that many
// (masked) loads of the packed weights and R·P broadcasts of the input. The accumulators go to
// NCHW through a small tile.
constexpr int kChannelVectors = 16 / kLanes;

struct ChannelRowArgs {
  const float* x;  // padded input, channel 0, at (oy, x0)
  const float* w;  // packed weights [cin][kh][kw][cout]
  float* y;        // output at (0, oy, x0)
  int64_t cin, x_plane, wp, kh, kw, cout, y_plane, ow;
  Mask lanes[kChannelVectors];  // the cout lanes of each vector
  int64_t i0 = 0, i1 = 0;
};

template <int R, int P>
void channel_row_kernel(const ChannelRowArgs& a) {
  constexpr int CV = kChannelVectors;
  Vec acc[R][P][CV];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int q = 0; q < P; ++q) {
#pragma GCC unroll 2
      for (int c = 0; c < CV; ++c) acc[r][q][c] = simd::zero();
    }
  }
  for (int64_t ch = 0; ch < a.cin; ++ch) {
    for (int64_t i = a.i0; i < a.i1; ++i) {
      const float* xr = a.x + ch * a.x_plane + i * a.wp;
      const float* wt = a.w + (ch * a.kh + i) * a.kw * a.cout;
      for (int64_t j = 0; j < a.kw; ++j) {
        Vec wv[CV];
#pragma GCC unroll 2
        for (int c = 0; c < CV; ++c) {
          wv[c] = simd::load_partial(a.lanes[c], wt + j * a.cout + c * kLanes);
        }
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
          for (int q = 0; q < P; ++q) {
            const Vec xb = simd::broadcast(xr[r * a.wp + q + j]);
#pragma GCC unroll 2
            for (int c = 0; c < CV; ++c) acc[r][q][c] = simd::fmadd(xb, wv[c], acc[r][q][c]);
          }
        }
      }
    }
  }
  alignas(64) float tile[R][P][16];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int q = 0; q < P; ++q) {
#pragma GCC unroll 2
      for (int c = 0; c < CV; ++c) simd::store(tile[r][q] + c * kLanes, acc[r][q][c]);
    }
  }
  for (int64_t o = 0; o < a.cout; ++o) {
    float* yo = a.y + o * a.y_plane;
    for (int r = 0; r < R; ++r) {
      for (int q = 0; q < P; ++q) yo[r * a.ow + q] = tile[r][q][o];
    }
  }
}

// Positions per call (a row's segment: 12 on AVX-512, 6 on AVX2) and rows per call: up to
// kAccumulators accumulators.
constexpr int kMaxChannelPositions = std::min(12, kAccumulators / kChannelVectors);
constexpr int channel_rows(int p) {
  return std::clamp(kAccumulators / (p * kChannelVectors), 1, 4);
}

template <int P = 1>
void run_channel_row(int64_t width, const ChannelRowArgs& a, int64_t oh, int64_t row_lo,
                     int64_t row_hi) {
  if constexpr (P <= kMaxChannelPositions) {
    if (width != P) return run_channel_row<P + 1>(width, a, oh, row_lo, row_hi);
    walk_rows<channel_rows(P)>(a, oh, row_lo, row_hi, []<int Rows>(const ChannelRowArgs& r) {
      channel_row_kernel<Rows, P>(r);
    });
  }
}

// Rows as vectors fill at least 12 of 16 lanes from 12 columns on (and the weights' broadcasts
// are then shared by more positions): the channel layout only for narrower outputs.
bool channel_rows_suit(const Valid& v) { return v.cout > 8 && v.cout <= 16 && v.ow < 12; }

// A row in segments of equal width (one on AVX-512, whose rows here are under 12 wide).
void channel_conv_image(const Valid& v, const float* xp, const float* wt, float* y) {
  ChannelRowArgs a{.x = xp, .w = wt, .y = y, .cin = v.cin, .x_plane = v.hp() * v.wp(),
                   .wp = v.wp(), .kh = v.kh, .kw = v.kw, .cout = v.cout,
                   .y_plane = v.oh * v.ow, .ow = v.ow};
  for (int c = 0; c < kChannelVectors; ++c) a.lanes[c] = simd::first(v.cout - c * kLanes);
  const int64_t width = ceil_div(v.ow, ceil_div(v.ow, kMaxChannelPositions));
  for (int64_t x0 = 0; x0 < v.ow; x0 += width) {
    ChannelRowArgs s = a;
    s.x += x0;
    s.y += x0;
    run_channel_row(std::min(width, v.ow - x0), s, v.oh, v.row_lo, v.row_hi);
  }
}

// 16 (NV = 1) or 12 (NV = 2) output channels per block on AVX-512, 12 or 6 on AVX2.
constexpr int max_row_block(int nv) { return std::min(16, kAccumulators / nv); }

template <int NV, int OB = 1>
void run_row(int64_t ob, const RowArgs& a, int64_t oh, int64_t row_lo, int64_t row_hi) {
  if constexpr (OB <= max_row_block(NV)) {
    if (ob == OB) return row_block<OB, NV>(a, oh, row_lo, row_hi);
    run_row<NV, OB + 1>(ob, a, oh, row_lo, row_hi);
  }
}

void valid_conv_image(const Valid& v, const float* xp, const float* wt, float* y) {
  if (channel_rows_suit(v)) return channel_conv_image(v, xp, wt, y);
  const int64_t wp = v.wp();
  const int64_t x_plane = v.hp() * wp;
  const int64_t y_plane = v.oh * v.ow;
  for (int64_t x0 = 0; x0 < v.ow; x0 += 2 * kLanes) {
    const int64_t width = std::min<int64_t>(2 * kLanes, v.ow - x0);
    const int nv = width > kLanes ? 2 : 1;
    const int64_t blocks = ceil_div(v.cout, max_row_block(nv));
    const int64_t ob = ceil_div(v.cout, blocks);
    for (int64_t o0 = 0; o0 < v.cout; o0 += ob) {
      const RowArgs a{.x = xp + x0, .w = wt + o0, .y = y + o0 * y_plane + x0, .cin = v.cin,
                      .x_plane = x_plane, .wp = wp, .kh = v.kh, .kw = v.kw, .cout = v.cout,
                      .y_plane = y_plane, .ow = v.ow,
                      .tail = simd::first(width - kLanes * (nv - 1)),
                      .tail_full = width == kLanes * nv};
      const int64_t count = std::min(ob, v.cout - o0);
      if (nv == 1) {
        run_row<1>(count, a, v.oh, v.row_lo, v.row_hi);
      } else {
        run_row<2>(count, a, v.oh, v.row_lo, v.row_hi);
      }
    }
  }
}

struct FilterArgs {
  const float* dy;  // dy of the first image at output channel o0
  const float* x;   // padded plane of the first image at (i, j0)
  float* dw;        // dw at (o0, ch, i, j0)
  int64_t images, dy_image, x_image, plane, oh, ow, wp, dw_o;
};

template <int OB, int JB>
void filter_kernel(const FilterArgs& a) {
  Vec acc[OB][JB];
  #pragma GCC unroll 16
  for (int b = 0; b < OB; ++b) {
    #pragma GCC unroll 16
    for (int t = 0; t < JB; ++t) acc[b][t] = simd::zero();
  }
  const Mask tail = simd::first(a.ow % kLanes == 0 ? kLanes : a.ow % kLanes);
  for (int64_t image = 0; image < a.images; ++image) {
    const float* d = a.dy + image * a.dy_image;
    const float* xi = a.x + image * a.x_image;
    for (int64_t oy = 0; oy < a.oh; ++oy) {
      const float* drow = d + oy * a.ow;
      const float* xrow = xi + oy * a.wp;
      const auto step = [&](int64_t x0, auto load) {
        Vec dv[OB];
        #pragma GCC unroll 16
        for (int b = 0; b < OB; ++b) dv[b] = load(drow + b * a.plane + x0);
        #pragma GCC unroll 16
        for (int t = 0; t < JB; ++t) {
          const Vec xv = load(xrow + x0 + t);
          #pragma GCC unroll 16
          for (int b = 0; b < OB; ++b) acc[b][t] = simd::fmadd(dv[b], xv, acc[b][t]);
        }
      };
      int64_t x0 = 0;
      for (; x0 + kLanes <= a.ow; x0 += kLanes) {
        step(x0, [](const float* p) { return simd::load(p); });
      }
      // The last, partial vector: zeros past the row (the lane sums add every lane).
      if (x0 < a.ow) step(x0, [&](const float* p) { return simd::load(tail, p); });
    }
  }
  #pragma GCC unroll 16
  for (int b = 0; b < OB; ++b) {
    #pragma GCC unroll 16
    for (int t = 0; t < JB; ++t) a.dw[b * a.dw_o + t] = simd::lane_sum(acc[b][t]);
  }
}

constexpr int kMaxFilterTaps = 5;
// Output channels per filter block: accumulators, dy vectors and one x vector within all but two
// of the registers (30 zmm, 14 ymm).
constexpr int max_filter_block(int jb) { return std::min(12, (simd::kRegisters - 3) / (jb + 1)); }

template <int JB, int OB = 1>
void run_filter_ob(int64_t ob, const FilterArgs& a) {
  if constexpr (OB <= max_filter_block(JB)) {
    if (ob == OB) return filter_kernel<OB, JB>(a);
    run_filter_ob<JB, OB + 1>(ob, a);
  }
}

template <int JB = 1>
void run_filter(int64_t jb, int64_t ob, const FilterArgs& a) {
  if constexpr (JB <= kMaxFilterTaps) {
    if (jb == JB) return run_filter_ob<JB>(ob, a);
    run_filter<JB + 1>(jb, ob, a);
  }
}

// dw[o, ch, i, j] for every o and j over the unit's images; xp holds the images' padded planes
// of channel ch (hp × wp each), dy points at the first image.
void filter_unit(const ConvShape& s, const float* dy, const float* xp, int64_t images, int64_t i,
                 int64_t wp, int64_t x_image, float* dw_ci) {
  const int64_t jb = ceil_div(s.kw, ceil_div(s.kw, kMaxFilterTaps));
  const int64_t ob = ceil_div(s.o, ceil_div(s.o, max_filter_block(static_cast<int>(jb))));
  const int64_t plane = s.oh * s.ow;
  const int64_t dw_o = s.c * s.kh * s.kw;
  for (int64_t o0 = 0; o0 < s.o; o0 += ob) {
    for (int64_t j0 = 0; j0 < s.kw; j0 += jb) {
      const FilterArgs a{.dy = dy + o0 * plane, .x = xp + i * wp + j0, .dw = dw_ci + o0 * dw_o + j0,
                         .images = images, .dy_image = s.o * plane, .x_image = x_image,
                         .plane = plane, .oh = s.oh, .ow = s.ow, .wp = wp, .dw_o = dw_o};
      run_filter(std::min(jb, s.kw - j0), std::min(ob, s.o - o0), a);
    }
  }
}

// The filter gradient with the output channels as the vector (for more than 8 of them): dy of
// a chunk is transposed to [image][position][16 channels] once, and for each position the dy
// vectors (one zmm, two ymm) are multiplied by RB × KW broadcast inputs (kernel rows
// i0 .. i0 + RB of one input channel), so that every load is either aligned or a 4-byte
// broadcast and no lane sums are needed; lane o of acc[r][j] is dw[o, ch, i0 + r, j].
struct ChannelArgs {
  const float* dyt;  // the chunk's transposed dy
  const float* x;    // padded plane of channel ch of the first image, at row i0
  float* dw;         // dw at (0, ch, i0, 0)
  int64_t images, oh, ow, wp, x_image, dw_o, o;
};

template <int RB, int KW>
void channel_filter_kernel(const ChannelArgs& a) {
  constexpr int CV = kChannelVectors;
  Vec acc[RB][KW][CV];
#pragma GCC unroll 16
  for (int r = 0; r < RB; ++r) {
#pragma GCC unroll 16
    for (int j = 0; j < KW; ++j) {
#pragma GCC unroll 2
      for (int c = 0; c < CV; ++c) acc[r][j][c] = simd::zero();
    }
  }
  const float* d = a.dyt;
  for (int64_t image = 0; image < a.images; ++image) {
    for (int64_t oy = 0; oy < a.oh; ++oy) {
      const float* xr = a.x + image * a.x_image + oy * a.wp;
      for (int64_t ox = 0; ox < a.ow; ++ox, d += 16) {
        Vec dv[CV];
#pragma GCC unroll 2
        for (int c = 0; c < CV; ++c) dv[c] = simd::load(d + c * kLanes);
#pragma GCC unroll 16
        for (int r = 0; r < RB; ++r) {
#pragma GCC unroll 16
          for (int j = 0; j < KW; ++j) {
            const Vec xb = simd::broadcast(xr[r * a.wp + ox + j]);
#pragma GCC unroll 2
            for (int c = 0; c < CV; ++c) acc[r][j][c] = simd::fmadd(dv[c], xb, acc[r][j][c]);
          }
        }
      }
    }
  }
  alignas(64) float t[16];
  for (int r = 0; r < RB; ++r) {
    for (int j = 0; j < KW; ++j) {
      for (int c = 0; c < CV; ++c) simd::store(t + c * kLanes, acc[r][j][c]);
      for (int64_t o = 0; o < a.o; ++o) a.dw[o * a.dw_o + r * KW + j] = t[o];
    }
  }
}

constexpr int kMaxChannelTaps = 7;
// Kernel rows per call: RB·KW·CV accumulators within all but 7 registers (25 zmm, 9 ymm), at
// least 1, at most 8.
constexpr int max_channel_rows(int kw) {
  return std::clamp((simd::kRegisters - 7) / (kw * kChannelVectors), 1, 8);
}

template <int KW, int RB = 1>
void run_channel_rb(int64_t rb, const ChannelArgs& a) {
  if constexpr (RB <= max_channel_rows(KW)) {
    if (rb == RB) return channel_filter_kernel<RB, KW>(a);
    run_channel_rb<KW, RB + 1>(rb, a);
  }
}

template <int KW = 1>
void run_channel(int64_t kw, int64_t rb, const ChannelArgs& a) {
  if constexpr (KW <= kMaxChannelTaps) {
    if (kw == KW) return run_channel_rb<KW>(rb, a);
    run_channel<KW + 1>(kw, rb, a);
  }
}

// Where the transposition of dy (16 scalar stores per position) is small against the
// c·kh·kw FMAs per position it feeds.
bool channel_filter_suits(const ConvShape& s) {
  return s.o > 8 && s.kw <= kMaxChannelTaps && s.c * s.kh * s.kw >= 48;
}

// dw (every o, c, i, j) over `images` images: dyt as above, xp the images' padded planes
// (c × hp × wp each).
void channel_filter_unit(const ConvShape& s, const float* dyt, const float* xp, int64_t images,
                         int64_t hp, int64_t wp, float* dw) {
  const int64_t rows = max_channel_rows(static_cast<int>(s.kw));
  const int64_t rb = ceil_div(s.kh, ceil_div(s.kh, rows));
  for (int64_t ch = 0; ch < s.c; ++ch) {
    for (int64_t i0 = 0; i0 < s.kh; i0 += rb) {
      const ChannelArgs a{.dyt = dyt, .x = xp + (ch * hp + i0) * wp,
                          .dw = dw + (ch * s.kh + i0) * s.kw, .images = images, .oh = s.oh,
                          .ow = s.ow, .wp = wp, .x_image = s.c * hp * wp,
                          .dw_o = s.c * s.kh * s.kw, .o = s.o};
      run_channel(s.kw, std::min(rb, s.kh - i0), a);
    }
  }
}

#else  // plain loops, same order of work

void valid_conv_image(const Valid& v, const float* xp, const float* wt, float* y) {
  const int64_t wp = v.wp();
  for (int64_t o = 0; o < v.cout; ++o) {
    for (int64_t oy = 0; oy < v.oh; ++oy) {
      for (int64_t ox = 0; ox < v.ow; ++ox) {
        float sum = 0.f;
        for (int64_t ch = 0; ch < v.cin; ++ch) {
          for (int64_t i = 0; i < v.kh; ++i) {
            for (int64_t j = 0; j < v.kw; ++j) {
              sum += wt[((ch * v.kh + i) * v.kw + j) * v.cout + o] *
                     xp[(ch * v.hp() + oy + i) * wp + ox + j];
            }
          }
        }
        y[(o * v.oh + oy) * v.ow + ox] = sum;
      }
    }
  }
}

void filter_unit(const ConvShape& s, const float* dy, const float* xp, int64_t images, int64_t i,
                 int64_t wp, int64_t x_image, float* dw_ci) {
  const int64_t plane = s.oh * s.ow;
  for (int64_t o = 0; o < s.o; ++o) {
    for (int64_t j = 0; j < s.kw; ++j) {
      float sum = 0.f;
      for (int64_t image = 0; image < images; ++image) {
        const float* d = dy + (image * s.o + o) * plane;
        const float* xi = xp + image * x_image + i * wp + j;
        for (int64_t oy = 0; oy < s.oh; ++oy) {
          for (int64_t ox = 0; ox < s.ow; ++ox) sum += d[oy * s.ow + ox] * xi[oy * wp + ox];
        }
      }
      dw_ci[o * s.c * s.kh * s.kw + j] = sum;
    }
  }
}

#endif

// Floats the padded inputs and packed weights keep readable past their end: a partial vector of
// load_partial may read up to 16 floats from their last element.
constexpr int64_t kSlack = 16;

// Runs a valid convolution over every image of `in` (n images of cin planes of h × w), each
// padded by (top, left) into a scratch buffer first.
void conv_images(const ConvShape& s, Valid v, const float* in, int64_t h, int64_t w,
                 int64_t top, int64_t left, const float* wt, float* out, ThreadPool& pool) {
  v.row_lo = std::clamp<int64_t>(top, 0, v.hp());  // the padded rows that hold data
  v.row_hi = std::clamp<int64_t>(top + h, v.row_lo, v.hp());
  const int64_t in_image = v.cin * h * w;
  const int64_t out_image = v.cout * v.oh * v.ow;
  pool.parallel_for(s.n, images_per_chunk(s, kTaskFlops), [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> xp;
    // kSlack floats past the planes: the kernels' partial vectors may read there (load_partial).
    xp.resize(static_cast<std::size_t>(v.cin * v.hp() * v.wp() + kSlack));
    for (int64_t image = begin; image < end; ++image) {
      pad_planes(in + image * in_image, v.cin, h, w, top, left, v.hp(), v.wp(), xp.data());
      valid_conv_image(v, xp.data(), wt, out + image * out_image);
    }
  });
}

}  // namespace

bool direct_conv_available() { return simd::kSimd; }

bool direct_conv_suits(const ConvShape& s) {
  return s.sh == 1 && s.sw == 1 && s.dil_h == 1 && s.dil_w == 1 && s.o <= 16 && s.c <= 8 &&
         s.ow <= 64 && s.w <= 64;
}

void conv2d_direct(const ConvShape& s, const float* x, const float* w, float* y,
                   ThreadPool& pool) {
  const Valid v{.cin = s.c, .cout = s.o, .oh = s.oh, .ow = s.ow, .kh = s.kh, .kw = s.kw};
  const int64_t taps = s.kh * s.kw;
  std::vector<float> wt(static_cast<std::size_t>(s.o * s.c * taps + kSlack));
  // Written in order (the reads stride through w, which is in L1): at batch 1 this transposition
  // was a tenth of a LeNet inference when its writes strode instead.
  const int64_t ctaps = s.c * taps;
  for (int64_t k = 0; k < ctaps; ++k) {
    for (int64_t o = 0; o < s.o; ++o) wt[k * s.o + o] = w[o * ctaps + k];
  }
  conv_images(s, v, x, s.h, s.w, s.pad_top, s.pad_left, wt.data(), y, pool);
}

void conv2d_backprop_input_direct(const ConvShape& s, const float* dy, const float* w,
                                  float* dx, ThreadPool& pool) {
  // dx = conv(dy padded by k - 1 - pad, W'), W'[c, o, i, j] = w[o, c, kh-1-i, kw-1-j], packed
  // as [o][i][j][c].
  const Valid v{.cin = s.o, .cout = s.c, .oh = s.h, .ow = s.w, .kh = s.kh, .kw = s.kw};
  const int64_t taps = s.kh * s.kw;
  std::vector<float> wt(static_cast<std::size_t>(s.o * s.c * taps + kSlack));
  for (int64_t o = 0; o < s.o; ++o) {
    for (int64_t c = 0; c < s.c; ++c) {
      for (int64_t t = 0; t < taps; ++t) {
        wt[(o * taps + t) * s.c + c] = w[(o * s.c + c) * taps + taps - 1 - t];
      }
    }
  }
  conv_images(s, v, dy, s.oh, s.ow, s.kh - 1 - s.pad_top, s.kw - 1 - s.pad_left, wt.data(), dx,
              pool);
}

void conv2d_backprop_filter_direct(const ConvShape& s, const float* dy, const float* x,
                                   float* dw, ThreadPool& pool) {
  const int64_t size = s.o * s.c * s.kh * s.kw;
  if (s.n == 0) {
    std::fill(dw, dw + size, 0.f);
    return;
  }
  const int64_t chunk = images_per_chunk(s, kFilterChunkFlops);
  const int64_t chunks = ceil_div(s.n, chunk);
  const int64_t hp = s.oh + s.kh - 1;
  const int64_t wp = s.ow + s.kw - 1;
  // One partial per chunk; chunk 0's goes straight to dw.
  std::vector<float> partials(static_cast<std::size_t>((chunks - 1) * size));
#if defined(LOOM_CPU_SIMD)
  if (channel_filter_suits(s)) {
    const int64_t plane = s.oh * s.ow;
    // Units: chunks, each transposing its dy once.
    pool.parallel_for(chunks, 1, [&](int64_t begin, int64_t end) {
      thread_local std::vector<float> xp, dyt;
      for (int64_t part = begin; part < end; ++part) {
        const int64_t n0 = part * chunk;
        const int64_t images = std::min(chunk, s.n - n0);
        xp.resize(static_cast<std::size_t>(images * s.c * hp * wp));
        pad_planes(x + n0 * s.c * s.h * s.w, images * s.c, s.h, s.w, s.pad_top, s.pad_left, hp,
                   wp, xp.data());
        dyt.assign(static_cast<std::size_t>(images * plane * 16), 0.f);
        for (int64_t image = 0; image < images; ++image) {
          for (int64_t o = 0; o < s.o; ++o) {
            const float* src = dy + ((n0 + image) * s.o + o) * plane;
            float* dst = dyt.data() + image * plane * 16 + o;
            for (int64_t p = 0; p < plane; ++p) dst[p * 16] = src[p];
          }
        }
        float* out = part == 0 ? dw : partials.data() + (part - 1) * size;
        channel_filter_unit(s, dyt.data(), xp.data(), images, hp, wp, out);
      }
    });
  } else
#endif
  // Units: (chunk, input channel, kernel row), each writing its own elements of its partial.
  pool.parallel_for(chunks * s.c * s.kh, 1, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> xp;
    for (int64_t u = begin; u < end; ++u) {
      const int64_t part = u / (s.c * s.kh);
      const int64_t ch = (u / s.kh) % s.c;
      const int64_t i = u % s.kh;
      const int64_t n0 = part * chunk;
      const int64_t images = std::min(chunk, s.n - n0);
      xp.resize(static_cast<std::size_t>(images * hp * wp));
      for (int64_t image = 0; image < images; ++image) {
        pad_planes(x + ((n0 + image) * s.c + ch) * s.h * s.w, 1, s.h, s.w, s.pad_top, s.pad_left,
                   hp, wp, xp.data() + image * hp * wp);
      }
      float* out = part == 0 ? dw : partials.data() + (part - 1) * size;
      filter_unit(s, dy + n0 * s.o * s.oh * s.ow, xp.data(), images, i, wp, hp * wp,
                  out + (ch * s.kh + i) * s.kw);
    }
  });
  // Partials added in chunk order, element by element.
  if (chunks > 1) {
    pool.parallel_for(size, 4096, [&](int64_t begin, int64_t end) {
      for (int64_t part = 1; part < chunks; ++part) {
        const float* p = partials.data() + (part - 1) * size;
        for (int64_t e = begin; e < end; ++e) dw[e] += p[e];
      }
    });
  }
}

}  // namespace loom::backend::cpu
