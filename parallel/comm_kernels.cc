// The kernels of the communication ops (ops/comm_ops.cc), registered into the kernel registries
// by parallel/ (backends/ does not depend on MPI): the CPU's at parallel::init(), a device's
// host-staged ones when data parallelism is set up on it (setup_data_parallel).
#include <cstring>
#include <vector>

#include "backends/backend.h"
#include "backends/kernel.h"
#include "parallel/parallel.h"

namespace loom::parallel {

namespace {

void all_reduce_kernel(const backend::KernelContext& k) {
  Tensor& out = k.out(0);
  std::memcpy(out.raw_data(), k.in(0).raw_data(), out.nbytes());
  world().all_reduce(out, k.attr("op").as_string() == "mean", k.attr("deterministic").as_bool());
}

void start_kernel(const backend::KernelContext& k) {
  const std::size_t first = k.attr("chained").as_bool() ? 1 : 0;
  const std::int64_t id =
      world().start(k.inputs.subspan(first), k.attr("op").as_string() == "mean",
                    k.attr("deterministic").as_bool());
  k.out(0).data<std::int64_t>()[0] = id;
}

void wait_kernel(const backend::KernelContext& k) {
  world().wait(k.in(0).data<std::int64_t>()[0], k.outputs);
}

// A collective's start runs as soon as its gradients are ready and its wait as late as it can, so
// the communication overlaps the rest of the backward pass (the runtime's launch order).
backend::KernelDef::Order order_of(std::string_view op) {
  using Order = backend::KernelDef::Order;
  return op == "AllReduceStart" ? Order::kEarly
         : op == "AllReduceWait" ? Order::kLate
                                 : Order::kByMemory;
}

void add_once(backend::KernelRegistry& r, std::string_view op, DType d, backend::Kernel kernel) {
  if (!r.find(op, d)) r.add(op, d, kernel).scheduled(order_of(op));
}

// The same ops on a device, through host memory (ranks that share a GPU, or no NCCL): each
// kernel copies its inputs to the host (which waits for the device), reduces there as the CPU
// kernels do and copies the results back. Not recordable: a CUDA graph cannot hold the host work.
backend::Backend& backend_of(const backend::KernelContext& k) {
  return backend::get_backend(k.out(0).device());  // where the kernel's tensors live
}

void device_all_reduce_kernel(const backend::KernelContext& k) {
  Tensor host = backend::to_host(k.in(0));
  if (host.storage() == k.in(0).storage()) host = host.clone();
  world().all_reduce(host, k.attr("op").as_string() == "mean", k.attr("deterministic").as_bool());
  backend_of(k).copy_from_host(k.out(0).raw_data(), host.raw_data(), host.nbytes());
}

void device_start_kernel(const backend::KernelContext& k) {
  const std::size_t first = k.attr("chained").as_bool() ? 1 : 0;
  std::vector<Tensor> host;
  for (std::size_t i = first; i < k.inputs.size(); ++i) host.push_back(backend::to_host(k.in(i)));
  const std::int64_t id = world().start(host, k.attr("op").as_string() == "mean",
                                        k.attr("deterministic").as_bool());
  backend_of(k).copy_from_host(k.out(0).raw_data(), &id, sizeof id);
}

void device_wait_kernel(const backend::KernelContext& k) {
  backend::Backend& b = backend_of(k);
  std::int64_t id = 0;
  b.copy_to_host(&id, k.in(0).raw_data(), sizeof id);
  std::vector<Tensor> host;
  for (const Tensor& o : k.outputs) host.emplace_back(o.dtype(), o.shape());
  world().wait(id, host);
  for (std::size_t i = 0; i < host.size(); ++i)
    b.copy_from_host(k.out(i).raw_data(), host[i].raw_data(), host[i].nbytes());
}

void add_device_once(backend::KernelRegistry& r, std::string_view op, DType d,
                     backend::Kernel kernel) {
  if (!r.find(op, d)) {
    r.add(op, d, kernel).writes_every_output_element().not_recordable().scheduled(order_of(op));
  }
}

}  // namespace

void register_device_comm_kernels(backend::Backend& b) {
  if (b.device() == Device::kCPU) return;
  backend::KernelRegistry& r = b.kernels_mutable();
  add_device_once(r, "AllReduce", DType::kFloat32, device_all_reduce_kernel);
  add_device_once(r, "AllReduce", DType::kFloat64, device_all_reduce_kernel);
  add_device_once(r, "AllReduceStart", DType::kInt64, device_start_kernel);
  add_device_once(r, "AllReduceWait", DType::kInt64, device_wait_kernel);
}

void register_comm_kernels() {
  backend::KernelRegistry& r = backend::cpu_backend().kernels_mutable();
  add_once(r, "AllReduce", DType::kFloat32, all_reduce_kernel);
  add_once(r, "AllReduce", DType::kFloat64, all_reduce_kernel);
  add_once(r, "AllReduceStart", DType::kInt64, start_kernel);
  add_once(r, "AllReduceWait", DType::kInt64, wait_kernel);
}

}  // namespace loom::parallel
