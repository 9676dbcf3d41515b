// nn/model.h, nn/metrics.h, nn/callback.h: the metrics on hand-made batches, LossMonitor's and
// TimeMonitor's output, the exact order of callback hooks and request_stop, and Model::train /
// eval / predict on a small synthetic problem: training reaches accuracy 1, a resumed run and a
// hand-written TrainOneStepCell loop give bitwise the same weights, graph-mode eval equals
// PyNative eval, eval leaves the training flags and the weights alone, TrainStats add up.
#include "nn/model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "core/random/random.h"
#include "core/ir/error.h"
#include "nn/context.h"
#include "nn/layers.h"
#include "nn/loss.h"

namespace loom::nn {
namespace {

Tensor f32(Shape shape, const std::vector<double>& v) {
  return Tensor::from_doubles(DType::kFloat32, std::move(shape), v);
}
Tensor i32(const std::vector<std::int32_t>& v) {
  return Tensor::from_vector<std::int32_t>({static_cast<std::int64_t>(v.size())}, v);
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// ---------------------------------------------------------------------------------------------
// Metrics

TEST(Metrics, AccuracyOfSparseLabelsWithArgmaxTiesToTheFirstIndex) {
  // Row 2 ties between classes 0 and 1: the prediction is 0 (numpy's argmax), so label 0 counts
  // as correct and row 3's tie, labelled 1, does not.
  const Tensor logits = f32({4, 3}, {0.1, 0.8, 0.1,   //
                                     2.0, 1.0, 0.5,   //
                                     0.7, 0.7, 0.1,   //
                                     0.3, 0.3, 0.3});
  Accuracy acc;
  acc.update({.loss = Tensor::scalar(DType::kFloat32, 0), .logits = logits,
              .label = i32({1, 0, 0, 1})});
  EXPECT_EQ(acc.correct(), 3);
  EXPECT_EQ(acc.total(), 4);
  EXPECT_EQ(acc.eval(), 0.75);

  // Accumulates over batches; Int64 labels.
  acc.update({.logits = f32({2, 3}, {0, 0, 1, 0, 1, 0}),
              .label = Tensor::from_vector<std::int64_t>({2}, {2, 0})});
  EXPECT_EQ(acc.eval(), 4.0 / 6.0);
  acc.clear();
  EXPECT_EQ(acc.total(), 0);
  acc.update({.logits = f32({1, 2}, {0, 1}), .label = i32({1})});
  EXPECT_EQ(acc.eval(), 1.0);
}

TEST(Metrics, AccuracyOfOneHotAndProbabilityLabels) {
  const Tensor logits = f32({3, 3}, {0.1, 0.8, 0.1, 2.0, 1.0, 0.5, 0.0, 0.2, 0.9});
  Accuracy acc;
  acc.update({.logits = logits, .label = f32({3, 3}, {0, 1, 0, 0, 0, 1, 0, 0, 1})});
  EXPECT_EQ(acc.eval(), 2.0 / 3.0);
  acc.clear();
  acc.update(
      {.logits = logits, .label = f32({3, 3}, {0.2, 0.7, 0.1, 0.5, 0.3, 0.2, 0.1, 0.1, 0.8})});
  EXPECT_EQ(acc.eval(), 1.0);
}

TEST(Metrics, AccuracyErrors) {
  Accuracy acc;
  EXPECT_THROW(acc.eval(), ValueError);
  EXPECT_EQ(error_of([&] { acc.eval(); }),
            "Accuracy.eval: expected samples accumulated by update(), got 0 (the accuracy of no "
            "samples can not be calculated)");
  EXPECT_THROW(acc.update({.logits = f32({2, 3}, std::vector<double>(6)), .label = i32({0})}),
               ShapeError);
  EXPECT_THROW(acc.update({.logits = f32({3}, {0, 1, 2}), .label = i32({0, 1, 2})}), ShapeError);
  EXPECT_THROW(
      acc.update({.logits = f32({2, 3}, std::vector<double>(6)), .label = f32({2}, {0, 1})}),
      TypeError);
  acc.update({.logits = f32({1, 2}, {0, 1}), .label = i32({1})});
  acc.clear();
  EXPECT_THROW(acc.eval(), ValueError);
}

TEST(Metrics, LossIsTheMeanWeightedByBatchSize) {
  Loss loss;
  EXPECT_THROW(loss.eval(), ValueError);
  loss.update({.loss = Tensor::scalar(DType::kFloat32, 1.0), .logits = f32({2, 1}, {0, 0})});
  loss.update({.loss = Tensor::scalar(DType::kFloat64, 4.0), .logits = f32({1, 1}, {0})});
  EXPECT_EQ(loss.eval(), 2.0);  // (1 × 2 + 4 × 1) / 3
  // The batch size from the label when there are no logits.
  loss.update({.loss = Tensor::scalar(DType::kFloat32, 0.5), .label = i32({0, 0, 0})});
  EXPECT_EQ(loss.eval(), 7.5 / 6.0);
  EXPECT_THROW(loss.update({.loss = f32({2}, {1, 2}), .logits = f32({2, 1}, {0, 0})}),
               ShapeError);
  loss.clear();
  EXPECT_THROW(loss.eval(), ValueError);
}

// ---------------------------------------------------------------------------------------------
// Callbacks

TEST(Callbacks, FormatNumpyFloatAsNumpyStr) {
  EXPECT_EQ(format_numpy_float(0.5f), "0.5");
  EXPECT_EQ(format_numpy_float(3.0f), "3.0");
  EXPECT_EQ(format_numpy_float(-2.0), "-2.0");
  EXPECT_EQ(format_numpy_float(0.0f), "0.0");
  EXPECT_EQ(format_numpy_float(0.1f), "0.1");
  EXPECT_EQ(format_numpy_float(static_cast<float>(1.0 / 3.0)), "0.33333334");
  EXPECT_EQ(format_numpy_float(1.0 / 3.0), "0.3333333333333333");
  EXPECT_EQ(format_numpy_float(12345.5f), "12345.5");
  EXPECT_EQ(format_numpy_float(1e10), "10000000000.0");
  EXPECT_EQ(format_numpy_float(1e16), "1e+16");
  EXPECT_EQ(format_numpy_float(1.5e-5f), "1.5e-05");
  EXPECT_EQ(format_numpy_float(0.0001), "0.0001");
  EXPECT_EQ(format_numpy_float(1.25e-100), "1.25e-100");
  EXPECT_EQ(format_numpy_float(std::numeric_limits<double>::quiet_NaN()), "nan");
  EXPECT_EQ(format_numpy_float(-std::numeric_limits<float>::infinity()), "-inf");
}

// Drives a callback through `epochs` epochs of `steps` steps with the given losses.
void drive(Callback& cb, std::int64_t epochs, std::int64_t steps,
           const std::vector<double>& losses, DType dtype = DType::kFloat32) {
  RunContext rc;
  rc.epoch_num = epochs;
  rc.batch_num = steps;
  cb.on_train_begin(rc);
  std::size_t k = 0;
  for (std::int64_t e = 1; e <= epochs; ++e) {
    rc.cur_epoch_num = e;
    rc.step_in_epoch = 0;
    cb.on_train_epoch_begin(rc);
    for (std::int64_t s = 1; s <= steps; ++s) {
      ++rc.cur_step_num;
      rc.step_in_epoch = s;
      cb.on_train_step_begin(rc);
      rc.loss = Tensor::scalar(dtype, losses[k++]);
      cb.on_train_step_end(rc);
    }
    cb.on_train_epoch_end(rc);
  }
  cb.on_train_end(rc);
}

TEST(Callbacks, LossMonitorPrintsInMindSporeFormat) {
  const std::vector<double> losses{2.5, 1.25, 0.75, 0.5, 0.375, 0.1};
  {
    std::ostringstream out;
    LossMonitor m(1, out);
    drive(m, 2, 3, losses);
    EXPECT_EQ(out.str(),
              "epoch: 1 step: 1, loss is 2.5\n"
              "epoch: 1 step: 2, loss is 1.25\n"
              "epoch: 1 step: 3, loss is 0.75\n"
              "epoch: 2 step: 1, loss is 0.5\n"
              "epoch: 2 step: 2, loss is 0.375\n"
              "epoch: 2 step: 3, loss is 0.1\n");
  }
  {
    // Every 2 global steps, across the epoch boundary; a Float64 loss prints as a double.
    std::ostringstream out;
    LossMonitor m(2, out);
    drive(m, 2, 3, losses, DType::kFloat64);
    EXPECT_EQ(out.str(),
              "epoch: 1 step: 2, loss is 1.25\n"
              "epoch: 2 step: 1, loss is 0.5\n"
              "epoch: 2 step: 3, loss is 0.1\n");
  }
  {
    std::ostringstream out;
    LossMonitor m(0, out);  // never prints
    drive(m, 2, 3, losses);
    EXPECT_EQ(out.str(), "");
  }
  {
    // A Float32 loss of 0.1 (not exactly 0.1) prints as numpy prints np.float32(0.1).
    std::ostringstream out;
    LossMonitor m(4, out);
    drive(m, 1, 4, {1, 2, 3, 0.30000001192092896});
    EXPECT_EQ(out.str(), "epoch: 1 step: 4, loss is 0.3\n");
  }
  EXPECT_THROW(LossMonitor(-1), ValueError);
}

TEST(Callbacks, LossMonitorRaisesOnNaNAndInf) {
  std::ostringstream out;
  LossMonitor m(1, out);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(error_of([&] { drive(m, 2, 3, {1, 1, 1, 1, nan, 1}); }),
            "epoch: 2 step: 2. Invalid loss, terminating training.");
  LossMonitor m2(100, out);  // raised even when the step is not printed
  EXPECT_EQ(error_of([&] { drive(m2, 1, 3, {1, std::numeric_limits<double>::infinity(), 1}); }),
            "epoch: 1 step: 2. Invalid loss, terminating training.");
}

TEST(Callbacks, LossMonitorPrintsMetricsAtEpochEnd) {
  std::ostringstream out;
  LossMonitor m(0, out);
  RunContext rc;
  rc.cur_epoch_num = 3;
  m.on_train_epoch_end(rc);
  EXPECT_EQ(out.str(), "");
  rc.metrics = {{"accuracy", 0.5}, {"loss", 0.25}};
  m.on_train_epoch_end(rc);
  EXPECT_EQ(out.str(), "Eval result: epoch 3, metrics: {'accuracy': 0.5, 'loss': 0.25}\n");
}

TEST(Callbacks, TimeMonitorPrintsEpochAndStepTimes) {
  std::ostringstream out;
  TimeMonitor m(out);
  drive(m, 2, 3, std::vector<double>(6, 1.0));
  EXPECT_TRUE(std::regex_match(
      out.str(), std::regex("(epoch time: [0-9]+\\.[0-9]{3} ms, per step time: [0-9]+\\.[0-9]{3} "
                            "ms\n){2}")))
      << out.str();
  EXPECT_GE(m.last_epoch_seconds(), 0.0);
}

// ---------------------------------------------------------------------------------------------
// Model on a synthetic problem: 2-D points, class 1 when x0 + 2 x1 > 0 (with a margin).

constexpr std::int64_t kRows = 48;

struct Problem {
  Tensor x;  // (kRows, 2) Float32
  Tensor y;  // (kRows) Int32
};

Problem make_problem() {
  std::vector<double> x;
  std::vector<std::int32_t> y;
  for (int i = 0; static_cast<std::int64_t>(y.size()) < kRows; ++i) {
    const double a = 1.5 * std::sin(1.3 * i + 0.2), b = 1.5 * std::cos(2.1 * i + 0.7);
    const double s = a + 2 * b;
    if (std::fabs(s) < 0.3) continue;
    x.push_back(a);
    x.push_back(b);
    y.push_back(s > 0 ? 1 : 0);
  }
  return {f32({kRows, 2}, x), Tensor::from_vector<std::int32_t>({kRows}, y)};
}

data::DatasetPtr dataset(std::int64_t batch, bool shuffle = false, bool drop_remainder = false) {
  const Problem p = make_problem();
  data::DatasetPtr ds = data::TensorSlicesDataset({"data", "label"}, {p.x, p.y});
  if (shuffle) ds = ds->shuffle();
  return ds->batch(batch, drop_remainder);
}

std::shared_ptr<Cell> make_net() {
  auto net = std::make_shared<SequentialCell>();
  net->append(std::make_shared<Dense>(2, 8))
      .append(std::make_shared<ReLU>())
      .append(std::make_shared<Dense>(8, 2));
  return net;
}

std::shared_ptr<Cell> make_loss() {
  return std::make_shared<SoftmaxCrossEntropyWithLogits>(/*sparse=*/true);
}

constexpr OptimizerSpec kMomentum{.kind = OptimizerKind::kMomentum, .learning_rate = 0.1};

std::vector<Tensor> weights_of(Cell& net) {
  std::vector<Tensor> out;
  for (auto& [name, p] : net.parameters_and_names()) out.push_back(p->value.clone());
  return out;
}

void expect_bitwise_equal(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(a[i].bitwise_equal(b[i])) << "weight " << i;
  }
}

// Records every hook as "<hook> <epoch>/<step in epoch>/<global step>".
class Recorder : public Callback {
 public:
  explicit Recorder(std::int64_t stop_at = -1) : stop_at_(stop_at) {}
  std::vector<std::string> calls;
  std::vector<double> step_losses, epoch_means;
  std::vector<std::int64_t> batch_sizes;

