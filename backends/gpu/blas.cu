// CUDA kernels of the matrix-product family (Float32 and Float64; MatMul and BatchMatMul also in
// Float16 and BFloat16, on the tensor cores): MatMul, BatchMatMul and the fused MatMulBiasAct,
// on cuBLASLt.
//
// Tensors are row-major and cuBLASLt is column-major: a row-major (r, c) matrix is, read
// column-major, its own transpose, so C = op(A)·op(B) is computed as Cᵀ = op(B)ᵀ·op(A)ᵀ with B's
// data as cuBLASLt's first operand and A's as its second. prepare() describes the product and asks
// cublasLtMatmulAlgoGetHeuristic for an algorithm once per node, twice: one assuming 16-byte
// aligned pointers, one assuming only element alignment (tensors that are views at odd offsets);
// a launch takes the first when its pointers allow. The aligned one is timed, as the
// convolutions' are (LOOM_CUBLASLT_SEARCH; not in deterministic mode): the heuristic's first 8
// candidates run on temporary buffers and the fastest wins, once per product shape in the
// process. The workspace is the larger of the two
// algorithms' needs (within kWorkspaceBudget), planned with the node; the descriptors are rebuilt
// on the stack at each launch (cublasLt*Init: no allocation, no state shared between launches).
// Float32 runs with CUBLAS_COMPUTE_32F (strict FP32, no TF32), Float64 with CUBLAS_COMPUTE_64F,
// Float16 and BFloat16 (mixed precision: the amp levels keep these products in the low dtype)
// with CUBLAS_COMPUTE_32F and Float32 scaling factors: 16-bit operands on the tensor cores,
// products accumulated in Float32 and each result rounded once to the 16-bit dtype, the
// numerics of the CPU's Float32 fallback for these dtypes up to the order of the sums.
// cuBLASLt's split-K reductions are ordered (no atomics), so a plan's results are bitwise
// repeatable on one device.
//
// BatchMatMul collapses the broadcast batch dims into runs of uniform strides: the longest run is
// one strided-batched call (stride 0 for a broadcast operand), the other runs are looped over on
// the host. A right operand shared by every batch with a row-major left operand (a Dense layer on
// a batch of sequences) folds into one taller GEMM instead.
//
// MatMulBiasAct adds the bias in the GEMM's epilogue (CUBLASLT_EPILOGUE_BIAS / RELU_BIAS: the
// bias vector runs along Cᵀ's rows, which are C's columns, as BiasAdd's does). cuBLASLt has no
// ReLU6 epilogue: ReLU6 takes the bias epilogue and then loom's activation kernel; where the
// heuristic offers no algorithm with the epilogue, a plain GEMM is followed by loom's bias and
// activation kernel (the CPU's arithmetic: v < 0 ? 0 : v, and ReLU6's clamp).
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backends/gpu/cuda.h"
#include "backends/gpu/half.cuh"
#include "core/ir/error.h"

