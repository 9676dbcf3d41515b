/// \file
/// MindSpore's Model: train / fit / eval / predict over a data::Dataset, with metrics and
/// callbacks.
///
/// ```
/// auto net = std::make_shared<models::LeNet5>();
/// auto opt = std::make_shared<optim::Momentum>(
///     optim::Momentum::Options{.learning_rate = 0.01, .momentum = 0.9});
/// nn::Model model(net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true), opt,
///                 {{"accuracy", std::make_shared<nn::Accuracy>()}});
/// nn::LossMonitor loss_monitor(100);
/// model.fit(5, train_ds, test_ds, {&loss_monitor});         // evaluates after every epoch
/// std::map<std::string, double> r = model.eval(test_ds);   // r["accuracy"]
/// ```
///
/// Datasets give rows (data, label) batched: column 0 is the network's input, column 1 the label.
/// train() builds one TrainOneStepCell(WithLossCell(network, loss_fn), optimizer) on first use (in
/// the global exec mode at that time, nn/context.h) and keeps it, with its optimizer states, across
/// calls. WithLossCell keeps the network's parameter names (and so their values). train() sets the
/// network to train mode and leaves it so; one prefetching data::Iterator reads every remaining
/// epoch. A callback's request_stop() ends training after the current step: the epoch's
/// on_train_epoch_end and on_train_end still run.
///
/// Resume: the data pipeline is pure (data/dataset.h), so train(epochs, ds, cbs, {.initial_epoch =
/// e, .start = {e, i}}) on a Model whose weights and optimizer states are those after row i of epoch
/// e feeds exactly the rows an uninterrupted run would have, and gives bitwise the same weights.
///
/// eval() sets the network to eval mode (set_train(false)), computes (loss, logits) per batch —
/// in graph mode with a graph traced and compiled (runtime::CompiledFunction, the eval pipeline)
/// once per batch signature, taking the current weights as arguments; in PyNative mode eagerly —
/// clears and feeds every metric, and restores every Cell's training flag. With a reducer set
/// (data parallelism: parallel::setup_data_parallel sets one), the metrics' sums are added over
/// the ranks before they are evaluated, and so are the epoch's training losses. predict(x)
/// returns the network's output in eval mode, in host memory (a graph-mode root call of the
/// network, compiled per signature by the Cell).
///
/// Devices (nn/context.h): training and evaluation run on the context's device when the Model
/// first trains or evaluates; the batches are copied there and the Parameters and optimizer
/// states live there (TrainOneStepCell). What the Model hands out is in host memory (the metrics'
/// inputs, eval()'s RunContext::loss, predict()'s result), except the training steps'
/// RunContext::loss, which stays on the step's device (backend::to_host reads it).
/// RunContext::data is the batch as the dataset gave it (host).
///
/// fit(epochs, train, valid, callbacks) is MindSpore's Model.fit: train() with the validation
/// set evaluated at the end of every valid_frequency-th epoch (and the last), before the
/// callbacks' on_train_epoch_end, which find the results in RunContext::metrics.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/ir/tensor.h"
#include "data/dataset.h"
#include "nn/callback.h"
#include "nn/cell.h"
#include "nn/metrics.h"
#include "nn/train.h"
#include "runtime/executable.h"

namespace loom::nn {

/// Options of Model::train and Model::fit: where to resume, the data iterator's threads, fit()'s
/// evaluation frequency.
struct TrainOptions {
  std::int64_t initial_epoch = 0;  ///< epochs already done (resume): train runs epochs
                                   /// initial_epoch to epochs - 1, numbered from 1 in callbacks
  data::Position start;            ///< the data position to resume from within initial_epoch
  int data_workers = 1;            ///< data::IteratorOptions::num_workers
  int prefetch = 4;                ///< data::IteratorOptions::prefetch
  std::int64_t valid_frequency = 1;  ///< fit(): evaluate every N epochs (and after the last)
};

/// Figures of the last train() call (steady_clock). step_seconds includes compile_seconds (the
/// step graphs are built inside the first step of each signature); total_seconds >= step_seconds +
/// data_wait_seconds, the rest being callbacks and setup.
struct TrainStats {
  std::int64_t steps = 0;          ///< steps trained
  std::int64_t samples = 0;        ///< Σ rows of the batches trained on
  double step_seconds = 0;         ///< time inside TrainOneStepCell::step, all steps
  double data_wait_seconds = 0;    ///< time the loop waited on the data iterator's next()
  double compile_seconds = 0;      ///< tracing + grad + passes + compile of new step graph(s)
  double loop_seconds = 0;         ///< wall time of the epochs' step loops: data waits, steps and
                                   /// the step callbacks (not epoch-end callbacks such as eval)
  double eval_seconds = 0;         ///< fit(): time in the evaluations
  double total_seconds = 0;        ///< wall time of the whole call
  double epoch_loss_mean = 0;      ///< the last epoch's mean training loss (over every rank)
  /// The last epoch's first step (1-based) that epoch_loss_mean covers: 1, or after a resume in
  /// the middle of that epoch the step it resumed at.
  std::int64_t epoch_loss_first_step = 1;
  std::map<std::string, double> metrics;  ///< fit(): the last evaluation's results
};

/// Sums a vector of numbers over data-parallel ranks in place (every rank calls it at the same
/// point, with the same length). Model uses it for metrics and losses.
using SumReducer = std::function<void(std::vector<double>& values)>;

/// MindSpore's Model: a network with its loss function, its optimizer and named metrics, trained
/// and evaluated over datasets (see nn/model.h). Not copyable.
class Model {
 public:
  /// A Model training `network` with `loss_fn` (called as loss_fn(network(data), label)) and
  /// `optimizer`, and evaluating it with `metrics` (by name). ValueError when the network, the loss
  /// function, the optimizer or a metric is null.
  template <std::derived_from<optim::Optimizer> O>
  Model(std::shared_ptr<Cell> network, std::shared_ptr<Cell> loss_fn, std::shared_ptr<O> optimizer,
        std::map<std::string, std::shared_ptr<Metric>> metrics = {})
      : Model(std::move(network), std::move(loss_fn),
              std::static_pointer_cast<optim::Optimizer>(std::move(optimizer)), std::move(metrics),
              0) {}
  /// As the other constructor, with the optimizer optim::make_optimizer(spec) makes.
  Model(std::shared_ptr<Cell> network, std::shared_ptr<Cell> loss_fn, const OptimizerSpec& spec,
        std::map<std::string, std::shared_ptr<Metric>> metrics = {});

