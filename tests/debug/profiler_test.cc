// The profiler (debug/profiler.h): the chosen steps recorded and nothing else; the tables with
// MindSpore's columns, their totals adding up to the recorded kernel time; FLOPs from the ops'
// declarations; the timeline a valid Trace Event Format object whose slices nest; the pool's
// workers on their own tracks; the memory plan; start/stop by hand; misuse refused.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "backends/thread_pool.h"
#include "core/ir/error.h"
#include "core/random/random.h"
#include "debug/profiler.h"
#include "nn/cell.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/train.h"
#include "runtime/executable.h"

namespace loom::debug {
namespace {

namespace fs = std::filesystem;

class Mlp : public nn::Cell {
 public:
  Mlp() : Cell("Mlp") {
    fc1_ = &register_cell("fc1", std::make_shared<nn::Dense>(64, 256));
    fc2_ = &register_cell("fc2", std::make_shared<nn::Dense>(256, 10));
  }
  ops::Var construct(const std::vector<ops::Var>& in) override {
    return (*fc2_)(nn::relu((*fc1_)(in[0])));
  }

 private:
  nn::Dense* fc1_;
  nn::Dense* fc2_;
};

struct TempDir {
  TempDir() : path((fs::temp_directory_path() / ("loom_profiler_test_" +
                                                 std::to_string(::getpid()) + "_" +
                                                 std::to_string(counter++)))
                       .string()) {
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string path;
  static inline int counter = 0;
};

std::vector<std::map<std::string, std::string>> read_csv(const std::string& path,
                                                         std::vector<std::string>* header) {
  std::ifstream f(path);
  EXPECT_TRUE(f) << path;
  std::vector<std::map<std::string, std::string>> rows;
  std::string line;
  auto split = [](const std::string& l) {  // the files' fields have no quoted commas here
    std::vector<std::string> out;
    std::string cur;
    bool quoted = false;
    for (char c : l) {
      if (c == '"') {
        quoted = !quoted;
      } else if (c == ',' && !quoted) {
        out.push_back(cur);
        cur.clear();
      } else {
        cur += c;
      }
    }
    out.push_back(cur);
    return out;
  };
  std::getline(f, line);
  *header = split(line);
  while (std::getline(f, line)) {
    const auto fields = split(line);
    EXPECT_EQ(fields.size(), header->size()) << line;
    std::map<std::string, std::string> row;
    for (std::size_t i = 0; i < fields.size() && i < header->size(); ++i) {
      row[(*header)[i]] = fields[i];
    }
    rows.push_back(row);
  }
  return rows;
}

struct StepRun {
  std::unique_ptr<nn::TrainOneStepCell> step;
  Tensor x, y;
};

StepRun make_run() {
  random::seed_all(5);
  auto with_loss = std::make_shared<nn::WithLossCell>(
      std::make_shared<Mlp>(), std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true));
  StepRun r;
  r.step = std::make_unique<nn::TrainOneStepCell>(with_loss,
                                                  nn::OptimizerSpec{.learning_rate = 0.1});
  r.x = Tensor(DType::kFloat32, {64, 64});
  random::RandomStream("profiler_test").fill_normal(r.x, 0.0, 1.0);
  r.y = Tensor(DType::kInt32, {64});
  for (std::int64_t i = 0; i < 64; ++i) r.y.data<std::int32_t>()[i] = static_cast<int>(i % 10);
  return r;
}

// Steps 1..n as the training loop calls the callbacks.
void train(StepRun& r, Profiler& p, int n) {
  nn::RunContext rc;
  rc.train_network = r.step.get();
  rc.network = &r.step->network();
  for (int i = 1; i <= n; ++i) {
    rc.cur_step_num = i;
    rc.data_wait_seconds = 0.0001 * i;
    p.on_train_step_begin(rc);
    r.step->step(r.x, r.y);
    p.on_train_step_end(rc);
  }
}

TEST(Profiler, RecordsTheChosenStepsAndWritesMindSporesTables) {
  TempDir tmp;
  StepRun r = make_run();
  auto p = std::make_shared<Profiler>(ProfilerOptions{.output_path = tmp.path,
                                                      .start_step = 2,
                                                      .stop_step = 3,
                                                      .profile_memory = true,
                                                      .model = "mlp"});
  r.step->add_observer(p);
  train(r, *p, 4);
  EXPECT_EQ(p->steps_recorded(), 2);
  const auto per_step =
      static_cast<std::int64_t>(r.step->last_executable()->launches().size());
  EXPECT_EQ(p->launches_recorded(), 2 * per_step);
  const std::vector<std::string> files = p->analyse();
  for (const char* f : {"step_trace_0.csv", "cpu_op_type_info_0.csv", "cpu_op_detail_info_0.csv",
                        "cpu_timeline_display_0.json", "profile_info_0.json",
                        "memory_plan_0.csv"}) {
    EXPECT_TRUE(fs::exists(tmp.path + "/" + f)) << f;
  }

  std::vector<std::string> header;
  const auto steps = read_csv(tmp.path + "/step_trace_0.csv", &header);
  EXPECT_EQ(header, (std::vector<std::string>{"step", "start", "interval", "total", "data_wait",
                                              "compile", "forward", "backward", "optimizer",
                                              "communication", "communication_wait",
                                              "host_overhead", "rss_mib", "plan_peak_mib"}));
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].at("step"), "2");
  EXPECT_EQ(steps[1].at("step"), "3");
  EXPECT_NE(steps[0].at("interval"), "");  // to the next profiled step's begin
  EXPECT_EQ(steps[1].at("interval"), "");  // none after the last
  EXPECT_EQ(steps[0].at("data_wait"), "200.000");  // the wait the loop reported, in µs
  EXPECT_EQ(steps[0].at("compile"), "0.000");       // compiled in step 1
  double kernels = 0, total = 0;
  for (const auto& s : steps) {
    const double k = std::stod(s.at("forward")) + std::stod(s.at("backward")) +
                     std::stod(s.at("optimizer"));
    EXPECT_NEAR(k + std::stod(s.at("host_overhead")), std::stod(s.at("total")), 0.01);
    EXPECT_GT(std::stod(s.at("backward")), 0);
    EXPECT_GT(std::stod(s.at("optimizer")), 0);
    EXPECT_GT(std::stod(s.at("plan_peak_mib")), 0);
    kernels += k;
    total += std::stod(s.at("total"));
  }

