/// \file
/// ResNet-18, -34, -50 and -101 as MindSpore's model zoo defines them
/// (models/official/cv/ResNet/src/resnet.py), with its parameter names, block structure and
/// initializers, plus a small-image layout for 28×28 / 32×32 inputs.
///
///     ImageNet layout (224×224):   conv1 7×7 stride 2 → bn1 → relu → 3×3 stride-2 max-pool
///     small-image layout (32×32):  conv1 3×3 stride 1 → bn1 → relu            (no max-pool)
///     then layer1..layer4 (SequentialCells of blocks; layer2..4 start with stride 2),
///     ReduceMean over (H, W) with keep_dims (N, C, 1, 1) → flatten → end_point Dense(C, classes).
///
/// Blocks (MindSpore's class names):
/// - ResidualBlockBase (ResNet-18/34, "BasicBlock", expansion 1, res_base): conv1 3×3 (stride) →
///   bn1d → relu → conv2 3×3 → bn2d; + identity or down_sample_layer (0: 1×1 conv with the stride,
///   1: BatchNorm2d) → relu. Its 3×3 convolutions pad explicitly by 1 (pad_mode "pad"), as
///   PyTorch's do. The BatchNorms are bn1d / bn2d, not bn1 / bn2: "layer1.0.bn1d.gamma".
/// - ResidualBlock (ResNet-50/101, "Bottleneck", expansion 4): conv1 1×1 → bn1 → relu → conv2
///   3×3 carrying the stride → bn2 → relu → conv3 1×1 → bn3; + identity or down_sample_layer →
///   relu. Convolutions use pad_mode "same" (for a stride-2 3×3 on an even size that pads 0
///   before and 1 after, where PyTorch pads 1 and 1: MindSpore's network, not torchvision's).
///   A block has a down_sample_layer when its stride is not 1 or its channels change.
///
/// BatchNorm settings follow resnet.py's _bn exactly: every BatchNorm2d has eps 1e-4 and
/// momentum 0.9 except, in ResNet-18/34 (res_base), the stem's bn1 and the down-sample
/// BatchNorms, which have eps 1e-5 and momentum 0.1 — MindSpore's momentum is the weight of the
/// OLD moving value, so those moving statistics are 90% the last batch's (a PyTorch-style
/// momentum copied into MindSpore's convention, kept here because checkpoints and results are
/// meant to match the zoo's). In ImageNet layout ResNet-18/34 pad by 1 and max-pool "valid"
/// (resnet.py's nn.Pad + MaxPool2d), ResNet-50/101 max-pool "same".
///
/// Initial values (resnet.py's own, drawn from RandomStream(parameter name) as every loom
/// weight): convolutions kaiming_normal(mode fan_out, relu) — N(0, 2 / (out·k·k)); end_point
/// weight kaiming_uniform(a = √5) (Dense's default) and bias 0; BatchNorm gamma 1, beta 0, moving
/// mean 0, moving variance 1. (The zoo's train.py then re-initializes conv and dense weights by
/// its config, XavierUniform / TruncatedNormal; that is a training-script choice, not the
/// network's, and is not copied.)
///
/// Parameters in registration (= MindSpore's) order: conv1.weight, bn1.{gamma, beta,
/// moving_mean, moving_variance}, layer1.0.conv1.weight, layer1.0.bn1d.gamma (or bn1.gamma for
/// Bottleneck) ..., layer1.0.down_sample_layer.0.weight, layer1.0.down_sample_layer.1.gamma ...,
/// end_point.weight, end_point.bias. The ImageNet ResNet-50 with 1000 classes has 25,557,032
/// trainable values (torchvision's count: neither has conv biases) plus 53,120 moving-statistic
/// values; see num_trainable_values.
///
///     random::seed_all(1);
///     auto net = models::make_resnet(18, {.num_classes = 10, .in_channels = 1,
///                                         .layout = models::ResNetLayout::kSmallImage});
///     ops::Var logits = (*net)(ops::Var(ir::Value::tensor(x)));   // x (N, 1, 32, 32) Float32
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "nn/cell.h"
#include "nn/layers.h"

