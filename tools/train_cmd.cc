#include "tools/train_cmd.h"

#include <openssl/evp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <filesystem>
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
#include <thread>
#include <utility>
#include <vector>

#include "core/random/random.h"
#include "backends/thread_pool.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/train_state.h"
#include "core/ir/error.h"
#include "models/zoo.h"
#include "nn/callback.h"
#include "nn/context.h"
#include "nn/loss.h"
#include "nn/metrics.h"
#include "nn/model.h"
#include "parallel/parallel.h"
#include "summary/collector.h"
#include "summary/reader.h"
#include "tools/progress.h"

namespace loom::tools {
namespace {

constexpr char kTrainHelp[] =
    "usage: loom train MODEL [options]\n"
    "Trains a model of the zoo (models/zoo.h) with its recipe's defaults and softmax\n"
    "cross-entropy, evaluating test accuracy and loss after every epoch. Models:\n"
    "@MODELS@"
    "options (defaults: the recipe's; lenet: 5 epochs, batch 32, Momentum lr 0.01, momentum 0.9):\n"
    "  --epochs N          epochs to train (total, also when resuming)\n"
    "  --batch-size B      images per training and test batch; under mpirun the GLOBAL batch\n"
    "                      (each of the N ranks reads B/N; B must be a multiple of N)\n"
    "  --lr X              learning rate (with a recipe's schedule: its peak, the schedule scaled)\n"
    "  --momentum X        Momentum's momentum, in [0, 1)\n"
    "  --weight-decay X    L2 weight decay (default 0)\n"
    "  --dataset NAME      one of the recipe's datasets (lenet: fashion-mnist)\n"
    "  --seed S            seed of the initial weights and the shuffle (default 1; when resuming,\n"
    "                      the checkpoint's seed, and a different --seed is an error)\n"
    "  --deterministic     seed_all(seed, true): bitwise reproducible runs (Eigen GEMM)\n"
    "  --data-dir D        the dataset's files (default: fashion-mnist: the\n"
    "                      dataset-fashion-mnist package's directory)\n"
    "  --mode graph|pynative  execution mode (default graph: one compiled step)\n"
    "  --threads T         threads of loom's kernels and of OpenBLAS (default LOOM_NUM_THREADS,\n"
    "                      else the number of cores)\n"
    "  --json              print one final line of JSON with the run's figures\n"
    "  -h, --help          this text\n"
    "checkpoints and resume:\n"
    "  --ckpt-dir D        save training checkpoints (weights, optimizer states, position) to\n"
    "                      D/MODEL-<epoch>_<step in epoch>.ckpt (MindSpore's ModelCheckpoint;\n"
    "                      atomic saves, also at the end of training)\n"
    "  --save-steps N      save every N global steps (default: once per epoch)\n"
    "  --keep-ckpt N       keep the newest N checkpoints of the run (default 5; 0: all)\n"
    "  --resume auto|PATH  continue a run: auto = the newest MODEL checkpoint in --ckpt-dir\n"
    "                      (none: start fresh), PATH = that file. Same model, --batch-size,\n"
    "                      --train-samples and --deterministic as the first run; the result is\n"
    "                      bitwise that of a run never stopped\n"
    "summaries (TensorBoard: tensorboard --logdir D):\n"
    "  --summary-dir D     write TensorBoard event files to D: loss, learning_rate, test\n"
    "                      accuracy / eval_loss per epoch, parameter and gradient histograms,\n"
    "                      gradient norms, the step graph, one input batch, an hparams session\n"
    "                      (model, lr, batch size, optimizer, seed, final accuracy)\n"
    "  --summary-freq N    collect every N global steps (default 10, MindSpore's collect_freq)\n"
    "for tests and quick runs:\n"
    "  --train-samples N   train on the first N training images only (default all)\n"
    "  --test-samples N    evaluate on the first N test images only (default all)\n"
    "  --step-delay-ms N   sleep N ms after every step (tests that kill a run mid-epoch)\n"
    "data parallelism: mpirun -np N loom train MODEL ... (Open MPI; detected, no flag)\n"
    "  every rank starts from the same seed and rank 0's weights, trains on its shard of each\n"
    "  global batch (rows r, r+N, ... of the shuffled order) and all-reduces the gradients (mean),\n"
    "  so N ranks x B/N follow 1 process x B (to rounding; --deterministic: a fixed-order sum,\n"
    "  runs repeat bitwise). The test set is split over the ranks and the metrics summed. Rank 0\n"
    "  alone prints and writes checkpoints; with --resume every rank loads rank 0's file;\n"
    "  summaries go to --summary-dir/rank_<r>. --threads defaults to cores / ranks per host.\n"
    "  A failing or killed rank ends the whole job with a message naming it.\n"
    "Output: a progress line on a terminal (a log line every 10% of an epoch otherwise, and under\n"
    "mpirun) and, per epoch, the mean training loss, the test loss and accuracy and the time.\n"
    "--json keys: model,\n"
    "epochs, batch_size, seed, train_loss (last epoch's mean), test_accuracy, test_loss,\n"
    "train_images_per_s (training steps only: data waits and compilation excluded),\n"
    "data_wait_fraction (of the training loop's time), train_loop_s (wall time of the step\n"
    "loops: data waits, steps, per-step callbacks such as summaries), compile_ms, total_s,\n"
    "peak_rss_mib,\n"
    "weights_sha256 (SHA-256 of the final weights' bytes, parameters sorted by name), threads,\n"
    "mode, deterministic, ranks (processes; train_images_per_s counts all of them); under mpirun\n"
    "rank_weights_sha256 (every rank's weights_sha256, in rank order: equal when the ranks agree,\n"
    "except in models with BatchNorm, whose moving statistics are each rank's own);\n"
    "with --ckpt-dir: checkpoint (the last file saved); when resumed: resumed_from, initial_step.\n";

constexpr char kEvalHelp[] =
    "usage: loom eval MODEL [options]\n"
    "Evaluates a model of the zoo on its test set (accuracy and loss). Models:\n"
    "@MODELS@"
    "options:\n"
    "  --ckpt FILE         the weights to evaluate: a checkpoint of `loom train --ckpt-dir`\n"
    "                      (or any MindSpore checkpoint holding every parameter of the network).\n"
    "                      Without it the UNTRAINED network initialized from --seed is evaluated\n"
    "                      (about 10% accuracy), and the output says so\n"
    "  --batch-size B      images per batch (default: the recipe's)\n"
    "  --dataset NAME      one of the recipe's datasets\n"
    "  --seed S            seed of the initial weights (default 1)\n"
    "  --deterministic     seed_all(seed, true)\n"
    "  --data-dir D        the dataset's files (default: the package's directory)\n"
    "  --mode graph|pynative  execution mode (default graph)\n"
    "  --threads T         threads of loom's kernels and of OpenBLAS\n"
    "  --json              print one final line of JSON (model, batch_size, seed, test_accuracy,\n"
    "                      test_loss, eval_images_per_s, total_s, peak_rss_mib, weights_sha256,\n"
    "                      threads, mode, deterministic; checkpoint with --ckpt)\n"
    "  --test-samples N    evaluate on the first N test images only\n"
    "  -h, --help          this text\n";

constexpr char kSummaryHelp[] =
    "usage: loom summary show DIR|FILE\n"
    "Lists the TensorBoard event files of DIR (or the one FILE): per file its records and steps,\n"
    "then each tag with its kind and last value, then any corrupt or truncated record (both CRCs\n"
    "of every record are checked). Exit status 0 when every record is good, 1 otherwise.\n"
    "To browse them: tensorboard --logdir DIR\n";

// The help text with the zoo's models listed.
std::string help_text(const char* templ) {
  std::string models;
  for (const models::Recipe& r : models::recipes()) {
    std::string line = "  " + r.name;
    line.resize(std::max<std::size_t>(line.size() + 1, 22), ' ');
    models += line + r.description + "\n";
  }
  std::string s = templ;
  if (auto at = s.find("@MODELS@"); at != std::string::npos) s.replace(at, 8, models);
  return s;
}

std::string model_names() {
  std::string names;
  for (const models::Recipe& r : models::recipes()) names += (names.empty() ? "" : ", ") + r.name;
  return names;
}

// A usage error: reported with the command's name and a pointer to --help, exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Options {
  std::string command;  // "train" or "eval"
  std::string model;
  // Unset: the recipe's defaults.
  std::optional<std::int64_t> epochs;
  std::optional<std::int64_t> batch_size;
  std::optional<double> lr;
  std::optional<double> momentum;
  std::optional<double> weight_decay;
  std::string dataset;
  std::uint64_t seed = 1;
  bool seed_given = false;
  bool deterministic = false;
  std::string data_dir;
  nn::ExecMode mode = nn::ExecMode::kGraph;
  int threads = 0;  // 0: leave LOOM_NUM_THREADS / the core count
  bool json = false;
  std::int64_t train_samples = 0;  // 0: all
  std::int64_t test_samples = 0;
  // Checkpoints.
  std::string ckpt_dir;
  std::int64_t save_steps = 0;  // 0: once per epoch
  std::int64_t keep_ckpt = 5;
  std::string resume;           // "", "auto" or a path
  std::string ckpt;             // eval: the weights
  // Summaries.
  std::string summary_dir;
  std::int64_t summary_freq = 10;
  std::int64_t step_delay_ms = 0;
  bool help = false;
};

// The options with the recipe's defaults filled in.
struct Resolved {
  const models::Recipe* recipe = nullptr;
  std::string dataset;
  std::int64_t epochs = 0;
  std::int64_t batch_size = 0;
  nn::OptimizerSpec optimizer;
  double lr_scale = 1;  // --lr over the recipe's learning rate (scales a schedule)
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

double parse_nonneg_double(const std::string& flag, const std::string& text, double below) {
  char* end = nullptr;
  const double v = text.empty() ? NAN : std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v) || v < 0 ||
      v >= below) {
    std::ostringstream range;
    range << "[0, " << below << ")";
    throw UsageError(flag + ": expected a number in " +
                     (std::isfinite(below) ? range.str() : std::string("[0, inf)")) + ", got '" +
                     text + "'");
  }
  return v;
}

