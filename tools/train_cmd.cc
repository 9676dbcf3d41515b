// `loom train` and `loom eval`: flags into a train::RunConfig / EvalConfig, the run through the
// training library (train/run.h), and what it reports printed: the header, the progress and
// epoch lines (tools/progress.h), the final line and the JSON record. `loom summary show`.
#include "tools/train_cmd.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/ir/error.h"
#include "debug/dump.h"
#include "models/zoo.h"
#include "nn/context.h"
#include "parallel/parallel.h"
#include "summary/collector.h"
#include "summary/reader.h"
#include "tools/progress.h"
#include "train/run.h"

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
    "  --optimizer NAME    momentum | sgd | adam | adamw (MindSpore's Momentum, SGD, Adam,\n"
    "                      AdamWeightDecay; default: the recipe's)\n"
    "  --momentum X        Momentum's and SGD's momentum, in [0, 1)\n"
    "  --weight-decay X    weight decay (default 0; as MindSpore, not applied to parameters whose\n"
    "                      names contain beta or gamma)\n"
    "  --clip-grad-norm X  scale the gradients to a global norm of at most X\n"
    "  --loss-scale S      none (default) | fixed[:SCALE[:keep]] | dynamic[:INIT[:FACTOR[:WINDOW]]]:\n"
    "                      MindSpore's Fixed/DynamicLossScaleManager (defaults 128; 2**24, 2,\n"
    "                      2000). The backward pass starts from the scale, the gradients are\n"
    "                      divided by it, and a step with an Inf or NaN gradient skips its\n"
    "                      update (fixed:S:keep applies it); dynamic halves the scale then and\n"
    "                      doubles it after WINDOW clean steps. Checkpointed with the run\n"
    "  --amp-level L       mixed precision, MindSpore's levels: O0 (default: none) | O1 (the\n"
    "                      convolutions, products and ReLU in the low dtype) | O2 (all but\n"
    "                      BatchNorm and the loss; with --loss-scale dynamic unless given) |\n"
    "                      O3 (all but the loss) | auto (products low, the exp/log/norm/softmax\n"
    "                      family Float32, the rest as their inputs). Weights stay Float32\n"
    "  --amp-dtype D       the low dtype: float16 (default) | bfloat16\n"
    "  --dataset NAME      one of the recipe's datasets (lenet: fashion-mnist; resnet*:\n"
    "                      fashion-mnist, cifar10, fake-imagenet: synthetic 3x224x224 images)\n"
    "  --seed S            seed of the initial weights and the shuffle (default 1; when resuming,\n"
    "                      the checkpoint's seed, and a different --seed is an error)\n"
    "  --deterministic     seed_all(seed, true): bitwise reproducible runs (Eigen GEMM)\n"
    "  --data-dir D        the dataset's files (default: fashion-mnist: the\n"
    "                      dataset-fashion-mnist package's directory; fake-imagenet: none)\n"
    "  --mode graph|pynative  execution mode (default graph: one compiled step)\n"
    "  --device CPU|GPU    where the step runs (MindSpore's device_target; default CPU)\n"
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
    "  --summary-dir D     write TensorBoard event files to D; MindSpore's default collection:\n"
    "                      loss, learning_rate, test accuracy / eval_loss per epoch, histograms\n"
    "                      of the first five parameters, the step graph, one input batch, an\n"
    "                      hparams session (model, lr, batch size, optimizer, seed, accuracy)\n"
    "  --summary-freq N    collect every N global steps (default 10, MindSpore's collect_freq)\n"
    "  --summary-collect LIST  collections on (+NAME) or off (-NAME), comma-separated, over the\n"
    "                      default; NAME one of MindSpore's collect_specified_data keys: metric,\n"
    "                      learning_rate, graph, input_data, histogram, train_lineage,\n"
    "                      eval_lineage, gradients (off by default: gradient histograms\n"
    "                      <param>/grad and gradient_norm scalars). E.g. +gradients,-graph\n"
    "graphs and kernels:\n"
    "  --save-graphs D     dump every compile stage of the training step and the evaluation as\n"
    "                      D/train_step/NN_<stage>.ir and .dot (traced, grad, then every pass;\n"
    "                      the .ir files parse back with ir-opt), D/eval/... likewise\n"
    "  --passes LIST       the pass pipeline instead of the training and evaluation ones\n"
    "                      (docs/passes.md; e.g. 'inline,repeat(simplify,dce)')\n"
    "  --launch-log F      write every kernel launch of one training step to F (CSV: op, node,\n"
    "                      Cell scope, source line, role, shapes, microseconds)\n"
    "  --launch-log-step N the step --launch-log records (default 1)\n"
    "debugging (docs/debugging.md):\n"
    "  --dump D            dump every launch's inputs and outputs, the parameters and the\n"
    "                      gradients of every step in MindSpore's dump layout under D (.npy,\n"
    "                      statistic.csv, execution order, graphs); `loom compare A B`\n"
    "  --dump-config F     MindSpore's dump configuration file (data_dump.json: dump_mode,\n"
    "                      iteration, kernels, saved_data, input_output...; also read from\n"
    "                      $MINDSPORE_DUMP_CONFIG); with --dump D its path is D\n"
    "  --dump-max-bytes N  stop dumping past N bytes (500M, 2G; default 1G); training goes on\n"
    "  --check-numerics    stop at the first NaN or Inf a kernel produces, naming the node, its\n"
    "                      Cell, source line and role, and dump its inputs and outputs; with a\n"
    "                      loss scale an overflow only skips its step: each such step's first\n"
    "                      non-finite node (the op that overflowed) is noted, and training goes on\n"
    "  --watch SPEC        MindInsight's watchpoints, e.g. 'gradient_vanishing(abs_mean_lt=1e-9);\n"
    "                      weight_change_too_large;tensor_too_large(max_gt=1e4)@conv2/' (the\n"
    "                      conditions and their parameters: docs/debugging.md); hits are logged\n"
    "  --watch-every N     check every N-th step (default 1)\n"
    "  --watch-stop        end training at the first hit, with a checkpoint (--ckpt-dir, else\n"
    "                      MODEL-watch_<step>.ckpt here)\n"
    "profiling (docs/profiling.md):\n"
    "  --profile D         profile steps --profile-start-step..--profile-stop-step into D:\n"
    "                      per-op and per-node tables (MindSpore's columns, FLOP/s, % of peak),\n"
    "                      the step breakdown, a Trace Event timeline; `loom profile show D`\n"
    "  --profile-start-step N  the first step profiled (1-based global step; default 1)\n"
    "  --profile-stop-step M   the last (default 10)\n"
    "  --profile-memory    also the step plan's buffers, the live bytes and the RSS\n"
    "  --profile-communication  also every all-reduce bucket (under mpirun)\n"
    "for tests and quick runs:\n"
    "  --train-samples N   train on the first N training images only (default all)\n"
    "  --test-samples N    evaluate on the first N test images only (default all)\n"
    "  --step-delay-ms N   sleep N ms after every step (tests that kill a run mid-epoch)\n"
    "  --step-delay-rank R only on rank R (under mpirun: a slow rank)\n"
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
    "--json keys: model, epochs, batch_size, seed, train_loss (last epoch's mean; after a\n"
    "resume in the middle of that epoch, of its steps since the resume, and then\n"
    "train_loss_first_step: the first of them),\n"
    "test_accuracy, test_loss, train_images_per_s (training steps only: data waits and\n"
    "compilation excluded; on a GPU the loop's time less its data waits, since the host only\n"
    "queues a step), data_wait_fraction (of the training loop's time), train_loop_s (wall time\n"
    "of the step loops: data waits, steps, per-step callbacks such as summaries), compile_ms,\n"
    "total_s, peak_rss_mib, device_peak_mib (--device GPU: the device memory's high-water\n"
    "mark), weights_sha256 (SHA-256 of the final weights' bytes, parameters sorted by name),\n"
    "threads, mode, deterministic, optimizer, ranks (processes;\n"
    "train_images_per_s counts all of them); under mpirun rank_weights_sha256 (every rank's\n"
    "weights_sha256, in rank order: equal when the ranks agree, except in models with\n"
    "BatchNorm, whose moving statistics are each rank's own); with --ckpt-dir: checkpoint (the\n"
    "last file saved); when resumed: resumed_from, initial_step; with --launch-log: launch_log;\n"
    "with a dump: dump, dump_bytes; with --watch: watch_hits, watch_stopped; with --profile:\n"
    "profile, profile_steps; with loss scaling: loss_scale (after the last step),\n"
    "skipped_steps; with --amp-level: amp_level, amp_dtype, float32_fallbacks (the ops that\n"
    "computed in Float32 on low-precision values for want of a kernel of the dtype).\n";

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
    "  --device CPU|GPU    where the evaluation runs (default CPU)\n"
    "  --save-graphs D     dump every compile stage of the evaluation graph into D/eval/\n"
    "  --passes LIST       the pass pipeline instead of the evaluation one\n"
    "  --dump D, --dump-config F, --dump-max-bytes N, --check-numerics  as `loom train`\n"
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

