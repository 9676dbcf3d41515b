// CUDA kernels of the reductions and losses: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ArgMax,
// BiasAddGrad, L2Loss, Softmax, LogSoftmax, SoftmaxCrossEntropyWithLogits and
// SparseSoftmaxCrossEntropyWithLogits (the CPU's reduce_kernels.cc, matmul_kernels.cc's
// BiasAddGrad, activation_kernels.cc's softmaxes and norm_loss_kernels.cc's losses).
//
// Every result is bitwise repeatable: no atomics, and each value is combined in an order fixed by
// the shapes alone. A reduction over any set of axes is planned once per node (prepare) as a
// sequence of (outer, extent, inner) stages, as the CPU does: adjacent reduced axes and adjacent
// kept axes merge, size-1 axes drop out, and the innermost reduced run goes first. A stage whose
// reduced rows are contiguous (inner == 1) gives each output to one warp (each lane a strided
// share of the run, then a fixed shuffle tree); otherwise each output column goes to one thread,
// which walks the rows in order with the neighbouring columns read by the neighbouring threads;
// where those threads would be few (under 16,384: a bias gradient's 6 or 120 columns), a block of
// 32 warps takes 32 columns, each warp every 32nd row, and the warps' partials are combined in
// warp order.
// A long extent with too few outputs to fill the GPU is cut into chunks whose count depends only
// on the shape; the chunks' partials, laid out (outer, chunks, inner) in the node's workspace,
// are reduced by the next stage. Float32 and Float64 sums are accumulated in double (partials
// too) and rounded once at the end, which is at least as accurate as the CPU's pairwise float
// sums; integer sums wrap, as the CPU's do; max and min let NaN win, as the CPU's do. On an
// H100, ReduceSum of a 4096×4096 Float32 matrix ran at 2.4 TB/s over its rows, 2.0 over its
// columns, and over all 16M elements (two stages) at 1.8.
//
// The softmaxes and losses work row by row: a warp per row when the reduced axis is the last
// (three passes over the row: max, sum of exponentials, outputs), a thread per (outer, inner)
// column otherwise. The losses follow the CPU in double: max-shifted log-sum-exp, the dense loss
// -Σ labels·(x - lse), and the sparse loss's row losses added in one fixed tree. What the CPU
// checks on the host, the GPU cannot without waiting for the stream: a sparse label outside
// [0, classes) gives a NaN row loss (and a NaN gradient row) instead of a ValueError.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/gpu/cuda.h"
#include "backends/gpu/device_math.cuh"
#include "core/ir/error.h"

