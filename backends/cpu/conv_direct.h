// Direct Float32 convolutions for small channel counts (LeNet-5's layers: 1 → 6 and 6 → 16
// channels, 5x5, maps of 32x32 and 14x14), where a GEMM formulation is thin (M = 6 or 16) and
// im2col costs as much as the arithmetic. Stride 1, no dilation, group 1, any padding.
//
// - Forward: each output row is one or two vectors (16 lanes on AVX-512, 8 on AVX2) along the
//   output width (masked at the end of the row); the accumulators of all the output channels of
//   a block sit in registers, each tap broadcasts one weight and reads the input row shifted by j.
// - Input gradient: the same kernel, as the convolution of dy (zero-padded by k - 1 - pad) with
//   the flipped, transposed filter.
// - Filter gradient: for more than 8 output channels, with the output channels as the vector
//   (dy transposed once per chunk, inputs broadcast); otherwise vectorized along the output
//   width, the lane sums of a block of (output channel, tap) pairs kept in registers over all
//   the rows of a chunk of images and reduced once per chunk.
//
// Work is split over images in chunks whose size depends only on the shapes; every output
// element is written. The filter gradient keeps one partial per chunk (each summing its
// images in order) and adds the partials in chunk order: results are bitwise the same for any
// LOOM_NUM_THREADS. conv_kernels.cc routes to these when direct_conv_suits() says so.
#pragma once

#include "backends/cpu/conv_implicit_gemm.h"  // ConvShape
#include "backends/thread_pool.h"

namespace loom::backend::cpu {

// Whether this build has the vectorized kernels (AVX-512F, or AVX2 with FMA, at compile time:
// simd.h). Without them the functions below still compute the right result with plain loops, but
// nothing routes to them.
bool direct_conv_available();

// The shapes conv_kernels.cc routes here (measured on LeNet's layers and two padded 3x3 layers
// with 3 and 8 input channels): stride 1, no dilation, at most 16 output and 8 input channels
// (the layer's own counts, also for the input gradient), input and output rows up to 64 wide.
bool direct_conv_suits(const ConvShape& s);

// y (n, o, oh, ow) = Σ_{c,i,j} w[o, c, i, j] · x[n, c, oy - pad_top + i, ox - pad_left + j]
// (zero outside x). Stride and dilation must be 1.
void conv2d_direct(const ConvShape& s, const float* x, const float* w, float* y,
                   ThreadPool& pool);

// dx (n, c, h, w), the adjoint of conv2d_direct with respect to x, from dy (n, o, oh, ow).
void conv2d_backprop_input_direct(const ConvShape& s, const float* dy, const float* w,
                                  float* dx, ThreadPool& pool);

// dw (o, c, kh, kw), the adjoint of conv2d_direct with respect to w, from dy and x.
void conv2d_backprop_filter_direct(const ConvShape& s, const float* dy, const float* x,
                                   float* dw, ThreadPool& pool);

}  // namespace loom::backend::cpu