namespace loom::backend::cuda {

namespace {

using std::int64_t;

// cuBLASLt's workspace of one product at most (the heuristic picks within it).
constexpr std::size_t kWorkspaceBudget = std::size_t{32} << 20;
// The planned workspace is 64-byte aligned; it is rounded up to this at launch.
constexpr std::size_t kWorkspaceAlign = 256;
// The pointer alignment the fast algorithm of a plan assumes.
constexpr std::uintptr_t kFastAlignment = 16;

enum class Act { kNone, kReLU, kReLU6 };

Act act_of(const ir::Primitive& prim) {
  const std::string& act = prim.attr("act").as_string();
  if (act == "relu") return Act::kReLU;
  if (act == "relu6") return Act::kReLU6;
  return Act::kNone;
}

// One batch dim looped over on the host: its extent and each operand's stride in elements.
struct LoopDim {
  int64_t size, a, b, c;
};

// How one node's product runs, fixed at prepare.
struct GemmPlan {
  DType dtype = DType::kFloat32;
  bool ta = false, tb = false;
  // The row-major product (m, k)·(k, n) per matrix; A is stored (m, k), or (k, m) with ta, and B
  // (k, n), or (n, k) with tb.
  int64_t m = 0, n = 0, k = 0;
  // One strided-batched cuBLASLt call covers `batch` matrices at these element strides ...
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
  // ... and the host loops over these dims (outermost first), `calls` calls in all.
  std::vector<LoopDim> loops;
  int64_t calls = 1;
  bool empty = false;   // no output element
  bool zero_k = false;  // k == 0: the product is zero (cuBLASLt is not asked)
  // MatMulBiasAct: the epilogue cuBLASLt applies, and what loom's kernel adds afterwards.
  bool has_bias = false;
  Act act = Act::kNone;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  bool kernel_bias = false;
  Act kernel_act = Act::kNone;
  // The algorithms: `fast` for 16-byte aligned pointers (when has_fast), `any` otherwise (when
  // has_any: cuBLASLt may have none for 16-bit operands aligned to their element only).
  cublasLtMatmulAlgo_t fast{}, any{};
  bool has_fast = false, has_any = false;
  std::size_t fast_bytes = 0, any_bytes = 0;
};

cudaDataType_t data_type(DType d) {
  switch (d) {
    case DType::kFloat64: return CUDA_R_64F;
    case DType::kFloat16: return CUDA_R_16F;
    case DType::kBFloat16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}
cublasComputeType_t compute_type(DType d) {
  return d == DType::kFloat64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
}
// The scaling factors' (alpha, beta) type: Float32 but for Float64 products.
cudaDataType_t scale_type(DType d) { return d == DType::kFloat64 ? CUDA_R_64F : CUDA_R_32F; }

// A plan's cuBLASLt descriptors, initialized in place (no allocation).
struct Descs {
  cublasLtMatmulDescOpaque_t op;
  cublasLtMatrixLayoutOpaque_t first;   // cuBLASLt's A: B's data
  cublasLtMatrixLayoutOpaque_t second;  // cuBLASLt's B: A's data
  cublasLtMatrixLayoutOpaque_t out;     // C and D: C's data

  Descs(const GemmPlan& p, const void* bias) {
    const cudaDataType_t type = data_type(p.dtype);
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescInit(&op, compute_type(p.dtype), scale_type(p.dtype)));
    const cublasOperation_t op_first = p.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_second = p.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(&op, CUBLASLT_MATMUL_DESC_TRANSA, &op_first,
                                                     sizeof op_first));
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(&op, CUBLASLT_MATMUL_DESC_TRANSB, &op_second,
                                                     sizeof op_second));
    if (p.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
      LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(&op, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                       &p.epilogue, sizeof p.epilogue));
      LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(&op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                       &bias, sizeof bias));
    }
    // Row-major (r, c) with leading dimension c is column-major (c, r).
    const int64_t b_rows = p.tb ? p.n : p.k, b_cols = p.tb ? p.k : p.n;
    const int64_t a_rows = p.ta ? p.k : p.m, a_cols = p.ta ? p.m : p.k;
    layout(first, type, b_cols, b_rows, p.stride_b, p.batch);
    layout(second, type, a_cols, a_rows, p.stride_a, p.batch);
    layout(out, type, p.n, p.m, p.stride_c, p.batch);
  }

  static void layout(cublasLtMatrixLayoutOpaque_t& l, cudaDataType_t type, int64_t rows,
                     int64_t cols, int64_t stride, int64_t batch) {
    LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutInit(&l, type, static_cast<std::uint64_t>(rows),
                                               static_cast<std::uint64_t>(cols),
                                               std::max<int64_t>(1, rows)));
    if (batch > 1) {
      const auto count = static_cast<std::int32_t>(batch);
      LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(&l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                         &count, sizeof count));
      LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
          &l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
    }
  }
};

// LOOM_CUBLASLT_SEARCH (timed_search_on): whether the aligned algorithm's candidates are timed.
bool search_on(bool deterministic) {
  static const char* const setting = std::getenv("LOOM_CUBLASLT_SEARCH");
  return timed_search_on(setting, deterministic);
}