namespace loom::backend::cuda {

namespace {

using std::int64_t;

constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;

__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks for `items` warps of work (kThreads / 32 warps a block).
unsigned warp_blocks(int64_t items) { return blocks(items * kWarp); }

__device__ __forceinline__ int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t thread_stride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// ---- Reduction operators ------------------------------------------------------------------
//
// Acc is what partials are kept in; load() maps an input element into it (first stage only),
// combine() is the reduction, finish() makes the output element (last stage only) given the
// number of elements reduced into it.

template <typename T, bool = std::is_floating_point_v<T>>
struct SumAccOf {
  using type = double;
};
template <typename T>
struct SumAccOf<T, false> {
  using type = std::make_unsigned_t<T>;
};
template <typename T>
using SumAcc = typename SumAccOf<T>::type;

template <typename T>
struct SumOp {
  using Acc = SumAcc<T>;
  __device__ static Acc identity() { return Acc(0); }
  __device__ static Acc load(T x) { return static_cast<Acc>(x); }
  __device__ static Acc combine(Acc a, Acc b) { return a + b; }
  __device__ static T finish(Acc a, int64_t) { return static_cast<T>(a); }
};

// The sum rounded to T, then divided by the count in T, as the CPU's ReduceMean (an empty
// extent gives 0 / 0, NaN).
template <typename T>
struct MeanOp : SumOp<T> {
  using Acc = typename SumOp<T>::Acc;
  __device__ static T finish(Acc a, int64_t count) {
    return dm::div(static_cast<T>(a), static_cast<T>(count));
  }
};

// NaN wins; the CPU's two selects.
template <typename T>
struct MaxOp {
  using Acc = T;
  __device__ static Acc identity() { return dm::lowest<T>(); }
  __device__ static Acc load(T x) { return x; }
  __device__ static Acc combine(Acc a, Acc b) {
    const T m = b > a ? b : a;
    return dm::is_nan(b) ? b : m;
  }
  __device__ static T finish(Acc a, int64_t) { return a; }
};

template <typename T>
struct MinOp {
  using Acc = T;
  __device__ static Acc identity() { return dm::highest<T>(); }
  __device__ static Acc load(T x) { return x; }
  __device__ static Acc combine(Acc a, Acc b) {
    const T m = b < a ? b : a;
    return dm::is_nan(b) ? b : m;
  }
  __device__ static T finish(Acc a, int64_t) { return a; }
};

// L2Loss: Σ x² / 2 in double.
template <typename T>
struct SquareSumOp {
  using Acc = double;
  __device__ static Acc identity() { return 0.0; }
  __device__ static Acc load(T x) {
    const auto v = static_cast<double>(x);
    return dm::mul(v, v);
  }
  __device__ static Acc combine(Acc a, Acc b) { return dm::add(a, b); }
  __device__ static T finish(Acc a, int64_t) { return static_cast<T>(a / 2); }
};

template <typename Op, typename V>
__device__ __forceinline__ V warp_reduce(V v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    v = Op::combine(v, __shfl_down_sync(kFullMask, v, offset));
  }
  return v;  // complete in lane 0
}

// ---- Reduction stages ---------------------------------------------------------------------

// One element into a stage's accumulator: mapped by Op::load in a reduction's first stage (kLoad),
// as it is in the later ones; and the stage's result: Op::finish in its last stage (kFinish).
template <typename Op, bool kLoad, typename In>
__device__ __forceinline__ typename Op::Acc fold(typename Op::Acc acc, In v) {
  if constexpr (kLoad) {
    return Op::combine(acc, Op::load(v));
  } else {
    return Op::combine(acc, v);
  }
}
template <typename Op, bool kFinish, typename Out>
__device__ __forceinline__ void put(Out& y, typename Op::Acc acc, int64_t count) {
  if constexpr (kFinish) {
    y = Op::finish(acc, count);
  } else {
    y = acc;
  }
}

// y[o, c] = reduction of the contiguous run x[o, c·rows .. min(extent, (c+1)·rows)) (inner == 1),
// for item = o·chunks + c; one warp per item.
template <typename T, typename Op, typename In, typename Out, bool kLoad, bool kFinish>
__global__ void reduce_rows_kernel(const In* x, Out* y, int64_t items, int64_t extent,
                                   int64_t rows, int64_t chunks, int64_t count) {
  using Acc = typename Op::Acc;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int64_t warps = thread_stride() / kWarp;
  for (int64_t item = global_thread() / kWarp; item < items; item += warps) {
    const int64_t o = item / chunks, c = item % chunks;
    const int64_t first = c * rows;
    const int64_t len = std::min(rows, extent - first);
    const In* p = x + o * extent + first;
    Acc acc = Op::identity();
    for (int64_t r = lane; r < len; r += kWarp) acc = fold<Op, kLoad>(acc, p[r]);
    acc = warp_reduce<Op>(acc);
    if (lane == 0) put<Op, kFinish>(y[item], acc, count);
  }
}

// y[o, c, j] = reduction over rows r in chunk c of x[o, r, j]; one thread per output.
template <typename T, typename Op, typename In, typename Out, bool kLoad, bool kFinish>
__global__ void reduce_cols_kernel(const In* x, Out* y, int64_t outer, int64_t extent,
                                   int64_t inner, int64_t rows, int64_t chunks, int64_t count) {
  using Acc = typename Op::Acc;
  const int64_t total = outer * chunks * inner;
  for (int64_t t = global_thread(); t < total; t += thread_stride()) {
    const int64_t j = t % inner;
    const int64_t oc = t / inner;
    const int64_t o = oc / chunks, c = oc % chunks;
    const int64_t first = c * rows;
    const int64_t last = std::min(extent, first + rows);
    const In* p = x + (o * extent + first) * inner + j;
    Acc acc = Op::identity();
    for (int64_t r = first; r < last; ++r, p += inner) acc = fold<Op, kLoad>(acc, *p);
    put<Op, kFinish>(y[t], acc, count);
  }
}

// The same stage with few outputs (a bias gradient: 6 channels over 256 rows): a block per 32
// columns of an (o, c) item, its kColumnGroups warps walking the rows r ≡ group (mod
// kColumnGroups) in order, lane j reading column j (neighbouring columns, neighbouring lanes),
// then the groups' partials combined in group order. The order depends only on the shape.
constexpr int kColumnGroups = 32;
template <typename T, typename Op, typename In, typename Out, bool kLoad, bool kFinish>
__global__ void reduce_cols_block_kernel(const In* x, Out* y, int64_t outer, int64_t extent,
                                         int64_t inner, int64_t rows, int64_t chunks,
                                         int64_t count) {
  using Acc = typename Op::Acc;
  __shared__ Acc part[kColumnGroups][kWarp + 1];
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int group = static_cast<int>(threadIdx.x / kWarp);
  const int64_t tiles = ceil_div(inner, kWarp);
  const int64_t items = outer * chunks * tiles;
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int64_t tile = item % tiles;
    const int64_t oc = item / tiles;
    const int64_t o = oc / chunks, c = oc % chunks;
    const int64_t j = tile * kWarp + lane;
    const int64_t first = c * rows;
    const int64_t last = first + rows < extent ? first + rows : extent;
    Acc acc = Op::identity();
    if (j < inner) {
      const In* p = x + o * extent * inner + j;
      for (int64_t r = first + group; r < last; r += kColumnGroups) {
        acc = fold<Op, kLoad>(acc, p[r * inner]);
      }
    }
    part[group][lane] = acc;
    __syncthreads();
    if (group == 0 && j < inner) {
      for (int g = 1; g < kColumnGroups; ++g) acc = Op::combine(acc, part[g][lane]);
      put<Op, kFinish>(y[oc * inner + j], acc, count);
    }
    __syncthreads();
  }
}

