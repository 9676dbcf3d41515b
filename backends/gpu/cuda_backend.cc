// The CUDA backend: device memory from CUDA's stream-ordered allocator (cudaMallocAsync on the
// backend's stream with the pool keeping what was freed, so the per-batch and per-output
// allocations between steps cost no cudaMalloc), copies and zero-fills queued on that stream,
// one execution context (stream, cuBLAS, cuBLASLt and cuDNN handles bound to it), and the CUDA
// kernel families.
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <sstream>
#include <string>

#include "backends/backend.h"
#include "backends/gpu/cuda.h"
#include "backends/gpu/cuda_backend.h"
#include "core/ir/error.h"
#include "core/random/random.h"

namespace loom::backend {
namespace cuda {

void fail(const char* what, const std::string& message, const char* file, int line) {
  std::string f = file;
  const std::size_t slash = f.find("backends/");
  if (slash != std::string::npos) f = f.substr(slash);
  throw InternalError("CUDA: " + std::string(what) + " failed: " + message + " (" + f + ":" +
                      std::to_string(line) + ")");
}

bool CudaContext::deterministic() const { return random::deterministic_mode(); }

namespace {

std::string version_text(int v, int major_div, int minor_div, int minor_mod) {
  return std::to_string(v / major_div) + "." + std::to_string((v / minor_div) % minor_mod);
}

// A step recorded as a CUDA graph, replayed on the backend's stream.
class Graph final : public RecordedWork {
 public:
  Graph(cudaGraphExec_t exec, cudaStream_t stream) : exec_(exec), stream_(stream) {}
  ~Graph() override { cudaGraphExecDestroy(exec_); }
  void replay() override { LOOM_CUDA_CHECK(cudaGraphLaunch(exec_, stream_)); }

