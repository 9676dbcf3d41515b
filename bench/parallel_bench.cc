// Data-parallel figures (bench/README.md "Data parallelism"). Plain main; run under mpirun.
//
//   mpirun -np 2 loom_bench_parallel allreduce         bucketed path (AllReduceStart/Wait through
//       the communication thread) vs a plain MPI_Allreduce of the same bytes, and the deterministic
//       (allgather + rank-ordered sum) path; bytes from 4 KiB to 64 MiB, Float32.
//   [mpirun -np N] loom_bench_parallel lenet <global batch> <steps> [overlap 0|1] [bucket MiB]
//       LeNet-5 Momentum steps on synthetic 32×32 data, global batch split over the ranks;
//       prints samples/s and the fraction of step time spent in AllReduceWait.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/random/random.h"
#include "models/lenet/lenet.h"
#include "nn/loss.h"
#include "nn/train.h"
#include "parallel/parallel.h"

using namespace loom;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Median over repetitions of the slowest rank's time.
template <class F>
double time_collective(F f, int reps) {
  std::vector<double> ts;
  for (int i = 0; i < reps; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    auto t0 = Clock::now();
    f();
    double t = seconds_since(t0), tmax = 0;
    MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    ts.push_back(tmax);
  }
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

int bench_allreduce() {
  auto& comm = parallel::world();
  if (comm.rank() == 0) {
    std::printf("ranks %d; median of the slowest rank; algorithmic bandwidth = bytes / time\n",
                comm.size());
    std::printf("%10s  %14s  %14s  %14s\n", "bytes", "MPI_Allreduce", "bucketed", "deterministic");
  }
  for (std::size_t bytes = 4096; bytes <= (64u << 20); bytes *= 4) {
    const std::int64_t n = static_cast<std::int64_t>(bytes / 4);
    // Ten tensors per bucket, as a layer's weights and biases would be.
    std::vector<Tensor> parts;
    for (int i = 0; i < 10; ++i) parts.emplace_back(DType::kFloat32, Shape{n / 10 + (i == 0 ? n % 10 : 0)});
    for (auto& t : parts) std::fill_n(t.data<float>(), t.numel(), 1.0f + comm.rank());
    std::vector<Tensor> outs;
    for (auto& t : parts) outs.emplace_back(t.dtype(), t.shape());
    std::vector<float> flat(static_cast<std::size_t>(n), 1.0f);
    const int reps = bytes >= (16u << 20) ? 5 : 21;
    const double t_mpi = time_collective(
        [&] { MPI_Allreduce(MPI_IN_PLACE, flat.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); },
        reps);
    const double t_bucket = time_collective(
        [&] { comm.wait(comm.start(parts, true, false), outs); }, reps);
    const double t_det = time_collective(
        [&] { comm.wait(comm.start(parts, true, true), outs); }, reps);
    if (comm.rank() == 0) {
      auto gbs = [&](double t) { return static_cast<double>(bytes) / t * 1e-9; };
      std::printf("%10zu  %7.3f GB/s    %7.3f GB/s    %7.3f GB/s\n", bytes, gbs(t_mpi),
                  gbs(t_bucket), gbs(t_det));
    }
  }
  return 0;
}

int bench_lenet(int argc, char** argv) {
  auto& comm = parallel::world();
  const std::int64_t global = argc > 2 ? std::atoll(argv[2]) : 64;
  const int steps = argc > 3 ? std::atoi(argv[3]) : 50;
  const bool overlap = argc > 4 ? std::atoi(argv[4]) != 0 : true;
  const double bucket_mb = argc > 5 ? std::atof(argv[5]) : 25;
  const std::int64_t local = global / comm.size();
  random::seed_all(1);
  auto net = std::make_shared<models::LeNet5>();
  nn::TrainOneStepCell step(
      std::make_shared<nn::WithLossCell>(
          net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true)),
      {.kind = nn::OptimizerKind::kMomentum, .learning_rate = 0.01, .momentum = 0.9},
      nn::ExecMode::kGraph);
  comm.set_overlap(overlap);
  parallel::setup_data_parallel(
      step, comm,
      {.reducer = {.bucket_bytes = static_cast<std::size_t>(bucket_mb * (1 << 20))}});
  Tensor x(DType::kFloat32, {local, 1, 32, 32});
  Tensor y(DType::kInt32, {local});
  for (std::int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>((i * 7919 % 1000) / 1000.0);
  for (std::int64_t i = 0; i < local; ++i) y.data<std::int32_t>()[i] = static_cast<std::int32_t>(i % 10);
  for (int i = 0; i < 5; ++i) step.step(x, y);  // compile + warm up
  comm.barrier();
  comm.reset_wait_seconds();
  auto t0 = Clock::now();
  for (int i = 0; i < steps; ++i) step.step(x, y);
  comm.barrier();
  const double total = seconds_since(t0);
  const double wait = comm.wait_seconds();
  double wait_max = wait;
  MPI_Allreduce(&wait, &wait_max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (comm.rank() == 0) {
    std::printf("lenet ranks %d threads %s global batch %lld overlap %d: %.1f samples/s, "
                "%.2f ms/step, waiting on all-reduce %.1f%% of step time (max over ranks)\n",
                comm.size(), std::getenv("LOOM_NUM_THREADS") ? std::getenv("LOOM_NUM_THREADS") : "?",
                static_cast<long long>(global), overlap ? 1 : 0,
                static_cast<double>(global) * steps / total, total / steps * 1e3,
                100.0 * wait_max / total);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  parallel::init(&argc, &argv);
  const std::string mode = argc > 1 ? argv[1] : "allreduce";
  int rc = mode == "lenet" ? bench_lenet(argc, argv) : bench_allreduce();
  parallel::finalize();
  return rc;
}
