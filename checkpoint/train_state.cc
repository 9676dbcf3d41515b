// checkpoint/train_state.h: training checkpoints, ModelCheckpoint and exact resume.
#include "checkpoint/train_state.h"

#include <algorithm>
#include <filesystem>
#include <regex>
#include <system_error>

#include "backends/backend.h"
#include "core/random/random.h"
#include "core/ir/error.h"
#include "nn/cell.h"
#include "nn/model.h"
#include "nn/train.h"

namespace loom::checkpoint {

namespace fs = std::filesystem;

namespace {

Tensor i64(std::int64_t v) {
  Tensor t(DType::kInt64, {});
  t.data<std::int64_t>()[0] = v;
  return t;
}

std::int64_t read_i64(const Checkpoint& ck, const std::string& name) {
  const Tensor* t = ck.find(name);
  if (!t || t->numel() != 1) {
    throw ValueError("restore_training_state: the checkpoint has no '" + name +
                     "' (not a checkpoint of a training run)");
  }
  if (t->dtype() == DType::kInt64) return t->data<std::int64_t>()[0];
  return static_cast<std::int64_t>(t->get(0));
}

}  // namespace

Checkpoint training_state(const nn::RunContext& rc) {
  if (!rc.network || !rc.train_network) {
    throw ValueError("training_state: the run context has no network or training step");
  }
  Checkpoint ck;
  // Parameters on a device are copied to the host; the optimizer's entries come as host copies.
  for (auto& [name, p] : rc.network->parameters_and_names()) {
    ck.tensors.emplace_back(name, backend::to_host(p->value));
  }
  // The optimizer's entries as MindSpore names them: global_step, the learning rate(s), its
  // scalars, its states.
  const nn::TrainOneStepCell& step = *rc.train_network;
  for (auto& entry : step.optimizer().checkpoint_entries()) ck.tensors.push_back(std::move(entry));
  // Loss scaling's states under MindSpore's names, and the steps it skipped (not counted in
  // global_step).
  for (const auto& [name, value] : step.loss_scale_states()) {
    ck.tensors.emplace_back(name, backend::to_host(value));
  }
  if (!step.loss_scale_states().empty()) {
    ck.tensors.emplace_back("loom.skipped_steps", i64(step.skipped_steps()));
  }
  ck.tensors.emplace_back("epoch_num", i64(rc.cur_epoch_num));
  ck.tensors.emplace_back("step_num", i64(rc.cur_step_num));
  // The next batch: the rest of this epoch, or the start of the next one.
  const bool epoch_done = rc.step_in_epoch >= rc.batch_num;
  ck.tensors.emplace_back("loom.seed", i64(static_cast<std::int64_t>(random::global_seed())));
  ck.tensors.emplace_back("loom.data_epoch", i64(epoch_done ? rc.cur_epoch_num : rc.cur_epoch_num - 1));
  ck.tensors.emplace_back("loom.data_index", i64(epoch_done ? 0 : rc.step_in_epoch));
  ck.strings.emplace_back("loom.optimizer", step.optimizer().name());
  return ck;
}

ResumePoint restore_training_state(nn::Model& model, const Checkpoint& ck) {
  const auto seed = static_cast<std::uint64_t>(read_i64(ck, "loom.seed"));
  if (seed != random::global_seed()) {
    throw ValueError("restore_training_state: the checkpoint was written by a run with seed " +
                     std::to_string(seed) + ", this run has seed " +
                     std::to_string(random::global_seed()) +
                     " (the data order and random draws would differ)");
  }
  ResumePoint r;
  r.epoch = read_i64(ck, "loom.data_epoch");
  r.index = read_i64(ck, "loom.data_index");
  const Tensor* gs = ck.find("global_step");
  if (!gs || gs->numel() != 1) {
    throw ValueError("restore_training_state: the checkpoint has no 'global_step'");
  }
  r.global_step = static_cast<std::int64_t>(gs->get(0));
  if (r.epoch < 0 || r.index < 0 || r.global_step < 0) {
    throw ValueError("restore_training_state: negative position in the checkpoint (epoch " +
                     std::to_string(r.epoch) + ", index " + std::to_string(r.index) + ")");
  }

  nn::TrainOneStepCell& step = model.build_train_network();
  // Parameters: every one must be there (a resumed run must not train from fresh weights).
  const auto [param_not_load, unused] =
      load_param_into_net(model.network(), ck.tensors, /*strict_load=*/true);
  if (!param_not_load.empty()) {
    throw ValueError("restore_training_state: the checkpoint has no value for parameter '" +
                     param_not_load.front() + "'" +
                     (param_not_load.size() > 1
                          ? " (and " + std::to_string(param_not_load.size() - 1) + " more)"
                          : std::string()));
  }
  // The optimizer: the same kind as the run's (its states by name), then its states and step.
  for (const auto& [tag, value] : ck.strings) {
    if (tag == "loom.optimizer" && value != step.optimizer().name()) {
      throw ValueError("restore_training_state: the checkpoint was written by a run with " +
                       value + ", this run trains with " + step.optimizer().name());
    }
  }
  step.optimizer().load_entries(ck.tensors);
  step.set_num_steps(r.global_step);
  // Loss scaling: its states must be there when this run scales (a resumed run must go on with
  // the scale it had); a checkpoint's states are ignored by a run without it.
  for (const auto& [name, value] : step.loss_scale_states()) {
    const Tensor* t = ck.find(name);
    if (t == nullptr) {
      throw ValueError("restore_training_state: this run uses loss scaling " +
                       step.loss_scale_manager().describe() + ", the checkpoint has no '" + name +
                       "' (written without it?)");
    }
    step.set_loss_scale_state(name, *t);
  }
  if (!step.loss_scale_states().empty() && ck.find("loom.skipped_steps") != nullptr) {
    r.skipped_steps = read_i64(ck, "loom.skipped_steps");
    if (r.skipped_steps < 0) {
      throw ValueError("restore_training_state: negative loom.skipped_steps in the checkpoint");
    }
    step.set_skipped_steps(r.skipped_steps);
  }
  return r;
}

// ---------------------------------------------------------------------------------------------

namespace {

// "<prefix>-<epoch>_<step>.ckpt" → (prefix, epoch, step).
struct Parsed {
  std::string prefix;
  std::int64_t epoch = 0, step = 0;
};
std::optional<Parsed> parse_name(const std::string& file) {
  static const std::regex re(R"((.+)-(\d+)_(\d+)\.ckpt)");
  std::smatch m;
  if (!std::regex_match(file, m, re)) return std::nullopt;
  try {
    return Parsed{m[1].str(), std::stoll(m[2].str()), std::stoll(m[3].str())};
  } catch (const std::exception&) {
    return std::nullopt;  // out of range
  }
}

bool prefix_in_use(const std::string& dir, const std::string& prefix) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string f = e.path().filename().string();
    if (f.rfind(prefix + "-", 0) == 0 && f.size() > 5 && f.compare(f.size() - 5, 5, ".ckpt") == 0) {
      return true;
    }
  }
  return false;
}

}  // namespace

