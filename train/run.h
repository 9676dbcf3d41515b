// Training as a library: a run of a model of the zoo (models/zoo.h), everything `loom train` and
// `loom eval` do — recipe defaults, the optimizer and its learning-rate schedule, data
// parallelism under mpirun, resume with its checks, checkpoints, summaries, the evaluation of
// the test set after every epoch, the rank-agreement check and the run's result record — so
// that the C++ API, the command line and Python run the same code. The command line only
// turns flags into a RunConfig and prints.
//
//   train::RunConfig c;
//   c.model = "lenet";
//   c.epochs = 1;
//   c.deterministic = true;
//   train::RunResult r = train::run_training(c);
//   std::cout << r.test_accuracy << " " << r.weights_sha256 << "\n" << r.to_json() << "\n";
//
// Data parallelism: when a launcher started the process (mpirun: OMPI_COMM_WORLD_SIZE,
// PMI_SIZE or LOOM_NUM_RANKS in the environment), run_training initialises MPI
// (parallel::init) and every rank runs the same call; the caller finalizes (parallel::finalize)
// when it is done with MPI. batch_size is the global batch (docs/design.md, parallel/).
//
// Devices (RunConfig::device, `--device GPU`): the step and the evaluation compile for that
// device, the network's Parameters and the optimizer's states live there from the first step,
// and each batch is copied there. Whatever reads values on the host copies them back through the
// backend (backend::to_host): the loss and the metrics, checkpoints (MindSpore's format, the same
// bytes), summaries, dumps, --check-numerics, watchpoints and weights_sha256. A device this build
// or machine has no backend for is a ValueError saying why. PyNative mode runs op by op on the
// device too (host scalars joining a device op are copied there).
//
// Errors: a ConfigError (a ValueError) for a configuration that cannot run, its message naming
// the option as `loom train` spells it ("--batch-size 33: under mpirun the global batch, ...");
// the rooms' own errors otherwise (a missing data file, a corrupt checkpoint).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/ir/error.h"
#include "nn/callback.h"
#include "nn/context.h"
#include "nn/train.h"

namespace loom::nn {
class Cell;
}  // namespace loom::nn

namespace loom::runtime {
class Observer;
}  // namespace loom::runtime

namespace loom::train {

struct ConfigError : ValueError {
  using ValueError::ValueError;
};

// Debugging a run (debug/): dumps in MindSpore's layout, the first NaN/Inf, watchpoints.
struct DebugOptions {
  std::string dump_dir;      // --dump DIR: every launch of every step (dump_mode 0, full)
  std::string dump_config;   // --dump-config FILE: MindSpore's data_dump.json ("" = the file
                             // named by $MINDSPORE_DUMP_CONFIG, when set); --dump DIR sets its path
  std::optional<std::uint64_t> dump_max_bytes;  // default debug::DumpConfig's (1 GiB)
  bool check_numerics = false;  // stop at the first NaN/Inf a kernel produces
  std::string watch;         // --watch SPEC (debug/watch.h)
  std::int64_t watch_every = 1;
  bool watch_stop = false;   // end training at the first hit, with a checkpoint
  // The profiler (debug/profiler.h): steps profile_start_step..profile_stop_step recorded and
  // written to profile_dir (every rank its own files) when training ends.
  std::string profile_dir;
  std::int64_t profile_start_step = 1, profile_stop_step = 10;
  bool profile_memory = false, profile_communication = false;
};

// A run; unset fields take the recipe's defaults.
struct RunConfig {
  std::string model;                        // a recipe's name ("lenet")
  std::optional<std::int64_t> epochs;       // total, also when resuming
  std::optional<std::int64_t> batch_size;   // the global batch
  std::optional<std::string> optimizer;     // momentum | sgd | adam | adamw
  std::optional<double> lr;                 // a schedule's peak when the recipe has one
  std::optional<double> momentum;
  std::optional<double> weight_decay;
  double clip_grad_norm = 0;                // > 0: global-norm clipping
  nn::LossScale loss_scale;                 // none by default (nn/train.h)
  bool loss_scale_given = false;            // else the amp level's (O2: MindSpore's dynamic)
  passes::AmpOptions amp;                   // mixed precision (O0: none; core/passes/amp.h)
  std::string dataset;                      // "" = the recipe's
  std::string data_dir;                     // "" = the dataset's default location
  std::uint64_t seed = 1;
  bool seed_given = false;                  // resuming takes the checkpoint's seed otherwise
  bool deterministic = false;
  nn::ExecMode mode = nn::ExecMode::kGraph;
  Device device = Device::kCPU;             // where the steps and evaluations run (see above)
  int threads = 0;                          // 0: LOOM_NUM_THREADS, or cores (/ ranks per host)
  std::int64_t train_samples = 0;           // 0: all
  std::int64_t test_samples = 0;
  // Checkpoints.
  std::string ckpt_dir;
  std::int64_t save_steps = 0;              // 0: once per epoch
  std::int64_t keep_ckpt = 5;
  std::string resume;                       // "", "auto" or a checkpoint's path
  // Summaries.
  std::string summary_dir;
  std::int64_t summary_freq = 10;
  // "+gradients", "-graph"...: collections on or off over MindSpore's defaults, in order
  // (summary::select_collection; ConfigError for an unknown name).
  std::vector<std::string> summary_collect;
  // Graphs and passes: dumps of every compile stage (D/train_step/NN_<stage>.ir, D/eval/...),
  // and the pipeline text replacing the training and evaluation pipelines ("" = theirs).
  std::string save_graphs_dir;
  std::string passes;
  // A CSV of every kernel launch of one training step (an observer; see launch_log.h).
  std::string launch_log;
  std::int64_t launch_log_step = 1;
  // A pause after every step (tests that kill a run mid-epoch), on every rank or on one.
  std::int64_t step_delay_ms = 0;
  int step_delay_rank = -1;  // -1: every rank
  DebugOptions debug;
};

// What a run prints before it starts, for the caller to show.
struct RunInfo {
  std::string model, dataset_title;
  std::int64_t steps_per_epoch = 0, epochs = 0, batch_size = 0, local_batch = 0;
  std::string optimizer;  // Optimizer::describe(), "scheduled" for a schedule
  std::uint64_t seed = 0;
  bool deterministic = false;
  nn::ExecMode mode = nn::ExecMode::kGraph;
  int threads = 0, ranks = 1, rank = 0;
  std::string loss_scale;  // LossScale::describe(), "" without loss scaling
  std::string amp;         // "O2 bfloat16", "" without mixed precision
};

// The run's result record (rank 0's view; every rank computes the same metrics).
struct RunResult {
  std::string model;
  std::int64_t epochs = 0, batch_size = 0;
  std::uint64_t seed = 0;
  double train_loss = 0, test_accuracy = 0, test_loss = 0;
  // The last epoch's first step (1-based) train_loss covers: after a resume in the middle of
  // that epoch the step it resumed at (in JSON as train_loss_first_step, only then), else 1.
  std::int64_t train_loss_first_step = 1;
  double train_images_per_s = 0, data_wait_fraction = 0, train_loop_s = 0;
  double compile_ms = 0, total_s = 0, peak_rss_mib = 0;
  // The device memory's high-water mark (a GPU run: the CUDA memory pool's), in JSON as
  // device_peak_mib; negative when the run was on the CPU.
  double device_peak_mib = -1;
  std::string weights_sha256;
  std::vector<std::string> rank_weights_sha256;  // under mpirun
  bool ranks_agree = true;  // the trainable weights' hashes are equal on every rank
  int threads = 0, ranks = 1;
  nn::ExecMode mode = nn::ExecMode::kGraph;
  bool deterministic = false;
  std::string optimizer;      // "momentum", "sgd", "adam", "adamw"
  std::string checkpoint;     // the last checkpoint saved ("" without --ckpt-dir)
  std::string resumed_from;   // "" for a fresh run
  std::int64_t initial_step = 0;
  std::string summary_dir;    // where the event files went ("" without summaries)
  std::string launch_log;     // the launch CSV written ("" without it)
  std::string dump;           // the dump folder ("" without a dump)
  std::uint64_t dump_bytes = 0;
  std::int64_t watch_hits = -1;  // watchpoint hits (-1 without --watch)
  std::string profile;           // the profiler's folder ("" without --profile)
  std::int64_t profile_steps = 0;
  bool watch_stopped = false;    // --watch-stop ended training at a hit
  bool evaluated_only = false;  // resumed from the end of training: evaluated, not trained
  // With --loss-scale: the scale after the last step and the steps skipped (JSON loss_scale and
  // skipped_steps, only then).
  double loss_scale = 0;
  std::int64_t skipped_steps = -1;
  // With --amp-level: the level and dtype ("O2", "bfloat16"), and the ops that computed in
  // Float32 for want of a low-precision kernel (JSON amp_level, amp_dtype, float32_fallbacks).
  std::string amp_level, amp_dtype;
  std::vector<std::string> float32_fallbacks;

