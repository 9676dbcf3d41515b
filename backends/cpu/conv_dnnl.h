// Float32 convolutions on oneDNN (Debian's libdnnl-dev), in oneDNN's own blocked layouts with
// loom's NCHW / OIHW tensors reordered into and out of them on every call. conv_kernels.cc
// routes group-1 convolutions with at least 16 input and 16 output channels here, outside
// deterministic mode (the filter gradient sums per-thread partials: its rounding depends on the
// thread count). docs/design.md ("backends/") has the design, bench/README.md the figures.
//
// Each function writes every element of its output and returns true, or returns false when this
// build has no oneDNN or oneDNN does not take the shape (then without touching the output) or
// fails while running (the output may be partly written); the caller then runs loom's own
// kernel, which writes every element. `threads` is the OpenMP thread count oneDNN runs with
// (the pool's size: the pool is idle while oneDNN runs).
#pragma once

#include <string>

#include "backends/cpu/conv_implicit_gemm.h"

namespace loom::backend::cpu {

// Whether this build has oneDNN.
bool dnnl_conv_available();

// oneDNN's version ("2.6.3"), or "" in a build without it.
std::string dnnl_version_string();

// Whether oneDNN has Winograd kernels on this processor (oneDNN 2.6's need AVX-512; elsewhere
// the 3×3 layers run its direct algorithm).
bool dnnl_winograd_available();

// y (n, o, oh, ow) from x (n, c, h, w) and w (o, c, kh, kw): as conv2d_implicit_gemm.
bool conv2d_dnnl(const ConvShape& s, const float* x, const float* w, float* y, int threads);

// dx (n, c, h, w) from dy (n, o, oh, ow) and w.
bool conv2d_backprop_input_dnnl(const ConvShape& s, const float* dy, const float* w, float* dx,
                                int threads);

// dw (o, c, kh, kw) from dy and x.
bool conv2d_backprop_filter_dnnl(const ConvShape& s, const float* dy, const float* x, float* dw,
                                 int threads);

}  // namespace loom::backend::cpu
