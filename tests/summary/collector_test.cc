#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <cmath>
#include <map>
#include <set>

#include "core/random/random.h"
#include "core/ir/error.h"
#include "nn/cell.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/train.h"
#include "summary/collector.h"
#include "summary/proto/hparams.pb.h"
#include "summary/reader.h"

namespace fs = std::filesystem;
using namespace loom;
using namespace loom::summary;

namespace {

class TwoParams : public nn::Cell {
 public:
  TwoParams() : Cell("TwoParams") {
    register_parameter("w", Tensor::from_vector<float>({2}, {1.f, 2.f}));
    register_parameter("b", Tensor::from_vector<float>({1}, {0.5f}));
  }
  ops::Var construct(const std::vector<ops::Var>& in) override { return in.at(0); }
};

std::string fresh_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path p = fs::temp_directory_path() /
               ("loom_collector_" + std::to_string(::getpid()) + "_" + info->name());
  fs::remove_all(p);
  return p.string();
}

struct Seen {
  std::vector<std::pair<std::string, std::int64_t>> values;  // (tag, step)
  std::vector<hparams::HParamsPluginData> hparams;
};

Seen read(const std::string& dir) {
  Seen s;
  for (const std::string& f : list_event_files(dir))
    for (const EventRecord& r : read_event_file(f)) {
      if (r.event.has_graph_def()) s.values.emplace_back("(graph)", r.event.step());
      for (const auto& v : r.event.summary().value()) {
        s.values.emplace_back(v.tag(), r.event.step());
        if (v.metadata().plugin_data().plugin_name() == "hparams") {
          s.hparams.emplace_back();
          s.hparams.back().ParseFromString(v.metadata().plugin_data().content());
        }
      }
    }
  return s;
}

}  // namespace

TEST(SummaryCollector, CollectsAtFrequencyWithLineage) {
  const std::string dir = fresh_dir();
  TwoParams net;
  {
    SummaryCollector sc(dir, {.collect_freq = 10,
                              .custom_lineage_data = {{"learning_rate", 0.01},
                                                      {"optimizer", "Momentum"},
                                                      {"seed", 7}}});
    nn::RunContext rc;
    rc.network = &net;
    rc.epoch_num = 1;
    rc.batch_size = 16;
    sc.on_train_begin(rc);
    for (int s = 1; s <= 20; ++s) {
      rc.cur_step_num = s;
      rc.loss = Tensor::scalar(DType::kFloat32, 1.0 / s);
      if (s == 1) sc.set_input_images(Tensor(DType::kUInt8, {2, 1, 4, 4}));
      sc.on_train_step_end(rc);
    }
    rc.metrics = {{"accuracy", 0.9}, {"loss", 0.3}};
    sc.on_train_epoch_end(rc);
    sc.on_train_end(rc);
  }
  Seen s = read(dir);
  using P = std::pair<std::string, std::int64_t>;
  const std::vector<P> want{
      {"_hparams_/experiment", 1}, {"_hparams_/session_start_info", 1},
      {"loss", 1}, {"learning_rate", 1}, {"input_data/auto", 1}, {"w/auto", 1}, {"b/auto", 1},
      {"loss", 10}, {"learning_rate", 10}, {"w/auto", 10}, {"b/auto", 10},
      {"loss", 20}, {"learning_rate", 20}, {"w/auto", 20}, {"b/auto", 20},
      {"accuracy", 20}, {"eval_loss", 20}, {"_hparams_/session_end_info", 20}};
  EXPECT_EQ(s.values, want);
  ASSERT_EQ(s.hparams.size(), 3u);
  const auto& hp = s.hparams[1].session_start_info().hparams();
  EXPECT_EQ(hp.at("model").string_value(), "TwoParams");
  EXPECT_EQ(hp.at("batch_size").number_value(), 16);
  EXPECT_EQ(hp.at("learning_rate").number_value(), 0.01);
  EXPECT_EQ(hp.at("optimizer").string_value(), "Momentum");
  EXPECT_EQ(hp.at("seed").number_value(), 7);
  EXPECT_EQ(s.hparams[2].session_end_info().status(), hparams::STATUS_SUCCESS);
  fs::remove_all(dir);
}

TEST(SummaryCollector, SpecifiedDataOnlyAndFailureStatus) {
  const std::string dir = fresh_dir();
  TwoParams net;
  try {
    SummaryCollector sc(dir, {.collect_freq = 5,
                              .collect_specified_data = {.histogram_regular = "^b",
                                                         .collect_train_lineage = true},
                              .keep_default_action = false});
    nn::RunContext rc;
    rc.network = &net;
    sc.on_train_begin(rc);
    for (int s = 1; s <= 5; ++s) {
      rc.cur_step_num = s;
      rc.loss = Tensor::scalar(DType::kFloat32, 1.0);
      sc.on_train_step_end(rc);
    }
    throw std::runtime_error("diverged");
  } catch (const std::runtime_error&) {
  }
  Seen s = read(dir);
  using P = std::pair<std::string, std::int64_t>;
  const std::vector<P> want{{"_hparams_/experiment", 1}, {"_hparams_/session_start_info", 1},
                            {"b/auto", 1}, {"b/auto", 5}, {"_hparams_/session_end_info", 5}};
  EXPECT_EQ(s.values, want);
  ASSERT_EQ(s.hparams.size(), 3u);
  EXPECT_EQ(s.hparams[2].session_end_info().status(), hparams::STATUS_FAILURE);
  EXPECT_EQ(s.hparams[1].session_start_info().hparams().at("seed").number_value(),
            static_cast<double>(random::global_seed()));
  fs::remove_all(dir);
}