  // The detail table: one row per node, MindSpore's columns first; its totals are the kernels.
  const auto detail = read_csv(tmp.path + "/cpu_op_detail_info_0.csv", &header);
  // MindSpore's CPU op-detail columns first (ms; a fraction of all ops' time).
  EXPECT_EQ(std::vector<std::string>(header.begin(), header.begin() + 10),
            (std::vector<std::string>{"op_side", "op_type", "op_name", "full_op_name",
                                      "op_occurrences", "op_total_time(ms)", "op_avg_time(ms)",
                                      "total_proportion", "subgraph", "pid"}));
  EXPECT_EQ(static_cast<std::int64_t>(detail.size()), per_step);
  double detail_total = 0, proportion = 0, fraction = 0;
  bool saw_fc1 = false;
  for (const auto& row : detail) {
    EXPECT_EQ(row.at("op_occurrences"), "2") << row.at("op_name");
    EXPECT_EQ(row.at("op_side"), "Host");
    EXPECT_EQ(row.at("subgraph"), "Default");
    detail_total += 1000 * std::stod(row.at("op_total_time(ms)"));
    proportion += std::stod(row.at("step_percent"));
    fraction += std::stod(row.at("total_proportion"));
    if (row.at("full_op_name").rfind("WithLossCell/_backbone/fc1/", 0) == 0 &&
        row.at("role") == "forward") {
      saw_fc1 = true;
      // MatMul (64, 64) · (64, 256)ᵀ → 2 · 64 · 256 · 64 flops per launch, two launches.
      EXPECT_EQ(row.at("flops"), std::to_string(2 * 2 * 64 * 256 * 64)) << row.at("op_type");
      EXPECT_EQ(row.at("file"), "tests/debug/profiler_test.cc");
      EXPECT_GT(std::stod(row.at("gflops_per_s")), 0);
    }
  }
  EXPECT_TRUE(saw_fc1);
  EXPECT_NEAR(detail_total, kernels, 0.05 * kernels);
  EXPECT_NEAR(proportion, 100.0 * kernels / total, 1.0);
  EXPECT_NEAR(fraction, 1.0, 1e-4);

