/// \file
/// ONNX (.onnx) export and import. Export: a Cell's inference graph as an ONNX model that
/// onnx.checker accepts and ONNX Runtime runs. Import (load_onnx, at the end): an ONNX model as
/// a runnable mindir::GraphCell, and (onnx/graph_net.h) as a trainable Cell.
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

#include <cstddef>
#include <string>
#include <vector>

#include "core/ir/abstract.h"
#include "core/ir/tensor.h"
#include "mindir/mindir.h"

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

/// Reads an .onnx file (PyTorch's torch.onnx.export, loom's export_onnx...) into a GraphCell,
/// the model mindir::load_mindir gives for MindIR: it runs at any batch size the file's
/// symbolic dimensions allow, on the CPU or (to_device) the GPU. The graph's inputs are the
/// ONNX graph inputs that are not initializers; the floating initializers are the weights
/// (GraphCell::parameters(), under their ONNX names); integer initializers are constants.
/// Shapes computed from the input's shape (PyTorch's Shape → Gather → Concat → Reshape for
/// `x.view(x.size(0), -1)`) are folded at import time. The ONNX ops read and the loom ops they
/// become are listed in docs/formats.md ("ONNX import"). Every problem is a FormatError
/// naming the file: a file protobuf cannot parse, an opset outside 7–22, an op of another
/// domain, an unknown op or an unsupported form of one (the op, its node, its inputs' types and
/// what loom reads), weights stored outside the file.
mindir::GraphCell load_onnx(const std::string& path);
/// The same from bytes in memory; `what` names them in messages.
mindir::GraphCell parse_onnx(const void* data, std::size_t size, const std::string& what);

}  // namespace loom::onnx
