// loom_bench_step_profile: where a training step's time and memory go, per op type.
//
//   loom_bench_step_profile --model lenet --batch 32 --steps 100 --threads 2
//   loom_bench_step_profile --model resnet50 --imagenet --batch 8 --steps 2
//
// Builds the recipe's network and one TrainOneStepCell (as loom_bench_train does), runs warm-up
// steps, then `steps` steps with an observer on the step (runtime/observer.h) and prints, per
// primitive: launches per step, total µs per step and µs per launch, sorted by time; then the
// number of launches, the planned arena, the sum of intermediates and the peak RSS.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "core/random/random.h"
#include "core/ir/error.h"
#include "runtime/executable.h"
#include "runtime/observer.h"
#include "models/resnet/resnet.h"
#include "models/zoo.h"
#include "nn/context.h"
#include "nn/loss.h"
#include "nn/train.h"

// "VmRSS / VmHWM" of this process now, in MiB (Linux /proc/self/status).
std::string rss_now() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return "?";
  char line[256];
  long rss = 0, hwm = 0;
  while (std::fgets(line, sizeof line, f)) {
    std::sscanf(line, "VmRSS: %ld kB", &rss);
    std::sscanf(line, "VmHWM: %ld kB", &hwm);
  }
  std::fclose(f);
  char buf[64];
  std::snprintf(buf, sizeof buf, "RSS %.0f MiB (peak %.0f)", rss / 1024.0, hwm / 1024.0);
  return buf;
}

int main(int argc, char** argv) {
  std::string model = "lenet";
  std::int64_t batch = 32;
  int steps = 100, threads = 0;
  bool imagenet = false;
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--imagenet") {
      imagenet = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) { std::cerr << k << " needs a value\n"; return 2; }
    const std::string v = argv[i + 1];
    if (k == "--model") model = v;
    else if (k == "--batch") batch = std::stoll(v);
    else if (k == "--steps") steps = std::stoi(v);
    else if (k == "--threads") threads = std::stoi(v);
    else { std::cerr << "unknown option " << k << "\n"; return 2; }
  }
  if (threads > 0) setenv("LOOM_NUM_THREADS", std::to_string(threads).c_str(), 1);
  try {
    using namespace loom;
    const models::Recipe& r = models::recipe(model);
    random::seed_all(1);
    nn::set_context_mode(nn::ExecMode::kGraph);
    // --imagenet: a ResNet in its ImageNet layout (3×224×224, 1000 classes) instead of the
    // recipe's 32×32 one.
    const bool in1k = imagenet && model.rfind("resnet", 0) == 0;
    auto net = in1k ? std::shared_ptr<nn::Cell>(models::make_resnet(
                          std::stoi(model.substr(6)),
                          {.num_classes = 1000, .in_channels = 3,
                           .layout = models::ResNetLayout::kImageNet}))
                    : r.make_network({.dataset = r.defaults.dataset});
    const Shape sample = in1k ? Shape{3, 224, 224} : r.input_shape(r.defaults.dataset);
    Shape shape{batch};
    shape.insert(shape.end(), sample.begin(), sample.end());
    Tensor x(DType::kFloat32, shape);
    Tensor y(DType::kInt32, {batch});
    random::RandomStream rng("bench/data");
    rng.fill_normal(x, 0.0, 1.0);
    for (std::int64_t i = 0; i < batch; ++i) y.data<std::int32_t>()[i] = static_cast<int>(i % 10);
    auto with_loss = std::make_shared<nn::WithLossCell>(
        net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true));
    nn::TrainOneStepCell step(with_loss, r.defaults.optimizer);
    net->set_train(true);
    std::printf("network and data made: %s\n", rss_now().c_str());
    step.step(x, y);
    std::printf("compile %.1f ms; after the first step: %s\n", step.compile_seconds() * 1e3,
                rss_now().c_str());
    step.step(x, y);
    std::printf("after the second step: %s\n", rss_now().c_str());
    struct Acc { std::int64_t n = 0, ns = 0; };
    // Per-op launch times, from an observer on the step (runtime/observer.h).
    struct Times : runtime::Observer {
      std::map<std::string, Acc> acc;
      std::int64_t total_ns = 0;
      void after_launch(const runtime::LaunchEvent& e) override {
        if (e.depth > 0) return;  // nested plans are inside their If / While
        Acc& a = acc[std::string(e.op)];
        ++a.n;
        a.ns += e.elapsed_ns;
        total_ns += e.elapsed_ns;
      }
    };
    auto times = std::make_shared<Times>();
    step.add_observer(times);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step.step(x, y);
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    step.remove_observer(times.get());
    std::map<std::string, Acc>& acc = times->acc;
    const std::int64_t total_ns = times->total_ns;
    std::vector<std::pair<std::string, Acc>> v(acc.begin(), acc.end());
    std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.second.ns > b.second.ns; });
    std::printf("%-28s %8s %10s %10s %6s\n", "op", "n/step", "us/step", "us/launch", "%");
    for (auto& [op, a] : v) {
      std::printf("%-28s %8.1f %10.1f %10.2f %6.1f\n", op.c_str(), double(a.n) / steps,
                  a.ns / 1e3 / steps, double(a.ns) / 1e3 / double(a.n),
                  100.0 * double(a.ns) / double(total_ns));
    }
    {
      // The compile()/plan phase alone, again on the step graph the cell compiled (its part of
      // compile_seconds; the rest is tracing, autodiff, inference and the passes).
      const auto c0 = std::chrono::steady_clock::now();
      auto again = runtime::compile(*step.step_graph());
      const double ms =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count() * 1e3;
      std::printf("runtime::compile of the step graph alone: %.1f ms (%zu launches)\n", ms,
                  again->launches().size());
    }
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    const runtime::Executable* exe = step.last_executable();
    std::printf("launches %zu  kernels %.1f us/step  wall %.1f us/step  (%.0f images/s)\n",
                exe->launches().size(), total_ns / 1e3 / steps, wall * 1e6 / steps,
                batch * steps / wall);
    std::printf("arena %.2f MiB  sum of intermediates %.2f MiB  in-place %zu  donations in place "
                "%zu copies %zu  peak RSS %.1f MiB\n",
                exe->peak_bytes() / 1048576.0, exe->sum_of_intermediate_bytes() / 1048576.0,
                exe->num_in_place(), exe->donations_in_place(), exe->donation_copies(),
                ru.ru_maxrss / 1024.0);
  } catch (const loom::Error& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
