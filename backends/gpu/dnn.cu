// CUDA kernels of the convolution, pooling and batch-norm family (NCHW; Float32 and Float64, and
// the convolutions in Float16 and BFloat16 too): Conv2D, Conv2DBackpropInput,
// Conv2DBackpropFilter, the fused Conv2DBiasAct, MaxPool,
// MaxPoolGrad, MaxPoolGradGrad, AvgPool, AvgPoolGrad, BatchNorm, BatchNormApply and
// BatchNormGrad, with the semantics of the CPU kernels (backends/cpu/conv_kernels.cc,
// pool_kernels.cc, norm_loss_kernels.cc, fused_kernels.cc).
//
// Convolutions run on cuDNN (the v7-style descriptor API). prepare() builds the descriptors and
// picks the algorithm once per node, as PyTorch's cudnn.benchmark does: a timed search
// (cudnnFind*AlgorithmEx) on temporary device buffers of the node's sizes, with a temporary
// workspace of cudnn_budget() (at most a quarter of the free device memory), run on the backend's
// stream and synchronized before the buffers are freed; the fastest candidate that succeeded,
// needs at most cudnn_budget() of workspace and, in deterministic mode, is deterministic wins. The
// choice is kept in a process-wide cache keyed by the convolution as cuDNN sees it (device,
// direction, dtype, the x / w / y shapes, symmetric padding, strides, dilations, groups and the
// deterministic flag), so identical layers search once. Where the search cannot run (out of
// memory, a failed Find call) or is off, the choice comes from cuDNN's heuristics
// (cudnnGet*Algorithm_v7): the first candidate that runs with these descriptors within the budget
// (deterministic when asked). LOOM_CUDNN_SEARCH: unset, the search runs except in deterministic
// mode (timings vary between processes, and so would the chosen algorithm and the bits; the
// heuristic's choice is the same in every run); 0, heuristics only; 1, the search in
// deterministic mode too (among deterministic algorithms). Float32 convolutions are restricted
// to FMA kernels (CUDNN_FMA_MATH: no TF32 tensor cores), as cuBLAS is; the Winograd and FFT
// algorithms stay candidates (their rounding is expected within the CPU comparison's Float32
// convolution tolerance, 5e-4 of the output's largest value). cuDNN pads symmetrically; where the
// padding (MindSpore's SAME split, which puts the odd element after, or an explicit pad list) is
// not, cuDNN takes the symmetric part and the rest becomes an explicit zero border: the input is
// copied padded into the workspace (forward, filter gradient), or the input gradient is computed
// padded there and cropped into dx. Conv2DBiasAct is the forward followed by loom's bias and
// activation kernel (the CPU's arithmetic). Float16 and BFloat16 convolutions (mixed precision:
// the amp levels keep them in the low dtype; Conv2D and its two gradients) compute in Float32
// (the descriptor's compute type) with tensor-core math allowed (CUDNN_TENSOR_OP_MATH), each
// result rounded once to the 16-bit dtype.
//
// Pooling and batch norm are loom's own kernels, written to the CPU's arithmetic so results agree
// to rounding, and most bitwise:
// - Pooling: one thread per output element. A max window's winner is its first maximum in
//   row-major order, NaN above every number (the first NaN wins); SAME average pooling divides
//   by the count of elements inside the image. The gradients gather instead of scattering: each
//   dx element adds the dout of the windows that chose it (MaxPoolGrad, from the window winners
//   computed first into the workspace) or cover it (AvgPoolGrad) in the CPU's order (window rows,
//   then columns, from zero), so no atomics are needed and the sums are the CPU's, bit for bit.
// - Batch norm: per-channel sums in double over a partition fixed by the shape alone (blocks of
//   kChunk elements of one channel; each block's threads reduce in a fixed tree and the blocks'
//   partials are added in order by one thread per channel), so results are bitwise repeatable.
//   The statistics follow the CPU's formulas: Float32 takes the shifted moments (shift: the
//   channel's first element) in one pass, Float64 two passes; the moving variance uses the
//   unbiased batch variance; y, dx and the saved statistics are computed as the CPU computes them.
// Every kernel writes every output element (declared at registration, as the CPU's).
#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/gpu/cuda.h"
#include "backends/gpu/half.cuh"
#include "core/ir/error.h"
#include "ops/conv_geometry.h"

