// A Float32 convolution computed as an implicit GEMM (no column matrix): y = W · col(x), where
// the panels of col(x) the GEMM needs are packed straight from x into a small cache-resident
// buffer and multiplied by a register-tiled micro-kernel (8 output channels × 32 output
// positions on AVX-512, 4 × 24 on AVX2). It handles any stride, padding and dilation;
// conv_kernels.cc uses it for Conv2D at stride 1 (group 1, not 1x1) and, as a convolution of dy
// with the flipped, transposed filter, for Conv2DBackpropInput at stride 1 (not 1x1, at least 8
// input channels, input maps of at least 64 pixels). conv2d_backprop_filter_implicit_gemm
// (conv_implicit_filter.cc) is its filter-gradient counterpart, with the reduction over
// positions vectorized instead.
// bench/README.md ("Convolution kernels: implicit GEMM") has the figures.
//
// Every output element is one dot product over k = (c, i, j) taken in a fixed order (k blocks
// in turn, k ascending inside a block), whatever the thread count or the split of the output:
// results are bitwise the same for any LOOM_NUM_THREADS.
#pragma once

#include <cstdint>

#include "backends/thread_pool.h"

namespace loom::backend::cpu {

struct ConvShape {
  std::int64_t n, c, h, w;  // input
  std::int64_t o, oh, ow;   // output channels and extent
  std::int64_t kh, kw, sh, sw, dil_h, dil_w;
  std::int64_t pad_top, pad_left;  // may be negative (a cropped input)
};

// Whether this build has the kernels (AVX-512F, or AVX2 with FMA, at compile time: simd.h).
bool implicit_gemm_available();

// y (n, o, oh, ow) = Σ_{c,i,j} w[o, c, i, j] · x[n, c, oy·sh - pad_top + i·dil_h,
// ox·sw - pad_left + j·dil_w] (zero outside x). w is (o, c, kh, kw), group 1.
void conv2d_implicit_gemm(const ConvShape& s, const float* x, const float* w, float* y,
                          ThreadPool& pool);

// dw (o, c, kh, kw) = Σ_{n,oy,ox} dy[n, o, oy, ox] · x[n, c, oy·sh - pad_top + i·dil_h,
// ox·sw - pad_left + j·dil_w] (zero outside x), group 1; every element of dw is written
// (conv_implicit_filter.cc). Each element is summed over the positions in blocks of a fixed
// size, in a fixed order that depends on the shapes only: bitwise the same for any thread count.
void conv2d_backprop_filter_implicit_gemm(const ConvShape& s, const float* dy, const float* x,
                                          float* dw, ThreadPool& pool);

// Whether conv2d_backprop_filter_implicit_gemm takes this shape (its offsets are 32-bit).
bool conv2d_filter_implicit_fits(const ConvShape& s);

}  // namespace loom::backend::cpu