// The command line: a run's configuration and what to print.
struct Options {
  std::string command;  // "train" or "eval"
  train::RunConfig run;
  std::string ckpt;  // eval: the weights
  bool json = false;
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

// --loss-scale none | fixed[:SCALE[:keep]] | dynamic[:INIT[:FACTOR[:WINDOW]]] (nn::LossScale;
// MindSpore's managers' defaults: fixed 128, dynamic 2**24, 2, 2000).
// parse(value), a library's ValueError turned into the usage error "FLAG: expected EXPECTED, got
// 'VALUE'".
template <typename Parse>
auto parse_named(const std::string& flag, const std::string& value, const std::string& expected,
                 Parse parse) {
  try {
    return parse(value);
  } catch (const ValueError&) {
    throw UsageError(flag + ": expected " + expected + ", got '" + value + "'");
  }
}

nn::LossScale parse_loss_scale(const std::string& flag, const std::string& text) {
  std::vector<std::string> parts;
  std::string::size_type start = 0;
  for (;;) {
    const auto colon = text.find(':', start);
    parts.push_back(text.substr(start, colon - start));
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  const std::string& kind = parts[0];
  const auto bad = [&](const std::string& why) {
    return UsageError(flag + ": " + why + ", got '" + text + "' (none, fixed[:SCALE[:keep]] or " +
                      "dynamic[:INIT[:FACTOR[:WINDOW]]])");
  };
  if (kind == "none" && parts.size() == 1) return {};
  if (kind == "fixed" && parts.size() <= 3) {
    nn::LossScale ls = nn::LossScale::fixed();
    if (parts.size() > 1) ls.scale = parse_positive_double(flag, parts[1]);
    if (parts.size() > 2) {
      if (parts[2] != "keep") throw bad("expected 'keep' after the fixed scale");
      ls.drop_overflow_update = false;
    }
    try {
      ls.validate();
    } catch (const ValueError& e) {
      throw bad(e.what());
    }
    return ls;
  }
  if (kind == "dynamic" && parts.size() <= 4) {
    nn::LossScale ls = nn::LossScale::dynamic();
    if (parts.size() > 1) ls.scale = parse_positive_double(flag, parts[1]);
    if (parts.size() > 2) ls.factor = parse_positive_double(flag, parts[2]);
    if (parts.size() > 3) ls.window = parse_int<std::int64_t>(flag, parts[3], 1, 2147483647);
    try {
      ls.validate();
    } catch (const ValueError& e) {
      throw bad(e.what());
    }
    return ls;
  }
  throw bad("expected a loss scaling");
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

// "+gradients,-graph": each item checked (summary::select_collection) and appended to `items`.
void parse_summary_collect(const std::string& flag, const std::string& text,
                           std::vector<std::string>& items) {
  summary::SummaryCollectorOptions check;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma - start);
    try {
      summary::select_collection(check, item);
    } catch (const ValueError& e) {
      throw UsageError(flag + ": " + e.what());
    }
    items.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
}

Options parse_options(const std::string& command, const std::vector<std::string>& args) {
  Options o;
  o.command = command;
  const bool train = command == "train";
  // Flags that only `loom train` takes.
  const std::vector<std::string> train_only = {
      "--epochs",   "--lr",       "--train-samples", "--momentum",    "--weight-decay",
      "--ckpt-dir", "--save-steps", "--keep-ckpt",   "--resume",      "--summary-dir",
      "--summary-freq", "--summary-collect", "--step-delay-ms", "--optimizer", "--clip-grad-norm", "--loss-scale", "--amp-level", "--amp-dtype", "--launch-log",
      "--launch-log-step", "--watch", "--watch-every", "--watch-stop", "--profile",
      "--profile-start-step", "--profile-stop-step", "--profile-memory",
      "--profile-communication", "--step-delay-rank"};
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
      o.run.epochs = parse_int<std::int64_t>(flag, value(), 1, 100000);
    } else if (flag == "--batch-size") {
      o.run.batch_size = parse_int<std::int64_t>(flag, value(), 1, 65536);
    } else if (flag == "--lr") {
      o.run.lr = parse_positive_double(flag, value());
    } else if (flag == "--momentum") {
      o.run.momentum = parse_nonneg_double(flag, value(), 1.0);
    } else if (flag == "--weight-decay") {
      o.run.weight_decay = parse_nonneg_double(flag, value(), INFINITY);
    } else if (flag == "--dataset") {
      o.run.dataset = non_empty(flag, value(), "a dataset name");
    } else if (flag == "--seed") {
      o.run.seed = parse_int<std::uint64_t>(flag, value(), 0,
                                        std::numeric_limits<std::uint64_t>::max());
      o.run.seed_given = true;
    } else if (flag == "--ckpt-dir") {
      o.run.ckpt_dir = non_empty(flag, value(), "a directory");
    } else if (flag == "--save-steps") {
      o.run.save_steps = parse_int<std::int64_t>(flag, value(), 1, 1000000000);
    } else if (flag == "--keep-ckpt") {
      o.run.keep_ckpt = parse_int<std::int64_t>(flag, value(), 0, 1000000);
    } else if (flag == "--resume") {
      o.run.resume = non_empty(flag, value(), "'auto' or a checkpoint file");
    } else if (flag == "--ckpt") {
      o.ckpt = non_empty(flag, value(), "a checkpoint file");
    } else if (flag == "--summary-dir") {
      o.run.summary_dir = non_empty(flag, value(), "a directory");
    } else if (flag == "--summary-freq") {
      o.run.summary_freq = parse_int<std::int64_t>(flag, value(), 1, 1000000000);
    } else if (flag == "--summary-collect") {
      parse_summary_collect(flag, value(), o.run.summary_collect);
    } else if (flag == "--step-delay-ms") {
      o.run.step_delay_ms = parse_int<std::int64_t>(flag, value(), 0, 60000);
    } else if (flag == "--deterministic") {
      no_value();
      o.run.deterministic = true;
    } else if (flag == "--data-dir") {
      o.run.data_dir = value();
      if (o.run.data_dir.empty()) throw UsageError("--data-dir: expected a directory, got ''");
    } else if (flag == "--mode") {
      const std::string m = value();
      if (m == "graph") {
        o.run.mode = nn::ExecMode::kGraph;
      } else if (m == "pynative") {
        o.run.mode = nn::ExecMode::kPyNative;
      } else {
        throw UsageError("--mode: expected 'graph' or 'pynative', got '" + m + "'");
      }
    } else if (flag == "--optimizer") {
      const std::string v = value();
      if (v != "momentum" && v != "sgd" && v != "adam" && v != "adamw") {
        throw UsageError("--optimizer: expected momentum, sgd, adam or adamw, got '" + v + "'");
      }
      o.run.optimizer = v;
    } else if (flag == "--clip-grad-norm") {
      o.run.clip_grad_norm = parse_positive_double(flag, value());
    } else if (flag == "--loss-scale") {
      o.run.loss_scale = parse_loss_scale(flag, value());
      o.run.loss_scale_given = true;
    } else if (flag == "--amp-level") {
      o.run.amp.level = parse_named(flag, value(), "O0, O1, O2, O3 or auto", [](const auto& v) {
        return passes::amp_level_from_name(v);
      });
    } else if (flag == "--amp-dtype") {
      o.run.amp.dtype = parse_named(flag, value(), "float16 or bfloat16", [](const auto& v) {
        return passes::amp_dtype_from_name(v);
      });
    } else if (flag == "--device") {
      o.run.device = parse_named(flag, value(), "CPU or GPU", [](const std::string& v) {
        return nn::device_from_target(v.c_str());
      });
    } else if (flag == "--save-graphs") {
      o.run.save_graphs_dir = non_empty(flag, value(), "a directory");
    } else if (flag == "--passes") {
      o.run.passes = non_empty(flag, value(), "a pass pipeline");
    } else if (flag == "--launch-log") {
      o.run.launch_log = non_empty(flag, value(), "a file");
    } else if (flag == "--launch-log-step") {
      o.run.launch_log_step = parse_int<std::int64_t>(flag, value(), 1, 1000000000);
    } else if (flag == "--dump") {
      o.run.debug.dump_dir = non_empty(flag, value(), "a directory");
    } else if (flag == "--dump-config") {
      o.run.debug.dump_config = non_empty(flag, value(), "a dump configuration file");
    } else if (flag == "--dump-max-bytes") {
      try {
        o.run.debug.dump_max_bytes = debug::parse_byte_count(value(), flag);
      } catch (const ValueError& e) {
        throw UsageError(e.what());
      }
    } else if (flag == "--check-numerics") {
      no_value();
      o.run.debug.check_numerics = true;
    } else if (flag == "--watch") {
      o.run.debug.watch = non_empty(flag, value(), "watch conditions");
    } else if (flag == "--watch-every") {
      o.run.debug.watch_every = parse_int<std::int64_t>(flag, value(), 1, 1000000000);
    } else if (flag == "--watch-stop") {
      no_value();
      o.run.debug.watch_stop = true;
    } else if (flag == "--profile") {
      o.run.debug.profile_dir = non_empty(flag, value(), "a directory");
    } else if (flag == "--profile-start-step") {
      o.run.debug.profile_start_step = parse_int<std::int64_t>(flag, value(), 1, 1000000000);
    } else if (flag == "--profile-stop-step") {
      o.run.debug.profile_stop_step = parse_int<std::int64_t>(flag, value(), 1, 1000000000);
    } else if (flag == "--profile-memory") {
      no_value();
      o.run.debug.profile_memory = true;
    } else if (flag == "--profile-communication") {
      no_value();
      o.run.debug.profile_communication = true;
    } else if (flag == "--step-delay-rank") {
      o.run.step_delay_rank = parse_int<int>(flag, value(), 0, 65535);
    } else if (flag == "--threads") {
      o.run.threads = parse_int<int>(flag, value(), 1, 1024);
    } else if (flag == "--json") {
      no_value();
      o.json = true;
    } else if (flag == "--train-samples") {
      o.run.train_samples = parse_int<std::int64_t>(flag, value(), 1, 1000000000);
    } else if (flag == "--test-samples") {
      o.run.test_samples = parse_int<std::int64_t>(flag, value(), 1, 1000000000);
    } else if (flag.rfind("-", 0) == 0) {
      throw UsageError("unknown option '" + args[i] + "'");
    } else if (o.run.model.empty()) {
      o.run.model = flag;
    } else {
      throw UsageError("expected one model, got '" + o.run.model + "' and '" + flag + "'");
    }
  }
  if (o.help) return o;
  if (o.run.model.empty()) {
    throw UsageError("expected a model to " + command + " (" + model_names() + ")");
  }
  const auto& all = models::recipes();
  if (std::none_of(all.begin(), all.end(), [&](const auto& r) { return r.name == o.run.model; })) {
    throw UsageError("expected a model in (" + model_names() + "), got '" + o.run.model + "'");
  }
  if (o.run.debug.profile_dir.empty() &&
      (o.run.debug.profile_memory || o.run.debug.profile_communication ||
       o.run.debug.profile_start_step != 1 || o.run.debug.profile_stop_step != 10)) {
    throw UsageError("--profile-*: needs --profile DIR (the folder to write)");
  }
  if (o.run.debug.profile_stop_step < o.run.debug.profile_start_step) {
    throw UsageError("--profile-stop-step: expected at least --profile-start-step (" +
                     std::to_string(o.run.debug.profile_start_step) + "), got " +
                     std::to_string(o.run.debug.profile_stop_step));
  }
  if ((o.run.debug.watch_stop || o.run.debug.watch_every != 1) && o.run.debug.watch.empty()) {
    throw UsageError(std::string(o.run.debug.watch_stop ? "--watch-stop" : "--watch-every") +
                     ": needs --watch (the conditions to watch)");
  }
  if (!o.run.summary_collect.empty() && o.run.summary_dir.empty()) {
    throw UsageError("--summary-collect: needs --summary-dir (where the summaries go)");
  }
  if (o.run.resume == "auto" && o.run.ckpt_dir.empty()) {
    throw UsageError("--resume auto: needs --ckpt-dir (the directory to look in)");
  }
  return o;
}

