// Training as a library (train/run.h): a LeNet run through train::run_training gives the weights
// `loom train lenet` gives with the same options (the command line is a thin layer over the
// library), its result record is JSON with the documented keys, and bad configurations are
// ConfigErrors naming the option.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "train/run.h"

namespace loom::train {
namespace {

// The last line of a command's standard output.
std::string last_line(const std::string& command) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  EXPECT_TRUE(pipe) << command;
  std::string out, line;
  std::array<char, 4096> buf{};
  while (pipe && std::fgets(buf.data(), buf.size(), pipe.get())) out += buf.data();
  const auto end = out.find_last_not_of('\n');
  if (end == std::string::npos) return "";
  const auto begin = out.find_last_of('\n', end);
  return out.substr(begin == std::string::npos ? 0 : begin + 1, end - (begin == std::string::npos ? 0 : begin + 1) + 1);
}

TEST(RunTraining, LeNetThroughTheLibraryEqualsTheCommandLine) {
  RunConfig c;
  c.model = "lenet";
  c.epochs = 1;
  c.train_samples = 640;
  c.test_samples = 128;
  c.seed = 3;
  c.seed_given = true;
  c.deterministic = true;
  c.threads = 2;  // the test binary's first use of the thread pool
  const RunResult r = run_training(c);
  EXPECT_EQ(r.model, "lenet");
  EXPECT_EQ(r.epochs, 1);
  EXPECT_EQ(r.batch_size, 32);
  EXPECT_EQ(r.optimizer, "momentum");
  EXPECT_EQ(r.weights_sha256.size(), 64u);
  EXPECT_TRUE(r.test_accuracy >= 0 && r.test_accuracy <= 1) << r.test_accuracy;
  EXPECT_TRUE(std::isfinite(r.train_loss));

  const std::string json = last_line(std::string(LOOM_BINARY_DIR) +
                                     "/loom train lenet --epochs 1 --train-samples 640 "
                                     "--test-samples 128 --seed 3 --deterministic --threads 2 "
                                     "--json");
  const nlohmann::json cli = nlohmann::json::parse(json);
  EXPECT_EQ(cli["weights_sha256"], r.weights_sha256);
  EXPECT_EQ(cli["test_accuracy"].get<double>(), nlohmann::json::parse(r.to_json())["test_accuracy"]);

  // The library's own record has the same keys as the command's.
  const nlohmann::json mine = nlohmann::json::parse(r.to_json());
  for (const char* key : {"model", "epochs", "batch_size", "seed", "train_loss", "test_accuracy",
                          "test_loss", "train_images_per_s", "data_wait_fraction", "train_loop_s",
                          "compile_ms", "total_s", "peak_rss_mib", "weights_sha256", "threads",
                          "mode", "deterministic", "optimizer", "ranks"}) {
    EXPECT_TRUE(mine.contains(key)) << key;
    EXPECT_TRUE(cli.contains(key)) << key;
  }
}

TEST(RunTraining, BadConfigurationsNameTheOption) {
  auto message = [](RunConfig c) -> std::string {
    try {
      run_training(c);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "no error";
  };
  RunConfig c;
  c.model = "nosuchmodel";
  EXPECT_EQ(message(c).rfind("expected a model in (lenet", 0), 0u) << message(c);
  c.model = "lenet";
  c.dataset = "cifar10";
  EXPECT_EQ(message(c), "--dataset: expected one of lenet's datasets (fashion-mnist), got 'cifar10'");
  c.dataset = "";
  c.optimizer = "adagrad";
  EXPECT_EQ(message(c), "--optimizer: expected one of momentum, sgd, adam, adamw, got 'adagrad'");
  c.optimizer = "adam";
  c.momentum = 0.5;
  EXPECT_EQ(message(c), "--momentum: only Momentum and SGD take it; this run trains with adam");
}

}  // namespace
}  // namespace loom::train
