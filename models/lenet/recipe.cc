// LeNet-5 on Fashion-MNIST as a zoo recipe: MindSpore's model-zoo defaults (Momentum lr 0.01,
// momentum 0.9, batch 32), 5 epochs, a constant learning rate.
#include <memory>
#include <string>
#include <vector>

#include "core/ir/error.h"
#include "models/lenet/dataset.h"
#include "models/lenet/lenet.h"
#include "models/registry.h"

namespace loom::models {
namespace {

void check_dataset(const std::string& dataset) {
  if (!dataset.empty() && dataset != "fashion-mnist") {
    throw ValueError("lenet: expected the dataset 'fashion-mnist', got '" + dataset + "'");
  }
}

lenet::DatasetOptions lenet_options(const DatasetOptions& o) {
  check_dataset(o.dataset);
  return {o.data_dir, o.batch_size, o.num_samples, o.num_shards, o.shard_id};
}

}  // namespace

void register_lenet(std::vector<Recipe>& recipes) {
  Recipe r;
  r.name = "lenet";
  r.description = "LeNet-5 (MindSpore's model zoo, 61,684 parameters) on Fashion-MNIST";
  r.datasets = {"fashion-mnist"};
  r.defaults.dataset = "fashion-mnist";
  r.defaults.epochs = 5;
  r.defaults.batch_size = 32;
  r.defaults.optimizer = {.kind = nn::OptimizerKind::kMomentum, .learning_rate = 0.01,
                          .momentum = 0.9};
  // No schedule: a constant learning rate, as MindSpore's lenet train.py.
  r.make_network = [](const NetworkOptions& o) -> std::shared_ptr<nn::Cell> {
    check_dataset(o.dataset);
    return std::make_shared<LeNet5>(o.num_classes.value_or(10), /*num_channel=*/1);
  };
  r.input_shape = [](const std::string& dataset) {
    check_dataset(dataset);
    return Shape{1, 32, 32};
  };
  r.make_train_dataset = [](const DatasetOptions& o) {
    return lenet::create_train_dataset(lenet_options(o));
  };
  r.make_test_dataset = [](const DatasetOptions& o) {
    return lenet::create_test_dataset(lenet_options(o));
  };
  recipes.push_back(std::move(r));
}

}  // namespace loom::models