namespace loom::backend::cuda {

namespace {

using std::int64_t;

// cuDNN's workspace of one convolution at most (the algorithm is chosen within it): 256 MiB, or
// LOOM_CUDNN_WORKSPACE_MIB. The workspace is planned like any buffer and lives for its launch
// only. Measured on an H100 (ResNet-50 224x224, batch 128, loom_bench_train): 946 and 943 img/s
// at 256 MiB against 947 and 948 at 1 GiB, the same device peak: no reason for more.
std::size_t cudnn_budget() {
  static const std::size_t budget = [] {
    const char* v = std::getenv("LOOM_CUDNN_WORKSPACE_MIB");
    const long mib = v ? std::atol(v) : 256;
    return static_cast<std::size_t>(mib < 0 ? 0 : mib) << 20;
  }();
  return budget;
}
// Workspace regions start at this alignment (the planned workspace is 64-byte aligned; it is
// rounded up at launch, hence kAlign extra bytes planned).
constexpr std::size_t kAlign = 256;

std::size_t round_up(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// The workspace of a launch, rounded up to kAlign; checks that the planned `bytes` fit.
char* workspace_base(const KernelContext& k, std::size_t bytes) {
  if (bytes == 0) return nullptr;
  if (k.workspace == nullptr || k.workspace_bytes < bytes) {
    throw InternalError(k.prim.name() + ": expected a workspace of " + std::to_string(bytes) +
                        " bytes, got " + std::to_string(k.workspace_bytes));
  }
  const auto base = reinterpret_cast<std::uintptr_t>(k.workspace);
  return reinterpret_cast<char*>((base + kAlign - 1) / kAlign * kAlign);
}

// Grid-stride loop over [0, n).
#define LOOM_GRID_LOOP(i, n)                                                                 \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

void check_launch() { LOOM_CUDA_CHECK(cudaGetLastError()); }

enum class Act { kNone, kReLU, kReLU6 };

Act act_of(const ir::Primitive& prim) {
  const std::string& act = prim.attr("act").as_string();
  if (act == "relu") return Act::kReLU;
  if (act == "relu6") return Act::kReLU6;
  return Act::kNone;
}

// ---------------------------------------------------------------------------------------------
// Convolution

struct ConvGeometry {
  int64_t n, c, h, w;  // input
  int64_t o, oh, ow;   // output channels and extent
  int64_t group;
  int64_t kh, kw, sh, sw, dil_h, dil_w;
  int64_t top, bottom, left, right;  // the padding applied (ops/conv_geometry.h)
};

// x: (n, c, h, w), w: (o, c/group, kh, kw), y: (n, o, oh, ow) as inferred.
ConvGeometry conv_geometry(const ir::Primitive& prim, const Shape& x, const Shape& w,
                           const Shape& y) {
  const auto stride = prim.attr("stride").as_ints();
  const auto dilation = prim.attr("dilation").as_ints();
  ConvGeometry g{.n = x[0], .c = x[1], .h = x[2], .w = x[3], .o = w[0], .oh = y[2], .ow = y[3],
                 .group = prim.attr("group").as_int(), .kh = w[2], .kw = w[3],
                 .sh = stride[0], .sw = stride[1], .dil_h = dilation[0], .dil_w = dilation[1],
                 .top = 0, .bottom = 0, .left = 0, .right = 0};
  const ops::PadMode mode = ops::pad_mode_of(prim);
  const std::vector<int64_t> pad =
      mode == ops::PadMode::kPad ? prim.attr("pad").as_ints() : std::vector<int64_t>(4, 0);
  const ops::WindowAxis ah = ops::window_axis(g.h, g.kh, g.sh, g.dil_h, mode, pad[0], pad[1]);
  const ops::WindowAxis aw = ops::window_axis(g.w, g.kw, g.sw, g.dil_w, mode, pad[2], pad[3]);
  g.top = ah.pad_before;
  g.bottom = ah.pad_after;
  g.left = aw.pad_before;
  g.right = aw.pad_after;
  return g;
}

enum class ConvOp { kForward, kInput, kFilter };

// A node's cuDNN descriptors, destroyed with its plan.
struct CudnnDescriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;

  CudnnDescriptors() = default;
  CudnnDescriptors(const CudnnDescriptors&) = delete;
  CudnnDescriptors& operator=(const CudnnDescriptors&) = delete;
  ~CudnnDescriptors() {
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (x) cudnnDestroyTensorDescriptor(x);
  }
};

// How a convolution node runs, chosen once at prepare.
struct ConvPlan {
  ConvOp op = ConvOp::kForward;
  DType dtype = DType::kFloat32;
  ConvGeometry g{};
  bool empty = false;  // the output has no element
  bool zero = false;   // an operand has none: the output is all zeros (an empty sum)
  // x as cuDNN sees it: (n, c, hp, wp), the input placed at (pad_top, pad_left) inside a zero
  // border when padded; cuDNN adds its symmetric padding around that.
  bool padded = false;
  int64_t hp = 0, wp = 0, pad_top = 0, pad_left = 0;
  CudnnDescriptors d;
  cudnnConvolutionFwdAlgo_t fwd = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnConvolutionBwdDataAlgo_t bwd_data = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  // Workspace: [padded x or dx: pad_bytes][cuDNN's: cudnn_bytes], from a kAlign-aligned base.
  std::size_t pad_bytes = 0, cudnn_bytes = 0, workspace = 0;
  Act act = Act::kNone;  // Conv2DBiasAct
};

// "(a, b, c, d)".
std::string tuple_text(std::initializer_list<int64_t> values) {
  std::string s = "(";
  for (int64_t v : values) {
    if (s.size() > 1) s += ", ";
    s += std::to_string(v);
  }
  s += ")";
  return s;
}

std::string geometry_text(const ConvGeometry& g) {
  std::string s = "x ";
  s += tuple_text({g.n, g.c, g.h, g.w});
  s += ", w ";
  s += tuple_text({g.o, g.c / std::max<int64_t>(1, g.group), g.kh, g.kw});
  s += ", stride ";
  s += tuple_text({g.sh, g.sw});
  s += ", dilation ";
  s += tuple_text({g.dil_h, g.dil_w});
  s += ", pad ";
  s += tuple_text({g.top, g.bottom, g.left, g.right});
  s += ", group ";
  s += std::to_string(g.group);
  return s;
}

int to_int(int64_t v, const ConvPlan& p, const char* what) {
  if (v > INT_MAX) {
    throw ValueError(std::string("CUDA convolution: ") + what + " " + std::to_string(v) +
                     " exceeds cuDNN's 32-bit range (" + geometry_text(p.g) + ")");
  }
  return static_cast<int>(v);
}

bool usable_math(cudnnMathType_t m, bool fp32) {
  return !fp32 || (m != CUDNN_TENSOR_OP_MATH && m != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION);
}

// Picks from cuDNN's ranked candidates, then from every algorithm in enum order: the first that
// is usable, whose workspace query succeeds within the budget. `deterministic_algo` says which
// algorithms of the fallback list are deterministic.
template <typename Algo, typename Perf, typename Size, typename Deterministic>
bool pick_algorithm(const Perf* perf, int returned, int count, bool deterministic, bool fp32,
                    Size&& workspace_of, Deterministic&& deterministic_algo, Algo& algo,
                    std::size_t& bytes) {
  for (int i = 0; i < returned; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (deterministic && perf[i].determinism != CUDNN_DETERMINISTIC) continue;
    if (!usable_math(perf[i].mathType, fp32)) continue;
    std::size_t b = 0;
    if (!workspace_of(perf[i].algo, b) || b > cudnn_budget()) continue;
    algo = perf[i].algo;
    bytes = b;
    return true;
  }
  for (int i = 0; i < count; ++i) {
    const auto a = static_cast<Algo>(i);
    if (deterministic && !deterministic_algo(a)) continue;
    std::size_t b = 0;
    if (!workspace_of(a, b) || b > cudnn_budget()) continue;
    algo = a;
    bytes = b;
    return true;
  }
  return false;
}

// LOOM_CUDNN_SEARCH (the header comment): whether prepare() times the algorithms.
bool search_on(bool deterministic) {
  static const char* const setting = std::getenv("LOOM_CUDNN_SEARCH");
  return timed_search_on(setting, deterministic);
}

// A convolution as cuDNN sees it, and the device: the search cache's key.
using SearchKey = std::array<int64_t, 20>;

SearchKey search_key(int device, const ConvPlan& p, bool deterministic) {
  const ConvGeometry& g = p.g;
  return {device, static_cast<int64_t>(p.op), static_cast<int64_t>(p.dtype),
          g.n, g.c, p.hp, p.wp,                                   // x as cuDNN sees it
          g.o, g.oh, g.ow, g.kh, g.kw,                            // y and w
          std::min(g.top, g.bottom), std::min(g.left, g.right),  // cuDNN's symmetric padding
          g.sh, g.sw, g.dil_h, g.dil_w, g.group, deterministic ? 1 : 0};
}

// The searched algorithm (as an int, whichever direction) and its workspace.
struct SearchResult {
  int algo = 0;
  std::size_t bytes = 0;
};

// The process-wide cache of searched algorithms, under its mutex.
struct SearchCache {
  std::mutex mutex;
  std::map<SearchKey, SearchResult> results;
};

SearchCache& search_cache() {
  static SearchCache cache;
  return cache;
}

// Picks from cudnnFind*AlgorithmEx's timed results: the fastest that succeeded, is usable and
// deterministic when asked, needs at most `limit` bytes of workspace by the search's report and
// by the workspace query (the larger of the two is kept).
template <typename Algo, typename Perf, typename Size>
bool pick_fastest(const Perf* perf, int returned, bool deterministic, bool fp32,
                  std::size_t limit, Size&& workspace_of, Algo& algo, std::size_t& bytes) {
  bool found = false;
  float best = 0;
  for (int i = 0; i < returned; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (deterministic && perf[i].determinism != CUDNN_DETERMINISTIC) continue;
    if (!usable_math(perf[i].mathType, fp32)) continue;
    if (perf[i].time < 0 || perf[i].memory > limit) continue;
    std::size_t b = 0;
    if (!workspace_of(perf[i].algo, b) || b > limit) continue;
    if (found && !(perf[i].time < best)) continue;
    found = true;
    best = perf[i].time;
    algo = perf[i].algo;
    bytes = std::max(b, perf[i].memory);
  }
  return found;
}

// The timed search (the header comment), or the cached result of an identical convolution's:
// false, choosing nothing, where it is off or cannot run.
bool search_algorithm(const CudaContext& ctx, ConvPlan& p, bool deterministic) {
  if (!search_on(deterministic)) return false;
  const SearchKey key = search_key(ctx.device_index, p, deterministic);
  SearchResult r;
  bool cached = false;
  {
    SearchCache& cache = search_cache();
    std::lock_guard<std::mutex> lock(cache.mutex);
    const auto it = cache.results.find(key);
    if (it != cache.results.end()) {
      r = it->second;
      cached = true;
    }
  }
  if (!cached) {
    const bool fp32 = p.dtype == DType::kFloat32;
    const ConvGeometry& g = p.g;
    const CudnnDescriptors& d = p.d;
    cudnnHandle_t handle = ctx.cudnn;
    const std::size_t elem = dtype_size(p.dtype);
    const std::size_t x_bytes = static_cast<std::size_t>(g.n * g.c * p.hp * p.wp) * elem;
    const std::size_t w_bytes =
        static_cast<std::size_t>(g.o * (g.c / g.group) * g.kh * g.kw) * elem;
    const std::size_t y_bytes = static_cast<std::size_t>(g.n * g.o * g.oh * g.ow) * elem;
    bool ok = false;
    {
      const DeviceScope device(ctx.device_index);
      if (!device.ok()) return false;
      SearchBuffers buffers(ctx.stream);  // freed, after a synchronization, at the block's end
      void* x = buffers.get(x_bytes);
      void* w = buffers.get(w_bytes);
      void* y = buffers.get(y_bytes);
      if (x == nullptr || w == nullptr || y == nullptr) return false;
      std::size_t free_bytes = 0, total_bytes = 0;
      if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
        cudaGetLastError();
        return false;
      }
      const std::size_t limit = std::min(cudnn_budget(), free_bytes / 4);
      void* ws = limit == 0 ? nullptr : buffers.get(limit);
      if (limit != 0 && ws == nullptr) return false;
      // Defined contents (zeros) for the operands read.
      if (cudaMemsetAsync(x, 0, x_bytes, ctx.stream) != cudaSuccess ||
          cudaMemsetAsync(w, 0, w_bytes, ctx.stream) != cudaSuccess ||
          cudaMemsetAsync(y, 0, y_bytes, ctx.stream) != cudaSuccess ||
          cudaStreamSynchronize(ctx.stream) != cudaSuccess) {  // no earlier work in the timings
        cudaGetLastError();
        return false;
      }
      cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
      switch (p.op) {
        case ConvOp::kForward: {
          cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
          int returned = 0;
          status = cudnnFindConvolutionForwardAlgorithmEx(
              handle, d.x, x, d.w, w, d.conv, d.y, y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned,
              perf, ws, limit);
          cudnnConvolutionFwdAlgo_t algo{};
          ok = status == CUDNN_STATUS_SUCCESS &&
               pick_fastest(
                   perf, returned, deterministic, fp32, limit,
                   [&](cudnnConvolutionFwdAlgo_t a, std::size_t& b) {
                     return cudnnGetConvolutionForwardWorkspaceSize(handle, d.x, d.w, d.conv, d.y,
                                                                    a, &b) ==
                            CUDNN_STATUS_SUCCESS;
                   },
                   algo, r.bytes);
          r.algo = static_cast<int>(algo);
          break;
        }
        case ConvOp::kInput: {
          cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
          int returned = 0;
          status = cudnnFindConvolutionBackwardDataAlgorithmEx(
              handle, d.w, w, d.y, y, d.conv, d.x, x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
              &returned, perf, ws, limit);
          cudnnConvolutionBwdDataAlgo_t algo{};
          ok = status == CUDNN_STATUS_SUCCESS &&
               pick_fastest(
                   perf, returned, deterministic, fp32, limit,
                   [&](cudnnConvolutionBwdDataAlgo_t a, std::size_t& b) {
                     return cudnnGetConvolutionBackwardDataWorkspaceSize(handle, d.w, d.y, d.conv,
                                                                         d.x, a, &b) ==
                            CUDNN_STATUS_SUCCESS;
                   },
                   algo, r.bytes);
          r.algo = static_cast<int>(algo);
          break;
        }
        case ConvOp::kFilter: {
          cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
          int returned = 0;
          status = cudnnFindConvolutionBackwardFilterAlgorithmEx(
              handle, d.x, x, d.y, y, d.conv, d.w, w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
              &returned, perf, ws, limit);
          cudnnConvolutionBwdFilterAlgo_t algo{};
          ok = status == CUDNN_STATUS_SUCCESS &&
               pick_fastest(
                   perf, returned, deterministic, fp32, limit,
                   [&](cudnnConvolutionBwdFilterAlgo_t a, std::size_t& b) {
                     return cudnnGetConvolutionBackwardFilterWorkspaceSize(
                                handle, d.x, d.y, d.conv, d.w, a, &b) == CUDNN_STATUS_SUCCESS;
                   },
                   algo, r.bytes);
          r.algo = static_cast<int>(algo);
          break;
        }
      }
      // A failed search leaves no CUDA error behind for a later launch check to report.
      if (status != CUDNN_STATUS_SUCCESS) cudaGetLastError();
    }
    if (!ok) return false;
    SearchCache& cache = search_cache();
    std::lock_guard<std::mutex> lock(cache.mutex);
    r = cache.results.emplace(key, r).first->second;  // a concurrent search's result stays
  }
  switch (p.op) {
    case ConvOp::kForward: p.fwd = static_cast<cudnnConvolutionFwdAlgo_t>(r.algo); break;
    case ConvOp::kInput: p.bwd_data = static_cast<cudnnConvolutionBwdDataAlgo_t>(r.algo); break;
    case ConvOp::kFilter:
      p.bwd_filter = static_cast<cudnnConvolutionBwdFilterAlgo_t>(r.algo);
      break;
  }
  p.cudnn_bytes = r.bytes;
  return true;
}

void choose_algorithm(const CudaContext& ctx, ConvPlan& p, bool deterministic) {
  if (search_algorithm(ctx, p, deterministic)) return;
  cudnnHandle_t handle = ctx.cudnn;
  const bool fp32 = p.dtype == DType::kFloat32;
  const CudnnDescriptors& d = p.d;
  bool ok = false;
  switch (p.op) {
    case ConvOp::kForward: {
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      int returned = 0;
      LOOM_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
          handle, d.x, d.w, d.conv, d.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf));
      ok = pick_algorithm(
          perf, returned, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, deterministic, fp32,
          [&](cudnnConvolutionFwdAlgo_t a, std::size_t& b) {
            return cudnnGetConvolutionForwardWorkspaceSize(handle, d.x, d.w, d.conv, d.y, a,
                                                           &b) == CUDNN_STATUS_SUCCESS;
          },
          [](cudnnConvolutionFwdAlgo_t) { return true; }, p.fwd, p.cudnn_bytes);
      break;
    }
    case ConvOp::kInput: {
      cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      int returned = 0;
      LOOM_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
          handle, d.w, d.y, d.conv, d.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned, perf));
      ok = pick_algorithm(
          perf, returned, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, deterministic, fp32,
          [&](cudnnConvolutionBwdDataAlgo_t a, std::size_t& b) {
            return cudnnGetConvolutionBackwardDataWorkspaceSize(handle, d.w, d.y, d.conv, d.x, a,
                                                                &b) == CUDNN_STATUS_SUCCESS;
          },
          [](cudnnConvolutionBwdDataAlgo_t a) { return a != CUDNN_CONVOLUTION_BWD_DATA_ALGO_0; },
          p.bwd_data, p.cudnn_bytes);
      break;
    }
    case ConvOp::kFilter: {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      int returned = 0;
      LOOM_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
          handle, d.x, d.y, d.conv, d.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &returned,
          perf));
      ok = pick_algorithm(
          perf, returned, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, deterministic, fp32,
          [&](cudnnConvolutionBwdFilterAlgo_t a, std::size_t& b) {
            return cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, d.x, d.y, d.conv, d.w,
                                                                  a, &b) == CUDNN_STATUS_SUCCESS;
          },
          [](cudnnConvolutionBwdFilterAlgo_t a) {
            return a != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 &&
                   a != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
          },
          p.bwd_filter, p.cudnn_bytes);
      break;
    }
  }
  if (!ok) {
    throw InternalError(std::string("CUDA convolution: cuDNN offers no ") +
                        (deterministic ? "deterministic " : "") + "algorithm within " +
                        std::to_string(cudnn_budget() >> 20) + " MiB of workspace for " +
                        geometry_text(p.g));
  }
}

