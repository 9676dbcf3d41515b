// CPU kernels of the reductions (ReduceSum/Mean/Max/Min, ArgMax, FloatStatus).
//
// A reduction over any set of axes is done as a sequence of (outer, extent, inner) reductions:
// adjacent reduced axes and adjacent kept axes merge, size-1 axes drop out, and the innermost
// reduced run is reduced first until none is left.
//
// Determinism: one (outer, extent, inner) reduction splits the extent into chunks whose size
// depends only on (extent, inner), never on the thread count; each chunk writes its own partial
// and the partials, laid out as (outer, chunks, inner), are reduced again by the same routine.
// Within a chunk the summation is pairwise (a contiguous run: 16 independent lanes over leaves
// of 512 elements; strided rows: halves of the row range), so float32 sums of millions of
// elements keep about log2(n) ulps of error instead of n. Which thread runs a chunk never
// changes what it computes, so 1 and N threads give bitwise the same result.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "backends/cpu/cpu.h"
#include "backends/kernel.h"
#include "backends/thread_pool.h"

namespace loom::backend {

namespace {

constexpr std::int64_t kGrain = 16384;       // elements per parallel task (roughly)
constexpr std::int64_t kMinChunkRows = 128;  // bounds the partials to 1/128 of the input
constexpr std::int64_t kLanes = 16;
constexpr std::int64_t kLeaf = 512;     // contiguous elements summed lane-wise
constexpr std::int64_t kLeafRows = 16;  // strided rows summed in sequence
constexpr std::int64_t kNarrowWidth = 32;

template <typename T>
T sum_pairwise(const T* x, std::int64_t n);
template <typename T, template <typename> class Op>
T extremum_contiguous(const T* x, std::int64_t n);

template <typename T>
struct SumOp {
  static T identity() { return T(0); }
  static T contiguous(const T* x, std::int64_t n) { return sum_pairwise(x, n); }
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      // Wrapping, as the integer reductions of the frameworks do, without signed overflow.
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    } else {
      return a + b;
    }
  }
};

template <typename T>
struct MaxOp {
  static T identity() {
    if constexpr (std::is_floating_point_v<T>)
      return -std::numeric_limits<T>::infinity();
    else
      return std::numeric_limits<T>::lowest();
  }
  // NaN wins; two selects rather than || so the loops stay branch-free and vectorize.
  static T apply(T a, T b) {
    const T m = b > a ? b : a;
    return b != b ? b : m;
  }
  static T contiguous(const T* x, std::int64_t n) { return extremum_contiguous<T, MaxOp>(x, n); }
};

template <typename T>
struct MinOp {
  static T identity() {
    if constexpr (std::is_floating_point_v<T>)
      return std::numeric_limits<T>::infinity();
    else
      return std::numeric_limits<T>::max();
  }
  static T apply(T a, T b) {
    const T m = b < a ? b : a;
    return b != b ? b : m;
  }
  static T contiguous(const T* x, std::int64_t n) { return extremum_contiguous<T, MinOp>(x, n); }
};

// Sixteen independent lanes over a leaf of at most kLeaf elements.
template <typename T>
T sum_leaf(const T* x, std::int64_t n) {
  T acc[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (std::int64_t j = 0; j < kLanes; ++j) acc[j] = SumOp<T>::apply(acc[j], x[i + j]);
  }
  for (std::int64_t j = 0; i < n; ++i, ++j) acc[j] = SumOp<T>::apply(acc[j], x[i]);
  for (std::int64_t w = kLanes / 2; w > 0; w /= 2) {
    for (std::int64_t j = 0; j < w; ++j) acc[j] = SumOp<T>::apply(acc[j], acc[j + w]);
  }
  return acc[0];
}

// Pairwise over a contiguous run; split points are multiples of kLanes so leaves stay aligned.
template <typename T>
T sum_pairwise(const T* x, std::int64_t n) {
  if (n <= kLeaf) return sum_leaf(x, n);
  const std::int64_t half = (n / 2 + kLanes - 1) / kLanes * kLanes;
  return SumOp<T>::apply(sum_pairwise(x, half), sum_pairwise(x + half, n - half));
}