std::string non_empty(const std::string& flag, const std::string& v, const char* what) {
  if (v.empty()) throw UsageError(flag + ": expected " + what + ", got ''");
  return v;
}

Options parse(const std::string& command, const std::vector<std::string>& args) {
  Options o;
  o.command = command;
  const bool train = command == "train";
  // Flags that only `loom train` takes.
  const std::vector<std::string> train_only = {
      "--epochs",   "--lr",       "--train-samples", "--momentum",    "--weight-decay",
      "--ckpt-dir", "--save-steps", "--keep-ckpt",   "--resume",      "--summary-dir",
      "--summary-freq", "--step-delay-ms"};
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
    if (train && flag == "--ckpt") {
      throw UsageError("--ckpt: only `loom eval` takes it (`loom train` saves with --ckpt-dir "
                       "and continues with --resume)");
    }
    if (flag == "-h" || flag == "--help") {
      o.help = true;
    } else if (flag == "--epochs") {
      o.epochs = parse_int<std::int64_t>(flag, value(), 1, 100000);
    } else if (flag == "--batch-size") {
      o.batch_size = parse_int<std::int64_t>(flag, value(), 1, 65536);
    } else if (flag == "--lr") {
      o.lr = parse_positive_double(flag, value());
    } else if (flag == "--momentum") {
      o.momentum = parse_nonneg_double(flag, value(), 1.0);
    } else if (flag == "--weight-decay") {
      o.weight_decay = parse_nonneg_double(flag, value(), INFINITY);
    } else if (flag == "--dataset") {
      o.dataset = non_empty(flag, value(), "a dataset name");
    } else if (flag == "--seed") {
      o.seed = parse_int<std::uint64_t>(flag, value(), 0,
                                        std::numeric_limits<std::uint64_t>::max());
      o.seed_given = true;
    } else if (flag == "--ckpt-dir") {
      o.ckpt_dir = non_empty(flag, value(), "a directory");
    } else if (flag == "--save-steps") {
      o.save_steps = parse_int<std::int64_t>(flag, value(), 1, 1000000000);
    } else if (flag == "--keep-ckpt") {
      o.keep_ckpt = parse_int<std::int64_t>(flag, value(), 0, 1000000);
    } else if (flag == "--resume") {
      o.resume = non_empty(flag, value(), "'auto' or a checkpoint file");
    } else if (flag == "--ckpt") {
      o.ckpt = non_empty(flag, value(), "a checkpoint file");
    } else if (flag == "--summary-dir") {
      o.summary_dir = non_empty(flag, value(), "a directory");
    } else if (flag == "--summary-freq") {
      o.summary_freq = parse_int<std::int64_t>(flag, value(), 1, 1000000000);
    } else if (flag == "--step-delay-ms") {
      o.step_delay_ms = parse_int<std::int64_t>(flag, value(), 0, 60000);
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
      o.train_samples = parse_int<std::int64_t>(flag, value(), 1, 1000000000);
    } else if (flag == "--test-samples") {
      o.test_samples = parse_int<std::int64_t>(flag, value(), 1, 1000000000);
    } else if (flag.rfind("-", 0) == 0) {
      throw UsageError("unknown option '" + args[i] + "'");
    } else if (o.model.empty()) {
      o.model = flag;
    } else {
      throw UsageError("expected one model, got '" + o.model + "' and '" + flag + "'");
    }
  }
  if (o.help) return o;
  if (o.model.empty()) {
    throw UsageError("expected a model to " + command + " (" + model_names() + ")");
  }
  const auto& all = models::recipes();
  if (std::none_of(all.begin(), all.end(), [&](const auto& r) { return r.name == o.model; })) {
    throw UsageError("expected a model in (" + model_names() + "), got '" + o.model + "'");
  }
  if (o.resume == "auto" && o.ckpt_dir.empty()) {
    throw UsageError("--resume auto: needs --ckpt-dir (the directory to look in)");
  }
  return o;
}

