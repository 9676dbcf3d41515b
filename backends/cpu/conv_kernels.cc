// CPU kernels of the convolution family (NCHW; Float32 and Float64). Pooling is in
// pool_kernels.cc.
//
// Convolution is lowered to GEMM. im2col lays out every receptive field of a block of images as
// one column of a (C·kh·kw) × (images·oh·ow) matrix, so per group
//   Conv2D               y  = W · col
//   Conv2DBackpropInput  dx = col2im(Wᵀ · dy)
//   Conv2DBackpropFilter dw = Σ_blocks dy · colᵀ
// Images are taken in blocks whose columns sit side by side, so that small feature maps still
// give GEMMs wide enough to run well; a block's column matrix is capped in size. gemm is called
// only from the kernel's own thread (OpenBLAS threads itself); im2col, col2im and the layout
// copies run on the pool. Every sum has a fixed order: col2im gives each (image, channel) plane to
// one task, which adds the kernel taps in order, and the filter gradient adds block after block.
// Float32 stride-1 Conv2D and Conv2DBackpropInput of group 1, and Float32 Conv2DBackpropFilter of
// group 1 (not pointwise stride 1), take an implicit-GEMM path instead where the build has
// AVX-512 (conv_implicit_gemm.h; use_implicit_gemm, use_implicit_gemm_filter and the callers say
// when).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/conv_direct.h"
#include "backends/cpu/conv_dnnl.h"
#include "backends/cpu/conv_implicit_gemm.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/cpu.h"
#include "backends/kernel.h"
#include "core/random/random.h"
#include "backends/thread_pool.h"
#include "ops/conv_geometry.h"

namespace loom::backend {

namespace {

using std::int64_t;

// Elements of work a pool task should get at least.
constexpr int64_t kGrainElements = 16384;
// A block of images aims at this many GEMM columns ...
constexpr int64_t kTargetColumns = 2048;
// ... within this many bytes of column matrix.
constexpr int64_t kColumnBudgetBytes = int64_t{32} << 20;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---------------------------------------------------------------------------------------------
// Convolution

struct ConvGeometry {
  int64_t n, c, h, w;    // input
  int64_t o, oh, ow;     // output channels and extent
  int64_t group;
  int64_t kh, kw, sh, sw, dil_h, dil_w;
  int64_t pad_top, pad_left;