// Every output element the reduction of nothing (an input with a zero-sized reduced axis).
template <typename T, typename Op>
__global__ void reduce_empty_kernel(T* y, int64_t n, int64_t count) {
  for (int64_t i = global_thread(); i < n; i += thread_stride()) {
    y[i] = Op::finish(Op::identity(), count);
  }
}

struct Stage {
  int64_t outer, extent, inner;
  int64_t rows, chunks;  // the extent cut in `chunks` runs of `rows` (the last may be shorter)
  int src;               // -1: the input; else workspace buffer 0 or 1
  int dst;               // -1: the output; else workspace buffer 0 or 1
};

struct ReducePlan {
  std::vector<Stage> stages;
  int64_t count = 1;              // elements reduced into each output
  std::size_t buffer_bytes = 0;   // each of the two workspace buffers
  bool empty_input = false;       // some reduced axis is 0: outputs are finish(identity)
};

// Warps a row stage should have for the GPU to be busy, and threads a column stage should.
constexpr int64_t kTargetWarps = 2048;
constexpr int64_t kTargetThreads = 65536;
constexpr int64_t kMaxRowRun = 4096;    // row runs up to this long are never cut
constexpr int64_t kMinRowChunk = 1024;
constexpr int64_t kMaxColumnRun = 256;  // column runs up to this long are never cut
constexpr int64_t kMinColumnChunk = 64;

// Appends the stages of one (outer, extent, inner) reduction.
void plan_axis(std::vector<Stage>& stages, int64_t outer, int64_t extent, int64_t inner) {
  for (;;) {
    int64_t chunks = 1;
    if (inner == 1 && extent > kMaxRowRun) {
      chunks = std::min(ceil_div(extent, kMinRowChunk), ceil_div(kTargetWarps, outer));
    } else if (inner > 1 && extent > kMaxColumnRun) {
      chunks = std::min(ceil_div(extent, kMinColumnChunk), ceil_div(kTargetThreads, outer * inner));
    }
    chunks = std::max<int64_t>(1, chunks);
    const int64_t rows = ceil_div(extent, chunks);
    chunks = ceil_div(extent, rows);
    stages.push_back(Stage{outer, extent, inner, rows, chunks, 0, 0});
    if (chunks == 1) return;
    extent = chunks;
  }
}

// The stages reducing the axes where `reduced` is set of an input of `shape`.
ReducePlan plan_reduction(const Shape& shape, const std::vector<bool>& reduced,
                          std::size_t acc_size) {
  ReducePlan plan;
  struct Run {
    int64_t size;
    bool reduced;
  };
  std::vector<Run> runs;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (reduced[i]) plan.count *= shape[i];
    if (shape[i] == 0 && reduced[i]) plan.empty_input = true;
    if (shape[i] == 1) continue;
    if (!runs.empty() && runs.back().reduced == reduced[i]) {
      runs.back().size *= shape[i];
    } else {
      runs.push_back({shape[i], reduced[i]});
    }
  }
  if (plan.empty_input) return plan;
  for (;;) {
    auto last = std::find_if(runs.rbegin(), runs.rend(), [](const Run& r) { return r.reduced; });
    if (last == runs.rend()) break;
    const auto at = static_cast<std::size_t>(runs.rend() - last - 1);
    int64_t outer = 1, inner = 1;
    for (std::size_t i = 0; i < at; ++i) outer *= runs[i].size;
    for (std::size_t i = at + 1; i < runs.size(); ++i) inner *= runs[i].size;
    plan_axis(plan.stages, outer, runs[at].size, inner);
    runs.erase(runs.begin() + static_cast<std::ptrdiff_t>(at));
    // The kept runs on both sides of the removed one are now adjacent.
    if (at > 0 && at < runs.size() && !runs[at - 1].reduced && !runs[at].reduced) {
      runs[at - 1].size *= runs[at].size;
      runs.erase(runs.begin() + static_cast<std::ptrdiff_t>(at));
    }
  }
  if (plan.stages.empty()) {
    // Nothing to reduce (every reduced axis has size 1): one pass still maps and finishes each
    // element (ReduceMean divides by 1, L2Loss squares and halves).
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    plan.stages.push_back(Stage{1, 1, n, 1, 1, 0, 0});
  }
  int64_t largest = 0;
  for (std::size_t s = 0; s < plan.stages.size(); ++s) {
    Stage& st = plan.stages[s];
    st.src = s == 0 ? -1 : static_cast<int>((s - 1) % 2);
    st.dst = s + 1 == plan.stages.size() ? -1 : static_cast<int>(s % 2);
    if (st.dst >= 0) largest = std::max(largest, st.outer * st.chunks * st.inner);
  }
  plan.buffer_bytes = (static_cast<std::size_t>(largest) * acc_size + 255) / 256 * 256;
  return plan;
}