// Scratch rows reduce_rows needs for `nrows` rows.
std::int64_t scratch_levels(std::int64_t nrows) {
  std::int64_t levels = 1;
  for (std::int64_t r = nrows; r > kLeafRows; r = (r + 1) / 2) ++levels;
  return levels;
}

// out[j] = reduction over r < nrows of x[r * stride + j], j < width; pairwise over rows.
// scratch holds scratch_levels(nrows) rows of `width`.
template <typename T, typename Op>
void reduce_rows(const T* x, std::int64_t nrows, std::int64_t stride, std::int64_t width, T* out,
                 T* scratch) {
  if (nrows <= kLeafRows) {
    std::copy(x, x + width, out);
    for (std::int64_t r = 1; r < nrows; ++r) {
      const T* row = x + r * stride;
      for (std::int64_t j = 0; j < width; ++j) out[j] = Op::apply(out[j], row[j]);
    }
    return;
  }
  const std::int64_t half = (nrows + 1) / 2;
  reduce_rows<T, Op>(x, half, stride, width, out, scratch + width);
  reduce_rows<T, Op>(x + half * stride, nrows - half, stride, width, scratch, scratch + width);
  for (std::int64_t j = 0; j < width; ++j) out[j] = Op::apply(out[j], scratch[j]);
}

// A max or min of a contiguous run, folded as rows of 64 first: a lane-wise select
// kept in registers is left scalar and branchy by GCC, while the row form vectorizes. The order
// of a max never changes its value.
template <typename T, template <typename> class Op>
T extremum_contiguous(const T* x, std::int64_t n) {
  constexpr std::int64_t kWidth = 64;
  const std::int64_t rows = n / kWidth;
  T result = Op<T>::identity();
  if (rows > 0) {
    T folded[kWidth];
    std::vector<T> scratch(static_cast<std::size_t>(scratch_levels(rows) * kWidth));
    reduce_rows<T, Op<T>>(x, rows, kWidth, kWidth, folded, scratch.data());
    for (T v : folded) result = Op<T>::apply(result, v);
  }
  for (std::int64_t i = rows * kWidth; i < n; ++i) result = Op<T>::apply(result, x[i]);
  return result;
}

// reduce_rows for rows narrower than kNarrowWidth, whose short inner loops would run mostly
// scalar: consecutive rows are taken together as wide rows of a multiple of `width` elements,
// reduced as such, and the wide result folded column by column; leftover rows come last.
template <typename T, typename Op>
void reduce_narrow(const T* x, std::int64_t nrows, std::int64_t width, T* out) {
  const std::int64_t per_wide = kNarrowWidth * 2 / width;
  const std::int64_t wide = per_wide * width;
  const std::int64_t wide_rows = nrows / per_wide;
  std::int64_t r = 0;
  if (wide_rows > 0) {
    T folded[kNarrowWidth * 2];
    std::vector<T> scratch(static_cast<std::size_t>(scratch_levels(wide_rows) * wide));
    reduce_rows<T, Op>(x, wide_rows, wide, wide, folded, scratch.data());
    std::copy(folded, folded + width, out);
    for (std::int64_t k = 1; k < per_wide; ++k) {
      for (std::int64_t j = 0; j < width; ++j) out[j] = Op::apply(out[j], folded[k * width + j]);
    }
    r = wide_rows * per_wide;
  } else {
    std::copy(x, x + width, out);
    r = 1;
  }
  for (; r < nrows; ++r) {
    for (std::int64_t j = 0; j < width; ++j) out[j] = Op::apply(out[j], x[r * width + j]);
  }
}