  int64_t plane() const { return oh * ow; }
  int64_t rows() const { return c * kh * kw; }          // rows of the column matrix
  int64_t group_rows() const { return rows() / group; }  // ... of one group
  int64_t group_out() const { return o / group; }
  bool is_pointwise() const {
    return kh == 1 && kw == 1 && sh == 1 && sw == 1 && pad_top == 0 && pad_left == 0 &&
           oh == h && ow == w;
  }
  // Images per block: enough for kTargetColumns, within the column budget.
  int64_t block_images(std::size_t elem_size) const {
    const int64_t by_target = ceil_div(kTargetColumns, std::max<int64_t>(plane(), 1));
    const int64_t bytes_per_image =
        std::max<int64_t>(rows() * plane() * static_cast<int64_t>(elem_size), 1);
    const int64_t by_budget = kColumnBudgetBytes / bytes_per_image;
    return std::max<int64_t>(1, std::min({by_target, by_budget, n}));
  }
};

// x: (n, c, h, w), w: (o, c/group, kh, kw), y: (n, o, oh, ow) as inferred. The padding is
// ops/conv_geometry.h's (MindSpore's rule, shared with inference).
ConvGeometry conv_geometry(const ir::Primitive& prim, const Shape& x, const Shape& w,
                           const Shape& y) {
  const auto stride = prim.attr("stride").as_ints();
  const auto dilation = prim.attr("dilation").as_ints();
  ConvGeometry g{
      .n = x[0], .c = x[1], .h = x[2], .w = x[3],
      .o = w[0], .oh = y[2], .ow = y[3],
      .group = prim.attr("group").as_int(),
      .kh = w[2], .kw = w[3], .sh = stride[0], .sw = stride[1], .dil_h = dilation[0],
      .dil_w = dilation[1], .pad_top = 0, .pad_left = 0,
  };
  const ops::PadMode mode = ops::pad_mode_of(prim);
  const std::vector<int64_t> pad =
      mode == ops::PadMode::kPad ? prim.attr("pad").as_ints() : std::vector<int64_t>(4, 0);
  g.pad_top = ops::window_axis(g.h, g.kh, g.sh, g.dil_h, mode, pad[0], pad[1]).pad_before;
  g.pad_left = ops::window_axis(g.w, g.kw, g.sw, g.dil_w, mode, pad[2], pad[3]).pad_before;
  return g;
}

// The output columns [lo, hi) whose tap at input offset `offset` (= tap·dilation - pad) lands
// inside [0, extent).
struct ValidRange {
  int64_t lo, hi;
};
ValidRange valid_outputs(int64_t offset, int64_t stride, int64_t extent, int64_t out) {
  const int64_t lo = offset >= 0 ? 0 : std::min(out, ceil_div(-offset, stride));
  const int64_t hi = extent - offset <= 0 ? 0 : std::min(out, ceil_div(extent - offset, stride));
  return {lo, std::max(lo, hi)};
}

// Fills col (rows() × ld) with the receptive fields of images [0, images) of x; image i takes
// columns [i·plane, (i + 1)·plane).
template <typename T>
void im2col(const ConvGeometry& g, const T* x, int64_t images, T* col, int64_t ld,
            ThreadPool& pool) {
  const int64_t rows = g.rows();
  const int64_t plane = g.plane();
  const int64_t grain = std::max<int64_t>(1, kGrainElements / std::max<int64_t>(plane, 1));
  pool.parallel_for(images * rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t image = t / rows;
      const int64_t r = t % rows;
      const int64_t ch = r / (g.kh * g.kw);
      const int64_t i = (r / g.kw) % g.kh;
      const int64_t j = r % g.kw;
      const T* src = x + (image * g.c + ch) * g.h * g.w;
      T* dst = col + r * ld + image * plane;
      const int64_t off_x = j * g.dil_w - g.pad_left;
      const ValidRange xs = valid_outputs(off_x, g.sw, g.w, g.ow);
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        T* d = dst + oy * g.ow;
        const int64_t iy = oy * g.sh - g.pad_top + i * g.dil_h;
        if (iy < 0 || iy >= g.h) {
          std::fill(d, d + g.ow, T(0));
          continue;
        }
        const T* s = src + iy * g.w;
        std::fill(d, d + xs.lo, T(0));
        if (g.sw == 1) {
          std::copy(s + xs.lo + off_x, s + xs.hi + off_x, d + xs.lo);  // contiguous: vectorizes
        } else {
          for (int64_t ox = xs.lo; ox < xs.hi; ++ox) d[ox] = s[ox * g.sw + off_x];
        }
        std::fill(d + xs.hi, d + g.ow, T(0));
      }
    }
  });
}

// The adjoint of im2col: dx (images of (c, h, w)) = Σ over each plane's taps, in tap order.
template <typename T>
void col2im(const ConvGeometry& g, const T* col, int64_t ld, int64_t images, T* dx,
            ThreadPool& pool) {
  const int64_t plane = g.plane();
  const int64_t work = std::max<int64_t>(1, g.kh * g.kw * plane + g.h * g.w);
  pool.parallel_for(images * g.c, std::max<int64_t>(1, kGrainElements / work),
                    [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t image = t / g.c;
      const int64_t ch = t % g.c;
      T* dst = dx + (image * g.c + ch) * g.h * g.w;
      std::fill(dst, dst + g.h * g.w, T(0));
      for (int64_t i = 0; i < g.kh; ++i) {
        for (int64_t j = 0; j < g.kw; ++j) {
          const T* src = col + ((ch * g.kh + i) * g.kw + j) * ld + image * plane;
          const int64_t off_x = j * g.dil_w - g.pad_left;
          const ValidRange xs = valid_outputs(off_x, g.sw, g.w, g.ow);
          for (int64_t oy = 0; oy < g.oh; ++oy) {
            const int64_t iy = oy * g.sh - g.pad_top + i * g.dil_h;
            if (iy < 0 || iy >= g.h) continue;
            T* d = dst + iy * g.w;
            const T* s = src + oy * g.ow;
            if (g.sw == 1) {
              T* dd = d + off_x;
              for (int64_t ox = xs.lo; ox < xs.hi; ++ox) dd[ox] += s[ox];
            } else {
              for (int64_t ox = xs.lo; ox < xs.hi; ++ox) d[ox * g.sw + off_x] += s[ox];
            }
          }
        }
      }
    }
  });
}

