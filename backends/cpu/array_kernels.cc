// CPU kernels of the array family. The data movement does not depend on the dtype, so every
// kernel works on bytes by element size and one kernel is registered for every dtype.
//
// Most ops reduce to one strided copy: walk an output box in row-major order, reading (or, for
// scatters, writing) the other side through per-axis element strides. Transpose permutes the
// strides, Slice/StridedSlice offset and scale them (negative strides included), BroadcastTo
// and Tile use stride 0 for repeated axes (Tile views its output (m0*d0, m1*d1, ...) as
// (m0, d0, m1, d1, ...)), Concat/Split copy each part into a window of the whole. Adjacent axes
// that stay contiguous on both sides are merged first so the inner loop is as long as possible.
#include <algorithm>
#include <cstring>
#include <string>

#include "backends/cpu/cpu.h"
#include "backends/kernel.h"
#include "backends/strided_box.h"
#include "backends/thread_pool.h"
#include "core/ir/error.h"
#include "ops/array_ops.h"

namespace loom::backend {

namespace {

constexpr std::int64_t kGrain = 16384;  // elements per parallel chunk

template <typename T>
void copy_rows(const T* src, T* dst, const StridedBox& b, std::int64_t begin, std::int64_t end) {
  const std::size_t rank = b.shape.size();
  const std::int64_t inner = b.shape[rank - 1];
  const std::int64_t ss = b.src_stride[rank - 1];
  const std::int64_t ds = b.dst_stride[rank - 1];
  Ints idx(rank, 0);
  std::int64_t rem = begin;
  std::int64_t so = 0, dof = 0;
  for (std::size_t k = rank; k-- > 0;) {
    idx[k] = rem % b.shape[k];
    rem /= b.shape[k];
    so += idx[k] * b.src_stride[k];
    dof += idx[k] * b.dst_stride[k];
  }
  std::int64_t i = begin;
  while (i < end) {
    const std::int64_t n = std::min(inner - idx[rank - 1], end - i);
    const T* s = src + so;
    T* d = dst + dof;
    if (ss == 1 && ds == 1) {
      std::memcpy(d, s, static_cast<std::size_t>(n) * sizeof(T));
    } else {
      for (std::int64_t j = 0; j < n; ++j) d[j * ds] = s[j * ss];
    }
    i += n;
    so += n * ss;
    dof += n * ds;
    idx[rank - 1] += n;
    // Carry into the outer axes.
    for (std::size_t k = rank - 1; k > 0 && idx[k] == b.shape[k]; --k) {
      so -= idx[k] * b.src_stride[k];
      dof -= idx[k] * b.dst_stride[k];
      idx[k] = 0;
      ++idx[k - 1];
      so += b.src_stride[k - 1];
      dof += b.dst_stride[k - 1];
    }
  }
}

// The source axis that is contiguous when the destination's last axis is but the source's is
// not (a transpose of the two innermost layouts); -1 when there is none.
int tiled_axis(const StridedBox& b) {
  const std::size_t rank = b.shape.size();
  if (rank < 2 || b.dst_stride[rank - 1] != 1 || b.src_stride[rank - 1] == 1) return -1;
  for (std::size_t k = 0; k + 1 < rank; ++k) {
    if (b.src_stride[k] == 1 && b.shape[k] >= 8 && b.shape[rank - 1] >= 8) {
      return static_cast<int>(k);
    }
  }
  return -1;
}

// A transposing copy in square tiles, so both sides are read and written a cache line at a
// time. Axis `a` (contiguous in the source) is moved next to the last axis (contiguous in the
// destination); every remaining axis is an outer loop.
template <typename T>
void copy_tiled(const T* src, T* dst, StridedBox b, int a, ThreadPool& pool) {
  constexpr std::int64_t kTile = sizeof(T) == 8 ? 32 : 64;
  const std::size_t rank = b.shape.size();
  const auto ax = static_cast<std::size_t>(a);
  const std::int64_t na = b.shape[ax], nb = b.shape[rank - 1];
  const std::int64_t dsa = b.dst_stride[ax], ssb = b.src_stride[rank - 1];
  StridedBox outer;
  for (std::size_t k = 0; k + 1 < rank; ++k) {
    if (k == ax) continue;
    outer.shape.push_back(b.shape[k]);
    outer.src_stride.push_back(b.src_stride[k]);
    outer.dst_stride.push_back(b.dst_stride[k]);
  }
  std::int64_t n_outer = 1;
  for (std::int64_t d : outer.shape) n_outer *= d;
  const std::int64_t ta = (na + kTile - 1) / kTile, tb = (nb + kTile - 1) / kTile;
  const std::int64_t grain = std::max<std::int64_t>(1, kGrain / (kTile * kTile));
  pool.parallel_for(n_outer * ta * tb, grain, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t t = lo; t < hi; ++t) {
      std::int64_t o = t / (ta * tb);
      const std::int64_t a0 = (t / tb) % ta * kTile, b0 = t % tb * kTile;
      std::int64_t so = 0, dof = 0;
      for (std::size_t k = outer.shape.size(); k-- > 0;) {
        const std::int64_t i = o % outer.shape[k];
        o /= outer.shape[k];
        so += i * outer.src_stride[k];
        dof += i * outer.dst_stride[k];
      }
      const std::int64_t a1 = std::min(na, a0 + kTile), b1 = std::min(nb, b0 + kTile);
      for (std::int64_t i = a0; i < a1; ++i) {
        const T* s = src + so + i;
        T* d = dst + dof + i * dsa;
        for (std::int64_t j = b0; j < b1; ++j) d[j] = s[j * ssb];
      }
    }
  });
}

