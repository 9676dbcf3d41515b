#include "tools/train_cmd.h"

#include <openssl/evp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "backends/random.h"
#include "backends/thread_pool.h"
#include "core/ir/error.h"
#include "models/lenet/dataset.h"
#include "models/lenet/lenet.h"
#include "nn/callback.h"
#include "nn/context.h"
#include "nn/loss.h"
#include "nn/metrics.h"
#include "nn/model.h"
#include "tools/progress.h"

namespace loom::tools {
namespace {

constexpr char kTrainHelp[] =
    "usage: loom train lenet [options]\n"
    "Trains LeNet-5 (MindSpore's model zoo network, 61,684 parameters) on Fashion-MNIST with\n"
    "Momentum and softmax cross-entropy, evaluating test accuracy after every epoch.\n"
    "options:\n"
    "  --epochs N          epochs to train (default 5)\n"
    "  --batch-size B      images per training and test batch (default 32)\n"
    "  --lr X              learning rate of Momentum(momentum 0.9) (default 0.01)\n"
    "  --seed S            seed of the initial weights and the shuffle (default 1)\n"
    "  --deterministic     seed_all(seed, true): bitwise reproducible runs (Eigen GEMM)\n"
    "  --data-dir D        the Fashion-MNIST IDX files (default: the dataset-fashion-mnist\n"
    "                      package's directory)\n"
    "  --mode graph|pynative  execution mode (default graph: one compiled step)\n"
    "  --threads T         threads of loom's kernels and of OpenBLAS (default LOOM_NUM_THREADS,\n"
    "                      else the number of cores)\n"
    "  --json              print one final line of JSON with the run's figures\n"
    "  -h, --help          this text\n"
    "for tests and quick runs:\n"
    "  --train-samples N   train on the first N training images only (default all 60,000)\n"
    "  --test-samples N    evaluate on the first N test images only (default all 10,000)\n"
    "Output: a progress line on a terminal (a log line every 10% of an epoch otherwise) and, per\n"
    "epoch, the mean training loss, the test loss and accuracy and the time. --json keys: model,\n"
    "epochs, batch_size, seed, train_loss (last epoch's mean), test_accuracy, test_loss,\n"
    "train_images_per_s (training steps only: data waits and compilation excluded),\n"
    "data_wait_fraction (of the training loop's time), compile_ms, total_s, peak_rss_mib,\n"
    "weights_sha256 (SHA-256 of the final weights' bytes, parameters sorted by name), threads,\n"
    "mode, deterministic.\n"
    "Checkpoints (saving the trained weights, --ckpt) arrive with the checkpoint issue.\n";

constexpr char kEvalHelp[] =
    "usage: loom eval lenet [options]\n"
    "Evaluates LeNet-5 on the Fashion-MNIST test set (accuracy and loss).\n"
    "Until checkpoints land (the next issue, which adds --ckpt FILE) there are no trained weights\n"
    "to load: this evaluates the UNTRAINED network as initialized from --seed, so expect about\n"
    "10% accuracy. `loom train lenet` evaluates after every epoch, for trained figures.\n"
    "options:\n"
    "  --batch-size B      images per batch (default 32)\n"
    "  --seed S            seed of the initial weights (default 1)\n"
    "  --deterministic     seed_all(seed, true)\n"
    "  --data-dir D        the Fashion-MNIST IDX files (default: the package's directory)\n"
    "  --mode graph|pynative  execution mode (default graph)\n"
    "  --threads T         threads of loom's kernels and of OpenBLAS\n"
    "  --json              print one final line of JSON (model, batch_size, seed, test_accuracy,\n"
    "                      test_loss, eval_images_per_s, total_s, peak_rss_mib, weights_sha256,\n"
    "                      threads, mode, deterministic)\n"
    "  --test-samples N    evaluate on the first N test images only\n"
    "  -h, --help          this text\n";

// A usage error: reported with the command's name and a pointer to --help, exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Options {
  std::string command;  // "train" or "eval"
  std::string model;
  std::int64_t epochs = 5;
  std::int64_t batch_size = 32;
  double lr = 0.01;
  std::uint64_t seed = 1;
  bool deterministic = false;
  std::string data_dir;
  nn::ExecMode mode = nn::ExecMode::kGraph;
  int threads = 0;  // 0: leave LOOM_NUM_THREADS / the core count
  bool json = false;
  std::int64_t train_samples = 0;  // 0: all
  std::int64_t test_samples = 0;
  bool help = false;
};

template <class Int>
Int parse_int(const std::string& flag, const std::string& text, Int min, Int max) {
  Int v{};
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || ptr != end || v < min || v > max) {
    throw UsageError(flag + ": expected an integer in [" + std::to_string(min) + ", " +
                     std::to_string(max) + "], got '" + text + "'");
  }
  return v;
}