// Moves a block of images between (images, o, plane) layout and the GEMM's (o, images·plane).
template <typename T>
void images_to_matrix(const T* src, int64_t images, int64_t o, int64_t plane, T* dst,
                      ThreadPool& pool) {
  pool.parallel_for(images * o, std::max<int64_t>(1, kGrainElements / std::max<int64_t>(plane, 1)),
                    [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t image = t / o;
      const int64_t ch = t % o;
      std::memcpy(dst + ch * images * plane + image * plane, src + t * plane,
                  static_cast<std::size_t>(plane) * sizeof(T));
    }
  });
}

template <typename T>
void matrix_to_images(const T* src, int64_t images, int64_t o, int64_t plane, T* dst,
                      ThreadPool& pool) {
  pool.parallel_for(images * o, std::max<int64_t>(1, kGrainElements / std::max<int64_t>(plane, 1)),
                    [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t image = t / o;
      const int64_t ch = t % o;
      std::memcpy(dst + t * plane, src + ch * images * plane + image * plane,
                  static_cast<std::size_t>(plane) * sizeof(T));
    }
  });
}

// The column matrix of images [n0, n0 + images) of x: x itself for a single image of a
// pointwise convolution, else im2col into `buffer` (rows() × images·plane elements).
template <typename T>
const T* columns(const ConvGeometry& g, const T* x, int64_t n0, int64_t images, T* buffer,
                 ThreadPool& pool) {
  const T* first = x + n0 * g.c * g.h * g.w;
  if (images == 1 && g.is_pointwise()) return first;
  im2col(g, first, images, buffer, images * g.plane(), pool);
  return buffer;
}

// How a convolution node runs, chosen once when its graph is compiled (prepare): the path and,
// for the paths that need scratch memory, where each scratch array sits in the planned
// workspace. The environment switches (LOOM_CONV, deterministic mode) are read then too.
enum class Path { kIm2col, kDirect, kImplicit };

struct ConvPlan {
  ConvGeometry g;
  bool dnnl = false;          // oneDNN first; on its refusal the loom path below runs
  Path path = Path::kIm2col;
  int64_t block = 1;          // images per im2col block
  // Workspace offsets in bytes (64-byte aligned): the column matrix, the block's result or
  // dout matrix, the implicit input gradient's flipped filter.
  std::size_t col = 0, matrix = 0, flipped = 0, bytes = 0;
};

// The LOOM_CONV switch: "im2col" (the reference), "loom" (loom's kernels, never oneDNN),
// "dnnl" (oneDNN even in deterministic mode), unset.
std::string conv_switch() {
  const char* env = std::getenv("LOOM_CONV");
  return env == nullptr ? std::string() : std::string(env);
}

// Float32 convolutions of group 1 run as an implicit GEMM (conv_implicit_gemm.h) where the build
// has AVX-512 or AVX2; LOOM_CONV=im2col keeps them on im2col + cpu::gemm (tests compare the two).
// Pointwise stride-1 convolutions stay on cpu::gemm: there the column matrix is x itself (or a
// plain copy of a block of images) and OpenBLAS measured faster (bench/README.md).
bool use_implicit_gemm(const ConvGeometry& g, const std::string& sw) {
  if (g.group != 1 || !cpu::implicit_gemm_available()) return false;
  if (g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1) return false;
  return sw != "im2col";
}

