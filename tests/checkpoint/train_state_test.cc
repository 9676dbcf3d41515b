// checkpoint/train_state.h: ModelCheckpoint's files, the newest-checkpoint lookup, and exact
// resume: a run stopped anywhere and resumed in fresh objects from its newest checkpoint ends
// with bitwise the weights, moving statistics, Dropout keys and optimizer states of a run never
// stopped (Momentum and Adam, a shuffling pipeline, BatchNorm and Dropout in the network).
#include "checkpoint/train_state.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/random/random.h"
#include "core/ir/error.h"
#include "tests/temp_dir.h"
#include "data/dataset.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/model.h"

namespace loom::checkpoint {
namespace {

namespace fs = std::filesystem;
using loom::testing::TempDir;


constexpr std::int64_t kRows = 40, kBatch = 8;  // 5 steps per epoch

// Conv → BatchNorm → ReLU → Flatten → Dropout → Dense on 1×4×4 images, 3 classes.
std::shared_ptr<nn::SequentialCell> make_net() {
  auto net = std::make_shared<nn::SequentialCell>();
  net->append(std::make_shared<nn::Conv2d>(nn::Conv2dOptions(1, 2, 3).pad_mode("same")))
      .append(std::make_shared<nn::BatchNorm2d>(2))
      .append(std::make_shared<nn::ReLU>())
      .append(std::make_shared<nn::Flatten>())
      .append(std::make_shared<nn::Dropout>(0.25))
      .append(std::make_shared<nn::Dense>(32, 3));
  return net;
}

data::DatasetPtr make_dataset() {
  Tensor x(DType::kFloat32, {kRows, 1, 4, 4});
  Tensor y(DType::kInt32, {kRows});
  for (std::int64_t i = 0; i < x.numel(); ++i) x.set(i, std::sin(0.37 * static_cast<double>(i)));
  for (std::int64_t i = 0; i < kRows; ++i) y.set(i, static_cast<double>((i * 7) % 3));
  return data::TensorSlicesDataset({"image", "label"}, {x, y})->shuffle()->batch(kBatch, true);
}

nn::OptimizerSpec optimizer(nn::OptimizerKind kind) {
  const bool adam = kind == nn::OptimizerKind::kAdam || kind == nn::OptimizerKind::kAdamW;
  return {.kind = kind, .learning_rate = adam ? 0.01 : 0.1, .weight_decay = adam ? 0.01 : 0.0};
}

struct Session {
  std::shared_ptr<nn::SequentialCell> net;
  std::unique_ptr<nn::Model> model;
  data::DatasetPtr ds;
};

// A fresh "process": seed, network, pipeline and model made in the same order.
Session fresh(nn::OptimizerKind kind) {
  random::seed_all(5, /*deterministic=*/true);
  Session r;
  r.net = make_net();
  r.ds = make_dataset();
  r.model = std::make_unique<nn::Model>(
      r.net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true), optimizer(kind));
  return r;
}

// Everything a run's state is made of, by name.
std::map<std::string, Tensor> state_of(Session& r) {
  std::map<std::string, Tensor> out;
  for (auto& [name, p] : r.net->parameters_and_names()) out[name] = p->value.clone();
  for (const auto& [name, t] : r.model->train_network()->states()) out[name] = t.clone();
  return out;
}

class StopAt : public nn::Callback {
 public:
  explicit StopAt(std::int64_t step) : step_(step) {}
  void on_train_step_end(nn::RunContext& rc) override {
    if (rc.cur_step_num == step_) rc.request_stop();
  }

 private:
  std::int64_t step_;
};

class ResumeTest : public ::testing::TestWithParam<nn::OptimizerKind> {};

TEST_P(ResumeTest, AStoppedRunResumedFromItsNewestCheckpointIsBitwiseTheSame) {
  Session straight = fresh(GetParam());
  straight.model->train(3, straight.ds);
  const auto want = state_of(straight);
  ASSERT_EQ(straight.model->train_network()->num_steps(), 15);

  for (std::int64_t stop : {3, 5, 12}) {  // mid-epoch, at an epoch's end, in the last epoch
    SCOPED_TRACE("stopped after step " + std::to_string(stop));
    TempDir dir;
    {
      Session first = fresh(GetParam());
      ModelCheckpoint ckpt("net", dir.path(), {.save_checkpoint_steps = 1, .keep_checkpoint_max = 2});
      StopAt stop_at(stop);
      first.model->train(3, first.ds, {&ckpt, &stop_at});
    }
    const auto latest = latest_checkpoint(dir.path(), "net");
    ASSERT_TRUE(latest.has_value());
    Session second = fresh(GetParam());
    const ResumePoint r = restore_training_state(*second.model, load_checkpoint(*latest));
    EXPECT_EQ(r.global_step, stop);
    EXPECT_EQ(r.epoch, stop / 5);
    EXPECT_EQ(r.index, stop % 5);
    second.model->train(3, second.ds, {}, {.initial_epoch = r.epoch, .start = {r.epoch, r.index}});
    const auto got = state_of(second);
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [name, t] : want) {
      ASSERT_TRUE(got.count(name)) << name;
      EXPECT_TRUE(got.at(name).bitwise_equal(t)) << name;
    }
  }
}

