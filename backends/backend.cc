// The registry of backends and the device-generic tensor helpers.
#include "backends/backend.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <mutex>

#include "backends/gpu/cuda_backend.h"
#include "core/ir/error.h"

namespace loom::backend {

namespace {

struct Backends {
  std::mutex mu;
  std::array<Backend*, 2> by_device{};  // indexed by Device
};

Backends& backends() {
  static Backends b;
  return b;
}

}  // namespace

#ifndef LOOM_HAVE_CUDA
Backend* cuda_backend_or_null() { return nullptr; }
std::string cuda_unavailable_reason() {
  return "this build of loom has no CUDA backend (built with LOOM_CUDA=OFF or without the CUDA "
         "toolkit)";
}
#endif

Backend* find_backend(Device device) {
  if (device == Device::kCPU) return &cpu_backend();
  Backends& b = backends();
  {
    std::lock_guard<std::mutex> lock(b.mu);
    if (Backend* r = b.by_device[static_cast<std::size_t>(device)]) return r;
  }
  // The CUDA backend registers itself at its first use (where the build and the machine have it).
  if (device == Device::kCUDA) return cuda_backend_or_null();
  return nullptr;
}

Backend& get_backend(Device device) {
  if (Backend* b = find_backend(device)) return *b;
  const std::string why = device == Device::kCUDA ? cuda_unavailable_reason()
                                                   : "this build of loom has no such backend";
  throw ValueError(std::string(device_name(device)) + ": expected a backend for this device, got "
                   "none (" + why + ")");
}

void register_backend(Backend& backend) {
  Backends& b = backends();
  std::lock_guard<std::mutex> lock(b.mu);
  b.by_device[static_cast<std::size_t>(backend.device())] = &backend;
}

Tensor empty(Backend& backend, DType dtype, const Shape& shape) {
  const std::size_t bytes = static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype);
  return Tensor::view(backend.allocate(bytes), 0, dtype, shape);
}

Tensor to_device(const Tensor& t, Backend& backend) {
  if (!t.defined() || t.device() == backend.device()) return t;
  if (t.is_host()) {
    Tensor out = empty(backend, t.dtype(), t.shape());
    backend.copy_from_host(out.raw_data(), t.raw_data(), t.nbytes());
    return out;
  }
  return to_device(to_host(t), backend);
}

Tensor to_host(const Tensor& t) {
  if (!t.defined() || t.is_host()) return t;
  Tensor out(t.dtype(), t.shape());
  get_backend(t.device()).copy_to_host(out.raw_data(), t.raw_data(), t.nbytes());
  return out;
}

std::int64_t Backend::run_timed(const std::function<void()>& work) {
  const auto t0 = std::chrono::steady_clock::now();
  work();
  synchronize();
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                              t0).count();
}

bool reuse_or_allocate(std::shared_ptr<Storage>& slot, std::size_t bytes, Backend& backend) {
  if (slot && slot.use_count() == 1 && slot->nbytes() >= bytes) return false;
  slot = backend.allocate(bytes);
  return true;
}

std::vector<Tensor> BatchMover::operator()(Backend& backend, std::span<const Tensor> batch) {
  const bool all_host = std::all_of(batch.begin(), batch.end(),
                                    [](const Tensor& t) { return t.defined() && t.is_host(); });
  if (all_host && backend.device() != Device::kCPU) {
    if (backend_ != &backend) {
      backend_ = &backend;
      uploader_ = backend.make_uploader();
    }
    if (uploader_) return uploader_->upload(batch);
  }
  std::vector<Tensor> out;
  out.reserve(batch.size());
  for (const Tensor& t : batch) out.push_back(to_device(t, backend));
  return out;
}

Tensor clone_on_device(const Tensor& t) {
  if (!t.defined() || t.is_host()) return t.clone();
  Backend& b = get_backend(t.device());
  Tensor out = empty(b, t.dtype(), t.shape());
  b.copy(out.raw_data(), t.raw_data(), t.nbytes());
  return out;
}

namespace {

std::vector<TensorType> types_of(std::span<const Tensor> ts) {
  std::vector<TensorType> out;
  out.reserve(ts.size());
  for (const Tensor& t : ts) out.push_back({t.dtype(), t.shape()});
  return out;
}

}  // namespace

PreparedKernel::PreparedKernel(const KernelDef& def, const ir::Primitive& prim,
                               std::vector<TensorType> inputs, std::vector<TensorType> outputs,
                               Backend& backend, ExecutionContext* exec)
    : def_(&def), prim_(&prim), exec_(exec ? exec : &backend.context()) {
  if (def.prepare) {
    prepared_ = def.prepare(PrepareContext{prim, inputs, outputs, *exec_});
    if (prepared_.workspace_bytes > 0) workspace_ = backend.allocate(prepared_.workspace_bytes);
  }
}

void PreparedKernel::run(std::span<const Tensor> inputs, std::span<Tensor> outputs) const {
  KernelContext ctx{*prim_, inputs, outputs, *exec_, prepared_.state.get()};
  if (workspace_) {
    ctx.workspace = workspace_->data();
    ctx.workspace_bytes = prepared_.workspace_bytes;
  }
  def_->run(ctx);
}

void run_kernel(const KernelDef& def, const ir::Primitive& prim, std::span<const Tensor> inputs,
                std::span<Tensor> outputs, Backend& backend, ExecutionContext* exec) {
  if (!def.prepare) {  // nothing to plan: skip the types (an eager op's common case)
    def.run(KernelContext{prim, inputs, outputs, exec ? *exec : backend.context(), nullptr});
    return;
  }
  PreparedKernel(def, prim, types_of(inputs), types_of(std::span<const Tensor>(outputs)), backend,
                 exec)
      .run(inputs, outputs);
}

}  // namespace loom::backend
