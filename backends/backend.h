/// \file
/// A backend: one device's memory, copies, execution context and kernels. The runtime plans and
/// runs a step through this interface without knowing which device it talks to; the CPU backend
/// (backends/cpu/) is always there, others (CUDA) register themselves when they are built.
///
///     Backend& b = get_backend(Device::kCPU);
///     std::shared_ptr<Storage> s = b.allocate(1024);      // freed when the last user lets go
///     b.copy_from_host(s->data(), host_data, 1024);
///     const KernelDef* k = b.kernels().find("ReLU", DType::kFloat32);
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/kernel.h"

namespace loom::backend {

/// Work queued on a backend's context, recorded once and replayed as a whole (a CUDA graph): the
/// same kernels on the same memory, one launch instead of hundreds.
class RecordedWork {
 public:
  virtual ~RecordedWork() = default;
  /// Runs the recorded work once more, as one launch on the same memory, ordered with the work
  /// queued on the backend's context().
  virtual void replay() = 0;
};

/// Batches on their way to a device (a training loop's inputs). upload() copies host tensors into
/// device buffers through pinned host memory on a copy stream, so that the copy of batch n + 1
/// overlaps the step that reads batch n; work queued on the backend's context() after upload()
/// returns waits for the copy on the device (the host does not). Two sets of buffers take turns: a
/// buffer is written again only when nothing holds its tensor any more (a holder, such as a
/// recorded step reading it at every replay, keeps it and the uploader takes new memory) and the
/// work queued before the next upload() has read it, so queue a batch's reads before uploading the
/// next batch. No allocation once the sizes stop changing.
class Uploader {
 public:
  virtual ~Uploader() = default;
  /// Host tensors in, the same tensors on the device out.
  virtual std::vector<Tensor> upload(std::span<const Tensor> host) = 0;
};

/// One device's backend: its memory, copies, execution context and kernels.
class Backend {
 public:
  virtual ~Backend() = default;

  /// The device this backend runs on.
  virtual Device device() const = 0;
  /// The device's name ("CPU", "CUDA").
  std::string_view name() const { return device_name(device()); }

  /// At least `bytes` bytes on this device, aligned to 64 bytes, released when the storage goes;
  /// throws std::bad_alloc (or the device's out-of-memory error) when none can be had. The
  /// contents are unspecified.
  virtual std::shared_ptr<Storage> allocate(std::size_t bytes) = 0;

