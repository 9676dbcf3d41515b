// The ResNet pipelines of dataset.h, and fake-imagenet's source: a random-access Dataset whose
// rows are computed from Philox blocks when asked for.
#include "models/resnet/dataset.h"

#include <array>
#include <vector>

#include "core/ir/error.h"
#include "core/random/philox.h"
#include "core/random/random.h"
#include "models/lenet/dataset.h"

namespace loom::models::resnet {
namespace {

class FakeImageNet final : public data::Dataset {
 public:
  FakeImageNet(const std::string& usage, std::int64_t rows)
      : usage_(usage), rows_(rows), seed_(random::global_seed()),
        image_id_(random::stream_id("data/fake-imagenet/" + usage + "/image")),
        label_id_(random::stream_id("data/fake-imagenet/" + usage + "/label")) {
    // The value Rescale(1/255, 0) then Normalize(mean, std) give byte p of channel c, computed
    // as data/transforms.cc computes them (in double, rounded to Float32 after each).
    for (int c = 0; c < 3; ++c) {
      for (int p = 0; p < 256; ++p) {
        const auto rescaled = static_cast<float>(p * (1.0 / 255) + 0.0);
        table_[c][p] = static_cast<float>((static_cast<double>(rescaled) - kImageNetMean[c]) *
                                          (1.0 / kImageNetStd[c]));
      }
    }
  }

  std::int64_t size() const override { return rows_; }

  // The same rows in every epoch (FakeData has no augmentation).
  data::Row get(std::int64_t /*epoch*/, std::int64_t i) const override {
    if (i < 0 || i >= rows_) {
      throw ValueError(describe() + ": row " + std::to_string(i) + " out of range [0, " +
                       std::to_string(rows_) + ")");
    }
    // The HWC bytes first (lowest byte of a word first, whatever the host's byte order), then
    // one pass writing the three CHW planes through the table.
    std::vector<std::uint8_t> hwc(kBytesPerRow);
    const auto first = static_cast<std::uint64_t>(i) * kBlocksPerRow;
    std::uint32_t words[4][random::philox::kBatch];
    std::uint8_t* q = hwc.data();
    for (std::uint64_t b = 0; b < kBlocksPerRow; b += random::philox::kBatch) {
      random::philox::stream_batch(seed_, image_id_, first + b, words);
      for (int j = 0; j < random::philox::kBatch; ++j) {
        for (int w = 0; w < 4; ++w, q += 4) {
          const std::uint32_t word = words[w][j];
          q[0] = static_cast<std::uint8_t>(word);
          q[1] = static_cast<std::uint8_t>(word >> 8);
          q[2] = static_cast<std::uint8_t>(word >> 16);
          q[3] = static_cast<std::uint8_t>(word >> 24);
        }
      }
    }
    constexpr std::int64_t kPlane = kFakeImageNetSize * kFakeImageNetSize;
    Tensor image(DType::kFloat32, {3, kFakeImageNetSize, kFakeImageNetSize});
    float* red = image.data<float>();
    float* green = red + kPlane;
    float* blue = green + kPlane;
    for (std::int64_t p = 0; p < kPlane; ++p) {
      red[p] = table_[0][hwc[3 * p]];
      green[p] = table_[1][hwc[3 * p + 1]];
      blue[p] = table_[2][hwc[3 * p + 2]];
    }
    const std::uint32_t draw =
        random::philox::stream_block(seed_, label_id_, static_cast<std::uint64_t>(i))[0];
    Tensor label(DType::kInt32, {});
    label.data<std::int32_t>()[0] =
        static_cast<std::int32_t>((static_cast<std::uint64_t>(draw) * kFakeImageNetClasses) >> 32);
    return {image, label};
  }

  std::vector<std::string> column_names() const override { return {"image", "label"}; }
  std::string describe() const override { return "FakeImageNet(" + usage_ + ")"; }

 private:
  // 3 · 224 · 224 bytes in words of 4, blocks of 4 words: 9408, a multiple of philox::kBatch.
  static constexpr std::size_t kBytesPerRow = 3 * kFakeImageNetSize * kFakeImageNetSize;
  static constexpr std::uint64_t kBlocksPerRow = kBytesPerRow / 16;
  static_assert(kBlocksPerRow % random::philox::kBatch == 0);
  std::string usage_;
  std::int64_t rows_;
  std::uint64_t seed_, image_id_, label_id_;
  std::array<std::array<float, 256>, 3> table_;
};

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
  } else if (o.dataset == "fake-imagenet") {
    if (!o.data_dir.empty()) {
      throw ValueError("resnet dataset: fake-imagenet is generated, expected no data directory, "
                       "got '" + o.data_dir + "'");
    }
    ds = std::make_shared<FakeImageNet>(train ? "train" : "test",
                                        train ? kFakeImageNetTrainRows : kFakeImageNetTestRows);
  } else {
    throw ValueError("resnet dataset: expected 'fashion-mnist', 'cifar10' or 'fake-imagenet', "
                     "got '" + o.dataset + "'");
  }
  if (!transforms.empty()) transforms.push_back(data::HWC2CHW());
  // take before the transforms and the shuffle: the subset is the first rows of the files.
  if (o.num_samples > 0) ds = ds->take(o.num_samples);
  if (!transforms.empty()) ds = ds->map(transforms, "image");
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
