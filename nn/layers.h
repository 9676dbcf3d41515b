/// \file
/// Layers: MindSpore's nn layer names and defaults, libtorch-style options.
///
///     auto conv = std::make_shared<Conv2d>(Conv2dOptions(1, 6, 5).pad_mode("valid"));
///     auto fc = std::make_shared<Dense>(400, 120);
///     SequentialCell seq;
///     seq.append(conv).append(std::make_shared<ReLU>());
///
/// Initial values follow MindSpore ≥ 2.1 (nn/initializer.h): weights HeUniform(negative_slope=√5),
/// biases Uniform(1/√fan_in), Float32. Each is drawn from RandomStream(full name) when registered
/// and drawn again when the layer is registered into a parent (nn::Parameter), so after
/// seed_all(s) a network's initial weights depend only on s and the parameter names.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/random/random.h"
#include "nn/cell.h"

namespace loom::nn {

/// y = x wᵀ + b for x (N, in_channels); weight (out_channels, in_channels), bias (out_channels).
/// x of rank > 2 (..., in_channels) is handled as MindSpore does: Reshape to (-1, in_channels),
/// MatMul, BiasAdd, Reshape back to (..., out_channels) (at most one unknown leading dim).
class Dense : public Cell {
 public:
  /// Registers "weight" and, with has_bias, "bias" (Float32, MindSpore's default initializers);
  /// throws ValueError unless in_channels and out_channels are positive.
  Dense(std::int64_t in_channels, std::int64_t out_channels, bool has_bias = true);
  /// Throws ShapeError on a known shape: "Dense: expected x of rank >= 2 (..., in_channels 4),
  /// got x of shape (4)" or "Dense: expected x's last dim to equal in_channels ..." (the Cell
  /// path is appended, as for every Cell error).
  ops::Var construct(const std::vector<ops::Var>& inputs) override;

  /// The weight, (out_channels, in_channels).
  Parameter& weight() { return *weight_; }
  /// The bias, (out_channels); null without a bias.
  Parameter* bias() { return bias_; }

 private:
  std::int64_t in_channels_, out_channels_;
  Parameter* weight_;
  Parameter* bias_ = nullptr;
};

/// Conv2d's options, MindSpore's nn.Conv2d defaults: stride 1, pad_mode "same", padding 0,
/// has_bias false. Each option (in_channels, out_channels, kernel_size, stride, pad_mode,
/// padding, has_bias) has a setter `name(value)` that returns `*this` for chaining and a getter
/// `name()`. The kernel is square (kernel_size × kernel_size) and so is the stride; padding is
/// applied to all four sides and only with pad_mode "pad".
struct Conv2dOptions {
  /// The three required options; the others keep their defaults.
  Conv2dOptions(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}

/// Declares an option `name` of Conv2dOptions: a setter returning `*this` and a getter (undefined
/// again after the options).
#define LOOM_OPTION(type, name)            \
  Conv2dOptions& name(type value) {        \
    name##_ = std::move(value);            \
    return *this;                          \
  }                                        \
  const type& name() const { return name##_; }
  LOOM_OPTION(std::int64_t, in_channels)
  LOOM_OPTION(std::int64_t, out_channels)
  LOOM_OPTION(std::int64_t, kernel_size)
  LOOM_OPTION(std::int64_t, stride)
  LOOM_OPTION(std::string, pad_mode)
  // padding: all four sides; only with pad_mode "pad".
  LOOM_OPTION(std::int64_t, padding)
  LOOM_OPTION(bool, has_bias)
#undef LOOM_OPTION

 private:
  std::int64_t in_channels_, out_channels_, kernel_size_;
  std::int64_t stride_ = 1;
  std::string pad_mode_ = "same";
  std::int64_t padding_ = 0;
  bool has_bias_ = false;
};

/// 2-D convolution of x (N, in, H, W); weight (out, in, k, k), bias (out).
class Conv2d : public Cell {
 public:
  /// Registers "weight" (out, in, k, k) and, with has_bias, "bias" (out), Float32 with
  /// MindSpore's default initializers; throws ValueError unless in_channels, out_channels,
  /// kernel_size and stride are positive.
  explicit Conv2d(Conv2dOptions options);
  /// Throws ShapeError on a known shape: "Conv2d: expected x of rank 4 (N, C, H, W), got x of
  /// shape (2, 3)" or "Conv2d: expected input channels 3, got x of shape (1, 1, 8, 8)".
  ops::Var construct(const std::vector<ops::Var>& inputs) override;

