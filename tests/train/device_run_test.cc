// Training, evaluation, checkpoints, summaries, the debugging tools and MindIR on a device other
// than the CPU, through loom's device-generic code only: the runs below name Device::kCUDA, which
// in this binary is the tests' fake GPU (tests/fake_device.h) — the CPU kernels, on memory the
// host may not touch outside the backend's kernels and copies. A host read of a parameter, a
// state, a loss or a launch's tensor that skipped backend::to_host faults (or throws) here as it
// would go wrong on a GPU, and since the kernels are the CPU's, every result must equal the CPU
// run's bitwise: weights, losses, accuracies, checkpoint files, summaries, dumps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "checkpoint/checkpoint.h"
#include "core/ir/abstract.h"
#include "mindir/mindir.h"
#include "models/zoo.h"
#include "nn/callback.h"
#include "nn/cell.h"
#include "nn/context.h"
#include "nn/train.h"
#include "summary/reader.h"
#include "tests/fake_device.h"
#include "tests/temp_dir.h"
#include "train/run.h"

namespace loom::train {
namespace {

namespace fs = std::filesystem;
using loom::testing::TempDir;

loom::testing::FakeDevice& fake() { return loom::testing::fake_device(); }

// LeNet for `steps` steps of batch 32 (one epoch), deterministic, on `device`.
RunConfig lenet(Device device, std::int64_t steps) {
  fake();  // registered before any run names the CUDA device
  RunConfig c;
  c.model = "lenet";
  c.epochs = 1;
  c.batch_size = 32;
  c.train_samples = 32 * steps;
  c.test_samples = 64;
  c.seed = 7;
  c.seed_given = true;
  c.deterministic = true;
  c.threads = 2;  // the binary's first use of the thread pool: every run the same
  c.device = device;
  return c;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// After every step: where the parameters and the optimizer's states live, and that the loss the
// callbacks get is a host tensor.
class WhereThingsLive : public nn::Callback {
 public:
  explicit WhereThingsLive(Device device) : device_(device) {}
  void on_train_step_end(nn::RunContext& rc) override {
    ++steps;
    for (auto& [name, p] : rc.network->parameters_and_names()) {
      if (p->value.device() != device_) elsewhere.push_back(name);
    }
    for (const auto& [name, t] : rc.train_network->states()) {
      if (t.device() != device_) elsewhere.push_back(name);
    }
    // The loss stays where the step made it (Model reads a device's losses 64 steps at a time).
    if (rc.loss.device() != device_) elsewhere.push_back("RunContext::loss");
  }
  int steps = 0;
  std::vector<std::string> elsewhere;

 private:
  Device device_;
};

TEST(DeviceTraining, LeNetOnTheFakeGpuEqualsTheCpuBitwise) {
  const RunResult cpu = run_training(lenet(Device::kCPU, 20));
  const long launches = fake().launches(), uploads = fake().to_device();
  const long recordings = fake().recordings(), replays = fake().replays();
  const long batches = fake().uploads(), slot_allocations = fake().upload_allocations();
  WhereThingsLive where(Device::kCUDA);
  const RunResult gpu = run_training(lenet(Device::kCUDA, 20), {.callbacks = {&where}});
  EXPECT_EQ(where.steps, 20);
  // The batches went through an uploader: 20 training batches and the 2 evaluation batches,
  // each into one of two slots of (data, label) buffers. The recording keeps the slot it was
  // made with, so that slot takes new buffers once: 4 + 2 for training, 4 for evaluation.
  EXPECT_EQ(fake().uploads(), batches + 22);
  EXPECT_EQ(fake().upload_allocations(), slot_allocations + 10);
  // The training step recorded once (at its second run) and replayed from then on, with each
  // new batch copied into the recorded buffers (as a CUDA graph is).
  EXPECT_GE(fake().recordings(), recordings + 1);
  EXPECT_GE(fake().replays(), replays + 19);
  EXPECT_TRUE(where.elsewhere.empty()) << where.elsewhere.front();
  EXPECT_GT(fake().launches(), launches + 20 * 30);  // every kernel of every step on the device
  // The weights and states once, then each step's batch, label and learning rate: no more.
  EXPECT_GE(fake().to_device(), uploads + 20 * 3);
  EXPECT_EQ(gpu.weights_sha256, cpu.weights_sha256);
  EXPECT_EQ(gpu.train_loss, cpu.train_loss);
  EXPECT_EQ(gpu.test_accuracy, cpu.test_accuracy);
  EXPECT_EQ(gpu.test_loss, cpu.test_loss);
  EXPECT_TRUE(std::isfinite(gpu.train_loss));
}

TEST(DeviceTraining, CheckpointsSavedOnTheFakeGpuResumeBitwise) {
  TempDir dir("loom_device_ckpt");
  // Two epochs of 10 steps, a checkpoint after each, on the CPU and on the device.
  auto two_epochs = [&](Device device, const std::string& sub) {
    RunConfig c = lenet(device, 10);
    c.epochs = 2;
    c.ckpt_dir = dir / sub;
    c.save_steps = 10;
    return c;
  };
  const RunResult cpu = run_training(two_epochs(Device::kCPU, "cpu"));
  const RunResult gpu = run_training(two_epochs(Device::kCUDA, "gpu"));
  EXPECT_EQ(gpu.weights_sha256, cpu.weights_sha256);
  // MindSpore's format, the same bytes wherever the weights lived.
  for (const char* f : {"lenet-1_10.ckpt", "lenet-2_10.ckpt"}) {
    SCOPED_TRACE(f);
    const std::string a = file_bytes(dir / ("cpu/" + std::string(f)));
    EXPECT_FALSE(a.empty());
    EXPECT_TRUE(a == file_bytes(dir / ("gpu/" + std::string(f))));
  }
  // Resumed on the device from its own epoch-1 checkpoint: the uninterrupted run's weights.
  RunConfig r = two_epochs(Device::kCUDA, "resumed");
  r.resume = dir / "gpu/lenet-1_10.ckpt";
  WhereThingsLive where(Device::kCUDA);
  const RunResult resumed = run_training(r, {.callbacks = {&where}});
  EXPECT_EQ(resumed.initial_step, 10);
  EXPECT_EQ(where.steps, 10);
  EXPECT_TRUE(where.elsewhere.empty()) << where.elsewhere.front();
  EXPECT_EQ(resumed.weights_sha256, gpu.weights_sha256);
  EXPECT_EQ(resumed.test_accuracy, gpu.test_accuracy);
  EXPECT_TRUE(file_bytes(dir / "resumed/lenet-2_10.ckpt") ==
              file_bytes(dir / "gpu/lenet-2_10.ckpt"));
  // And across devices: the device's checkpoint resumed on the CPU.
  RunConfig on_cpu = two_epochs(Device::kCPU, "resumed_cpu");
  on_cpu.resume = dir / "gpu/lenet-1_10.ckpt";
  EXPECT_EQ(run_training(on_cpu).weights_sha256, cpu.weights_sha256);
}

TEST(DeviceEvaluation, EvalOnTheFakeGpuGivesTheCpusAccuracy) {
  TempDir dir("loom_device_eval");
  RunConfig t = lenet(Device::kCPU, 8);
  t.ckpt_dir = dir.path();
  const RunResult trained = run_training(t);
  ASSERT_FALSE(trained.checkpoint.empty());
  for (const bool with_ckpt : {true, false}) {
    SCOPED_TRACE(with_ckpt ? "--ckpt" : "untrained");
    EvalConfig e;
    e.model = "lenet";
    e.test_samples = 96;
    e.seed = 7;
    e.deterministic = true;
    e.threads = 2;
    if (with_ckpt) e.ckpt = trained.checkpoint;
    const EvalResult cpu = run_evaluation(e);
    e.device = Device::kCUDA;
    const long launches = fake().launches();
    const EvalResult gpu = run_evaluation(e);
    EXPECT_GT(fake().launches(), launches);
    EXPECT_EQ(gpu.test_accuracy, cpu.test_accuracy);
    EXPECT_EQ(gpu.test_loss, cpu.test_loss);
    EXPECT_EQ(gpu.weights_sha256, cpu.weights_sha256);
    if (with_ckpt) { EXPECT_EQ(gpu.weights_sha256, trained.weights_sha256); }
  }
}

// Every summary value of an event folder by (step, tag): scalars, histograms, images.
std::map<std::pair<std::int64_t, std::string>, std::string> summary_values(const std::string& dir) {
  std::map<std::pair<std::int64_t, std::string>, std::string> out;
  for (const std::string& f : summary::list_event_files(dir)) {
    for (const summary::EventRecord& r : summary::read_event_file(f)) {
      for (const auto& v : r.event.summary().value()) {
        if (v.has_simple_value() || v.has_histo() || v.has_image()) {
          out[{r.event.step(), v.tag()}] = v.SerializeAsString();
        }
      }
    }
  }
  return out;
}

// The bytes of every `ext` file under dir by its path, a dump file's timestamp left out
// ({op_type}.{op_name}.0.0.{timestamp}.{io}.{slot}...).
std::map<std::string, std::string> dump_files(const std::string& dir,
                                              const std::string& ext = ".npy") {
  std::map<std::string, std::string> out;
  static const std::regex stamp(R"(\.0\.0\.\d+\.)");
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file() || e.path().extension() != ext) continue;
    const std::string rel = fs::relative(e.path(), dir).string();
    out[std::regex_replace(rel, stamp, ".0.0.T.")] = file_bytes(e.path().string());
  }
  return out;
}

TEST(DeviceDebugging, SummariesNumericsWatchpointsDumpsAndProfilesOnTheFakeGpu) {
  TempDir dir("loom_device_debug");
  auto config = [&](Device device, const std::string& sub) {
    RunConfig c = lenet(device, 3);
    c.test_samples = 32;
    c.summary_dir = dir / (sub + "/summary");
    c.summary_freq = 1;
    c.summary_collect = {"+gradients"};
    c.debug.check_numerics = true;
    c.debug.watch =
        "gradient_vanishing(abs_mean_lt=1);weight_change_too_large(abs_mean_update_ratio_gt=0);"
        "tensor_too_large(max_gt=0)@ReLU";
    c.debug.dump_dir = dir / (sub + "/dump");
    c.debug.profile_dir = dir / (sub + "/profile");
    c.debug.profile_start_step = 2;
    c.debug.profile_stop_step = 3;
    c.save_graphs_dir = dir / (sub + "/graphs");  // the dumps print the weights' values
    c.launch_log = dir / (sub + "/launches.csv");
    return c;
  };
  const RunResult cpu = run_training(config(Device::kCPU, "cpu"));
  const RunResult gpu = run_training(config(Device::kCUDA, "gpu"));
  EXPECT_EQ(gpu.weights_sha256, cpu.weights_sha256);
  EXPECT_GT(gpu.watch_hits, 0);
  EXPECT_EQ(gpu.watch_hits, cpu.watch_hits);
  EXPECT_EQ(gpu.profile_steps, 2);
  EXPECT_GT(gpu.dump_bytes, 0u);
  EXPECT_EQ(gpu.dump_bytes, cpu.dump_bytes);

  // The summaries: loss, learning rate, weight and gradient histograms, gradient norms, the
  // input images — the same values.
  const auto s_cpu = summary_values(dir / "cpu/summary");
  const auto s_gpu = summary_values(dir / "gpu/summary");
  EXPECT_GT(s_cpu.size(), 10u);
  EXPECT_EQ(s_gpu.size(), s_cpu.size());
  for (const auto& [key, value] : s_cpu) {
    auto it = s_gpu.find(key);
    ASSERT_TRUE(it != s_gpu.end()) << "step " << key.first << " " << key.second;
    EXPECT_TRUE(it->second == value) << "step " << key.first << " " << key.second;
  }
  for (const char* tag : {"loss", "learning_rate", "conv1.weight/auto", "input_data/auto"}) {
    EXPECT_TRUE(std::any_of(s_gpu.begin(), s_gpu.end(),
                            [&](const auto& kv) { return kv.first.second == tag; }))
        << tag;
  }
  // The graph dumps of every stage, with the weights' values: the same text.
  const auto g_cpu = dump_files(dir / "cpu/graphs", ".ir");
  EXPECT_GT(g_cpu.size(), 10u);
  EXPECT_TRUE(g_cpu == dump_files(dir / "gpu/graphs", ".ir"));
  EXPECT_NE(g_cpu.at("train_step/00_traced.ir").find("value=["), std::string::npos);
  EXPECT_FALSE(gpu.launch_log.empty());
  // The dumps: every launch's tensors, the same files with the same bytes.
  const auto d_cpu = dump_files(dir / "cpu/dump");
  const auto d_gpu = dump_files(dir / "gpu/dump");
  EXPECT_GT(d_cpu.size(), 50u);
  EXPECT_EQ(d_gpu.size(), d_cpu.size());
  for (const auto& [name, bytes] : d_cpu) {
    auto it = d_gpu.find(name);
    ASSERT_TRUE(it != d_gpu.end()) << name;
    EXPECT_TRUE(it->second == bytes) << name;
  }
}

// --check-numerics stops a run on the device at the first NaN, as on the CPU.
TEST(DeviceDebugging, CheckNumericsFindsTheFirstNanOnTheFakeGpu) {
  TempDir dir("loom_device_numerics");
  const fs::path cwd = fs::current_path();
  fs::current_path(dir.path());  // the checker's numerics_dump/ goes here
  struct Back {
    fs::path to;
    ~Back() { fs::current_path(to); }
  } back{cwd};
  auto message = [](Device device) -> std::string {
    RunConfig c = lenet(device, 3);
    c.lr = 1e30;  // diverges at once
    c.debug.check_numerics = true;
    try {
      run_training(c);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  const std::string cpu = message(Device::kCPU);
  EXPECT_NE(cpu, "no error");
  EXPECT_EQ(message(Device::kCUDA), cpu);
}

// PyNative (op by op, the interpreter's constants and the eager bprop rules' scalars copied to
// the device as they join a device op): the CPU's PyNative run, bitwise.
TEST(DeviceTraining, PyNativeOnTheFakeGpuEqualsTheCpuBitwise) {
  RunConfig c = lenet(Device::kCPU, 3);
  c.mode = nn::ExecMode::kPyNative;
  const RunResult cpu = run_training(c);
  c.device = Device::kCUDA;
  const long launches = fake().launches();
  WhereThingsLive where(Device::kCUDA);
  const RunResult gpu = run_training(c, {.callbacks = {&where}});
  EXPECT_GT(fake().launches(), launches + 3 * 30);
  EXPECT_TRUE(where.elsewhere.empty()) << where.elsewhere.front();
  EXPECT_EQ(gpu.weights_sha256, cpu.weights_sha256);
  EXPECT_EQ(gpu.train_loss, cpu.train_loss);
  EXPECT_EQ(gpu.test_accuracy, cpu.test_accuracy);
}

// MindIR: a network whose weights live on the device exports the file the CPU network exports;
// a GraphCell moved to the device gives the CPU's output.
TEST(DeviceMindIR, ExportAndRunOnTheFakeGpu) {
  TempDir dir("loom_device_mindir");
  const models::Recipe& r = models::recipe("lenet");
  const Shape shape{2, 1, 32, 32};
  std::shared_ptr<nn::Cell> on_cpu = r.make_network({.dataset = "fashion-mnist"});
  std::shared_ptr<nn::Cell> on_gpu = r.make_network({.dataset = "fashion-mnist"});
  on_gpu->to_device(fake());
  for (auto& [name, p] : on_gpu->parameters_and_names()) {
    EXPECT_EQ(p->value.device(), Device::kCUDA) << name;
  }
  const std::vector<ir::AbstractPtr> in{ir::Abstract::tensor(DType::kFloat32, shape)};
  mindir::export_mindir(*on_cpu, in, dir / "cpu.mindir");
  mindir::export_mindir(*on_gpu, in, dir / "gpu.mindir");
  EXPECT_TRUE(file_bytes(dir / "cpu.mindir") == file_bytes(dir / "gpu.mindir"));

  Tensor x(DType::kFloat32, shape);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.set(i, static_cast<double>(i % 17) / 17.0 - 0.4);
  mindir::GraphCell cpu_cell = mindir::load_mindir(dir / "gpu.mindir");
  const Tensor want = cpu_cell(x);
  mindir::GraphCell gpu_cell = mindir::load_mindir(dir / "gpu.mindir");
  gpu_cell.to_device(fake());
  const long launches = fake().launches();
  const Tensor got = gpu_cell(x);
  EXPECT_GT(fake().launches(), launches);
  EXPECT_EQ(got.device(), Device::kCUDA);
  EXPECT_TRUE(backend::to_host(got).bitwise_equal(want));
  // A device input is taken as it is.
  EXPECT_TRUE(backend::to_host(gpu_cell(backend::to_device(x, fake()))).bitwise_equal(want));
}

// A graph-mode call of a Cell compiled for the device: inputs copied there, the Parameters moved
// there once, the output left there; PyNative assignments and predictions likewise.
TEST(DeviceCells, CompiledCallsMoveTheirParametersOnce) {
  fake();
  nn::set_context_mode(nn::ExecMode::kGraph);
  nn::set_context_device(Device::kCUDA);
  std::shared_ptr<nn::Cell> net =
      models::recipe("lenet").make_network({.dataset = "fashion-mnist"});
  nn::set_context_device(Device::kCPU);
  std::shared_ptr<nn::Cell> ref =
      models::recipe("lenet").make_network({.dataset = "fashion-mnist"});
  Tensor x(DType::kFloat32, {1, 1, 32, 32});
  for (std::int64_t i = 0; i < x.numel(); ++i) x.set(i, static_cast<double>(i % 5) * 0.1);
  const Tensor want = (*ref)(ops::Var(ir::Value::tensor(x))).value().as_tensor();
  nn::set_context_device(Device::kCUDA);
  net->set_train(false);
  const Tensor y = (*net)(ops::Var(ir::Value::tensor(x))).value().as_tensor();
  EXPECT_EQ(y.device(), Device::kCUDA);
  EXPECT_TRUE(backend::to_host(y).bitwise_equal(want));
  std::vector<const void*> where;
  for (auto& [name, p] : net->parameters_and_names()) {
    EXPECT_EQ(p->value.device(), Device::kCUDA) << name;
    where.push_back(p->value.raw_data());
  }
  (*net)(ops::Var(ir::Value::tensor(x)));
  std::size_t i = 0;
  for (auto& [name, p] : net->parameters_and_names()) EXPECT_EQ(p->value.raw_data(), where[i++]);
  // Checkpoints read and write them in place on the device.
  TempDir dir("loom_device_cells");
  checkpoint::save_checkpoint(*net, dir / "net.ckpt");
  checkpoint::save_checkpoint(*ref, dir / "ref.ckpt");
  EXPECT_TRUE(file_bytes(dir / "net.ckpt") == file_bytes(dir / "ref.ckpt"));
  const auto [missing, unused] =
      checkpoint::load_param_into_net(*net, checkpoint::load_checkpoint(dir / "ref.ckpt").tensors);
  EXPECT_TRUE(missing.empty());
  i = 0;
  for (auto& [name, p] : net->parameters_and_names()) {
    EXPECT_EQ(p->value.device(), Device::kCUDA) << name;
    EXPECT_EQ(p->value.raw_data(), where[i++]) << name;
  }
  nn::set_context_device(Device::kCPU);
}

}  // namespace
}  // namespace loom::train