Resolved resolve(const Options& o) {
  Resolved r;
  r.recipe = &models::recipe(o.model);
  const models::TrainDefaults& d = r.recipe->defaults;
  r.dataset = o.dataset.empty() ? d.dataset : o.dataset;
  const auto& ds = r.recipe->datasets;
  if (std::find(ds.begin(), ds.end(), r.dataset) == ds.end()) {
    std::string known;
    for (const auto& n : ds) known += (known.empty() ? "" : ", ") + n;
    throw UsageError("--dataset: expected one of " + o.model + "'s datasets (" + known +
                     "), got '" + r.dataset + "'");
  }
  r.epochs = o.epochs.value_or(d.epochs);
  r.batch_size = o.batch_size.value_or(d.batch_size);
  r.optimizer = d.optimizer;
  if (o.lr) {
    r.lr_scale = d.optimizer.learning_rate > 0 ? *o.lr / d.optimizer.learning_rate : 1.0;
    r.optimizer.learning_rate = *o.lr;
  }
  if (o.momentum && r.optimizer.kind != nn::OptimizerKind::kMomentum) {
    throw UsageError("--momentum: " + o.model + " trains with Adam, which has no momentum");
  }
  if (o.momentum) r.optimizer.momentum = *o.momentum;
  if (o.weight_decay) r.optimizer.weight_decay = *o.weight_decay;
  return r;
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
  JsonLine& add(const std::string& key, const std::vector<std::string>& v) {
    std::string a;
    for (const std::string& x : v) a += (a.empty() ? "\"" : ", \"") + x + "\"";
    return raw(key, "[" + a + "]");
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
// Under mpirun each rank evaluates its shard of the test set and the ranks' sums (correct
// predictions, images, loss × images) are all-reduced (fixed order), so every rank gets the
// metrics of the whole test set.
class EvalEachEpoch : public nn::Callback {
 public:
  EvalEachEpoch(nn::Model& model, data::DatasetPtr test, std::shared_ptr<nn::Accuracy> accuracy)
      : model_(&model), test_(std::move(test)), accuracy_(std::move(accuracy)) {}
  void on_train_epoch_end(nn::RunContext& rc) override {
    if (parallel::world().size() > 1) {  // the epoch's mean loss over all ranks' batches
      Tensor loss = Tensor::scalar(DType::kFloat64, rc.epoch_loss_mean);
      parallel::world().all_reduce(loss, /*mean=*/true, /*deterministic=*/true);
      rc.epoch_loss_mean = loss.data<double>()[0];
    }
    train_loss = rc.epoch_loss_mean;
    const auto t0 = std::chrono::steady_clock::now();
    evaluate();
    eval_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (const auto& [k, v] : results) rc.metrics[k] = v;
  }
  void evaluate() {
    parallel::Communicator& comm = parallel::world();
    if (comm.size() == 1) {
      results = model_->eval(test_);
      return;
    }
    // A rank with no test rows (fewer test images than ranks) adds zeros.
    const bool any = test_->size() > 0;
    if (any) results = model_->eval(test_);
    const double images = any ? static_cast<double>(accuracy_->total()) : 0.0;
    Tensor sums(DType::kFloat64, {3});
    double* x = sums.data<double>();
    x[0] = any ? static_cast<double>(accuracy_->correct()) : 0.0;
    x[1] = images;
    x[2] = any ? metric("loss") * images : 0.0;
    comm.all_reduce(sums, /*mean=*/false, /*deterministic=*/true);
    results["accuracy"] = x[0] / x[1];
    results["loss"] = x[2] / x[1];
  }
  double train_loss = NAN;
  double eval_seconds = 0;
  std::map<std::string, double> results;

 private:
  double metric(const std::string& key) const {
    auto it = results.find(key);
    return it == results.end() ? NAN : it->second;
  }
  nn::Model* model_;
  data::DatasetPtr test_;
  std::shared_ptr<nn::Accuracy> accuracy_;
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
  random::seed_all(o.seed, o.deterministic);
  nn::set_context_mode(o.mode);
}

nn::Model make_model(std::shared_ptr<nn::Cell> net, const nn::OptimizerSpec& opt,
                     std::shared_ptr<nn::Accuracy> accuracy = std::make_shared<nn::Accuracy>()) {
  return nn::Model(std::move(net),
                   std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(/*sparse=*/true, "mean"),
                   opt, {{"accuracy", std::move(accuracy)}, {"loss", std::make_shared<nn::Loss>()}});
}

std::string dataset_title(const std::string& name) {
  if (name == "fashion-mnist") return "Fashion-MNIST";
  if (name == "cifar10") return "CIFAR-10";
  if (name == "mnist") return "MNIST";
  return name;
}

std::string optimizer_title(const nn::OptimizerSpec& opt, bool scheduled) {
  std::ostringstream s;
  const bool momentum = opt.kind == nn::OptimizerKind::kMomentum;
  s << (momentum ? "Momentum" : "Adam") << "(lr " << opt.learning_rate
    << (scheduled ? " scheduled" : "");
  if (momentum) s << ", momentum " << opt.momentum;
  if (opt.weight_decay > 0) s << ", weight decay " << opt.weight_decay;
  s << ")";
  return s.str();
}

std::string optimizer_name(const nn::OptimizerSpec& opt) {
  return opt.kind == nn::OptimizerKind::kMomentum ? "Momentum" : "Adam";
}

using LearningRateFn = decltype(models::TrainDefaults::learning_rate);

// A recipe's learning-rate schedule: sets the rate of each step before it runs, from the global
// step (0-based), so a resumed run continues the schedule where it stopped.
class LearningRateSchedule : public nn::Callback {
 public:
  LearningRateSchedule(LearningRateFn f, double scale, std::int64_t epochs)
      : f_(std::move(f)), scale_(scale), epochs_(epochs) {}
  void on_train_step_begin(nn::RunContext& rc) override {
    rc.train_network->set_learning_rate(scale_ * f_(rc.cur_step_num - 1, rc.batch_num, epochs_));
  }

 private:
  LearningRateFn f_;
  double scale_;
  std::int64_t epochs_;
};

// --step-delay-ms: a pause after each step (tests that kill a run mid-epoch).
class StepDelay : public nn::Callback {
 public:
  explicit StepDelay(std::int64_t ms) : ms_(ms) {}
  void on_train_step_end(nn::RunContext&) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms_));
  }

 private:
  std::int64_t ms_;
};