// The plan of one node: x, w, y are the forward's shapes, whichever of them are the op's inputs
// and output.
std::shared_ptr<ConvPlan> plan_conv(const PrepareContext& c, ConvOp op, const Shape& x,
                                    const Shape& w, const Shape& y, DType dtype) {
  auto p = std::make_shared<ConvPlan>();
  p->op = op;
  p->dtype = dtype;
  p->g = conv_geometry(c.prim, x, w, y);
  const ConvGeometry& g = p->g;
  const int64_t nx = shape_numel(x), nw = shape_numel(w), ny = shape_numel(y);
  switch (op) {
    case ConvOp::kForward: p->empty = ny == 0; p->zero = nx == 0 || nw == 0; break;
    case ConvOp::kInput: p->empty = nx == 0; p->zero = ny == 0 || nw == 0; break;
    case ConvOp::kFilter: p->empty = nw == 0; p->zero = ny == 0 || nx == 0; break;
  }
  if (p->empty || p->zero) return p;

  // cuDNN's symmetric padding, and the explicit border for the rest.
  const int64_t sym_h = std::min(g.top, g.bottom), sym_w = std::min(g.left, g.right);
  p->pad_top = g.top - sym_h;
  p->pad_left = g.left - sym_w;
  p->hp = g.h + (g.top - sym_h) + (g.bottom - sym_h);
  p->wp = g.w + (g.left - sym_w) + (g.right - sym_w);
  p->padded = p->hp != g.h || p->wp != g.w;
  const std::size_t elem = dtype_size(dtype);
  to_int(g.n * g.c * p->hp * p->wp, *p, "input elements");
  to_int(g.n * g.o * g.oh * g.ow, *p, "output elements");
  to_int(nw, *p, "filter elements");

  // The tensors' type, and the type cuDNN computes in: Float32 for the 16-bit floats.
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  switch (dtype) {
    case DType::kFloat64: type = compute = CUDNN_DATA_DOUBLE; break;
    case DType::kFloat16: type = CUDNN_DATA_HALF; break;
    case DType::kBFloat16: type = CUDNN_DATA_BFLOAT16; break;
    default: break;
  }
  const bool half = dtype == DType::kFloat16 || dtype == DType::kBFloat16;
  CudnnDescriptors& d = p->d;
  LOOM_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d.x));
  LOOM_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d.y));
  LOOM_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d.w));
  LOOM_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d.conv));
  LOOM_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d.x, CUDNN_TENSOR_NCHW, type, to_int(g.n, *p, "N"),
                                              to_int(g.c, *p, "C"), to_int(p->hp, *p, "H"),
                                              to_int(p->wp, *p, "W")));
  LOOM_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d.y, CUDNN_TENSOR_NCHW, type, to_int(g.n, *p, "N"),
                                              to_int(g.o, *p, "O"), to_int(g.oh, *p, "OH"),
                                              to_int(g.ow, *p, "OW")));
  LOOM_CUDNN_CHECK(cudnnSetFilter4dDescriptor(d.w, type, CUDNN_TENSOR_NCHW, to_int(g.o, *p, "O"),
                                              to_int(g.c / g.group, *p, "C/group"),
                                              to_int(g.kh, *p, "kh"), to_int(g.kw, *p, "kw")));
  LOOM_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
      d.conv, to_int(sym_h, *p, "padding"), to_int(sym_w, *p, "padding"),
      to_int(g.sh, *p, "stride"), to_int(g.sw, *p, "stride"), to_int(g.dil_h, *p, "dilation"),
      to_int(g.dil_w, *p, "dilation"), CUDNN_CROSS_CORRELATION, compute));
  LOOM_CUDNN_CHECK(cudnnSetConvolutionGroupCount(d.conv, to_int(g.group, *p, "group")));
  // Float32 stays Float32: FMA kernels only (the default allows TF32 tensor cores). The 16-bit
  // floats take the tensor cores.
  LOOM_CUDNN_CHECK(cudnnSetConvolutionMathType(
      d.conv, dtype == DType::kFloat32 ? CUDNN_FMA_MATH
                                       : (half ? CUDNN_TENSOR_OP_MATH : CUDNN_DEFAULT_MATH)));
  int on = 0, oc = 0, ohh = 0, oww = 0;
  LOOM_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(d.conv, d.x, d.w, &on, &oc, &ohh, &oww));
  if (on != g.n || oc != g.o || ohh != g.oh || oww != g.ow) {
    throw InternalError("CUDA convolution: cuDNN's output (" + std::to_string(on) + ", " +
                        std::to_string(oc) + ", " + std::to_string(ohh) + ", " +
                        std::to_string(oww) + ") differs from the inferred one for " +
                        geometry_text(g));
  }
  choose_algorithm(context(c), *p, context(c).deterministic());
  if (p->padded) {
    p->pad_bytes = round_up(static_cast<std::size_t>(g.n * g.c * p->hp * p->wp) * elem);
  }
  const std::size_t regions = p->pad_bytes + p->cudnn_bytes;
  p->workspace = regions == 0 ? 0 : regions + kAlign;
  return p;
}

Prepared prepared(std::shared_ptr<ConvPlan> p) {
  const std::size_t bytes = p->workspace;
  return {std::move(p), bytes};
}