  /// The weight, (out, in, k, k).
  Parameter& weight() { return *weight_; }
  /// The bias, (out); null without a bias.
  Parameter* bias() { return bias_; }

 private:
  Conv2dOptions options_;
  Parameter* weight_;
  Parameter* bias_ = nullptr;
};

/// max(x, 0) (the ReLU op).
class ReLU : public Cell {
 public:
  ReLU() : Cell("ReLU") {}
  /// relu(x) of its single input x; throws ValueError for any other number of inputs.
  ops::Var construct(const std::vector<ops::Var>& inputs) override;
};

/// (N, ...) → (N, product of the rest).
class Flatten : public Cell {
 public:
  Flatten() : Cell("Flatten") {}
  /// flatten(x) of its single input x; throws ValueError for any other number of inputs.
  ops::Var construct(const std::vector<ops::Var>& inputs) override;
};

/// MindSpore's nn.MaxPool2d: stride defaults to 1, pad_mode "valid".
class MaxPool2d : public Cell {
 public:
  /// A square kernel_size × kernel_size window moved by stride in both dims; pad_mode "valid"
  /// or "same".
  explicit MaxPool2d(std::int64_t kernel_size = 1, std::int64_t stride = 1,
                     std::string pad_mode = "valid");
  /// The MaxPool op on its single input x (N, C, H, W); throws ValueError for any other number
  /// of inputs.
  ops::Var construct(const std::vector<ops::Var>& inputs) override;

 private:
  std::int64_t kernel_size_, stride_;
  std::string pad_mode_;
};

/// Applies its cells in order; they are registered as "0", "1"... ("0.weight").
class SequentialCell : public Cell {
 public:
  SequentialCell() : Cell("SequentialCell") {}
  /// Registers `cell` as the next child (named by its index); returns `*this` for chaining.
  SequentialCell& append(std::shared_ptr<Cell> cell);
  /// Calls the first cell on all the inputs, then each next cell on the previous output. With
  /// no cells it returns its single input (ValueError for any other number of inputs).
  ops::Var construct(const std::vector<ops::Var>& inputs) override;

 private:
  std::vector<Cell*> cells_;
};

/// MindSpore's nn.AvgPool2d: kernel_size 1, stride 1, pad_mode "valid" ("same" averages only the
/// elements inside x).
class AvgPool2d : public Cell {
 public:
  /// A square kernel_size × kernel_size window moved by stride in both dims; pad_mode "valid"
  /// or "same".
  explicit AvgPool2d(std::int64_t kernel_size = 1, std::int64_t stride = 1,
                     std::string pad_mode = "valid");
  /// The AvgPool op on its single input x (N, C, H, W); throws ValueError for any other number
  /// of inputs.
  ops::Var construct(const std::vector<ops::Var>& inputs) override;

 private:
  std::int64_t kernel_size_, stride_;
  std::string pad_mode_;
};

/// 1 / (1 + exp(-x)) (the Sigmoid op).
class Sigmoid : public Cell {
 public:
  Sigmoid() : Cell("Sigmoid") {}
  /// The Sigmoid op on its single input x; throws ValueError for any other number of inputs.
  ops::Var construct(const std::vector<ops::Var>& inputs) override;
};

/// tanh(x) (the Tanh op).
class Tanh : public Cell {
 public:
  Tanh() : Cell("Tanh") {}
  /// The Tanh op on its single input x; throws ValueError for any other number of inputs.
  ops::Var construct(const std::vector<ops::Var>& inputs) override;
};

/// MindSpore's nn.GELU(approximate=True): the GeLU primitive's tanh form.
class GELU : public Cell {
 public:
  GELU() : Cell("GELU") {}
  /// The GeLU op on its single input x; throws ValueError for any other number of inputs.
  ops::Var construct(const std::vector<ops::Var>& inputs) override;
};

/// Softmax along one axis (default -1, MindSpore's default).
class Softmax : public Cell {
 public:
  /// Softmax along `axis` (negative counts from the last dim).
  explicit Softmax(std::int64_t axis = -1) : Cell("Softmax"), axis_(axis) {}
  /// The Softmax op on its single input x; throws ValueError for any other number of inputs.
  ops::Var construct(const std::vector<ops::Var>& inputs) override;