TEST(SummaryCollector, RejectsBadOptions) {
  EXPECT_THROW(SummaryCollector(fresh_dir(), {.collect_freq = 0}), ValueError);
  EXPECT_THROW(SummaryCollector(fresh_dir(), {.collect_specified_data = {.histogram_regular = "("}}),
               ValueError);
}

TEST(SummaryCollector, GraphOfTheCompiledStepHasCellScopes) {
  const std::string dir = fresh_dir();
  auto net = std::make_shared<nn::SequentialCell>();
  net->append(std::make_shared<nn::Dense>(3, 2)).append(std::make_shared<nn::ReLU>());
  auto with_loss = std::make_shared<nn::WithLossCell>(net, std::make_shared<nn::MSELoss>());
  nn::TrainOneStepCell train(with_loss, {.learning_rate = 0.1}, nn::ExecMode::kGraph);
  {
    SummaryCollector sc(dir, {.collect_freq = 1});
    nn::RunContext rc;
    rc.network = net.get();
    rc.train_network = &train;
    sc.on_train_begin(rc);
    rc.cur_step_num = 1;
    rc.loss = train.step(Tensor(DType::kFloat32, {4, 3}), Tensor(DType::kFloat32, {4, 2}));
    sc.on_train_step_end(rc);
    sc.on_train_end(rc);
  }
  tb::GraphDef g;
  int graphs = 0;
  for (const std::string& f : list_event_files(dir))
    for (const EventRecord& r : read_event_file(f))
      if (r.event.has_graph_def()) {
        ++graphs;
        ASSERT_TRUE(g.ParseFromString(r.event.graph_def()));
      }
  ASSERT_EQ(graphs, 1);
  bool matmul_in_dense = false;
  std::set<std::string> names;
  for (const tb::NodeDef& n : g.node()) {
    EXPECT_TRUE(names.insert(n.name()).second) << "duplicate node name " << n.name();
    if (n.op() == "MatMul" && n.name().find("/0/MatMul_") != std::string::npos)
      matmul_in_dense = true;
  }
  for (const tb::NodeDef& n : g.node())
    for (const std::string& in : n.input())
      EXPECT_TRUE(names.count(in.substr(0, in.find(':')))) << n.name() << " <- " << in;
  EXPECT_TRUE(matmul_in_dense) << g.DebugString();
  fs::remove_all(dir);
}

// With collect_gradients the collector turns on the step's gradient outputs and records their
// histograms and norms; the learning rate comes from the step (a schedule's set_learning_rate
// shows); without set_input_images the first collected step's batch is the input image.
TEST(SummaryCollector, GradientsLearningRateFromTheStepAndTheBatchAsInput) {
  const std::string dir = fresh_dir();
  auto net = std::make_shared<nn::SequentialCell>();
  net->append(std::make_shared<nn::Dense>(3, 2));
  auto with_loss = std::make_shared<nn::WithLossCell>(net, std::make_shared<nn::MSELoss>());
  nn::TrainOneStepCell train(with_loss, {.learning_rate = 0.1}, nn::ExecMode::kGraph);
  std::vector<double> norms;
  {
    SummaryCollector sc(dir, {.collect_freq = 1,
                              .collect_specified_data = {.collect_gradients = true}});
    EXPECT_TRUE(sc.wants_gradients());
    nn::RunContext rc;
    rc.network = net.get();
    rc.train_network = &train;
    sc.on_train_begin(rc);
    EXPECT_TRUE(train.return_gradients());
    Tensor x = Tensor::from_vector<float>({2, 3}, {1, -2, 3, 0.5f, 4, -1});  // outside [0, 1]
    Tensor y = Tensor::from_vector<float>({2, 2}, {1, 0, 0, 1});
    for (int s = 1; s <= 2; ++s) {
      if (s == 2) train.set_learning_rate(0.05);
      rc.cur_step_num = s;
      rc.data = Tensor::from_vector<float>({1, 1, 2, 3}, {1, -2, 3, 0.5f, 4, -1});
      rc.loss = train.step(x, y);
      ASSERT_EQ(train.gradients().size(), 2u);
      double sq = 0;
      for (const auto& [name, g] : train.gradients())
        for (double v : g.to_doubles()) sq += v * v;
      norms.push_back(std::sqrt(sq));
      sc.on_train_step_end(rc);
    }
    sc.on_train_end(rc);
  }
  std::map<std::pair<std::string, std::int64_t>, double> scalars;
  std::multiset<std::string> tags;
  for (const std::string& f : list_event_files(dir))
    for (const EventRecord& r : read_event_file(f))
      for (const auto& v : r.event.summary().value()) {
        tags.insert(v.tag());
        if (v.has_simple_value()) scalars[{v.tag(), r.event.step()}] = v.simple_value();
      }
  EXPECT_EQ(tags.count("0.weight/grad"), 2u);
  EXPECT_EQ(tags.count("0.bias/grad"), 2u);
  EXPECT_EQ(tags.count("gradient_norm/0.weight"), 2u);
  EXPECT_EQ(tags.count("input_data/auto"), 1u);
  EXPECT_FLOAT_EQ(scalars.at({"learning_rate", 1}), 0.1f);
  EXPECT_FLOAT_EQ(scalars.at({"learning_rate", 2}), 0.05f);
  EXPECT_FLOAT_EQ(scalars.at({"gradient_norm", 1}), static_cast<float>(norms[0]));
  EXPECT_FLOAT_EQ(scalars.at({"gradient_norm", 2}), static_cast<float>(norms[1]));
  fs::remove_all(dir);
}

TEST(SummaryCollector, GradientsAreOffByDefault) {
  const std::string dir = fresh_dir();
  { EXPECT_FALSE(SummaryCollector(dir, {}).wants_gradients()); }
  fs::remove_all(dir);
}