std::vector<bool> axis_mask(const ir::Value& axis_attr, std::int64_t rank) {
  std::vector<bool> mask(static_cast<std::size_t>(rank), false);
  const std::vector<std::int64_t> axis = axis_attr.as_ints();
  if (axis.empty()) std::fill(mask.begin(), mask.end(), true);
  for (std::int64_t a : axis) {
    if (rank > 0) mask[static_cast<std::size_t>(a < 0 ? a + rank : a)] = true;
  }
  return mask;
}

// Which axes a kernel reduces.
enum class Axes {
  kAttr,     // the `axis` attribute (empty: all), as ReduceSum & co.
  kAll,      // every axis (L2Loss)
  kBiasGrad  // every axis but the channel axis (1, or the last for NHWC), as BiasAddGrad
};

template <Axes kAxes>
std::vector<bool> reduced_axes(const ir::Primitive& prim, const Shape& shape) {
  const auto rank = static_cast<std::int64_t>(shape.size());
  if constexpr (kAxes == Axes::kAttr) {
    return axis_mask(prim.attr("axis"), rank);
  } else if constexpr (kAxes == Axes::kAll) {
    return std::vector<bool>(shape.size(), true);
  } else {
    std::vector<bool> mask(shape.size(), true);
    const std::size_t axis = prim.attr("format").as_string() == "NHWC" ? shape.size() - 1 : 1;
    if (axis < mask.size()) mask[axis] = false;
    return mask;
  }
}

template <typename T, typename Op, Axes kAxes>
Prepared prepare_reduce(const PrepareContext& c) {
  auto plan = std::make_shared<ReducePlan>(plan_reduction(
      c.inputs[0].shape, reduced_axes<kAxes>(c.prim, c.inputs[0].shape), sizeof(typename Op::Acc)));
  const std::size_t workspace = 2 * plan->buffer_bytes;
  return Prepared{std::move(plan), workspace};
}

template <typename T, typename Op, typename In, typename Out, bool kLoad, bool kFinish>
void launch_stage(const Stage& s, const In* x, Out* y, int64_t count, cudaStream_t stream) {
  if (s.inner == 1) {
    const int64_t items = s.outer * s.chunks;
    reduce_rows_kernel<T, Op, In, Out, kLoad, kFinish><<<warp_blocks(items), kThreads, 0, stream>>>(
        x, y, items, s.extent, s.rows, s.chunks, count);
  } else if (s.rows >= kColumnGroups && s.outer * s.chunks * s.inner < kTargetThreads / 4) {
    // Too few columns for a thread each to keep the GPU busy through a long walk.
    const int64_t items = s.outer * s.chunks * ceil_div(s.inner, kWarp);
    reduce_cols_block_kernel<T, Op, In, Out, kLoad, kFinish>
        <<<static_cast<unsigned>(std::min<int64_t>(items, 65535)), kWarp * kColumnGroups, 0,
           stream>>>(x, y, s.outer, s.extent, s.inner, s.rows, s.chunks, count);
  } else {
    reduce_cols_kernel<T, Op, In, Out, kLoad, kFinish>
        <<<blocks(s.outer * s.chunks * s.inner), kThreads, 0, stream>>>(
            x, y, s.outer, s.extent, s.inner, s.rows, s.chunks, count);
  }
  LOOM_CUDA_CHECK(cudaGetLastError());
}

