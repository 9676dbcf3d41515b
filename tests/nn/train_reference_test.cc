// TrainOneStepCell against PyTorch: ten steps of Momentum and of Adam on a 2-layer MLP and a
// small CNN with the sparse softmax cross-entropy, from the initial weights and data written by
// tests/nn/reference/train_reference.py (tests/ops/reference/data/train_mlp_cnn.txt; the script
// trains in float64 from float32-rounded values, so the reference is exact to well below float32
// resolution). Losses and final weights must agree to 1e-5 (relative above magnitude 1).
//
// Determinism: a seeded MLP trained 20 steps gives bitwise the same weights with LOOM_NUM_THREADS
// 1 and 2. The global pool's size is fixed per process, so the test runs this binary as a child
// once per thread count (the pattern of tests/nn/random_test.cc) and compares FNV-1a checksums.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/random/random.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/train.h"
#include "tests/ops/reference.h"

namespace loom::nn {
namespace {

constexpr int kSteps = 10;

std::shared_ptr<SequentialCell> make_mlp() {
  auto seq = std::make_shared<SequentialCell>();
  seq->append(std::make_shared<Dense>(8, 16))
      .append(std::make_shared<ReLU>())
      .append(std::make_shared<Dense>(16, 4));
  return seq;
}

std::shared_ptr<SequentialCell> make_cnn() {
  auto seq = std::make_shared<SequentialCell>();
  seq->append(std::make_shared<Conv2d>(Conv2dOptions(1, 4, 3).pad_mode("valid").has_bias(true)))
      .append(std::make_shared<ReLU>())
      .append(std::make_shared<MaxPool2d>(2, 2))
      .append(std::make_shared<Flatten>())
      .append(std::make_shared<Dense>(36, 3));
  return seq;
}

std::shared_ptr<WithLossCell> with_loss(std::shared_ptr<SequentialCell> backbone) {
  return std::make_shared<WithLossCell>(
      backbone, std::make_shared<SoftmaxCrossEntropyWithLogits>(/*sparse=*/true));
}

// Max of |got - want| / max(1, |want|).
double max_rel_diff(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  if (got.shape() != want.shape()) return INFINITY;
  double m = 0;
  for (std::int64_t i = 0; i < got.numel(); ++i) {
    const double w = want.get(i);
    m = std::max(m, std::abs(got.get(i) - w) / std::max(1.0, std::abs(w)));
  }
  return m;
}

void run_reference(const std::string& net_name, std::shared_ptr<SequentialCell> (*make)(),
                   const std::string& opt_name, const OptimizerSpec& opt) {
  static const std::map<std::string, Tensor> ref = testing::read_reference("train_mlp_cnn.txt");
  auto at = [&](const std::string& key) -> const Tensor& {
    auto it = ref.find(key);
    if (it == ref.end()) throw std::runtime_error("reference lacks " + key);
    return it->second;
  };
  auto net = with_loss(make());
  const auto params = net->parameters_and_names();
  ASSERT_FALSE(params.empty());
  for (auto& [name, p] : params) {
    const Tensor& init = at(net_name + ".init." + name);
    ASSERT_EQ(p->value.shape(), init.shape()) << name;
    p->value = Tensor::from_doubles(DType::kFloat32, init.shape(), init.to_doubles());
  }
  const Tensor& x = at(net_name + ".x");
  const Tensor& label = at(net_name + ".label");
  const Tensor& want_loss = at(net_name + "." + opt_name + ".loss");
  ASSERT_EQ(want_loss.numel(), kSteps);

  TrainOneStepCell train(net, opt);
  double loss_diff = 0;
  for (int s = 0; s < kSteps; ++s) {
    const double got = train.step(x, label).to_doubles()[0];
    const double want = want_loss.get(s);
    const double d = std::abs(got - want) / std::max(1.0, std::abs(want));
    loss_diff = std::max(loss_diff, d);
    EXPECT_LE(d, 1e-5) << net_name << " " << opt_name << " step " << s << ": loss " << got
                       << " vs torch " << want;
  }
  double weight_diff = 0;
  for (auto& [name, p] : params) {
    const Tensor& want = at(net_name + "." + opt_name + ".final." + name);
    const double d = max_rel_diff(p->value, want);
    weight_diff = std::max(weight_diff, d);
    EXPECT_LE(d, 1e-5) << net_name << " " << opt_name << " final " << name;
  }
  std::cout << "[ reference ] " << net_name << " " << opt_name << ": max loss diff " << loss_diff
            << ", max final weight diff " << weight_diff << "\n";
}

const OptimizerSpec kMomentum{.kind = OptimizerKind::kMomentum, .learning_rate = 0.01,
                              .momentum = 0.9};
const OptimizerSpec kAdam{.kind = OptimizerKind::kAdam, .learning_rate = 1e-3, .beta1 = 0.9,
                          .beta2 = 0.999, .eps = 1e-8};

TEST(TrainReferenceTest, MlpMomentumMatchesTorch) {
  run_reference("mlp", make_mlp, "momentum", kMomentum);
}
TEST(TrainReferenceTest, MlpAdamMatchesTorch) { run_reference("mlp", make_mlp, "adam", kAdam); }
TEST(TrainReferenceTest, CnnMomentumMatchesTorch) {
  run_reference("cnn", make_cnn, "momentum", kMomentum);
}
TEST(TrainReferenceTest, CnnAdamMatchesTorch) { run_reference("cnn", make_cnn, "adam", kAdam); }

// ---- Determinism across thread counts ----

std::uint64_t fnv1a(std::uint64_t h, const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

// seed_all(7, deterministic); the MLP from its seeded initializers; 20 Momentum then 20 Adam
// steps on fixed data (batch 256, so that the kernels' parallel loops have several chunks);
// FNV-1a of every loss and final weight's bytes. Restores seed 0, non-deterministic.
std::uint64_t train_checksum() {
  random::seed_all(7, /*deterministic=*/true);
  constexpr std::int64_t kBatch = 256;
  std::vector<double> xv(kBatch * 8), lv(kBatch);
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(0.37 * static_cast<double>(i));
  for (std::size_t i = 0; i < lv.size(); ++i) lv[i] = static_cast<double>((i * 7 + 3) % 4);
  const Tensor x = Tensor::from_doubles(DType::kFloat32, {kBatch, 8}, xv);
  const Tensor label = Tensor::from_doubles(DType::kInt32, {kBatch}, lv);
  std::uint64_t h = 14695981039346656037ull;
  for (const OptimizerSpec& opt : {kMomentum, kAdam}) {
    auto net = with_loss(make_mlp());
    TrainOneStepCell train(net, opt);
    for (int s = 0; s < 20; ++s) {
      const Tensor loss = train.step(x, label);
      h = fnv1a(h, loss.raw_data(), loss.nbytes());
    }
    for (auto& [name, p] : net->parameters_and_names()) {
      h = fnv1a(h, p->value.raw_data(), p->value.nbytes());
    }
  }
  random::seed_all(0, false);
  return h;
}

// The child process of DeterministicAcrossThreadCounts, which runs it through this binary
// (DISABLED_: not a test of its own, left out of plain runs and of ctest).
TEST(TrainReferenceTest, DISABLED_DeterminismChild) {
  const char* out = std::getenv("LOOM_NN_TRAIN_DETERMINISM_OUT");
  if (out == nullptr) {
    FAIL() << "run by DeterministicAcrossThreadCounts, which sets LOOM_NN_TRAIN_DETERMINISM_OUT";
  }
  std::ofstream(out) << train_checksum() << "\n";
}

TEST(TrainReferenceTest, DeterministicAcrossThreadCounts) {
  char exe[4096];
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  ASSERT_GT(len, 0);
  exe[len] = '\0';
  std::vector<std::uint64_t> sums;
  for (int threads : {1, 2}) {
    char tmpl[] = "/tmp/loom_nn_train_det_XXXXXX";
    const int fd = mkstemp(tmpl);
    ASSERT_GE(fd, 0);
    close(fd);
    const std::string cmd = "LOOM_NUM_THREADS=" + std::to_string(threads) +
                            " LOOM_NN_TRAIN_DETERMINISM_OUT='" + tmpl + "' '" + exe +
                            "' --gtest_also_run_disabled_tests"
                            " --gtest_filter=TrainReferenceTest.DISABLED_DeterminismChild"
                            " >/dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << threads << " threads";
    std::uint64_t sum = 0;
    std::ifstream(tmpl) >> sum;
    std::remove(tmpl);
    ASSERT_NE(sum, 0u) << threads << " threads: no checksum written";
    sums.push_back(sum);
  }
  EXPECT_EQ(sums[0], sums[1]) << "1 thread vs 2 threads";
  // And the same in this process (whatever its pool size).
  EXPECT_EQ(train_checksum(), sums[0]);
}

}  // namespace
}  // namespace loom::nn