Prepared prepare_conv2d(const PrepareContext& c) {
  return prepared(plan_conv(c, ConvOp::kForward, c.inputs[0].shape, c.inputs[1].shape,
                            c.outputs[0].shape, c.outputs[0].dtype));
}
Prepared prepare_conv2d_backprop_input(const PrepareContext& c) {
  return prepared(plan_conv(c, ConvOp::kInput, c.outputs[0].shape, c.inputs[1].shape,
                            c.inputs[0].shape, c.outputs[0].dtype));
}
Prepared prepare_conv2d_backprop_filter(const PrepareContext& c) {
  return prepared(plan_conv(c, ConvOp::kFilter, c.inputs[1].shape, c.outputs[0].shape,
                            c.inputs[0].shape, c.outputs[0].dtype));
}
Prepared prepare_conv2d_bias_act(const PrepareContext& c) {
  std::shared_ptr<ConvPlan> p = plan_conv(c, ConvOp::kForward, c.inputs[0].shape,
                                          c.inputs[1].shape, c.outputs[0].shape,
                                          c.outputs[0].dtype);
  p->act = act_of(c.prim);
  return prepared(std::move(p));
}

// xp (planes, hp, wp) = x (planes, h, w) placed at (top, left) in a zero border.
template <typename T>
__global__ void pad_kernel(const T* x, T* xp, int64_t total, int64_t h, int64_t w, int64_t hp,
                           int64_t wp, int64_t top, int64_t left) {
  LOOM_GRID_LOOP(i, total) {
    const int64_t xx = i % wp;
    const int64_t t = i / wp;
    const int64_t yy = t % hp;
    const int64_t plane = t / hp;
    const int64_t sy = yy - top, sx = xx - left;
    xp[i] = sy >= 0 && sy < h && sx >= 0 && sx < w ? x[(plane * h + sy) * w + sx] : T(0);
  }
}

// dx (planes, h, w) = the window of dxp (planes, hp, wp) at (top, left).
template <typename T>
__global__ void crop_kernel(const T* dxp, T* dx, int64_t total, int64_t h, int64_t w, int64_t hp,
                            int64_t wp, int64_t top, int64_t left) {
  LOOM_GRID_LOOP(i, total) {
    const int64_t ix = i % w;
    const int64_t t = i / w;
    const int64_t iy = t % h;
    const int64_t plane = t / h;
    dx[i] = dxp[(plane * hp + iy + top) * wp + ix + left];
  }
}

// y (planes of `plane` elements, channel = plane index % channels) = act(y + bias[channel]),
// with the CPU's comparisons.
template <typename T>
__global__ void channel_bias_act_kernel(T* y, const T* bias, int64_t total, int64_t plane,
                                        int64_t channels, Act act) {
  LOOM_GRID_LOOP(i, total) {
    T v = y[i] + bias[(i / plane) % channels];
    if (act == Act::kReLU) {
      v = v < T(0) ? T(0) : v;
    } else if (act == Act::kReLU6) {
      v = v < T(0) ? T(0) : (v > T(6) ? T(6) : v);
    }
    y[i] = v;
  }
}

// cuDNN's scaling factors: double for Float64 data, float otherwise (the 16-bit floats too).
template <typename T>
struct Scale {
  ComputeOf<T> one = 1, zero = 0;
};

// The input cuDNN reads: x itself, or (asymmetric padding) x copied with its explicit zero border
// into the start of the workspace, for the forward pass and the filter gradient alike.
template <typename T>
const T* padded_input(const CudaContext& ctx, const ConvPlan& p, const T* x, char* ws) {
  if (!p.padded) return x;
  using B = BitsOf<T>;
  const ConvGeometry& g = p.g;
  T* xp = reinterpret_cast<T*>(ws);
  const int64_t total = g.n * g.c * p.hp * p.wp;
  pad_kernel<B><<<blocks(total), kThreads, 0, ctx.stream>>>(
      reinterpret_cast<const B*>(x), reinterpret_cast<B*>(xp), total, g.h, g.w, p.hp, p.wp,
      p.pad_top, p.pad_left);
  check_launch();
  return xp;
}

template <typename T>
void conv2d_forward(const KernelContext& k, const ConvPlan& p) {
  const CudaContext& ctx = context(k);
  const T* x = elements<T>(k.in(0));
  const T* w = elements<T>(k.in(1));
  T* y = mutable_elements<T>(k.out(0));
  if (p.empty) return;
  if (p.zero) {
    LOOM_CUDA_CHECK(cudaMemsetAsync(y, 0, k.out(0).nbytes(), ctx.stream));
    return;
  }
  char* ws = workspace_base(k, p.workspace);
  const T* src = padded_input(ctx, p, x, ws);
  const Scale<T> s;
  LOOM_CUDNN_CHECK(cudnnConvolutionForward(ctx.cudnn, &s.one, p.d.x, src, p.d.w, w, p.d.conv,
                                           p.fwd, p.cudnn_bytes ? ws + p.pad_bytes : nullptr,
                                           p.cudnn_bytes, &s.zero, p.d.y, y));
}

template <typename T>
void conv2d(const KernelContext& k) {
  conv2d_forward<T>(k, k.state<ConvPlan>());
}

template <typename T>
void conv2d_bias_act(const KernelContext& k) {
  const ConvPlan& p = k.state<ConvPlan>();
  conv2d_forward<T>(k, p);
  const Tensor& y = k.out(0);
  const int64_t total = y.numel();
  if (total == 0) return;
  const int64_t plane = y.dim(2) * y.dim(3);
  channel_bias_act_kernel<T><<<blocks(total), kThreads, 0, context(k).stream>>>(
      mutable_elements<T>(k.out(0)), elements<T>(k.in(2)), total, plane, y.dim(1), p.act);
  check_launch();
}

template <typename T>
void conv2d_backprop_input(const KernelContext& k) {
  const ConvPlan& p = k.state<ConvPlan>();
  const CudaContext& ctx = context(k);
  const T* dout = elements<T>(k.in(0));
  const T* w = elements<T>(k.in(1));
  T* dx = mutable_elements<T>(k.out(0));
  if (p.empty) return;
  if (p.zero) {
    LOOM_CUDA_CHECK(cudaMemsetAsync(dx, 0, k.out(0).nbytes(), ctx.stream));
    return;
  }
  char* ws = workspace_base(k, p.workspace);
  const ConvGeometry& g = p.g;
  T* dst = p.padded ? reinterpret_cast<T*>(ws) : dx;
  const Scale<T> s;
  LOOM_CUDNN_CHECK(cudnnConvolutionBackwardData(
      ctx.cudnn, &s.one, p.d.w, w, p.d.y, dout, p.d.conv, p.bwd_data,
      p.cudnn_bytes ? ws + p.pad_bytes : nullptr, p.cudnn_bytes, &s.zero, p.d.x, dst));
  if (p.padded) {
    const int64_t total = g.n * g.c * g.h * g.w;
    using B = BitsOf<T>;
    crop_kernel<B><<<blocks(total), kThreads, 0, ctx.stream>>>(
        reinterpret_cast<const B*>(dst), reinterpret_cast<B*>(dx), total, g.h, g.w, p.hp, p.wp,
        p.pad_top, p.pad_left);
    check_launch();
  }
}

template <typename T>
void conv2d_backprop_filter(const KernelContext& k) {
  const ConvPlan& p = k.state<ConvPlan>();
  const CudaContext& ctx = context(k);
  const T* dout = elements<T>(k.in(0));
  const T* x = elements<T>(k.in(1));
  T* dw = mutable_elements<T>(k.out(0));
  if (p.empty) return;
  if (p.zero) {
    LOOM_CUDA_CHECK(cudaMemsetAsync(dw, 0, k.out(0).nbytes(), ctx.stream));
    return;
  }
  char* ws = workspace_base(k, p.workspace);
  const T* src = padded_input(ctx, p, x, ws);
  const Scale<T> s;
  LOOM_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
      ctx.cudnn, &s.one, p.d.x, src, p.d.y, dout, p.d.conv, p.bwd_filter,
      p.cudnn_bytes ? ws + p.pad_bytes : nullptr, p.cudnn_bytes, &s.zero, p.d.w, dw));
}

// ---------------------------------------------------------------------------------------------
// Pooling

// One node's window geometry (ops/conv_geometry.h's padding), passed to the kernels by value.
struct PoolGeometry {
  int64_t planes, h, w, oh, ow;
  int64_t kh, kw, sh, sw;
  int64_t pad_top, pad_left;
};

// x: (n, c, h, w); pooled: (n, c, oh, ow) as inferred.
PoolGeometry pool_geometry(const ir::Primitive& prim, const Shape& x, const Shape& pooled) {
  const auto k = prim.attr("kernel_size").as_ints();
  const auto s = prim.attr("strides").as_ints();
  PoolGeometry g{.planes = x[0] * x[1], .h = x[2], .w = x[3], .oh = pooled[2], .ow = pooled[3],
                 .kh = k[0], .kw = k[1], .sh = s[0], .sw = s[1], .pad_top = 0, .pad_left = 0};
  const ops::PadMode mode = ops::pad_mode_of(prim);
  const auto pad = prim.attr("pad").as_ints();  // PAD mode's (top, bottom, left, right)
  g.pad_top = ops::window_axis(g.h, g.kh, g.sh, 1, mode, pad[0], pad[1]).pad_before;
  g.pad_left = ops::window_axis(g.w, g.kw, g.sw, 1, mode, pad[2], pad[3]).pad_before;
  return g;
}

// The window of output (oy, ox) clipped to the image: rows [y0, y1), columns [x0, x1).
template <typename I = int64_t>
struct WindowT {
  I y0, y1, x0, x1;
};
using Window = WindowT<>;