const char* mode_name(nn::ExecMode m) { return m == nn::ExecMode::kGraph ? "graph" : "pynative"; }

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
  void update() {  // after MPI started: ranks are known now
    if (parallel::rank() != 0 && saved_ == nullptr) saved_ = std::cout.rdbuf(nullptr);
  }

 private:
  std::streambuf* saved_ = nullptr;
};

int run_train(const Options& o) {
  QuietUnlessRank0 quiet;
  std::unique_ptr<ProgressCallback> progress;
  train::RunHooks hooks;
  hooks.on_start = [&](const train::RunInfo& i) {
    quiet.update();
    std::ostringstream batch;
    batch << i.batch_size;
    if (i.ranks > 1) batch << " (" << i.ranks << " ranks x " << i.local_batch << ")";
    std::cout << "loom train " << i.model << ": " << i.dataset_title << ", " << i.steps_per_epoch
              << " batches of " << batch.str() << " per epoch, " << i.epochs << " epoch"
              << (i.epochs == 1 ? "" : "s") << ", " << i.optimizer << ", seed " << i.seed
              << (i.deterministic ? " (deterministic)" : "")
              << (i.amp.empty() ? "" : ", amp " + i.amp)
              << (i.loss_scale.empty() ? "" : ", loss scale " + i.loss_scale) << ", "
              << mode_name(i.mode)
              << " mode, " << i.threads << " thread" << (i.threads == 1 ? "" : "s") << std::endl;
    // Under mpirun the ranks' stdout is a pseudo-terminal whatever mpirun's own is (Open MPI's I/O
    // forwarding): log lines there, never the redrawn bar.
    if (i.rank == 0) {
      progress = std::make_unique<ProgressCallback>(
          std::cout, i.ranks == 1 && isatty(fileno(stdout)) != 0, i.ranks);
    }
  };
  hooks.on_note = [&](const std::string& note) {
    quiet.update();
    std::cout << note << std::endl;
  };
  // The display runs after the library's callbacks (it prints the epoch's test figures).
  struct Display : nn::Callback {
    std::unique_ptr<ProgressCallback>* p;
    void on_train_epoch_begin(nn::RunContext& rc) override { if (*p) (*p)->on_train_epoch_begin(rc); }
    void on_train_step_end(nn::RunContext& rc) override { if (*p) (*p)->on_train_step_end(rc); }
    void on_train_epoch_end(nn::RunContext& rc) override { if (*p) (*p)->on_train_epoch_end(rc); }
  } display;
  display.p = &progress;
  hooks.callbacks.push_back(&display);

  const train::RunResult r = train::run_training(o.run, hooks);
  if (r.ranks > 1 && !r.ranks_agree && parallel::rank() == 0) {
    std::cerr << "loom train: warning: the ranks' trained weights differ" << std::endl;
  }
  std::cout << "done: test accuracy " << std::fixed << std::setprecision(4) << r.test_accuracy
            << ", train loss " << r.train_loss
            << (r.train_loss_first_step > 1
                    ? " (the last epoch's steps from " + std::to_string(r.train_loss_first_step) +
                          ", since the resume)"
                    : std::string())
            << std::setprecision(0) << ", "
            << r.train_images_per_s << " images/s in training steps, compile "
            << std::setprecision(1) << r.compile_ms << " ms, total " << r.total_s
            << " s, peak RSS " << r.peak_rss_mib << " MiB" << std::defaultfloat << std::endl;
  if (!r.checkpoint.empty()) std::cout << "checkpoint: " << r.checkpoint << std::endl;
  if (!o.run.summary_dir.empty()) {
    std::cout << "summary: " << o.run.summary_dir << (r.ranks > 1 ? "/rank_<r>" : "")
              << " (tensorboard --logdir " << o.run.summary_dir << ")" << std::endl;
  }
  if (!o.run.save_graphs_dir.empty()) {
    std::cout << "graphs: " << o.run.save_graphs_dir << "/train_step, " << o.run.save_graphs_dir
              << "/eval (NN_<stage>.ir, .dot)" << std::endl;
  }
  if (!r.launch_log.empty()) std::cout << "launch log: " << r.launch_log << std::endl;
  if (!r.profile.empty()) {
    std::cout << "profile: " << r.profile << " (" << r.profile_steps << " steps; `loom profile show "
              << r.profile << "`)" << std::endl;
  }
  if (r.watch_hits >= 0) {
    std::cout << "watch: " << r.watch_hits << (r.watch_hits == 1 ? " hit" : " hits")
              << (r.watch_stopped ? "; training stopped at the first" : "") << std::endl;
  }
  if (!r.dump.empty()) {
    std::cout << "dump: " << r.dump << " (" << r.dump_bytes << " bytes; `loom compare " << r.dump
              << " OTHER`)" << std::endl;
  }
  if (o.json) std::cout << r.to_json() << std::endl;
  return 0;
}