cpu::ConvShape conv_shape(const ConvGeometry& g) {
  return {.n = g.n, .c = g.c, .h = g.h, .w = g.w, .o = g.o, .oh = g.oh, .ow = g.ow, .kh = g.kh,
          .kw = g.kw, .sh = g.sh, .sw = g.sw, .dil_h = g.dil_h, .dil_w = g.dil_w,
          .pad_top = g.pad_top, .pad_left = g.pad_left};
}

// The filter gradient's implicit GEMM (group 1, strided 1x1 included), same switch. Pointwise
// stride-1 convolutions stay on cpu::gemm, which measured faster there (ResNet-50's 1x1
// layers: 108-168 against 56-118 GFLOP/s on 2 threads).
bool use_implicit_gemm_filter(const ConvGeometry& g, const std::string& sw) {
  if (g.group != 1 || !cpu::implicit_gemm_available()) return false;
  if (g.is_pointwise()) return false;
  if (!cpu::conv2d_filter_implicit_fits(conv_shape(g))) return false;
  return sw != "im2col";
}

// Float32 convolutions with few channels (LeNet's: 1 -> 6 and 6 -> 16, 5x5) run as direct
// convolutions (conv_direct.h: stride 1, no dilation, up to 16 output and 8 input channels),
// ahead of the implicit GEMMs, whose 8-channel tiles they fill poorly; same switch.
bool use_direct_conv(const ConvGeometry& g, const std::string& sw) {
  if (g.group != 1 || !cpu::direct_conv_available()) return false;
  if (!cpu::direct_conv_suits(conv_shape(g))) return false;
  return sw != "im2col";
}

// Float32 convolutions of group 1 with at least 16 input and 16 output channels run on oneDNN
// where the build has it (conv_dnnl.h), ahead of every other path, and so do the large-kernel
// stems of 3 to 15 input channels that loom's direct kernels do not take (ResNet-50's 7×7/2 on
// RGB: oneDNN 187 / 173 GFLOP/s forward / filter gradient against 118 / 89 at batch 8, 175
// against 48 at batch 1; not the 3×3 ones, where it measured 4× slower); except in deterministic
// mode (its filter gradient's rounding depends on the thread count). LOOM_CONV=dnnl takes them there
// in deterministic mode too, LOOM_CONV=loom keeps them on loom's kernels, LOOM_CONV=im2col on
// the reference.
bool use_dnnl(const ConvGeometry& g, const std::string& sw) {
  if (g.group != 1 || g.o < 16 || !cpu::dnnl_conv_available()) return false;
  const bool stem = g.c >= 3 && g.kh * g.kw >= 25 && !cpu::direct_conv_suits(conv_shape(g));
  if (g.c < 16 && !stem) return false;
  if (!sw.empty()) return sw == "dnnl";
  return !random::deterministic_mode();
}

enum class ConvOp { kForward, kInput, kFilter };

std::size_t aligned(std::size_t bytes) { return (bytes + 63) / 64 * 64; }

