// The dataset stages of data/dataset.h (map, shuffle, batch, repeat, shard, take) and the
// in-memory TensorSlicesDataset. Every stage is random access: get(epoch, i) asks the stage below
// for exactly the rows it needs, so nothing here keeps per-iteration state. The one cache (the
// shuffle's last permutation) is a pure function of its key and only saves recomputation.
#include <algorithm>
#include <cstring>
#include <mutex>

#include "core/random/random.h"
#include "core/ir/error.h"
#include "data/dataset.h"
#include "data/internal.h"

namespace loom::data {

namespace detail {

void check_row(const Dataset& d, std::int64_t i) {
  if (i < 0 || i >= d.size()) {
    throw ValueError(d.describe() + ": row " + std::to_string(i) + " out of range [0, " +
                     std::to_string(d.size()) + ")");
  }
}

Tensor slice_row(const Tensor& t, std::int64_t i) {
  Shape row_shape(t.shape().begin() + 1, t.shape().end());
  Tensor out(t.dtype(), row_shape);
  const std::size_t bytes = out.nbytes();
  if (bytes > 0) {
    std::memcpy(out.raw_data(), static_cast<const char*>(t.raw_data()) + bytes * i, bytes);
  }
  return out;
}

}  // namespace detail

namespace {

std::string join_names(const std::vector<TransformPtr>& ops) {
  std::string s;
  for (std::size_t k = 0; k < ops.size(); ++k) s += (k ? ", " : "") + ops[k]->name();
  return s;
}

std::string where(std::int64_t epoch, std::int64_t i) {
  return "row " + std::to_string(i) + " of epoch " + std::to_string(epoch);
}

// ---- TensorSlicesDataset --------------------------------------------------------------------

class TensorSlices final : public Dataset {
 public:
  TensorSlices(std::vector<std::string> names, std::vector<Tensor> tensors)
      : names_(std::move(names)), tensors_(std::move(tensors)) {
    if (names_.size() != tensors_.size()) {
      throw ValueError("TensorSlicesDataset: expected one column name per tensor, got " +
                       std::to_string(names_.size()) + " names and " +
                       std::to_string(tensors_.size()) + " tensors");
    }
    if (tensors_.empty()) throw ValueError("TensorSlicesDataset: expected at least one column");
    for (std::size_t k = 0; k < tensors_.size(); ++k) {
      const Tensor& t = tensors_[k];
      if (!t.defined() || t.rank() < 1) {
        throw ShapeError("TensorSlicesDataset: column '" + names_[k] +
                         "': expected a tensor of rank >= 1, got " +
                         (t.defined() ? t.describe() : std::string("an undefined tensor")));
      }
      if (t.dim(0) != tensors_[0].dim(0)) {
        throw ShapeError("TensorSlicesDataset: expected every column to have " +
                         std::to_string(tensors_[0].dim(0)) + " rows (as '" + names_[0] +
                         "'), got " + std::to_string(t.dim(0)) + " in '" + names_[k] + "'");
      }
      for (std::size_t j = 0; j < k; ++j) {
        if (names_[j] == names_[k]) {
          throw ValueError("TensorSlicesDataset: duplicate column name '" + names_[k] + "'");
        }
      }
    }
  }

  std::int64_t size() const override { return tensors_[0].dim(0); }
  Row get(std::int64_t epoch, std::int64_t i) const override {
    detail::check_row(*this, i);
    Row row;
    row.reserve(tensors_.size());
    for (const Tensor& t : tensors_) row.push_back(detail::slice_row(t, i));
    return row;
  }
  std::vector<std::string> column_names() const override { return names_; }
  std::string describe() const override { return "TensorSlicesDataset"; }

 private:
  std::vector<std::string> names_;
  std::vector<Tensor> tensors_;
};

// A stage over one child: keeps the child alive and knows its depth.
class Stage : public Dataset {
 public:
  explicit Stage(DatasetPtr child) : child_(std::move(child)) {}
  std::vector<std::string> column_names() const override { return child_->column_names(); }
  int depth() const override { return child_->depth() + 1; }

 protected:
  DatasetPtr child_;
};

// ---- map ------------------------------------------------------------------------------------

class Map final : public Stage {
 public:
  Map(DatasetPtr child, std::vector<TransformPtr> ops, const std::string& column)
      : Stage(std::move(child)), ops_(std::move(ops)), column_name_(column),
        seed_(random::global_seed()) {
    const std::vector<std::string> names = child_->column_names();
    const auto it = std::find(names.begin(), names.end(), column);
    if (it == names.end()) {
      std::string known;
      for (const std::string& n : names) known += (known.empty() ? "'" : ", '") + n + "'";
      throw ValueError("map: no column '" + column + "' in " + child_->describe() +
                       " (columns: " + known + ")");
    }
    column_ = static_cast<std::size_t>(it - names.begin());
    for (std::size_t k = 0; k < ops_.size(); ++k) {
      if (!ops_[k]) throw ValueError("map: transform " + std::to_string(k) + " is null");
      const int words = ops_[k]->random_words();
      if (words < 0 || words > kWordsPerRow) {
        throw ValueError("map: " + ops_[k]->name() + " asks for " + std::to_string(words) +
                         " random words per row, at most " + std::to_string(kWordsPerRow));
      }
      ids_.push_back(random::stream_id("data/map/" + std::to_string(depth()) + "/" +
                                        std::to_string(k)));
    }
  }

