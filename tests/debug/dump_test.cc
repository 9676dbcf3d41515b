// The dump writer (debug/dump.h) and --check-numerics (debug/numerics.h): MindSpore's dump
// configuration read and refused; a training step dumped in MindSpore's layout with the values
// the step really computed (parameters before the update, gradients, inputs as the kernel read
// them, outputs); iteration and kernel selection; the size limit; op_debug_mode 3; graph and
// PyNative dumps name the same tensors; the first NaN/Inf named with its Cell, line and role.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/random/random.h"
#include "data/npy.h"
#include "debug/dump.h"
#include "debug/numerics.h"
#include "debug/tensor_stats.h"
#include "nn/cell.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/train.h"

namespace loom::debug {
namespace {

namespace fs = std::filesystem;

// ---- Configuration ----------------------------------------------------------------------------

std::string message_of(const std::string& json) {
  try {
    parse_dump_config(json, "cfg.json");
  } catch (const ValueError& e) {
    return e.what();
  }
  return "no error";
}

TEST(DumpConfig, ReadsMindSporesKeys) {
  const DumpConfig c = parse_dump_config(R"J({
    "common_dump_settings": {
      "op_debug_mode": 0, "dump_mode": 1, "path": "/tmp/d", "net_name": "LeNet",
      "iteration": "0|5-8|100-120", "saved_data": "statistic", "input_output": 2,
      "kernels": ["Conv2D", "name-regex(conv2/.*)"], "support_device": [0, 1],
      "statistic_category": ["max", "min", "avg", "nan count", "md5"]},
    "e2e_dump_settings": {"enable": true, "trans_flag": false}})J",
                                         "cfg.json");
  EXPECT_EQ(c.dump_mode, 1);
  EXPECT_EQ(c.path, "/tmp/d");
  EXPECT_EQ(c.net_name, "LeNet");
  EXPECT_EQ(c.saved_data, "statistic");
  EXPECT_EQ(c.input_output, 2);
  EXPECT_EQ(c.kernels, (std::vector<std::string>{"Conv2D", "name-regex(conv2/.*)"}));
  EXPECT_EQ(c.statistic_category.size(), 5u);
  EXPECT_FALSE(c.trans_flag);
  for (std::int64_t i : {0, 5, 6, 8, 100, 120}) EXPECT_TRUE(c.selects_iteration(i)) << i;
  for (std::int64_t i : {1, 4, 9, 99, 121}) EXPECT_FALSE(c.selects_iteration(i)) << i;
  EXPECT_EQ(c.count_iterations(10), 5);     // 0, 5, 6, 7, 8
  EXPECT_EQ(c.count_iterations(1000), 26);  // + 100..120
  const DumpConfig round = parse_dump_config(c.to_json(), "again");
  EXPECT_EQ(round.kernels, c.kernels);
  EXPECT_EQ(round.iteration, c.iteration);
}

