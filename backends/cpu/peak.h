// The machine's fp32 FMA peak, measured: each thread runs independent chains of vector FMAs
// (16 of AVX-512 when the build targets it, else 12 of AVX2/FMA, else scalar) on registers only —
// enough chains to cover the FMA latency of two FMA units, few enough to leave room for the
// operands — for a fixed time, counting 2 flops per lane
// per FMA. Two figures: all threads' flops over the wall time, and per core over each thread's
// own CPU time (CLOCK_THREAD_CPUTIME_ID), which stays the core's rate on a loaded machine.
// loom_bench_peak prints them; the profiler (debug/profiler.h) reports kernels' FLOP/s against
// per_core_gflops × threads.
#pragma once

namespace loom::backend::cpu {

struct PeakRates {
  double wall_gflops = 0;      // all threads together, over the wall-clock time
  double per_core_gflops = 0;  // per thread, over its CPU time
  const char* isa = "";        // "avx512", "avx2-fma" or "scalar"
};

// Runs `threads` threads (the caller among them) for about `seconds`.
PeakRates measure_fp32_peak(int threads, double seconds);

}  // namespace loom::backend::cpu