double parse_positive_double(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double v = text.empty() ? NAN : std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v) || v <= 0) {
    throw UsageError(flag + ": expected a positive number, got '" + text + "'");
  }
  return v;
}

Options parse(const std::string& command, const std::vector<std::string>& args) {
  Options o;
  o.command = command;
  const bool train = command == "train";
  // Flags that only `loom train` takes.
  const std::vector<std::string> train_only = {"--epochs", "--lr", "--train-samples"};
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i];
    std::optional<std::string> inline_value;
    if (flag.rfind("--", 0) == 0) {
      if (auto eq = flag.find('='); eq != std::string::npos) {
        inline_value = flag.substr(eq + 1);
        flag = flag.substr(0, eq);
      }
    }
    auto value = [&]() -> std::string {
      if (inline_value) return *inline_value;
      if (i + 1 >= args.size()) throw UsageError(flag + ": expected a value after it");
      return args[++i];
    };
    auto no_value = [&] {
      if (inline_value) throw UsageError(flag + ": takes no value, got '" + *inline_value + "'");
    };
    if (!train && std::find(train_only.begin(), train_only.end(), flag) != train_only.end()) {
      throw UsageError(flag + ": only `loom train` takes it");
    }
    if (flag == "-h" || flag == "--help") {
      o.help = true;
    } else if (flag == "--epochs") {
      o.epochs = parse_int<std::int64_t>(flag, value(), 1, 100000);
    } else if (flag == "--batch-size") {
      o.batch_size = parse_int<std::int64_t>(flag, value(), 1, 65536);
    } else if (flag == "--lr") {
      o.lr = parse_positive_double(flag, value());
    } else if (flag == "--seed") {
      o.seed = parse_int<std::uint64_t>(flag, value(), 0,
                                        std::numeric_limits<std::uint64_t>::max());
    } else if (flag == "--deterministic") {
      no_value();
      o.deterministic = true;
    } else if (flag == "--data-dir") {
      o.data_dir = value();
      if (o.data_dir.empty()) throw UsageError("--data-dir: expected a directory, got ''");
    } else if (flag == "--mode") {
      const std::string m = value();
      if (m == "graph") {
        o.mode = nn::ExecMode::kGraph;
      } else if (m == "pynative") {
        o.mode = nn::ExecMode::kPyNative;
      } else {
        throw UsageError("--mode: expected 'graph' or 'pynative', got '" + m + "'");
      }
    } else if (flag == "--threads") {
      o.threads = parse_int<int>(flag, value(), 1, 1024);
    } else if (flag == "--json") {
      no_value();
      o.json = true;
    } else if (flag == "--train-samples") {
      o.train_samples = parse_int<std::int64_t>(flag, value(), 1, 60000);
    } else if (flag == "--test-samples") {
      o.test_samples = parse_int<std::int64_t>(flag, value(), 1, 10000);
    } else if (flag.rfind("-", 0) == 0) {
      throw UsageError("unknown option '" + args[i] + "'");
    } else if (o.model.empty()) {
      o.model = flag;
    } else {
      throw UsageError("expected one model, got '" + o.model + "' and '" + flag + "'");
    }
  }
  if (o.help) return o;
  if (o.model.empty()) throw UsageError("expected a model to " + command + " (lenet)");
  if (o.model != "lenet") {
    throw UsageError("expected a model in (lenet), got '" + o.model + "'");
  }
  return o;
}

// SHA-256 of every parameter's bytes, parameters sorted by name, as 64 lowercase hex digits.
std::string weights_sha256(nn::Cell& net) {
  std::map<std::string, const Tensor*> sorted;
  for (auto& [name, p] : net.parameters_and_names()) sorted[name] = &p->value;
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    throw InternalError("weights_sha256: EVP_DigestInit_ex failed");
  }
  for (const auto& [name, t] : sorted) {
    if (EVP_DigestUpdate(ctx.get(), t->raw_data(), t->nbytes()) != 1) {
      throw InternalError("weights_sha256: EVP_DigestUpdate failed on " + name);
    }
  }
  if (EVP_DigestFinal_ex(ctx.get(), digest, &len) != 1) {
    throw InternalError("weights_sha256: EVP_DigestFinal_ex failed");
  }
  std::string hex;
  char buf[3];
  for (unsigned int i = 0; i < len; ++i) {
    std::snprintf(buf, sizeof buf, "%02x", digest[i]);
    hex += buf;
  }
  return hex;
}

double peak_rss_mib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

