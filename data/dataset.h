/// \file
/// The data pipeline: sources, MindSpore's dataset stages, and a prefetching iterator.
/// Design: docs/design.md, "data/".
///
///     seed_all(1);
///     auto train = data::MnistDataset(data::fashion_mnist_dir(""), "train")
///                      ->map({data::Pad({2}), data::Rescale(1.0 / 255, 0),
///                             data::Normalize({0.2860}, {0.3530}), data::HWC2CHW()}, "image")
///                      ->shuffle()
///                      ->batch(32, true);  // drop_remainder
///     data::Iterator it(train, {.num_epochs = 1});
///     while (std::optional<data::Row> row = it.next()) { ... (*row)[0] images, (*row)[1] labels }
///
/// Every stage is RANDOM ACCESS and PURE: get(epoch, i) is a function of (epoch, i) and of the
/// global seed in force when the stage was made (core/random/random.h), never of the order in which
/// rows are asked for, the number of worker threads or the process. So:
///   - prefetching workers can compute rows in any order and the stream of rows is the same;
///   - the pipeline's position is just (epoch, index of the next row); restoring it means asking
///     for rows from there (Iterator's `start`), no replay;
///   - a random transform's draws for row i come from a Philox stream addressed by
///     (seed, stage id, epoch, i), and shuffle's permutation of epoch e from (seed, stage id, e).
///     Exactly: op k of a map draws RandomStream(seed, id, ((epoch << 32) + i) * 64), i.e. 64
///     words reserved per row (rows < 2^32, epochs < 2^26); shuffle draws Fisher-Yates' n - 1
///     indices from RandomStream(seed, id, epoch << 34), two words (one 64-bit draw) each.
///
/// Stage ids are stable: `stream_id("data/<stage kind>/<depth>[/<op index>]")` ("data/map/1/0",
/// "data/shuffle/2"), depth = the number of stages below (a source is depth 0), so the same
/// pipeline built again draws the same numbers.
///
/// "epoch" as seen by a stage is the epoch number its consumer passes down: repeat(n) passes
/// epoch * n + k for the k-th repetition, so a shuffle below a repeat draws a new permutation for
/// every repetition (as MindSpore's does).
///
/// Rows are vectors of Tensors (columns). Sources name their columns ("image", "label"); stages
/// keep the names. Errors (wrong column, shapes that do not batch) are loom::Errors naming the
/// stage and the row index.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/ir/tensor.h"

namespace loom::random {
class RandomStream;
}  // namespace loom::random

namespace loom::data {

/// One row: a tensor per column, in column order.
using Row = std::vector<Tensor>;

class Dataset;
/// A dataset (a source or a stage), shared and immutable.
using DatasetPtr = std::shared_ptr<const Dataset>;

/// One per-sample operation of map(). Input and output are one column's tensor (images in HWC
/// layout, as MindSpore's vision transforms take them).
class Transform {
 public:
  virtual ~Transform() = default;
  /// The transform's name, as MindSpore's ("Rescale", "Pad"), for descriptions and errors.
  virtual std::string name() const = 0;
  /// Words of randomness apply() draws per row (0 for a deterministic transform); at most 64.
  virtual int random_words() const { return 0; }
  /// `rng` is null for a deterministic transform, else a stream positioned for this row.
  virtual Tensor apply(const Tensor& x, random::RandomStream* rng) const = 0;
};
/// A transform, shared and immutable.
using TransformPtr = std::shared_ptr<const Transform>;

/// MindSpore's vision / transforms ops. Images are HWC (H, W, C) or HW (H, W) tensors.
/// Rescale: x * rescale + shift, as Float32.
TransformPtr Rescale(double rescale, double shift);
/// Normalize: (x - mean[c]) / std[c] per channel (the last axis), Float32 out; one value per
/// channel (or one value for all). ValueError on a std of 0 or a channel count mismatch.
TransformPtr Normalize(std::vector<double> mean, std::vector<double> std);
/// Pad: padding of 1 value (all sides), 2 (left/right, top/bottom) or 4 (left, top, right,
/// bottom), constant fill; keeps the dtype.
TransformPtr Pad(std::vector<std::int64_t> padding, double fill_value = 0);
/// Resize to (height, width) by bilinear interpolation (half-pixel centres, as OpenCV's
/// INTER_LINEAR which MindSpore uses); integer inputs are rounded back to their dtype.
TransformPtr Resize(std::vector<std::int64_t> size);
/// RandomCrop to (height, width) after optional padding (as Pad's), offsets uniform.
TransformPtr RandomCrop(std::vector<std::int64_t> size, std::vector<std::int64_t> padding = {});
/// RandomHorizontalFlip with probability prob.
TransformPtr RandomHorizontalFlip(double prob = 0.5);
/// HWC2CHW: (H, W, C) → (C, H, W); an HW image becomes (1, H, W).
TransformPtr HWC2CHW();
/// TypeCast to dtype (values converted as static_cast does; Float → UInt8 saturates).
TransformPtr TypeCast(DType dtype);

/// A source or a stage of the pipeline: rows by (epoch, index), random access and pure
/// (data/dataset.h).
class Dataset : public std::enable_shared_from_this<Dataset> {
 public:
  virtual ~Dataset() = default;

