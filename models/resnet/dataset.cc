#include "models/resnet/dataset.h"

#include <vector>

#include "core/ir/error.h"
#include "models/lenet/dataset.h"

namespace loom::models::resnet {
namespace {

data::DatasetPtr create(const DatasetOptions& o, bool train) {
  if (o.batch_size < 1) {
    throw ValueError("resnet dataset: expected a batch size >= 1, got " +
                     std::to_string(o.batch_size));
  }
  if (o.num_samples < 0) {
    throw ValueError("resnet dataset: expected a sample count >= 0, got " +
                     std::to_string(o.num_samples));
  }
  if (o.num_shards < 1 || o.shard_id < 0 || o.shard_id >= o.num_shards) {
    throw ValueError("resnet dataset: expected shard 0 <= id < num_shards, got " +
                     std::to_string(o.shard_id) + " of " + std::to_string(o.num_shards));
  }
  data::DatasetPtr ds;
  std::vector<data::TransformPtr> transforms;
  if (o.dataset == "fashion-mnist") {
    ds = data::MnistDataset(data::fashion_mnist_dir(o.data_dir), train ? "train" : "test");
    transforms.push_back(data::Pad({2}));
    if (train) transforms.push_back(data::RandomCrop({32, 32}, {2}));
    transforms.push_back(data::Rescale(1.0 / 255, 0));
    transforms.push_back(
        data::Normalize({lenet::kFashionMnistMean}, {lenet::kFashionMnistStd}));
  } else if (o.dataset == "cifar10") {
    if (o.data_dir.empty()) {
      throw ValueError(
          "resnet dataset: expected a data directory with the CIFAR-10 binary files "
          "(data_batch_1.bin ... data_batch_5.bin, test_batch.bin; --data-dir), got none");
    }
    ds = data::Cifar10Dataset(o.data_dir, train ? "train" : "test");
    if (train) {
      transforms.push_back(data::RandomCrop({32, 32}, {4}));
      transforms.push_back(data::RandomHorizontalFlip(0.5));
    }
    transforms.push_back(data::Rescale(1.0 / 255, 0));
    transforms.push_back(data::Normalize({kCifar10Mean[0], kCifar10Mean[1], kCifar10Mean[2]},
                                         {kCifar10Std[0], kCifar10Std[1], kCifar10Std[2]}));
  } else {
    throw ValueError("resnet dataset: expected 'fashion-mnist' or 'cifar10', got '" + o.dataset +
                     "'");
  }
  transforms.push_back(data::HWC2CHW());
  // take before the transforms and the shuffle: the subset is the first rows of the files.
  if (o.num_samples > 0) ds = ds->take(o.num_samples);
  ds = ds->map(transforms, "image");
  if (train) ds = ds->shuffle();
  if (o.num_shards > 1) {
    // After the shuffle (the same permutation on every rank), before the batch; train keeps the
    // first multiple of num_shards · batch_size rows, test shards without wrapping around.
    const std::int64_t n = o.num_shards, rows = ds->size();
    if (train) {
      ds = ds->take(rows / (n * o.batch_size) * n * o.batch_size)->shard(n, o.shard_id);
    } else {
      ds = ds->shard(n, o.shard_id)->take(rows / n + (o.shard_id < rows % n ? 1 : 0));
    }
  }
  return ds->batch(o.batch_size, /*drop_remainder=*/train);
}

}  // namespace

data::DatasetPtr create_train_dataset(const DatasetOptions& options) {
  return create(options, true);
}

data::DatasetPtr create_test_dataset(const DatasetOptions& options) {
  return create(options, false);
}

}  // namespace loom::models::resnet