// y[o, i] = reduction over r of x[o, r, i].
template <typename T, typename Op>
void reduce_axis(const T* x, T* y, std::int64_t outer, std::int64_t extent, std::int64_t inner,
                 ThreadPool& pool) {
  if (outer == 0 || inner == 0) return;
  if (extent == 0) {
    std::fill(y, y + outer * inner, Op::identity());
    return;
  }
  const std::int64_t chunk_rows = inner == 1 ? kGrain : std::max(kMinChunkRows, kGrain / inner);
  const std::int64_t chunks = ThreadPool::num_chunks(extent, chunk_rows);
  std::vector<T> partials(chunks > 1 ? static_cast<std::size_t>(outer * chunks * inner) : 0);
  T* dst = chunks > 1 ? partials.data() : y;
  const std::int64_t rows_per_item = std::min(extent, chunk_rows);

  if (inner == 1) {
    const std::int64_t items = outer * chunks;
    pool.parallel_for(items, std::max<std::int64_t>(1, kGrain / rows_per_item),
                      [&](std::int64_t b, std::int64_t e) {
                        for (std::int64_t it = b; it < e; ++it) {
                          const std::int64_t o = it / chunks, c = it % chunks;
                          const std::int64_t r0 = c * chunk_rows;
                          const std::int64_t n = std::min(chunk_rows, extent - r0);
                          dst[it] = Op::contiguous(x + o * extent + r0, n);
                        }
                      });
  } else {
    // Column blocks only split the work; they never change what a column computes.
    const std::int64_t col_block =
        inner < kNarrowWidth
            ? inner
            : std::min(inner, std::max<std::int64_t>(kLanes, kGrain / rows_per_item));
    const std::int64_t blocks = ThreadPool::num_chunks(inner, col_block);
    const std::int64_t items = outer * chunks * blocks;
    pool.parallel_for(items, std::max<std::int64_t>(1, kGrain / (rows_per_item * col_block)),
                      [&](std::int64_t b, std::int64_t e) {
                        std::vector<T> scratch(
                            static_cast<std::size_t>(scratch_levels(rows_per_item) * col_block));
                        for (std::int64_t it = b; it < e; ++it) {
                          const std::int64_t blk = it % blocks, oc = it / blocks;
                          const std::int64_t o = oc / chunks, c = oc % chunks;
                          const std::int64_t r0 = c * chunk_rows;
                          const std::int64_t nrows = std::min(chunk_rows, extent - r0);
                          const std::int64_t j0 = blk * col_block;
                          const std::int64_t width = std::min(col_block, inner - j0);
                          const T* src = x + (o * extent + r0) * inner + j0;
                          if (inner < kNarrowWidth) {
                            reduce_narrow<T, Op>(src, nrows, inner, dst + oc * inner);
                          } else {
                            reduce_rows<T, Op>(src, nrows, inner, width, dst + oc * inner + j0,
                                               scratch.data());
                          }
                        }
                      });
  }
  if (chunks > 1) reduce_axis<T, Op>(partials.data(), y, outer, chunks, inner, pool);
}

// The reduction as runs of (size, reduced) with adjacent runs of one kind merged and size-1
// axes dropped.
struct Run {
  std::int64_t size;
  bool reduced;
};

std::vector<Run> collapse(const Shape& shape, const std::vector<bool>& reduced) {
  std::vector<Run> runs;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    if (!runs.empty() && runs.back().reduced == reduced[i]) {
      runs.back().size *= shape[i];
    } else {
      runs.push_back({shape[i], reduced[i]});
    }
  }
  return runs;
}

std::vector<bool> reduced_mask(const KernelContext& k) {
  const auto rank = k.in(0).rank();
  std::vector<bool> mask(static_cast<std::size_t>(rank), false);
  std::vector<std::int64_t> axis = k.attr("axis").as_ints();
  if (axis.empty()) std::fill(mask.begin(), mask.end(), true);
  for (std::int64_t a : axis) {
    if (rank > 0) mask[static_cast<std::size_t>(a < 0 ? a + rank : a)] = true;
  }
  return mask;
}

