// Test driver for parallel/, run by ctest under mpirun (tests/parallel/CMakeLists.txt) and
// without it. Prints "PASS <mode>" on rank 0 and exits 0 when the checks hold; any failed check
// prints "FAIL ..." and aborts the job.
//
//   parallel_driver match  <mlp|lenet> <global batch> [steps] [deterministic 0|1] [pynative]
//       every rank trains on its strided share of each global batch (the shard rule) with the
//       bucketed reducer; after every step all ranks' weight hashes agree (all-gather); rank 0 also
//       trains a reference network alone on the whole global batch, and at the end the weights
//       agree to 1e-5. With deterministic, training runs twice and the two runs agree bitwise.
//   parallel_driver size1            no mpirun: size 1, the reducer emits nothing, results equal a
//                                    run without reducer bitwise.
//   parallel_driver overlap          the launch order issues the first bucket's start before the
//                                    backward pass ends (several buckets).
//   parallel_driver resume           20 steps == 10 steps, rank-0 state snapshot, fresh process
//                                    state restored on rank 0 only + setup_data_parallel, 10 steps.
//   parallel_driver model            nn::Model + setup_data_parallel + shard_for_rank vs 1 process.
//   parallel_driver ops              the comm ops eagerly (sum / mean, deterministic, bprop).
//   parallel_driver shard            the sharding rule matches the global batches, 2 epochs.
//   parallel_driver kill <signal>    rank 1 dies at step 3 (SIGKILL / SIGSEGV), the others keep
//                                    training: the job must end, naming rank 1.
//   parallel_driver hang             rank 1 stops communicating at step 3: the watchdog ends the job.
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "backends/backend.h"
#include "backends/eager.h"
#include "core/random/random.h"
#include "ops/op.h"
#include "core/ir/anf.h"
#include "runtime/executable.h"
#include "models/lenet/lenet.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/model.h"
#include "nn/train.h"
#include "nn/context.h"
#include "parallel/parallel.h"
#include "tests/fake_device.h"

using namespace loom;

namespace {

int g_rank = 0;
nn::ExecMode g_mode = nn::ExecMode::kGraph;  // match ... pynative: the interpreter path

[[noreturn]] void fail(const std::string& what) {
  std::cerr << "FAIL rank " << g_rank << ": " << what << std::endl;
  parallel::world().abort("test failed");
}

void check(bool ok, const std::string& what) {
  if (!ok) fail(what);
}

struct Data {
  Tensor x;  // (rows, features...) Float32
  Tensor y;  // (rows) Int32
};

// Deterministic synthetic data: the same on every rank.
Data make_data(bool lenet, std::int64_t rows) {
  const Shape xs = lenet ? Shape{rows, 1, 32, 32} : Shape{rows, 20};
  Data d{Tensor(DType::kFloat32, xs), Tensor(DType::kInt32, {rows})};
  std::uint64_t s = 12345;
  auto next = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(s >> 11) / static_cast<double>(1ull << 53);
  };
  float* x = d.x.data<float>();
  for (std::int64_t i = 0; i < d.x.numel(); ++i) x[i] = static_cast<float>(next() * 2 - 1);
  std::int32_t* y = d.y.data<std::int32_t>();
  for (std::int64_t i = 0; i < rows; ++i) y[i] = static_cast<std::int32_t>(next() * 10) % 10;
  return d;
}

// Rows start + offset, start + offset + stride, ... (count of them).
Tensor rows_of(const Tensor& t, std::int64_t start, std::int64_t offset, std::int64_t stride,
               std::int64_t count) {
  Shape s = t.shape();
  const std::int64_t row = t.numel() / s[0];
  s[0] = count;
  Tensor out(t.dtype(), s);
  const std::size_t bytes = static_cast<std::size_t>(row) * dtype_size(t.dtype());
  for (std::int64_t i = 0; i < count; ++i) {
    std::memcpy(static_cast<char*>(out.raw_data()) + i * bytes,
                static_cast<const char*>(t.raw_data()) + (start + offset + i * stride) * bytes, bytes);
  }
  return out;
}

std::shared_ptr<nn::Cell> make_net(bool lenet) {
  random::seed_all(1, random::deterministic_mode());
  if (lenet) return std::make_shared<models::LeNet5>();
  auto net = std::make_shared<nn::SequentialCell>();
  net->append(std::make_shared<nn::Dense>(20, 64));
  net->append(std::make_shared<nn::ReLU>());
  net->append(std::make_shared<nn::Dense>(64, 32));
  net->append(std::make_shared<nn::ReLU>());
  net->append(std::make_shared<nn::Dense>(32, 10));
  return net;
}

