// checkpoint/checkpoint.h, the Cell side: saving a Cell's parameters and MindSpore's
// load_param_into_net. Apart from the file side (checkpoint.cc) so that the reader and writer
// need no nn/ (the fuzz build, clang 14, cannot compile nn/).
#include <cstring>
#include <map>

#include "backends/backend.h"
#include "checkpoint/checkpoint.h"
#include "core/ir/error.h"
#include "nn/cell.h"

namespace loom::checkpoint {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string save_checkpoint(nn::Cell& cell, const std::string& path, const SaveOptions& options) {
  NamedTensors tensors;
  // Parameters on a device are copied to the host (the file is the same wherever they live).
  for (auto& [name, p] : cell.parameters_and_names()) {
    tensors.emplace_back(name, backend::to_host(p->value));
  }
  return save_checkpoint(tensors, path, options);
}

namespace {

Shape squeeze_trailing_ones(Shape s) {
  while (!s.empty() && s.back() == 1) s.pop_back();
  return s;
}

bool is_float(DType d) {
  return d == DType::kFloat32 || d == DType::kFloat64 || d == DType::kFloat16 ||
         d == DType::kBFloat16;
}
bool is_int(DType d) { return d == DType::kInt32 || d == DType::kInt64 || d == DType::kUInt8; }

}  // namespace

std::pair<std::vector<std::string>, std::vector<std::string>> load_param_into_net(
    nn::Cell& cell, const NamedTensors& params, bool strict_load) {
  auto net_params = cell.parameters_and_names();
  std::map<std::string, std::size_t> by_name;
  for (std::size_t i = 0; i < params.size(); ++i) by_name.emplace(params[i].first, i);

  struct Copy {
    nn::Parameter* dst;
    const Tensor* src;
  };
  std::vector<Copy> copies;
  std::vector<bool> used(params.size(), false);
  std::vector<std::string> param_not_load;
  for (auto& [name, p] : net_params) {
    std::size_t found = params.size();
    auto it = by_name.find(name);
    if (it != by_name.end()) {
      found = it->second;
    } else if (!strict_load) {
      for (std::size_t i = 0; i < params.size() && found == params.size(); ++i) {
        const std::string& c = params[i].first;
        if (!used[i] && (ends_with(c, "." + name) || ends_with(name, "." + c))) found = i;
      }
    }
    if (found == params.size()) {
      param_not_load.push_back(name);
      continue;
    }
    const Tensor& src = params[found].second;
    const Tensor& dst = p->value;
    if (src.shape() != dst.shape() &&
        squeeze_trailing_ones(src.shape()) != squeeze_trailing_ones(dst.shape())) {
      throw ValueError("load_param_into_net: parameter '" + name + "' has shape " +
                       shape_to_string(dst.shape()) + " in the network but " +
                       shape_to_string(src.shape()) + " in the checkpoint ('" +
                       params[found].first + "')");
    }
    if (src.dtype() != dst.dtype()) {
      const bool convertible = !strict_load && ((is_float(src.dtype()) && is_float(dst.dtype())) ||
                                                (is_int(src.dtype()) && is_int(dst.dtype())));
      if (!convertible) {
        throw ValueError("load_param_into_net: parameter '" + name + "' has dtype " +
                         std::string(dtype_name(dst.dtype())) + " in the network but " +
                         std::string(dtype_name(src.dtype())) + " in the checkpoint" +
                         (strict_load ? " (strict_load converts no dtype)" : ""));
      }
    }
    used[found] = true;
    copies.push_back({p, &src});
  }
  // Every check passed: copy in place, on the parameter's device (a parameter moved to a device
  // stays there: the network keeps running where it was).
  for (const Copy& c : copies) {
    Tensor& dst = c.dst->value;
    if (dst.nbytes() == 0) continue;
    const Tensor src = backend::to_host(*c.src);
    Tensor converted;
    const void* bytes = src.raw_data();
    if (src.dtype() != dst.dtype()) {
      converted = Tensor(dst.dtype(), dst.shape());
      for (std::int64_t i = 0; i < dst.numel(); ++i) converted.set(i, src.get(i));
      bytes = converted.raw_data();
    }
    if (dst.is_host()) {
      std::memcpy(dst.raw_data(), bytes, dst.nbytes());
    } else {
      backend::get_backend(dst.device()).copy_from_host(dst.raw_data(), bytes, dst.nbytes());
    }
  }
  std::vector<std::string> ckpt_not_load;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!used[i]) ckpt_not_load.push_back(params[i].first);
  }
  return {param_not_load, ckpt_not_load};
}

}  // namespace loom::checkpoint