  /// Rows in one epoch.
  virtual std::int64_t size() const = 0;
  /// Row i (0 <= i < size()) of `epoch`. Thread-safe. IndexError-like ValueError outside.
  virtual Row get(std::int64_t epoch, std::int64_t i) const = 0;
  /// The names of the columns, in row order.
  virtual std::vector<std::string> column_names() const = 0;
  /// A short description of the stage for errors ("batch(32)", "MnistDataset(train)").
  virtual std::string describe() const = 0;
  /// Number of stages below this one (a source: 0).
  virtual int depth() const { return 0; }

  /// Stages (MindSpore's names). Each returns a new Dataset over this one.
  /// map: applies `ops` in order to `column`. ValueError when no such column.
  DatasetPtr map(std::vector<TransformPtr> ops, const std::string& column = "image") const;
  /// shuffle: a full permutation of the rows per epoch (Fisher-Yates from the stage's stream).
  /// MindSpore's buffer_size is accepted for familiarity; the shuffle is always a full one.
  DatasetPtr shuffle(std::int64_t buffer_size = 0) const;
  /// batch: stacks batch_size consecutive rows per column along a new axis 0; the last partial
  /// batch is kept unless drop_remainder. ShapeError naming the column and rows on a mismatch.
  DatasetPtr batch(std::int64_t batch_size, bool drop_remainder = false) const;
  /// repeat: count times the rows (count >= 1).
  DatasetPtr repeat(std::int64_t count) const;
  /// shard: rows shard_id, shard_id + num_shards, ...; every shard has ceil(size / num_shards)
  /// rows, the last ones wrapping around to the start (MindSpore's DistributedSampler pads so).
  DatasetPtr shard(std::int64_t num_shards, std::int64_t shard_id) const;
  /// take: the first count rows (all when count >= size).
  DatasetPtr take(std::int64_t count) const;
};

/// In-memory rows: row i of column k is tensors[k] sliced at i along axis 0 (as MindSpore's
/// NumpySlicesDataset). All tensors must have the same leading size.
DatasetPtr TensorSlicesDataset(std::vector<std::string> column_names, std::vector<Tensor> tensors);

/// MNIST-format IDX files (Fashion-MNIST too), gzipped ("*.gz") or not, from `dir`:
/// {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]. usage "train", "test" or "all" (train then
/// test). Columns: "image" UInt8 (28, 28, 1) (in general (H, W, 1) from the file's dims; "all"
/// needs equal dims) and "label" Int32 (). The files are read and checked
/// (magic 0x00000803 / 0x00000801, dimensions, counts equal, byte sizes, labels < 10) when the
/// dataset is made; errors name the file and what is wrong.
DatasetPtr MnistDataset(const std::string& dir, const std::string& usage = "train");
/// CIFAR-10 binary batches in `dir`: data_batch_1..5.bin (train), test_batch.bin (test); each
/// record is 1 label byte then 3072 bytes (3 × 32 × 32, CHW). Columns "image" UInt8 (32, 32, 3) HWC
/// and "label" Int32 (). A file whose size is not a multiple of 3073 or a label >= 10 is an error.
DatasetPtr Cifar10Dataset(const std::string& dir, const std::string& usage = "train");

/// The Fashion-MNIST directory: `dir` when not empty (checked to hold the files), else the one
/// the Debian package dataset-fashion-mnist installs (found with `dpkg -L`, falling back to
/// /usr/share/datasets/fashion-mnist). ValueError saying how to install it when none is found.
std::string fashion_mnist_dir(const std::string& dir);

/// One IDX file as a tensor (UInt8 payloads only, as MNIST's; gzip or plain by content).
Tensor read_idx(const std::string& path);

// ---------------------------------------------------------------------------------------------

/// A place in the stream of rows: an epoch and the index of the next row in it.
struct Position {
  std::int64_t epoch = 0;  ///< the epoch (from 0)
  std::int64_t index = 0;  ///< the next row of that epoch
};

/// How an Iterator walks its dataset.
struct IteratorOptions {
  /// Epochs are numbered from 0 whatever `start` is: the iterator yields epochs start.epoch to
  /// num_epochs - 1, so a resumed run passes the same num_epochs as the original one.
  std::int64_t num_epochs = 1;
  int num_workers = 1;       ///< background threads computing rows (0: on the caller's thread)
  int prefetch = 4;          ///< rows computed ahead of the consumer (>= 1)
  Position start;            ///< resume from here
};

/// Yields rows epoch by epoch from `start` until num_epochs are done. Workers compute rows ahead
/// (bounded by prefetch) and next() returns them in order. An error raised computing a row is
/// rethrown by the next() that would return that row. The destructor stops the workers.
class Iterator {
 public:
  /// Starts the workers over `dataset`. Throws ValueError for a null dataset, num_epochs < 0,
  /// num_workers < 0, prefetch < 1, or a start position outside the dataset.
  Iterator(DatasetPtr dataset, IteratorOptions options = {});
  ~Iterator();
  Iterator(const Iterator&) = delete;
  Iterator& operator=(const Iterator&) = delete;

  /// The next row, or nullopt at the end of the last epoch. A row whose computation threw is
  /// consumed by the next() that rethrows its error (a caller that catches may go on).
  std::optional<Row> next();
  /// The position of the row the next call of next() returns ({num_epochs, 0} at the end).
  Position position() const;
  /// Seconds next() spent blocked waiting for a row not ready yet (the data wait), measured
  /// with steady_clock. With num_workers 0 it is the time next() spent computing rows.
  double wait_seconds() const;
  /// The dataset's rows in one epoch (its size()).
  std::int64_t rows_per_epoch() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom::data