  const auto types = read_csv(tmp.path + "/cpu_op_type_info_0.csv", &header);
  EXPECT_EQ(std::vector<std::string>(header.begin(), header.begin() + 6),
            (std::vector<std::string>{"op_type", "type_occurrences",
                                      "execution_frequency(per-step)", "total_compute_time",
                                      "avg_time(ms)", "percent"}));
  double type_total = 0;
  for (const auto& row : types) {
    type_total += 1000 * std::stod(row.at("total_compute_time"));
    EXPECT_EQ(std::stoll(row.at("execution_frequency(per-step)")),
              std::stoll(row.at("type_occurrences")) / 2);
  }
  EXPECT_NEAR(type_total, detail_total, 0.01 * detail_total + 0.01);

  // The timeline: an object with traceEvents; X slices with ts and dur; counters with values.
  std::ifstream f(tmp.path + "/cpu_timeline_display_0.json");
  const nlohmann::json j = nlohmann::json::parse(f);
  ASSERT_TRUE(j.contains("traceEvents"));
  std::map<std::string, int> by_cat;
  for (const auto& e : j["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("tid") && e.contains("name"));
    if (e["ph"] == "X") {
      EXPECT_TRUE(e["ts"].is_number() && e["dur"].is_number());
      EXPECT_GE(e["dur"].get<double>(), 0.0);
      ++by_cat[e["cat"].get<std::string>()];
    } else if (e["ph"] == "C") {
      EXPECT_FALSE(e["args"].empty());
      ++by_cat["counter"];
    }
  }
  EXPECT_EQ(by_cat["step"], 2);
  EXPECT_EQ(by_cat["kernel"], 2 * per_step);
  EXPECT_GT(by_cat["scope"], 0);
  EXPECT_EQ(by_cat["counter"], 2 * per_step + 2);  // live plan bytes per launch, RSS per step

  std::ifstream info(tmp.path + "/profile_info_0.json");
  const nlohmann::json i = nlohmann::json::parse(info);
  EXPECT_EQ(i["steps"], nlohmann::json::array({2, 3}));
  EXPECT_EQ(i["model"], "mlp");
  EXPECT_GT(i["peak_gflops"].get<double>(), 0.0);
}

TEST(Profiler, StartAndStopByHandAroundAnyCall) {
  TempDir tmp;
  StepRun r = make_run();
  auto p = std::make_shared<Profiler>(ProfilerOptions{.output_path = tmp.path});
  r.step->add_observer(p);
  r.step->step(r.x, r.y);  // not recorded
  EXPECT_EQ(p->launches_recorded(), 0);
  p->start();
  EXPECT_TRUE(p->recording());
  r.step->step(r.x, r.y);
  p->stop();
  EXPECT_EQ(p->steps_recorded(), 1);
  EXPECT_EQ(p->launches_recorded(),
            static_cast<std::int64_t>(r.step->last_executable()->launches().size()));
  EXPECT_THROW(p->stop(), ValueError);
  // A parallel_for on several threads: each thread's share on its own track (the caller's on
  // main, worker w on tid 1 + w).
  p->start();
  EXPECT_THROW(p->start(), ValueError);
  backend::ThreadPool& pool = backend::ThreadPool::global();
  std::vector<double> out(1 << 22);
  pool.parallel_for(static_cast<std::int64_t>(out.size()), 1 << 12,
                    [&](std::int64_t b, std::int64_t e) {
                      for (std::int64_t i = b; i < e; ++i) out[i] = std::sqrt(double(i));
                    });
  p->stop();
  EXPECT_EQ(p->analyse().size(), 5u);  // no memory plan without profile_memory
  std::ifstream f(tmp.path + "/cpu_timeline_display_0.json");
  const nlohmann::json j = nlohmann::json::parse(f);
  std::map<int, int> pool_spans;  // tid -> spans
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "X" && e["cat"] == "pool") ++pool_spans[e["tid"].get<int>()];
  }
  EXPECT_GE(pool_spans[1], 1);  // the caller
  for (int w = 1; w < pool.num_threads(); ++w) {
    // A worker that woke too late to claim a chunk has no span; over a 1024-chunk job each
    // worker claims some.
    EXPECT_GE(pool_spans[1 + w], 1) << "worker " << w;
  }
}

TEST(Profiler, RefusesWhatCannotBeRecorded) {
  EXPECT_THROW(Profiler(ProfilerOptions{.start_step = 0}), ValueError);
  EXPECT_THROW(Profiler(ProfilerOptions{.start_step = 5, .stop_step = 4}), ValueError);
  TempDir tmp;
  Profiler p(ProfilerOptions{.output_path = tmp.path, .start_step = 10, .stop_step = 12});
  try {
    p.analyse();
    FAIL() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("steps 10 to 12 did not run"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace loom::debug