// A product as cuBLASLt sees it, and the device: the search cache's key (the aligned algorithm
// only is timed).
using SearchKey = std::array<int64_t, 12>;
SearchKey search_key(int device, const GemmPlan& p) {
  return {device, static_cast<int64_t>(p.dtype), p.ta ? 1 : 0, p.tb ? 1 : 0, p.m, p.n, p.k,
          p.batch, p.stride_a, p.stride_b, p.stride_c, static_cast<int64_t>(p.epilogue)};
}

struct GemmSearchCache {
  std::mutex mutex;
  std::map<SearchKey, std::pair<cublasLtMatmulAlgo_t, std::size_t>> results;
};
GemmSearchCache& gemm_search_cache() {
  static GemmSearchCache cache;
  return cache;
}

// The elements one operand of a strided batch spans.
std::size_t span_elements(int64_t matrix, int64_t stride, int64_t batch) {
  return static_cast<std::size_t>(std::max<int64_t>(1, matrix + stride * (batch - 1)));
}

// Times the heuristic's candidates for 16-byte aligned pointers on temporary buffers of the
// plan's sizes (zeros; a warm-up launch, then 3 launches between two events, on the backend's
// stream) and keeps the fastest: for LeNet's small products cuBLASLt's first candidate often
// splits k and adds a reduction launch that a plain kernel does not need. false, choosing
// nothing, where a buffer cannot be had or no candidate ran.
bool time_candidates(const CudaContext& ctx, const GemmPlan& p,
                     const cublasLtMatmulHeuristicResult_t* results, int returned,
                     cublasLtMatmulAlgo_t& algo, std::size_t& bytes) {
  const SearchKey key = search_key(ctx.device_index, p);
  {
    GemmSearchCache& cache = gemm_search_cache();
    std::lock_guard<std::mutex> lock(cache.mutex);
    const auto it = cache.results.find(key);
    if (it != cache.results.end()) {
      algo = it->second.first;
      bytes = it->second.second;
      return true;
    }
  }
  const std::size_t elem = dtype_size(p.dtype);
  std::size_t ws_bytes = 0;
  for (int i = 0; i < returned; ++i) ws_bytes = std::max(ws_bytes, results[i].workspaceSize);
  int best = -1;
  float best_ms = 0;
  {
    const DeviceScope device(ctx.device_index);
    if (!device.ok()) return false;
    SearchBuffers buffers(ctx.stream);  // freed, after a synchronization, at the block's end
    const std::size_t a_bytes = span_elements(p.m * p.k, p.stride_a, p.batch) * elem;
    const std::size_t b_bytes = span_elements(p.k * p.n, p.stride_b, p.batch) * elem;
    const std::size_t c_bytes = span_elements(p.m * p.n, p.stride_c, p.batch) * elem;
    void* a = buffers.get(a_bytes);
    void* b = buffers.get(b_bytes);
    void* c = buffers.get(c_bytes);
    void* bias = buffers.get(static_cast<std::size_t>(p.n) * elem);
    void* ws = ws_bytes == 0 ? nullptr : buffers.get(ws_bytes);
    if (a == nullptr || b == nullptr || c == nullptr || bias == nullptr ||
        (ws_bytes != 0 && ws == nullptr)) {
      return false;
    }
    cudaEvent_t start = nullptr, stop = nullptr;
    if (cudaMemsetAsync(a, 0, a_bytes, ctx.stream) != cudaSuccess ||
        cudaMemsetAsync(b, 0, b_bytes, ctx.stream) != cudaSuccess ||
        cudaMemsetAsync(bias, 0, static_cast<std::size_t>(p.n) * elem, ctx.stream) !=
            cudaSuccess ||
        cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&stop) != cudaSuccess) {
      cudaGetLastError();
      if (start != nullptr) cudaEventDestroy(start);
      return false;
    }
    Descs d(p, bias);
    const double one = 1, zero = 0;
    const float one_f = 1, zero_f = 0;
    const void* alpha = p.dtype == DType::kFloat64 ? static_cast<const void*>(&one) : &one_f;
    const void* beta = p.dtype == DType::kFloat64 ? static_cast<const void*>(&zero) : &zero_f;
    auto launch = [&](const cublasLtMatmulAlgo_t& candidate) {
      return cublasLtMatmul(ctx.cublas_lt, &d.op, alpha, b, &d.first, a, &d.second, beta, c,
                            &d.out, c, &d.out, &candidate, ws, ws_bytes, ctx.stream);
    };
    constexpr int kRuns = 3;
    for (int i = 0; i < returned; ++i) {
      if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
      if (launch(results[i].algo) != CUBLAS_STATUS_SUCCESS) continue;  // the warm-up
      cudaEventRecord(start, ctx.stream);
      bool ran = true;
      for (int r = 0; r < kRuns && ran; ++r) ran = launch(results[i].algo) == CUBLAS_STATUS_SUCCESS;
      cudaEventRecord(stop, ctx.stream);
      float ms = 0;
      if (!ran || cudaEventSynchronize(stop) != cudaSuccess ||
          cudaEventElapsedTime(&ms, start, stop) != cudaSuccess) {
        cudaGetLastError();
        continue;
      }
      if (best < 0 || ms < best_ms) {
        best = i;
        best_ms = ms;
      }
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaGetLastError();  // a failed candidate leaves no error behind for a later launch check
  }
  if (best < 0) return false;
  algo = results[best].algo;
  bytes = results[best].workspaceSize;
  GemmSearchCache& cache = gemm_search_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  const auto& kept = cache.results.emplace(key, std::make_pair(algo, bytes)).first->second;
  algo = kept.first;  // a concurrent search's result stays
  bytes = kept.second;
  return true;
}

