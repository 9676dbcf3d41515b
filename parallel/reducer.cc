// The gradient reducer (bucketed AllReduceStart / AllReduceWait), setup_data_parallel, sharding,
// rank directories, hashes.
#include <filesystem>
#include <sstream>

#include "core/random/random.h"
#include "core/ir/error.h"
#include "nn/context.h"
#include "nn/model.h"
#include "parallel/parallel.h"

namespace loom::parallel {

std::vector<std::vector<std::size_t>> plan_buckets(const std::vector<std::size_t>& nbytes,
                                                   const std::vector<DType>& dtypes,
                                                   std::size_t bucket_bytes) {
  // Reverse parameter order: backward produces the last layers' gradients first. One open bucket
  // per dtype; a bucket is closed (issued) when the next tensor would overflow it.
  std::vector<std::vector<std::size_t>> buckets;
  std::map<DType, std::pair<std::size_t, std::size_t>> open;  // dtype -> (bucket index, bytes)
  for (std::size_t k = nbytes.size(); k-- > 0;) {
    auto it = open.find(dtypes[k]);
    if (it != open.end() && it->second.second + nbytes[k] > bucket_bytes) {
      open.erase(it);
      it = open.end();
    }
    if (it == open.end()) {
      buckets.emplace_back();
      it = open.emplace(dtypes[k], std::make_pair(buckets.size() - 1, std::size_t{0})).first;
    }
    buckets[it->second.first].push_back(k);
    it->second.second += nbytes[k];
  }
  return buckets;
}

nn::TrainOneStepCell::GradientReducer make_gradient_reducer(Communicator& comm,
                                                            ReducerOptions options) {
  const int n = comm.size();
  const bool det = options.deterministic.value_or(random::deterministic_mode());
  if (options.bucket_bytes == 0) throw ValueError("parallel: expected bucket_bytes > 0, got 0");
  return [n, det, options](ops::Emitter& e, const std::vector<ops::Var>& grads,
                           const std::vector<std::string>& names) -> std::vector<ops::Var> {
    if (n == 1 || grads.empty()) return grads;
    std::vector<std::size_t> nbytes;
    std::vector<DType> dtypes;
    for (std::size_t k = 0; k < grads.size(); ++k) {
      ir::AbstractPtr a = e.abstract_of(grads[k]);
      if (!a || !a->is_tensor() || !a->has_rank()) {
        throw ValueError("parallel: expected a tensor gradient with a known shape for " + names[k]);
      }
      nbytes.push_back(static_cast<std::size_t>(shape_numel(a->shape())) * dtype_size(a->dtype()));
      dtypes.push_back(a->dtype());
    }
    const auto buckets = plan_buckets(nbytes, dtypes, options.bucket_bytes);
    const ir::Value op = ir::Value::string(options.mean ? "mean" : "sum");
    std::vector<ops::Var> tokens;
    for (const auto& b : buckets) {
      std::vector<ops::Var> args;
      if (!tokens.empty()) args.push_back(tokens.back());
      for (std::size_t k : b) args.push_back(grads[k]);
      tokens.push_back(e.emit("AllReduceStart", args,
                              {{"op", op},
                               {"deterministic", ir::Value::boolean(det)},
                               {"chained", ir::Value::boolean(!tokens.empty())}}));
    }
    std::vector<ops::Var> out(grads.size());
    for (std::size_t i = 0; i < buckets.size(); ++i) {
      std::vector<ops::Var> args{tokens[i]};
      for (std::size_t k : buckets[i]) args.push_back(grads[k]);
      ops::Var reduced = e.emit("AllReduceWait", args);
      for (std::size_t j = 0; j < buckets[i].size(); ++j) {
        out[buckets[i][j]] = e.tuple_get(reduced, static_cast<std::int64_t>(j));
      }
    }
    return out;
  };
}

void broadcast_parameters(nn::Cell& cell, Communicator& comm) {
  if (comm.size() == 1) return;
  for (auto& [name, p] : cell.parameters_and_names()) comm.broadcast(p->value, 0);
}

void setup_data_parallel(nn::TrainOneStepCell& cell, Communicator& comm,
                         const DataParallelOptions& options) {
  if (comm.size() == 1) return;
  // On a device: its all-reduce kernels, staged through host memory.
  register_device_comm_kernels(nn::context_backend());
  cell.set_gradient_reducer(make_gradient_reducer(comm, options.reducer));
  broadcast_parameters(cell.network(), comm);
  // Optimizer states: every rank made the same ones (the same network's parameters, in name
  // order); rank 0's values, written in place.
  for (const auto& [name, t] : cell.states()) {
    Tensor shared = t;  // shares the storage
    comm.broadcast(shared, 0);
  }
  Tensor steps = Tensor::scalar(DType::kInt64, static_cast<double>(cell.num_steps()));
  comm.broadcast(steps, 0);
  cell.set_num_steps(steps.data<std::int64_t>()[0]);
}

void setup_data_parallel(nn::Model& model, Communicator& comm, const DataParallelOptions& options) {
  if (comm.size() == 1) return;
  setup_data_parallel(model.build_train_network(), comm, options);
  // Metrics and epoch losses summed over the ranks, in a fixed order (every rank the same bits).
  model.set_reducer([&comm](std::vector<double>& values) {
    Tensor t = Tensor::from_vector<double>({static_cast<std::int64_t>(values.size())}, values);
    comm.all_reduce(t, /*mean=*/false, /*deterministic=*/true);
    const double* p = t.data<double>();
    std::copy(p, p + values.size(), values.begin());
  });
}

data::DatasetPtr shard_for_rank(const data::DatasetPtr& dataset, const Communicator& comm) {
  if (comm.size() == 1) return dataset;
  return dataset->shard(comm.size(), comm.rank());
}

std::string rank_dir(const std::string& base) {
  std::filesystem::path p = std::filesystem::path(base) / ("rank_" + std::to_string(rank()));
  std::filesystem::create_directories(p);
  return p.string();
}

bool is_writer() { return rank() == 0; }

std::uint64_t hash_tensors(const std::vector<const Tensor*>& tensors) {
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&](const void* data, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) {
      h ^= b[i];
      h *= 1099511628211ull;
    }
  };
  for (const Tensor* t : tensors) {
    const int dt = static_cast<int>(t->dtype());
    mix(&dt, sizeof dt);
    for (std::int64_t d : t->shape()) mix(&d, sizeof d);
    mix(t->raw_data(), t->nbytes());
  }
  return h;
}

}  // namespace loom::parallel