// The plan of one node: x (n, c, h, w), w (o, c/group, kh, kw), y (n, o, oh, ow) in the
// forward's terms, whichever of them are the op's inputs and output.
ConvPlan plan_conv(const ir::Primitive& prim, ConvOp op, const Shape& x, const Shape& w,
                   const Shape& y, DType dtype) {
  ConvPlan p;
  p.g = conv_geometry(prim, x, w, y);
  const ConvGeometry& g = p.g;
  const std::size_t elem = dtype_size(dtype);
  const std::string sw = conv_switch();
  const bool f32 = dtype == DType::kFloat32;
  p.block = g.block_images(elem);
  if (f32) {
    p.dnnl = use_dnnl(g, sw);
    switch (op) {
      case ConvOp::kForward:
        // Stride 1 only for now: with the stride-2 forwards on this path too,
        // ResNet18SmallImageMatchesPyTorch (tests/models/resnet_test.cc) fails, though every
        // Conv2D launch of that test matches im2col to 1e-6 relative: one input of layer4.1's
        // last ReLU (image 1, channel 315, row 1, column 2) lies within rounding of zero there,
        // and re-associating the forward's sums flips its mask (8e-3 in the checked gradients).
        // That test needs inputs with a margin from the ReLU kinks before stride 2 can move here.
        if (use_direct_conv(g, sw)) {
          p.path = Path::kDirect;
        } else if (g.sh == 1 && g.sw == 1 && use_implicit_gemm(g, sw)) {
          p.path = Path::kImplicit;
        }
        break;
      case ConvOp::kInput:
        // Not for small maps (dx planes under 8x8: ResNet-18's 4x4 and ResNet-50's 7x7 layers),
        // where im2col + OpenBLAS measured faster, nor for under 8 input channels (a mostly
        // empty 8-row tile).
        if (use_direct_conv(g, sw)) {
          p.path = Path::kDirect;
        } else if (g.sh == 1 && g.sw == 1 && g.c >= 8 && g.h * g.w >= 64 &&
                   use_implicit_gemm(g, sw)) {
          p.path = Path::kImplicit;
        }
        break;
      case ConvOp::kFilter:
        if (use_direct_conv(g, sw)) {
          p.path = Path::kDirect;
        } else if (use_implicit_gemm_filter(g, sw)) {
          p.path = Path::kImplicit;
        }
        break;
    }
  }
  // Scratch of the chosen loom path (also what runs when oneDNN declines).
  std::size_t at = 0;
  auto take = [&](std::size_t bytes) {
    const std::size_t off = at;
    at += aligned(bytes);
    return off;
  };
  const std::size_t block_cols = static_cast<std::size_t>(p.block * g.plane());
  if (p.path == Path::kIm2col) {
    p.col = take(static_cast<std::size_t>(g.rows()) * block_cols * elem);
    // Forward: a block's GEMM result; gradients: the block's dout matrix.
    p.matrix = take(p.block > 1 ? static_cast<std::size_t>(g.o) * block_cols * elem : 0);
  } else if (p.path == Path::kImplicit && op == ConvOp::kInput) {
    p.flipped = take(static_cast<std::size_t>(g.o * g.c * g.kh * g.kw) * elem);
  }
  p.bytes = at;
  return p;
}

// A plan as the node's prepared state, its scratch as the node's planned workspace.
Prepared prepared(ConvPlan plan) {
  const std::size_t bytes = plan.bytes;
  return {std::make_shared<ConvPlan>(std::move(plan)), bytes};
}

Prepared prepare_conv2d(const PrepareContext& c) {
  return prepared(plan_conv(c.prim, ConvOp::kForward, c.inputs[0].shape, c.inputs[1].shape,
                            c.outputs[0].shape, c.outputs[0].dtype));
}
Prepared prepare_conv2d_backprop_input(const PrepareContext& c) {
  return prepared(plan_conv(c.prim, ConvOp::kInput, c.outputs[0].shape, c.inputs[1].shape,
                            c.inputs[0].shape, c.outputs[0].dtype));
}
Prepared prepare_conv2d_backprop_filter(const PrepareContext& c) {
  return prepared(plan_conv(c.prim, ConvOp::kFilter, c.inputs[1].shape, c.outputs[0].shape,
                            c.inputs[0].shape, c.outputs[0].dtype));
}

template <typename T>
T* scratch(const KernelContext& k, std::size_t offset) {
  return reinterpret_cast<T*>(static_cast<char*>(k.workspace) + offset);
}