// The algorithm for the plan's descriptors when every pointer is aligned to `alignment` bytes:
// the fastest of the heuristic's candidates by time_candidates where `timed`, else its first;
// false when cuBLASLt offers none. The bias pointer stands in as `alignment` itself: the
// heuristic reads only its alignment, never the memory.
bool find_algorithm(const CudaContext& ctx, const GemmPlan& p, std::uintptr_t alignment,
                    bool timed, cublasLtMatmulAlgo_t& algo, std::size_t& bytes) {
  const cublasLtHandle_t handle = ctx.cublas_lt;
  Descs d(p, reinterpret_cast<const void*>(alignment));
  cublasLtMatmulPreferenceOpaque_t pref;
  LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceInit(&pref));
  const std::uint64_t budget = kWorkspaceBudget;
  LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      &pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &budget, sizeof budget));
  const auto align = static_cast<std::uint32_t>(alignment);
  for (const auto attr :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(&pref, attr, &align, sizeof align));
  }
  constexpr int kCandidates = 8;
  cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
  int returned = 0;
  const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(handle, &d.op, &d.first, &d.second,
                                                          &d.out, &d.out, &pref,
                                                          timed ? kCandidates : 1, results,
                                                          &returned);
  if (s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_INVALID_VALUE || returned == 0 ||
      results[0].state != CUBLAS_STATUS_SUCCESS) {
    return false;
  }
  LOOM_CUBLAS_CHECK(s);
  if (timed && returned > 1 && time_candidates(ctx, p, results, returned, algo, bytes)) {
    return true;
  }
  algo = results[0].algo;
  bytes = results[0].workspaceSize;
  return true;
}

// Chooses both algorithms (the aligned one timed, LOOM_CUBLASLT_SEARCH); false when cuBLASLt has
// neither.
bool choose_algorithms(const CudaContext& ctx, GemmPlan& p) {
  p.has_any = find_algorithm(ctx, p, dtype_size(p.dtype), false, p.any, p.any_bytes);
  p.has_fast = find_algorithm(ctx, p, kFastAlignment, search_on(ctx.deterministic()), p.fast,
                              p.fast_bytes);
  if (!p.has_any) p.any_bytes = 0;
  return p.has_any || p.has_fast;
}