TEST(DumpConfig, RefusesWhatItCannotDoWithTheKeyNamed) {
  const std::string head = R"J({"common_dump_settings": {"dump_mode": 0, "path": "d", )J"
                           R"J("net_name": "n", "input_output": 0, )J";
  EXPECT_NE(message_of("{").find("cfg.json: expected a JSON dump configuration"),
            std::string::npos);
  // A repetition count std::regex would build a state for each of (json_config_fuzz found one
  // past 2^63, which overflows inside libstdc++).
  const auto with_regex = [&](const std::string& regex) {
    return message_of(head + R"J("iteration": "all", "kernels": ["name-regex()J" + regex +
                      R"J()"]}})J");
  };
  const std::string huge = with_regex("x{5000000000000000000000}");
  EXPECT_NE(huge.find("cfg.json: common_dump_settings.kernels: "
                      "\"name-regex(x{5000000000000000000000})\": refused: the repetition count "
                      "in {5000000000000000000000} is above 1000"),
            std::string::npos)
      << huge;
  EXPECT_NE(with_regex("(a{100}){100}{20}").find("multiply to more than 100000 automaton states"),
            std::string::npos);
  EXPECT_EQ(with_regex("conv\\\\d{1,2}/.{0,300}"), "no error");
  // A number past double's range is nlohmann's out_of_range, not a parse_error (json_config_fuzz).
  const std::string overflow = message_of("1e800");
  EXPECT_NE(overflow.find("cfg.json: expected a JSON dump configuration, got invalid JSON "
                          "([json.exception.out_of_range.406] number overflow"),
            std::string::npos)
      << overflow;
  EXPECT_NE(message_of(R"J({"common": {}})J").find("unknown key \"common\""), std::string::npos);
  EXPECT_NE(message_of(head + R"J("iteration": "5-3"}})J").find("iteration"), std::string::npos);
  EXPECT_NE(message_of(head + R"J("iteration": "x"}})J").find("'x' is not a non-negative integer"),
            std::string::npos);
  EXPECT_NE(message_of(head + R"J("iteration": ""}})J").find("empty"), std::string::npos);
  EXPECT_NE(message_of(head + R"J("iteration": "all", "kernal": []}})J")
                .find("common_dump_settings.kernal: unknown key"),
            std::string::npos);
  EXPECT_NE(message_of(head + R"J("iteration": "all", "saved_data": "all"}})J")
                .find("saved_data"),
            std::string::npos);
  EXPECT_NE(message_of(head + R"J("iteration": "all", "statistic_category": ["mean"]}})J")
                .find("unknown category \"mean\""),
            std::string::npos);
  EXPECT_NE(message_of(head + R"J("iteration": "all", "kernels": ["name-regex(a[)"]}})J")
                .find("invalid regular expression"),
            std::string::npos);
  EXPECT_NE(message_of(R"J({"common_dump_settings": {"dump_mode": 2, "path": "d", "net_name": "n",
              "input_output": 0, "iteration": "all"}})J")
                .find("set_dump"),
            std::string::npos);
  EXPECT_NE(message_of(R"J({"common_dump_settings": {"dump_mode": 0, "net_name": "n",
              "input_output": 0, "iteration": "all"}})J")
                .find("common_dump_settings.path: missing"),
            std::string::npos);
  EXPECT_NE(message_of(R"J({"common_dump_settings": {"dump_mode": 1, "path": "d", "net_name": "n",
              "input_output": 0, "iteration": "all"}})J")
                .find("got none"),
            std::string::npos);
  EXPECT_NE(message_of(head + R"J("iteration": "all", "op_debug_mode": 1}})J")
                .find("op_debug_mode"),
            std::string::npos);
}

TEST(DumpConfig, ByteCounts) {
  EXPECT_EQ(parse_byte_count("1000", "--x"), 1000u);
  EXPECT_EQ(parse_byte_count("500K", "--x"), 500u << 10);
  EXPECT_EQ(parse_byte_count("64M", "--x"), 64u << 20);
  EXPECT_EQ(parse_byte_count("2G", "--x"), 2ull << 30);
  for (const char* bad : {"", "0", "-1", "1T", "M", "1.5G", "10 M"}) {
    EXPECT_THROW(parse_byte_count(bad, "--x"), ValueError) << bad;
  }
}

// ---- A small training step --------------------------------------------------------------------

class Mlp : public nn::Cell {
 public:
  Mlp() : Cell("Mlp") {
    fc1_ = &register_cell("fc1", std::make_shared<nn::Dense>(4, 3));
    fc2_ = &register_cell("fc2", std::make_shared<nn::Dense>(3, 2));
  }
  ops::Var construct(const std::vector<ops::Var>& in) override {
    return (*fc2_)(nn::relu((*fc1_)(in[0])));
  }

 private:
  nn::Dense* fc1_;
  nn::Dense* fc2_;
};

Tensor input() {
  return Tensor::from_vector<float>({2, 4}, {0.5f, -1.f, 1.5f, 2.f, -0.25f, 0.75f, 1.25f, -1.75f});
}
Tensor target() { return Tensor::from_vector<float>({2, 2}, {1.f, 0.f, 0.f, 1.f}); }

