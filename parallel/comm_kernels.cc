// The CPU kernels of the communication ops (ops/comm_ops.cc), registered into the kernel registry
// by parallel::init(): backends/ does not depend on MPI.
#include <cstring>

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

void add_once(backend::KernelRegistry& r, std::string_view op, DType d, backend::Kernel kernel) {
  if (!r.find(op, d)) r.add(op, d, kernel);
}

}  // namespace

void register_comm_kernels() {
  backend::KernelRegistry& r = backend::cpu_backend().kernels_mutable();
  add_once(r, "AllReduce", DType::kFloat32, all_reduce_kernel);
  add_once(r, "AllReduce", DType::kFloat64, all_reduce_kernel);
  add_once(r, "AllReduceStart", DType::kInt64, start_kernel);
  add_once(r, "AllReduceWait", DType::kInt64, wait_kernel);
}

}  // namespace loom::parallel
