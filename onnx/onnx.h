/// \file
/// ONNX (.onnx) export: a Cell's inference graph as an ONNX model that onnx.checker accepts and
/// ONNX Runtime runs.
///
///     models::LeNet5 net;
///     onnx::export_onnx(net, {Tensor(DType::kFloat32, {1, 1, 32, 32})}, "lenet.onnx");
///
/// What is written: ModelProto{ir_version 8, opset_import {"", 17}, producer_name "loom",
/// producer_version (loom's), graph}. The graph is the inference graph MindIR export writes
/// (mindir/export_graph.h); its inputs are named x0, x1... with the example inputs' dtypes and
/// shapes, the first dimension symbolic ("N": any batch size); the weights are initializers under
/// their parameter names (Float32 raw data, little-endian); the outputs y0, y1... The ops:
///
///   Conv2D [→ BiasAdd]          Conv (pads, strides, dilations, group; the bias as its input B)
///   MatMul [→ BiasAdd | Add]    Gemm (transA / transB; the rank-1 bias as its input C)
///   BiasAdd on (N, C)           Add
///   BatchNorm (inference)       BatchNormalization (epsilon; its y only)
///   ReLU, ReLU6                 Relu, Clip(0, 6)
///   MaxPool, AvgPool            MaxPool, AveragePool (count_include_pad 0: loom's SAME averages
///                               only the elements inside x)
///   Flatten                     Flatten (axis 1)
///   Reshape                     Reshape (the shape as an Int64 initializer, its first entry 0:
///                               the batch dimension copied, so any batch size runs)
///   ReduceMean                  ReduceMean (axes, keepdims)
///   Add, Sub, Mul, RealDiv      Add, Sub, Mul, Div
///   Softmax                     Softmax (axis)
///   Sigmoid, Tanh               Sigmoid, Tanh
///
/// Any other op, or an attribute form outside these (a Conv2D in NHWC, a BatchNorm in training
/// mode), is a ValueError naming the op and its node. The file is written atomically.
#pragma once

#include <string>
#include <vector>

#include "core/ir/abstract.h"
#include "core/ir/tensor.h"

namespace loom::nn {
class Cell;
}  // namespace loom::nn

namespace loom::onnx {

/// The ONNX opset export_onnx writes (its ops' versions are those of this opset).
inline constexpr int kOpset = 17;

/// Writes `net`'s inference graph on the example inputs' dtypes and shapes (see above) to `path`.
///@{
void export_onnx(nn::Cell& net, const std::vector<ir::AbstractPtr>& example_inputs,
                 const std::string& path);
void export_onnx(nn::Cell& net, const std::vector<Tensor>& example_inputs,
                 const std::string& path);
///@}

}  // namespace loom::onnx