// The geometry in index type I: 32-bit where the tensors allow (PoolGeometry::fits32), which
// makes the kernels' divisions several times cheaper than 64-bit ones (MaxPoolGrad at ResNet-50's
// 112x112 stem was bound by them).
template <typename I>
struct PoolGeometryI {
  I planes, h, w, oh, ow, kh, kw, sh, sw, pad_top, pad_left;
};
template <typename I>
PoolGeometryI<I> narrow(const PoolGeometry& g) {
  return {static_cast<I>(g.planes), static_cast<I>(g.h),  static_cast<I>(g.w),
          static_cast<I>(g.oh),     static_cast<I>(g.ow), static_cast<I>(g.kh),
          static_cast<I>(g.kw),     static_cast<I>(g.sh), static_cast<I>(g.sw),
          static_cast<I>(g.pad_top), static_cast<I>(g.pad_left)};
}
bool fits32(const PoolGeometry& g) {
  const int64_t limit = int64_t{1} << 30;
  return g.planes * g.h * g.w < limit && g.planes * g.oh * g.ow < limit;
}
// Calls launch(I{}) with I = int where the geometry fits 32-bit indices, else int64_t.
template <typename F>
void with_index_type(const PoolGeometry& g, F&& launch) {
  if (fits32(g)) {
    launch(int{});
  } else {
    launch(int64_t{});
  }
}

template <typename G, typename I>
__device__ inline WindowT<I> window_of(const G& g, I oy, I ox) {
  const I ys = oy * g.sh - g.pad_top;
  const I xs = ox * g.sw - g.pad_left;
  return {ys > 0 ? ys : I(0), ys + g.kh < g.h ? ys + g.kh : g.h, xs > 0 ? xs : I(0),
          xs + g.kw < g.w ? xs + g.kw : g.w};
}

// The outputs [lo, hi] along one axis whose windows contain input position i (empty: lo > hi).
template <typename I>
__device__ inline void covering(I i, I pad, I kernel, I stride, I out, I& lo, I& hi) {
  const I r = i + pad;  // i in padded coordinates: window o covers [o·stride, o·stride + k)
  hi = r / stride;
  if (hi > out - 1) hi = out - 1;
  lo = r >= kernel ? (r - kernel) / stride + 1 : I(0);
}

// Flat index within the plane of the window's first maximum (row-major; the first NaN wins).
template <typename T, typename I>
__device__ I window_argmax(const T* plane, I w, const WindowT<I>& win) {
  I best = win.y0 * w + win.x0;
  T bv = plane[best];
  for (I iy = win.y0; iy < win.y1; ++iy) {
    for (I ix = win.x0; ix < win.x1; ++ix) {
      const T v = plane[iy * w + ix];
      if (v > bv || (v != v && bv == bv)) {  // greater, or a NaN over a number
        best = iy * w + ix;
        bv = v;
      }
    }
  }
  return best;
}

// MaxPool (mode 0): y = x at the window's winner; the winners' indices (mode 1) into `arg`;
// MaxPoolGradGrad (mode 2): y = grad at the window's winner.
template <typename T, int kMode, typename I>
__global__ void max_pool_kernel(PoolGeometryI<I> g, const T* x, const T* grad, T* y, int64_t* arg,
                                I total) {
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<I>(blockDim.x) * gridDim.x) {
    const I ox = i % g.ow;
    const I t = i / g.ow;
    const I oy = t % g.oh;
    const I p = t / g.oh;
    const I best = window_argmax(x + p * g.h * g.w, g.w, window_of(g, oy, ox));
    if constexpr (kMode == 0) y[i] = x[p * g.h * g.w + best];
    if constexpr (kMode == 1) arg[i] = best;
    if constexpr (kMode == 2) y[i] = grad[p * g.h * g.w + best];
  }
}

// MaxPoolGrad: dx = 0 + Σ dout of the windows whose winner this element is, windows in
// row-major order (the CPU's order of additions into a zeroed plane).
template <typename T, typename I>
__global__ void max_pool_grad_kernel(PoolGeometryI<I> g, const int64_t* arg, const T* dout, T* dx,
                                     I total) {
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<I>(blockDim.x) * gridDim.x) {
    const I ix = i % g.w;
    const I t = i / g.w;
    const I iy = t % g.h;
    const I p = t / g.h;
    I oy0, oy1, ox0, ox1;
    covering(iy, g.pad_top, g.kh, g.sh, g.oh, oy0, oy1);
    covering(ix, g.pad_left, g.kw, g.sw, g.ow, ox0, ox1);
    const int64_t self = iy * g.w + ix;
    const I base = p * g.oh * g.ow;
    T sum = T(0);
    for (I oy = oy0; oy <= oy1; ++oy) {
      for (I ox = ox0; ox <= ox1; ++ox) {
        const I o = base + oy * g.ow + ox;
        if (arg[o] == self) sum += dout[o];
      }
    }
    dx[i] = sum;
  }
}

// MaxPoolGrad where the windows do not overlap (kernel <= stride on both axes: LeNet's 2x2,
// stride 2): a thread per window finds its winner (window_argmax, as above: the same winner) and
// writes the window's cell of dx, the stride-sized block of input rows and columns that starts
// with the window (the first cell from row and column 0, the last to the image's end, so that
// the cells tile the image): 0 + dout at the winner, 0 elsewhere. One launch that reads x and
// writes dx once, instead of a winners launch and a gradient launch.
template <typename T, typename I>
__global__ void max_pool_grad_disjoint_kernel(PoolGeometryI<I> g, const T* x, const T* dout,
                                              T* dx, I windows) {
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < windows;
       i += static_cast<I>(blockDim.x) * gridDim.x) {
    const I ox = i % g.ow;
    const I t = i / g.ow;
    const I oy = t % g.oh;
    const I p = t / g.oh;
    const T* plane = x + p * g.h * g.w;
    const I best = window_argmax(plane, g.w, window_of(g, oy, ox));
    const T v = T(0) + dout[i];
    const I y0 = oy == 0 ? I(0) : oy * g.sh - g.pad_top;
    const I y1 = oy == g.oh - 1 ? g.h : std::min(g.h, (oy + 1) * g.sh - g.pad_top);
    const I x0 = ox == 0 ? I(0) : ox * g.sw - g.pad_left;
    const I x1 = ox == g.ow - 1 ? g.w : std::min(g.w, (ox + 1) * g.sw - g.pad_left);
    T* out = dx + p * g.h * g.w;
    for (I iy = y0; iy < y1; ++iy) {
      for (I ix = x0; ix < x1; ++ix) out[iy * g.w + ix] = iy * g.w + ix == best ? v : T(0);
    }
  }
}

bool windows_disjoint(const PoolGeometry& g) { return g.kh <= g.sh && g.kw <= g.sw; }

// Launches max_pool_kernel in 32-bit indices where the geometry allows.
template <typename T, int kMode>
void launch_max_pool(const PoolGeometry& g, const T* x, const T* grad, T* y, int64_t* arg,
                     int64_t total, cudaStream_t stream) {
  with_index_type(g, [&](auto index) {
    using I = decltype(index);
    max_pool_kernel<T, kMode, I><<<blocks(total), kThreads, 0, stream>>>(
        narrow<I>(g), x, grad, y, arg, static_cast<I>(total));
    check_launch();
  });
}

// AvgPool: the window's sum in row-major order over its elements inside the image, divided by
// their count.
template <typename T>
__global__ void avg_pool_kernel(PoolGeometry g, const T* x, T* y, int64_t total) {
  LOOM_GRID_LOOP(i, total) {
    const int64_t ox = i % g.ow;
    const int64_t t = i / g.ow;
    const int64_t oy = t % g.oh;
    const int64_t p = t / g.oh;
    const Window win = window_of(g, oy, ox);
    const T* plane = x + p * g.h * g.w;
    T sum = 0;
    for (int64_t iy = win.y0; iy < win.y1; ++iy) {
      for (int64_t ix = win.x0; ix < win.x1; ++ix) sum += plane[iy * g.w + ix];
    }
    y[i] = sum / static_cast<T>((win.y1 - win.y0) * (win.x1 - win.x0));
  }
}

// AvgPoolGrad: dx = 0 + Σ dout / count of the windows covering this element, in row-major order.
template <typename T>
__global__ void avg_pool_grad_kernel(PoolGeometry g, const T* dout, T* dx, int64_t total) {
  LOOM_GRID_LOOP(i, total) {
    const int64_t ix = i % g.w;
    const int64_t t = i / g.w;
    const int64_t iy = t % g.h;
    const int64_t p = t / g.h;
    int64_t oy0, oy1, ox0, ox1;
    covering(iy, g.pad_top, g.kh, g.sh, g.oh, oy0, oy1);
    covering(ix, g.pad_left, g.kw, g.sw, g.ow, ox0, ox1);
    const T* d = dout + p * g.oh * g.ow;
    T sum = T(0);
    for (int64_t oy = oy0; oy <= oy1; ++oy) {
      for (int64_t ox = ox0; ox <= ox1; ++ox) {
        const Window win = window_of(g, oy, ox);
        sum += d[oy * g.ow + ox] / static_cast<T>((win.y1 - win.y0) * (win.x1 - win.x0));
      }
    }
    dx[i] = sum;
  }
}

struct PoolPlan {
  PoolGeometry g;
};

// x is input 0; the pooled shape is the output's (MaxPool, AvgPool, MaxPoolGradGrad) or input
// 2's, dout (the gradients). MaxPoolGrad's workspace holds the window winners.
template <bool kPooledIsInput2, bool kWinners>
Prepared prepare_pool(const PrepareContext& c) {
  const Shape& pooled = kPooledIsInput2 ? c.inputs[2].shape : c.outputs[0].shape;
  auto plan = std::make_shared<PoolPlan>(PoolPlan{pool_geometry(c.prim, c.inputs[0].shape, pooled)});
  const bool needs_winners = kWinners && !windows_disjoint(plan->g);
  const std::size_t winners =
      needs_winners ? static_cast<std::size_t>(shape_numel(pooled)) * sizeof(int64_t) : 0;
  return {std::move(plan), winners == 0 ? 0 : round_up(winners) + kAlign};
}