std::unique_ptr<nn::TrainOneStepCell> make_step(nn::ExecMode mode = nn::ExecMode::kGraph) {
  random::seed_all(3);
  auto with_loss = std::make_shared<nn::WithLossCell>(std::make_shared<Mlp>(),
                                                      std::make_shared<nn::MSELoss>());
  return std::make_unique<nn::TrainOneStepCell>(with_loss, nn::OptimizerSpec{.learning_rate = 0.1},
                                                mode);
}

// Runs `steps` steps with the dumper as the training loop would call it.
void train(nn::TrainOneStepCell& step, Dumper& d, int steps) {
  nn::RunContext rc;
  rc.train_network = &step;
  rc.network = &step.network();
  d.on_train_begin(rc);
  for (int i = 0; i < steps; ++i) {
    rc.cur_step_num = i + 1;
    d.on_train_step_begin(rc);
    step.step(input(), target());
    d.on_train_step_end(rc);
  }
}

struct TempDir {
  TempDir() {
    path = (fs::temp_directory_path() / ("loom_dump_test_" + std::to_string(::getpid()) + "_" +
                                         std::to_string(counter++)))
               .string();
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string path;
  static inline int counter = 0;
};

// Files of a folder, by "{op_type}.{op_name}.{io}.{slot}" (the timestamp left out).
std::map<std::string, std::string> files_by_key(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() != ".npy") continue;
    // {type}.{op_name}.0.0.{ts}.{io}.{slot}.DefaultFormat.npy: drop ".0.0.{ts}" and the suffix.
    std::vector<std::string> parts;
    std::stringstream ss(name);
    for (std::string p; std::getline(ss, p, '.');) parts.push_back(p);
    const std::size_t n = parts.size();
    EXPECT_GE(n, 9u) << name;
    EXPECT_EQ(parts[n - 1], "npy");
    EXPECT_EQ(parts[n - 2], "DefaultFormat");
    EXPECT_EQ(parts[n - 6], "0");  // stream
    EXPECT_EQ(parts[n - 7], "0");  // task
    std::string key;
    for (std::size_t i = 0; i + 7 < n; ++i) key += (i ? "." : "") + parts[i];
    key += "." + parts[n - 4] + "." + parts[n - 3];
    out[key] = e.path().string();
  }
  return out;
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(f, line);) out.push_back(line);
  return out;
}