  std::int64_t size() const override { return child_->size(); }

  Row get(std::int64_t epoch, std::int64_t i) const override {
    detail::check_row(*this, i);
    Row row = child_->get(epoch, i);
    Tensor x = row[column_];
    for (std::size_t k = 0; k < ops_.size(); ++k) {
      try {
        if (ops_[k]->random_words() > 0) {
          // Row i of epoch e owns words [((e << 32) + i) * 64, +64) of op k's stream.
          const std::uint64_t pos =
              ((static_cast<std::uint64_t>(epoch) << 32) + static_cast<std::uint64_t>(i)) *
              kWordsPerRow;
          random::RandomStream rng(seed_, ids_[k], pos);
          x = ops_[k]->apply(x, &rng);
        } else {
          x = ops_[k]->apply(x, nullptr);
        }
      } catch (const Error& e) {
        rethrow_with_context(e, " (in " + describe() + ", column '" + column_name_ + "', " +
                                    where(epoch, i) + ")");
      }
    }
    row[column_] = x;
    return row;
  }

  std::string describe() const override { return "map(" + join_names(ops_) + ")"; }

 private:
  static constexpr int kWordsPerRow = 64;
  std::vector<TransformPtr> ops_;
  std::string column_name_;
  std::size_t column_ = 0;
  std::uint64_t seed_;
  std::vector<std::uint64_t> ids_;
};

// ---- shuffle --------------------------------------------------------------------------------

class Shuffle final : public Stage {
 public:
  explicit Shuffle(DatasetPtr child)
      : Stage(std::move(child)), seed_(random::global_seed()),
        id_(random::stream_id("data/shuffle/" + std::to_string(depth()))) {}

  std::int64_t size() const override { return child_->size(); }

  Row get(std::int64_t epoch, std::int64_t i) const override {
    detail::check_row(*this, i);
    return child_->get(epoch, (*permutation(epoch))[static_cast<std::size_t>(i)]);
  }

  std::string describe() const override { return "shuffle"; }

  // The permutation of `epoch`: Fisher–Yates, j uniform in [0, k] for k = n-1 down to 1 from
  // two words each (a 64-bit draw scaled by multiplication: bias below n / 2^64). Epoch e's draws
  // are words [e << 34, ...) of the stage's stream, so epochs never share words.
  std::shared_ptr<const std::vector<std::int64_t>> permutation(std::int64_t epoch) const {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (cached_ && cached_epoch_ == epoch) return cached_;
    }
    const std::int64_t n = size();
    auto perm = std::make_shared<std::vector<std::int64_t>>(static_cast<std::size_t>(n));
    for (std::int64_t k = 0; k < n; ++k) (*perm)[static_cast<std::size_t>(k)] = k;
    if (n > 1) {
      random::RandomStream rng(seed_, id_, static_cast<std::uint64_t>(epoch) << 34);
      const std::vector<std::uint32_t> w = rng.words(2 * (n - 1));
      for (std::int64_t k = n - 1, d = 0; k >= 1; --k, d += 2) {
        const std::uint64_t r = (static_cast<std::uint64_t>(w[d]) << 32) | w[d + 1];
        const auto j = static_cast<std::int64_t>(
            (static_cast<unsigned __int128>(r) * static_cast<std::uint64_t>(k + 1)) >> 64);
        std::swap((*perm)[static_cast<std::size_t>(k)], (*perm)[static_cast<std::size_t>(j)]);
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    cached_ = std::move(perm);
    cached_epoch_ = epoch;
    return cached_;
  }

 private:
  std::uint64_t seed_;
  std::uint64_t id_;
  mutable std::mutex mu_;
  mutable std::shared_ptr<const std::vector<std::int64_t>> cached_;
  mutable std::int64_t cached_epoch_ = -1;
};

// ---- batch ----------------------------------------------------------------------------------

class Batch final : public Stage {
 public:
  Batch(DatasetPtr child, std::int64_t batch_size, bool drop_remainder)
      : Stage(std::move(child)), batch_size_(batch_size), drop_remainder_(drop_remainder) {
    if (batch_size < 1) {
      throw ValueError("batch: expected batch_size >= 1, got " + std::to_string(batch_size));
    }
  }

  std::int64_t size() const override {
    const std::int64_t n = child_->size();
    return drop_remainder_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
  }