template <typename T>
void strided_copy_typed(const void* src, void* dst, const StridedBox& b, ThreadPool& pool) {
  const T* s = static_cast<const T*>(src);
  T* d = static_cast<T*>(dst);
  if (const int a = tiled_axis(b); a >= 0) return copy_tiled<T>(s, d, b, a, pool);
  std::int64_t n = 1;
  for (std::int64_t e : b.shape) n *= e;
  pool.parallel_for(n, kGrain, [&](std::int64_t lo, std::int64_t hi) {
    copy_rows<T>(s, d, b, lo, hi);
  });
}

// Copies the box; src and dst point at the box's first element on each side.
void strided_copy(const void* src, void* dst, std::size_t elem_size, const StridedBox& box,
                  ThreadPool& pool) {
  for (std::int64_t d : box.shape) {
    if (d == 0) return;
  }
  const StridedBox b = simplify(box);
  switch (elem_size) {
    case 1: return strided_copy_typed<std::uint8_t>(src, dst, b, pool);
    case 2: return strided_copy_typed<std::uint16_t>(src, dst, b, pool);
    case 4: return strided_copy_typed<std::uint32_t>(src, dst, b, pool);
    case 8: return strided_copy_typed<std::uint64_t>(src, dst, b, pool);
    default:
      throw InternalError("array kernels: expected an element size of 1, 2, 4 or 8, got " +
                          std::to_string(elem_size));
  }
}

std::size_t elem_size(const Tensor& t) { return dtype_size(t.dtype()); }

// ---- kernels ------------------------------------------------------------------------------

// Reshape, Flatten, ExpandDims, Squeeze: the bytes are unchanged.
void copy_kernel(const KernelContext& k) {
  const Tensor& x = k.in(0);
  Tensor& y = k.out(0);
  const auto* s = static_cast<const char*>(x.raw_data());
  auto* d = static_cast<char*>(y.raw_data());
  if (s == d) return;  // a donated buffer already holds the bytes
  const std::int64_t bytes = static_cast<std::int64_t>(x.nbytes());
  cpu::pool(k).parallel_for(bytes, kGrain * 8, [&](std::int64_t lo, std::int64_t hi) {
    std::memcpy(d + lo, s + lo, static_cast<std::size_t>(hi - lo));
  });
}