namespace loom::models {

/// The stem, and so the input size the network is made for.
enum class ResNetLayout {
  kImageNet,    ///< 7×7 stride-2 stem + 3×3 stride-2 max-pool: 224×224 → 7×7 before the pooling
  kSmallImage,  ///< 3×3 stride-1 stem, no max-pool: 32×32 → 4×4 before the pooling
};

/// ResNet's options besides the depth.
struct ResNetOptions {
  std::int64_t num_classes = 10;  ///< end_point's outputs
  std::int64_t in_channels = 3;  ///< 1 for Fashion-MNIST
  ResNetLayout layout = ResNetLayout::kImageNet;  ///< the stem
};

/// ResNet-18/34's block (MindSpore's ResidualBlockBase with res_base = true).
class ResidualBlockBase : public nn::Cell {
 public:
  /// in_channel → out_channel, conv1 (and the down-sample convolution) carrying `stride`; a
  /// down_sample_layer when stride is not 1 or the channels change.
  ResidualBlockBase(std::int64_t in_channel, std::int64_t out_channel, std::int64_t stride);
  /// The block applied to x = inputs.at(0), (N, in_channel, H, W).
  ops::Var construct(const std::vector<ops::Var>& inputs) override;
  static constexpr std::int64_t kExpansion = 1;  ///< out_channel over the inner width

 private:
  nn::Conv2d *conv1_, *conv2_;
  nn::BatchNorm2d *bn1d_, *bn2d_;
  nn::ReLU* relu_;
  nn::SequentialCell* down_sample_layer_ = nullptr;
};

/// ResNet-50/101's block (MindSpore's ResidualBlock); out_channel includes the expansion (256 for
/// the first stage), the inner width is out_channel / 4.
class ResidualBlock : public nn::Cell {
 public:
  /// in_channel → out_channel, conv2 (and the down-sample convolution) carrying `stride`; a
  /// down_sample_layer when stride is not 1 or the channels change.
  ResidualBlock(std::int64_t in_channel, std::int64_t out_channel, std::int64_t stride);
  /// The block applied to x = inputs.at(0), (N, in_channel, H, W).
  ops::Var construct(const std::vector<ops::Var>& inputs) override;
  static constexpr std::int64_t kExpansion = 4;  ///< out_channel over the inner width

 private:
  nn::Conv2d *conv1_, *conv2_, *conv3_;
  nn::BatchNorm2d *bn1_, *bn2_, *bn3_;
  nn::ReLU* relu_;
  nn::SequentialCell* down_sample_layer_ = nullptr;
};

/// ResNet-18, -34, -50 or -101 of MindSpore's model zoo, as described above.
class ResNet : public nn::Cell {
 public:
  /// depth 18, 34, 50 or 101 (ValueError otherwise, and for num_classes or in_channels < 1).
  ResNet(int depth, const ResNetOptions& options = {});
  /// x (N, in_channels, H, W) → logits (N, num_classes).
  ops::Var construct(const std::vector<ops::Var>& inputs) override;

  /// The depth: 18, 34, 50 or 101.
  int depth() const { return depth_; }
  /// The options it was made with.
  const ResNetOptions& options() const { return options_; }

  /// Values in the trainable parameters (convolutions, BatchNorm gamma and beta, end_point) and in
  /// the moving statistics of ResNet(depth, options), computed from the architecture's formula.
  /// ValueError for an unknown depth.
  ///@{
  static std::int64_t num_trainable_values(int depth, const ResNetOptions& options = {});
  static std::int64_t num_moving_statistic_values(int depth);
  ///@}

 private:
  int depth_;
  ResNetOptions options_;
  nn::Conv2d* conv1_;
  nn::BatchNorm2d* bn1_;
  nn::MaxPool2d* maxpool_ = nullptr;
  nn::SequentialCell *layer1_, *layer2_, *layer3_, *layer4_;
  nn::Flatten* flatten_;
  nn::Dense* end_point_;
};

/// std::make_shared<ResNet>(depth, options).
std::shared_ptr<ResNet> make_resnet(int depth, const ResNetOptions& options = {});

}  // namespace loom::models
