// train/run.h: a zoo model's training and evaluation runs.
#include "train/run.h"

#include <openssl/evp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <utility>

#include "backends/backend.h"
#include "backends/thread_pool.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/train_state.h"
#include "core/random/random.h"
#include "debug/dump.h"
#include "debug/numerics.h"
#include "debug/profiler.h"
#include "debug/watch.h"
#include "models/zoo.h"
#include "nn/loss.h"
#include "nn/metrics.h"
#include "nn/model.h"
#include "optim/optimizer.h"
#include "parallel/parallel.h"
#include "runtime/compiled_function.h"
#include "summary/collector.h"
#include "train/launch_log.h"

namespace loom::train {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

const char* mode_name(nn::ExecMode m) { return m == nn::ExecMode::kGraph ? "graph" : "pynative"; }

std::string dataset_title(const std::string& name) {
  if (name == "fashion-mnist") return "Fashion-MNIST";
  if (name == "cifar10") return "CIFAR-10";
  if (name == "mnist") return "MNIST";
  return name;
}

// The recipe's defaults with the configuration's choices applied.
struct Resolved {
  const models::Recipe* recipe = nullptr;
  std::string dataset;
  std::int64_t epochs = 0;
  std::int64_t batch_size = 0;
  optim::OptimizerSpec optimizer;
  bool scheduled = false;  // the recipe's learning rate is a schedule
  double lr_scale = 1;     // --lr over the recipe's learning rate (scales a schedule)
  summary::SummaryCollectorOptions summary;  // --summary-freq and --summary-collect applied
};

const models::Recipe& find_recipe(const std::string& model) {
  std::string names;
  for (const models::Recipe& r : models::recipes()) {
    if (r.name == model) return r;
    names += (names.empty() ? "" : ", ") + r.name;
  }
  if (model.empty()) throw ConfigError("expected a model (" + names + ")");
  throw ConfigError("expected a model in (" + names + "), got '" + model + "'");
}

std::string resolve_dataset(const models::Recipe& r, const std::string& model,
                            const std::string& dataset) {
  const std::string d = dataset.empty() ? r.defaults.dataset : dataset;
  if (std::find(r.datasets.begin(), r.datasets.end(), d) == r.datasets.end()) {
    std::string known;
    for (const auto& n : r.datasets) known += (known.empty() ? "" : ", ") + n;
    throw ConfigError("--dataset: expected one of " + model + "'s datasets (" + known +
                      "), got '" + d + "'");
  }
  return d;
}

Resolved resolve(const RunConfig& c) {
  Resolved r;
  r.recipe = &find_recipe(c.model);
  const models::TrainDefaults& d = r.recipe->defaults;
  r.dataset = resolve_dataset(*r.recipe, c.model, c.dataset);
  r.epochs = c.epochs.value_or(d.epochs);
  r.batch_size = c.batch_size.value_or(d.batch_size);
  if (r.epochs < 1) throw ConfigError("--epochs: expected at least 1, got " + std::to_string(r.epochs));
  if (r.batch_size < 1) {
    throw ConfigError("--batch-size: expected at least 1, got " + std::to_string(r.batch_size));
  }
  r.optimizer = d.optimizer;
  if (c.optimizer) {
    try {
      r.optimizer.kind = optim::kind_from_name(*c.optimizer);
    } catch (const ValueError&) {
      throw ConfigError("--optimizer: expected one of momentum, sgd, adam, adamw, got '" +
                        *c.optimizer + "'");
    }
  }
  r.scheduled = static_cast<bool>(d.learning_rate);
  if (c.lr) {
    if (!(*c.lr > 0)) throw ConfigError("--lr: expected a positive number");
    r.lr_scale = d.optimizer.learning_rate > 0 ? *c.lr / d.optimizer.learning_rate : 1.0;
    r.optimizer.learning_rate = *c.lr;
  }
  const bool has_momentum = r.optimizer.kind == optim::OptimizerKind::kMomentum ||
                            r.optimizer.kind == optim::OptimizerKind::kSGD;
  if (c.momentum && !has_momentum) {
    throw ConfigError(std::string("--momentum: only Momentum and SGD take it; this run trains "
                                  "with ") + optim::kind_name(r.optimizer.kind));
  }
  if (c.momentum) r.optimizer.momentum = *c.momentum;
  if (c.weight_decay) r.optimizer.weight_decay = *c.weight_decay;
  if (c.clip_grad_norm > 0) r.optimizer.clip_global_norm = c.clip_grad_norm;
  r.summary.collect_freq = c.summary_freq;
  for (const std::string& item : c.summary_collect) {
    try {
      summary::select_collection(r.summary, item);
    } catch (const ValueError& e) {
      throw ConfigError(std::string("--summary-collect: ") + e.what());
    }
  }
  return r;
}

// The optimizer of a run: the spec, its learning rate a schedule over the global step when the
// recipe has one (scaled to --lr's peak).
std::shared_ptr<optim::Optimizer> make_run_optimizer(const Resolved& rs,
                                                     std::int64_t steps_per_epoch) {
  if (!rs.scheduled) return optim::make_optimizer(rs.optimizer);
  const auto f = rs.recipe->defaults.learning_rate;
  const double scale = rs.lr_scale;
  const std::int64_t epochs = rs.epochs;
  return optim::make_optimizer(
      rs.optimizer, optim::LearningRate::schedule([f, scale, steps_per_epoch, epochs](std::int64_t s) {
        return scale * f(s, steps_per_epoch, epochs);
      }));
}

// Applies threads (before anything starts the thread pool: it reads LOOM_NUM_THREADS once; the
// GEMM gives OpenBLAS the pool's count at its first call), the seed and determinism, the mode and
// the device.
void set_up(int threads, std::uint64_t seed, bool deterministic, nn::ExecMode mode, Device device) {
  if (threads > 0) setenv("LOOM_NUM_THREADS", std::to_string(threads).c_str(), 1);
  random::seed_all(seed, deterministic);
  nn::set_context_mode(mode);
  nn::set_context_device(device);
}

nn::Model make_model(std::shared_ptr<nn::Cell> net, std::shared_ptr<optim::Optimizer> opt) {
  return nn::Model(std::move(net),
                   std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(/*sparse=*/true, "mean"),
                   std::move(opt),
                   {{"accuracy", std::make_shared<nn::Accuracy>()},
                    {"loss", std::make_shared<nn::Loss>()}});
}

double metric(const std::map<std::string, double>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? NAN : it->second;
}

std::int64_t read_int(const checkpoint::Checkpoint& ck, const std::string& name,
                      std::int64_t fallback) {
  const Tensor* t = ck.find(name);
  return t != nullptr && t->numel() == 1 ? static_cast<std::int64_t>(t->get(0)) : fallback;
}

// Ranks on this host (Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE, else every rank).
int local_ranks() {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
    if (const char* s = std::getenv(v); s != nullptr && std::atoi(s) > 0) return std::atoi(s);
  }
  return parallel::size();
}