std::string product_text(const GemmPlan& p) {
  std::string s = "(";
  s += std::to_string(p.m);
  s += ", ";
  s += std::to_string(p.k);
  s += ")·(";
  s += std::to_string(p.k);
  s += ", ";
  s += std::to_string(p.n);
  s += ") x ";
  s += std::to_string(p.batch);
  s += " ";
  s += dtype_name(p.dtype);
  return s;
}

// Fills in the algorithms of a plan (nothing to choose for an empty or k = 0 product). A batched
// plan that cuBLASLt declines runs as single products looped on the host; MatMulBiasAct's
// epilogue, when declined, becomes loom's bias kernel.
Prepared finish(const PrepareContext& c, std::shared_ptr<GemmPlan> p) {
  if (p->empty || p->zero_k) return {std::move(p), 0};
  const CudaContext& ctx = context(c);
  bool ok = choose_algorithms(ctx, *p);
  if (!ok && p->epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    p->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    p->kernel_bias = true;
    p->kernel_act = p->act;
    ok = choose_algorithms(ctx, *p);
  }
  if (!ok && p->batch > 1) {
    p->loops.push_back({p->batch, p->stride_a, p->stride_b, p->stride_c});
    p->calls *= p->batch;
    p->batch = 1;
    p->stride_a = p->stride_b = p->stride_c = 0;
    ok = choose_algorithms(ctx, *p);
  }
  if (!ok) {
    throw InternalError(c.prim.name() + ": cuBLASLt offers no algorithm for " + product_text(*p));
  }
  const std::size_t need = std::max(p->any_bytes, p->has_fast ? p->fast_bytes : 0);
  return {std::move(p), need == 0 ? 0 : need + kWorkspaceAlign};
}

std::shared_ptr<GemmPlan> matrix_plan(const PrepareContext& c) {
  auto p = std::make_shared<GemmPlan>();
  const Shape& a = c.inputs[0].shape;
  const Shape& out = c.outputs[0].shape;
  p->dtype = c.inputs[0].dtype;
  p->ta = c.attr("transpose_a").as_bool();
  p->tb = c.attr("transpose_b").as_bool();
  p->m = out[0];
  p->n = out[1];
  p->k = p->ta ? a[0] : a[1];
  p->empty = p->m == 0 || p->n == 0;
  p->zero_k = p->k == 0;
  return p;
}

Prepared prepare_matmul(const PrepareContext& c) { return finish(c, matrix_plan(c)); }

Prepared prepare_matmul_bias_act(const PrepareContext& c) {
  std::shared_ptr<GemmPlan> p = matrix_plan(c);
  p->has_bias = true;
  p->act = act_of(c.prim);
  p->epilogue = p->act == Act::kReLU ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  p->kernel_act = p->act == Act::kReLU6 ? Act::kReLU6 : Act::kNone;
  return finish(c, std::move(p));
}

// Per batch dim of the output, the element stride of an operand of shape `operand` whose batch
// dims broadcast to `out_batch` (0 along broadcast dims), as the CPU's BatchOffsets.
std::vector<int64_t> batch_strides(const Shape& operand, const Shape& out_batch) {
  const std::size_t rank = operand.size();
  const std::size_t lead = out_batch.size() - (rank - 2);
  std::vector<int64_t> strides(out_batch.size(), 0);
  int64_t stride = operand[rank - 2] * operand[rank - 1];
  for (std::size_t i = rank - 2; i-- > 0;) {
    if (operand[i] != 1) strides[i + lead] = stride;
    stride *= operand[i];
  }
  return strides;
}

