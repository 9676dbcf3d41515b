// Cost of the summaries' per-step work: histograms of parameter- and gradient-sized Float32
// tensors (bench/README.md, "Summaries"). Values are N(0, 0.05²), as trained weights are.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "summary/histogram.h"

namespace {

std::vector<float> weights(std::size_t n) {
  std::mt19937 gen(7);
  std::normal_distribution<float> d(0.0f, 0.05f);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

void BM_Histogram(benchmark::State& state) {
  const std::vector<float> v = weights(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) {
    loom::summary::Histogram h = loom::summary::make_histogram(std::span<const float>(v));
    benchmark::DoNotOptimize(h);
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
// LeNet's conv2 weight (2,400), fc1 weight (48,000); ResNet-18's layer3 3×3 (589,824).
BENCHMARK(BM_Histogram)->Arg(150)->Arg(2400)->Arg(48000)->Arg(589824);

}  // namespace

BENCHMARK_MAIN();