struct Trainer {
  std::shared_ptr<nn::Cell> net;
  std::unique_ptr<nn::TrainOneStepCell> step;
  explicit Trainer(bool lenet) {
    net = make_net(lenet);
    auto loss = std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(/*sparse=*/true);
    step = std::make_unique<nn::TrainOneStepCell>(
        std::make_shared<nn::WithLossCell>(net, loss),
        nn::OptimizerSpec{.kind = nn::OptimizerKind::kMomentum, .learning_rate = 0.05,
                          .momentum = 0.9},
        g_mode);
  }
  std::vector<const Tensor*> weights() {
    std::vector<const Tensor*> w;
    for (auto& [name, p] : net->parameters_and_names()) w.push_back(&p->value);
    return w;
  }
};

// The weights in host memory (copies of a device's).
std::vector<Tensor> host_weights(Trainer& t) {
  std::vector<Tensor> w;
  for (const Tensor* p : t.weights()) w.push_back(backend::to_host(*p));
  return w;
}

std::uint64_t hash_weights(Trainer& t) {
  const std::vector<Tensor> w = host_weights(t);
  std::vector<const Tensor*> ptrs;
  for (const Tensor& x : w) ptrs.push_back(&x);
  return parallel::hash_tensors(ptrs);
}

void check_same_on_all_ranks(Trainer& t, const std::string& when) {
  const auto hashes = parallel::world().all_gather(hash_weights(t));
  for (std::size_t r = 1; r < hashes.size(); ++r) {
    check(hashes[r] == hashes[0], "weights of rank " + std::to_string(r) + " differ from rank 0's " +
                                      when);
  }
}

double max_abs_diff(Trainer& a, Trainer& b) {
  auto wa = a.weights(), wb = b.weights();
  double m = 0;
  for (std::size_t i = 0; i < wa.size(); ++i) {
    for (std::int64_t j = 0; j < wa[i]->numel(); ++j) {
      m = std::max(m, std::abs(wa[i]->get(j) - wb[i]->get(j)));
    }
  }
  return m;
}

// Trains `steps` data-parallel steps; returns the trainer.
std::unique_ptr<Trainer> train_parallel(bool lenet, const Data& d, std::int64_t global_batch,
                                        int steps, int first_step, parallel::ReducerOptions ro,
                                        Trainer* resume_from = nullptr) {
  auto& comm = parallel::world();
  const int n = comm.size();
  auto t = std::make_unique<Trainer>(lenet);
  if (resume_from && comm.rank() == 0) {
    // rank 0 alone restores (weights + optimizer states + step count), as after loading a checkpoint
    auto src = resume_from->weights();
    auto dst = t->weights();
    for (std::size_t i = 0; i < src.size(); ++i) {
      std::memcpy(const_cast<Tensor*>(dst[i])->raw_data(), src[i]->raw_data(), src[i]->nbytes());
    }
    for (const auto& [name, v] : resume_from->step->states()) t->step->set_state(name, v.clone());
    t->step->set_num_steps(resume_from->step->num_steps());
  }
  parallel::setup_data_parallel(*t->step, comm, {.reducer = ro});
  const std::int64_t local = global_batch / n;
  for (int s = first_step; s < first_step + steps; ++s) {
    const std::int64_t start = s * global_batch;
    t->step->step(rows_of(d.x, start, comm.rank(), n, local),
                  rows_of(d.y, start, comm.rank(), n, local));
    check_same_on_all_ranks(*t, "after step " + std::to_string(s));
  }
  return t;
}

std::unique_ptr<Trainer> train_reference(bool lenet, const Data& d, std::int64_t global_batch,
                                         int steps) {
  auto t = std::make_unique<Trainer>(lenet);
  for (int s = 0; s < steps; ++s) {
    t->step->step(rows_of(d.x, s * global_batch, 0, 1, global_batch),
                  rows_of(d.y, s * global_batch, 0, 1, global_batch));
  }
  return t;
}

