// CPU kernels of the pooling family (NCHW; Float32 and Float64).
//
// Pooling runs directly over windows, one (image, channel) plane per task. Max pooling and its
// gradients use the first maximum of each window in row-major order (NaN counts as a maximum);
// SAME average pooling divides by the number of elements inside the image, padding excluded, as
// MindSpore and TensorFlow do.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>
#include <vector>

#include "backends/kernel.h"
#include "backends/thread_pool.h"

namespace loom::backend {

namespace {

using std::int64_t;

// Elements of work a pool task should get at least.
constexpr int64_t kGrainElements = 16384;

// "valid", "same" or "pad" (attributes accept either case).
std::string pad_mode(const ir::Primitive& prim) {
  std::string mode = prim.attr("pad_mode").as_string();
  for (char& ch : mode) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return mode;
}

// MindSpore's SAME split: floor(total / 2) before, the rest after (ops/conv_pool_ops.cc has the
// same rule for inference).
int64_t same_pad_before(int64_t in, int64_t out, int64_t stride, int64_t span) {
  return std::max<int64_t>((out - 1) * stride + span - in, 0) / 2;
}

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
};

// x: (n, c, h, w); pooled: (n, c, oh, ow).
PoolGeometry pool_geometry(const ir::Primitive& prim, const Shape& x, const Shape& pooled) {
  const auto k = prim.attr("kernel_size").as_ints();
  const auto s = prim.attr("strides").as_ints();
  PoolGeometry g{.planes = x[0] * x[1], .h = x[2], .w = x[3], .oh = pooled[2], .ow = pooled[3],
                 .kh = k[0], .kw = k[1], .sh = s[0], .sw = s[1], .pad_top = 0, .pad_left = 0};
  if (pad_mode(prim) == "same") {
    g.pad_top = same_pad_before(g.h, g.oh, g.sh, g.kh);
    g.pad_left = same_pad_before(g.w, g.ow, g.sw, g.kw);
  }
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

template <typename T>
void max_pool(const KernelContext& k) {
  const PoolGeometry g = pool_geometry(k.prim, k.in(0).shape(), k.out(0).shape());
  const T* x = k.in(0).data<T>();
  T* y = k.out(0).data<T>();
  k.pool.parallel_for(g.planes, g.grain(), [&](int64_t begin, int64_t end) {
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

// MaxPoolGrad(x, out, dout) → dx: each dout added at its window's first maximum.
template <typename T>
void max_pool_grad(const KernelContext& k) {
  const PoolGeometry g = pool_geometry(k.prim, k.in(0).shape(), k.in(2).shape());
  const T* x = k.in(0).data<T>();
  const T* dout = k.in(2).data<T>();
  T* dx = k.out(0).data<T>();
  k.pool.parallel_for(g.planes, g.grain(), [&](int64_t begin, int64_t end) {
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

// MaxPoolGradGrad(x, out, grad) → pooled: grad read at each window's first maximum.
template <typename T>
void max_pool_grad_grad(const KernelContext& k) {
  const PoolGeometry g = pool_geometry(k.prim, k.in(0).shape(), k.out(0).shape());
  const T* x = k.in(0).data<T>();
  const T* grad = k.in(2).data<T>();
  T* y = k.out(0).data<T>();
  k.pool.parallel_for(g.planes, g.grain(), [&](int64_t begin, int64_t end) {
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
void avg_pool(const KernelContext& k) {
  const PoolGeometry g = pool_geometry(k.prim, k.in(0).shape(), k.out(0).shape());
  const T* x = k.in(0).data<T>();
  T* y = k.out(0).data<T>();
  k.pool.parallel_for(g.planes, g.grain(), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const T* src = x + p * g.h * g.w;
      T* dst = y + p * g.oh * g.ow;
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          const PoolGeometry::Window win = g.window(oy, ox);
          T sum = 0;
          for (int64_t iy = win.y0; iy < win.y1; ++iy) {
            for (int64_t ix = win.x0; ix < win.x1; ++ix) sum += src[iy * g.w + ix];
          }
          dst[oy * g.ow + ox] = sum / static_cast<T>(win.count());
        }
      }
    }
  });
}

// AvgPoolGrad(x, out, dout) → dx: each dout spread evenly over its window.
template <typename T>
void avg_pool_grad(const KernelContext& k) {
  const PoolGeometry g = pool_geometry(k.prim, k.in(0).shape(), k.in(2).shape());
  const T* dout = k.in(2).data<T>();
  T* dx = k.out(0).data<T>();
  k.pool.parallel_for(g.planes, g.grain(), [&](int64_t begin, int64_t end) {
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

template <typename T>
void add_kernels(KernelRegistry& r) {
  constexpr DType dtype = DTypeOf<T>::value;
  r.add("MaxPool", dtype, Device::kCPU, max_pool<T>);
  r.add("MaxPoolGrad", dtype, Device::kCPU, max_pool_grad<T>);
  r.add("MaxPoolGradGrad", dtype, Device::kCPU, max_pool_grad_grad<T>);
  r.add("AvgPool", dtype, Device::kCPU, avg_pool<T>);
  r.add("AvgPoolGrad", dtype, Device::kCPU, avg_pool_grad<T>);
}

}  // namespace

void register_cpu_pool_kernels(KernelRegistry& r) {
  add_kernels<float>(r);
  add_kernels<double>(r);
}

}  // namespace loom::backend