std::int64_t read_int(const checkpoint::Checkpoint& ck, const std::string& name,
                      std::int64_t fallback) {
  const Tensor* t = ck.find(name);
  return t != nullptr && t->numel() == 1 ? static_cast<std::int64_t>(t->get(0)) : fallback;
}

// Whether a launcher started this process (mpirun, srun, or LOOM_NUM_RANKS set): only then does
// `loom train` initialise MPI. A plain `loom train` stays one process without MPI (an Open MPI
// singleton start costs about a second and forks a helper).
bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "LOOM_NUM_RANKS"}) {
    if (std::getenv(v) != nullptr) return true;
  }
  return false;
}

// Ranks on this host (Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE, else every rank).
int local_ranks() {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
    if (const char* s = std::getenv(v); s != nullptr && std::atoi(s) > 0) return std::atoi(s);
  }
  return parallel::size();
}

// Rank 0 alone prints: on the other ranks std::cout writes nothing while this lives.
class QuietUnlessRank0 {
 public:
  QuietUnlessRank0() {
    if (parallel::rank() != 0) saved_ = std::cout.rdbuf(nullptr);
  }
  ~QuietUnlessRank0() {
    if (saved_ != nullptr) std::cout.rdbuf(saved_);  // rdbuf() also clears the stream's badbit
  }
  QuietUnlessRank0(const QuietUnlessRank0&) = delete;
  QuietUnlessRank0& operator=(const QuietUnlessRank0&) = delete;