// A JSON object written as one line; non-finite numbers become null.
class JsonLine {
 public:
  JsonLine& add(const std::string& key, double v, int precision = 6) {
    std::ostringstream s;
    if (std::isfinite(v)) {
      s << std::setprecision(precision) << v;
    } else {
      s << "null";
    }
    return raw(key, s.str());
  }
  JsonLine& add(const std::string& key, std::int64_t v) { return raw(key, std::to_string(v)); }
  JsonLine& add(const std::string& key, std::uint64_t v) { return raw(key, std::to_string(v)); }
  JsonLine& add(const std::string& key, int v) { return raw(key, std::to_string(v)); }
  JsonLine& add(const std::string& key, bool v) { return raw(key, v ? "true" : "false"); }
  JsonLine& add(const std::string& key, const std::string& v) {
    std::string q = "\"";
    for (char c : v) {
      if (c == '"' || c == '\\') q += '\\';
      q += c;
    }
    return raw(key, q + "\"");
  }
  std::string str() const { return "{" + body_ + "}"; }

 private:
  JsonLine& raw(const std::string& key, const std::string& v) {
    body_ += (body_.empty() ? "\"" : ", \"") + key + "\": " + v;
    return *this;
  }
  std::string body_;
};

// Evaluates the test set at the end of every epoch and puts the results ("accuracy", "loss")
// into RunContext::metrics for the callbacks after it; keeps the last epoch's figures.
class EvalEachEpoch : public nn::Callback {
 public:
  EvalEachEpoch(nn::Model& model, data::DatasetPtr test) : model_(&model), test_(std::move(test)) {}
  void on_train_epoch_end(nn::RunContext& rc) override {
    train_loss = rc.epoch_loss_mean;
    const auto t0 = std::chrono::steady_clock::now();
    results = model_->eval(test_);
    eval_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (const auto& [k, v] : results) rc.metrics[k] = v;
  }
  double train_loss = NAN;
  double eval_seconds = 0;
  std::map<std::string, double> results;

 private:
  nn::Model* model_;
  data::DatasetPtr test_;
};

const char* mode_name(nn::ExecMode m) { return m == nn::ExecMode::kGraph ? "graph" : "pynative"; }

double metric(const std::map<std::string, double>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? NAN : it->second;
}

// Applies --threads (before anything starts the thread pool: it reads LOOM_NUM_THREADS once; the
// GEMM gives OpenBLAS the pool's count at its first call), --deterministic/--seed and --mode.
void set_up(const Options& o) {
  if (o.threads > 0) setenv("LOOM_NUM_THREADS", std::to_string(o.threads).c_str(), 1);
  backend::seed_all(o.seed, o.deterministic);
  nn::set_context_mode(o.mode);
}

nn::Model make_model(std::shared_ptr<models::LeNet5> net, double lr) {
  nn::OptimizerSpec opt;
  opt.kind = nn::OptimizerKind::kMomentum;
  opt.learning_rate = lr;
  opt.momentum = 0.9;
  return nn::Model(std::move(net),
                   std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(/*sparse=*/true, "mean"),
                   opt,
                   {{"accuracy", std::make_shared<nn::Accuracy>()},
                    {"loss", std::make_shared<nn::Loss>()}});
}