void transpose_kernel(const KernelContext& k) {
  const Tensor& x = k.in(0);
  Tensor& y = k.out(0);
  Ints perm = k.attr("perm").as_ints();
  const Ints xs = contiguous_strides(x.shape());
  StridedBox box{y.shape(), {}, contiguous_strides(y.shape())};
  for (std::int64_t p : perm) {
    if (p < 0) p += x.rank();
    box.src_stride.push_back(xs[static_cast<std::size_t>(p)]);
  }
  strided_copy(x.raw_data(), y.raw_data(), elem_size(x), box, cpu::pool(k));
}

// Offset, in elements, of index `at` along contiguous strides.
// Concat and Split: each part is a window of the whole along `axis`.
void concat_kernel(const KernelContext& k) {
  Tensor& y = k.out(0);
  const auto axis = static_cast<std::size_t>(normalized_axis(k.attr("axis").as_int(), y.rank()));
  const Ints ys = contiguous_strides(y.shape());
  auto* dst = static_cast<char*>(y.raw_data());
  const std::size_t es = elem_size(y);
  std::int64_t offset = 0;
  for (const Tensor& x : k.inputs) {
    StridedBox box{x.shape(), contiguous_strides(x.shape()), ys};
    strided_copy(x.raw_data(), dst + offset * ys[axis] * static_cast<std::int64_t>(es), es, box,
                 cpu::pool(k));
    offset += x.shape()[axis];
  }
}

void split_kernel(const KernelContext& k) {
  const Tensor& x = k.in(0);
  const auto axis = static_cast<std::size_t>(normalized_axis(k.attr("axis").as_int(), x.rank()));
  const Ints xs = contiguous_strides(x.shape());
  const auto* src = static_cast<const char*>(x.raw_data());
  const std::size_t es = elem_size(x);
  std::int64_t offset = 0;
  for (Tensor& y : k.outputs) {
    StridedBox box{y.shape(), xs, contiguous_strides(y.shape())};
    strided_copy(src + offset * xs[axis] * static_cast<std::int64_t>(es), y.raw_data(), es, box,
                 cpu::pool(k));
    offset += y.shape()[axis];
  }
}

void slice_kernel(const KernelContext& k) {
  const Tensor& x = k.in(0);
  Tensor& y = k.out(0);
  const Ints xs = contiguous_strides(x.shape());
  const std::size_t es = elem_size(x);
  const std::int64_t start = offset_of(k.attr("begin").as_ints(), xs);
  StridedBox box{y.shape(), xs, contiguous_strides(y.shape())};
  strided_copy(static_cast<const char*>(x.raw_data()) + start * static_cast<std::int64_t>(es),
               y.raw_data(), es, box, cpu::pool(k));
}

void strided_slice_kernel(const KernelContext& k) {
  const Tensor& x = k.in(0);
  const std::size_t es = elem_size(x);
  std::int64_t start = 0;
  const StridedBox box = strided_slice_box(x.shape(), k, start);
  strided_copy(static_cast<const char*>(x.raw_data()) + start * static_cast<std::int64_t>(es),
               k.out(0).raw_data(), es, box, cpu::pool(k));
}

void strided_slice_grad_kernel(const KernelContext& k) {
  const Tensor& dout = k.in(0);
  Tensor& dx = k.out(0);
  const std::size_t es = elem_size(dx);
  std::memset(dx.raw_data(), 0, dx.nbytes());
  std::int64_t start = 0;
  StridedBox box = strided_slice_box(dx.shape(), k, start);
  std::swap(box.src_stride, box.dst_stride);
  strided_copy(dout.raw_data(), static_cast<char*>(dx.raw_data()) + start * static_cast<std::int64_t>(es),
               es, box, cpu::pool(k));
}

void tile_kernel(const KernelContext& k) {
  const Tensor& x = k.in(0);
  Tensor& y = k.out(0);
  Shape s = x.shape();
  Ints m = k.attr("multiples").as_ints();
  if (s.size() < m.size()) s.insert(s.begin(), m.size() - s.size(), 1);
  if (m.size() < s.size()) m.insert(m.begin(), s.size() - m.size(), 1);
  const Ints xs = contiguous_strides(s);
  StridedBox box;
  for (std::size_t i = 0; i < s.size(); ++i) {
    box.shape.push_back(m[i]);
    box.src_stride.push_back(0);
    box.shape.push_back(s[i]);
    box.src_stride.push_back(xs[i]);
  }
  box.dst_stride = contiguous_strides(box.shape);
  strided_copy(x.raw_data(), y.raw_data(), elem_size(x), box, cpu::pool(k));
}