ModelCheckpoint::ModelCheckpoint(std::string prefix, std::string directory,
                                 CheckpointConfig config)
    : prefix_(std::move(prefix)), directory_(std::move(directory)), config_(config) {
  if (prefix_.empty() || prefix_.find('/') != std::string::npos) {
    throw ValueError("ModelCheckpoint: expected a prefix without '/', got '" + prefix_ + "'");
  }
  if (config_.save_checkpoint_steps < 0 || config_.keep_checkpoint_max < 0) {
    throw ValueError("ModelCheckpoint: expected save_checkpoint_steps >= 0 and "
                     "keep_checkpoint_max >= 0, got " +
                     std::to_string(config_.save_checkpoint_steps) + " and " +
                     std::to_string(config_.keep_checkpoint_max));
  }
  if (directory_.empty()) directory_ = ".";
  std::error_code ec;
  fs::create_directories(directory_, ec);
  if (!fs::is_directory(directory_)) {
    throw ValueError("ModelCheckpoint: cannot create the directory '" + directory_ + "'" +
                     (ec ? ": " + ec.message() : std::string()));
  }
  if (prefix_in_use(directory_, prefix_)) {
    const std::string base = prefix_;
    for (int n = 1;; ++n) {
      prefix_ = base + "_" + std::to_string(n);
      if (!prefix_in_use(directory_, prefix_)) break;
    }
  }
}

void ModelCheckpoint::save(const nn::RunContext& rc) {
  const std::string path = directory_ + "/" + prefix_ + "-" + std::to_string(rc.cur_epoch_num) +
                           "_" + std::to_string(rc.step_in_epoch) + ".ckpt";
  save_checkpoint(training_state(rc), path);
  latest_ = path;
  last_saved_step_ = rc.cur_step_num;
  written_.erase(std::remove(written_.begin(), written_.end(), path), written_.end());
  written_.push_back(path);
  if (config_.keep_checkpoint_max > 0) {
    while (static_cast<std::int64_t>(written_.size()) > config_.keep_checkpoint_max) {
      std::error_code ec;
      fs::remove(written_.front(), ec);
      written_.erase(written_.begin());
    }
  }
}

void ModelCheckpoint::on_train_step_end(nn::RunContext& rc) {
  if (config_.save_checkpoint_steps > 0 && rc.cur_step_num % config_.save_checkpoint_steps == 0) {
    save(rc);
  }
}

void ModelCheckpoint::on_train_end(nn::RunContext& rc) {
  if (rc.cur_step_num != last_saved_step_ && rc.train_network && rc.step_in_epoch > 0) save(rc);
}

std::optional<std::string> latest_checkpoint(const std::string& directory,
                                             const std::string& prefix) {
  std::optional<std::string> best;
  std::int64_t best_epoch = -1, best_step = -1;
  fs::file_time_type best_time{};
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(directory, ec)) {
    const std::string f = e.path().filename().string();
    const auto p = parse_name(f);
    if (!p) continue;
    if (!prefix.empty()) {
      // "<prefix>" or "<prefix>_<n>" (a later run in the same directory).
      const bool same = p->prefix == prefix ||
                        (p->prefix.rfind(prefix + "_", 0) == 0 &&
                         p->prefix.size() > prefix.size() + 1 &&
                         std::all_of(p->prefix.begin() + static_cast<std::ptrdiff_t>(prefix.size()) + 1,
                                     p->prefix.end(), [](char c) { return c >= '0' && c <= '9'; }));
      if (!same) continue;
    }
    const auto t = fs::last_write_time(e.path(), ec);
    if (p->epoch > best_epoch || (p->epoch == best_epoch && p->step > best_step) ||
        (p->epoch == best_epoch && p->step == best_step && t > best_time)) {
      best = e.path().string();
      best_epoch = p->epoch;
      best_step = p->step;
      best_time = t;
    }
  }
  return best;
}

}  // namespace loom::checkpoint