int run_train(const Options& o) {
  const auto t0 = std::chrono::steady_clock::now();
  set_up(o);
  const int threads = backend::ThreadPool::global().num_threads();

  models::lenet::DatasetOptions train_opts{o.data_dir, o.batch_size, o.train_samples};
  models::lenet::DatasetOptions test_opts{o.data_dir, o.batch_size, o.test_samples};
  data::DatasetPtr train_ds = models::lenet::create_train_dataset(train_opts);
  data::DatasetPtr test_ds = models::lenet::create_test_dataset(test_opts);
  if (train_ds->size() == 0) {
    throw UsageError("--batch-size " + std::to_string(o.batch_size) +
                     ": larger than the training set (" +
                     std::to_string(o.train_samples > 0 ? o.train_samples : 60000) +
                     " images); no full batch to train on");
  }

  auto net = std::make_shared<models::LeNet5>();
  nn::Model model = make_model(net, o.lr);

  std::cout << "loom train lenet: Fashion-MNIST, " << train_ds->size() << " batches of "
            << o.batch_size << " per epoch, " << o.epochs << " epoch" << (o.epochs == 1 ? "" : "s")
            << ", Momentum(lr " << o.lr << ", momentum 0.9), seed " << o.seed
            << (o.deterministic ? " (deterministic)" : "") << ", " << mode_name(o.mode)
            << " mode, " << threads << " thread" << (threads == 1 ? "" : "s") << std::endl;

  EvalEachEpoch eval_cb(model, test_ds);
  ProgressCallback progress(std::cout, isatty(fileno(stdout)) != 0);
  model.train(o.epochs, train_ds, {&eval_cb, &progress});

  const nn::TrainStats& st = model.train_stats();
  const double total_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // The first step of each input signature also traces and compiles: that time is compile_ms.
  const double step_s = std::max(st.step_seconds - st.compile_seconds, 1e-9);
  const double images_per_s = st.steps > 0 ? st.samples / step_s : 0;
  const double loop_s = st.step_seconds + st.data_wait_seconds;
  const double wait_fraction = loop_s > 0 ? st.data_wait_seconds / loop_s : 0;
  const double accuracy = metric(eval_cb.results, "accuracy");
  const std::string sha = weights_sha256(*net);

  std::cout << "done: test accuracy " << std::fixed << std::setprecision(4) << accuracy
            << ", train loss " << eval_cb.train_loss << std::setprecision(0) << ", "
            << images_per_s << " images/s in training steps, compile "
            << std::setprecision(1) << st.compile_seconds * 1000 << " ms, total " << total_s
            << " s, peak RSS " << peak_rss_mib() << " MiB" << std::defaultfloat << std::endl;
  if (o.json) {
    JsonLine j;
    j.add("model", o.model)
        .add("epochs", o.epochs)
        .add("batch_size", o.batch_size)
        .add("seed", o.seed)
        .add("train_loss", eval_cb.train_loss)
        .add("test_accuracy", accuracy)
        .add("test_loss", metric(eval_cb.results, "loss"))
        .add("train_images_per_s", images_per_s, 5)
        .add("data_wait_fraction", wait_fraction, 4)
        .add("compile_ms", st.compile_seconds * 1000, 4)
        .add("total_s", total_s, 4)
        .add("peak_rss_mib", peak_rss_mib(), 4)
        .add("weights_sha256", sha)
        .add("threads", threads)
        .add("mode", std::string(mode_name(o.mode)))
        .add("deterministic", o.deterministic);
    std::cout << j.str() << std::endl;
  }
  return 0;
}

int run_eval(const Options& o) {
  const auto t0 = std::chrono::steady_clock::now();
  set_up(o);
  const int threads = backend::ThreadPool::global().num_threads();
  models::lenet::DatasetOptions test_opts{o.data_dir, o.batch_size, o.test_samples};
  data::DatasetPtr test_ds = models::lenet::create_test_dataset(test_opts);
  auto net = std::make_shared<models::LeNet5>();
  nn::Model model = make_model(net, o.lr);
  std::cout << "loom eval lenet: no trained weights to load until checkpoints land (--ckpt); "
               "evaluating the untrained network initialized from seed "
            << o.seed << std::endl;
  const auto e0 = std::chrono::steady_clock::now();
  const std::map<std::string, double> r = model.eval(test_ds);
  const double eval_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - e0).count();
  const std::int64_t images = o.test_samples > 0 ? o.test_samples : 10000;
  const double total_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "test accuracy " << std::fixed << std::setprecision(4) << metric(r, "accuracy")
            << ", test loss " << metric(r, "loss") << ", " << std::setprecision(1) << eval_s
            << " s" << std::defaultfloat << std::endl;
  if (o.json) {
    JsonLine j;
    j.add("model", o.model)
        .add("batch_size", o.batch_size)
        .add("seed", o.seed)
        .add("test_accuracy", metric(r, "accuracy"))
        .add("test_loss", metric(r, "loss"))
        .add("eval_images_per_s", eval_s > 0 ? images / eval_s : 0.0, 5)
        .add("total_s", total_s, 4)
        .add("peak_rss_mib", peak_rss_mib(), 4)
        .add("weights_sha256", weights_sha256(*net))
        .add("threads", threads)
        .add("mode", std::string(mode_name(o.mode)))
        .add("deterministic", o.deterministic);
    std::cout << j.str() << std::endl;
  }
  return 0;
}

int command(const std::string& name, const std::vector<std::string>& args) {
  const char* help = name == "train" ? kTrainHelp : kEvalHelp;
  try {
    const Options o = parse(name, args);
    if (o.help) {
      std::cout << help;
      return 0;
    }
    return name == "train" ? run_train(o) : run_eval(o);
  } catch (const UsageError& e) {
    std::cerr << "loom " << name << ": " << e.what() << "\n(see `loom " << name
              << " --help` for the options)\n";
    return 2;
  } catch (const Error& e) {
    std::cout << std::flush;
    std::cerr << "loom " << name << ": " << e.what() << "\n";
    return 1;
  }
}

}  // namespace

int train_command(const std::vector<std::string>& args) { return command("train", args); }
int eval_command(const std::vector<std::string>& args) { return command("eval", args); }

}  // namespace loom::tools