template <typename T>
void max_pool(const KernelContext& k) {
  const PoolGeometry& g = k.state<PoolPlan>().g;
  const int64_t total = k.out(0).numel();
  if (total == 0) return;
  launch_max_pool<T, 0>(g, k.in(0).data<T>(), nullptr, k.out(0).data<T>(), nullptr, total,
                        context(k).stream);
}

// MaxPoolGrad(x, out, dout) → dx.
template <typename T>
void max_pool_grad(const KernelContext& k) {
  const PoolGeometry& g = k.state<PoolPlan>().g;
  const cudaStream_t stream = context(k).stream;
  const int64_t pooled = k.in(2).numel();
  const int64_t total = k.out(0).numel();
  if (total == 0) return;
  if (windows_disjoint(g)) {
    if (pooled == 0) {  // no window: no cell either
      LOOM_CUDA_CHECK(cudaMemsetAsync(k.out(0).data<T>(), 0, k.out(0).nbytes(), stream));
      return;
    }
    with_index_type(g, [&](auto index) {
      using I = decltype(index);
      max_pool_grad_disjoint_kernel<T, I><<<blocks(pooled), kThreads, 0, stream>>>(
          narrow<I>(g), k.in(0).data<T>(), k.in(2).data<T>(), k.out(0).data<T>(),
          static_cast<I>(pooled));
      check_launch();
    });
    return;
  }
  int64_t* arg = nullptr;
  if (pooled > 0) {
    arg = reinterpret_cast<int64_t*>(
        workspace_base(k, round_up(static_cast<std::size_t>(pooled) * sizeof(int64_t)) + kAlign));
    launch_max_pool<T, 1>(g, k.in(0).data<T>(), nullptr, nullptr, arg, pooled, stream);
  }
  with_index_type(g, [&](auto index) {
    using I = decltype(index);
    max_pool_grad_kernel<T, I><<<blocks(total), kThreads, 0, stream>>>(
        narrow<I>(g), arg, k.in(2).data<T>(), k.out(0).data<T>(), static_cast<I>(total));
    check_launch();
  });
}

// MaxPoolGradGrad(x, out, grad) → pooled.
template <typename T>
void max_pool_grad_grad(const KernelContext& k) {
  const PoolGeometry& g = k.state<PoolPlan>().g;
  const int64_t total = k.out(0).numel();
  if (total == 0) return;
  launch_max_pool<T, 2>(g, k.in(0).data<T>(), k.in(2).data<T>(), k.out(0).data<T>(), nullptr,
                        total, context(k).stream);
}

template <typename T>
void avg_pool(const KernelContext& k) {
  const PoolGeometry& g = k.state<PoolPlan>().g;
  const int64_t total = k.out(0).numel();
  if (total == 0) return;
  avg_pool_kernel<T><<<blocks(total), kThreads, 0, context(k).stream>>>(
      g, k.in(0).data<T>(), k.out(0).data<T>(), total);
  check_launch();
}

// AvgPoolGrad(x, out, dout) → dx.
template <typename T>
void avg_pool_grad(const KernelContext& k) {
  const PoolGeometry& g = k.state<PoolPlan>().g;
  const int64_t total = k.out(0).numel();
  if (total == 0) return;
  avg_pool_grad_kernel<T><<<blocks(total), kThreads, 0, context(k).stream>>>(
      g, k.in(2).data<T>(), k.out(0).data<T>(), total);
  check_launch();
}

// ---------------------------------------------------------------------------------------------
// Batch norm

// Elements of one channel a block sums.
constexpr int64_t kChunk = 8192;
// Threads of a summing block (a multiple of 32, at most 1024).
constexpr int kSumThreads = 256;

// x as (N, C, S), S = H·W (1 for rank 2).
struct Layout {
  int64_t n, c, s;
  int64_t per_channel() const { return n * s; }
  // Blocks per channel.
  int64_t parts() const { return std::max<int64_t>(1, (per_channel() + kChunk - 1) / kChunk); }
};

Layout layout_of(const Shape& d) { return {d[0], d[1], d.size() == 4 ? d[2] * d[3] : 1}; }

// The workspace of a batch-norm node: per-channel partial sums (two per block), then per-channel
// parameters (four doubles each), then the same parameters rounded to the tensor's dtype (what
// the elementwise kernels read: one load per parameter, no conversion per element).
struct NormPlan {
  Layout l;
  std::size_t partial_bytes = 0, param_bytes = 0, workspace = 0;
  double* partial(char* ws) const { return reinterpret_cast<double*>(ws); }
  double* params(char* ws) const { return reinterpret_cast<double*>(ws + partial_bytes); }
  template <typename T>
  T* rounded(char* ws) const { return reinterpret_cast<T*>(ws + partial_bytes + param_bytes); }
};

Prepared prepare_norm(const Shape& x) {
  auto p = std::make_shared<NormPlan>();
  p->l = layout_of(x);
  p->partial_bytes = round_up(static_cast<std::size_t>(p->l.c * p->l.parts() * 2) * sizeof(double));
  p->param_bytes = round_up(static_cast<std::size_t>(p->l.c * 4) * sizeof(double));
  p->workspace = p->l.c == 0 ? 0 : p->partial_bytes + 2 * p->param_bytes + kAlign;
  const std::size_t bytes = p->workspace;
  return {std::move(p), bytes};
}

Prepared prepare_batch_norm(const PrepareContext& c) { return prepare_norm(c.inputs[0].shape); }
// BatchNormApply: the parameters alone (no sums).
Prepared prepare_batch_norm_apply(const PrepareContext& c) {
  auto p = std::make_shared<NormPlan>();
  p->l = layout_of(c.inputs[0].shape);
  p->param_bytes = round_up(static_cast<std::size_t>(p->l.c * 4) * sizeof(double));
  p->workspace = p->l.c == 0 ? 0 : 2 * p->param_bytes + kAlign;
  const std::size_t bytes = p->workspace;
  return {std::move(p), bytes};
}
Prepared prepare_batch_norm_grad(const PrepareContext& c) {
  return prepare_norm(c.inputs[1].shape);
}

// Sums a and b over the block in a fixed tree (the shuffle tree of each warp, then of the warps'
// results); thread 0 gets the totals.
__device__ void block_sum2(double& a, double& b) {
  __shared__ double wa[32], wb[32];
  for (int off = 16; off > 0; off >>= 1) {
    a += __shfl_down_sync(0xffffffffu, a, off);
    b += __shfl_down_sync(0xffffffffu, b, off);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    wa[warp] = a;
    wb[warp] = b;
  }
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x >> 5;
    a = lane < warps ? wa[lane] : 0.0;
    b = lane < warps ? wb[lane] : 0.0;
    for (int off = 16; off > 0; off >>= 1) {
      a += __shfl_down_sync(0xffffffffu, a, off);
      b += __shfl_down_sync(0xffffffffu, b, off);
    }
  }
}

enum SumMode {
  kShiftedMoments,  // Σ(x - k), Σ(x - k)², k = the channel's first element (Float32 BatchNorm)
  kSum,             // Σx (Float64 BatchNorm, first pass)
  kCentredSquares,  // Σ(x - mean)², mean = centre[c] (Float64 BatchNorm, second pass)
  kGradient,        // Σdy, Σdy·(x - mean), mean = mean_in[c] (BatchNormGrad)
};

// Block b sums part b % parts of channel b / parts: elements [part·kChunk, (part + 1)·kChunk) of
// the channel's N·S, into partial[2·b], partial[2·b + 1].
template <typename T, SumMode kMode>
__global__ void channel_sums_kernel(Layout l, int64_t parts, const T* x, const T* dy,
                                    const double* centre, const T* mean_in, double* partial) {
  const int64_t ch = blockIdx.x / parts;
  const int64_t part = blockIdx.x % parts;
  const int64_t m = l.n * l.s;
  const int64_t begin = part * kChunk;
  const int64_t end = begin + kChunk < m ? begin + kChunk : m;
  double k = 0;
  if constexpr (kMode == kShiftedMoments) k = m > 0 ? static_cast<double>(x[ch * l.s]) : 0.0;
  if constexpr (kMode == kCentredSquares) k = centre[ch];
  if constexpr (kMode == kGradient) k = static_cast<double>(mean_in[ch]);
  double a = 0, b = 0;
  // Element j of the channel is (q, r) = (j / S, j % S): divided once, then stepped.
  const int64_t step_q = blockDim.x / l.s, step_r = blockDim.x % l.s;
  int64_t q = (begin + threadIdx.x) / l.s, r = (begin + threadIdx.x) % l.s;
  for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
    const int64_t i = (q * l.c + ch) * l.s + r;
    q += step_q;
    r += step_r;
    if (r >= l.s) {
      r -= l.s;
      ++q;
    }
    const double v = static_cast<double>(x[i]);
    if constexpr (kMode == kShiftedMoments) {
      const double d = v - k;
      a += d;
      b += d * d;
    } else if constexpr (kMode == kSum) {
      a += v;
    } else if constexpr (kMode == kCentredSquares) {
      const double d = v - k;
      a += d * d;
    } else {
      const double g = static_cast<double>(dy[i]);
      a += g;
      b += g * (v - k);
    }
  }
  block_sum2(a, b);
  if (threadIdx.x == 0) {
    const int64_t at = 2 * static_cast<int64_t>(blockIdx.x);
    partial[at] = a;
    partial[at + 1] = b;
  }
}