Prepared prepare_batch_matmul(const PrepareContext& c) {
  auto p = std::make_shared<GemmPlan>();
  const Shape& a = c.inputs[0].shape;
  const Shape& b = c.inputs[1].shape;
  const Shape& out = c.outputs[0].shape;
  p->dtype = c.inputs[0].dtype;
  p->ta = c.attr("transpose_a").as_bool();
  p->tb = c.attr("transpose_b").as_bool();
  p->m = out[out.size() - 2];
  p->n = out[out.size() - 1];
  p->k = p->ta ? a[a.size() - 2] : a[a.size() - 1];
  const Shape out_batch(out.begin(), out.end() - 2);
  p->empty = p->m == 0 || p->n == 0 || shape_numel(out_batch) == 0;
  p->zero_k = p->k == 0;
  if (p->empty || p->zero_k) return {std::move(p), 0};

  // The batch dims with their strides (size-1 dims dropped), merged from the innermost outwards
  // wherever every operand's stride continues the inner run's.
  const std::vector<int64_t> sa = batch_strides(a, out_batch);
  const std::vector<int64_t> sb = batch_strides(b, out_batch);
  std::vector<LoopDim> runs;  // innermost first
  int64_t sc = p->m * p->n;
  for (std::size_t i = out_batch.size(); i-- > 0;) {
    const LoopDim d{out_batch[i], sa[i], sb[i], sc};
    sc *= out_batch[i];
    if (d.size == 1) continue;
    if (!runs.empty()) {
      LoopDim& r = runs.back();
      if (d.a == r.a * r.size && d.b == r.b * r.size && d.c == r.c * r.size) {
        r.size *= d.size;
        continue;
      }
    }
    runs.push_back(d);
  }
  // The longest run is cuBLASLt's batch, the others are looped over.
  std::size_t longest = runs.size();
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (runs[i].size <= std::numeric_limits<std::int32_t>::max() &&
        (longest == runs.size() || runs[i].size > runs[longest].size)) {
      longest = i;
    }
  }
  for (std::size_t i = runs.size(); i-- > 0;) {
    if (i == longest) continue;
    p->loops.push_back(runs[i]);
    p->calls *= runs[i].size;
  }
  if (longest < runs.size()) {
    const LoopDim& r = runs[longest];
    p->batch = r.size;
    p->stride_a = r.a;
    p->stride_b = r.b;
    p->stride_c = r.c;
    // B shared by every matrix of a row-major A whose matrices follow each other: one GEMM with
    // batch·m rows.
    if (p->loops.empty() && r.b == 0 && !p->ta && r.a == p->m * p->k && r.c == p->m * p->n) {
      p->m *= p->batch;
      p->batch = 1;
      p->stride_a = p->stride_b = p->stride_c = 0;
    }
  }
  return finish(c, std::move(p));
}

// y[i] = act(y[i] + bias[i % n]) (the bias only with kBias), with the CPU's comparisons.
template <typename T, bool kBias>
__global__ void bias_act_kernel(T* y, const T* bias, int64_t total, int64_t n, Act act) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += step) {
    T v = y[i];
    if constexpr (kBias) v = v + bias[i % n];
    if (act == Act::kReLU) {
      v = v < T(0) ? T(0) : v;
    } else if (act == Act::kReLU6) {
      v = v < T(0) ? T(0) : (v > T(6) ? T(6) : v);
    }
    y[i] = v;
  }
}

bool aligned(const void* p, std::uintptr_t alignment) {
  return reinterpret_cast<std::uintptr_t>(p) % alignment == 0;
}