template <typename T, typename Op, Axes kAxes>
void reduce_kernel(const KernelContext& k) {
  using Acc = typename Op::Acc;
  const ReducePlan& plan = k.state<ReducePlan>();
  const cudaStream_t stream = context(k).stream;
  T* y = k.out(0).data<T>();
  const int64_t n_out = k.out(0).numel();
  if (n_out == 0) return;
  if (plan.empty_input) {
    reduce_empty_kernel<T, Op><<<blocks(n_out), kThreads, 0, stream>>>(y, n_out, plan.count);
    LOOM_CUDA_CHECK(cudaGetLastError());
    return;
  }
  const T* x = k.in(0).data<T>();
  auto* ws = static_cast<char*>(k.workspace);
  auto buffer = [&](int b) { return reinterpret_cast<Acc*>(ws + b * plan.buffer_bytes); };
  for (const Stage& s : plan.stages) {
    const bool first = s.src < 0, last = s.dst < 0;
    if (first && last) {
      launch_stage<T, Op, T, T, true, true>(s, x, y, plan.count, stream);
    } else if (first) {
      launch_stage<T, Op, T, Acc, true, false>(s, x, buffer(s.dst), plan.count, stream);
    } else if (last) {
      launch_stage<T, Op, Acc, T, false, true>(s, buffer(s.src), y, plan.count, stream);
    } else {
      launch_stage<T, Op, Acc, Acc, false, false>(s, buffer(s.src), buffer(s.dst), plan.count,
                                                  stream);
    }
  }
}

// ---- ArgMax -------------------------------------------------------------------------------

// Whether (bv at bi) replaces (av at ai) as the first maximum: a NaN beats any number, a larger
// value a smaller one, and between equals (or two NaNs) the smaller index wins; index -1 marks
// an empty candidate. The rule is commutative and associative, so any combination order finds
// the first maximum, NaN counting as the largest (the CPU's and NumPy's argmax).
template <typename T>
__device__ __forceinline__ bool replaces(T bv, int64_t bi, T av, int64_t ai) {
  if (bi < 0) return false;
  if (ai < 0) return true;
  const bool an = dm::is_nan(av), bn = dm::is_nan(bv);
  if (an || bn) return an && bn ? bi < ai : bn;
  if (bv != av) return bv > av;
  return bi < ai;
}

// inner == 1: a warp per row.
template <typename T, typename I>
__global__ void argmax_rows_kernel(const T* x, I* y, int64_t outer, int64_t extent) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int64_t warps = thread_stride() / kWarp;
  for (int64_t o = global_thread() / kWarp; o < outer; o += warps) {
    const T* row = x + o * extent;
    T best = T(0);
    int64_t at = -1;
    for (int64_t r = lane; r < extent; r += kWarp) {
      if (replaces(row[r], r, best, at)) best = row[r], at = r;
    }
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      const T v = __shfl_down_sync(kFullMask, best, offset);
      const int64_t i = __shfl_down_sync(kFullMask, at, offset);
      if (replaces(v, i, best, at)) best = v, at = i;
    }
    if (lane == 0) y[o] = static_cast<I>(at < 0 ? 0 : at);
  }
}

// inner > 1: a thread per (outer, inner) column, rows in order.
template <typename T, typename I>
__global__ void argmax_cols_kernel(const T* x, I* y, int64_t outer, int64_t extent,
                                   int64_t inner) {
  for (int64_t t = global_thread(); t < outer * inner; t += thread_stride()) {
    const int64_t o = t / inner, j = t % inner;
    const T* p = x + o * extent * inner + j;
    T best = T(0);
    int64_t at = -1;
    for (int64_t r = 0; r < extent; ++r) {
      if (replaces(p[r * inner], r, best, at)) best = p[r * inner], at = r;
    }
    y[t] = static_cast<I>(at < 0 ? 0 : at);
  }
}

