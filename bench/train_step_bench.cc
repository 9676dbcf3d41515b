// loom_bench_train: training-step throughput of a model-zoo network, data already in memory.
//
//   loom_bench_train --model lenet --batch 32 --steps 200 --repeats 5 --threads 2
//   loom_bench_train --model resnet50 --imagenet --batch 8 --steps 2 --repeats 3
//   loom_bench_train --model lenet --check-numerics    (debug/numerics.h on every launch)
//   loom_bench_train --model lenet --profile           (debug/profiler.h recording every step)
//   loom_bench_train --model lenet --profile-dir D     (the same, its files written into D:
//                                                       `loom profile show D`, bench/step_breakdown.py D)
//   loom_bench_train --model lenet --batch 256 --device GPU [--host-batch]
//   loom_bench_train --model resnet18 --batch 32 --amp O2:bfloat16   (mixed precision,
//                                      core/passes/amp.h; "plan_mib": the step's planned arena)
//
// Builds the recipe's network (models/zoo.h) under seed_all(1), one TrainOneStepCell with the
// recipe's optimizer (constant learning rate), and a fixed random batch (normal images, uniform
// labels); runs `warmup` steps (the first compiles), then `repeats` timed runs of `steps` steps.
// Prints one JSON line: images/s per repeat, the median and the spread (max/min), the compile
// time of the step graph and the peak RSS. bench/train_vs_torch.py runs it next to PyTorch.
// --device GPU: the step on the CUDA backend (a CUDA graph after the warm-up), the batch copied
// to the device once and kept there as PyTorch's benchmark keeps its batch (--host-batch: the
// host batch passed at every step, copied through the uploader's pinned buffers); each timed run
// ends with a device synchronize, and the JSON adds device_peak_mib (the memory pool's high-water
// mark over the timed steps: the warm-up's compile and cuDNN's algorithm searches excluded, as
// PyTorch's figure after reset_peak_memory_stats()).
//   bench/gpu_vs_torch.py runs it next to PyTorch on a GPU.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/random/random.h"
#include "core/ir/error.h"
#include "debug/numerics.h"
#include "debug/profiler.h"
#include "models/resnet/resnet.h"
#include "models/zoo.h"
#include "nn/context.h"
#include "nn/loss.h"
#include "nn/train.h"
#include "runtime/compiled_function.h"
#include "runtime/executable.h"