void broadcast_to_kernel(const KernelContext& k) {
  const Tensor& x = k.in(0);
  Tensor& y = k.out(0);
  const Ints xs = contiguous_strides(x.shape());
  const std::size_t lead = y.shape().size() - x.shape().size();
  StridedBox box{y.shape(), Ints(y.shape().size(), 0), contiguous_strides(y.shape())};
  for (std::size_t i = 0; i < x.shape().size(); ++i) {
    if (x.shape()[i] != 1) box.src_stride[lead + i] = xs[i];
  }
  strided_copy(x.raw_data(), y.raw_data(), elem_size(x), box, cpu::pool(k));
}

// Indices as int64, each checked to lie in [0, n) before any data moves.
std::vector<std::int64_t> checked_indices(const KernelContext& k, const Tensor& t,
                                          std::int64_t n) {
  std::vector<std::int64_t> idx(static_cast<std::size_t>(t.numel()));
  if (t.dtype() == DType::kInt32) {
    const std::int32_t* p = t.data<std::int32_t>();
    for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = p[i];
  } else {
    const std::int64_t* p = t.data<std::int64_t>();
    for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = p[i];
  }
  for (std::size_t i = 0; i < idx.size(); ++i) {
    if (idx[i] < 0 || idx[i] >= n) {
      throw ValueError(k.prim.name() + ": expected indices in [0, " + std::to_string(n) +
                       "), got " + std::to_string(idx[i]) + " at position " + std::to_string(i));
    }
  }
  return idx;
}

void gather_kernel(const KernelContext& k) {
  const Tensor& params = k.in(0);
  Tensor& y = k.out(0);
  const Shape& ps = params.shape();
  const auto axis = static_cast<std::size_t>(normalized_axis(k.attr("axis").as_int(), params.rank()));
  const std::int64_t n = ps[axis];
  const std::vector<std::int64_t> idx = checked_indices(k, k.in(1), n);
  const auto count = static_cast<std::int64_t>(idx.size());
  const std::int64_t outer = product(ps, 0, axis);
  const std::int64_t row = product(ps, axis + 1, ps.size()) * static_cast<std::int64_t>(elem_size(params));
  const auto* src = static_cast<const char*>(params.raw_data());
  auto* dst = static_cast<char*>(y.raw_data());
  if (row == 0) return;
  const std::int64_t grain = std::max<std::int64_t>(1, kGrain * 4 / row);
  cpu::pool(k).parallel_for(outer * count, grain, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t r = lo; r < hi; ++r) {
      const std::int64_t o = r / count, j = r % count;
      std::memcpy(dst + r * row, src + (o * n + idx[static_cast<std::size_t>(j)]) * row,
                  static_cast<std::size_t>(row));
    }
  });
}

// Scatter-add: every output element is owned by one task (an outer index and a run of columns)
// that adds its contributions in index order, so the sums do not depend on the thread count.
template <typename T>
void gather_grad_kernel(const KernelContext& k) {
  const Tensor& dout = k.in(0);
  Tensor& dx = k.out(0);
  const Shape& xs = dx.shape();
  const auto axis = static_cast<std::size_t>(normalized_axis(k.attr("axis").as_int(), dx.rank()));
  const std::int64_t n = xs[axis];
  const std::vector<std::int64_t> idx = checked_indices(k, k.in(1), n);
  const auto count = static_cast<std::int64_t>(idx.size());
  const std::int64_t outer = product(xs, 0, axis);
  const std::int64_t inner = product(xs, axis + 1, xs.size());
  const T* g = dout.data<T>();
  T* out = dx.data<T>();
  std::fill(out, out + dx.numel(), T(0));
  if (inner == 0) return;
  constexpr std::int64_t kColumns = 2048;
  const std::int64_t runs = (inner + kColumns - 1) / kColumns;
  const std::int64_t grain = std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, count * std::min(inner, kColumns)));
  cpu::pool(k).parallel_for(outer * runs, grain, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t t = lo; t < hi; ++t) {
      const std::int64_t o = t / runs;
      const std::int64_t c0 = (t % runs) * kColumns, c1 = std::min(inner, c0 + kColumns);
      for (std::int64_t j = 0; j < count; ++j) {
        T* d = out + (o * n + idx[static_cast<std::size_t>(j)]) * inner;
        const T* s = g + (o * count + j) * inner;
        for (std::int64_t c = c0; c < c1; ++c) d[c] += s[c];
      }
    }
  });
}