int mode_match(int argc, char** argv) {
  const bool lenet = argc > 2 && std::string(argv[2]) == "lenet";
  const std::int64_t batch = argc > 3 ? std::atoll(argv[3]) : 32;
  const int steps = argc > 4 ? std::atoi(argv[4]) : 20;
  const bool det = argc > 5 && std::atoi(argv[5]) != 0;
  if (argc > 6 && std::string(argv[6]) == "pynative") g_mode = nn::ExecMode::kPyNative;
  auto& comm = parallel::world();
  check(batch % comm.size() == 0, "global batch must divide by the number of ranks");
  random::seed_all(1, det);
  const Data d = make_data(lenet, batch * steps);
  // Small buckets, so that the test exercises several of them.
  parallel::ReducerOptions ro{.bucket_bytes = lenet ? 64u << 10 : 4u << 10, .deterministic = det};
  auto par = train_parallel(lenet, d, batch, steps, 0, ro);
  if (det) {
    auto again = train_parallel(lenet, d, batch, steps, 0, ro);
    const auto h1 = parallel::hash_tensors(par->weights()), h2 = parallel::hash_tensors(again->weights());
    check(h1 == h2, "deterministic runs differ");
  }
  if (comm.rank() == 0) {
    auto ref = train_reference(lenet, d, batch, steps);
    const double diff = max_abs_diff(*par, *ref);
    std::printf("%d ranks x batch %lld vs 1 x %lld, %d Momentum steps: max |dw| = %.3g\n",
                comm.size(), static_cast<long long>(batch / comm.size()),
                static_cast<long long>(batch), steps, diff);
    check(diff <= 1e-5, "data-parallel weights differ from the single-process ones by " +
                            std::to_string(diff));
  }
  comm.barrier();
  return 0;
}

// Data parallelism on a device: the fake GPU (every CPU kernel, its memory closed to the host)
// with the host-staged all-reduce kernels gives bitwise the CPU's data-parallel weights, and the
// step, which holds them, is never recorded (a CUDA graph cannot hold host work).
int mode_device() {
  auto& comm = parallel::world();
  random::seed_all(1, false);
  const int steps = 8;
  const std::int64_t batch = 16 * comm.size();
  const Data d = make_data(true, batch * steps);
  const parallel::ReducerOptions ro{.bucket_bytes = 64u << 10};
  nn::set_context_device(Device::kCPU);
  auto cpu = train_parallel(true, d, batch, steps, 0, ro);
  testing::FakeDevice& dev = testing::fake_device();
  const long recordings = dev.recordings(), launches = dev.launches();
  nn::set_context_device(Device::kCUDA);
  auto gpu = train_parallel(true, d, batch, steps, 0, ro);
  nn::set_context_device(Device::kCPU);
  check(dev.launches() > launches + steps * 20, "the device ran no step");
  for (const Tensor* w : gpu->weights()) check(w->device() == Device::kCUDA, "a weight left the device");
  check(dev.recordings() == recordings, "a step holding host-staged all-reduces was recorded");
  check(hash_weights(*gpu) == hash_weights(*cpu), "device data-parallel weights differ from the CPU's");
  if (comm.rank() == 0) {
    std::printf("%d ranks on the fake GPU, %d steps: weights equal to the CPU's\n", comm.size(), steps);
  }
  comm.barrier();
  return 0;
}

int mode_size1() {
  auto& comm = parallel::world();
  check(comm.size() == 1 && comm.rank() == 0, "expected size 1 without mpirun");
  const Data d = make_data(false, 32 * 5);
  auto par = train_parallel(false, d, 32, 5, 0, {});
  for (const auto& l : par->step->last_executable()->launches()) {
    check(l.prim->name().rfind("AllReduce", 0) != 0, "size 1 emitted " + l.prim->name());
  }
  auto ref = train_reference(false, d, 32, 5);
  check(parallel::hash_tensors(par->weights()) == parallel::hash_tensors(ref->weights()),
        "size-1 run differs from the plain run");
  return 0;
}

int mode_overlap() {
  auto& comm = parallel::world();
  const Data d = make_data(false, 32);
  auto t = train_parallel(false, d, 32, 1, 0, {.bucket_bytes = 4u << 10});
  const auto& launches = t->step->last_executable()->launches();
  std::ptrdiff_t first_start = -1, first_wait = -1, last_start = -1;
  int starts = 0;
  std::ptrdiff_t compute_between = 0;
  for (std::size_t i = 0; i < launches.size(); ++i) {
    const std::string& op = launches[i].prim->name();
    if (op == "AllReduceStart") {
      ++starts;
      if (first_start < 0) first_start = static_cast<std::ptrdiff_t>(i);
      last_start = static_cast<std::ptrdiff_t>(i);
    } else if (op == "AllReduceWait") {
      if (first_wait < 0) first_wait = static_cast<std::ptrdiff_t>(i);
    } else if (first_start >= 0 && first_wait < 0) {
      ++compute_between;
    }
  }
  if (comm.rank() == 0) {
    std::printf("%zu launches, %d buckets: first start at %td, last start at %td, first wait at "
                "%td, %td compute launches overlap communication\n",
                launches.size(), starts, first_start, last_start, first_wait, compute_between);
  }
  check(starts >= 2, "expected several buckets");
  check(last_start < first_wait, "expected every start before the first wait");
  check(compute_between > 0, "expected backward launches between the first start and first wait");
  return 0;
}