 private:
  std::int64_t axis_;
};

/// Returns its input unchanged.
class Identity : public Cell {
 public:
  Identity() : Cell("Identity") {}
  /// Its single input x; throws ValueError for any other number of inputs.
  ops::Var construct(const std::vector<ops::Var>& inputs) override;
};

/// MindSpore 2.x nn.Dropout(p=0.5): p is the probability of zeroing an element (keep_prob = 1 − p;
/// MindSpore's deprecated keep_prob argument is Dropout::with_keep_prob). The identity when
/// !training(); in training it returns x * mask / keep_prob (the Dropout op's first output).
///
/// The random state is step state: a non-trainable Int64 (2) Parameter `key` ("drop.key" in a
/// parent), drawn by RandomKey (nn/initializer.h) from RandomStream(its full name) — so, like the
/// weights, it depends only on the seed in force and the final name, and is drawn again when the
/// Dropout is registered into a parent. Each training call emits Dropout(x, key) and then
/// assign(key, key + [0, 1]) (Cell::assign): the op uses key[0] as the Philox key and key[1] as
/// the upper word of its counter, so every call draws a fresh mask from a block of the Philox
/// sequence no other call uses. Traced, the key is a graph weight and the increment a state
/// update, so a compiled step (a graph-mode root call or TrainOneStepCell) draws a new mask every
/// step, and PyNative and graph mode draw the same masks step after step from the same key.
/// Setting key's value (or loading a checkpoint) restarts the sequence there.
class Dropout : public Cell {
 public:
  /// p in [0, 1); throws ValueError otherwise ("Dropout: expected p in [0, 1), got 1").
  explicit Dropout(double p = 0.5);
  /// A Dropout with MindSpore's deprecated keep_prob in (0, 1]; throws ValueError otherwise
  /// ("Dropout: expected keep_prob in (0, 1], got 0").
  static std::shared_ptr<Dropout> with_keep_prob(double keep_prob);
  /// x unchanged when !training() (or keep_prob is 1); in training, the Dropout op's first
  /// output and the key's assign (see above). Throws ValueError unless given one input.
  ops::Var construct(const std::vector<ops::Var>& inputs) override;

  /// The probability of zeroing an element, 1 − keep_prob().
  double p() const { return 1.0 - keep_prob_; }
  /// The probability of keeping an element.
  double keep_prob() const { return keep_prob_; }
  /// The random state: the non-trainable Int64 (2) Parameter "key".
  Parameter& key() { return *key_; }

