// loom_bench_peak: the machine's fp32 FMA throughput (backends/cpu/peak.h), the ceiling the
// convolution and GEMM figures in bench/README.md are measured against.
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
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "backends/cpu/peak.h"

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
  return 0;
}
