// The machine's fp32 FMA peak (backends/cpu/peak.h).
#include "backends/cpu/peak.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <thread>
#include <vector>

#if defined(__AVX512F__) || defined(__FMA__)
#include <immintrin.h>
#endif

namespace loom::backend::cpu {

namespace {

#if defined(__AVX512F__)
constexpr int kLanes = 16;
using Vec = __m512;
inline Vec set1(float v) { return _mm512_set1_ps(v); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline float lane0(Vec v) { return _mm512_cvtss_f32(v); }
const char* kIsa = "avx512";
#elif defined(__FMA__)
constexpr int kLanes = 8;
using Vec = __m256;
inline Vec set1(float v) { return _mm256_set1_ps(v); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline float lane0(Vec v) { return _mm256_cvtss_f32(v); }
const char* kIsa = "avx2-fma";
#else
constexpr int kLanes = 1;
using Vec = float;
inline Vec set1(float v) { return v; }
inline Vec fma(Vec a, Vec b, Vec c) { return a * b + c; }
inline float lane0(Vec v) { return v; }
const char* kIsa = "scalar";
#endif

// Independent FMA chains per thread: enough to cover the FMA latency on both ports (4 cycles ×
// 2), and with the two operands within the registers (AVX2 has 16: 16 chains spilled to the
// stack and measured 51 GFLOP/s a Zen 3 core against 90 with 12).
#if defined(__AVX512F__)
constexpr int kChains = 16;
#else
constexpr int kChains = 12;
#endif
constexpr long kInner = 4096;  // FMA rounds between clock checks

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// FMA rounds until `stop`; returns the number of rounds (each kChains FMAs) and adds the
// thread's CPU seconds to *cpu.
// The calling thread (timer) also ends the run at `deadline`: no thread sleeps, so the run
// also ends under a real-time policy with every core busy.
long spin(std::atomic<bool>& stop, float* sink, double* cpu, bool timer,
          std::chrono::steady_clock::time_point deadline) {
  const double c0 = thread_cpu_seconds();
  Vec acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = set1(0.001f * static_cast<float>(i));
  const Vec a = set1(0.999999f), b = set1(1e-7f);
  long rounds = 0;
  while (!stop.load(std::memory_order_relaxed)) {
    for (long r = 0; r < kInner; ++r) {
      for (int i = 0; i < kChains; ++i) acc[i] = fma(acc[i], a, b);
    }
    rounds += kInner;
    if (timer && std::chrono::steady_clock::now() >= deadline) stop = true;
  }
  float s = 0;
  for (int i = 0; i < kChains; ++i) s += lane0(acc[i]);
  *sink = s;
  *cpu = thread_cpu_seconds() - c0;
  return rounds;
}

}  // namespace

PeakRates measure_fp32_peak(int threads, double seconds) {
  threads = std::max(1, threads);
  std::atomic<bool> stop{false};
  std::vector<long> rounds(static_cast<std::size_t>(threads));
  std::vector<float> sink(static_cast<std::size_t>(threads));
  std::vector<double> cpu(static_cast<std::size_t>(threads));
  std::vector<std::thread> pool;
  const auto t0 = std::chrono::steady_clock::now();
  const auto deadline =
      t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
               std::chrono::duration<double>(seconds));
  for (int t = 1; t < threads; ++t) {
    pool.emplace_back([&, t] { rounds[t] = spin(stop, &sink[t], &cpu[t], false, deadline); });
  }
  rounds[0] = spin(stop, &sink[0], &cpu[0], true, deadline);
  for (auto& th : pool) th.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double flops = 0, cpu_s = 0;
  for (long r : rounds) flops += static_cast<double>(r) * kChains * kLanes * 2.0;
  for (double c : cpu) cpu_s += c;
  return {flops / s * 1e-9, flops / cpu_s * 1e-9, kIsa};
}

}  // namespace loom::backend::cpu