template <typename T, typename I>
void argmax_typed(const KernelContext& k, int64_t outer, int64_t extent, int64_t inner) {
  const T* x = k.in(0).data<T>();
  I* y = k.out(0).data<I>();
  const cudaStream_t stream = context(k).stream;
  if (inner == 1) {
    argmax_rows_kernel<T, I><<<warp_blocks(outer), kThreads, 0, stream>>>(x, y, outer, extent);
  } else {
    argmax_cols_kernel<T, I><<<blocks(outer * inner), kThreads, 0, stream>>>(x, y, outer, extent,
                                                                             inner);
  }
  LOOM_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void argmax_kernel(const KernelContext& k) {
  const Tensor& x = k.in(0);
  const int64_t rank = x.rank();
  int64_t axis = k.attr("axis").as_int();
  if (axis < 0) axis += rank;
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= x.shape()[static_cast<std::size_t>(i)];
  for (int64_t i = axis + 1; i < rank; ++i) inner *= x.shape()[static_cast<std::size_t>(i)];
  const int64_t extent = rank == 0 ? 1 : x.shape()[static_cast<std::size_t>(axis)];
  if (outer * inner == 0) return;
  if (k.out(0).dtype() == DType::kInt64) return argmax_typed<T, int64_t>(k, outer, extent, inner);
  argmax_typed<T, std::int32_t>(k, outer, extent, inner);
}

// ---- Softmax and LogSoftmax ---------------------------------------------------------------

// x viewed as (outer, n, inner), the axis in the middle.
struct AxisView {
  int64_t outer = 1, n = 1, inner = 1;
};

AxisView axis_view(const Shape& shape, int64_t axis) {
  const auto rank = static_cast<int64_t>(shape.size());
  if (axis < 0) axis += std::max<int64_t>(rank, 1);
  AxisView v;
  for (int64_t d = 0; d < rank; ++d) {
    (d < axis ? v.outer : d == axis ? v.n : v.inner) *= shape[static_cast<std::size_t>(d)];
  }
  return v;
}

// The arithmetic of one line, shared by the row and column kernels: m the line's maximum (NaN
// wins), s = Σ exp(x - m) in double; Softmax y = exp(x - m) / s, LogSoftmax y = (x - m) - log s,
// with s rounded to T first as the CPU's sum is a T.
template <typename T, bool kLog>
struct SoftmaxLine {
  T m;
  T s;   // the sum, or its log for LogSoftmax
  __device__ T out(T x) const {
    if constexpr (kLog) {
      return dm::sub(dm::sub(x, m), s);
    } else {
      return dm::div(dm::exp(dm::sub(x, m)), s);
    }
  }
  __device__ static T finish_sum(double sum) {
    const auto t = static_cast<T>(sum);
    if constexpr (kLog) {
      return dm::log(t);
    } else {
      return t;
    }
  }
};

template <typename T, bool kLog>
__global__ void softmax_rows_kernel(const T* x, T* y, int64_t rows, int64_t n) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int64_t warps = thread_stride() / kWarp;
  for (int64_t row = global_thread() / kWarp; row < rows; row += warps) {
    const T* p = x + row * n;
    T m = dm::lowest<T>();
    for (int64_t j = lane; j < n; j += kWarp) m = MaxOp<T>::combine(m, p[j]);
    m = __shfl_sync(kFullMask, warp_reduce<MaxOp<T>>(m), 0);
    double s = 0;
    for (int64_t j = lane; j < n; j += kWarp) {
      s = dm::add(s, static_cast<double>(dm::exp(dm::sub(p[j], m))));
    }
    s = __shfl_sync(kFullMask, warp_reduce<SumOp<double>>(s), 0);
    const SoftmaxLine<T, kLog> line{m, SoftmaxLine<T, kLog>::finish_sum(s)};
    T* q = y + row * n;
    for (int64_t j = lane; j < n; j += kWarp) q[j] = line.out(p[j]);
  }
}

template <typename T, bool kLog>
__global__ void softmax_cols_kernel(const T* x, T* y, int64_t outer, int64_t n, int64_t inner) {
  for (int64_t t = global_thread(); t < outer * inner; t += thread_stride()) {
    const int64_t o = t / inner, j = t % inner;
    const T* p = x + o * n * inner + j;
    T m = dm::lowest<T>();
    for (int64_t a = 0; a < n; ++a) m = MaxOp<T>::combine(m, p[a * inner]);
    double s = 0;
    for (int64_t a = 0; a < n; ++a) {
      s = dm::add(s, static_cast<double>(dm::exp(dm::sub(p[a * inner], m))));
    }
    const SoftmaxLine<T, kLog> line{m, SoftmaxLine<T, kLog>::finish_sum(s)};
    T* q = y + o * n * inner + j;
    for (int64_t a = 0; a < n; ++a) q[a * inner] = line.out(p[a * inner]);
  }
}

template <typename T, bool kLog>
void softmax(const KernelContext& k) {
  const ir::Value& attr = k.attr("axis");
  const int64_t axis = attr.is_tuple() ? attr.as_ints().at(0) : attr.as_int();
  const AxisView v = axis_view(k.in(0).shape(), axis);
  if (v.outer * v.n * v.inner == 0) return;
  const T* x = k.in(0).data<T>();
  T* y = k.out(0).data<T>();
  const cudaStream_t stream = context(k).stream;
  if (v.inner == 1) {
    softmax_rows_kernel<T, kLog><<<warp_blocks(v.outer), kThreads, 0, stream>>>(x, y, v.outer,
                                                                              v.n);
  } else {
    softmax_cols_kernel<T, kLog><<<blocks(v.outer * v.inner), kThreads, 0, stream>>>(
        x, y, v.outer, v.n, v.inner);
  }
  LOOM_CUDA_CHECK(cudaGetLastError());
}

// ---- Cross-entropy losses -----------------------------------------------------------------

// std::max's rule (a NaN after the first element is passed over), as the CPU's log_sum_exp.
struct StdMax {
  __device__ static double combine(double a, double b) { return a < b ? b : a; }
};