// Every rank's string, in rank order, on every rank.
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

// A pause after each step (tests that kill a run mid-epoch).
class StepDelay : public nn::Callback {
 public:
  explicit StepDelay(std::int64_t ms) : ms_(ms) {}
  void on_train_step_end(nn::RunContext&) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms_));
  }

 private:
  std::int64_t ms_;
};

// The resume checkpoint: found (rank 0 looks, every rank reads the file it found) and read.
struct Resume {
  std::string path;
  std::optional<checkpoint::Checkpoint> ck;
};

Resume find_resume(const RunConfig& c, const RunHooks& hooks) {
  Resume r;
  if (c.resume.empty()) return r;
  parallel::Communicator& comm = parallel::world();
  // Temporary files of saves that a kill interrupted, in the directory resumed from.
  const std::string dir = c.resume == "auto" ? c.ckpt_dir
                          : std::filesystem::path(c.resume).has_parent_path()
                              ? std::filesystem::path(c.resume).parent_path().string()
                              : std::string(".");
  if (parallel::is_writer() && !dir.empty()) {
    const std::vector<std::string> removed = checkpoint::remove_orphaned_temporaries(dir);
    if (!removed.empty() && hooks.on_note) {
      std::string names;
      for (const std::string& p : removed) {
        names += (names.empty() ? "" : ", ") + std::filesystem::path(p).filename().string();
      }
      hooks.on_note("loom train " + c.model + ": removed " + std::to_string(removed.size()) +
                    " temporary checkpoint file" + (removed.size() == 1 ? "" : "s") +
                    " that an interrupted save left in " + dir + ": " + names);
    }
  }
  if (c.resume == "auto") {
    if (c.ckpt_dir.empty()) throw ConfigError("--resume auto: needs --ckpt-dir (the directory to look in)");
    std::string latest;
    if (parallel::is_writer()) {
      latest = checkpoint::latest_checkpoint(c.ckpt_dir, c.model).value_or(std::string());
    }
    if (comm.size() > 1) comm.broadcast_bytes(latest, 0);
    if (latest.empty()) {
      if (hooks.on_note) {
        hooks.on_note("loom train " + c.model + ": --resume auto: no " + c.model +
                      " checkpoint in " + c.ckpt_dir + "; starting fresh");
      }
      return r;
    }
    r.path = latest;
  } else {
    r.path = c.resume;
    if (!std::filesystem::exists(r.path)) {
      throw ValueError("--resume: no such checkpoint file '" + r.path + "'");
    }
  }
  r.ck = checkpoint::load_checkpoint(r.path);
  return r;
}

}  // namespace

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "LOOM_NUM_RANKS"}) {
    if (std::getenv(v) != nullptr) return true;
  }
  return false;
}

// The device's memory high-water mark in MiB; -1 for the CPU or where the backend keeps none.
static double device_peak_mib(Device device) {
  if (device == Device::kCPU) return -1;
  backend::Backend* b = backend::find_backend(device);
  const std::int64_t bytes = b ? b->memory_high_water() : -1;
  return bytes < 0 ? -1 : static_cast<double>(bytes) / (1024.0 * 1024.0);
}