template <typename T, typename Op>
void reduce_kernel(const KernelContext& k) {
  const Tensor& xt = k.in(0);
  Tensor& yt = k.out(0);
  std::vector<Run> runs = collapse(xt.shape(), reduced_mask(k));
  const T* src = xt.data<T>();
  T* y = yt.data<T>();
  if (yt.numel() == 0) return;
  std::vector<T> buffers[2];
  int next = 0;
  for (;;) {
    auto last = std::find_if(runs.rbegin(), runs.rend(), [](const Run& r) { return r.reduced; });
    if (last == runs.rend()) {
      if (src != y) std::copy(src, src + yt.numel(), y);
      return;
    }
    const auto at = static_cast<std::size_t>(runs.rend() - last - 1);
    std::int64_t outer = 1, inner = 1;
    for (std::size_t i = 0; i < at; ++i) outer *= runs[i].size;
    for (std::size_t i = at + 1; i < runs.size(); ++i) inner *= runs[i].size;
    const std::int64_t extent = runs[at].size;
    runs.erase(runs.begin() + static_cast<std::ptrdiff_t>(at));
    const bool final =
        std::none_of(runs.begin(), runs.end(), [](const Run& r) { return r.reduced; });
    T* dst = y;
    if (!final) {
      buffers[next].resize(static_cast<std::size_t>(outer * inner));
      dst = buffers[next].data();
      next ^= 1;
    }
    reduce_axis<T, Op>(src, dst, outer, extent, inner, cpu::pool(k));
    if (final) return;
    src = dst;
    // The kept runs on both sides of the removed one are now adjacent.
    if (at > 0 && at < runs.size() && !runs[at - 1].reduced && !runs[at].reduced) {
      runs[at - 1].size *= runs[at].size;
      runs.erase(runs.begin() + static_cast<std::ptrdiff_t>(at));
    }
  }
}

template <typename T>
void mean_kernel(const KernelContext& k) {
  reduce_kernel<T, SumOp<T>>(k);
  std::int64_t count = 1;
  const std::vector<bool> mask = reduced_mask(k);
  for (std::size_t i = 0; i < mask.size(); ++i) {
    if (mask[i]) count *= k.in(0).shape()[i];
  }
  T* y = k.out(0).data<T>();
  const T divisor = static_cast<T>(count);  // 0 for an empty extent: the mean is NaN
  cpu::pool(k).parallel_for(k.out(0).numel(), kGrain, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) y[i] /= divisor;
  });
}

// Index of the first maximum along the middle axis of (outer, extent, inner); NaN counts as
// the maximum (its first occurrence wins), as in NumPy.
template <typename T, typename I>
void argmax_rows(const T* x, I* y, std::int64_t outer, std::int64_t extent, std::int64_t inner,
                 ThreadPool& pool) {
  auto better = [](T v, T best) { return v > best || (v != v && best == best); };
  if (inner == 1) {
    pool.parallel_for(outer, std::max<std::int64_t>(1, kGrain / extent),
                      [&](std::int64_t b, std::int64_t e) {
                        for (std::int64_t o = b; o < e; ++o) {
                          const T* row = x + o * extent;
                          T best = row[0];
                          std::int64_t at = 0;
                          for (std::int64_t r = 1; r < extent; ++r) {
                            if (better(row[r], best)) best = row[r], at = r;
                          }
                          y[o] = static_cast<I>(at);
                        }
                      });
    return;
  }
  const std::int64_t col_block = std::min<std::int64_t>(inner, 256);
  const std::int64_t blocks = ThreadPool::num_chunks(inner, col_block);
  pool.parallel_for(outer * blocks, std::max<std::int64_t>(1, kGrain / (extent * col_block)),
                    [&](std::int64_t b, std::int64_t e) {
                      std::vector<T> best(static_cast<std::size_t>(col_block));
                      for (std::int64_t it = b; it < e; ++it) {
                        const std::int64_t o = it / blocks, j0 = (it % blocks) * col_block;
                        const std::int64_t width = std::min(col_block, inner - j0);
                        const T* base = x + o * extent * inner + j0;
                        I* out = y + o * inner + j0;
                        for (std::int64_t j = 0; j < width; ++j) best[j] = base[j], out[j] = 0;
                        for (std::int64_t r = 1; r < extent; ++r) {
                          const T* row = base + r * inner;
                          for (std::int64_t j = 0; j < width; ++j) {
                            if (better(row[j], best[j]))
                              best[j] = row[j], out[j] = static_cast<I>(r);
                          }
                        }
                      }
                    });
}