TEST(Dumper, ATrainingStepInMindSporesLayoutWithTheValuesTheStepComputed) {
  TempDir tmp;
  auto step = make_step();
  std::vector<std::pair<std::string, Tensor>> before;  // the weights before the first step
  for (auto& [name, p] : step->network().parameters_and_names()) {
    before.emplace_back(name, p->value.clone());
  }
  auto d = std::make_shared<Dumper>(dump_config_for_dir(tmp.path, "mlp"));
  step->add_observer(d);
  std::vector<std::string> notes;
  train(*step, *d, 2);

  const std::string rank = tmp.path + "/rank_0";
  EXPECT_TRUE(fs::exists(rank + "/.dump_metadata/data_dump.json"));
  EXPECT_TRUE(fs::exists(rank + "/graphs/ms_output_trace_code_graph_0.ir"));
  const std::string it0 = rank + "/mlp/0/0", it1 = rank + "/mlp/0/1";
  ASSERT_TRUE(fs::is_directory(it0));
  ASSERT_TRUE(fs::is_directory(it1));
  const auto files = files_by_key(it0);

  // Parameters as the step received them: the weights before the update, the batch.
  for (const auto& [name, value] : before) {
    const auto it = files.find("Parameter." + name + ".output.0");
    ASSERT_NE(it, files.end()) << name;
    EXPECT_TRUE(data::load_npy(it->second).bitwise_equal(value)) << name;
  }
  ASSERT_TRUE(files.count("Parameter.data.output.0"));
  EXPECT_TRUE(data::load_npy(files.at("Parameter.data.output.0")).bitwise_equal(input()));
  // Gradients of every trainable parameter; after step 2 they are the step's own.
  for (const auto& [name, value] : before) {
    EXPECT_TRUE(files.count("Gradient." + name + ".output.0")) << name;
  }
  const auto files1 = files_by_key(it1);
  for (const auto& [name, grad] : step->gradients()) {
    EXPECT_TRUE(data::load_npy(files1.at("Gradient." + name + ".output.0")).bitwise_equal(grad))
        << name;
  }

  // The execution order lists every launch; each one's files are there.
  const std::vector<std::string> order =
      lines_of(rank + "/execution_order/ms_execution_order_graph_0.csv");
  ASSERT_GT(order.size(), 5u);
  EXPECT_EQ(order[0], "index,op_type,op_name,full_name,scope,file,line,role,forward,depth,graph");
  int updates = 0;
  for (std::size_t i = 1; i < order.size(); ++i) {
    std::vector<std::string> f;
    std::stringstream ss(order[i]);
    for (std::string p; std::getline(ss, p, ',');) f.push_back(p);
    ASSERT_GE(f.size(), 10u) << order[i];
    EXPECT_EQ(f[0], std::to_string(i - 1));
    EXPECT_EQ(f[2].rfind(f[1] + "-op", 0), 0u) << order[i];
    EXPECT_TRUE(files.count(f[1] + "." + f[2] + ".output.0")) << order[i];
    if (f[1] == "CombineMomentum") {  // the small parameters' updates in one launch
      EXPECT_EQ(f[7], "optimizer");
      // Inputs learning rate, momentum, then (variable, accumulation, gradient) per parameter:
      // each variable input was written before the update overwrote it.
      for (std::size_t j = 0;; ++j) {
        const auto in = files.find(f[1] + "." + f[2] + ".input." + std::to_string(2 + 3 * j));
        if (in == files.end()) break;
        ++updates;
        const Tensor var = data::load_npy(in->second);
        EXPECT_TRUE(std::any_of(before.begin(), before.end(),
                                [&](const auto& p) { return p.second.bitwise_equal(var); }))
            << "variable " << j << " is no parameter's value before the step";
      }
    }
    if (f[1] == "ApplyMomentum") {
      ++updates;
      EXPECT_EQ(f[7], "optimizer");
      // Its parameter input was written before the update overwrote it.
      const Tensor var = data::load_npy(files.at(f[1] + "." + f[2] + ".input.0"));
      const std::string param = f[4].substr(f[4].find('/') + 1);  // "Momentum/fc1.weight"
      const auto w = std::find_if(before.begin(), before.end(),
                                  [&](const auto& p) { return p.first == param; });
      ASSERT_NE(w, before.end()) << param;
      EXPECT_TRUE(var.bitwise_equal(w->second)) << param;
    }
  }
  EXPECT_EQ(updates, 4);

  // statistic.csv: MindSpore's columns, one row per file.
  const std::vector<std::string> stats = lines_of(it0 + "/statistic.csv");
  ASSERT_FALSE(stats.empty());
  EXPECT_EQ(stats[0], "Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,"
                      "Shape,Max Value,Min Value,L2Norm Value");
  EXPECT_EQ(stats.size(), files.size() + 1);
  EXPECT_EQ(d->files_written(), static_cast<std::int64_t>(files.size() + files1.size()));
}