 private:
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
};

// Batches copied through pinned host buffers on a copy stream, two slots taking turns
// (Backend::make_uploader). Slot s of upload n: the host waits for the slot's last copy out of
// its pinned buffer (upload n - 2: long done), the copy stream waits for `consumed` (the compute
// stream's work queued before upload n - 1, which includes batch n - 2's step), copies, and the
// compute stream waits for `copied`. The step of batch n - 1 runs meanwhile.
class CudaUploader final : public Uploader {
 public:
  CudaUploader(Backend& backend, cudaStream_t compute) : backend_(backend), compute_(compute) {
    LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
    for (Slot& s : slots_) {
      LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&s.copied, cudaEventDisableTiming));
      LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&s.consumed, cudaEventDisableTiming));
    }
    LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&allocated_, cudaEventDisableTiming));
  }
  ~CudaUploader() override {
    cudaStreamSynchronize(copy_);
    for (Slot& s : slots_) {
      if (s.pinned) cudaFreeHost(s.pinned);
      cudaEventDestroy(s.copied);
      cudaEventDestroy(s.consumed);
    }
    cudaEventDestroy(allocated_);
    cudaStreamDestroy(copy_);
  }

  std::vector<Tensor> upload(std::span<const Tensor> host) override {
    if (last_ >= 0) LOOM_CUDA_CHECK(cudaEventRecord(slots_[last_].consumed, compute_));
    Slot& s = slots_[next_];
    std::size_t total = 0;
    for (const Tensor& t : host) total += round256(t.nbytes());
    if (s.used) LOOM_CUDA_CHECK(cudaEventSynchronize(s.copied));
    if (s.pinned_bytes < total) {
      if (s.pinned) LOOM_CUDA_CHECK(cudaFreeHost(s.pinned));
      s.pinned = nullptr;
      s.pinned_bytes = 0;
      LOOM_CUDA_CHECK(cudaHostAlloc(&s.pinned, total, cudaHostAllocDefault));
      s.pinned_bytes = total;
    }
    if (s.used) LOOM_CUDA_CHECK(cudaStreamWaitEvent(copy_, s.consumed));
    s.device.resize(host.size());
    bool fresh = false;  // new memory from the compute stream's pool: the copy waits for it
    for (std::size_t i = 0; i < host.size(); ++i) {
      fresh |= reuse_or_allocate(s.device[i], host[i].nbytes(), backend_);
    }
    if (fresh) {
      LOOM_CUDA_CHECK(cudaEventRecord(allocated_, compute_));
      LOOM_CUDA_CHECK(cudaStreamWaitEvent(copy_, allocated_));
    }
    std::vector<Tensor> out;
    out.reserve(host.size());
    char* pinned = static_cast<char*>(s.pinned);
    for (std::size_t i = 0; i < host.size(); ++i) {
      const Tensor& t = host[i];
      std::memcpy(pinned, t.raw_data(), t.nbytes());
      if (t.nbytes()) {
        LOOM_CUDA_CHECK(cudaMemcpyAsync(s.device[i]->data(), pinned, t.nbytes(),
                                        cudaMemcpyHostToDevice, copy_));
      }
      out.push_back(Tensor::view(s.device[i], 0, t.dtype(), t.shape()));
      pinned += round256(t.nbytes());
    }
    LOOM_CUDA_CHECK(cudaEventRecord(s.copied, copy_));
    LOOM_CUDA_CHECK(cudaStreamWaitEvent(compute_, s.copied));
    s.used = true;
    last_ = next_;
    next_ ^= 1;
    return out;
  }

 private:
  static std::size_t round256(std::size_t n) { return (n + 255) / 256 * 256; }

  struct Slot {
    std::vector<std::shared_ptr<Storage>> device;
    void* pinned = nullptr;
    std::size_t pinned_bytes = 0;
    cudaEvent_t copied = nullptr;    // on the copy stream, after the slot's copies
    cudaEvent_t consumed = nullptr;  // on the compute stream, after the slot's batch was queued
    bool used = false;
  };
  Backend& backend_;
  cudaStream_t compute_;
  cudaStream_t copy_ = nullptr;
  cudaEvent_t allocated_ = nullptr;
  Slot slots_[2];
  int next_ = 0;
  int last_ = -1;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) {
    context_.device_index = device;
    LOOM_CUDA_CHECK(cudaSetDevice(device));
    LOOM_CUDA_CHECK(cudaGetDeviceProperties(&context_.props, device));
    LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&context_.stream, cudaStreamNonBlocking));
    LOOM_CUBLAS_CHECK(cublasCreate(&context_.cublas));
    LOOM_CUBLAS_CHECK(cublasSetStream(context_.cublas, context_.stream));
    // Float32 stays Float32 (no TF32): the figures and the CPU comparison are FP32.
    LOOM_CUBLAS_CHECK(cublasSetMathMode(context_.cublas, CUBLAS_PEDANTIC_MATH));
    LOOM_CUBLAS_CHECK(cublasLtCreate(&context_.cublas_lt));
    LOOM_CUDNN_CHECK(cudnnCreate(&context_.cudnn));
    LOOM_CUDNN_CHECK(cudnnSetStream(context_.cudnn, context_.stream));
    // Memory freed to the pool stays there (no release at each synchronization).
    cudaMemPool_t pool;
    LOOM_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
    std::uint64_t threshold = ~std::uint64_t{0};
    LOOM_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    cuda::register_elementwise_kernels(kernels_);
    cuda::register_reduce_kernels(kernels_);
    cuda::register_optimizer_kernels(kernels_);
    cuda::register_blas_kernels(kernels_);
    cuda::register_dnn_kernels(kernels_);
  }

  Device device() const override { return Device::kCUDA; }

  std::shared_ptr<Storage> allocate(std::size_t bytes) override {
    void* p = nullptr;
    const std::size_t rounded = bytes == 0 ? 256 : (bytes + 255) / 256 * 256;
    const cudaError_t e = cudaMallocAsync(&p, rounded, context_.stream);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clears the error
      throw std::bad_alloc();
    }
    LOOM_CUDA_CHECK(e);
    cudaStream_t stream = context_.stream;
    return std::make_shared<Storage>(p, bytes, Device::kCUDA, [stream](void* q) {
      // Stream-ordered: the memory returns to the pool after the queued work that uses it.
      cudaFreeAsync(q, stream);
    });
  }

  void copy_from_host(void* dst, const void* src, std::size_t bytes) override {
    if (bytes)
      LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, context_.stream));
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    if (!bytes) return;
    LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, context_.stream));
    LOOM_CUDA_CHECK(cudaStreamSynchronize(context_.stream));
  }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    if (bytes)
      LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, context_.stream));
  }
  void fill_zero(void* dst, std::size_t bytes) override {
    if (bytes) LOOM_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, context_.stream));
  }

  ExecutionContext& context() override { return context_; }

  std::unique_ptr<Uploader> make_uploader() override {
    return std::make_unique<CudaUploader>(*this, context_.stream);
  }

  std::unique_ptr<RecordedWork> record(const std::function<void()>& queue) override {
    static const bool off = [] {
      const char* v = std::getenv("LOOM_CUDA_GRAPHS");
      return v != nullptr && std::string(v) == "0";
    }();
    if (off) return nullptr;
    cudaStream_t stream = context_.stream;
    // Thread-local mode: another thread's unrelated CUDA calls neither break nor join it.
    if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    bool queued = true;
    try {
      queue();
    } catch (...) {
      queued = false;  // run again without recording, the error (if real) is reported then
    }
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
    cudaGetLastError();
    if (!queued || ended != cudaSuccess || graph == nullptr) {
      if (graph) cudaGraphDestroy(graph);
      return nullptr;
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    if (made != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return std::make_unique<Graph>(exec, stream);
  }

  double peak_fp32_gflops() const override {
    // SMs x fp32 lanes per SM x 2 (an FMA) x the boost clock. 128 lanes from Ampere's consumer
    // parts and Hopper on; 64 on sm_80 (A100) and earlier data-centre parts.
    int khz = 0;
    if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, context_.device_index) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    const cudaDeviceProp& p = context_.props;
    const int lanes = (p.major > 8 || (p.major == 8 && p.minor >= 6)) ? 128 : 64;
    return static_cast<double>(p.multiProcessorCount) * lanes * 2.0 * khz / 1e6;
  }

  std::int64_t memory_high_water() const override {
    cudaMemPool_t pool;
    std::uint64_t high = 0;
    if (cudaDeviceGetDefaultMemPool(&pool, context_.device_index) != cudaSuccess ||
        cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &high) != cudaSuccess) {
      cudaGetLastError();
      return -1;
    }
    return static_cast<std::int64_t>(high);
  }

  void reset_memory_high_water() override {
    cudaMemPool_t pool;
    std::uint64_t zero = 0;  // "the high-water mark becomes the current use"
    if (cudaDeviceGetDefaultMemPool(&pool, context_.device_index) != cudaSuccess ||
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero) != cudaSuccess) {
      cudaGetLastError();
    }
  }

  void synchronize() override { LOOM_CUDA_CHECK(cudaStreamSynchronize(context_.stream)); }

  std::int64_t run_timed(const std::function<void()>& work) override {
    if (!timing_[0]) {
      for (cudaEvent_t& e : timing_) LOOM_CUDA_CHECK(cudaEventCreate(&e));
    }
    LOOM_CUDA_CHECK(cudaEventRecord(timing_[0], context_.stream));
    work();
    LOOM_CUDA_CHECK(cudaEventRecord(timing_[1], context_.stream));
    LOOM_CUDA_CHECK(cudaEventSynchronize(timing_[1]));
    float ms = 0;
    LOOM_CUDA_CHECK(cudaEventElapsedTime(&ms, timing_[0], timing_[1]));
    return static_cast<std::int64_t>(static_cast<double>(ms) * 1e6);
  }

  std::string describe() const override {
    const cudaDeviceProp& p = context_.props;
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    std::ostringstream s;
    s.precision(1);
    s << std::fixed << "CUDA: device " << context_.device_index << " " << p.name << " (sm_"
      << p.major << p.minor << ", " << p.multiProcessorCount << " SMs, "
      << static_cast<double>(p.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0) << " GiB), driver "
      << version_text(driver, 1000, 10, 100) << ", runtime " << version_text(runtime, 1000, 10, 100)
      << ", cuBLAS " << cublasLtGetVersion() / 10000 << "." << (cublasLtGetVersion() / 100) % 100
      << "." << cublasLtGetVersion() % 100 << ", cuDNN " << cudnnGetVersion() / 10000 << "."
      << (cudnnGetVersion() / 100) % 100 << "." << cudnnGetVersion() % 100;
    return s.str();
  }

 private:
  CudaContext context_;
  cudaEvent_t timing_[2] = {nullptr, nullptr};  // run_timed's (made at its first use)
};

struct State {
  std::once_flag once;
  std::unique_ptr<CudaBackend> backend;
  std::string reason;
};

State& state() {
  static State s;
  return s;
}

int chosen_device(int count) {
  if (const char* d = std::getenv("LOOM_CUDA_DEVICE")) return std::atoi(d) % count;
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    if (const char* r = std::getenv(v)) return std::atoi(r) % count;
  }
  return 0;
}

}  // namespace
}  // namespace cuda

Backend* cuda_backend_or_null() {
  cuda::State& s = cuda::state();
  std::call_once(s.once, [&] {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
      s.reason = std::string("no CUDA device (cudaGetDeviceCount: ") +
                 (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices") + ")";
      cudaGetLastError();
      return;
    }
    try {
      s.backend = std::make_unique<cuda::CudaBackend>(cuda::chosen_device(count));
    } catch (const std::exception& ex) {
      s.reason = ex.what();
      return;
    }
    register_backend(*s.backend);
  });
  return s.backend.get();
}

std::string cuda_unavailable_reason() {
  cuda_backend_or_null();
  return cuda::state().reason;
}

}  // namespace loom::backend