  void on_train_begin(RunContext& rc) override { add("train_begin", rc); }
  void on_train_epoch_begin(RunContext& rc) override { add("epoch_begin", rc); }
  void on_train_step_begin(RunContext& rc) override { add("step_begin", rc); }
  void on_train_step_end(RunContext& rc) override {
    add("step_end", rc);
    step_losses.push_back(rc.loss.get(0));
    batch_sizes.push_back(rc.batch_size);
    EXPECT_GE(rc.step_seconds, 0.0);
    EXPECT_GE(rc.data_wait_seconds, 0.0);
    EXPECT_NE(rc.network, nullptr);
    EXPECT_NE(rc.train_network, nullptr);
    if (rc.cur_step_num == stop_at_) rc.request_stop();
  }
  void on_train_epoch_end(RunContext& rc) override {
    add("epoch_end", rc);
    epoch_means.push_back(rc.epoch_loss_mean);
  }
  void on_train_end(RunContext& rc) override { add("train_end", rc); }
  void on_eval_begin(RunContext& rc) override { add("eval_begin", rc); }
  void on_eval_end(RunContext& rc) override {
    add("eval_end", rc);
    eval_metrics = rc.metrics;
  }
  std::map<std::string, double> eval_metrics;

 private:
  void add(const std::string& hook, const RunContext& rc) {
    calls.push_back(hook + " " + std::to_string(rc.cur_epoch_num) + "/" +
                    std::to_string(rc.step_in_epoch) + "/" + std::to_string(rc.cur_step_num));
  }
  std::int64_t stop_at_;
};

// 12 rows in batches of 4: 3 steps per epoch.
data::DatasetPtr small_dataset() {
  const Problem p = make_problem();
  return data::TensorSlicesDataset({"data", "label"}, {p.x, p.y})->take(12)->batch(4);
}

TEST(Model, CallbackHooksInOrder) {
  random::seed_all(1);
  Model model(make_net(), make_loss(), kMomentum);
  Recorder rec;
  model.train(2, small_dataset(), {&rec});
  const std::vector<std::string> expected{
      "train_begin 0/0/0",                                         //
      "epoch_begin 1/0/0",                                         //
      "step_begin 1/1/1", "step_end 1/1/1", "step_begin 1/2/2",    //
      "step_end 1/2/2",   "step_begin 1/3/3", "step_end 1/3/3",    //
      "epoch_end 1/3/3",                                           //
      "epoch_begin 2/0/3",                                         //
      "step_begin 2/1/4", "step_end 2/1/4", "step_begin 2/2/5",    //
      "step_end 2/2/5",   "step_begin 2/3/6", "step_end 2/3/6",    //
      "epoch_end 2/3/6",                                           //
      "train_end 2/3/6"};
  EXPECT_EQ(rec.calls, expected);
  EXPECT_EQ(rec.batch_sizes, std::vector<std::int64_t>(6, 4));
  ASSERT_EQ(rec.step_losses.size(), 6u);
  ASSERT_EQ(rec.epoch_means.size(), 2u);
  EXPECT_DOUBLE_EQ(rec.epoch_means[0],
                   (rec.step_losses[0] + rec.step_losses[1] + rec.step_losses[2]) / 3);
  EXPECT_DOUBLE_EQ(rec.epoch_means[1],
                   (rec.step_losses[3] + rec.step_losses[4] + rec.step_losses[5]) / 3);
}

TEST(Model, RequestStopEndsTrainingAfterTheStep) {
  random::seed_all(1);
  Model model(make_net(), make_loss(), kMomentum);
  Recorder rec(/*stop_at=*/2);
  model.train(3, small_dataset(), {&rec});
  const std::vector<std::string> expected{
      "train_begin 0/0/0", "epoch_begin 1/0/0", "step_begin 1/1/1", "step_end 1/1/1",
      "step_begin 1/2/2",  "step_end 1/2/2",    "epoch_end 1/2/2",  "train_end 1/2/2"};
  EXPECT_EQ(rec.calls, expected);
  EXPECT_EQ(model.train_stats().steps, 2);
  EXPECT_EQ(model.train_network()->num_steps(), 2);
}

TEST(Model, TrainReachesFullAccuracyOnASeparableProblem) {
  random::seed_all(5);
  Model model(make_net(), make_loss(), kMomentum,
              {{"accuracy", std::make_shared<Accuracy>()}, {"loss", std::make_shared<Loss>()}});
  EXPECT_EQ(model.train_network(), nullptr);
  const data::DatasetPtr ds = dataset(8, /*shuffle=*/true);
  const std::map<std::string, double> before = model.eval(dataset(16));
  std::ostringstream log;
  LossMonitor monitor(6, log);
  model.train(30, ds, {&monitor});
  const std::map<std::string, double> after = model.eval(dataset(16));
  EXPECT_EQ(after.at("accuracy"), 1.0);
  EXPECT_LT(after.at("loss"), 0.5 * before.at("loss"));
  EXPECT_LT(after.at("loss"), 0.1);
  ASSERT_NE(model.train_network(), nullptr);
  EXPECT_EQ(model.train_network()->num_steps(), 30 * 6);
  EXPECT_EQ(model.train_network()->num_compilations(), 1u);
  // One line per epoch (6 steps each), the last one for epoch 30.
  const std::string s = log.str();
  EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 30);
  EXPECT_NE(s.find("epoch: 30 step: 6, loss is "), std::string::npos) << s;

