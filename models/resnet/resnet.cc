// ResNet as MindSpore's model zoo builds it (see resnet.h): the two residual blocks, the stem per
// layout, four stages made like _make_layer, and the pooled Dense head. The per-depth tables below
// are resnet.py's resnet18 / resnet34 / resnet50 / resnet101 arguments.
#include "models/resnet/resnet.h"

#include <array>
#include <string>
#include <utility>

#include "core/ir/error.h"
#include "core/ir/value.h"
#include "nn/initializer.h"

namespace loom::models {
namespace {

struct Architecture {
  bool bottleneck;
  std::array<std::int64_t, 4> layer_nums, in_channels, out_channels, strides;
};

Architecture architecture(int depth) {
  constexpr std::array<std::int64_t, 4> kStrides = {1, 2, 2, 2};
  constexpr std::array<std::int64_t, 4> kBasicIn = {64, 64, 128, 256};
  constexpr std::array<std::int64_t, 4> kBasicOut = {64, 128, 256, 512};
  constexpr std::array<std::int64_t, 4> kBottleneckIn = {64, 256, 512, 1024};
  constexpr std::array<std::int64_t, 4> kBottleneckOut = {256, 512, 1024, 2048};
  switch (depth) {
    case 18: return {false, {2, 2, 2, 2}, kBasicIn, kBasicOut, kStrides};
    case 34: return {false, {3, 4, 6, 3}, kBasicIn, kBasicOut, kStrides};
    case 50: return {true, {3, 4, 6, 3}, kBottleneckIn, kBottleneckOut, kStrides};
    case 101: return {true, {3, 4, 23, 3}, kBottleneckIn, kBottleneckOut, kStrides};
    default:
      throw ValueError("ResNet: expected a depth of 18, 34, 50 or 101, got " +
                       std::to_string(depth));
  }
}

// Replaces p's initializer. The value is not drawn here: every layer made with this is
// registered into a parent at once, and registration draws the value again from the new
// initializer under the new name (nn::Parameter), so drawing now would only cost time (a
// ResNet-50's 25M values are already drawn once per nesting level).
void reinitialize(nn::Parameter& p, std::shared_ptr<const nn::Initializer> init) {
  p.initializer = std::move(init);
}

// resnet.py's _conv3x3 / _conv1x1 / _conv7x7: no bias, weight kaiming_normal(fan_out, relu);
// res_base convolutions pad explicitly ("pad", k / 2), the others use "same".
std::shared_ptr<nn::Conv2d> conv(std::int64_t in, std::int64_t out, std::int64_t kernel,
                                 std::int64_t stride, bool res_base) {
  nn::Conv2dOptions o(in, out, kernel);
  o.stride(stride);
  if (res_base) {
    o.pad_mode("pad").padding(kernel / 2);
  } else {
    o.pad_mode("same");
  }
  auto c = std::make_shared<nn::Conv2d>(o);
  reinitialize(c->weight(), std::make_shared<nn::HeNormal>(0.0, "fan_out", "relu"));
  return c;
}

// resnet.py's _bn(channel, res_base).
std::shared_ptr<nn::BatchNorm2d> bn(std::int64_t channels, bool res_base = false) {
  return res_base ? std::make_shared<nn::BatchNorm2d>(channels, 1e-5, 0.1)
                  : std::make_shared<nn::BatchNorm2d>(channels, 1e-4, 0.9);
}

std::shared_ptr<nn::SequentialCell> down_sample(std::int64_t in, std::int64_t out,
                                                std::int64_t stride, bool res_base) {
  auto seq = std::make_shared<nn::SequentialCell>();
  seq->append(conv(in, out, 1, stride, res_base)).append(bn(out, res_base));
  return seq;
}

// nn.Pad(((0, 0), (0, 0), (1, 1), (1, 1))) with zeros, as Concat of zero rows and columns (loom
// has no Pad op; this is exact, and its gradient is Concat's).
ops::Var pad_hw_by_one(const ops::Var& x) {
  ops::Emitter& e = nn::current_emitter();
  auto pad_axis = [&](const ops::Var& v, std::int64_t axis) {
    std::vector<std::int64_t> size = {-1, -1, -1, -1};
    size[static_cast<std::size_t>(axis)] = 1;
    ops::Var zeros = e.zeros_like(e.emit(
        "Slice", {v}, {{"begin", ir::Value::ints({0, 0, 0, 0})}, {"size", ir::Value::ints(size)}}));
    return e.emit("Concat", {zeros, v, zeros}, {{"axis", ir::Value::i64(axis)}});
  };
  return pad_axis(pad_axis(x, 2), 3);
}

}  // namespace

ResidualBlockBase::ResidualBlockBase(std::int64_t in_channel, std::int64_t out_channel,
                                     std::int64_t stride)
    : nn::Cell("ResidualBlockBase") {
  conv1_ = &register_cell("conv1", conv(in_channel, out_channel, 3, stride, true));
  bn1d_ = &register_cell("bn1d", bn(out_channel));
  conv2_ = &register_cell("conv2", conv(out_channel, out_channel, 3, 1, true));
  bn2d_ = &register_cell("bn2d", bn(out_channel));
  relu_ = &register_cell("relu", std::make_shared<nn::ReLU>());
  if (stride != 1 || in_channel != out_channel) {
    down_sample_layer_ = &register_cell("down_sample_layer",
                                        down_sample(in_channel, out_channel, stride, true));
  }
}

ops::Var ResidualBlockBase::construct(const std::vector<ops::Var>& inputs) {
  ops::Var identity = inputs.at(0);
  ops::Var out = (*relu_)((*bn1d_)((*conv1_)(identity)));
  out = (*bn2d_)((*conv2_)(out));
  if (down_sample_layer_) identity = (*down_sample_layer_)(identity);
  return (*relu_)(nn::add(out, identity));
}

ResidualBlock::ResidualBlock(std::int64_t in_channel, std::int64_t out_channel,
                             std::int64_t stride)
    : nn::Cell("ResidualBlock") {
  const std::int64_t channel = out_channel / kExpansion;
  conv1_ = &register_cell("conv1", conv(in_channel, channel, 1, 1, false));
  bn1_ = &register_cell("bn1", bn(channel));
  conv2_ = &register_cell("conv2", conv(channel, channel, 3, stride, false));
  bn2_ = &register_cell("bn2", bn(channel));
  conv3_ = &register_cell("conv3", conv(channel, out_channel, 1, 1, false));
  bn3_ = &register_cell("bn3", bn(out_channel));
  relu_ = &register_cell("relu", std::make_shared<nn::ReLU>());
  if (stride != 1 || in_channel != out_channel) {
    down_sample_layer_ = &register_cell("down_sample_layer",
                                        down_sample(in_channel, out_channel, stride, false));
  }
}

ops::Var ResidualBlock::construct(const std::vector<ops::Var>& inputs) {
  ops::Var identity = inputs.at(0);
  ops::Var out = (*relu_)((*bn1_)((*conv1_)(identity)));
  out = (*relu_)((*bn2_)((*conv2_)(out)));
  out = (*bn3_)((*conv3_)(out));
  if (down_sample_layer_) identity = (*down_sample_layer_)(identity);
  return (*relu_)(nn::add(out, identity));
}

ResNet::ResNet(int depth, const ResNetOptions& options)
    : nn::Cell("ResNet"), depth_(depth), options_(options) {
  const Architecture arch = architecture(depth);
  if (options.num_classes < 1 || options.in_channels < 1) {
    throw ValueError("ResNet: expected num_classes and in_channels >= 1, got " +
                     std::to_string(options.num_classes) + " and " +
                     std::to_string(options.in_channels));
  }
  const bool res_base = !arch.bottleneck;
  const bool imagenet = options.layout == ResNetLayout::kImageNet;
  conv1_ = &register_cell("conv1", conv(options.in_channels, 64, imagenet ? 7 : 3,
                                        imagenet ? 2 : 1, res_base));
  bn1_ = &register_cell("bn1", bn(64, res_base));
  if (imagenet) {
    maxpool_ = &register_cell("maxpool",
                              std::make_shared<nn::MaxPool2d>(3, 2, res_base ? "valid" : "same"));
  }
  nn::SequentialCell** layers[4] = {&layer1_, &layer2_, &layer3_, &layer4_};
  for (std::size_t s = 0; s < 4; ++s) {
    auto layer = std::make_shared<nn::SequentialCell>();
    for (std::int64_t b = 0; b < arch.layer_nums[s]; ++b) {
      const std::int64_t in = b == 0 ? arch.in_channels[s] : arch.out_channels[s];
      const std::int64_t stride = b == 0 ? arch.strides[s] : 1;
      if (arch.bottleneck) {
        layer->append(std::make_shared<ResidualBlock>(in, arch.out_channels[s], stride));
      } else {
        layer->append(std::make_shared<ResidualBlockBase>(in, arch.out_channels[s], stride));
      }
    }
    *layers[s] = &register_cell("layer" + std::to_string(s + 1), std::move(layer));
  }
  flatten_ = &register_cell("flatten", std::make_shared<nn::Flatten>());
  auto end_point = std::make_shared<nn::Dense>(arch.out_channels[3], options.num_classes);
  reinitialize(*end_point->bias(), std::make_shared<nn::Zero>());
  end_point_ = &register_cell("end_point", std::move(end_point));
}

ops::Var ResNet::construct(const std::vector<ops::Var>& inputs) {
  ops::Var x = nn::relu((*bn1_)((*conv1_)(inputs.at(0))));
  if (maxpool_) {
    if (depth_ == 18 || depth_ == 34) x = pad_hw_by_one(x);
    x = (*maxpool_)(x);
  }
  x = (*layer4_)((*layer3_)((*layer2_)((*layer1_)(x))));
  // resnet.py's ReduceMean(keep_dims=True) over (2, 3): (N, C, 1, 1), then Flatten.
  x = nn::current_emitter().emit("ReduceMean", {x},
                                 {{"axis", ir::Value::ints({2, 3})},
                                  {"keep_dims", ir::Value::boolean(true)}});
  return (*end_point_)((*flatten_)(x));
}

std::int64_t ResNet::num_trainable_values(int depth, const ResNetOptions& options) {
  const Architecture arch = architecture(depth);
  const std::int64_t stem_k = options.layout == ResNetLayout::kImageNet ? 7 : 3;
  std::int64_t n = 64 * options.in_channels * stem_k * stem_k + 2 * 64;
  for (std::size_t s = 0; s < 4; ++s) {
    for (std::int64_t b = 0; b < arch.layer_nums[s]; ++b) {
      const std::int64_t in = b == 0 ? arch.in_channels[s] : arch.out_channels[s];
      const std::int64_t out = arch.out_channels[s];
      const std::int64_t stride = b == 0 ? arch.strides[s] : 1;
      if (arch.bottleneck) {
        const std::int64_t c = out / ResidualBlock::kExpansion;
        n += in * c + 9 * c * c + c * out + 2 * (c + c + out);
      } else {
        n += 9 * in * out + 9 * out * out + 2 * (out + out);
      }
      if (stride != 1 || in != out) n += in * out + 2 * out;
    }
  }
  return n + arch.out_channels[3] * options.num_classes + options.num_classes;
}

std::int64_t ResNet::num_moving_statistic_values(int depth) {
  const Architecture arch = architecture(depth);
  std::int64_t channels = 64;
  for (std::size_t s = 0; s < 4; ++s) {
    for (std::int64_t b = 0; b < arch.layer_nums[s]; ++b) {
      const std::int64_t in = b == 0 ? arch.in_channels[s] : arch.out_channels[s];
      const std::int64_t out = arch.out_channels[s];
      const std::int64_t stride = b == 0 ? arch.strides[s] : 1;
      channels += arch.bottleneck ? out / ResidualBlock::kExpansion * 2 + out : 2 * out;
      if (stride != 1 || in != out) channels += out;
    }
  }
  return 2 * channels;
}

std::shared_ptr<ResNet> make_resnet(int depth, const ResNetOptions& options) {
  return std::make_shared<ResNet>(depth, options);
}

}  // namespace loom::models