int run_eval(const Options& o) {
  train::EvalConfig c;
  c.model = o.run.model;
  c.batch_size = o.run.batch_size;
  c.dataset = o.run.dataset;
  c.data_dir = o.run.data_dir;
  c.seed = o.run.seed;
  c.deterministic = o.run.deterministic;
  c.mode = o.run.mode;
  c.device = o.run.device;
  c.threads = o.run.threads;
  c.test_samples = o.run.test_samples;
  c.ckpt = o.ckpt;
  c.save_graphs_dir = o.run.save_graphs_dir;
  c.passes = o.run.passes;
  c.debug = o.run.debug;
  const train::EvalResult r =
      train::run_evaluation(c, [](const std::string& note) { std::cout << note << std::endl; });
  std::cout << "test accuracy " << std::fixed << std::setprecision(4) << r.test_accuracy
            << ", test loss " << r.test_loss << ", " << std::setprecision(1) << r.eval_s << " s"
            << std::defaultfloat << std::endl;
  if (o.json) std::cout << r.to_json() << std::endl;
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
    const Options o = parse_options(name, args);
    if (o.help) {
      std::cout << help_text(help);
      return 0;
    }
    if (name != "train") return run_eval(o);
    const int status = run_train(o);
    parallel::finalize();
    return status;
  } catch (const UsageError& e) {
    if (parallel::size() > 1) abort_job(name, e.what());
    std::cerr << "loom " << name << ": " << e.what() << "\n(see `loom " << name
              << " --help` for the options)\n";
    return 2;
  } catch (const train::ConfigError& e) {
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