  /// Copies between host memory and this backend's memory, and within the backend; fills with
  /// zero bytes. Ordered with the kernels launched on context() (a GPU backend queues them).
  ///@{
  virtual void copy_from_host(void* dst, const void* host_src, std::size_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, std::size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void fill_zero(void* dst, std::size_t bytes) = 0;
  ///@}

  /// What this backend's kernels receive (CPU: the thread pool).
  virtual ExecutionContext& context() = 0;
  /// Waits until everything queued on context() is done (nothing to wait for on the CPU).
  virtual void synchronize() {}

  /// Runs `work` (which queues on context()), waits for it, and returns its duration in
  /// nanoseconds as the device measured it: the CUDA backend's events around the work on its
  /// stream, the host's clock here (the observers' launch times, the profiler's).
  virtual std::int64_t run_timed(const std::function<void()>& work);

  /// Records what `queue` queues on context() without running any of it. Null where this
  /// backend cannot record (the CPU: nothing to gain), where recording is switched off
  /// (LOOM_CUDA_GRAPHS=0), or where `queue` did something that cannot be recorded (a
  /// synchronization, a host read): the caller then runs the work as usual, which also reports
  /// any real error the recording swallowed.
  virtual std::unique_ptr<RecordedWork> record(const std::function<void()>& queue) {
    return nullptr;
  }

  /// A new Uploader for a stream of batches; null where a plain copy is as good (the CPU: no copy
  /// at all).
  virtual std::unique_ptr<Uploader> make_uploader() { return nullptr; }

  /// This backend's kernels. Rooms that bring kernels of their own (parallel/ adds the
  /// communication kernels at init) add them through kernels_mutable() before compiling.
  const KernelRegistry& kernels() const { return kernels_; }
  /// This backend's kernels, for adding to (see kernels()).
  KernelRegistry& kernels_mutable() { return kernels_; }
  /// The kernel of (op, dtype), or null when this backend has none.
  const KernelDef* find_kernel(std::string_view op, DType dtype) const {
    return kernels_.find(op, dtype);
  }

  /// The most bytes of this device's memory in use at once so far (allocations alive); -1 where
  /// the backend does not keep the figure (the CPU: the process's peak RSS says it).
  virtual std::int64_t memory_high_water() const { return -1; }
  /// Starts the high-water mark again from the memory in use now (PyTorch's
  /// reset_peak_memory_stats: a benchmark's figure after its warm-up and compile-time searches).
  virtual void reset_memory_high_water() {}

  /// The device's fp32 peak in GFLOP/s from its specification (the profiler's "% of peak"); 0
  /// where the backend gives none (the CPU's is measured: backends/cpu/peak.h).
  virtual double peak_fp32_gflops() const { return 0; }

  /// One line for `loom info` (the device, its memory, library versions).
  virtual std::string describe() const = 0;

 protected:
  KernelRegistry kernels_;  ///< this backend's kernels (kernels(), kernels_mutable())
};

/// The host backend: 64-byte aligned allocations, memcpy copies, the global thread pool.
Backend& cpu_backend();

/// The backend of `device` when this build and machine have it, else null.
Backend* find_backend(Device device);
/// The backend of `device`; throws ValueError naming the device and the reason when there is
/// none ("this build of loom has no CUDA backend ...", or the CUDA backend's own reason).
Backend& get_backend(Device device);
/// Makes `backend` findable (a backend library calls it once, when first used). Replaces an
/// earlier registration of the same device.
void register_backend(Backend& backend);

/// A new tensor on `backend`'s device (contents unspecified).
Tensor empty(Backend& backend, DType dtype, const Shape& shape);
/// `t` on `backend`'s device: t itself when it is already there, else a copy.
Tensor to_device(const Tensor& t, Backend& backend);
/// `t` in host memory: t itself for a host tensor, else a copy made by its device's backend.
Tensor to_host(const Tensor& t);
/// A copy of `t` in new memory of its own device.
Tensor clone_on_device(const Tensor& t);

/// An uploader's rule for one of its buffers: `slot` stays when it is at least `bytes` long and
/// nothing but the uploader holds it; otherwise it becomes a new allocation on `backend` (true).
bool reuse_or_allocate(std::shared_ptr<Storage>& slot, std::size_t bytes, Backend& backend);

/// A training loop's batches on their device: through the backend's Uploader where it has one
/// (made at the first batch, again when the device changes), else by to_device. Tensors already
/// on the device pass through.
class BatchMover {
 public:
  /// `batch` on `backend`'s device: through the Uploader when every tensor is on the host and
  /// `backend` is not the CPU's and has one, else tensor by tensor with to_device.
  std::vector<Tensor> operator()(Backend& backend, std::span<const Tensor> batch);

 private:
  Backend* backend_ = nullptr;
  std::unique_ptr<Uploader> uploader_;
};

/// A kernel prepared once for fixed input and output types (prepare run, workspace allocated on
/// the backend's device), then run any number of times: eager execution, benchmarks, tests.
/// `exec` replaces the backend's context (a test's CPU context with a pool of its own).
class PreparedKernel {
 public:
  /// Runs `def`'s prepare step (if any) for `prim` with these input and output types and
  /// allocates its workspace on `backend`; `exec` null: the backend's context(). `def` and `prim`
  /// must outlive this object.
  PreparedKernel(const KernelDef& def, const ir::Primitive& prim,
                 std::vector<TensorType> inputs, std::vector<TensorType> outputs,
                 Backend& backend, ExecutionContext* exec = nullptr);
  /// The tensors must have the types given at construction.
  void run(std::span<const Tensor> inputs, std::span<Tensor> outputs) const;

 private:
  const KernelDef* def_;
  const ir::Primitive* prim_;
  ExecutionContext* exec_;
  Prepared prepared_;
  std::shared_ptr<Storage> workspace_;
};

/// Prepares and runs one kernel once (PreparedKernel).
void run_kernel(const KernelDef& def, const ir::Primitive& prim, std::span<const Tensor> inputs,
                std::span<Tensor> outputs, Backend& backend, ExecutionContext* exec = nullptr);

}  // namespace loom::backend
