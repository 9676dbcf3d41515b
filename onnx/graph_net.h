/// \file
/// An ONNX model as a trainable Cell: train in loom what PyTorch exported.
///
///     auto net = onnx::load_onnx_net("resnet18.onnx");   // torch.onnx.export(model.eval(), ...)
///     nn::TrainOneStepCell step(
///         std::make_shared<nn::WithLossCell>(
///             net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(/*sparse=*/true)),
///         {.kind = nn::OptimizerKind::kMomentum, .learning_rate = 0.01, .momentum = 0.9});
///     step.step(x, labels);
///
/// The Cell is mindir::GraphNet over onnx::load_onnx's graph: its Parameters are the floating
/// initializers under their ONNX names (PyTorch's state_dict names: "conv1.weight"), a
/// BatchNormalization's mean and variance are state (not trained), and checkpoints saved from it
/// carry those names.
#pragma once

#include <memory>
#include <string>

#include "mindir/graph_net.h"

namespace loom::onnx {

/// load_onnx(path) as a trainable GraphNet. FormatError naming the file on a model loom cannot
/// read.
std::shared_ptr<mindir::GraphNet> load_onnx_net(const std::string& path);

}  // namespace loom::onnx
