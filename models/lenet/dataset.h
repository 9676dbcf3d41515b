/// \file
/// The LeNet-5 job's data: Fashion-MNIST (data::MnistDataset) as the network takes it.
///
///     image (28, 28, 1) UInt8 → Pad 2 → (32, 32, 1) → Rescale 1/255 → Normalize(mean, std)
///           → HWC2CHW → (1, 32, 32) Float32;   label Int32 ()
///     train: shuffle (a full permutation per epoch, from the seed in force) → batch, dropping the
///            last partial batch (as MindSpore's lenet create_dataset does);
///     test:  no shuffle → batch, keeping the last partial batch (every test image counts).
///   With num_shards > 1 (data parallelism), after the shuffle: train keeps the first multiple of
///   num_shards × batch_size rows and takes shard shard_id (rows shard_id, + num_shards, ...);
///   test takes the same strided rows without wrapping around (each test row on one rank).
///
/// Normalization: the mean and standard deviation of the padded 32×32 Fashion-MNIST training
/// images in [0, 1], measured over all 60,000 images: 0.2190 and 0.3318 (the unpadded 28×28
/// images give 0.2860 / 0.3530; MNIST's familiar 0.1307 / 0.3081 do not describe Fashion-MNIST).
/// Normalizing after the pad gives the network's actual input mean 0 and std 1.
#pragma once

#include <cstdint>
#include <string>

#include "data/dataset.h"

namespace loom::models::lenet {

inline constexpr double kFashionMnistMean = 0.2190;  ///< padded 32×32 training images, [0, 1]
inline constexpr double kFashionMnistStd = 0.3318;   ///< the same images' standard deviation

/// The options of the LeNet-5 pipelines.
struct DatasetOptions {
  std::string data_dir;          ///< "" = data::fashion_mnist_dir's default (the Debian package)
  std::int64_t batch_size = 32;  ///< rows per batch, at least 1 (local with num_shards > 1)
  std::int64_t num_samples = 0;  ///< > 0: only the first num_samples rows (take), for short runs
  /// Data parallelism: shard shard_id of num_shards (models::DatasetOptions); batch_size is local.
  /// The create functions throw ValueError unless 0 <= shard_id < num_shards.
  ///@{
  std::int64_t num_shards = 1;
  std::int64_t shard_id = 0;
  ///@}
};

/// The training pipeline (shuffled; drop_remainder). The shuffle draws from the global seed in
/// force when this is called (core/random/random.h seed_all).
data::DatasetPtr create_train_dataset(const DatasetOptions& options);
/// The test pipeline (in order; the last partial batch kept).
data::DatasetPtr create_test_dataset(const DatasetOptions& options);

}  // namespace loom::models::lenet