TEST(Dumper, IterationsKernelsAndInputOutputSelect) {
  TempDir tmp;
  auto step = make_step();
  DumpConfig c = dump_config_for_dir(tmp.path, "mlp");
  c.iteration = "1";
  c.dump_mode = 1;
  c.kernels = {"ReLU", "Gradient.fc2.bias", "name-regex(fc1/MatMul)"};
  c.input_output = 2;
  c.saved_data = "tensor";
  auto d = std::make_shared<Dumper>(c);
  step->add_observer(d);
  train(*step, *d, 3);
  const std::string net = tmp.path + "/rank_0/mlp/0";
  EXPECT_FALSE(fs::exists(net + "/0"));
  EXPECT_FALSE(fs::exists(net + "/2"));
  const auto files = files_by_key(net + "/1");
  std::set<std::string> types;
  for (const auto& [key, path] : files) {
    types.insert(key.substr(0, key.find('.')));
    EXPECT_EQ(key.find(".input."), std::string::npos) << key;
  }
  EXPECT_TRUE(files.count("Gradient.fc2.bias.output.0"));
  EXPECT_FALSE(files.count("Gradient.fc1.bias.output.0"));
  EXPECT_FALSE(fs::exists(net + "/1/statistic.csv"));
  // ReLU by type; fc1's product by regex (fused with its bias: MatMulBiasAct, fc1's scope);
  // nothing else.
  for (const std::string& t : types) {
    EXPECT_TRUE(t == "ReLU" || t == "Gradient" || t == "MatMulBiasAct" || t == "MatMul") << t;
  }
  EXPECT_TRUE(types.count("Gradient"));

  // A selection that matches nothing leaves no (empty) iteration folder behind.
  TempDir none;
  DumpConfig n = dump_config_for_dir(none.path, "mlp");
  n.dump_mode = 1;
  n.kernels = {"NoSuchOp"};
  auto step2 = make_step();
  auto d2 = std::make_shared<Dumper>(n);
  step2->add_observer(d2);
  train(*step2, *d2, 2);
  EXPECT_EQ(d2->files_written(), 0);
  EXPECT_FALSE(fs::exists(none.path + "/rank_0/mlp"));
}

TEST(Dumper, StopsAtTheByteLimitAndTheStepGoesOn) {
  TempDir tmp;
  auto step = make_step();
  DumpConfig c = dump_config_for_dir(tmp.path, "mlp");
  c.max_bytes = 2000;
  std::vector<std::string> notes;
  auto d = std::make_shared<Dumper>(c, [&](const std::string& n) { notes.push_back(n); });
  step->add_observer(d);
  train(*step, *d, 2);
  EXPECT_TRUE(d->stopped());
  EXPECT_LE(d->bytes_written(), 2000u);
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes.back().find("--dump-max-bytes"), std::string::npos) << notes.back();
  EXPECT_NE(notes.back().find("training goes on"), std::string::npos) << notes.back();
  EXPECT_EQ(step->network().parameters_and_names().size(), 4u);  // and the steps ran
}

TEST(Dumper, OpDebugMode3DumpsOnlyLaunchesWithNonFiniteOutputs) {
  TempDir tmp;
  auto step = make_step();
  DumpConfig c = dump_config_for_dir(tmp.path, "mlp");
  c.op_debug_mode = 3;
  c.dump_mode = 1;
  c.kernels = {"name-regex(.)"};
  auto d = std::make_shared<Dumper>(c);
  step->add_observer(d);
  train(*step, *d, 1);  // healthy: no launch file (parameters and gradients match the regex)
  for (const auto& [key, path] : files_by_key(tmp.path + "/rank_0/mlp/0/0")) {
    EXPECT_TRUE(key.rfind("Parameter.", 0) == 0 || key.rfind("Gradient.", 0) == 0) << key;
  }
  // A NaN weight: fc2's product and what follows have NaN outputs.
  for (auto& [name, p] : step->network().parameters_and_names()) {
    if (name == "fc2.weight") p->value.set(0, std::numeric_limits<double>::quiet_NaN());
  }
  train(*step, *d, 1);  // step 1 again: iteration 0's folder (the callbacks' step numbers)
  std::set<std::string> ops;
  for (const auto& [key, path] : files_by_key(tmp.path + "/rank_0/mlp/0/0")) {
    if (key.rfind("Parameter.", 0) != 0 && key.rfind("Gradient.", 0) != 0) {
      ops.insert(key.substr(0, key.find('.')));
    }
  }
  EXPECT_TRUE(ops.count("MatMulBiasAct") || ops.count("MatMul")) << ops.size();
  EXPECT_FALSE(ops.count("ReLU"));  // before fc2: finite
}

