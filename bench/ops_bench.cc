// GFLOP/s of the MatMul and Conv2D ops (forward, input gradient, filter gradient) at the layer
// shapes of LeNet and ResNet-18 (CIFAR layout, 32x32 input) at batch 32 and of ResNet-50
// (224x224) at batch 8, float32, run through
// the registered CPU kernels exactly as eager execution runs them (inference excluded: the
// outputs are allocated once). Next to them, bench/README.md lists cpu::gemm's own rate at the
// matching GEMM shapes (loom_bench_gemm), so the overhead of im2col/col2im is visible.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/kernel.h"
#include "backends/thread_pool.h"
#include "core/ir/abstract.h"
#include "core/ir/tensor.h"
#include "ops/op.h"

namespace {

using loom::DType;
using loom::Shape;
using loom::Tensor;
using loom::ir::Value;

Tensor random_tensor(Shape shape, unsigned seed) {
  Tensor t(DType::kFloat32, std::move(shape));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = u(rng);
  return t;
}

// Runs op's CPU kernel on `inputs` repeatedly; outputs are inferred and allocated once.
void run_kernel(benchmark::State& state, const std::string& op, loom::ir::Primitive::Attrs attrs,
                std::vector<Tensor> inputs, double flops) {
  auto prim = loom::ops::make_op(op, std::move(attrs));
  std::vector<loom::ir::AbstractPtr> abstracts;
  for (const Tensor& t : inputs) abstracts.push_back(loom::ir::Abstract::of_value(Value::tensor(t)));
  auto out = loom::ops::infer(*prim, abstracts);
  std::vector<Tensor> outputs{Tensor(out->dtype(), out->shape())};
  const loom::backend::KernelDef* def =
      loom::backend::cpu_backend().find_kernel(op, DType::kFloat32);
  std::vector<loom::backend::TensorType> in_types, out_types;
  for (const Tensor& t : inputs) in_types.push_back({t.dtype(), t.shape()});
  for (const Tensor& t : outputs) out_types.push_back({t.dtype(), t.shape()});
  const loom::backend::PreparedKernel kernel(*def, *prim, in_types, out_types,
                                             loom::backend::cpu_backend());
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    kernel.run(inputs, outputs);
    benchmark::DoNotOptimize(outputs[0].raw_data());
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // GFLOP/s: per CPU-second of the calling thread (Google Benchmark's clock); wall_GFLOP/s: per
  // second of wall-clock time. With one thread (LOOM_NUM_THREADS=1) the first is the core's own
  // rate even on a loaded machine; with more, only the second counts the pool's other threads.
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["wall_GFLOP/s"] =
      flops * 1e-9 * static_cast<double>(state.iterations()) / std::max(wall, 1e-12);
}

struct Dense {
  const char* name;
  std::int64_t batch, in, out;
};
constexpr Dense kDense[] = {
    {"lenet_fc1", 32, 400, 120}, {"lenet_fc2", 32, 120, 84}, {"lenet_fc3", 32, 84, 10},
    {"resnet18_fc", 32, 512, 10},
};

struct Conv {
  const char* name;
  std::int64_t n, c, h, w, o, k, stride, pad;  // pad: symmetric, pad_mode "pad"
};
constexpr Conv kConvs[] = {
    {"lenet_conv1", 32, 1, 32, 32, 6, 5, 1, 0},
    {"lenet_conv2", 32, 6, 14, 14, 16, 5, 1, 0},
    // LeNet at batch 256 and 1, and a padded 3x3 with few channels (conv_direct.cc's range).
    {"lenet_conv1_b256", 256, 1, 32, 32, 6, 5, 1, 0},
    {"lenet_conv2_b256", 256, 6, 14, 14, 16, 5, 1, 0},
    {"lenet_conv1_b1", 1, 1, 32, 32, 6, 5, 1, 0},
    {"lenet_conv2_b1", 1, 6, 14, 14, 16, 5, 1, 0},
    {"small_3x3_3to16", 32, 3, 32, 32, 16, 3, 1, 1},
    {"small_3x3_8to16", 32, 8, 16, 16, 16, 3, 1, 1},
    {"resnet18_stem", 32, 3, 32, 32, 64, 3, 1, 1},
    {"resnet18_l1", 32, 64, 32, 32, 64, 3, 1, 1},
    {"resnet18_l2_down", 32, 64, 32, 32, 128, 3, 2, 1},
    {"resnet18_l2", 32, 128, 16, 16, 128, 3, 1, 1},
    {"resnet18_l3", 32, 256, 8, 8, 256, 3, 1, 1},
    {"resnet18_l4", 32, 512, 4, 4, 512, 3, 1, 1},
    // The rest of ResNet-18's convolutions in its small-image layout with 1 input channel
    // (models/resnet, the resnet18 recipe): the stem, the stride-2 3x3 convolutions and the
    // 1x1 stride-2 down-sampling convolutions of layers 2-4.
    {"resnet18_stem_1ch", 32, 1, 32, 32, 64, 3, 1, 1},
    {"resnet18_l3_down", 32, 128, 16, 16, 256, 3, 2, 1},
    {"resnet18_l4_down", 32, 256, 8, 8, 512, 3, 2, 1},
    {"resnet18_ds2_1x1", 32, 64, 32, 32, 128, 1, 2, 0},
    {"resnet18_ds3_1x1", 32, 128, 16, 16, 256, 1, 2, 0},
    {"resnet18_ds4_1x1", 32, 256, 8, 8, 512, 1, 2, 0},
    // ResNet-50 (ImageNet layout, 224x224) at batch 8: the 7x7 stem and layer1's and layer4's
    // bottleneck convolutions (symmetric padding here; the network pads "same").
    {"resnet50_stem_7x7", 8, 3, 224, 224, 64, 7, 2, 3},
    {"resnet50_l1_1x1_in", 8, 64, 56, 56, 64, 1, 1, 0},
    {"resnet50_l1_3x3", 8, 64, 56, 56, 64, 3, 1, 1},
    {"resnet50_l1_1x1_out", 8, 64, 56, 56, 256, 1, 1, 0},
    {"resnet50_l1_1x1_in2", 8, 256, 56, 56, 64, 1, 1, 0},
    {"resnet50_l4_3x3", 8, 512, 7, 7, 512, 3, 1, 1},
    {"resnet50_l4_1x1_out", 8, 512, 7, 7, 2048, 1, 1, 0},
    {"resnet50_l4_1x1_in", 8, 2048, 7, 7, 512, 1, 1, 0},
};

loom::ir::Primitive::Attrs conv_attrs(const Conv& c) {
  return {{"out_channel", Value::i64(c.o)},
          {"kernel_size", Value::ints({c.k, c.k})},
          {"pad_mode", Value::string("pad")},
          {"pad", Value::ints({c.pad, c.pad, c.pad, c.pad})},
          {"stride", Value::ints({c.stride, c.stride})}};
}

std::int64_t out_size(std::int64_t in, const Conv& c) {
  return (in + 2 * c.pad - c.k) / c.stride + 1;
}

// ---- Pooling: MaxPool, MaxPoolGrad, AvgPool and AvgPoolGrad at LeNet's two pools (batch 32 and
// 256) and the ResNet-50 stem's 3x3/2 SAME max-pool (112x112 -> 56x56, batch 8).
// LOOM_POOL=reference runs the kernels' reference path (backends/cpu/pool_kernels.cc).
// Counters: wall_us, wall-clock time per call (all threads), and ns/elem, that per input
// element of x.
struct PoolShape {
  const char* name;
  std::int64_t n, c, h, w, k, stride;
  const char* pad_mode;
};
constexpr PoolShape kPools[] = {
    {"lenet_pool1", 32, 6, 28, 28, 2, 2, "VALID"},
    {"lenet_pool2", 32, 16, 10, 10, 2, 2, "VALID"},
    {"lenet_pool1_b256", 256, 6, 28, 28, 2, 2, "VALID"},
    {"lenet_pool2_b256", 256, 16, 10, 10, 2, 2, "VALID"},
    {"resnet50_stem_pool", 8, 64, 112, 112, 3, 2, "SAME"},
};

void run_pool(benchmark::State& state, const std::string& op, const PoolShape& p) {
  loom::ir::Primitive::Attrs attrs = {{"kernel_size", Value::ints({p.k, p.k})},
                                      {"strides", Value::ints({p.stride, p.stride})},
                                      {"pad_mode", Value::string(p.pad_mode)}};
  const Tensor x = random_tensor({p.n, p.c, p.h, p.w}, 6);
  auto max_pool = loom::ops::make_op("MaxPool", attrs);
  const std::vector<loom::ir::AbstractPtr> x_abstract{loom::ir::Abstract::of_value(Value::tensor(x))};
  const Shape pooled = loom::ops::infer(*max_pool, x_abstract)->shape();
  std::vector<Tensor> inputs{x};
  if (op != "MaxPool" && op != "AvgPool") {
    inputs.push_back(Tensor(DType::kFloat32, pooled));  // out: only its shape is read
    inputs.push_back(random_tensor(pooled, 7));
  }
  auto prim = loom::ops::make_op(op, attrs);
  std::vector<Tensor> outputs{Tensor(DType::kFloat32, op == "MaxPool" || op == "AvgPool"
                                                          ? pooled
                                                          : Shape{p.n, p.c, p.h, p.w})};
  const loom::backend::KernelDef* def =
      loom::backend::cpu_backend().find_kernel(op, DType::kFloat32);
  std::vector<loom::backend::TensorType> in_types, out_types;
  for (const Tensor& t : inputs) in_types.push_back({t.dtype(), t.shape()});
  for (const Tensor& t : outputs) out_types.push_back({t.dtype(), t.shape()});
  const loom::backend::PreparedKernel kernel(*def, *prim, in_types, out_types,
                                             loom::backend::cpu_backend());
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    kernel.run(inputs, outputs);
    benchmark::DoNotOptimize(outputs[0].raw_data());
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double calls = std::max(1.0, static_cast<double>(state.iterations()));
  state.counters["wall_us"] = wall * 1e6 / calls;
  state.counters["ns/elem"] = wall * 1e9 / calls / static_cast<double>(x.numel());
}

void register_pools() {
  for (const PoolShape& p : kPools) {
    for (const char* op : {"MaxPool", "MaxPoolGrad", "AvgPool", "AvgPoolGrad"}) {
      benchmark::RegisterBenchmark((std::string(op) + "/" + p.name).c_str(),
                                   [p, op](benchmark::State& s) { run_pool(s, op, p); });
    }
  }
}
// ---- end of pooling

void register_all() {
  for (const Dense& d : kDense) {
    benchmark::RegisterBenchmark((std::string("MatMul/") + d.name).c_str(), [d](benchmark::State& s) {
      run_kernel(s, "MatMul", {}, {random_tensor({d.batch, d.in}, 1), random_tensor({d.in, d.out}, 2)},
                 2.0 * static_cast<double>(d.batch * d.in * d.out));
    });
  }
  for (const Conv& c : kConvs) {
    const std::int64_t oh = out_size(c.h, c), ow = out_size(c.w, c);
    const double flops = 2.0 * static_cast<double>(c.n * c.o * oh * ow * c.c * c.k * c.k);
    benchmark::RegisterBenchmark((std::string("Conv2D/") + c.name).c_str(), [=](benchmark::State& s) {
      run_kernel(s, "Conv2D", conv_attrs(c),
                 {random_tensor({c.n, c.c, c.h, c.w}, 3), random_tensor({c.o, c.c, c.k, c.k}, 4)}, flops);
    });
    benchmark::RegisterBenchmark((std::string("Conv2DBackpropInput/") + c.name).c_str(),
                                 [=](benchmark::State& s) {
      auto attrs = conv_attrs(c);
      attrs["input_size"] = Value::ints({c.n, c.c, c.h, c.w});
      run_kernel(s, "Conv2DBackpropInput", attrs,
                 {random_tensor({c.n, c.o, oh, ow}, 5), random_tensor({c.o, c.c, c.k, c.k}, 4)}, flops);
    });
    benchmark::RegisterBenchmark((std::string("Conv2DBackpropFilter/") + c.name).c_str(),
                                 [=](benchmark::State& s) {
      auto attrs = conv_attrs(c);
      attrs["filter_size"] = Value::ints({c.o, c.c, c.k, c.k});
      run_kernel(s, "Conv2DBackpropFilter", attrs,
                 {random_tensor({c.n, c.o, oh, ow}, 5), random_tensor({c.n, c.c, c.h, c.w}, 3)}, flops);
    });
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  register_pools();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