// Every optimizer's state (SGD's stat, Adam's beta powers...) resumes bitwise.
INSTANTIATE_TEST_SUITE_P(Optimizers, ResumeTest,
                         ::testing::Values(nn::OptimizerKind::kMomentum, nn::OptimizerKind::kSGD,
                                           nn::OptimizerKind::kAdam, nn::OptimizerKind::kAdamW),
                         [](const auto& info) {
                           return std::string(optim::kind_name(info.param));
                         });

TEST(ModelCheckpoint, NamesKeepsTheNewestAndSavesAtTheEnd) {
  TempDir dir;
  Session r = fresh(nn::OptimizerKind::kMomentum);
  ModelCheckpoint ckpt("lenet", dir.path(), {.save_checkpoint_steps = 2, .keep_checkpoint_max = 3});
  r.model->train(2, r.ds, {&ckpt});  // steps 1..10; saves at 2, 4, 6, 8, 10
  std::set<std::string> files;
  for (const auto& e : fs::directory_iterator(dir.path())) files.insert(e.path().filename().string());
  EXPECT_EQ(files, (std::set<std::string>{"lenet-2_1.ckpt", "lenet-2_3.ckpt", "lenet-2_5.ckpt"}));
  EXPECT_EQ(ckpt.latest(), dir.path() + "/lenet-2_5.ckpt");

  const Checkpoint ck = load_checkpoint(ckpt.latest());
  std::vector<std::string> names;
  for (const auto& [name, t] : ck.tensors) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "0.weight", "1.gamma", "1.beta", "1.moving_mean", "1.moving_variance",
                       "4.key", "5.weight", "5.bias", "global_step", "learning_rate", "momentum",
                       "moments.0.weight", "moments.1.gamma", "moments.1.beta", "moments.5.weight",
                       "moments.5.bias", "epoch_num", "step_num", "loom.seed", "loom.data_epoch",
                       "loom.data_index"}));
  EXPECT_EQ(ck.find("global_step")->dtype(), DType::kInt32);
  EXPECT_EQ(ck.find("global_step")->get(0), 10);
  EXPECT_EQ(ck.find("epoch_num")->get(0), 2);
  EXPECT_EQ(ck.find("step_num")->get(0), 10);
  EXPECT_EQ(ck.find("loom.data_epoch")->get(0), 2);
  EXPECT_EQ(ck.find("loom.data_index")->get(0), 0);

  // A second callback in the same directory takes the next free prefix, as MindSpore does.
  ModelCheckpoint again("lenet", dir.path());
  EXPECT_EQ(again.prefix(), "lenet_1");
  // The end of training saves when the last step was not saved.
  Session r2 = fresh(nn::OptimizerKind::kMomentum);
  ModelCheckpoint end_only("end", dir.path(), {.save_checkpoint_steps = 0});
  r2.model->train(1, r2.ds, {&end_only});
  EXPECT_EQ(end_only.latest(), dir.path() + "/end-1_5.ckpt");
  EXPECT_TRUE(fs::exists(end_only.latest()));
}

TEST(LatestCheckpoint, PicksTheLargestEpochAndStepOfThePrefix) {
  TempDir dir;
  const NamedTensors one{{"a", Tensor::scalar(DType::kFloat32, 1)}};
  for (const char* f : {"net-1_5.ckpt", "net-2_1.ckpt", "net-1_10.ckpt", "net_1-2_3.ckpt",
                        "other-9_9.ckpt", "net-x_1.ckpt", "notes.txt"}) {
    save_checkpoint(one, dir.path() + "/" + f);
  }
  EXPECT_EQ(latest_checkpoint(dir.path(), "net"), dir.path() + "/net_1-2_3.ckpt");
  EXPECT_EQ(latest_checkpoint(dir.path(), "other"), dir.path() + "/other-9_9.ckpt");
  EXPECT_EQ(latest_checkpoint(dir.path()), dir.path() + "/other-9_9.ckpt");
  EXPECT_EQ(latest_checkpoint(dir.path(), "none"), std::nullopt);
  EXPECT_EQ(latest_checkpoint(dir.path() + "/missing"), std::nullopt);
}

TEST(RestoreTrainingState, RefusesAnotherSeedAndMissingParameters) {
  TempDir dir;
  std::string path;
  {
    Session r = fresh(nn::OptimizerKind::kMomentum);
    ModelCheckpoint ckpt("n", dir.path(), {.save_checkpoint_steps = 0});
    r.model->train(1, r.ds, {&ckpt});
    path = ckpt.latest();
  }
  Checkpoint ck = load_checkpoint(path);
  {
    Session r = fresh(nn::OptimizerKind::kMomentum);
    random::seed_all(6, true);
    try {
      restore_training_state(*r.model, ck);
      FAIL();
    } catch (const ValueError& e) {
      EXPECT_EQ(std::string(e.what()),
                "restore_training_state: the checkpoint was written by a run with seed 5, this "
                "run has seed 6 (the data order and random draws would differ)");
    }
  }
  ck.tensors.erase(ck.tensors.begin() + 1);  // "1.gamma"
  Session r = fresh(nn::OptimizerKind::kMomentum);
  try {
    restore_training_state(*r.model, ck);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_EQ(std::string(e.what()),
              "restore_training_state: the checkpoint has no value for parameter '1.gamma'");
  }
  Checkpoint weights_only;
  weights_only.tensors.emplace_back("0.weight", Tensor(DType::kFloat32, {2, 1, 3, 3}));
  EXPECT_THROW(restore_training_state(*r.model, weights_only), ValueError);
}

}  // namespace
}  // namespace loom::checkpoint
