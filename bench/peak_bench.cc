// loom_bench_peak: the machine's fp32 FMA throughput (backends/cpu/peak.h), the ceiling the
// convolution and GEMM figures in bench/README.md are measured against, and its memory bandwidth
// (STREAM's copy and triad kernels on arrays far larger than the caches), the ceiling of the
// elementwise kernels.
//
//   loom_bench_peak [seconds per run = 0.5] [runs = 5]
//
// Prints GFLOP/s for 1 thread and for every core (std::thread::hardware_concurrency), median of
// the runs, two ways: by wall-clock time, and per CPU-second (each thread's flops over its own CPU
// time). On a shared machine the wall-clock figure drops with the load while the per-CPU-second
// one stays the core's own rate; loom_bench_ops's GFLOP/s are also per CPU-second of the thread
// that runs the kernel (Google Benchmark's default), so compare single-thread kernel figures with
// the single-thread per-CPU-second peak.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "backends/cpu/peak.h"

namespace {

// GB/s of STREAM's copy (a = b: 8 bytes an element) or triad (a = b + s·c: 12 bytes) over
// arrays of n floats each, split in equal parts over `threads` threads, best of `reps` passes
// (STREAM's convention: the bytes the kernel names, not the write-allocate reads).
double stream_gbps(bool triad, int threads, std::size_t n, int reps) {
  std::vector<float> a(n, 0.f), b(n, 1.f), c(n, 2.f);  // touched: pages are resident
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const std::size_t lo = n * t / threads, hi = n * (t + 1) / threads;
        float* __restrict pa = a.data();
        const float* __restrict pb = b.data();
        const float* __restrict pc = c.data();
        if (triad) {
          for (std::size_t i = lo; i < hi; ++i) pa[i] = pb[i] + 3.f * pc[i];
        } else {
          for (std::size_t i = lo; i < hi; ++i) pa[i] = pb[i];
        }
      });
    }
    for (auto& th : pool) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(n) * (triad ? 12.0 : 8.0) / s * 1e-9);
  }
  if (a[n / 2] < 0) std::printf("?");  // keeps the stores
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 0.5;
  const int runs = argc > 2 ? std::atoi(argv[2]) : 5;
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  std::vector<int> counts{1};
  if (cores > 1) counts.push_back(cores);
  for (int threads : counts) {
    std::vector<double> wall, per_cpu;
    const char* isa = "";
    for (int r = 0; r < runs; ++r) {
      const auto g = loom::backend::cpu::measure_fp32_peak(threads, seconds);
      wall.push_back(g.wall_gflops);
      per_cpu.push_back(g.per_core_gflops);
      isa = g.isa;
    }
    std::sort(wall.begin(), wall.end());
    std::sort(per_cpu.begin(), per_cpu.end());
    const std::size_t mid = wall.size() / 2;
    std::printf("{\"isa\": \"%s\", \"threads\": %d, \"wall_gflops_median\": %.1f, "
                "\"wall_gflops_max\": %.1f, \"wall_gflops_min\": %.1f, "
                "\"per_core_cpu_gflops_median\": %.1f, \"per_core_cpu_gflops_max\": %.1f}\n",
                isa, threads, wall[mid], wall.back(), wall.front(), per_cpu[mid], per_cpu.back());
  }
  // 3 × 256 MiB: far beyond any cache of these machines.
  const std::size_t n = std::size_t{64} << 20;
  for (int threads : counts) {
    std::printf("{\"memory\": \"stream\", \"threads\": %d, \"copy_gbps\": %.1f, "
                "\"triad_gbps\": %.1f}\n",
                threads, stream_gbps(false, threads, n, 5), stream_gbps(true, threads, n, 5));
  }
  return 0;
}
