// A backend's kernel registry.
#include "backends/kernel.h"

#include "core/ir/error.h"

namespace loom::backend {

KernelDef& KernelRegistry::add(std::string_view op, DType dtype, Kernel kernel) {
  if (find(op, dtype)) {
    throw InternalError("kernels: expected one kernel per (op, dtype), got a second for " +
                        std::string(op) + " " + std::string(dtype_name(dtype)));
  }
  if (kernel == nullptr) {
    throw InternalError("kernels: expected a kernel function for " + std::string(op) + ", got null");
  }
  auto def = std::make_unique<KernelDef>();
  def->op = std::string(op);
  def->dtype = dtype;
  def->run = kernel;
  entries_.push_back(std::move(def));
  return *entries_.back();
}

const KernelDef* KernelRegistry::find(std::string_view op, DType dtype) const {
  for (const auto& e : entries_) {
    if (e->dtype == dtype && e->op == op) return e.get();
  }
  return nullptr;
}

std::vector<DType> KernelRegistry::dtypes(std::string_view op) const {
  std::vector<DType> out;
  for (const auto& e : entries_) {
    if (e->op == op) out.push_back(e->dtype);
  }
  return out;
}

std::vector<const KernelDef*> KernelRegistry::all() const {
  std::vector<const KernelDef*> out;
  for (const auto& e : entries_) out.push_back(e.get());
  return out;
}

}  // namespace loom::backend