  /// Trains for epochs (total, MindSpore's epoch argument). Callbacks are called in order; a
  /// callback's run_context.request_stop() ends training after the current step. ValueError when
  /// dataset or a callback is null, unless 0 <= initial_epoch <= epochs, or when options.start is
  /// set and its epoch differs from initial_epoch; rows with fewer than 2 columns are a
  /// ValueError.
  void train(std::int64_t epochs, const data::DatasetPtr& dataset,
             const std::vector<Callback*>& callbacks = {}, const TrainOptions& options = {});
  /// train() with an evaluation of `valid_dataset` after every valid_frequency-th epoch (and the
  /// last); ValueError when valid_dataset is null, the Model has no metrics or valid_frequency is
  /// less than 1.
  void fit(std::int64_t epochs, const data::DatasetPtr& train_dataset,
           const data::DatasetPtr& valid_dataset, const std::vector<Callback*>& callbacks = {},
           const TrainOptions& options = {});
  /// Every metric over the whole dataset (one epoch, epoch 0); {"name": value}. ValueError when the
  /// Model has no metrics or a callback is null, and a metric's own error when it got no samples
  /// (an empty dataset).
  std::map<std::string, double> eval(const data::DatasetPtr& dataset,
                                     const std::vector<Callback*>& callbacks = {});
  /// The network's output for `x`, in eval mode (the training flags are restored after), in host
  /// memory. ValueError when the network does not return a tensor.
  Tensor predict(const Tensor& x);

  /// The network (without the loss).
  Cell& network() { return *network_; }
  /// The training step (null before the first train() or build_train_network()).
  TrainOneStepCell* train_network() { return train_.get(); }
  /// Makes the training step now if train() has not (so that a resumed run can restore its
  /// optimizer state before the first step).
  TrainOneStepCell& build_train_network();
  /// Figures of the last train() or fit() call.
  const TrainStats& train_stats() const { return stats_; }
  /// The metrics by name.
  const std::map<std::string, std::shared_ptr<Metric>>& metrics() const { return metrics_; }
  /// The optimizer.
  optim::Optimizer& optimizer() { return *optimizer_; }

  /// Data parallelism: the SumReducer that sums metrics and losses over the ranks; empty: one
  /// process.
  void set_reducer(SumReducer reducer) { reducer_ = std::move(reducer); }

  /// The compiled evaluation graphs' function (made on first use): its dumps and observers.
  runtime::CompiledFunction& eval_function();
  /// Adds and removes an observer of every compiled launch of training and evaluation
  /// (add_observer: ValueError when null).
  ///@{
  void add_observer(std::shared_ptr<runtime::Observer> observer);
  void remove_observer(const runtime::Observer* observer);
  ///@}
  /// Sets the folder of the dumps of the training step's and evaluation's stages (into
  /// dir/train_step, dir/eval; runtime::CompiledFunction), and the pass pipeline text of both
  /// (empty: each one's purpose's pipeline).
  ///@{
  void set_save_graphs_dir(const std::string& dir);
  void set_passes(const std::string& pipeline);
  ///@}
  /// Mixed precision for training and evaluation (MindSpore's Model(amp_level=...)): the traced
  /// graphs are cast for `amp` (core/passes/amp.h, TrainOneStepCell::set_amp). Before the first
  /// training step or evaluation (ValueError after). The loss scaling is the training step's
  /// (build_train_network().set_loss_scale).
  void set_amp(const passes::AmpOptions& amp);
  /// The mixed precision of training and evaluation (level O0: none).
  const passes::AmpOptions& amp() const { return amp_; }

 private:
  Model(std::shared_ptr<Cell> network, std::shared_ptr<Cell> loss_fn,
        std::shared_ptr<optim::Optimizer> optimizer,
        std::map<std::string, std::shared_ptr<Metric>> metrics, int);
  void train_impl(std::int64_t epochs, const data::DatasetPtr& dataset,
                  const data::DatasetPtr& valid, const std::vector<Callback*>& callbacks,
                  const TrainOptions& options);
  double reduce_mean(double sum, double count);
  struct EvalCache;
  std::shared_ptr<Cell> network_;
  std::shared_ptr<Cell> loss_fn_;
  std::shared_ptr<optim::Optimizer> optimizer_;
  std::map<std::string, std::shared_ptr<Metric>> metrics_;
  std::unique_ptr<TrainOneStepCell> train_;
  std::shared_ptr<EvalCache> eval_cache_;
  /// The training step's and the evaluation's plans never run at once: one arena for both.
  std::shared_ptr<runtime::SharedArena> arena_ = std::make_shared<runtime::SharedArena>();
  TrainStats stats_;
  SumReducer reducer_;
  std::vector<std::shared_ptr<runtime::Observer>> observers_;
  std::string save_graphs_dir_, passes_;
  passes::AmpOptions amp_;
};

}  // namespace loom::nn