// At stride 1, dx = conv(dy, W'), W'[c, o, i, j] = W[o, c, kh-1-i, kw-1-j], padded by
// (k-1)·dilation - pad: every dx element is one dot product, with no col2im.
void conv2d_backprop_input_implicit(const ConvGeometry& g, const float* dout, const float* w,
                                    float* dx, float* flipped, ThreadPool& pool) {
  const int64_t taps = g.kh * g.kw;
  for (int64_t o = 0; o < g.o; ++o) {
    for (int64_t c = 0; c < g.c; ++c) {
      const float* src = w + (o * g.c + c) * taps;
      float* dst = flipped + (c * g.o + o) * taps;
      for (int64_t t = 0; t < taps; ++t) dst[t] = src[taps - 1 - t];
    }
  }
  const cpu::ConvShape s{.n = g.n, .c = g.o, .h = g.oh, .w = g.ow, .o = g.c, .oh = g.h, .ow = g.w,
                         .kh = g.kh, .kw = g.kw, .sh = 1, .sw = 1, .dil_h = g.dil_h,
                         .dil_w = g.dil_w, .pad_top = (g.kh - 1) * g.dil_h - g.pad_top,
                         .pad_left = (g.kw - 1) * g.dil_w - g.pad_left};
  cpu::conv2d_implicit_gemm(s, dout, flipped, dx, pool);
}

template <typename T>
void conv2d(const KernelContext& k) {
  const ConvPlan& p = k.state<ConvPlan>();
  const ConvGeometry& g = p.g;
  const T* x = k.in(0).data<T>();
  const T* w = k.in(1).data<T>();
  T* y = k.out(0).data<T>();
  if (k.out(0).numel() == 0) return;
  ThreadPool& pool = cpu::pool(k);
  if constexpr (std::is_same_v<T, float>) {
    if (p.dnnl && cpu::conv2d_dnnl(conv_shape(g), x, w, y, pool.num_threads())) return;
    if (p.path == Path::kDirect) return cpu::conv2d_direct(conv_shape(g), x, w, y, pool);
    if (p.path == Path::kImplicit) return cpu::conv2d_implicit_gemm(conv_shape(g), x, w, y, pool);
  }
  const int64_t plane = g.plane();
  const int64_t kg = g.group_rows();
  const int64_t og = g.group_out();
  for (int64_t n0 = 0; n0 < g.n; n0 += p.block) {
    const int64_t images = std::min(p.block, g.n - n0);
    const int64_t ld = images * plane;
    const T* c = columns(g, x, n0, images, scratch<T>(k, p.col), pool);
    // One image's result already has y's layout; a block's goes through the workspace.
    T* out = images > 1 ? scratch<T>(k, p.matrix) : y + n0 * g.o * plane;
    for (int64_t grp = 0; grp < g.group; ++grp) {
      cpu::gemm(false, false, og, ld, kg, T(1), w + grp * og * kg, kg, c + grp * kg * ld, ld,
                T(0), out + grp * og * ld, ld);
    }
    if (images > 1) matrix_to_images(out, images, g.o, plane, y + n0 * g.o * plane, pool);
  }
}

// dout of images [n0, n0 + images) as an (o, images·plane) matrix.
template <typename T>
const T* dout_matrix(const ConvGeometry& g, const T* dout, int64_t n0, int64_t images,
                     T* buffer, ThreadPool& pool) {
  const T* first = dout + n0 * g.o * g.plane();
  if (images == 1) return first;
  images_to_matrix(first, images, g.o, g.plane(), buffer, pool);
  return buffer;
}

