// ONNX export's file, read back through onnx.proto: LeNet-5's graph (inputs with a symbolic
// batch, the weights as initializers under their names, the ops in order, the bias folded into
// Conv and Gemm), and the refusal of an op ONNX export does not write, naming it and its node.
#include "onnx/onnx.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/ir/error.h"
#include "core/random/random.h"
#include "models/lenet/lenet.h"
#include "models/resnet/resnet.h"
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

// ---- import ------------------------------------------------------------------------------------

Tensor uniform(Shape shape, std::uint64_t seed) {
  Tensor t(DType::kFloat32, std::move(shape));
  std::uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    t.data<float>()[i] = static_cast<float>((state >> 40) * (2.0 / (1ull << 24)) - 1.0);
  }
  return t;
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (std::int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::abs(t.get(i)));
  return m;
}

// loom's export read back: the same outputs as the Cell in inference mode, at a batch size other
// than the exported one (the symbolic N), and the Cell's parameter names.
void expect_round_trip(nn::Cell& net, Shape exported, Shape run, const std::string& stem) {
  TempDir dir;
  const std::string path = dir / (stem + ".onnx");
  net.set_train(false);
  onnx::export_onnx(net, {Tensor(DType::kFloat32, exported)}, path);
  const Tensor x = uniform(run, 7);
  const Tensor want = net(ops::Var(ir::Value::tensor(x))).value().as_tensor();
  mindir::GraphCell cell = onnx::load_onnx(path);
  ASSERT_EQ(cell.inputs().size(), 1u);
  EXPECT_EQ(cell.inputs()[0].shape[0], -1);
  const Tensor got = cell(x);
  ASSERT_EQ(got.shape(), want.shape());
  double diff = 0;
  for (std::int64_t i = 0; i < got.numel(); ++i) {
    diff = std::max(diff, std::abs(got.get(i) - want.get(i)));
  }
  EXPECT_LE(diff, 1e-5 * max_abs(want)) << stem;
  std::vector<std::string> names;
  for (const auto& [name, t] : cell.parameters()) names.push_back(name);
  std::vector<std::string> want_names;
  for (const auto& [name, p] : net.parameters_and_names()) want_names.push_back(name);
  std::sort(names.begin(), names.end());
  std::sort(want_names.begin(), want_names.end());
  EXPECT_EQ(names, want_names) << stem;
}

TEST(OnnxImport, LoomsExportReadsBackToTheCellsOutputs) {
  random::seed_all(1);
  models::LeNet5 lenet;
  expect_round_trip(lenet, {2, 1, 32, 32}, {3, 1, 32, 32}, "lenet");
  auto resnet = models::make_resnet(
      18, {.num_classes = 10, .in_channels = 1, .layout = models::ResNetLayout::kSmallImage});
  expect_round_trip(*resnet, {1, 1, 32, 32}, {2, 1, 32, 32}, "resnet18");
}

// A one-node model: `op` on x (N, 3) with the given domain.
std::string one_node_model(const std::string& op, const std::string& domain = "",
                           int opset = 17) {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  auto* o = m.add_opset_import();
  o->set_version(opset);
  auto* g = m.mutable_graph();
  auto* in = g->add_input();
  in->set_name("x");
  auto* t = in->mutable_type()->mutable_tensor_type();
  t->set_elem_type(::onnx::TensorProto::FLOAT);
  t->mutable_shape()->add_dim()->set_dim_param("N");
  t->mutable_shape()->add_dim()->set_dim_value(3);
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name("e");
  n->set_domain(domain);
  n->add_input("x");
  n->add_output("y");
  g->add_output()->set_name("y");
  return m.SerializeAsString();
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const FormatError& e) {
    return e.what();
  }
  return "no FormatError";
}

TEST(OnnxImport, ProblemsAreOneMessageNamingTheFileAndTheNode) {
  const std::string relu = one_node_model("Relu");
  mindir::GraphCell cell = onnx::parse_onnx(relu.data(), relu.size(), "m.onnx");
  EXPECT_EQ(cell(Tensor::from_doubles(DType::kFloat32, {1, 3}, {-1, 0, 2})).get(2), 2.0);
  const std::string erf = one_node_model("Erf");
  EXPECT_EQ(error_of([&] { onnx::parse_onnx(erf.data(), erf.size(), "m.onnx"); }),
            "ONNX m.onnx: unknown op 'Erf' at node 'e' with inputs (<Tensor[Float32], (-1, 3)>) "
            "(docs/formats.md, \"ONNX import\", lists the ONNX ops loom reads)");
  const std::string ms = one_node_model("FusedGemm", "com.microsoft");
  EXPECT_EQ(error_of([&] { onnx::parse_onnx(ms.data(), ms.size(), "m.onnx"); }),
            "ONNX m.onnx: op FusedGemm of domain 'com.microsoft' at node 'e' is not supported "
            "(loom reads the default ONNX domain)");
  const std::string old = one_node_model("Relu", "", 6);
  EXPECT_EQ(error_of([&] { onnx::parse_onnx(old.data(), old.size(), "m.onnx"); }),
            "ONNX m.onnx: expected ONNX opset 7 to 22, got 6");
  const std::string cut = relu.substr(0, relu.size() - 7);
  EXPECT_EQ(error_of([&] { onnx::parse_onnx(cut.data(), cut.size(), "m.onnx"); }),
            "ONNX m.onnx: expected an ONNX ModelProto, got " + std::to_string(cut.size()) +
                " bytes protobuf cannot parse (truncated or not an ONNX file)");
  // Found by onnx_fuzz: an initializer declaring 8 GB with 72 bytes of data is refused before
  // anything is allocated.
  const std::string oom = std::string(LOOM_SOURCE_DIR) + "/tests/fuzz/crashes/onnx-oom-declared-size";
  EXPECT_EQ(error_of([&] { onnx::load_onnx(oom); }),
            "ONNX " + oom + ": expected raw_data of 8388607992 bytes for 'c.weight' "
            "(2, 1048575999), got 72");
  // Found by onnx_fuzz: a Conv with one input (std::out_of_range before).
  const std::string conv = std::string(LOOM_SOURCE_DIR) + "/tests/fuzz/crashes/onnx-conv-one-input";
  EXPECT_EQ(error_of([&] { onnx::load_onnx(conv); }),
            "ONNX " + conv + ": unsupported form of Conv at node '/c/Conv' with inputs "
            "(<Tensor[Float32], (2, 1, 3, 3)>): expected input 1");
  EXPECT_EQ(error_of([] { onnx::load_onnx("/nonexistent/m.onnx"); }),
            "ONNX /nonexistent/m.onnx: expected a readable file, got none");
}

// The fuzz target's seeds (tests/fuzz/corpus/onnx: PyTorch exports of a few ops each, made by
// torch.onnx.export) load, and run on a batch of 3 to outputs of the file's shape.
TEST(OnnxImport, FuzzSeedsLoadAndRun) {
  const std::string dir = std::string(LOOM_SOURCE_DIR) + "/tests/fuzz/corpus/onnx";
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    mindir::GraphCell cell = onnx::load_onnx(entry.path().string());
    Shape shape = cell.inputs().at(0).shape;
    shape[0] = 3;
    const Tensor y = cell(uniform(shape, 1));
    EXPECT_EQ(y.shape()[0], 3) << entry.path();
    EXPECT_EQ(y.shape().size(), cell.outputs().at(0).shape.size()) << entry.path();
    ++n;
  }
  EXPECT_EQ(n, 4);
}

}  // namespace
}  // namespace loom::testing
