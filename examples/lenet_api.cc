// LeNet-5 on Fashion-MNIST through the C++ API, as a MindSpore user writes it in Python:
// a network, a loss, an optimizer object with parameter groups and a learning-rate schedule,
// nn::Model::fit with a validation set, and an observer on the compiled step that adds up
// where one training step's kernel time goes (by role: forward, backward, optimizer; and by Cell).
//
//   build/bin/loom_example_lenet [train samples] [epochs]     (default: 60000, 2)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/random/random.h"
#include "models/lenet/dataset.h"
#include "models/lenet/lenet.h"
#include "nn/callback.h"
#include "nn/loss.h"
#include "nn/metrics.h"
#include "nn/model.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "runtime/observer.h"

using namespace loom;

namespace {

// Kernel time by role and by Cell, over the launches it is enabled for.
class KernelTime : public runtime::Observer {
 public:
  bool enabled = false;
  std::map<std::string, double> by_role_us, by_cell_us;

  void after_launch(const runtime::LaunchEvent& e) override {
    if (!enabled) return;
    const double us = static_cast<double>(e.elapsed_ns) / 1e3;
    by_role_us[std::string(ir::role_name(e.debug.role))] += us;
    // A gradient node counts for the Cell of the forward node it differentiates.
    const std::string& scope = e.debug.role == ir::Role::kBackward ? e.debug.forward
                                                                    : e.debug.scope;
    by_cell_us[cell_of(scope)] += us;
  }

 private:
  // "WithLossCell/_backbone/conv1/Conv2D" -> "conv1"; "Momentum/fc3.bias" -> "Momentum".
  static std::string cell_of(const std::string& scope) {
    if (scope.empty()) return "(no scope)";
    std::string s = scope;
    for (const char* prefix : {"WithLossCell/_backbone/", "WithLossCell/"}) {
      if (s.rfind(prefix, 0) == 0) {
        s = s.substr(std::string(prefix).size());
        break;
      }
    }
    return s.substr(0, s.find('/'));
  }
};

// Turns the observer on for the steps of one epoch.
class ObserveEpoch : public nn::Callback {
 public:
  ObserveEpoch(KernelTime& k, std::int64_t epoch) : k_(k), epoch_(epoch) {}
  void on_train_step_begin(nn::RunContext& rc) override { k_.enabled = rc.cur_epoch_num == epoch_; }
  void on_train_step_end(nn::RunContext& rc) override {
    if (k_.enabled) ++steps;
    k_.enabled = false;
  }
  std::int64_t steps = 0;

 private:
  KernelTime& k_;
  std::int64_t epoch_;
};

class PrintEpoch : public nn::Callback {
 public:
  void on_train_epoch_end(nn::RunContext& rc) override {
    std::printf("epoch %lld: train loss %.4f, test accuracy %.4f, test loss %.4f\n",
                static_cast<long long>(rc.cur_epoch_num), rc.epoch_loss_mean,
                rc.metrics.at("accuracy"), rc.metrics.at("loss"));
  }
};

}  // namespace

int main(int argc, char** argv) {
  const std::int64_t samples = argc > 1 ? std::atoll(argv[1]) : 60000;
  const std::int64_t epochs = argc > 2 ? std::atoll(argv[2]) : 2;
  if (samples < 32 || epochs < 1) {
    std::fprintf(stderr, "usage: %s [train samples >= 32] [epochs >= 1]\n", argv[0]);
    return 2;
  }
  try {
    random::seed_all(1);
    auto net = std::make_shared<models::LeNet5>();
    auto loss = std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(/*sparse=*/true);

    // MindSpore: nn.Momentum([{'params': biases, 'weight_decay': 0.0}, {'params': others}],
    //                        learning_rate=cosine_decay_lr(...), momentum=0.9, weight_decay=1e-4)
    const std::int64_t steps_per_epoch = samples / 32;
    optim::Momentum::Options o;
    o.learning_rate = optim::cosine_decay_lr(0.001, 0.02, epochs * steps_per_epoch,
                                             steps_per_epoch, epochs);
    o.momentum = 0.9;
    o.weight_decay = 1e-4;
    o.groups = {{.params = {"fc1.bias", "fc2.bias", "fc3.bias"}, .weight_decay = 0.0},
                {.params = {"conv1.weight", "conv2.weight", "fc1.weight", "fc2.weight",
                            "fc3.weight"}}};
    auto optimizer = std::make_shared<optim::Momentum>(o);
    std::printf("optimizer: %s\n", optimizer->describe().c_str());

    nn::Model model(net, loss, optimizer,
                    {{"accuracy", std::make_shared<nn::Accuracy>()},
                     {"loss", std::make_shared<nn::Loss>()}});
    auto kernel_time = std::make_shared<KernelTime>();
    model.add_observer(kernel_time);

    models::lenet::DatasetOptions d;
    d.num_samples = samples;
    auto train = models::lenet::create_train_dataset(d);
    d.num_samples = 0;
    auto test = models::lenet::create_test_dataset(d);

    ObserveEpoch observe(*kernel_time, epochs);  // the last epoch: warm caches, no compilation
    PrintEpoch print;
    model.fit(epochs, train, test, {&observe, &print});

    const nn::TrainStats& s = model.train_stats();
    std::printf("%lld steps, %.0f images/s in training steps, compile %.1f ms\n",
                static_cast<long long>(s.steps), static_cast<double>(s.samples) / s.step_seconds,
                s.compile_seconds * 1e3);

    double total = 0;
    for (const auto& [role, us] : kernel_time->by_role_us) total += us;
    std::printf("kernel time per step (epoch %lld, %lld steps): %.1f us\n",
                static_cast<long long>(epochs), static_cast<long long>(observe.steps),
                total / static_cast<double>(observe.steps));
    for (const auto& [role, us] : kernel_time->by_role_us) {
      std::printf("  %-10s %7.1f us  %5.1f%%\n", role.c_str(),
                  us / static_cast<double>(observe.steps), 100 * us / total);
    }
    std::vector<std::pair<double, std::string>> cells;
    for (const auto& [cell, us] : kernel_time->by_cell_us) cells.emplace_back(us, cell);
    std::sort(cells.rbegin(), cells.rend());
    std::printf("by Cell (forward and backward together):\n");
    for (const auto& [us, cell] : cells) {
      std::printf("  %-10s %7.1f us  %5.1f%%\n", cell.c_str(),
                  us / static_cast<double>(observe.steps), 100 * us / total);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom_example_lenet: %s\n", e.what());
    return 1;
  }
  return 0;
}