template <typename I>
void one_hot_fill(const KernelContext& k) {
  const Tensor& indices = k.in(0);
  Tensor& y = k.out(0);
  const std::int64_t depth = k.attr("depth").as_int();
  const std::int64_t axis = k.attr("axis").as_int();
  const auto split = static_cast<std::size_t>(axis == -1 ? indices.rank() : axis);
  const std::int64_t inner = product(indices.shape(), split, indices.shape().size());
  const std::int64_t outer = product(indices.shape(), 0, split);
  const auto on = static_cast<float>(k.attr("on_value").as_double());
  const auto off = static_cast<float>(k.attr("off_value").as_double());
  const I* idx = indices.data<I>();
  float* out = y.data<float>();
  // Output viewed as (outer, depth, inner): a block of `off` per outer index, then `on` where
  // idx[o, i] names a row (out-of-range indices leave the column off).
  const std::int64_t block = depth * inner;
  cpu::pool(k).parallel_for(outer, std::max<std::int64_t>(1, kGrain / block),
                      [&](std::int64_t lo, std::int64_t hi) {
    std::fill(out + lo * block, out + hi * block, off);
    for (std::int64_t o = lo; o < hi; ++o) {
      for (std::int64_t i = 0; i < inner; ++i) {
        const auto v = static_cast<std::int64_t>(idx[o * inner + i]);
        if (v >= 0 && v < depth) out[o * block + v * inner + i] = on;
      }
    }
  });
}

void one_hot_kernel(const KernelContext& k) {
  if (k.out(0).numel() == 0) return;
  if (k.in(0).dtype() == DType::kInt32) return one_hot_fill<std::int32_t>(k);
  one_hot_fill<std::int64_t>(k);
}

void add_all_dtypes(KernelRegistry& r, std::string_view op, Kernel kernel) {
  for (DType d : kAllDTypes) r.add(op, d, kernel);
}

}  // namespace

void register_cpu_array_kernels(KernelRegistry& r) {
  for (const char* op : {"Reshape", "ExpandDims", "Squeeze"}) add_all_dtypes(r, op, copy_kernel);
  for (DType d : kAllDTypes) r.add("Flatten", d, copy_kernel).writes_every_output_element();
  add_all_dtypes(r, "Transpose", transpose_kernel);
  add_all_dtypes(r, "Concat", concat_kernel);
  add_all_dtypes(r, "Split", split_kernel);
  add_all_dtypes(r, "Slice", slice_kernel);
  add_all_dtypes(r, "StridedSlice", strided_slice_kernel);
  add_all_dtypes(r, "StridedSliceGrad", strided_slice_grad_kernel);
  add_all_dtypes(r, "Tile", tile_kernel);
  add_all_dtypes(r, "BroadcastTo", broadcast_to_kernel);
  add_all_dtypes(r, "Gather", gather_kernel);
  r.add("GatherGrad", DType::kFloat32, gather_grad_kernel<float>);
  r.add("GatherGrad", DType::kFloat64, gather_grad_kernel<double>);
  r.add("GatherGrad", DType::kInt32, gather_grad_kernel<std::int32_t>);
  r.add("GatherGrad", DType::kInt64, gather_grad_kernel<std::int64_t>);
  // Keyed by the output dtype (OneHot's kernel_dtype_from is -1); the kernel reads Int32 or
  // Int64 indices.
  r.add("OneHot", DType::kFloat32, one_hot_kernel);
}

}  // namespace loom::backend