// log Σ_j exp(row_j) of a warp's row, shifted by the row's maximum, in double; every lane gets it.
template <typename T>
__device__ double warp_log_sum_exp(const T* row, int64_t n, int lane) {
  if (n == 0) return -std::numeric_limits<double>::infinity();
  double mx = static_cast<double>(row[0]);
  for (int64_t j = lane; j < n; j += kWarp) mx = StdMax::combine(mx, static_cast<double>(row[j]));
  mx = __shfl_sync(kFullMask, warp_reduce<StdMax>(mx), 0);
  if (isinf(mx)) return mx;
  double s = 0;
  for (int64_t j = lane; j < n; j += kWarp) {
    s = dm::add(s, ::exp(dm::sub(static_cast<double>(row[j]), mx)));
  }
  s = __shfl_sync(kFullMask, warp_reduce<SumOp<double>>(s), 0);
  return dm::add(mx, ::log(s));
}

// Dense labels: loss[i] = -Σ_j labels[i,j]·(x[i,j] - lse_i), backprop = softmax - labels.
template <typename T>
__global__ void softmax_cross_entropy_kernel(const T* logits, const T* labels, T* loss,
                                             T* backprop, int64_t rows, int64_t classes) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int64_t warps = thread_stride() / kWarp;
  for (int64_t i = global_thread() / kWarp; i < rows; i += warps) {
    const T* x = logits + i * classes;
    const T* l = labels + i * classes;
    const double lse = warp_log_sum_exp(x, classes, lane);
    double s = 0;
    T* bp = backprop + i * classes;
    for (int64_t j = lane; j < classes; j += kWarp) {
      const auto xj = static_cast<double>(x[j]);
      const auto lj = static_cast<double>(l[j]);
      s = dm::add(s, dm::mul(lj, dm::sub(xj, lse)));
      bp[j] = static_cast<T>(dm::sub(::exp(dm::sub(xj, lse)), lj));
    }
    s = warp_reduce<SumOp<double>>(s);
    if (lane == 0) loss[i] = static_cast<T>(-s);
  }
}

template <typename T>
void softmax_cross_entropy(const KernelContext& k) {
  const int64_t rows = k.in(0).shape()[0];
  const int64_t classes = k.in(0).shape()[1];
  if (rows == 0) return;
  softmax_cross_entropy_kernel<T><<<warp_blocks(rows), kThreads, 0, context(k).stream>>>(
      k.in(0).data<T>(), k.in(1).data<T>(), k.out(0).data<T>(), k.out(1).data<T>(), rows,
      classes);
  LOOM_CUDA_CHECK(cudaGetLastError());
}

// Sparse labels (Int32 or Int64). With is_grad, grad[i,j] = (softmax - onehot) / rows; else
// each row's loss lse_i - x[i, label_i] goes to row_loss (the workspace), summed next.
template <typename T, typename L, bool kGrad>
__global__ void sparse_cross_entropy_kernel(const T* logits, const L* labels, T* grad,
                                            double* row_loss, int64_t rows, int64_t classes) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int64_t warps = thread_stride() / kWarp;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inv_n = 1.0 / static_cast<double>(rows);
  for (int64_t i = global_thread() / kWarp; i < rows; i += warps) {
    const T* x = logits + i * classes;
    const auto label = static_cast<int64_t>(labels[i]);
    const bool valid = label >= 0 && label < classes;
    const double lse = warp_log_sum_exp(x, classes, lane);
    if constexpr (kGrad) {
      T* g = grad + i * classes;
      for (int64_t j = lane; j < classes; j += kWarp) {
        const double onehot = j == label ? 1.0 : 0.0;
        const double v =
            dm::mul(dm::sub(::exp(dm::sub(static_cast<double>(x[j]), lse)), onehot), inv_n);
        g[j] = static_cast<T>(valid ? v : nan);
      }
    } else {
      if (lane == 0) row_loss[i] = valid ? dm::sub(lse, static_cast<double>(x[label])) : nan;
    }
  }
}