template <typename T, SumMode kMode>
void channel_sums(const Layout& l, const T* x, const T* dy, const double* centre,
                  const T* mean_in, double* partial, cudaStream_t stream) {
  const int64_t grid = l.c * l.parts();
  if (grid > INT_MAX) throw ValueError("CUDA batch norm: too many channels × blocks");
  channel_sums_kernel<T, kMode><<<static_cast<unsigned>(grid), kSumThreads, 0, stream>>>(
      l, l.parts(), x, dy, centre, mean_in, partial);
  check_launch();
}

// The channel's totals: its blocks' partials added in order.
__device__ inline void channel_totals(const double* partial, int64_t ch, int64_t parts,
                                      double& a, double& b) {
  a = 0;
  b = 0;
  for (int64_t q = 0; q < parts; ++q) {
    a += partial[2 * (ch * parts + q)];
    b += partial[2 * (ch * parts + q) + 1];
  }
}

// Parameter rows of `params` (each c doubles): 0 shift, 1 mul, 2 add, 3 (BatchNormGrad) c0.
struct Params {
  double* p;
  int64_t c;
  __device__ double& at(int row, int64_t ch) const { return p[row * c + ch]; }
};

// The rows rounded to T, written by the parameter kernels after the doubles (set_rounded) and
// read by the elementwise kernels.
template <typename T>
__device__ void set_rounded(const Params& prm, T* rounded, int rows, int64_t ch) {
  for (int r = 0; r < rows; ++r) rounded[r * prm.c + ch] = static_cast<T>(prm.at(r, ch));
}

// Float64 first pass: the batch mean into row 0.
__global__ void batch_mean_kernel(Layout l, int64_t parts, const double* partial, Params prm) {
  LOOM_GRID_LOOP(ch, l.c) {
    double a, b;
    channel_totals(partial, ch, parts, a, b);
    prm.at(0, ch) = a / static_cast<double>(l.n * l.s);
  }
}

// Training: the statistics outputs and y's parameters from the channel's sums (kShifted: Float32's
// shifted moments; else Float64's centred squares with the mean in row 0), as the CPU's formulas.
template <typename T, bool kShifted>
__global__ void batch_norm_train_kernel(Layout l, int64_t parts, const double* partial,
                                        const T* x, const T* scale, const T* bias,
                                        const T* moving_mean, const T* moving_var, double eps,
                                        double momentum, Params prm, T* rounded, T* new_mean,
                                        T* new_var, T* saved_mean, T* saved_inv_std) {
  LOOM_GRID_LOOP(ch, l.c) {
    const double m = static_cast<double>(l.n * l.s);
    double a, b;
    channel_totals(partial, ch, parts, a, b);
    double mean, var;
    if constexpr (kShifted) {
      const double shift = l.n * l.s > 0 ? static_cast<double>(x[ch * l.s]) : 0.0;
      const double shifted_mean = a / m;
      mean = shift + shifted_mean;
      var = b / m - shifted_mean * shifted_mean;
      var = var > 0.0 ? var : 0.0;
    } else {
      mean = prm.at(0, ch);
      var = a / m;
    }
    // y's multiplier from the inverse std as saved_inv_std stores it: BatchNormApply's, bitwise.
    const double inv_std = static_cast<double>(static_cast<T>(1.0 / sqrt(var + eps)));
    const double mul = static_cast<double>(scale[ch]) * inv_std;
    new_mean[ch] = static_cast<T>((1 - momentum) * static_cast<double>(moving_mean[ch]) +
                                  momentum * mean);
    new_var[ch] = static_cast<T>((1 - momentum) * static_cast<double>(moving_var[ch]) +
                                 momentum * var * m / (m - 1));
    saved_mean[ch] = static_cast<T>(mean);
    saved_inv_std[ch] = static_cast<T>(inv_std);
    prm.at(0, ch) = mean;
    prm.at(1, ch) = mul;
    prm.at(2, ch) = static_cast<double>(bias[ch]);
    set_rounded(prm, rounded, 3, ch);
  }
}

// Inference: y's parameters from the moving statistics, which pass through to outputs 1 to 4.
template <typename T>
__global__ void batch_norm_infer_kernel(int64_t channels, const T* scale, const T* bias,
                                        const T* moving_mean, const T* moving_var, double eps,
                                        Params prm, T* rounded, T* out1, T* out2, T* out3,
                                        T* out4) {
  LOOM_GRID_LOOP(ch, channels) {
    const double mv = static_cast<double>(moving_var[ch]);
    prm.at(0, ch) = static_cast<double>(moving_mean[ch]);
    prm.at(1, ch) = static_cast<double>(scale[ch]) / sqrt(mv + eps);
    prm.at(2, ch) = static_cast<double>(bias[ch]);
    set_rounded(prm, rounded, 3, ch);
    out1[ch] = moving_mean[ch];
    out2[ch] = moving_var[ch];
    out3[ch] = moving_mean[ch];
    out4[ch] = moving_var[ch];
  }
}

// BatchNormApply: y's parameters from training BatchNorm's saved mean and inverse std, as
// batch_norm_train_kernel computes them.
template <typename T>
__global__ void batch_norm_apply_kernel(int64_t channels, const T* scale, const T* bias,
                                        const T* mean, const T* inv_std, Params prm,
                                        T* rounded) {
  LOOM_GRID_LOOP(ch, channels) {
    prm.at(0, ch) = static_cast<double>(mean[ch]);
    prm.at(1, ch) = static_cast<double>(scale[ch]) * static_cast<double>(inv_std[ch]);
    prm.at(2, ch) = static_cast<double>(bias[ch]);
    set_rounded(prm, rounded, 3, ch);
  }
}

// The elementwise half of batch norm over x's (N, C, S) elements, V consecutive elements a
// thread (V = 4: float4 loads and stores, where S is a multiple of 4 and the pointers are 16-byte
// aligned) with index type I (32-bit where the tensor allows): one division per group for its
// channel, the channel's parameters rounded to T (rows of `p`). kDx: the training gradient
// dx = dy·a + (x - mu)·b + c0 (rows 0 mu, 1 a, 2 b, 3 c0); else out = (in - shift)·mul + add
// (rows 0 shift, 1 mul, 2 add: the CPU's channel_affine). Each element's arithmetic is the
// scalar formula's.
// kAct (out = ... only): 0 none, 1 ReLU, 2 ReLU6 after the affine map, as ReLU's and ReLU6's
// kernels compute them (a NaN stays).
template <typename T, bool kDx, int kAct = 0>
__device__ inline T bn_element(T in, T x, T p0, T p1, T p2, T p3) {
  if constexpr (kDx) {
    return in * p1 + (x - p0) * p2 + p3;
  } else {
    const T v = (in - p0) * p1 + p2;
    if constexpr (kAct == 1) return v < T(0) ? T(0) : v;
    if constexpr (kAct == 2) return v < T(0) ? T(0) : (v > T(6) ? T(6) : v);
    return v;
  }
}

