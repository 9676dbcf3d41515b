/// \file
/// The model zoo as the `loom` command sees it: each model registers a recipe — how to build the
/// network, its datasets and its training defaults — under the name used on the command line
/// ("lenet", "resnet18"...). `loom train <name>`, `loom eval <name>` and `loom export <name>`
/// look recipes up here, so a new model needs no change in tools/.
///
///     const models::Recipe& r = models::recipe("resnet18");
///     auto net = r.make_network({.dataset = "fashion-mnist"});   // 10 classes, the dataset's
///     data::DatasetPtr train =
///         r.make_train_dataset({.dataset = "fashion-mnist", .batch_size = 32});
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "nn/cell.h"
#include "nn/train.h"

namespace loom::models {

/// What Recipe::make_network builds a network for.
struct NetworkOptions {
  /// "fashion-mnist", "cifar10", "fake-imagenet" (decides channels, classes, layout); "" = the
  /// recipe's default
  std::string dataset;
  /// Unset: the dataset's class count (10; fake-imagenet: 1000).
  std::optional<std::int64_t> num_classes;
};

/// What Recipe::make_train_dataset and Recipe::make_test_dataset read.
struct DatasetOptions {
  std::string dataset;        ///< as above; "" = the recipe's default
  /// "" = the dataset's default location (fashion-mnist: the package); fake-imagenet takes none
  std::string data_dir;
  std::int64_t batch_size = 32;  ///< rows per batch (per rank with num_shards > 1)
  std::int64_t num_samples = 0;  ///< > 0: only the first num_samples rows (take), for short runs
  /// Data parallelism (parallel/parallel.h): this process reads shard shard_id of num_shards.
  /// batch_size is then the per-rank (local) batch. Training: source → shuffle (the same
  /// permutation on every rank) → the first multiple of num_shards·batch_size rows → shard →
  /// batch, so the num_shards local batches b together are the global batch b of one process
  /// reading num_shards·batch_size rows. Test: shard without the wrapped-around rows (every test
  /// row read by exactly one rank; the ranks' metrics are summed by the caller).
  ///@{
  std::int64_t num_shards = 1;
  std::int64_t shard_id = 0;
  ///@}
};

/// A recipe's training defaults: what `loom train` uses unless its options say otherwise.
struct TrainDefaults {
  std::string dataset = "fashion-mnist";  ///< the dataset trained on
  std::int64_t epochs = 5;                ///< the number of epochs
  /// the global batch size (divided among the ranks under data parallelism)
  std::int64_t batch_size = 32;
  nn::OptimizerSpec optimizer;  ///< learning rate, momentum, weight decay
  /// Learning rate per step given (step, steps per epoch, epochs); empty = constant
  /// optimizer.learning_rate. (Schedules need the learning rate as a step input: see nn/train.h.)
  std::function<double(std::int64_t step, std::int64_t steps_per_epoch, std::int64_t epochs)>
      learning_rate;
};

/// A model of the zoo: its network, datasets and training defaults, under its command-line name.
struct Recipe {
  std::string name;         ///< "lenet"
  std::string description;  ///< one line for `loom train --help`
  std::vector<std::string> datasets;  ///< the datasets it can train on, default first
  TrainDefaults defaults;             ///< the training defaults
  /// A new network for a dataset; ValueError for a dataset the model does not take.
  std::function<std::shared_ptr<nn::Cell>(const NetworkOptions&)> make_network;
  /// Shape of one input batch's sample, (C, H, W), for a dataset (export, summaries).
  std::function<Shape(const std::string& dataset)> input_shape;
  std::function<data::DatasetPtr(const DatasetOptions&)> make_train_dataset;  ///< shuffled, augmented
  std::function<data::DatasetPtr(const DatasetOptions&)> make_test_dataset;   ///< in order
};

/// Every recipe, in registration order. Registration is explicit (static libraries drop
/// self-registering objects): models/zoo.cc calls each model's register function.
const std::vector<Recipe>& recipes();
/// The recipe named `name`; ValueError listing the known names otherwise.
const Recipe& recipe(const std::string& name);

}  // namespace loom::models