 private:
  double keep_prob_;
  Parameter* key_;
};

/// min(max(x, 0), 6) (the ReLU6 op).
class ReLU6 : public Cell {
 public:
  ReLU6() : Cell("ReLU6") {}
  /// The ReLU6 op on its single input x; throws ValueError for any other number of inputs.
  ops::Var construct(const std::vector<ops::Var>& inputs) override;
};

/// MindSpore's nn.BatchNorm2d(num_features, eps=1e-5, momentum=0.9, affine=True,
/// gamma_init='ones', beta_init='zeros', moving_mean_init='zeros', moving_var_init='ones',
/// use_batch_statistics=None) on x (N, num_features, H, W). Parameters, in this order: gamma and
/// beta (trainable; requires_grad = false when !affine, as MindSpore), moving_mean and
/// moving_variance (requires_grad = false), all Float32 (num_features), initialized by name
/// (make_initializer: "ones", "zeros", "normal", a number...).
///
/// Batch statistics are used when use_batch_statistics is true, or when it is unset and the
/// Cell is training; then y = (x - μ) / sqrt(σ² + eps) · gamma + beta with the batch mean μ and
/// the biased variance σ², and the moving statistics are updated with Cell::assign:
///
///     moving_mean     = momentum · moving_mean     + (1 - momentum) · μ
///     moving_variance = momentum · moving_variance + (1 - momentum) · σ²·M/(M-1)
/// (M = N·H·W). The BatchNorm op (ops/norm_loss_ops.cc) feeds the UNBIASED batch variance to the
/// moving average, as MindSpore's GPU and Ascend kernels (cuDNN) and PyTorch do; MindSpore's CPU
/// kernel uses the biased one. The op's momentum is the weight of the new statistic, so this Cell
/// passes 1 - momentum; PyTorch's BatchNorm2d(momentum = 1 - momentum) is the same layer.
/// Otherwise (eval, or use_batch_statistics false) the moving statistics normalize and nothing
/// is assigned. Throws ShapeError at call / trace time unless x has rank 4 and num_features
/// channels ("BatchNorm2d: expected x of rank 4 (N, C, H, W), got x of shape (2, 3)", "...
/// expected input channels 3, got x of shape (1, 1, 8, 8)", with the Cell path appended).
class BatchNorm2d : public Cell {
 public:
  /// Registers the four parameters above; the `*_init` strings go to make_initializer. Throws
  /// ValueError unless num_features > 0, momentum is in [0, 1] and eps > 0.
  explicit BatchNorm2d(std::int64_t num_features, double eps = 1e-5, double momentum = 0.9,
                       bool affine = true, const std::string& gamma_init = "ones",
                       const std::string& beta_init = "zeros",
                       const std::string& moving_mean_init = "zeros",
                       const std::string& moving_var_init = "ones",
                       std::optional<bool> use_batch_statistics = std::nullopt);
  /// Normalizes its single input x as described above (ValueError for any other number of
  /// inputs) and, with batch statistics, assigns the moving statistics.
  ops::Var construct(const std::vector<ops::Var>& inputs) override;

  /// The scale, (num_features).
  Parameter& gamma() { return *gamma_; }
  /// The shift, (num_features).
  Parameter& beta() { return *beta_; }
  /// The moving mean, (num_features); not trainable.
  Parameter& moving_mean() { return *moving_mean_; }
  /// The moving variance, (num_features); not trainable.
  Parameter& moving_variance() { return *moving_variance_; }

 private:
  std::int64_t num_features_;
  double eps_, momentum_;
  std::optional<bool> use_batch_statistics_;
  Parameter *gamma_, *beta_, *moving_mean_, *moving_variance_;
};

/// MindSpore's nn.CellList: a list of Cells registered as "0", "1"... (so "0.weight"). It is a
/// container, not a network: calling it (its construct) throws TypeError; call its cells.
///
///     CellList layers;
///     layers.append(std::make_shared<Dense>(4, 4)).append(std::make_shared<ReLU>());
///     for (Cell* c : layers) x = (*c)(x);
class CellList : public Cell {
 public:
  CellList() : Cell("CellList") {}
  /// Registers `cell` as the next child (named by its index); returns `*this` for chaining.
  CellList& append(std::shared_ptr<Cell> cell);
  /// The number of cells.
  std::size_t size() const { return cells_.size(); }
  /// The i-th cell; throws ValueError for i >= size().
  Cell& operator[](std::size_t i) const;
  /// Iteration over the cells (as Cell*), in order.
  ///@{
  std::vector<Cell*>::const_iterator begin() const { return cells_.begin(); }
  std::vector<Cell*>::const_iterator end() const { return cells_.end(); }
  ///@}
  /// Always throws TypeError: a CellList is a container; call its cells.
  ops::Var construct(const std::vector<ops::Var>& inputs) override;

 private:
  std::vector<Cell*> cells_;
};

}  // namespace loom::nn