int mode_resume() {
  const Data d = make_data(false, 32 * 20);
  auto full = train_parallel(false, d, 32, 20, 0, {});
  auto first = train_parallel(false, d, 32, 10, 0, {});
  auto second = train_parallel(false, d, 32, 10, 10, {}, first.get());
  check(parallel::hash_tensors(full->weights()) == parallel::hash_tensors(second->weights()),
        "resumed run differs from the uninterrupted one");
  check(second->step->num_steps() == 20, "step count not restored");
  return 0;
}

// The sharding rule: shuffle -> shard_for_rank -> batch(B) gives, on rank r, exactly rows r, r + n,
// ... of the global batch(n·B) a single process reads, every epoch (checked locally on each rank).
int mode_shard() {
  auto& comm = parallel::world();
  const int n = comm.size();
  random::seed_all(7);
  std::vector<std::int64_t> idx(240);
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<std::int64_t>(i);
  auto ds = data::TensorSlicesDataset({"i"}, {Tensor::from_vector<std::int64_t>({240}, idx)})->shuffle();
  data::Iterator global(ds->batch(12 * n, true), {.num_epochs = 2});
  data::Iterator local(parallel::shard_for_rank(ds, comm)->batch(12, true), {.num_epochs = 2});
  int batches = 0;
  while (auto g = global.next()) {
    auto l = local.next();
    check(l.has_value(), "local stream ended early");
    for (int j = 0; j < 12; ++j) {
      check((*l)[0].get(j) == (*g)[0].get(j * n + comm.rank()),
            "batch " + std::to_string(batches) + " row " + std::to_string(j) + " is not the global row");
    }
    ++batches;
  }
  check(!local.next().has_value() && batches == 2 * (240 / (12 * n)), "batch counts differ");
  return 0;
}

// The API tools/ uses: nn::Model + setup_data_parallel + shard_for_rank, 2 epochs, against one
// process training on the global batches.
int mode_model() {
  auto& comm = parallel::world();
  const int n = comm.size();
  const Data d = make_data(false, 96 * n);
  auto run = [&](bool parallel_run) {
    auto net = make_net(false);
    auto model = std::make_unique<nn::Model>(
        net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true),
        nn::OptimizerSpec{.kind = nn::OptimizerKind::kMomentum, .learning_rate = 0.05});
    random::seed_all(3);
    auto ds = data::TensorSlicesDataset({"data", "label"}, {d.x, d.y})->shuffle();
    if (parallel_run) {
      parallel::setup_data_parallel(*model, comm);
      ds = parallel::shard_for_rank(ds, comm)->batch(8, true);
    } else {
      ds = ds->batch(8 * n, true);
    }
    model->train(2, ds);
    std::vector<Tensor> w;
    for (auto& [name, p] : net->parameters_and_names()) w.push_back(p->value.clone());
    return w;
  };
  const std::vector<Tensor> par = run(true);
  std::vector<const Tensor*> ptrs;
  for (const Tensor& t : par) ptrs.push_back(&t);
  const auto hashes = comm.all_gather(parallel::hash_tensors(ptrs));
  for (auto h : hashes) check(h == hashes[0], "ranks differ after Model::train");
  if (comm.rank() == 0) {
    const std::vector<Tensor> ref = run(false);
    double m = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      for (std::int64_t j = 0; j < ref[i].numel(); ++j) m = std::max(m, std::abs(ref[i].get(j) - par[i].get(j)));
    }
    std::printf("Model::train, %d ranks x batch 8 vs 1 x %d, 2 epochs: max |dw| = %.3g\n", n, 8 * n, m);
    check(m <= 1e-5, "Model data-parallel weights differ by " + std::to_string(m));
  }
  comm.barrier();
  return 0;
}