  // predict: the logits of the trained network, argmax = labels.
  const Problem p = make_problem();
  const Tensor logits = model.predict(p.x);
  ASSERT_EQ(logits.shape(), (Shape{kRows, 2}));
  Accuracy acc;
  acc.update({.logits = logits, .label = p.y});
  EXPECT_EQ(acc.eval(), 1.0);
}

TEST(Model, EvalWithCallbacksAndErrors) {
  random::seed_all(2);
  Model model(make_net(), make_loss(), kMomentum, {{"acc", std::make_shared<Accuracy>()}});
  Recorder rec;
  const std::map<std::string, double> r = model.eval(small_dataset(), {&rec});
  EXPECT_EQ(rec.calls, (std::vector<std::string>{"eval_begin 1/0/0", "eval_end 1/3/3"}));
  EXPECT_EQ(rec.eval_metrics, r);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_GE(r.at("acc"), 0.0);

  // An empty dataset feeds no metric: Accuracy's ValueError.
  EXPECT_THROW(model.eval(small_dataset()->take(0)), ValueError);
  Model no_metrics(make_net(), make_loss(), kMomentum);
  EXPECT_THROW(no_metrics.eval(small_dataset()), ValueError);
  EXPECT_THROW(model.train(1, nullptr), ValueError);
  EXPECT_THROW(model.train(1, small_dataset(), {}, {.initial_epoch = 2}), ValueError);
  EXPECT_EQ(error_of([&] {
              model.train(2, small_dataset(), {}, {.initial_epoch = 1, .start = {0, 1}});
            }),
            "Model.train: expected the start position's epoch to equal initial_epoch (1), got 0");
  EXPECT_THROW(model.train(2, small_dataset(), {}, {.start = {0, 4}}), ValueError);  // past 3
  EXPECT_EQ(model.train_network(), nullptr);  // nothing was built by the failed calls
}

TEST(Model, NaNLossStopsTrainingWithLossMonitorsError) {
  random::seed_all(3);
  Problem p = make_problem();
  p.x.set(2 * 5, std::numeric_limits<double>::quiet_NaN());  // row 5: batch 2 of 4-row batches
  const data::DatasetPtr ds =
      data::TensorSlicesDataset({"data", "label"}, {p.x, p.y})->take(12)->batch(4);
  Model model(make_net(), make_loss(), kMomentum);
  std::ostringstream out;
  LossMonitor monitor(1, out);
  EXPECT_EQ(error_of([&] { model.train(2, ds, {&monitor}); }),
            "epoch: 1 step: 2. Invalid loss, terminating training.");
  EXPECT_EQ(model.train_stats().steps, 2);
}

// Resume: 2 epochs straight == 1 epoch, then epoch 2 with initial_epoch = 1 == stopped after step
// 3 of epoch 1, then resumed at (epoch 0, row 3); over a shuffling dataset, bitwise.
TEST(Model, ResumeGivesBitwiseTheSameWeights) {
  const std::int64_t batches = kRows / 8;
  auto run = [&](const std::function<void(Model&, const data::DatasetPtr&)>& train) {
    random::seed_all(11, /*deterministic=*/true);
    auto net = make_net();
    const data::DatasetPtr ds = dataset(8, /*shuffle=*/true);
    Model model(net, make_loss(), kMomentum);
    train(model, ds);
    return weights_of(*net);
  };
  const std::vector<Tensor> straight = run([](Model& m, const data::DatasetPtr& ds) {
    m.train(2, ds);
    EXPECT_EQ(m.train_stats().steps, 2 * kRows / 8);
  });
  const std::vector<Tensor> by_epoch = run([&](Model& m, const data::DatasetPtr& ds) {
    m.train(1, ds);
    Recorder rec;
    m.train(2, ds, {&rec}, {.initial_epoch = 1});
    EXPECT_EQ(m.train_stats().steps, batches);
    ASSERT_FALSE(rec.calls.empty());
    EXPECT_EQ(rec.calls.front(), "train_begin 1/0/6");
    EXPECT_EQ(rec.calls[1], "epoch_begin 2/0/6");
    EXPECT_EQ(rec.calls.back(), "train_end 2/6/12");
  });
  const std::vector<Tensor> mid_epoch = run([&](Model& m, const data::DatasetPtr& ds) {
    Recorder stop(/*stop_at=*/3);
    m.train(2, ds, {&stop});
    EXPECT_EQ(m.train_stats().steps, 3);
    Recorder rec;
    m.train(2, ds, {&rec}, {.initial_epoch = 0, .start = {0, 3}});
    EXPECT_EQ(m.train_stats().steps, 2 * batches - 3);
    ASSERT_GE(rec.calls.size(), 3u);
    EXPECT_EQ(rec.calls[1], "epoch_begin 1/3/3");
    EXPECT_EQ(rec.calls[2], "step_begin 1/4/4");
  });
  expect_bitwise_equal(straight, by_epoch);
  expect_bitwise_equal(straight, mid_epoch);
  // Training moved the weights (the comparison is not vacuous).
  random::seed_all(11, true);
  const std::vector<Tensor> initial = weights_of(*make_net());
  EXPECT_FALSE(initial[0].bitwise_equal(straight[0]));
}

// Model.train == TrainOneStepCell::step over the same batches, and train() keeps the network's
// initial values (WithLossCell's renaming would re-draw them).
TEST(Model, TrainEqualsAHandWrittenStepLoop) {
  random::seed_all(21, /*deterministic=*/true);
  auto net_a = make_net();
  const std::vector<Tensor> initial = weights_of(*net_a);
  const data::DatasetPtr ds = dataset(8, /*shuffle=*/true);
  Model model(net_a, make_loss(), kMomentum);
  model.train(3, ds);
  const std::vector<Tensor> by_model = weights_of(*net_a);

  auto net_b = make_net();  // drawn under a different seed state: set to net_a's initial values
  auto with_loss = std::make_shared<WithLossCell>(net_b, make_loss());
  {
    std::size_t k = 0;
    for (auto& [name, p] : net_b->parameters_and_names()) p->value = initial[k++].clone();
  }
  net_b->set_train(true);
  TrainOneStepCell step(with_loss, kMomentum);
  data::Iterator it(ds, {.num_epochs = 3});
  std::int64_t steps = 0;
  while (std::optional<data::Row> row = it.next()) {
    step.step((*row)[0], (*row)[1]);
    ++steps;
  }
  EXPECT_EQ(steps, 3 * kRows / 8);
  expect_bitwise_equal(by_model, weights_of(*net_b));
}

// The step cell takes the global mode in force at the first train(); PyNative (interpreted) steps
// give the weights graph-mode steps give.
TEST(Model, TrainInPyNativeModeEqualsGraphMode) {
  auto run = [](ExecMode mode) {
    ModeScope scope(mode);
    random::seed_all(9, /*deterministic=*/true);
    auto net = make_net();
    Model model(net, make_loss(), kMomentum);
    model.train(2, dataset(8, /*shuffle=*/true));
    EXPECT_EQ(model.train_network()->mode(), mode);
    return weights_of(*net);
  };
  const std::vector<Tensor> graph = run(ExecMode::kGraph);
  const std::vector<Tensor> pynative = run(ExecMode::kPyNative);
  ASSERT_EQ(graph.size(), pynative.size());
  for (std::size_t i = 0; i < graph.size(); ++i) {
    const std::vector<double> a = graph[i].to_doubles(), b = pynative[i].to_doubles();
    for (std::size_t j = 0; j < a.size(); ++j) EXPECT_NEAR(a[j], b[j], 1e-6) << i << ", " << j;
  }
}

TEST(Model, EvalInGraphModeEqualsPyNative) {
  random::seed_all(4);
  auto net = make_net();
  Model model(net, make_loss(), kMomentum,
              {{"accuracy", std::make_shared<Accuracy>()}, {"loss", std::make_shared<Loss>()}});
  model.train(2, dataset(8));
  const data::DatasetPtr ds = dataset(10);  // a last partial batch: two signatures
  const std::map<std::string, double> graph = model.eval(ds);
  const Problem p = make_problem();
  const Tensor y_graph = model.predict(p.x);
  std::map<std::string, double> pynative;
  Tensor y_pynative;
  {
    ModeScope scope(ExecMode::kPyNative);
    pynative = model.eval(ds);
    y_pynative = model.predict(p.x);
  }
  ASSERT_EQ(graph.size(), pynative.size());
  for (const auto& [name, v] : graph) EXPECT_NEAR(v, pynative.at(name), 1e-6) << name;
  ASSERT_EQ(y_graph.shape(), y_pynative.shape());
  const std::vector<double> a = y_graph.to_doubles(), b = y_pynative.to_doubles();
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6) << i;