template <typename T, int V, typename I, bool kDx, int kAct = 0>
__global__ void bn_elementwise_kernel(I groups, I s_groups, I c, const T* in, const T* x,
                                      const T* p, T* out) {
  for (I g = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups;
       g += static_cast<I>(blockDim.x) * gridDim.x) {
    const I ch = (g / s_groups) % c;
    const T p0 = p[ch], p1 = p[c + ch], p2 = p[2 * c + ch];
    const T p3 = kDx ? p[3 * c + ch] : T(0);
    if constexpr (V == 4) {
      const float4 a = reinterpret_cast<const float4*>(in)[g];
      float4 b = a;
      if constexpr (kDx) b = reinterpret_cast<const float4*>(x)[g];
      float4 o;
      o.x = bn_element<T, kDx, kAct>(a.x, b.x, p0, p1, p2, p3);
      o.y = bn_element<T, kDx, kAct>(a.y, b.y, p0, p1, p2, p3);
      o.z = bn_element<T, kDx, kAct>(a.z, b.z, p0, p1, p2, p3);
      o.w = bn_element<T, kDx, kAct>(a.w, b.w, p0, p1, p2, p3);
      reinterpret_cast<float4*>(out)[g] = o;
    } else {
      out[g] = bn_element<T, kDx, kAct>(in[g], kDx ? x[g] : T(0), p0, p1, p2, p3);
    }
  }
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Launches bn_elementwise_kernel for x's layout (x: null unless kDx).
template <typename T, bool kDx, int kAct = 0>
void bn_elementwise(const Layout& l, const T* in, const T* x, const T* p, T* out,
                    cudaStream_t stream) {
  const int64_t total = l.n * l.c * l.s;
  if (total == 0) return;
  const bool vec = std::is_same_v<T, float> && l.s % 4 == 0 && aligned16(in) && aligned16(out) &&
                   (!kDx || aligned16(x));
  const int64_t v = vec ? 4 : 1;
  const int64_t groups = total / v;
  auto launch = [&](auto index, auto width) {
    using I = decltype(index);
    constexpr int V = decltype(width)::value;
    bn_elementwise_kernel<T, V, I, kDx, kAct><<<blocks(groups), kThreads, 0, stream>>>(
        static_cast<I>(groups), static_cast<I>(l.s / v), static_cast<I>(l.c), in, x, p, out);
    check_launch();
  };
  const bool narrow = total < (int64_t{1} << 31);
  if constexpr (std::is_same_v<T, float>) {
    if (vec) {
      if (narrow) {
        launch(std::uint32_t{}, std::integral_constant<int, 4>{});
      } else {
        launch(int64_t{}, std::integral_constant<int, 4>{});
      }
      return;
    }
  }
  if (narrow) {
    launch(std::uint32_t{}, std::integral_constant<int, 1>{});
  } else {
    launch(int64_t{}, std::integral_constant<int, 1>{});
  }
}

template <typename T>
void batch_norm(const KernelContext& k) {
  const NormPlan& plan = k.state<NormPlan>();
  const Layout& l = plan.l;
  if (l.c == 0) return;
  const cudaStream_t stream = context(k).stream;
  char* ws = workspace_base(k, plan.workspace);
  double* partial = plan.partial(ws);
  const Params prm{plan.params(ws), l.c};
  T* rounded = plan.rounded<T>(ws);
  const T* x = k.in(0).data<T>();
  const T* scale = k.in(1).data<T>();
  const T* bias = k.in(2).data<T>();
  const T* moving_mean = k.in(3).data<T>();
  const T* moving_var = k.in(4).data<T>();
  const double eps = k.attr("epsilon").as_double();
  const unsigned channel_blocks = blocks(l.c);
  if (!k.attr("is_training").as_bool()) {
    batch_norm_infer_kernel<T><<<channel_blocks, kThreads, 0, stream>>>(
        l.c, scale, bias, moving_mean, moving_var, eps, prm, rounded, k.out(1).data<T>(),
        k.out(2).data<T>(), k.out(3).data<T>(), k.out(4).data<T>());
    check_launch();
  } else {
    const double momentum = k.attr("momentum").as_double();
    constexpr bool kShifted = std::is_same_v<T, float>;
    if constexpr (kShifted) {
      channel_sums<T, kShiftedMoments>(l, x, nullptr, nullptr, nullptr, partial, stream);
    } else {
      // Two passes: the mean, then Σ(x - mean)² (a Float64 square is not exact in double).
      channel_sums<T, kSum>(l, x, nullptr, nullptr, nullptr, partial, stream);
      batch_mean_kernel<<<channel_blocks, kThreads, 0, stream>>>(l, l.parts(), partial, prm);
      check_launch();
      channel_sums<T, kCentredSquares>(l, x, nullptr, prm.p, nullptr, partial, stream);
    }
    batch_norm_train_kernel<T, kShifted><<<channel_blocks, kThreads, 0, stream>>>(
        l, l.parts(), partial, x, scale, bias, moving_mean, moving_var, eps, momentum, prm,
        rounded, k.out(1).data<T>(), k.out(2).data<T>(), k.out(3).data<T>(), k.out(4).data<T>());
    check_launch();
  }
  bn_elementwise<T, false>(l, x, nullptr, rounded, k.out(0).data<T>(), stream);
}

template <typename T>
void batch_norm_apply(const KernelContext& k) {
  const NormPlan& plan = k.state<NormPlan>();
  const Layout& l = plan.l;
  if (l.c == 0) return;
  const cudaStream_t stream = context(k).stream;
  char* ws = workspace_base(k, plan.workspace);
  const Params prm{plan.params(ws), l.c};
  T* rounded = plan.rounded<T>(ws);
  batch_norm_apply_kernel<T><<<blocks(l.c), kThreads, 0, stream>>>(
      l.c, k.in(1).data<T>(), k.in(2).data<T>(), k.in(3).data<T>(), k.in(4).data<T>(), prm,
      rounded);
  check_launch();
  const std::string& act = k.attr("act").as_string();
  const T* x = k.in(0).data<T>();
  T* y = k.out(0).data<T>();
  if (act == "relu") {
    bn_elementwise<T, false, 1>(l, x, nullptr, rounded, y, stream);
  } else if (act == "relu6") {
    bn_elementwise<T, false, 2>(l, x, nullptr, rounded, y, stream);
  } else {
    bn_elementwise<T, false>(l, x, nullptr, rounded, y, stream);
  }
}

// BatchNormGrad's per-channel results: dscale, dbias, and dx's parameters (training: rows 0 mean,
// 1 a, 2 b, 3 c0 of bn_elementwise<T, true>; inference: rows 0 shift, 1 mul, 2 add of
// bn_elementwise<T, false>).
template <typename T>
__global__ void batch_norm_grad_kernel(Layout l, int64_t parts, const double* partial,
                                       const T* scale, const T* mean_in, const T* rs2, double eps,
                                       bool training, Params prm, T* rounded, T* dscale_out,
                                       T* dbias_out) {
  LOOM_GRID_LOOP(ch, l.c) {
    double sum_dy, sum_dot;
    channel_totals(partial, ch, parts, sum_dy, sum_dot);
    const double v = static_cast<double>(rs2[ch]);
    const double inv_std = training ? v : 1.0 / sqrt(v + eps);  // rs2: variance in inference
    const double dbias = sum_dy;
    const double dscale = sum_dot * inv_std;
    dscale_out[ch] = static_cast<T>(dscale);
    dbias_out[ch] = static_cast<T>(dbias);
    const double mul = static_cast<double>(scale[ch]) * inv_std;
    const int64_t count = l.n * l.s;
    if (training && count > 0) {
      // dx = dy·a + (x - mean)·b + c0 (the CPU's rearrangement).
      const auto m = static_cast<double>(count);
      prm.at(0, ch) = static_cast<double>(mean_in[ch]);
      prm.at(1, ch) = mul;
      prm.at(2, ch) = -mul * inv_std * dscale / m;
      prm.at(3, ch) = -mul * dbias / m;
      set_rounded(prm, rounded, 4, ch);
    } else {
      // dx = (dy - 0)·mul + 0 (the CPU's channel_affine with zero shift and add).
      prm.at(0, ch) = 0.0;
      prm.at(1, ch) = mul;
      prm.at(2, ch) = 0.0;
      set_rounded(prm, rounded, 3, ch);
    }
  }
}

// BatchNormGrad(dy, x, scale, reserve_space_1, reserve_space_2) → (dx, dscale, dbias).
template <typename T>
void batch_norm_grad(const KernelContext& k) {
  const NormPlan& plan = k.state<NormPlan>();
  const Layout& l = plan.l;
  if (l.c == 0) return;
  const cudaStream_t stream = context(k).stream;
  char* ws = workspace_base(k, plan.workspace);
  double* partial = plan.partial(ws);
  const Params prm{plan.params(ws), l.c};
  T* rounded = plan.rounded<T>(ws);
  const T* dy = k.in(0).data<T>();
  const T* x = k.in(1).data<T>();
  const T* mean = k.in(3).data<T>();
  const bool training = k.attr("is_training").as_bool();
  const double eps = k.attr("epsilon").as_double();
  channel_sums<T, kGradient>(l, x, dy, nullptr, mean, partial, stream);
  batch_norm_grad_kernel<T><<<blocks(l.c), kThreads, 0, stream>>>(
      l, l.parts(), partial, k.in(2).data<T>(), mean, k.in(4).data<T>(), eps, training, prm,
      rounded, k.out(1).data<T>(), k.out(2).data<T>());
  check_launch();
  if (training && l.n * l.s > 0) {
    bn_elementwise<T, true>(l, dy, x, rounded, k.out(0).data<T>(), stream);
  } else {
    bn_elementwise<T, false>(l, dy, nullptr, rounded, k.out(0).data<T>(), stream);
  }
}

// ---------------------------------------------------------------------------------------------

// The convolutions: Float32, Float64, Float16 and BFloat16.
template <typename T>
void add_conv_kernels(KernelRegistry& r) {
  constexpr DType dtype = dtype_of<T>();
  r.add("Conv2D", dtype, conv2d<T>).with_prepare(prepare_conv2d).writes_every_output_element();
  r.add("Conv2DBackpropInput", dtype, conv2d_backprop_input<T>)
      .with_prepare(prepare_conv2d_backprop_input)
      .writes_every_output_element();
  r.add("Conv2DBackpropFilter", dtype, conv2d_backprop_filter<T>)
      .with_prepare(prepare_conv2d_backprop_filter)
      .writes_every_output_element();
}

// The fused convolution, pooling and batch norm: Float32 and Float64 (the fuse pass makes
// Conv2DBiasAct of those alone).
template <typename T>
void add_kernels(KernelRegistry& r) {
  constexpr DType dtype = DTypeOf<T>::value;
  add_conv_kernels<T>(r);
  r.add("Conv2DBiasAct", dtype, conv2d_bias_act<T>)
      .with_prepare(prepare_conv2d_bias_act)
      .writes_every_output_element();
  r.add("MaxPool", dtype, max_pool<T>).with_prepare(prepare_pool<false, false>)
      .writes_every_output_element();
  r.add("MaxPoolGrad", dtype, max_pool_grad<T>).with_prepare(prepare_pool<true, true>)
      .writes_every_output_element();
  r.add("MaxPoolGradGrad", dtype, max_pool_grad_grad<T>).with_prepare(prepare_pool<false, false>)
      .writes_every_output_element();
  r.add("AvgPool", dtype, avg_pool<T>).with_prepare(prepare_pool<false, false>)
      .writes_every_output_element();
  r.add("AvgPoolGrad", dtype, avg_pool_grad<T>).with_prepare(prepare_pool<true, false>)
      .writes_every_output_element();
  r.add("BatchNorm", dtype, batch_norm<T>).with_prepare(prepare_batch_norm)
      .writes_every_output_element();
  r.add("BatchNormApply", dtype, batch_norm_apply<T>).with_prepare(prepare_batch_norm_apply)
      .writes_every_output_element();
  r.add("BatchNormGrad", dtype, batch_norm_grad<T>).with_prepare(prepare_batch_norm_grad)
      .writes_every_output_element();
}

}  // namespace

void register_dnn_kernels(KernelRegistry& r) {
  add_kernels<float>(r);
  add_kernels<double>(r);
  if (half_kernels_enabled()) {
    add_conv_kernels<__half>(r);
    add_conv_kernels<__nv_bfloat16>(r);
  }
}

}  // namespace loom::backend::cuda