 private:
  std::streambuf* saved_ = nullptr;
};

// Every rank's string, in rank order, on rank 0 (the others get theirs alone).
std::vector<std::string> gather_strings(const std::string& mine) {
  parallel::Communicator& comm = parallel::world();
  std::vector<std::string> all;
  for (int r = 0; r < comm.size(); ++r) {
    std::string s = r == comm.rank() ? mine : std::string();
    if (comm.size() > 1) comm.broadcast_bytes(s, r);
    all.push_back(s);
  }
  return all;
}

int run_train(Options o) {
  const auto t0 = std::chrono::steady_clock::now();
  const Resolved rs = resolve(o);
  const models::Recipe& recipe = *rs.recipe;
  // Data parallelism: the command line's batch is the global one, split over the ranks.
  parallel::Communicator& comm = parallel::world();
  const int nranks = comm.size();
  QuietUnlessRank0 quiet;
  if (rs.batch_size % nranks != 0) {
    throw UsageError("--batch-size " + std::to_string(rs.batch_size) +
                     ": under mpirun the global batch, expected a multiple of the " +
                     std::to_string(nranks) + " ranks (each rank reads batch-size / ranks)");
  }
  const std::int64_t local_batch = rs.batch_size / nranks;

  // --resume: find and read the checkpoint first (a run resumed without --seed takes its seed).
  std::string resume_path;
  std::optional<checkpoint::Checkpoint> resume_ck;
  if (o.resume == "auto") {
    // Rank 0 looks; every rank reads the file it found.
    std::string latest;
    if (parallel::is_writer()) {
      latest = checkpoint::latest_checkpoint(o.ckpt_dir, o.model).value_or(std::string());
    }
    if (nranks > 1) comm.broadcast_bytes(latest, 0);
    if (!latest.empty()) {
      resume_path = latest;
    } else {
      std::cout << "loom train " << o.model << ": --resume auto: no " << o.model
                << " checkpoint in " << o.ckpt_dir << "; starting fresh" << std::endl;
    }
  } else if (!o.resume.empty()) {
    resume_path = o.resume;
    if (!std::filesystem::exists(resume_path)) {
      throw ValueError("--resume: no such checkpoint file '" + resume_path + "'");
    }
  }
  if (!resume_path.empty()) {
    resume_ck = checkpoint::load_checkpoint(resume_path);
    const Tensor* seed = resume_ck->find("loom.seed");
    if (!o.seed_given && seed != nullptr && seed->numel() == 1) {
      o.seed = static_cast<std::uint64_t>(seed->get(0));
    }
  }

  // Under mpirun without --threads / LOOM_NUM_THREADS: the host's cores shared by its ranks.
  if (nranks > 1 && o.threads == 0 && std::getenv("LOOM_NUM_THREADS") == nullptr) {
    o.threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / local_ranks());
  }
  set_up(o);  // the same seed on every rank
  const int threads = backend::ThreadPool::global().num_threads();

  // The same order as a fresh run: datasets (the shuffle takes the global seed), then network.
  // Each rank reads its shard: rows r, r + N, ... of the shuffled order, batches of B / N.
  models::DatasetOptions train_opts{rs.dataset, o.data_dir, local_batch, o.train_samples,
                                    nranks, comm.rank()};
  models::DatasetOptions test_opts{rs.dataset, o.data_dir, local_batch, o.test_samples,
                                   nranks, comm.rank()};
  data::DatasetPtr train_ds = recipe.make_train_dataset(train_opts);
  data::DatasetPtr test_ds = recipe.make_test_dataset(test_opts);
  if (train_ds->size() == 0) {
    throw UsageError("--batch-size " + std::to_string(rs.batch_size) +
                     ": larger than the training set" +
                     (o.train_samples > 0 ? " (" + std::to_string(o.train_samples) + " images)"
                                          : std::string()) +
                     "; no full batch to train on");
  }
  const std::int64_t steps_per_epoch = train_ds->size();
  if (nranks > 1) {
    // A recipe that ignores num_shards would give every rank the same batches: check that the
    // ranks' first batches differ.
    const data::Row first = train_ds->get(0, 0);
    std::vector<const Tensor*> ts;
    for (const Tensor& t : first) ts.push_back(&t);
    const std::vector<std::uint64_t> h = comm.all_gather(parallel::hash_tensors(ts));
    if (std::all_of(h.begin(), h.end(), [&](std::uint64_t x) { return x == h[0]; })) {
      throw ValueError("data parallelism: the " + o.model +
                       " recipe gives every rank the same batches (its datasets ignore "
                       "models::DatasetOptions::num_shards); run it without mpirun");
    }
  }

  std::shared_ptr<nn::Cell> net = recipe.make_network({.dataset = rs.dataset});
  auto accuracy_metric = std::make_shared<nn::Accuracy>();
  nn::Model model = make_model(net, rs.optimizer, accuracy_metric);
  const bool scheduled = static_cast<bool>(recipe.defaults.learning_rate);

  std::ostringstream batch_text;
  batch_text << rs.batch_size;
  if (nranks > 1) batch_text << " (" << nranks << " ranks x " << local_batch << ")";
  std::cout << "loom train " << o.model << ": " << dataset_title(rs.dataset) << ", "
            << steps_per_epoch << " batches of " << batch_text.str() << " per epoch, " << rs.epochs
            << " epoch" << (rs.epochs == 1 ? "" : "s") << ", "
            << optimizer_title(rs.optimizer, scheduled) << ", seed " << o.seed
            << (o.deterministic ? " (deterministic)" : "") << ", " << mode_name(o.mode)
            << " mode, " << threads << " thread" << (threads == 1 ? "" : "s") << std::endl;

  nn::TrainOptions train_options;
  checkpoint::ResumePoint resumed;
  if (resume_ck) {
    model.build_train_network();
    resumed = checkpoint::restore_training_state(model, *resume_ck);
    if (resumed.epoch * steps_per_epoch + resumed.index != resumed.global_step) {
      throw ValueError("--resume " + resume_path + ": the checkpoint's position (epoch " +
                       std::to_string(resumed.epoch + 1) + ", row " +
                       std::to_string(resumed.index) + ", step " +
                       std::to_string(resumed.global_step) + ") does not fit " +
                       std::to_string(steps_per_epoch) +
                       " batches per epoch: resume with the first run's --batch-size and "
                       "--train-samples");
    }
    if (resumed.epoch > rs.epochs) {
      throw ValueError("--resume " + resume_path + ": the checkpoint is past epoch " +
                       std::to_string(rs.epochs) + " (it has " +
                       std::to_string(resumed.global_step) + " steps); pass a larger --epochs");
    }
    std::cout << "resumed from " << resume_path << ": epoch " << resumed.epoch + 1 << ", step "
              << resumed.global_step << std::endl;
    train_options.initial_epoch = resumed.epoch;
    train_options.start = {resumed.epoch, resumed.index};
  }
  // Under mpirun: the gradient all-reduce, and rank 0's weights, optimizer states and step count
  // on every rank (after any restore). Size 1: nothing.
  parallel::setup_data_parallel(model, comm);

  // Callbacks, in order: the schedule before each step; the test set evaluated at each epoch's
  // end (its metrics feed the later callbacks); checkpoints; summaries; the display.
  std::vector<nn::Callback*> callbacks;
  std::unique_ptr<LearningRateSchedule> schedule;
  if (scheduled) {
    schedule = std::make_unique<LearningRateSchedule>(recipe.defaults.learning_rate, rs.lr_scale,
                                                      rs.epochs);
    callbacks.push_back(schedule.get());
  }
  std::unique_ptr<StepDelay> delay;
  if (o.step_delay_ms > 0) {
    delay = std::make_unique<StepDelay>(o.step_delay_ms);
    callbacks.push_back(delay.get());
  }
  EvalEachEpoch eval_cb(model, test_ds, accuracy_metric);
  callbacks.push_back(&eval_cb);
  std::unique_ptr<checkpoint::ModelCheckpoint> ckpt;
  if (!o.ckpt_dir.empty() && parallel::is_writer()) {  // rank 0 writes the job's checkpoints
    ckpt = std::make_unique<checkpoint::ModelCheckpoint>(
        o.model, o.ckpt_dir,
        checkpoint::CheckpointConfig{
            .save_checkpoint_steps = o.save_steps > 0 ? o.save_steps : steps_per_epoch,
            .keep_checkpoint_max = o.keep_ckpt});
    callbacks.push_back(ckpt.get());
  }
  std::unique_ptr<summary::SummaryCollector> collector;
  if (!o.summary_dir.empty()) {
    std::map<std::string, summary::HParamValue> lineage{
        {"model", o.model},
        {"dataset", rs.dataset},
        {"learning_rate", rs.optimizer.learning_rate},
        {"optimizer", optimizer_name(rs.optimizer)},
        {"weight_decay", rs.optimizer.weight_decay},
        {"seed", static_cast<double>(o.seed)},
        {"deterministic", o.deterministic}};
    if (rs.optimizer.kind == nn::OptimizerKind::kMomentum) {
      lineage.emplace("momentum", rs.optimizer.momentum);
    }
    // Under mpirun one event file per rank, in <dir>/rank_<r>.
    collector = std::make_unique<summary::SummaryCollector>(
        nranks > 1 ? parallel::rank_dir(o.summary_dir) : o.summary_dir,
        summary::SummaryCollectorOptions{
            .collect_freq = o.summary_freq,
            .collect_specified_data = {.collect_gradients = true},
            .custom_lineage_data = std::move(lineage)});
    // Gradients are extra outputs of the step: on before its first compilation.
    if (collector->wants_gradients()) model.build_train_network().set_return_gradients(true);
    callbacks.push_back(collector.get());
  }
  // Under mpirun the ranks' stdout is a pseudo-terminal whatever mpirun's own is (Open MPI's I/O
  // forwarding): log lines there, never the redrawn bar.
  ProgressCallback progress(std::cout, nranks == 1 && isatty(fileno(stdout)) != 0, nranks);
  if (comm.rank() == 0) callbacks.push_back(&progress);

  if (resumed.epoch < rs.epochs || !resume_ck) {
    model.train(rs.epochs, train_ds, callbacks, train_options);
  } else {  // the checkpoint is the end of training: evaluate it
    std::cout << "the checkpoint is the end of epoch " << rs.epochs
              << ": nothing left to train; evaluating it" << std::endl;
    eval_cb.evaluate();
  }

  const nn::TrainStats& st = model.train_stats();
  const double total_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // The first step of each input signature also traces and compiles: that time is compile_ms.
  const double step_s = std::max(st.step_seconds - st.compile_seconds, 1e-9);
  // All ranks together: they step in lockstep, each on its share of the global batch.
  const double images_per_s = st.steps > 0 ? st.samples * static_cast<double>(nranks) / step_s : 0;
  const double loop_s = st.step_seconds + st.data_wait_seconds;
  const double wait_fraction = loop_s > 0 ? st.data_wait_seconds / loop_s : 0;
  const double accuracy = metric(eval_cb.results, "accuracy");
  const std::string sha = weights_sha256(*net);
  const std::vector<std::string> rank_shas = gather_strings(sha);
  if (nranks > 1) {
    // The trainable weights must agree; BatchNorm's moving statistics (requires_grad false) are
    // each rank's own (not reduced, as in MindSpore), so they may differ.
    std::map<std::string, const Tensor*> trainable;
    for (auto& [name, p] : net->parameters_and_names()) {
      if (p->requires_grad) trainable[name] = &p->value;
    }
    std::vector<const Tensor*> ts;
    for (const auto& [name, t] : trainable) ts.push_back(t);
    const std::vector<std::uint64_t> h = comm.all_gather(parallel::hash_tensors(ts));
    if (comm.rank() == 0 &&
        std::any_of(h.begin(), h.end(), [&](std::uint64_t x) { return x != h[0]; })) {
      std::cerr << "loom train: warning: the ranks' trained weights differ" << std::endl;
    }
  }

  std::cout << "done: test accuracy " << std::fixed << std::setprecision(4) << accuracy
            << ", train loss " << eval_cb.train_loss << std::setprecision(0) << ", "
            << images_per_s << " images/s in training steps, compile "
            << std::setprecision(1) << st.compile_seconds * 1000 << " ms, total " << total_s
            << " s, peak RSS " << peak_rss_mib() << " MiB" << std::defaultfloat << std::endl;
  if (ckpt && !ckpt->latest().empty()) std::cout << "checkpoint: " << ckpt->latest() << std::endl;
  if (collector) {
    std::cout << "summary: " << o.summary_dir << (nranks > 1 ? "/rank_<r>" : "")
              << " (tensorboard --logdir " << o.summary_dir << ")" << std::endl;
  }
  if (o.json) {
    JsonLine j;
    j.add("model", o.model)
        .add("epochs", rs.epochs)
        .add("batch_size", rs.batch_size)
        .add("seed", o.seed)
        .add("train_loss", eval_cb.train_loss)
        .add("test_accuracy", accuracy)
        .add("test_loss", metric(eval_cb.results, "loss"))
        .add("train_images_per_s", images_per_s, 5)
        .add("data_wait_fraction", wait_fraction, 4)
        .add("train_loop_s", st.loop_seconds, 4)
        .add("compile_ms", st.compile_seconds * 1000, 4)
        .add("total_s", total_s, 4)
        .add("peak_rss_mib", peak_rss_mib(), 4)
        .add("weights_sha256", sha)
        .add("threads", threads)
        .add("mode", std::string(mode_name(o.mode)))
        .add("deterministic", o.deterministic)
        .add("ranks", nranks);
    if (nranks > 1) j.add("rank_weights_sha256", rank_shas);
    if (ckpt) j.add("checkpoint", ckpt->latest());
    if (resume_ck) {
      j.add("resumed_from", resume_path).add("initial_step", resumed.global_step);
    }
    std::cout << j.str() << std::endl;
  }
  return 0;
}