template <typename T>
void conv2d_backprop_input(const KernelContext& k) {
  const ConvPlan& p = k.state<ConvPlan>();
  const ConvGeometry& g = p.g;
  const T* dout = k.in(0).data<T>();
  const T* w = k.in(1).data<T>();
  T* dx = k.out(0).data<T>();
  if (k.out(0).numel() == 0) return;
  ThreadPool& pool = cpu::pool(k);
  if constexpr (std::is_same_v<T, float>) {
    if (p.dnnl &&
        cpu::conv2d_backprop_input_dnnl(conv_shape(g), dout, w, dx, pool.num_threads())) {
      return;
    }
    if (p.path == Path::kDirect) {
      return cpu::conv2d_backprop_input_direct(conv_shape(g), dout, w, dx, pool);
    }
    if (p.path == Path::kImplicit) {
      return conv2d_backprop_input_implicit(g, dout, w, dx, scratch<float>(k, p.flipped), pool);
    }
  }
  const int64_t plane = g.plane();
  const int64_t kg = g.group_rows();
  const int64_t og = g.group_out();
  for (int64_t n0 = 0; n0 < g.n; n0 += p.block) {
    const int64_t images = std::min(p.block, g.n - n0);
    const int64_t ld = images * plane;
    const T* d = dout_matrix(g, dout, n0, images, scratch<T>(k, p.matrix), pool);
    T* dx_first = dx + n0 * g.c * g.h * g.w;
    // A single pointwise image needs no col2im: Wᵀ · dy is dx itself.
    const bool direct = images == 1 && g.is_pointwise();
    T* c = direct ? dx_first : scratch<T>(k, p.col);
    for (int64_t grp = 0; grp < g.group; ++grp) {
      cpu::gemm(true, false, kg, ld, og, T(1), w + grp * og * kg, kg, d + grp * og * ld, ld, T(0),
                c + grp * kg * ld, ld);
    }
    if (!direct) col2im(g, c, ld, images, dx_first, pool);
  }
}

template <typename T>
void conv2d_backprop_filter(const KernelContext& k) {
  const ConvPlan& p = k.state<ConvPlan>();
  const ConvGeometry& g = p.g;
  const T* dout = k.in(0).data<T>();
  const T* x = k.in(1).data<T>();
  T* dw = k.out(0).data<T>();
  if (k.out(0).numel() == 0) return;
  ThreadPool& pool = cpu::pool(k);
  if constexpr (std::is_same_v<T, float>) {
    // All three write every element of dw (no fill first).
    const bool any = k.in(0).numel() > 0;
    if (any && p.dnnl &&
        cpu::conv2d_backprop_filter_dnnl(conv_shape(g), dout, x, dw, pool.num_threads())) {
      return;
    }
    if (any && p.path == Path::kDirect) {
      return cpu::conv2d_backprop_filter_direct(conv_shape(g), dout, x, dw, pool);
    }
    if (any && p.path == Path::kImplicit) {  // conv_implicit_filter.cc
      return cpu::conv2d_backprop_filter_implicit_gemm(conv_shape(g), dout, x, dw, pool);
    }
  }
  std::fill(dw, dw + k.out(0).numel(), T(0));  // the GEMMs below add block after block
  if (k.in(0).numel() == 0) return;
  const int64_t plane = g.plane();
  const int64_t kg = g.group_rows();
  const int64_t og = g.group_out();
  for (int64_t n0 = 0; n0 < g.n; n0 += p.block) {
    const int64_t images = std::min(p.block, g.n - n0);
    const int64_t ld = images * plane;
    const T* c = columns(g, x, n0, images, scratch<T>(k, p.col), pool);
    const T* d = dout_matrix(g, dout, n0, images, scratch<T>(k, p.matrix), pool);
    for (int64_t grp = 0; grp < g.group; ++grp) {
      cpu::gemm(false, true, og, kg, ld, T(1), d + grp * og * ld, ld, c + grp * kg * ld, ld, T(1),
                dw + grp * og * kg, kg);
    }
  }
}

// Every path writes every element of the output (every GEMM has beta 0 or follows a fill;
// col2im fills its planes; the implicit GEMMs store every result).
template <typename T>
void add_kernels(KernelRegistry& r) {
  constexpr DType dtype = DTypeOf<T>::value;
  r.add("Conv2D", dtype, conv2d<T>).with_prepare(prepare_conv2d).writes_every_output_element();
  r.add("Conv2DBackpropInput", dtype, conv2d_backprop_input<T>)
      .with_prepare(prepare_conv2d_backprop_input)
      .writes_every_output_element();
  r.add("Conv2DBackpropFilter", dtype, conv2d_backprop_filter<T>)
      .with_prepare(prepare_conv2d_backprop_filter)
      .writes_every_output_element();
}

}  // namespace

void register_cpu_conv_kernels(KernelRegistry& r) {
  add_kernels<float>(r);
  add_kernels<double>(r);
}

}  // namespace loom::backend
