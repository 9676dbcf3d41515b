#include "models/lenet/dataset.h"

#include <vector>

#include "core/ir/error.h"

namespace loom::models::lenet {
namespace {

data::DatasetPtr create(const DatasetOptions& options, const std::string& usage, bool train) {
  if (options.batch_size < 1) {
    throw ValueError("lenet dataset: expected a batch size >= 1, got " +
                     std::to_string(options.batch_size));
  }
  if (options.num_samples < 0) {
    throw ValueError("lenet dataset: expected a sample count >= 0, got " +
                     std::to_string(options.num_samples));
  }
  data::DatasetPtr ds = data::MnistDataset(data::fashion_mnist_dir(options.data_dir), usage);
  // take before the transforms and the shuffle: the subset is the first rows of the files.
  if (options.num_samples > 0) ds = ds->take(options.num_samples);
  ds = ds->map({data::Pad({2}), data::Rescale(1.0 / 255, 0),
                data::Normalize({kFashionMnistMean}, {kFashionMnistStd}), data::HWC2CHW()},
               "image");
  if (train) ds = ds->shuffle();
  const std::int64_t n = options.num_shards, id = options.shard_id;
  if (n < 1 || id < 0 || id >= n) {
    throw ValueError("lenet dataset: expected shard 0 <= id < num_shards, got " +
                     std::to_string(id) + " of " + std::to_string(n));
  }
  if (n > 1) {
    // After the shuffle (the same permutation on every rank), before the batch.
    const std::int64_t rows = ds->size();
    if (train) {
      ds = ds->take(rows / (n * options.batch_size) * n * options.batch_size)->shard(n, id);
    } else {
      ds = ds->shard(n, id)->take(rows / n + (id < rows % n ? 1 : 0));
    }
  }
  return ds->batch(options.batch_size, /*drop_remainder=*/train);
}

}  // namespace

data::DatasetPtr create_train_dataset(const DatasetOptions& options) {
  return create(options, "train", true);
}

data::DatasetPtr create_test_dataset(const DatasetOptions& options) {
  return create(options, "test", false);
}

}  // namespace loom::models::lenet