int run_eval(const Options& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const Resolved rs = resolve(o);
  const models::Recipe& recipe = *rs.recipe;
  set_up(o);
  const int threads = backend::ThreadPool::global().num_threads();
  models::DatasetOptions test_opts{rs.dataset, o.data_dir, rs.batch_size, o.test_samples};
  data::DatasetPtr test_ds = recipe.make_test_dataset(test_opts);
  std::shared_ptr<nn::Cell> net = recipe.make_network({.dataset = rs.dataset});
  auto accuracy_metric = std::make_shared<nn::Accuracy>();
  nn::Model model = make_model(net, rs.optimizer, accuracy_metric);
  if (o.ckpt.empty()) {
    std::cout << "loom eval " << o.model
              << ": no --ckpt given: evaluating the UNTRAINED network initialized from seed "
              << o.seed << " (train with `loom train " << o.model
              << " --ckpt-dir D` for weights to load)" << std::endl;
  } else {
    const checkpoint::Checkpoint ck = checkpoint::load_checkpoint(o.ckpt);
    // Strict: every parameter of the network by its own name, dtype and shape; the checkpoint's
    // optimizer states and positions are not parameters and are left out.
    const auto [param_not_load, ckpt_not_load] =
        checkpoint::load_param_into_net(*net, ck.tensors, /*strict_load=*/true);
    if (!param_not_load.empty()) {
      std::string missing;
      for (const auto& n : param_not_load) missing += (missing.empty() ? "" : ", ") + n;
      throw ValueError("--ckpt " + o.ckpt + ": the checkpoint has no value for " +
                       std::to_string(param_not_load.size()) + " parameter(s) of " + o.model +
                       ": " + missing);
    }
    std::cout << "loom eval " << o.model << ": weights from " << o.ckpt;
    const std::int64_t epoch = read_int(ck, "epoch_num", -1);
    const std::int64_t step = read_int(ck, "step_num", -1);
    if (epoch >= 0 && step >= 0) std::cout << " (epoch " << epoch << ", step " << step << ")";
    std::cout << std::endl;
  }
  const auto e0 = std::chrono::steady_clock::now();
  const std::map<std::string, double> r = model.eval(test_ds);
  const double eval_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - e0).count();
  const std::int64_t images = accuracy_metric->total();  // the test images evaluated
  const double total_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "test accuracy " << std::fixed << std::setprecision(4) << metric(r, "accuracy")
            << ", test loss " << metric(r, "loss") << ", " << std::setprecision(1) << eval_s
            << " s" << std::defaultfloat << std::endl;
  if (o.json) {
    JsonLine j;
    j.add("model", o.model)
        .add("batch_size", rs.batch_size)
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
    if (!o.ckpt.empty()) j.add("checkpoint", o.ckpt);
    std::cout << j.str() << std::endl;
  }
  return 0;
}

