// ONNX export's file, read back through onnx.proto: LeNet-5's graph (inputs with a symbolic
// batch, the weights as initializers under their names, the ops in order, the bias folded into
// Conv and Gemm), and the refusal of an op ONNX export does not write, naming it and its node.
#include "onnx/onnx.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/ir/error.h"
#include "core/random/random.h"
#include "models/lenet/lenet.h"
#include "nn/cell.h"
#include "onnx/proto/onnx.pb.h"
#include "tests/temp_dir.h"

namespace loom::testing {
namespace {

::onnx::ModelProto read_model(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  ::onnx::ModelProto m;
  EXPECT_TRUE(m.ParseFromString(bytes.str()));
  return m;
}

TEST(OnnxExport, LeNetGraphHasTheWeightsAndTheOpsInOrder) {
  random::seed_all(1);
  models::LeNet5 net;
  TempDir dir;
  const std::string path = dir / "lenet.onnx";
  onnx::export_onnx(net, {Tensor(DType::kFloat32, {2, 1, 32, 32})}, path);
  const ::onnx::ModelProto m = read_model(path);
  EXPECT_EQ(m.ir_version(), 8);
  ASSERT_EQ(m.opset_import_size(), 1);
  EXPECT_EQ(m.opset_import(0).domain(), "");
  EXPECT_EQ(m.opset_import(0).version(), onnx::kOpset);
  EXPECT_EQ(m.producer_name(), "loom");
  const ::onnx::GraphProto& g = m.graph();
  ASSERT_EQ(g.input_size(), 1);
  EXPECT_EQ(g.input(0).name(), "x0");
  const auto& dims = g.input(0).type().tensor_type().shape().dim();
  ASSERT_EQ(dims.size(), 4);
  EXPECT_EQ(dims[0].dim_param(), "N");
  EXPECT_EQ(dims[2].dim_value(), 32);
  std::vector<std::string> weights;
  for (const auto& t : g.initializer()) weights.push_back(t.name());
  EXPECT_EQ(weights, (std::vector<std::string>{"conv1.weight", "conv2.weight", "fc1.weight",
                                               "fc1.bias", "fc2.weight", "fc2.bias",
                                               "fc3.weight", "fc3.bias"}));
  std::vector<std::string> ops;
  for (const auto& n : g.node()) ops.push_back(n.op_type());
  EXPECT_EQ(ops, (std::vector<std::string>{"Conv", "Relu", "MaxPool", "Conv", "Relu", "MaxPool",
                                           "Flatten", "Gemm", "Relu", "Gemm", "Relu", "Gemm",
                                           "Identity"}));
  // fc1: Gemm(x, fc1.weight, fc1.bias) with transB (Dense's weight is (out, in)).
  const ::onnx::NodeProto& fc1 = g.node(7);
  ASSERT_EQ(fc1.input_size(), 3);
  EXPECT_EQ(fc1.input(1), "fc1.weight");
  EXPECT_EQ(fc1.input(2), "fc1.bias");
  bool trans_b = false;
  for (const auto& a : fc1.attribute()) trans_b |= a.name() == "transB" && a.i() == 1;
  EXPECT_TRUE(trans_b);
  ASSERT_EQ(g.output_size(), 1);
  EXPECT_EQ(g.output(0).name(), "y0");
}

class ExpNet : public nn::Cell {
 public:
  ExpNet() : nn::Cell("ExpNet") {}
  ops::Var construct(const std::vector<ops::Var>& in) override {
    return nn::current_emitter().emit("Exp", {in[0]});
  }
};

TEST(OnnxExport, AnOpWithoutAnOnnxFormIsRefusedByName) {
  ExpNet net;
  TempDir dir;
  try {
    onnx::export_onnx(net, {Tensor(DType::kFloat32, {2, 3})}, dir / "exp.onnx");
    FAIL() << "expected a ValueError";
  } catch (const ValueError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("ONNX export: Exp at node %", 0), 0u) << msg;
    EXPECT_NE(msg.find("loom writes Conv2D, BiasAdd, MatMul"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace loom::testing