// The ops eagerly: AllReduce (sum / mean, both reduction orders), its bprop, Start/Wait on two
// dtypes, and the Communicator's broadcast.
int mode_ops() {
  auto& comm = parallel::world();
  const int n = comm.size(), r = comm.rank();
  const double sum = n * (n + 1) / 2.0;
  for (bool det : {false, true}) {
    for (const char* op : {"sum", "mean"}) {
      Tensor x = Tensor::from_vector<float>({3}, {1.0f * (r + 1), 2.0f * (r + 1), 0.5f});
      ir::Value y = backend::run_op("AllReduce", {ir::Value::tensor(x)},
                                    {{"op", ir::Value::string(op)}, {"deterministic", ir::Value::boolean(det)}});
      const double k = std::string(op) == "sum" ? 1.0 : 1.0 / n;
      const Tensor& t = y.as_tensor();
      check(std::abs(t.get(0) - sum * k) < 1e-6 && std::abs(t.get(1) - 2 * sum * k) < 1e-6 &&
                std::abs(t.get(2) - 0.5 * n * k) < 1e-6,
            std::string("AllReduce ") + op + " gave " + t.describe());
    }
  }
  // bprop of the mean: the mean of the douts.
  auto prim = ops::make_op("AllReduce", {});
  const ir::Value xv = ir::Value::tensor(Tensor::from_vector<double>({2}, {1, 2}));
  const ir::Value dout = ir::Value::tensor(Tensor::from_vector<double>({2}, {1.0 * r, 1.0}));
  auto g = backend::run_bprop(*prim, std::span<const ir::Value>(&xv, 1), xv, dout);
  check(std::abs(g[0].as_tensor().get(0) - (n - 1) / 2.0) < 1e-12, "AllReduce bprop");
  // Start / Wait with Float64, chained.
  Tensor a = Tensor::from_vector<double>({2, 2}, {1.0 * r, 1, 2, 3});
  Tensor b = Tensor::from_vector<double>({1}, {10.0 * r});
  ir::Value t0 = backend::run_op("AllReduceStart", {ir::Value::tensor(a)}, {});
  ir::Value t1 = backend::run_op("AllReduceStart", {t0, ir::Value::tensor(b)}, {{"chained", ir::Value::boolean(true)}});
  ir::Value w1 = backend::run_op("AllReduceWait", {t1, ir::Value::tensor(b)});
  ir::Value w0 = backend::run_op("AllReduceWait", {t0, ir::Value::tensor(a)});
  check(std::abs(w0.elements()[0].as_tensor().get(0) - (n - 1) / 2.0) < 1e-12 &&
            std::abs(w0.elements()[0].as_tensor().get(3) - 3) < 1e-12 &&
            std::abs(w1.elements()[0].as_tensor().get(0) - 10.0 * (n - 1) / 2.0) < 1e-12,
        "AllReduceStart/Wait");
  Tensor c = Tensor::from_vector<float>({2}, {1.0f * r, 7});
  comm.broadcast(c, 0);
  check(c.get(0) == 0 && c.get(1) == 7, "broadcast");
  return 0;
}

int mode_failure(const std::string& how, int sig) {
  auto& comm = parallel::world();
  const Data d = make_data(false, 32);
  Trainer t(false);
  parallel::setup_data_parallel(*t.step, comm, {});
  const std::int64_t local = 32 / comm.size();
  for (int s = 0; s < 100000; ++s) {
    if (s == 3 && comm.rank() == 1) {
      if (how == "hang") {
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
      }
      std::fprintf(stderr, "rank 1 raising signal %d at step 3\n", sig);
      raise(sig);
    }
    t.step->step(rows_of(d.x, 0, comm.rank(), comm.size(), local),
                 rows_of(d.y, 0, comm.rank(), comm.size(), local));
  }
  return 1;  // not reached: the job must have been stopped
}

}  // namespace

int main(int argc, char** argv) {
  parallel::init(&argc, &argv);
  g_rank = parallel::rank();
  const std::string mode = argc > 1 ? argv[1] : "match";
  int rc = 1;
  if (mode == "match") rc = mode_match(argc, argv);
  else if (mode == "size1") rc = mode_size1();
  else if (mode == "overlap") rc = mode_overlap();
  else if (mode == "resume") rc = mode_resume();
  else if (mode == "shard") rc = mode_shard();
  else if (mode == "model") rc = mode_model();
  else if (mode == "device") rc = mode_device();
  else if (mode == "ops") rc = mode_ops();
  else if (mode == "kill") rc = mode_failure("kill", argc > 2 ? std::atoi(argv[2]) : SIGKILL);
  else if (mode == "hang") rc = mode_failure("hang", 0);
  else if (mode == "stop") rc = mode_failure("stop", SIGSTOP);  // stopped as by kill -STOP
  else fail("unknown mode " + mode);
  if (rc == 0 && parallel::rank() == 0) std::printf("PASS %s (%d ranks)\n", mode.c_str(), parallel::size());
  parallel::finalize();
  return rc;
}