namespace {

struct Args {
  std::string model = "lenet";
  std::string dataset;
  std::int64_t batch = 32;
  int steps = 100;
  int warmup = 3;
  int repeats = 5;
  int threads = 0;
  bool deterministic = false;
  bool imagenet = false;  // a ResNet in its ImageNet layout: 3×224×224 inputs, 1000 classes
  std::string passes;     // the step's pipeline instead of the training one ("" = it)
  bool check_numerics = false;  // a debug::NumericsChecker observing the step
  std::string device = "CPU";   // or GPU
  bool host_batch = false;      // GPU: the batch from host memory at every step
  bool profile = false;         // a debug::Profiler recording every timed step
  std::string profile_dir;      // --profile-dir: ... and its files written there
  std::string amp;              // --amp LEVEL[:DTYPE]: mixed precision ("" none)
};

[[noreturn]] void usage(const std::string& msg) {
  std::cerr << "loom_bench_train: " << msg
            << "\nusage: loom_bench_train [--model NAME] [--dataset D] [--batch B] [--steps N] "
               "[--warmup W] [--repeats R] [--threads T] [--deterministic] [--imagenet]\n"
               "       [--passes LIST] [--check-numerics] [--profile] [--profile-dir D] "
               "[--device CPU|GPU] [--host-batch] [--amp LEVEL[:DTYPE]]\n";
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(k + " needs a value");
      return argv[++i];
    };
    if (k == "--model") a.model = value();
    else if (k == "--dataset") a.dataset = value();
    else if (k == "--batch") a.batch = std::stoll(value());
    else if (k == "--steps") a.steps = std::stoi(value());
    else if (k == "--warmup") a.warmup = std::stoi(value());
    else if (k == "--repeats") a.repeats = std::stoi(value());
    else if (k == "--threads") a.threads = std::stoi(value());
    else if (k == "--deterministic") a.deterministic = true;
    else if (k == "--imagenet") a.imagenet = true;
    else if (k == "--passes") a.passes = value();
    else if (k == "--check-numerics") a.check_numerics = true;
    else if (k == "--profile") a.profile = true;
    else if (k == "--profile-dir") a.profile_dir = value();
    else if (k == "--device") a.device = value();
    else if (k == "--host-batch") a.host_batch = true;
    else if (k == "--amp") a.amp = value();
    else usage("unknown option " + k);
  }
  if (a.batch < 1 || a.steps < 1 || a.repeats < 1 || a.warmup < 1) usage("bad counts");
  if (!a.profile_dir.empty()) a.profile = true;
  if (a.device != "CPU" && a.device != "GPU") usage("--device: expected CPU or GPU, got " + a.device);
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  // The thread pool reads LOOM_NUM_THREADS when first used, which is below.
  if (a.threads > 0) setenv("LOOM_NUM_THREADS", std::to_string(a.threads).c_str(), 1);
  try {
    using namespace loom;
    const models::Recipe& r = models::recipe(a.model);
    const std::string dataset = a.dataset.empty() ? r.defaults.dataset : a.dataset;
    random::seed_all(1, a.deterministic);
    nn::set_context_mode(nn::ExecMode::kGraph);
    if (a.device == "GPU") nn::set_context_device(Device::kCUDA);  // ValueError without one
    backend::Backend& device = nn::context_backend();
    const bool in1k = a.imagenet && a.model.rfind("resnet", 0) == 0;
    if (a.imagenet && !in1k) usage("--imagenet needs a resnet model");
    auto net = in1k ? std::shared_ptr<nn::Cell>(models::make_resnet(
                          std::stoi(a.model.substr(6)),
                          {.num_classes = 1000, .in_channels = 3,
                           .layout = models::ResNetLayout::kImageNet}))
                    : r.make_network({.dataset = dataset});
    const Shape sample = in1k ? Shape{3, 224, 224} : r.input_shape(dataset);
    Shape shape{a.batch};
    shape.insert(shape.end(), sample.begin(), sample.end());
    Tensor x(DType::kFloat32, shape);
    Tensor y(DType::kInt32, {a.batch});
    random::RandomStream rng("bench/data");
    rng.fill_normal(x, 0.0, 1.0);
    const std::vector<float> u = rng.uniform(a.batch);
    for (std::int64_t i = 0; i < a.batch; ++i) {
      y.data<std::int32_t>()[i] = static_cast<std::int32_t>(
          u[static_cast<std::size_t>(i)] * (in1k ? 1000 : 10));
    }
    // The batch the steps read: resident on the device unless --host-batch.
    const Tensor xs = a.host_batch ? x : backend::to_device(x, device);
    const Tensor ys = a.host_batch ? y : backend::to_device(y, device);
    auto with_loss = std::make_shared<nn::WithLossCell>(
        net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true));
    nn::TrainOneStepCell step(with_loss, r.defaults.optimizer);
    if (!a.passes.empty()) step.compiled_function().set_passes(a.passes);
    if (a.check_numerics) step.add_observer(std::make_shared<debug::NumericsChecker>());
    if (!a.amp.empty()) {
      const std::size_t colon = a.amp.find(':');
      step.set_amp({.level = passes::amp_level_from_name(a.amp.substr(0, colon)),
                    .dtype = colon == std::string::npos
                                 ? DType::kFloat16
                                 : passes::amp_dtype_from_name(a.amp.substr(colon + 1))});
    }
    net->set_train(true);
    for (int i = 0; i < a.warmup; ++i) step.step(xs, ys);
    device.synchronize();
    device.reset_memory_high_water();  // the timed steps' peak, as PyTorch's benchmark reports
    // The profiler records each timed step as a window (start/stop), as --profile does for the
    // chosen steps; its files are not written (analyse() is not part of a step).
    std::shared_ptr<debug::Profiler> profiler;
    if (a.profile) {
      debug::ProfilerOptions po;
      if (!a.profile_dir.empty()) po.output_path = a.profile_dir;
      po.model = a.model;
      profiler = std::make_shared<debug::Profiler>(po);
      step.add_observer(profiler);
    }
    std::vector<double> rates;
    for (int rep = 0; rep < a.repeats; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < a.steps; ++i) {
        if (profiler) profiler->start();
        step.step(xs, ys);
        if (profiler) profiler->stop();
      }
      device.synchronize();  // a device's steps are only queued
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      rates.push_back(static_cast<double>(a.batch) * a.steps / s);
    }
    if (profiler && !a.profile_dir.empty()) profiler->analyse();
    std::vector<double> sorted = rates;
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted[sorted.size() / 2];
    // Peak RSS: VmHWM of this process image. ru_maxrss would do on its own, but Linux carries
    // it across exec, so under a parent such as train_vs_torch.py (Python with torch loaded,
    // ~230 MiB) it reports the parent's size.
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    long peak_kib = ru.ru_maxrss;
    if (FILE* f = std::fopen("/proc/self/status", "r")) {
      char line[256];
      while (std::fgets(line, sizeof line, f)) std::sscanf(line, "VmHWM: %ld kB", &peak_kib);
      std::fclose(f);
    }
    std::printf("{\"framework\": \"loom\", \"model\": \"%s\", \"batch\": %lld, \"steps\": %d, "
                "\"images_per_s\": [",
                a.model.c_str(), static_cast<long long>(a.batch), a.steps);
    for (std::size_t i = 0; i < rates.size(); ++i) std::printf("%s%.1f", i ? ", " : "", rates[i]);
    std::printf("], \"median\": %.1f, \"spread\": %.3f, \"compile_ms\": %.2f, "
                "\"peak_rss_mib\": %.1f, \"device\": \"%s\"",
                median, sorted.back() / sorted.front(), step.compile_seconds() * 1e3,
                static_cast<double>(peak_kib) / 1024.0, a.device.c_str());
    if (const runtime::Executable* exe = step.last_executable()) {
      std::printf(", \"plan_mib\": %.2f",
                  static_cast<double>(exe->peak_bytes()) / (1024.0 * 1024.0));
    }
    if (device.memory_high_water() >= 0) {
      std::printf(", \"device_peak_mib\": %.1f",
                  static_cast<double>(device.memory_high_water()) / (1024.0 * 1024.0));
    }
    std::printf("}\n");
  } catch (const loom::Error& e) {
    std::cerr << "loom_bench_train: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