template <typename T>
void run_plan(const KernelContext& k, const GemmPlan& p, const T* bias) {
  if (p.empty) return;
  const CudaContext& ctx = context(k);
  const T* a = elements<T>(k.in(0));
  const T* b = elements<T>(k.in(1));
  T* c = mutable_elements<T>(k.out(0));
  const int64_t total = k.out(0).numel();
  if (p.zero_k) {
    LOOM_CUDA_CHECK(cudaMemsetAsync(c, 0, k.out(0).nbytes(), ctx.stream));
  } else {
    void* workspace = nullptr;
    std::size_t workspace_bytes = 0;
    if (k.workspace != nullptr && k.workspace_bytes > kWorkspaceAlign) {
      const auto base = reinterpret_cast<std::uintptr_t>(k.workspace);
      const std::uintptr_t at = (base + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
      workspace = reinterpret_cast<void*>(at);
      workspace_bytes = k.workspace_bytes - (at - base);
    }
    Descs d(p, bias);
    // The scaling factors, in the scale type (Float32 for the 16-bit dtypes).
    const ComputeOf<T> alpha = 1, beta = 0;
    for (int64_t call = 0; call < p.calls; ++call) {
      int64_t oa = 0, ob = 0, oc = 0;
      int64_t rest = call;
      for (std::size_t i = p.loops.size(); i-- > 0;) {
        const LoopDim& l = p.loops[i];
        const int64_t idx = rest % l.size;
        rest /= l.size;
        oa += idx * l.a;
        ob += idx * l.b;
        oc += idx * l.c;
      }
      const T* pa = a + oa;
      const T* pb = b + ob;
      T* pc = c + oc;
      const bool fast = p.has_fast && aligned(pa, kFastAlignment) &&
                        aligned(pb, kFastAlignment) && aligned(pc, kFastAlignment) &&
                        (p.epilogue == CUBLASLT_EPILOGUE_DEFAULT || aligned(bias, kFastAlignment));
      if (!fast && !p.has_any) {
        throw InternalError(k.prim.name() + ": cuBLASLt offers no algorithm for operands not "
                            "aligned to 16 bytes: " + product_text(p));
      }
      const std::size_t need = fast ? p.fast_bytes : p.any_bytes;
      if (need > workspace_bytes) {
        throw InternalError(k.prim.name() + ": expected a workspace of " + std::to_string(need) +
                            " bytes, got " + std::to_string(workspace_bytes));
      }
      LOOM_CUBLAS_CHECK(cublasLtMatmul(ctx.cublas_lt, &d.op, &alpha, pb, &d.first, pa, &d.second,
                                       &beta, pc, &d.out, pc, &d.out, fast ? &p.fast : &p.any,
                                       workspace, workspace_bytes, ctx.stream));
    }
  }
  // What cuBLASLt did not apply: the bias and activation of MatMulBiasAct (Float32 and Float64
  // only: MatMul and BatchMatMul alone have 16-bit kernels).
  if constexpr (!kHalfStorage<T>) {
    const bool add_bias = p.has_bias && (p.zero_k || p.kernel_bias);
    const Act act = p.zero_k ? p.act : p.kernel_act;
    if (!add_bias && act == Act::kNone) return;
    if (add_bias) {
      bias_act_kernel<T, true>
          <<<blocks(total), kThreads, 0, ctx.stream>>>(c, bias, total, p.n, act);
    } else {
      bias_act_kernel<T, false>
          <<<blocks(total), kThreads, 0, ctx.stream>>>(c, bias, total, p.n, act);
    }
    LOOM_CUDA_CHECK(cudaGetLastError());
  }
}

template <typename T>
void matmul(const KernelContext& k) {
  run_plan<T>(k, k.state<GemmPlan>(), nullptr);
}

template <typename T>
void matmul_bias_act(const KernelContext& k) {
  run_plan<T>(k, k.state<GemmPlan>(), elements<T>(k.in(2)));
}

template <typename T>
void add_kernels(KernelRegistry& r) {
  constexpr DType dtype = dtype_of<T>();
  // As the CPU's: MatMul and MatMulBiasAct declare that they write every output element,
  // BatchMatMul does not (it does, but declares what the CPU kernel declares).
  r.add("MatMul", dtype, matmul<T>).with_prepare(prepare_matmul).writes_every_output_element();
  r.add("BatchMatMul", dtype, matmul<T>).with_prepare(prepare_batch_matmul);
  if constexpr (!kHalfStorage<T>) {  // the fuse pass makes MatMulBiasAct of Float32 / Float64
    r.add("MatMulBiasAct", dtype, matmul_bias_act<T>)
        .with_prepare(prepare_matmul_bias_act)
        .writes_every_output_element();
  }
}

}  // namespace

void register_blas_kernels(KernelRegistry& r) {
  add_kernels<float>(r);
  add_kernels<double>(r);
  if (half_kernels_enabled()) {
    add_kernels<__half>(r);
    add_kernels<__nv_bfloat16>(r);
  }
}

}  // namespace loom::backend::cuda
