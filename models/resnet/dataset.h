// The ResNet jobs' data, small-image layout (32×32):
//
//   fashion-mnist  image (28, 28, 1) UInt8 → Pad 2 → (32, 32, 1)
//                  [train: RandomCrop 32 with padding 2, i.e. shifts of up to ±2 pixels]
//                  → Rescale 1/255 → Normalize(0.2190, 0.3318) → HWC2CHW → (1, 32, 32) Float32
//   cifar10        image (32, 32, 3) UInt8
//                  [train: RandomCrop 32 with padding 4, RandomHorizontalFlip 0.5]
//                  → Rescale 1/255 → Normalize(mean, std per channel) → HWC2CHW → (3, 32, 32)
//   label Int32 (); train: shuffled (a full permutation per epoch), batched with the last partial
//   batch dropped; test: in order, the last partial batch kept. With num_shards > 1 (data
//   parallelism) the rows are sharded after the shuffle, as models::DatasetOptions (zoo.h) says.
//
// Choices:
// - Fashion-MNIST gets random shifts but no horizontal flip: its images are canonically oriented
//   (every shoe, sandal and boot points left), so a flipped image is outside the test
//   distribution; shifts only move the object inside the 2-pixel border the 28 → 32 pad adds.
//   Normalization: the padded images' measured mean and std (models/lenet/dataset.h).
// - CIFAR-10: the standard augmentation (MindSpore's resnet dataset.py does the same crop and
//   flip). Normalization uses the training set's per-channel pixel mean (0.4914, 0.4822, 0.4465)
//   and pixel standard deviation (0.2470, 0.2435, 0.2616), so inputs have std 1; MindSpore's
//   script divides by (0.2023, 0.1994, 0.2010), the mean of per-image deviations, which leaves
//   the inputs' std about 1.2. (Quoted values: no CIFAR-10 copy on the build machine to measure.)
// - The crop's and flip's draws come from the data pipeline's Philox streams (data/dataset.h),
//   so a row's augmentation depends only on (seed, epoch, row).
#pragma once

#include <cstdint>
#include <string>

#include "data/dataset.h"

namespace loom::models::resnet {

inline constexpr double kCifar10Mean[3] = {0.4914, 0.4822, 0.4465};
inline constexpr double kCifar10Std[3] = {0.2470, 0.2435, 0.2616};

struct DatasetOptions {
  std::string dataset = "fashion-mnist";  // or "cifar10"
  // fashion-mnist: "" = the Debian package's files; cifar10: the directory with
  // data_batch_1.bin ... data_batch_5.bin and test_batch.bin (required).
  std::string data_dir;
  std::int64_t batch_size = 32;
  std::int64_t num_samples = 0;  // > 0: only the first num_samples rows (take)
  // Data parallelism: shard shard_id of num_shards (models::DatasetOptions); batch_size is local.
  std::int64_t num_shards = 1;
  std::int64_t shard_id = 0;
};

// ValueError for an unknown dataset, a batch size < 1, a negative sample count, a shard outside
// [0, num_shards) or cifar10 without a data directory.
data::DatasetPtr create_train_dataset(const DatasetOptions& options);
data::DatasetPtr create_test_dataset(const DatasetOptions& options);

}  // namespace loom::models::resnet