// out = Σ row_loss / rows in one block: each thread adds a strided share in order, then a fixed
// tree over the block.
template <typename T>
__global__ void mean_of_rows_kernel(const double* row_loss, int64_t rows, T* out) {
  __shared__ double partial[kThreads];
  double s = 0;
  for (int64_t i = threadIdx.x; i < rows; i += kThreads) s = dm::add(s, row_loss[i]);
  partial[threadIdx.x] = s;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (static_cast<int>(threadIdx.x) < w) {
      partial[threadIdx.x] = dm::add(partial[threadIdx.x], partial[threadIdx.x + w]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = static_cast<T>(partial[0] / static_cast<double>(rows));
}

Prepared prepare_sparse_cross_entropy(const PrepareContext& c) {
  const bool grad = c.attr("is_grad").as_bool();
  const int64_t rows = c.inputs[0].shape.empty() ? 0 : c.inputs[0].shape[0];
  return Prepared{nullptr, grad ? 0 : static_cast<std::size_t>(std::max<int64_t>(rows, 1)) * 8};
}

template <typename T, typename L>
void sparse_cross_entropy_typed(const KernelContext& k, int64_t rows, int64_t classes) {
  const cudaStream_t stream = context(k).stream;
  const T* x = k.in(0).data<T>();
  const L* labels = k.in(1).data<L>();
  if (k.attr("is_grad").as_bool()) {
    if (rows == 0) return;
    sparse_cross_entropy_kernel<T, L, true><<<warp_blocks(rows), kThreads, 0, stream>>>(
        x, labels, k.out(0).data<T>(), nullptr, rows, classes);
    LOOM_CUDA_CHECK(cudaGetLastError());
    return;
  }
  auto* row_loss = static_cast<double*>(k.workspace);
  if (rows > 0) {
    sparse_cross_entropy_kernel<T, L, false><<<warp_blocks(rows), kThreads, 0, stream>>>(
        x, labels, nullptr, row_loss, rows, classes);
    LOOM_CUDA_CHECK(cudaGetLastError());
  }
  mean_of_rows_kernel<T><<<1, kThreads, 0, stream>>>(row_loss, rows, k.out(0).data<T>());
  LOOM_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void sparse_cross_entropy(const KernelContext& k) {
  const int64_t rows = k.in(0).shape()[0];
  const int64_t classes = k.in(0).shape()[1];
  if (k.in(1).dtype() == DType::kInt32) {
    return sparse_cross_entropy_typed<T, std::int32_t>(k, rows, classes);
  }
  sparse_cross_entropy_typed<T, int64_t>(k, rows, classes);
}

// FloatStatus: the flag is cleared, then any thread that meets an Inf or NaN writes 1 (the same
// value from every writer: no race on the result).
template <typename T>
__global__ void float_status_kernel(const T* x, int64_t n, float* flag) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (!isfinite(x[i])) *flag = 1.0f;
  }
}

template <typename T>
void float_status(const KernelContext& k) {
  const cudaStream_t stream = context(k).stream;
  float* flag = k.out(0).data<float>();
  LOOM_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(float), stream));
  const int64_t n = k.in(0).numel();
  if (n == 0) return;
  const int64_t blocks = std::min<int64_t>(ceil_div(n, kThreads), 1024);
  float_status_kernel<T><<<blocks, kThreads, 0, stream>>>(k.in(0).data<T>(), n, flag);
  LOOM_CUDA_CHECK(cudaGetLastError());
}

// ---- Registration -------------------------------------------------------------------------

template <typename T, typename Op, Axes kAxes = Axes::kAttr>
KernelDef& add_reduction(KernelRegistry& r, std::string_view op) {
  return r.add(op, DTypeOf<T>::value, reduce_kernel<T, Op, kAxes>)
      .with_prepare(prepare_reduce<T, Op, kAxes>);
}

template <typename T>
void register_numeric(KernelRegistry& r) {
  add_reduction<T, SumOp<T>>(r, "ReduceSum");
  add_reduction<T, MaxOp<T>>(r, "ReduceMax");
  add_reduction<T, MinOp<T>>(r, "ReduceMin");
  r.add("ArgMax", DTypeOf<T>::value, argmax_kernel<T>);
}

template <typename T>
void register_floating(KernelRegistry& r) {
  constexpr DType d = DTypeOf<T>::value;
  add_reduction<T, MeanOp<T>>(r, "ReduceMean");
  add_reduction<T, SumOp<T>, Axes::kBiasGrad>(r, "BiasAddGrad").writes_every_output_element();
  add_reduction<T, SquareSumOp<T>, Axes::kAll>(r, "L2Loss");
  r.add("Softmax", d, softmax<T, false>);
  r.add("LogSoftmax", d, softmax<T, true>);
  r.add("SoftmaxCrossEntropyWithLogits", d, softmax_cross_entropy<T>);
  r.add("SparseSoftmaxCrossEntropyWithLogits", d, sparse_cross_entropy<T>)
      .with_prepare(prepare_sparse_cross_entropy);
  r.add("FloatStatus", d, float_status<T>).writes_every_output_element();
}

}  // namespace

void register_reduce_kernels(KernelRegistry& r) {
  register_numeric<float>(r);
  register_numeric<double>(r);
  register_numeric<std::int32_t>(r);
  register_numeric<std::int64_t>(r);
  register_floating<float>(r);
  register_floating<double>(r);
}

}  // namespace loom::backend::cuda