  // The loss metric equals the loss computed by hand from predict's logits.
  double sum = 0;
  for (std::int64_t i = 0; i < kRows; ++i) {
    const double l0 = a[2 * i], l1 = a[2 * i + 1];
    const double m = std::max(l0, l1);
    const double lse = m + std::log(std::exp(l0 - m) + std::exp(l1 - m));
    sum += lse - (p.y.get(i) == 1 ? l1 : l0);
  }
  EXPECT_NEAR(graph.at("loss"), sum / kRows, 1e-5);
}

TEST(Model, EvalKeepsTrainingFlagsAndWeights) {
  random::seed_all(6);
  auto net = make_net();
  Model model(net, make_loss(), kMomentum, {{"accuracy", std::make_shared<Accuracy>()}});
  model.train(1, dataset(8));
  EXPECT_TRUE(net->training());
  const std::vector<Tensor> w = weights_of(*net);
  model.eval(dataset(8));
  EXPECT_TRUE(net->training());
  expect_bitwise_equal(w, weights_of(*net));

  // Mixed flags come back as they were.
  net->set_train(false);
  net->cells_and_names()[0].second->set_train(true);
  model.eval(dataset(8));
  model.predict(make_problem().x);
  EXPECT_FALSE(net->training());
  EXPECT_TRUE(net->cells_and_names()[0].second->training());
  EXPECT_FALSE(net->cells_and_names()[1].second->training());
  expect_bitwise_equal(w, weights_of(*net));
}