  // One line of JSON (the keys of `loom train --json`, documented in its help).
  std::string to_json() const;
};

// What the caller sees while the run goes: the header, notes ("starting fresh", "resumed
// from ..."), and callbacks of its own (a progress display) run after the library's.
struct RunHooks {
  std::function<void(const RunInfo&)> on_start;
  std::function<void(const std::string& note)> on_note;
  std::vector<nn::Callback*> callbacks;
  // Observers installed on the training step and the evaluation (runtime/observer.h).
  std::vector<std::shared_ptr<runtime::Observer>> observers;
};

RunResult run_training(const RunConfig& config, const RunHooks& hooks = {});

// `loom eval`: the test set's accuracy and loss of a model, its weights from a checkpoint (every
// parameter of the network must be there) or freshly initialised from the seed.
struct EvalConfig {
  std::string model;
  std::optional<std::int64_t> batch_size;
  std::string dataset, data_dir;
  std::uint64_t seed = 1;
  bool deterministic = false;
  nn::ExecMode mode = nn::ExecMode::kGraph;
  Device device = Device::kCPU;
  int threads = 0;
  std::int64_t test_samples = 0;
  std::string ckpt;               // "" = the untrained network
  std::string save_graphs_dir, passes;
  DebugOptions debug;             // dumps and --check-numerics (watchpoints are for training)
};

struct EvalResult {
  std::string model;
  std::int64_t batch_size = 0;
  std::uint64_t seed = 0;
  double test_accuracy = 0, test_loss = 0, eval_images_per_s = 0, eval_s = 0, total_s = 0;
  double peak_rss_mib = 0;
  double device_peak_mib = -1;  // as RunResult's
  std::string weights_sha256;
  int threads = 0;
  nn::ExecMode mode = nn::ExecMode::kGraph;
  bool deterministic = false;
  std::string checkpoint;
  std::int64_t checkpoint_epoch = -1, checkpoint_step = -1;  // its epoch_num, step_num
  std::string to_json() const;
};

EvalResult run_evaluation(const EvalConfig& config,
                          const std::function<void(const std::string& note)>& on_note = {});

// SHA-256 of every parameter's bytes (read on the host wherever they live), parameters sorted by
// name, as 64 lowercase hex digits.
std::string weights_sha256(nn::Cell& net);
// Whether a launcher (mpirun) started this process: then run_training initialises MPI.
bool launched_by_mpi();
// getrusage's maximum resident set size, in MiB.
double peak_rss_mib();

}  // namespace loom::train