template <typename T>
void argmax_kernel(const KernelContext& k) {
  const Tensor& xt = k.in(0);
  const std::int64_t rank = xt.rank();
  std::int64_t axis = k.attr("axis").as_int();
  if (axis < 0) axis += rank;
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t i = 0; i < axis; ++i) outer *= xt.shape()[static_cast<std::size_t>(i)];
  for (std::int64_t i = axis + 1; i < rank; ++i) inner *= xt.shape()[static_cast<std::size_t>(i)];
  const std::int64_t extent = xt.shape()[static_cast<std::size_t>(axis)];
  if (outer * inner == 0) return;
  Tensor& yt = k.out(0);
  if (yt.dtype() == DType::kInt64) {
    argmax_rows<T, std::int64_t>(xt.data<T>(), yt.data<std::int64_t>(), outer, extent, inner,
                                 cpu::pool(k));
  } else {
    argmax_rows<T, std::int32_t>(xt.data<T>(), yt.data<std::int32_t>(), outer, extent, inner,
                                 cpu::pool(k));
  }
}

// FloatStatus: 1 when an element's exponent bits are all ones (Inf or NaN). The bits are OR-ed
// per chunk (a loop the compiler vectorizes; no floating compare), the chunks' flags kept apart.
template <typename T>
void float_status_kernel(const KernelContext& k) {
  using Bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  constexpr Bits kExponent =
      static_cast<Bits>(sizeof(T) == 4 ? 0x7f800000ull : 0x7ff0000000000000ull);
  const Tensor& xt = k.in(0);
  const Bits* x = reinterpret_cast<const Bits*>(xt.data<T>());
  std::atomic<bool> found{false};
  cpu::pool(k).parallel_for(xt.numel(), 4 * kGrain, [&](std::int64_t b, std::int64_t e) {
    bool any = false;
    for (std::int64_t i = b; i < e; i += 1024) {
      const std::int64_t end = std::min(e, i + 1024);
      Bits all = 0;  // exponent fields that are all ones, OR-ed
      for (std::int64_t j = i; j < end; ++j) all |= (x[j] & kExponent) == kExponent ? 1 : 0;
      if (all != 0) {
        any = true;
        break;
      }
    }
    if (any) found.store(true, std::memory_order_relaxed);
  });
  k.out(0).data<float>()[0] = found.load() ? 1.0f : 0.0f;
}

template <typename T>
void register_numeric(KernelRegistry& r) {
  const DType d = DTypeOf<T>::value;
  r.add("ReduceSum", d, reduce_kernel<T, SumOp<T>>);
  r.add("ReduceMax", d, reduce_kernel<T, MaxOp<T>>);
  r.add("ReduceMin", d, reduce_kernel<T, MinOp<T>>);
  r.add("ArgMax", d, argmax_kernel<T>);
}

}  // namespace

void register_cpu_reduce_kernels(KernelRegistry& r) {
  register_numeric<float>(r);
  register_numeric<double>(r);
  register_numeric<std::int32_t>(r);
  register_numeric<std::int64_t>(r);
  r.add("ReduceMean", DType::kFloat32, mean_kernel<float>);
  r.add("ReduceMean", DType::kFloat64, mean_kernel<double>);
  r.add("FloatStatus", DType::kFloat32, float_status_kernel<float>).writes_every_output_element();
  r.add("FloatStatus", DType::kFloat64, float_status_kernel<double>)
      .writes_every_output_element();
}

}  // namespace loom::backend