TEST(Dumper, GraphAndPyNativeDumpTheSameTensorsWithTheSameValues) {
  std::map<std::string, Tensor> by_mode[2];
  for (nn::ExecMode mode : {nn::ExecMode::kGraph, nn::ExecMode::kPyNative}) {
    TempDir tmp;
    auto step = make_step(mode);
    auto d = std::make_shared<Dumper>(dump_config_for_dir(tmp.path, "mlp"));
    step->add_observer(d);
    train(*step, *d, 1);
    for (const auto& [key, path] : files_by_key(tmp.path + "/rank_0/mlp/0/0")) {
      // In-place reuse differs between the plans: inputs are compared through outputs.
      if (key.find(".input.") == std::string::npos) {
        by_mode[mode == nn::ExecMode::kGraph ? 0 : 1][key] = data::load_npy(path);
      }
    }
  }
  ASSERT_EQ(by_mode[0].size(), by_mode[1].size());
  for (const auto& [key, t] : by_mode[0]) {
    ASSERT_TRUE(by_mode[1].count(key)) << key;
    EXPECT_TRUE(t.bitwise_equal(by_mode[1].at(key))) << key;
  }
}

// ---- --check-numerics ---------------------------------------------------------------------------

// fc1 → relu → sqrt → fc2: sqrt's gradient at 0 is infinite, a backward NaN/Inf whose forward
// node is the Sqrt (emitted directly: it has a scope, no source line).
class SqrtNet : public nn::Cell {
 public:
  SqrtNet() : Cell("SqrtNet") {
    fc1_ = &register_cell("fc1", std::make_shared<nn::Dense>(4, 3));
    fc2_ = &register_cell("fc2", std::make_shared<nn::Dense>(3, 2));
  }
  ops::Var construct(const std::vector<ops::Var>& in) override {
    const ops::Var h = nn::relu((*fc1_)(in[0]));
    const ops::Var s = nn::current_emitter().emit("Sqrt", {h});
    return (*fc2_)(s);
  }

 private:
  nn::Dense* fc1_;
  nn::Dense* fc2_;
};

TEST(NumericsChecker, TheFirstNonFiniteOutputStopsTheStepNamingTheNode) {
  TempDir tmp;
  auto step = make_step();
  auto check = std::make_shared<NumericsChecker>(
      NumericsOptions{.dump_dir = tmp.path, .net_name = "mlp"});
  step->add_observer(check);
  nn::RunContext rc;
  rc.train_network = step.get();
  for (int i = 1; i <= 2; ++i) {  // healthy steps: nothing
    rc.cur_step_num = i;
    check->on_train_step_begin(rc);
    step->step(input(), target());
    check->on_train_step_end(rc);
  }
  EXPECT_GT(check->launches_checked(), 10);
  for (auto& [name, p] : step->network().parameters_and_names()) {
    if (name == "fc1.weight") p->value.set(5, std::numeric_limits<double>::infinity());
  }
  rc.cur_step_num = 3;
  check->on_train_step_begin(rc);
  try {
    step->step(input(), target());
    FAIL() << "expected a NumericsError";
  } catch (const NumericsError& e) {
    const NumericsReport& r = e.report();
    const std::string m = e.what();
    EXPECT_EQ(r.iteration, 2);
    EXPECT_TRUE(r.in_training_step);
    EXPECT_EQ(r.role, ir::Role::kForward);
    EXPECT_EQ(r.scope.rfind("WithLossCell/_backbone/fc1/", 0), 0u) << r.scope;
    EXPECT_EQ(r.file, "tests/debug/dump_test.cc");
    EXPECT_GT(r.inf + r.nan, 0);
    EXPECT_NE(m.find("check-numerics: step 3: " + r.op_name), std::string::npos) << m;
    EXPECT_NE(m.find("input 1: Float32 (3, 4), min"), std::string::npos) << m;  // fc1.weight
    EXPECT_NE(m.find("Inf 1"), std::string::npos) << m;
    // The node's inputs and outputs, loadable, in the dump layout.
    const auto files = files_by_key(r.dump_dir);
    EXPECT_TRUE(files.count(r.op + "." + r.op_name + ".input.0"));
    EXPECT_TRUE(files.count(r.op + "." + r.op_name + ".output.0"));
    const Tensor w = data::load_npy(files.at(r.op + "." + r.op_name + ".input.1"));
    EXPECT_EQ(count_non_finite(w), 1);
  }
}

