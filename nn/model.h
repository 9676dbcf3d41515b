// MindSpore's Model: train / eval / predict over a data::Dataset, with metrics and callbacks.
//
//   auto net = std::make_shared<models::LeNet5>();
//   nn::Model model(net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true),
//                   {.kind = nn::OptimizerKind::kMomentum, .learning_rate = 0.01},
//                   {{"accuracy", std::make_shared<nn::Accuracy>()}});
//   nn::LossMonitor loss_monitor(100);
//   model.train(1, train_ds, {&loss_monitor});
//   std::map<std::string, double> r = model.eval(test_ds);   // r["accuracy"]
//
// Datasets give rows (data, label) batched: column 0 is the network's input, column 1 the label.
// train() builds one TrainOneStepCell(WithLossCell(network, loss_fn), optimizer) on first use (in
// the global exec mode, nn/context.h) and keeps it across calls; each epoch reads the dataset
// through a prefetching data::Iterator. eval() sets the network to eval mode (set_train(false)),
// computes (loss, logits) per batch with a graph compiled once per batch shape (or eagerly in
// PyNative mode), feeds every metric, and restores the training flag. predict(x) returns the
// network's output in eval mode.
#pragma once

#include <cstdint>
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

namespace loom::nn {

struct TrainOptions {
  std::int64_t initial_epoch = 0;  // epochs already done (resume): train runs epochs
                                   // initial_epoch .. epochs - 1, numbered from 1 in callbacks
  data::Position start;            // the data position to resume from within initial_epoch
  int data_workers = 1;            // data::IteratorOptions
  int prefetch = 4;
};

// Figures of the last train() call.
struct TrainStats {
  std::int64_t steps = 0;
  std::int64_t samples = 0;
  double step_seconds = 0;     // time inside TrainOneStepCell::step, all steps
  double data_wait_seconds = 0;  // time the loop waited on the data iterator
  double compile_seconds = 0;  // tracing + passes + compile of the step graph(s)
  double total_seconds = 0;
};

class Model {
 public:
  Model(std::shared_ptr<Cell> network, std::shared_ptr<Cell> loss_fn, OptimizerSpec optimizer,
        std::map<std::string, std::shared_ptr<Metric>> metrics = {});

  // Trains for epochs (total, MindSpore's epoch argument). Callbacks are called in order; a
  // callback's run_context.request_stop() ends training after the current step.
  void train(std::int64_t epochs, const data::DatasetPtr& dataset,
             const std::vector<Callback*>& callbacks = {}, const TrainOptions& options = {});
  // Every metric over the whole dataset; {"name": value}.
  std::map<std::string, double> eval(const data::DatasetPtr& dataset,
                                     const std::vector<Callback*>& callbacks = {});
  Tensor predict(const Tensor& x);

  Cell& network() { return *network_; }
  // The training step (null before the first train()).
  TrainOneStepCell* train_network() { return train_.get(); }
  const TrainStats& train_stats() const { return stats_; }

 private:
  struct EvalCache;
  std::shared_ptr<Cell> network_;
  std::shared_ptr<Cell> loss_fn_;
  OptimizerSpec optimizer_;
  std::map<std::string, std::shared_ptr<Metric>> metrics_;
  std::unique_ptr<TrainOneStepCell> train_;
  std::shared_ptr<EvalCache> eval_cache_;
  TrainStats stats_;
};

}  // namespace loom::nn
