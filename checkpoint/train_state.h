/// \file
/// Checkpoints of a training run: MindSpore's ModelCheckpoint callback, the newest-checkpoint
/// lookup, and exact resume.
///
///     checkpoint::ModelCheckpoint ckpt("lenet", "ckpt", {.save_checkpoint_steps = 1875});
///     model.train(10, train_ds, {&ckpt});
///     ...
///     // Later, in a new process, with the same seed_all and the same network and dataset:
///     checkpoint::ResumePoint r =
///         checkpoint::restore_training_state(model, checkpoint::load_checkpoint(*latest));
///     model.train(10, train_ds, callbacks,
///                 {.initial_epoch = r.epoch, .start = {r.epoch, r.index}});
///
/// A training checkpoint holds, in this order:
///   - every parameter of the network (parameters_and_names: weights, BatchNorm's moving
///     statistics, Dropout's keys) under its own name, as MindSpore writes them;
///   - the optimizer's entries as MindSpore 2.10 names them (optim/optimizer.h): "global_step"
///     (Int32, (1): the steps done), "learning_rate" (and "learning_rate_group_<i>"), its scalars
///     ("momentum", "beta1_power"...), its states ("moments.<name>", "moment1.<name>",
///     "adam_m.<name>"...), so MindSpore's load_param_into_net restores a MindSpore optimizer
///     from it and the reverse;
///   - with loss scaling (nn/train.h, LossScale), its states as MindSpore names them
///     ("scale_sense", "current_iterator_step", "last_overflow_iterator_step") and
///     "loom.skipped_steps" (Int64: the steps whose update was skipped, not in global_step);
///   - MindSpore's append_info: "epoch_num" and "step_num" (Int64, 0-d: the 1-based epoch and the
///     global step count at the save);
///   - loom's resume position: "loom.seed" (the global seed: the data order and every random draw
///     depend on it), "loom.data_epoch" and "loom.data_index" (the data::Position of the next
///     batch), and the string "loom.optimizer" (the optimizer's name). MindSpore's
///     load_param_into_net reports these extras as not loaded and ignores them.
/// Restoring it and training on with the same seed, network and pipeline gives bitwise the same
/// weights as a run never interrupted (the RNG state is the seed plus the positions: pipeline
/// draws are addressed by (epoch, row), Dropout keys are parameters).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "checkpoint/checkpoint.h"
#include "nn/callback.h"

namespace loom::nn {
class Model;
}  // namespace loom::nn

namespace loom::checkpoint {

/// The state of a run at the end of the step described by `rc` (its network and train_network).
Checkpoint training_state(const nn::RunContext& rc);

/// Where a restored run goes on: restore_training_state's result.
struct ResumePoint {
  std::int64_t epoch = 0;        ///< 0-based epoch of the next batch (TrainOptions::initial_epoch)
  std::int64_t index = 0;        ///< its index in that epoch
  std::int64_t global_step = 0;  ///< steps done (the optimizer's: without skipped ones)
  std::int64_t skipped_steps = 0;  ///< steps whose update loss scaling skipped
};

/// Loads a training checkpoint into the model: parameters (strict: every network parameter must
/// be present with its dtype and shape), optimizer states, the step count (and Adam's beta
/// powers). ValueError when a parameter or state is missing, when it was saved by another
/// optimizer, or with another seed than random::global_seed() (the data order would differ). The
/// learning rate is not restored: the run's own (a schedule computes it from the step).
ResumePoint restore_training_state(nn::Model& model, const Checkpoint& ck);

/// When ModelCheckpoint saves and how many files it keeps.
struct CheckpointConfig {
  std::int64_t save_checkpoint_steps = 1;  ///< save every N global steps (0: only at the end)
  std::int64_t keep_checkpoint_max = 5;    ///< keep the newest N files of this run (0: all)
};

/// MindSpore's ModelCheckpoint: saves training_state() to
/// "<directory>/<prefix>-<epoch>_<step in epoch>.ckpt" every save_checkpoint_steps steps and at
/// the end of training (unless the last step was just saved). If files named "<prefix>-*.ckpt"
/// already exist in the directory when the callback is made, the prefix becomes "<prefix>_1"
/// (then _2...), as MindSpore does. Saves are atomic (save_checkpoint). Beyond
/// keep_checkpoint_max, the oldest file this callback wrote is removed.
class ModelCheckpoint : public nn::Callback {
 public:
  /// Creates `directory` ("" = ".") when missing. Throws ValueError for an empty prefix or one
  /// with '/', a negative save_checkpoint_steps or keep_checkpoint_max, or a directory that
  /// cannot be created.
  explicit ModelCheckpoint(std::string prefix = "CKP", std::string directory = ".",
                           CheckpointConfig config = {});
  /// Saves when the global step is a multiple of save_checkpoint_steps.
  void on_train_step_end(nn::RunContext& rc) override;
  /// Saves the final state unless that step was just saved.
  void on_train_end(nn::RunContext& rc) override;

  /// The prefix in use: the one given, or "<prefix>_<n>" when that was taken (see above).
  const std::string& prefix() const { return prefix_; }
  /// The last file written ("" before the first).
  const std::string& latest() const { return latest_; }

 private:
  void save(const nn::RunContext& rc);

  std::string prefix_;
  std::string directory_;
  CheckpointConfig config_;
  std::string latest_;
  std::int64_t last_saved_step_ = -1;
  std::vector<std::string> written_;
};

/// The newest checkpoint in `directory`: among "<prefix>[_<n>]-<epoch>_<step>.ckpt" files (any
/// prefix when `prefix` is empty), the one with the largest (epoch, step), ties broken by the
/// newer modification time. nullopt when there is none.
std::optional<std::string> latest_checkpoint(const std::string& directory,
                                             const std::string& prefix = "");

}  // namespace loom::checkpoint