TEST(NumericsChecker, ABackwardNodeNamesTheForwardNodeItDifferentiates) {
  random::seed_all(3);
  auto with_loss = std::make_shared<nn::WithLossCell>(std::make_shared<SqrtNet>(),
                                                      std::make_shared<nn::MSELoss>());
  nn::TrainOneStepCell step(with_loss, nn::OptimizerSpec{.learning_rate = 0.1});
  // fc1's bias very negative: relu(h) = 0 everywhere, sqrt(0) = 0, its gradient 0.5 / 0.
  for (auto& [name, p] : step.network().parameters_and_names()) {
    if (name == "fc1.bias") {
      for (std::int64_t i = 0; i < p->value.numel(); ++i) p->value.set(i, -100.0);
    }
  }
  step.add_observer(std::make_shared<NumericsChecker>(NumericsOptions{.dump_dir = ""}));
  try {
    step.step(input(), target());
    FAIL() << "expected a NumericsError";
  } catch (const NumericsError& e) {
    const NumericsReport& r = e.report();
    EXPECT_EQ(r.role, ir::Role::kBackward) << e.what();
    EXPECT_EQ(r.forward, "WithLossCell/_backbone/Sqrt") << e.what();
    EXPECT_EQ(r.scope, "Gradients/WithLossCell/_backbone/Sqrt") << e.what();
    EXPECT_FALSE(r.in_training_step);
    EXPECT_NE(std::string(e.what()).find("run 1 of train_step"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("the gradient of WithLossCell/_backbone/Sqrt"),
              std::string::npos)
        << e.what();
    EXPECT_TRUE(r.dump_dir.empty());
  }
}

TEST(NumericsChecker, TheContextSettingChecksFunctionsMadeAfterIt) {
  set_check_numerics(true, NumericsOptions{.dump_dir = ""});
  EXPECT_TRUE(check_numerics());
  auto step = make_step();
  set_check_numerics(false);
  EXPECT_FALSE(check_numerics());
  auto unchecked = make_step();
  for (auto* s : {step.get(), unchecked.get()}) {
    for (auto& [name, p] : s->network().parameters_and_names()) {
      if (name == "fc2.bias") p->value.set(0, std::numeric_limits<double>::quiet_NaN());
    }
  }
  EXPECT_THROW(step->step(input(), target()), NumericsError);
  EXPECT_NO_THROW(unchecked->step(input(), target()));
}

TEST(TensorStats, CountsAndMoments) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor t = Tensor::from_doubles(DType::kFloat32, {7}, {-2, 0, 3, inf, nan, -inf, 1});
  const TensorStats s = tensor_stats(t);
  EXPECT_EQ(s.count, 7);
  EXPECT_EQ(s.nan, 1);
  EXPECT_EQ(s.pos_inf, 1);
  EXPECT_EQ(s.neg_inf, 1);
  EXPECT_EQ(s.negative, 2);  // -2, -inf
  EXPECT_EQ(s.positive, 3);  // 3, inf, 1
  EXPECT_EQ(s.zero, 1);
  EXPECT_EQ(s.max, inf);
  EXPECT_EQ(s.min, -inf);
  EXPECT_DOUBLE_EQ(s.mean, 0.5);            // (-2 + 0 + 3 + 1) / 4
  EXPECT_DOUBLE_EQ(s.abs_mean, 1.5);        // 6 / 4
  EXPECT_DOUBLE_EQ(s.l2norm, std::sqrt(14.0));
  EXPECT_EQ(count_non_finite(t), 3);
  EXPECT_EQ(count_non_finite(Tensor::from_doubles(DType::kFloat64, {3}, {1, nan, inf})), 2);
  EXPECT_EQ(count_non_finite(Tensor::from_doubles(DType::kFloat16, {3}, {1, nan, -inf})), 2);
  EXPECT_EQ(count_non_finite(Tensor::from_doubles(DType::kInt32, {2}, {1, 2})), 0);
}

}  // namespace
}  // namespace loom::debug
