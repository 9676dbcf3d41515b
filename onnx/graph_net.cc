// An ONNX model as a trainable Cell (onnx/graph_net.h).
#include "onnx/graph_net.h"

#include "onnx/onnx.h"

namespace loom::onnx {

std::shared_ptr<mindir::GraphNet> load_onnx_net(const std::string& path) {
  return std::make_shared<mindir::GraphNet>(load_onnx(path));
}

}  // namespace loom::onnx