TEST(Model, TrainStatsAddUp) {
  random::seed_all(8);
  Model model(make_net(), make_loss(), kMomentum);
  // 48 rows in batches of 10: 4 of 10 and one of 8, two signatures.
  model.train(2, dataset(10), {}, {.data_workers = 2, .prefetch = 3});
  const TrainStats& s = model.train_stats();
  EXPECT_EQ(s.steps, 2 * 5);
  EXPECT_EQ(s.samples, 2 * kRows);
  EXPECT_GT(s.step_seconds, 0.0);
  EXPECT_GE(s.data_wait_seconds, 0.0);
  EXPECT_GT(s.compile_seconds, 0.0);
  EXPECT_LE(s.compile_seconds, s.step_seconds);  // compiling happens inside the first steps
  EXPECT_GE(s.total_seconds, s.step_seconds + s.data_wait_seconds);
  EXPECT_EQ(model.train_network()->num_compilations(), 2u);

  // A second call with the same signatures compiles nothing; steps = batches × 4 rows each.
  model.train(1, dataset(4, false, /*drop_remainder=*/true));
  const TrainStats& t = model.train_stats();
  EXPECT_EQ(t.steps, kRows / 4);
  EXPECT_EQ(t.samples, t.steps * 4);
  EXPECT_EQ(model.train_network()->num_compilations(), 3u);
  EXPECT_GT(t.compile_seconds, 0.0);
  model.train(1, dataset(4, false, true));
  EXPECT_EQ(model.train_stats().compile_seconds, 0.0);
  EXPECT_EQ(model.train_network()->num_compilations(), 3u);
}

}  // namespace
}  // namespace loom::nn