// Under mpirun (more than one rank), an error on any rank ends the whole job with its message
// (the communicator's abort names the rank) rather than leaving the others waiting in a collective.
[[noreturn]] void abort_job(const std::string& name, const std::string& what) {
  std::cout << std::flush;
  parallel::world().abort("loom " + name + ": " + what);
}

int command(const std::string& name, const std::vector<std::string>& args) {
  const char* help = name == "train" ? kTrainHelp : kEvalHelp;
  try {
    const Options o = parse(name, args);
    if (o.help) {
      std::cout << help_text(help);
      return 0;
    }
    if (name != "train") return run_eval(o);
    // `mpirun -np N loom train`: MPI only when launched by mpirun (a plain run stays size 1).
    // In a build without MPI and N > 1, init() is a ValueError saying so.
    if (launched_by_mpi()) parallel::init();
    const int status = run_train(o);
    parallel::finalize();
    return status;
  } catch (const UsageError& e) {
    if (parallel::size() > 1) abort_job(name, e.what());
    std::cerr << "loom " << name << ": " << e.what() << "\n(see `loom " << name
              << " --help` for the options)\n";
    return 2;
  } catch (const Error& e) {
    if (parallel::size() > 1) abort_job(name, e.what());
    std::cout << std::flush;
    std::cerr << "loom " << name << ": " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    if (parallel::size() > 1) abort_job(name, e.what());
    throw;
  }
}

}  // namespace

int train_command(const std::vector<std::string>& args) { return command("train", args); }
int eval_command(const std::vector<std::string>& args) { return command("eval", args); }

int summary_command(const std::vector<std::string>& args) {
  if (args.size() == 1 && (args[0] == "-h" || args[0] == "--help")) {
    std::cout << kSummaryHelp;
    return 0;
  }
  if (args.size() != 2 || args[0] != "show") {
    std::cerr << "loom summary: expected `loom summary show DIR`\n" << kSummaryHelp;
    return 2;
  }
  try {
    return summary::show(args[1], std::cout);
  } catch (const Error& e) {
    std::cout << std::flush;
    std::cerr << "loom summary: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace loom::tools