  Row get(std::int64_t epoch, std::int64_t i) const override {
    detail::check_row(*this, i);
    const std::int64_t first = i * batch_size_;
    const std::int64_t count = std::min(batch_size_, child_->size() - first);
    Row head = child_->get(epoch, first);
    const std::vector<std::string> names = child_->column_names();
    Row out;
    out.reserve(head.size());
    for (std::size_t c = 0; c < head.size(); ++c) {
      Shape shape = head[c].shape();
      shape.insert(shape.begin(), count);
      out.emplace_back(head[c].dtype(), shape);
    }
    for (std::int64_t r = 0; r < count; ++r) {
      Row row = r == 0 ? std::move(head) : child_->get(epoch, first + r);
      for (std::size_t c = 0; c < out.size(); ++c) {
        const Tensor& x = row[c];
        const Tensor& ref = out[c];
        const Shape want(ref.shape().begin() + 1, ref.shape().end());
        if (x.dtype() != ref.dtype() || x.shape() != want) {
          throw ShapeError(describe() + ": column '" + names[c] + "': row " +
                           std::to_string(first + r) + " is " + x.describe() + " but row " +
                           std::to_string(first) + " is Tensor[" +
                           std::string(dtype_name(ref.dtype())) + "]" + shape_to_string(want) +
                           " (batch " + std::to_string(i) + " of epoch " +
                           std::to_string(epoch) + ")");
        }
        const std::size_t bytes = x.nbytes();
        if (bytes > 0) {
          std::memcpy(static_cast<char*>(out[c].raw_data()) + bytes * r, x.raw_data(), bytes);
        }
      }
    }
    return out;
  }

  std::string describe() const override {
    return "batch(" + std::to_string(batch_size_) + (drop_remainder_ ? ", drop_remainder)" : ")");
  }

 private:
  std::int64_t batch_size_;
  bool drop_remainder_;
};

// ---- repeat ---------------------------------------------------------------------------------

class Repeat final : public Stage {
 public:
  Repeat(DatasetPtr child, std::int64_t count) : Stage(std::move(child)), count_(count) {
    if (count < 1) throw ValueError("repeat: expected count >= 1, got " + std::to_string(count));
  }
  std::int64_t size() const override { return child_->size() * count_; }
  Row get(std::int64_t epoch, std::int64_t i) const override {
    detail::check_row(*this, i);
    const std::int64_t n = child_->size();
    return child_->get(epoch * count_ + i / n, i % n);
  }
  std::string describe() const override { return "repeat(" + std::to_string(count_) + ")"; }

 private:
  std::int64_t count_;
};

// ---- shard ----------------------------------------------------------------------------------

class Shard final : public Stage {
 public:
  Shard(DatasetPtr child, std::int64_t num_shards, std::int64_t shard_id)
      : Stage(std::move(child)), num_shards_(num_shards), shard_id_(shard_id) {
    if (num_shards < 1 || shard_id < 0 || shard_id >= num_shards) {
      throw ValueError("shard: expected num_shards >= 1 and 0 <= shard_id < num_shards, got " +
                       std::to_string(num_shards) + " and " + std::to_string(shard_id));
    }
  }
  std::int64_t size() const override {
    return (child_->size() + num_shards_ - 1) / num_shards_;
  }
  Row get(std::int64_t epoch, std::int64_t i) const override {
    detail::check_row(*this, i);
    return child_->get(epoch, (shard_id_ + i * num_shards_) % child_->size());
  }
  std::string describe() const override {
    return "shard(" + std::to_string(num_shards_) + ", " + std::to_string(shard_id_) + ")";
  }

 private:
  std::int64_t num_shards_;
  std::int64_t shard_id_;
};

// ---- take -----------------------------------------------------------------------------------

class Take final : public Stage {
 public:
  Take(DatasetPtr child, std::int64_t count) : Stage(std::move(child)), count_(count) {
    if (count < 0) throw ValueError("take: expected count >= 0, got " + std::to_string(count));
  }
  std::int64_t size() const override { return std::min(count_, child_->size()); }
  Row get(std::int64_t epoch, std::int64_t i) const override {
    detail::check_row(*this, i);
    return child_->get(epoch, i);
  }
  std::string describe() const override { return "take(" + std::to_string(count_) + ")"; }

 private:
  std::int64_t count_;
};

}  // namespace

DatasetPtr Dataset::map(std::vector<TransformPtr> ops, const std::string& column) const {
  return std::make_shared<Map>(shared_from_this(), std::move(ops), column);
}
DatasetPtr Dataset::shuffle(std::int64_t buffer_size) const {
  return std::make_shared<Shuffle>(shared_from_this());
}
DatasetPtr Dataset::batch(std::int64_t batch_size, bool drop_remainder) const {
  return std::make_shared<Batch>(shared_from_this(), batch_size, drop_remainder);
}
DatasetPtr Dataset::repeat(std::int64_t count) const {
  return std::make_shared<Repeat>(shared_from_this(), count);
}
DatasetPtr Dataset::shard(std::int64_t num_shards, std::int64_t shard_id) const {
  return std::make_shared<Shard>(shared_from_this(), num_shards, shard_id);
}
DatasetPtr Dataset::take(std::int64_t count) const {
  return std::make_shared<Take>(shared_from_this(), count);
}

DatasetPtr TensorSlicesDataset(std::vector<std::string> column_names,
                               std::vector<Tensor> tensors) {
  return std::make_shared<TensorSlices>(std::move(column_names), std::move(tensors));
}

}  // namespace loom::data