double peak_rss_mib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

std::string weights_sha256(nn::Cell& net) {
  std::map<std::string, Tensor> sorted;  // host memory: parameters on a device are copied
  for (auto& [name, p] : net.parameters_and_names()) sorted[name] = backend::to_host(p->value);
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    throw InternalError("weights_sha256: EVP_DigestInit_ex failed");
  }
  for (const auto& [name, t] : sorted) {
    if (EVP_DigestUpdate(ctx.get(), t.raw_data(), t.nbytes()) != 1) {
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

namespace {

// A number as JSON: `digits` significant digits, null when not finite.
nlohmann::json number(double v, int digits = 6) {
  if (!std::isfinite(v)) return nullptr;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return std::strtod(buf, nullptr);
}

}  // namespace

namespace {

// MindSpore's spelling of an amp dtype ("float16", "bfloat16": passes::amp_dtype_from_name's).
std::string amp_dtype_name(DType dtype) {
  return dtype == DType::kBFloat16 ? "bfloat16" : "float16";
}

}  // namespace

std::string RunResult::to_json() const {
  nlohmann::ordered_json j;
  j["model"] = model;
  j["epochs"] = epochs;
  j["batch_size"] = batch_size;
  j["seed"] = seed;
  j["train_loss"] = number(train_loss);
  if (train_loss_first_step > 1) j["train_loss_first_step"] = train_loss_first_step;
  if (skipped_steps >= 0) {
    j["loss_scale"] = number(loss_scale, 9);  // a Float32 value, exactly
    j["skipped_steps"] = skipped_steps;
  }
  if (!amp_level.empty()) {
    j["amp_level"] = amp_level;
    j["amp_dtype"] = amp_dtype;
    j["float32_fallbacks"] = float32_fallbacks;
  }
  j["test_accuracy"] = number(test_accuracy);
  j["test_loss"] = number(test_loss);
  j["train_images_per_s"] = number(train_images_per_s, 5);
  j["data_wait_fraction"] = number(data_wait_fraction, 4);
  j["train_loop_s"] = number(train_loop_s, 4);
  j["compile_ms"] = number(compile_ms, 4);
  j["total_s"] = number(total_s, 4);
  j["peak_rss_mib"] = number(peak_rss_mib, 4);
  if (device_peak_mib >= 0) j["device_peak_mib"] = number(device_peak_mib, 4);
  j["weights_sha256"] = weights_sha256;
  j["threads"] = threads;
  j["mode"] = mode_name(mode);
  j["deterministic"] = deterministic;
  j["optimizer"] = optimizer;
  j["ranks"] = ranks;
  if (ranks > 1) j["rank_weights_sha256"] = rank_weights_sha256;
  if (!checkpoint.empty()) j["checkpoint"] = checkpoint;
  if (!resumed_from.empty()) {
    j["resumed_from"] = resumed_from;
    j["initial_step"] = initial_step;
  }
  if (!launch_log.empty()) j["launch_log"] = launch_log;
  if (!dump.empty()) {
    j["dump"] = dump;
    j["dump_bytes"] = dump_bytes;
  }
  if (!profile.empty()) {
    j["profile"] = profile;
    j["profile_steps"] = profile_steps;
  }
  if (watch_hits >= 0) {
    j["watch_hits"] = watch_hits;
    j["watch_stopped"] = watch_stopped;
  }
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string EvalResult::to_json() const {
  nlohmann::ordered_json j;
  j["model"] = model;
  j["batch_size"] = batch_size;
  j["seed"] = seed;
  j["test_accuracy"] = number(test_accuracy);
  j["test_loss"] = number(test_loss);
  j["eval_images_per_s"] = number(eval_images_per_s, 5);
  j["total_s"] = number(total_s, 4);
  j["peak_rss_mib"] = number(peak_rss_mib, 4);
  if (device_peak_mib >= 0) j["device_peak_mib"] = number(device_peak_mib, 4);
  j["weights_sha256"] = weights_sha256;
  j["threads"] = threads;
  j["mode"] = mode_name(mode);
  j["deterministic"] = deterministic;
  if (!checkpoint.empty()) j["checkpoint"] = checkpoint;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

// The dumper and the numerics checker a run asks for (debug/), installed on the model and, for
// training, among the callbacks (they take the step numbers from them).
struct DebugTools {
  std::shared_ptr<debug::Dumper> dumper;
  std::shared_ptr<debug::NumericsChecker> numerics;
  std::shared_ptr<debug::Watcher> watcher;
  std::shared_ptr<debug::Profiler> profiler;
};

// --watch-stop without --ckpt-dir: the state at the hit's step, saved in the current folder
// (with --ckpt-dir, ModelCheckpoint's save at the end of training holds it).
class WatchStopSaver : public nn::Callback {
 public:
  WatchStopSaver(const debug::Watcher& w, std::string model,
                 std::function<void(const std::string&)> note)
      : watcher_(w), model_(std::move(model)), note_(std::move(note)) {}
  void on_train_step_end(nn::RunContext& rc) override {
    if (saved_ || !watcher_.stopped()) return;
    saved_ = true;
    path = model_ + "-watch_" + std::to_string(rc.cur_step_num) + ".ckpt";
    checkpoint::save_checkpoint(checkpoint::training_state(rc), path);
    if (note_) {
      note_("watch: stopped at step " + std::to_string(rc.cur_step_num) + "; checkpoint: " + path);
    }
  }
  std::string path;

 private:
  const debug::Watcher& watcher_;
  std::string model_;
  std::function<void(const std::string&)> note_;
  bool saved_ = false;
};

DebugTools make_debug_tools(const DebugOptions& o, const std::string& net, int rank,
                            nn::Model& model, std::vector<nn::Callback*>* callbacks,
                            const std::function<void(const std::string&)>& on_note,
                            std::int64_t total_iterations, bool loss_scaled = false) {
  DebugTools t;
  std::optional<debug::DumpConfig> config;
  try {
    if (!o.dump_config.empty()) {
      config = debug::load_dump_config(o.dump_config);
    } else if (const char* env = std::getenv("MINDSPORE_DUMP_CONFIG"); env && *env) {
      config = debug::load_dump_config(env);
      if (on_note) on_note(std::string("dump: the configuration of MINDSPORE_DUMP_CONFIG=") + env);
    }
  } catch (const ValueError& e) {
    throw ConfigError(std::string("--dump-config: ") + e.what());
  }
  if (!o.dump_dir.empty()) {
    if (config) {
      config->path = o.dump_dir;
    } else {
      config = debug::dump_config_for_dir(o.dump_dir, net);
    }
  }
  if (config) {
    if (o.dump_max_bytes) config->max_bytes = *o.dump_max_bytes;
    t.dumper = std::make_shared<debug::Dumper>(*config, on_note);
    t.dumper->set_rank(rank);
    t.dumper->set_total_iterations(total_iterations);
    model.add_observer(t.dumper);
    if (callbacks) {
      callbacks->push_back(t.dumper.get());
      // Gradients are extra outputs of the step: on before its first compilation.
      if (t.dumper->wants_gradients()) model.build_train_network().set_return_gradients(true);
    }
  }
  if (o.check_numerics) {
    // With loss scaling an overflow skips its step: each step's first non-finite node is noted
    // (the op that overflowed), not an error.
    t.numerics = std::make_shared<debug::NumericsChecker>(debug::NumericsOptions{
        .dump_dir = config ? config->path : "numerics_dump",
        .net_name = net,
        .rank = rank,
        .stop = !loss_scaled,
        .on_found = [on_note](const debug::NumericsReport&, const std::string& line) {
          if (on_note) on_note("check-numerics: " + line);
        }});
    model.add_observer(t.numerics);
    if (callbacks) callbacks->push_back(t.numerics.get());
  }
  if (!o.profile_dir.empty() && callbacks) {
    try {
      t.profiler = std::make_shared<debug::Profiler>(debug::ProfilerOptions{
          .output_path = o.profile_dir,
          .start_step = o.profile_start_step,
          .stop_step = o.profile_stop_step,
          .profile_memory = o.profile_memory,
          .profile_communication = o.profile_communication,
          .rank = rank,
          .ranks = parallel::world().size(),
          .model = net,
          .device = nn::context_device()});
    } catch (const ValueError& e) {
      throw ConfigError(std::string("--profile-start-step/--profile-stop-step: ") + e.what());
    }
    model.add_observer(t.profiler);
    // First of the callbacks: its step ends right after the step, before the others' work.
    callbacks->insert(callbacks->begin(), t.profiler.get());
  }
  if (!o.watch.empty() && callbacks) {
    std::vector<debug::WatchCondition> conditions;
    try {
      conditions = debug::parse_watch_spec(o.watch);
    } catch (const ValueError& e) {
      throw ConfigError(std::string("--watch: ") + e.what());
    }
    const bool gradients = std::any_of(conditions.begin(), conditions.end(), [](const auto& c) {
      return c.target == debug::WatchTarget::kGradient;
    });
    t.watcher = std::make_shared<debug::Watcher>(
        std::move(conditions),
        debug::WatchOptions{.every = o.watch_every,
                            .stop_on_hit = o.watch_stop,
                            .on_hit = [on_note](const debug::WatchHit& h) {
                              if (on_note) on_note(debug::format_watch_hit(h));
                            }});
    model.add_observer(t.watcher);
    callbacks->push_back(t.watcher.get());
    // Gradients are extra outputs of the step: on before its first compilation.
    if (gradients) model.build_train_network().set_return_gradients(true);
  }
  return t;
}

}  // namespace

RunResult run_training(const RunConfig& config, const RunHooks& hooks) {
  const Clock::time_point t0 = Clock::now();
  RunConfig c = config;
  const Resolved rs = resolve(c);
  const models::Recipe& recipe = *rs.recipe;
  // mpirun: every rank runs this; a plain process never starts MPI (a singleton costs ~1 s).
  if (launched_by_mpi() && !parallel::initialized()) parallel::init();
  parallel::Communicator& comm = parallel::world();
  const int nranks = comm.size();
  if (rs.batch_size % nranks != 0) {
    throw ConfigError("--batch-size " + std::to_string(rs.batch_size) +
                      ": under mpirun the global batch, expected a multiple of the " +
                      std::to_string(nranks) + " ranks (each rank reads batch-size / ranks)");
  }
  const std::int64_t local_batch = rs.batch_size / nranks;

  // Resume: the checkpoint is read first (a run resumed without --seed takes its seed).
  Resume resume = find_resume(c, hooks);
  if (resume.ck) {
    const Tensor* seed = resume.ck->find("loom.seed");
    if (!c.seed_given && seed != nullptr && seed->numel() == 1) {
      c.seed = static_cast<std::uint64_t>(seed->get(0));
    }
  }
  // Under mpirun without a thread count: the host's cores shared by its ranks.
  if (nranks > 1 && c.threads == 0 && std::getenv("LOOM_NUM_THREADS") == nullptr) {
    c.threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / local_ranks());
  }
  set_up(c.threads, c.seed, c.deterministic, c.mode, c.device);  // the same seed on every rank
  const int threads = backend::ThreadPool::global().num_threads();

  // The same order as a fresh run: datasets (the shuffle takes the global seed), then network.
  // Each rank reads its shard: rows r, r + N, ... of the shuffled order, batches of B / N.
  const models::DatasetOptions train_opts{rs.dataset, c.data_dir, local_batch, c.train_samples,
                                          nranks, comm.rank()};
  const models::DatasetOptions test_opts{rs.dataset, c.data_dir, local_batch, c.test_samples,
                                         nranks, comm.rank()};
  data::DatasetPtr train_ds = recipe.make_train_dataset(train_opts);
  data::DatasetPtr test_ds = recipe.make_test_dataset(test_opts);
  if (train_ds->size() == 0) {
    throw ConfigError("--batch-size " + std::to_string(rs.batch_size) +
                      ": larger than the training set" +
                      (c.train_samples > 0 ? " (" + std::to_string(c.train_samples) + " images)"
                                           : std::string()) +
                      "; no full batch to train on");
  }
  const std::int64_t steps_per_epoch = train_ds->size();
  if (nranks > 1) {
    // A recipe that ignores num_shards would give every rank the same batches.
    const data::Row first = train_ds->get(0, 0);
    std::vector<const Tensor*> ts;
    for (const Tensor& t : first) ts.push_back(&t);
    const std::vector<std::uint64_t> h = comm.all_gather(parallel::hash_tensors(ts));
    if (std::all_of(h.begin(), h.end(), [&](std::uint64_t x) { return x == h[0]; })) {
      throw ConfigError("data parallelism: the " + c.model +
                        " recipe gives every rank the same batches (its datasets ignore "
                        "models::DatasetOptions::num_shards); run it without mpirun");
    }
  }

  std::shared_ptr<nn::Cell> net = recipe.make_network({.dataset = rs.dataset});
  std::shared_ptr<optim::Optimizer> optimizer = make_run_optimizer(rs, steps_per_epoch);
  nn::Model model = make_model(net, optimizer);
  if (c.amp.level != passes::AmpLevel::kO0) model.set_amp(c.amp);
  // MindSpore's build_train_network: O2 scales the loss dynamically unless told otherwise.
  const nn::LossScale loss_scale = c.loss_scale_given || c.amp.level != passes::AmpLevel::kO2
                                       ? c.loss_scale
                                       : nn::LossScale::dynamic();
  if (!c.passes.empty()) model.set_passes(c.passes);
  if (!c.save_graphs_dir.empty()) model.set_save_graphs_dir(c.save_graphs_dir);
  for (const auto& o : hooks.observers) model.add_observer(o);

  RunInfo info{.model = c.model,
               .dataset_title = dataset_title(rs.dataset),
               .steps_per_epoch = steps_per_epoch,
               .epochs = rs.epochs,
               .batch_size = rs.batch_size,
               .local_batch = local_batch,
               .optimizer = optimizer->describe(),
               .seed = c.seed,
               .deterministic = c.deterministic,
               .mode = c.mode,
               .threads = threads,
               .ranks = nranks,
               .rank = comm.rank(),
               .loss_scale = loss_scale.enabled() ? loss_scale.describe() : std::string(),
               .amp = c.amp.level == passes::AmpLevel::kO0
                          ? std::string()
                          : std::string(passes::amp_level_name(c.amp.level)) + " " +
                                amp_dtype_name(c.amp.dtype)};
  // The dumper and the numerics checker first: a bad dump configuration stops the run before it
  // starts, and they see the step numbers before the other callbacks run.
  std::vector<nn::Callback*> callbacks;
  const DebugTools debug_tools =
      make_debug_tools(c.debug, c.model, comm.rank(), model, &callbacks, hooks.on_note,
                       rs.epochs * steps_per_epoch, loss_scale.enabled());
  if (hooks.on_start) hooks.on_start(info);

  if (loss_scale.enabled()) {
    model.build_train_network().set_loss_scale(loss_scale);
  }
  if (c.amp.level != passes::AmpLevel::kO0 && hooks.on_note) {
    // What the backend lacks shows before the first step: a low-precision product on Float32
    // kernels (the numerics of the dtype, not its speed).
    const backend::Backend& b = nn::context_backend();
    std::vector<std::string> missing;
    for (const char* op : {"Conv2D", "MatMul"}) {
      if (b.find_kernel(op, c.amp.dtype) == nullptr) missing.push_back(op);
    }
    if (!missing.empty()) {
      hooks.on_note(std::string("amp: the ") + std::string(b.name()) + " backend has no " +
                    std::string(dtype_name(c.amp.dtype)) +
                    " kernels for the products (" + missing[0] +
                    (missing.size() > 1 ? ", " + missing[1] : std::string()) +
                    "...): they compute in Float32 on " + std::string(dtype_name(c.amp.dtype)) +
                    " values, rounded back after each op (the dtype's numerics, not its speed)");
    }
  }
  nn::TrainOptions train_options;
  checkpoint::ResumePoint resumed;
  if (resume.ck) {
    model.build_train_network();
    resumed = checkpoint::restore_training_state(model, *resume.ck);
    if (resumed.epoch * steps_per_epoch + resumed.index !=
        resumed.global_step + resumed.skipped_steps) {
      throw ValueError("--resume " + resume.path + ": the checkpoint's position (epoch " +
                        std::to_string(resumed.epoch + 1) + ", row " +
                        std::to_string(resumed.index) + ", step " +
                        std::to_string(resumed.global_step) + ") does not fit " +
                        std::to_string(steps_per_epoch) +
                        " batches per epoch: resume with the first run's --batch-size and "
                        "--train-samples");
    }
    if (resumed.epoch > rs.epochs) {
      throw ValueError("--resume " + resume.path + ": the checkpoint is past epoch " +
                        std::to_string(rs.epochs) + " (it has " +
                        std::to_string(resumed.global_step) + " steps); pass a larger --epochs");
    }
    if (hooks.on_note) {
      hooks.on_note("resumed from " + resume.path + ": epoch " +
                    std::to_string(resumed.epoch + 1) + ", step " +
                    std::to_string(resumed.global_step));
    }
    train_options.initial_epoch = resumed.epoch;
    train_options.start = {resumed.epoch, resumed.index};
  }
  // Under mpirun: the gradient all-reduce, the metrics' sums over the ranks, and rank 0's
  // weights, optimizer states and step count on every rank (after any restore). Size 1: nothing.
  parallel::setup_data_parallel(model, comm);

  // Callbacks, in order: the debug tools; the step delay; checkpoints; summaries; the launch
  // log; the caller's. (The test set is evaluated by fit() before them at each epoch's end.)
  std::unique_ptr<StepDelay> delay;
  if (c.step_delay_ms > 0 && (c.step_delay_rank < 0 || c.step_delay_rank == comm.rank())) {
    delay = std::make_unique<StepDelay>(c.step_delay_ms);
    callbacks.push_back(delay.get());
  }
  std::unique_ptr<checkpoint::ModelCheckpoint> ckpt;
  if (!c.ckpt_dir.empty() && parallel::is_writer()) {  // rank 0 writes the job's checkpoints
    ckpt = std::make_unique<checkpoint::ModelCheckpoint>(
        c.model, c.ckpt_dir,
        checkpoint::CheckpointConfig{
            .save_checkpoint_steps = c.save_steps > 0 ? c.save_steps : steps_per_epoch,
            .keep_checkpoint_max = c.keep_ckpt});
    callbacks.push_back(ckpt.get());
  }
  std::unique_ptr<summary::SummaryCollector> collector;
  RunResult result;
  if (!c.summary_dir.empty()) {
    std::map<std::string, summary::HParamValue> lineage{
        {"model", c.model},
        {"dataset", rs.dataset},
        {"learning_rate", rs.optimizer.learning_rate},
        {"optimizer", optimizer->name()},
        {"weight_decay", rs.optimizer.weight_decay},
        {"seed", static_cast<double>(c.seed)},
        {"deterministic", c.deterministic}};
    if (rs.optimizer.kind == optim::OptimizerKind::kMomentum ||
        rs.optimizer.kind == optim::OptimizerKind::kSGD) {
      lineage.emplace("momentum", rs.optimizer.momentum);
    }
    // Under mpirun one event file per rank, in <dir>/rank_<r>.
    result.summary_dir = nranks > 1 ? parallel::rank_dir(c.summary_dir) : c.summary_dir;
    summary::SummaryCollectorOptions options = rs.summary;
    options.custom_lineage_data = std::move(lineage);
    collector = std::make_unique<summary::SummaryCollector>(result.summary_dir, std::move(options));
    // Gradients are extra outputs of the step: on before its first compilation.
    if (collector->wants_gradients()) model.build_train_network().set_return_gradients(true);
    callbacks.push_back(collector.get());
  }
  std::unique_ptr<WatchStopSaver> watch_saver;
  if (debug_tools.watcher && c.debug.watch_stop && !ckpt && parallel::is_writer()) {
    watch_saver = std::make_unique<WatchStopSaver>(*debug_tools.watcher, c.model, hooks.on_note);
    callbacks.push_back(watch_saver.get());
  }
  std::shared_ptr<LaunchLog> launch_log;
  if (!c.launch_log.empty()) {
    launch_log = std::make_shared<LaunchLog>(c.launch_log, c.launch_log_step);
    model.add_observer(launch_log);
    callbacks.push_back(launch_log.get());
  }
  for (nn::Callback* cb : hooks.callbacks) callbacks.push_back(cb);

  std::map<std::string, double> metrics;
  if (resumed.epoch < rs.epochs || !resume.ck) {
    model.fit(rs.epochs, train_ds, test_ds, callbacks, train_options);
    metrics = model.train_stats().metrics;
  } else {  // the checkpoint is the end of training: evaluate it
    if (hooks.on_note) {
      hooks.on_note("the checkpoint is the end of epoch " + std::to_string(rs.epochs) +
                    ": nothing left to train; evaluating it");
    }
    metrics = model.eval(test_ds);
    result.evaluated_only = true;
  }

  const nn::TrainStats& st = model.train_stats();
  // The first step of each input signature also traces and compiles: that time is compile_ms.
  const double step_s = std::max(st.step_seconds - st.compile_seconds, 1e-9);
  const double loop_s = st.step_seconds + st.data_wait_seconds;
  result.model = c.model;
  result.epochs = rs.epochs;
  result.batch_size = rs.batch_size;
  result.seed = c.seed;
  if (loss_scale.enabled()) {
    result.loss_scale = model.build_train_network().loss_scale();
    result.skipped_steps = model.build_train_network().skipped_steps();
  }
  if (c.amp.level != passes::AmpLevel::kO0) {
    result.amp_level = passes::amp_level_name(c.amp.level);
    result.amp_dtype = amp_dtype_name(c.amp.dtype);
    std::set<std::string> ops;
    if (model.train_network()) {
      const auto& f = model.train_network()->compiled_function().float32_fallbacks();
      ops.insert(f.begin(), f.end());
    }
    const auto& f = model.eval_function().float32_fallbacks();
    ops.insert(f.begin(), f.end());
    result.float32_fallbacks.assign(ops.begin(), ops.end());
  }
  result.train_loss = result.evaluated_only ? NAN : st.epoch_loss_mean;
  result.train_loss_first_step = st.epoch_loss_first_step;
  result.test_accuracy = metric(metrics, "accuracy");
  result.test_loss = metric(metrics, "loss");
  // All ranks together: they step in lockstep, each on its share of the global batch.
  result.train_images_per_s =
      st.steps > 0 ? st.samples * static_cast<double>(nranks) / step_s : 0;
  result.data_wait_fraction = loop_s > 0 ? st.data_wait_seconds / loop_s : 0;
  result.train_loop_s = st.loop_seconds;
  result.compile_ms = st.compile_seconds * 1000;
  result.weights_sha256 = weights_sha256(*net);
  result.rank_weights_sha256 = gather_strings(result.weights_sha256);
  if (nranks > 1) {
    // The trainable weights must agree; BatchNorm's moving statistics (requires_grad false) are
    // each rank's own (not reduced, as in MindSpore), so they may differ.
    std::map<std::string, Tensor> trainable;  // host copies of parameters on a device
    for (auto& [name, p] : net->parameters_and_names()) {
      if (p->requires_grad) trainable[name] = backend::to_host(p->value);
    }
    std::vector<const Tensor*> ts;
    for (const auto& [name, t] : trainable) ts.push_back(&t);
    const std::vector<std::uint64_t> h = comm.all_gather(parallel::hash_tensors(ts));
    result.ranks_agree =
        std::all_of(h.begin(), h.end(), [&](std::uint64_t x) { return x == h[0]; });
  }
  result.threads = threads;
  result.ranks = nranks;
  result.mode = c.mode;
  result.deterministic = c.deterministic;
  result.optimizer = optim::kind_name(rs.optimizer.kind);
  if (ckpt) result.checkpoint = ckpt->latest();
  if (resume.ck) {
    result.resumed_from = resume.path;
    result.initial_step = resumed.global_step;
  }
  if (launch_log && launch_log->written()) result.launch_log = launch_log->path();
  if (debug_tools.dumper) {
    result.dump = debug_tools.dumper->config().path;
    result.dump_bytes = debug_tools.dumper->bytes_written();
  }
  if (debug_tools.profiler) {
    if (debug_tools.profiler->steps_recorded() == 0) {
      if (hooks.on_note) {
        hooks.on_note("profile: nothing recorded: steps " + std::to_string(c.debug.profile_start_step) +
                      " to " + std::to_string(c.debug.profile_stop_step) + " did not run");
      }
    } else {
      debug_tools.profiler->analyse();
      result.profile = c.debug.profile_dir;
      result.profile_steps = debug_tools.profiler->steps_recorded();
    }
  }
  if (debug_tools.watcher) {
    result.watch_hits = static_cast<std::int64_t>(debug_tools.watcher->hits().size());
    result.watch_stopped = debug_tools.watcher->stopped();
    if (result.watch_stopped && watch_saver && !watch_saver->path.empty()) {
      result.checkpoint = watch_saver->path;
    }
  }
  result.total_s = seconds_since(t0);
  result.peak_rss_mib = peak_rss_mib();
  result.device_peak_mib = device_peak_mib(c.device);
  return result;
}

EvalResult run_evaluation(const EvalConfig& c,
                          const std::function<void(const std::string&)>& on_note) {
  const Clock::time_point t0 = Clock::now();
  const models::Recipe& recipe = find_recipe(c.model);
  const std::string dataset = resolve_dataset(recipe, c.model, c.dataset);
  const std::int64_t batch = c.batch_size.value_or(recipe.defaults.batch_size);
  if (batch < 1) {
    throw ConfigError("--batch-size: expected at least 1, got " + std::to_string(batch));
  }
  set_up(c.threads, c.seed, c.deterministic, c.mode, c.device);
  EvalResult r;
  r.threads = backend::ThreadPool::global().num_threads();
  data::DatasetPtr test_ds =
      recipe.make_test_dataset({dataset, c.data_dir, batch, c.test_samples});
  std::shared_ptr<nn::Cell> net = recipe.make_network({.dataset = dataset});
  nn::Model model = make_model(net, optim::make_optimizer(recipe.defaults.optimizer));
  if (!c.passes.empty()) model.set_passes(c.passes);
  if (!c.save_graphs_dir.empty()) model.set_save_graphs_dir(c.save_graphs_dir);
  const DebugTools debug_tools =
      make_debug_tools(c.debug, c.model, 0, model, nullptr, on_note, 0);
  if (c.ckpt.empty()) {
    if (on_note) {
      on_note("loom eval " + c.model +
              ": no --ckpt given: evaluating the UNTRAINED network initialized from seed " +
              std::to_string(c.seed) + " (train with `loom train " + c.model +
              " --ckpt-dir D` for weights to load)");
    }
  } else {
    const checkpoint::Checkpoint ck = checkpoint::load_checkpoint(c.ckpt);
    // Strict: every parameter of the network by its own name, dtype and shape; the checkpoint's
    // optimizer states and positions are not parameters and are left out.
    const auto [param_not_load, ckpt_not_load] =
        checkpoint::load_param_into_net(*net, ck.tensors, /*strict_load=*/true);
    if (!param_not_load.empty()) {
      std::string missing;
      for (const auto& n : param_not_load) missing += (missing.empty() ? "" : ", ") + n;
      throw ValueError("--ckpt " + c.ckpt + ": the checkpoint has no value for " +
                       std::to_string(param_not_load.size()) + " parameter(s) of " + c.model +
                       ": " + missing);
    }
    r.checkpoint = c.ckpt;
    r.checkpoint_epoch = read_int(ck, "epoch_num", -1);
    r.checkpoint_step = read_int(ck, "step_num", -1);
    if (on_note) {
      std::string note = "loom eval " + c.model + ": weights from " + c.ckpt;
      if (r.checkpoint_epoch >= 0 && r.checkpoint_step >= 0) {
        note += " (epoch " + std::to_string(r.checkpoint_epoch) + ", step " +
                std::to_string(r.checkpoint_step) + ")";
      }
      on_note(note);
    }
  }
  const Clock::time_point e0 = Clock::now();
  const std::map<std::string, double> m = model.eval(test_ds);
  r.eval_s = seconds_since(e0);
  const auto& acc = static_cast<const nn::Accuracy&>(*model.metrics().at("accuracy"));
  r.model = c.model;
  r.batch_size = batch;
  r.seed = c.seed;
  r.test_accuracy = metric(m, "accuracy");
  r.test_loss = metric(m, "loss");
  r.eval_images_per_s = r.eval_s > 0 ? static_cast<double>(acc.total()) / r.eval_s : 0.0;
  r.weights_sha256 = weights_sha256(*net);
  r.mode = c.mode;
  r.deterministic = c.deterministic;
  r.total_s = seconds_since(t0);
  r.peak_rss_mib = peak_rss_mib();
  r.device_peak_mib = device_peak_mib(c.device);
  return r;
}

}  // namespace loom::train
