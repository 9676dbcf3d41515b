/// \file
/// The ResNet jobs' data: the small-image layout's two datasets (32×32) and a synthetic
/// ImageNet-shaped one (224×224) for the ImageNet layout:
///
///     fashion-mnist  image (28, 28, 1) UInt8 → Pad 2 → (32, 32, 1)
///                    [train: RandomCrop 32 with padding 2, i.e. shifts of up to ±2 pixels]
///                    → Rescale 1/255 → Normalize(0.2190, 0.3318) → HWC2CHW → (1, 32, 32) Float32
///     cifar10        image (32, 32, 3) UInt8
///                    [train: RandomCrop 32 with padding 4, RandomHorizontalFlip 0.5]
///                    → Rescale 1/255 → Normalize(mean, std per channel) → HWC2CHW → (3, 32, 32)
///     fake-imagenet  image (3, 224, 224) Float32 generated per row (below), no transforms;
///                    label Int32 uniform in [0, 1000); 10,000 training and 1,000 test rows
///   label Int32 (); train: shuffled (a full permutation per epoch), batched with the last partial
///   batch dropped; test: in order, the last partial batch kept. With num_shards > 1 (data
///   parallelism) the rows are sharded after the shuffle, as models::DatasetOptions (zoo.h) says.
///
/// Choices:
/// - Fashion-MNIST gets random shifts but no horizontal flip: its images are canonically oriented
///   (every shoe, sandal and boot points left), so a flipped image is outside the test
///   distribution; shifts only move the object inside the 2-pixel border the 28 → 32 pad adds.
///   Normalization: the padded images' measured mean and std (models/lenet/dataset.h).
/// - CIFAR-10: the standard augmentation (MindSpore's resnet dataset.py does the same crop and
///   flip). Normalization uses the training set's per-channel pixel mean (0.4914, 0.4822, 0.4465)
///   and pixel standard deviation (0.2470, 0.2435, 0.2616), so inputs have std 1; MindSpore's
///   script divides by (0.2023, 0.1994, 0.2010), the mean of per-image deviations, which leaves
///   the inputs' std about 1.2. (Quoted values: no CIFAR-10 copy on the build machine to measure.)
/// - The crop's and flip's draws come from the data pipeline's Philox streams (data/dataset.h),
///   so a row's augmentation depends only on (seed, epoch, row).
/// - fake-imagenet is torchvision's FakeData in ImageNet's shape, for measuring the ImageNet
///   layout's step (bench/gpu_vs_torch.py) where no ImageNet copy exists; it carries no signal.
///   Row i is a function of (seed, usage, i) alone, the same in every epoch and process: its
///   224 × 224 × 3 pixel bytes (HWC order) are the Philox words of the stream
///   stream_id("data/fake-imagenet/<usage>/image") (seed: the global seed when the dataset is
///   made) at blocks [i · 9408, (i + 1) · 9408), four bytes a word, lowest byte first; its label
///   is the first word of block i of ".../label" scaled to [0, 1000) by multiplication (bias
///   below 1000 / 2^32). Each pixel byte p of channel c becomes exactly the Float32 that
///   Rescale(1/255) → Normalize(kImageNetMean, kImageNetStd) → HWC2CHW give for it (a 3 × 256
///   table), so the network sees ImageNet-normalized values, but the UInt8 image and the three
///   passes over it never exist: one pass of Philox and table look-ups writes the CHW tensor.
///   Measured with a loop over the pipeline (2026-11-26): on the 2-core build machine one thread
///   makes 6,500–6,900 rows/s (0.15 ms a row), where Rescale → Normalize → HWC2CHW alone run at
///   1,800–2,050 images/s (their per-element dtype dispatch, in double); the training pipeline as
///   `loom train` reads it (data::Iterator, one worker, as for every recipe; batch 128) yields
///   1,800–2,000 images/s, the rest being the batch stage's 77 MB allocation and copy per batch.
///   On the H100 machine's 16-core Xeon: 1,776 images/s with one worker (two: 3,223, four:
///   5,803), where ResNet-50's step at batch 128 consumes 850 images/s; `loom train resnet50
///   --dataset fake-imagenet --device GPU --batch-size 128` waited on data 0.8% of its loop.
///   Rows are generated when asked for (a batch of 128 is 77 MB; nothing is kept), so the sizes
///   only set an epoch's length: 10,000 / 1,000 (78 steps of batch 128, then an evaluation)
///   rather than ImageNet's 1,281,167 / 50,000, because random rows teach nothing and an epoch
///   that long only delays the evaluation; `--train-samples` / `--test-samples` cut them (take).
///   No augmentation: a crop or flip of noise is noise. num_samples cuts, shuffle, shard and batch
///   are as for the other two.
#pragma once

#include <cstdint>
#include <string>

#include "data/dataset.h"

namespace loom::models::resnet {

/// CIFAR-10's normalization: the training set's per-channel (R, G, B) pixel mean and standard
/// deviation, pixels in [0, 1] (quoted values, see above).
///@{
inline constexpr double kCifar10Mean[3] = {0.4914, 0.4822, 0.4465};
inline constexpr double kCifar10Std[3] = {0.2470, 0.2435, 0.2616};
///@}
/// torchvision's ImageNet normalization (MindSpore's resnet dataset.py: the same × 255): the
/// per-channel (R, G, B) mean and standard deviation, pixels in [0, 1].
///@{
inline constexpr double kImageNetMean[3] = {0.485, 0.456, 0.406};
inline constexpr double kImageNetStd[3] = {0.229, 0.224, 0.225};
///@}
inline constexpr std::int64_t kFakeImageNetTrainRows = 10'000;  ///< fake-imagenet's training rows
inline constexpr std::int64_t kFakeImageNetTestRows = 1'000;    ///< fake-imagenet's test rows
inline constexpr std::int64_t kFakeImageNetClasses = 1000;      ///< labels in [0, 1000)
inline constexpr std::int64_t kFakeImageNetSize = 224;  ///< height and width

/// The options of the ResNet pipelines.
struct DatasetOptions {
  std::string dataset = "fashion-mnist";  ///< or "cifar10", "fake-imagenet"
  /// fashion-mnist: "" = the Debian package's files; cifar10: the directory with
  /// data_batch_1.bin ... data_batch_5.bin and test_batch.bin (required); fake-imagenet: none.
  std::string data_dir;
  std::int64_t batch_size = 32;  ///< rows per batch, at least 1 (local with num_shards > 1)
  std::int64_t num_samples = 0;  ///< > 0: only the first num_samples rows (take)
  /// Data parallelism: shard shard_id of num_shards (models::DatasetOptions); batch_size is local.
  ///@{
  std::int64_t num_shards = 1;
  std::int64_t shard_id = 0;
  ///@}
};

/// The training pipeline (shuffled, the last partial batch dropped; fashion-mnist and cifar10
/// augmented) and the test pipeline (in order, the last partial batch kept), as above.
/// ValueError for an unknown dataset, a batch size < 1, a negative sample count, a shard
/// outside [0, num_shards), cifar10 without a data directory or fake-imagenet with one.
///@{
data::DatasetPtr create_train_dataset(const DatasetOptions& options);
data::DatasetPtr create_test_dataset(const DatasetOptions& options);
///@}

}  // namespace loom::models::resnet
