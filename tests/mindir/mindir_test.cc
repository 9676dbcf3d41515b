// MindIR export and load: round trips through a file equal the Cell's eval output (LeNet-5 and a
// ResNet-style network with BatchNorm and a residual Add), the written file's structure (op and
// attribute names and types as MindSpore writes them), clean errors for every truncation of a
// small file, for unknown ops and for models over the size limit.
#include "mindir/mindir.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "checkpoint/checkpoint.h"
#include "core/random/random.h"
#include "core/ir/error.h"
#include "core/passes/infer.h"
#include "data/npy.h"
#include "mindir/graph_net.h"
#include "mindir/proto/mind_ir.pb.h"
#include "models/lenet/lenet.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/train.h"
#include "ops/op.h"
#include "tests/mindir/nets.h"

namespace loom::mindir {
namespace {

using ir::Abstract;
using AP = mind_ir::AttributeProto;

Tensor random_input(Shape shape, std::uint64_t seed) {
  Tensor t(DType::kFloat32, shape);
  std::uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    t.data<float>()[i] = static_cast<float>((s >> 40) % 2001) / 1000.0f - 1.0f;
  }
  return t;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double m = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::abs(a.get(i) - b.get(i)));
  return m;
}

Tensor eval(nn::Cell& net, const Tensor& x) {
  return net(ops::Var(ir::Value::tensor(x))).value().as_tensor();
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) / name).string();
}

mind_ir::ModelProto read_proto(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  mind_ir::ModelProto m;
  EXPECT_TRUE(m.ParseFromString(bytes));
  return m;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(MindIR, LeNetRoundTripEqualsTheCell) {
  random::seed_all(1);
  models::LeNet5 net;
  const std::string path = temp_path("lenet.mindir");
  export_mindir(net, {Abstract::tensor(DType::kFloat32, {4, 1, 32, 32})}, path);
  GraphCell cell = load_mindir(path);
  ASSERT_EQ(cell.inputs().size(), 1u);
  EXPECT_EQ(cell.inputs()[0].shape, Shape({4, 1, 32, 32}));
  EXPECT_EQ(cell.parameters().size(), 8u);
  const Tensor x = random_input({4, 1, 32, 32}, 7);
  EXPECT_LE(max_abs_diff(cell(x), eval(net, x)), 1e-5);
  // Another batch size: the loaded graph is re-inferred and compiled for it.
  const Tensor x2 = random_input({3, 1, 32, 32}, 8);
  EXPECT_LE(max_abs_diff(cell(x2), eval(net, x2)), 1e-5);
  EXPECT_EQ(cell.op_counts().at("Conv2D"), 2u);
  EXPECT_EQ(cell.op_counts().at("MatMul"), 3u);
}

TEST(MindIR, ResNetRoundTripUsesMovingStatistics) {
  random::seed_all(2);
  testing::SmallResNet net;
  net.randomize_bn();
  net.set_train(true);  // export must trace in inference mode anyway, and restore the mode
  const std::string path = temp_path("resnet.mindir");
  export_mindir(net, std::vector<Tensor>{random_input({2, 3, 8, 8}, 1)}, path);
  EXPECT_TRUE(net.training());
  net.set_train(false);
  GraphCell cell = load_mindir(path);
  const Tensor x = random_input({2, 3, 8, 8}, 3);
  const Tensor want = eval(net, x);
  EXPECT_LE(max_abs_diff(cell(x), want), 1e-5);
  EXPECT_EQ(cell.op_counts().at("BatchNorm"), 2u);
  EXPECT_EQ(cell.op_counts().at("Add"), 1u);
  // The moving statistics travel: with the defaults (0 and 1) the output differs.
  std::map<std::string, Tensor> params(cell.parameters().begin(), cell.parameters().end());
  ASSERT_TRUE(params.count("bn1.moving_mean"));
  for (const auto& [name, param] : net.parameters_and_names()) {
    ASSERT_TRUE(params.count(name)) << name;
    EXPECT_TRUE(params.at(name).bitwise_equal(param->value)) << name;
  }
  EXPECT_NE(params.at("bn1.moving_mean").get(1), 0.0);
}

std::map<std::string, const AP*> attrs_of(const mind_ir::PrimitiveProto& p) {
  std::map<std::string, const AP*> m;
  for (const AP& a : p.attribute()) m[a.name()] = &a;
  return m;
}

std::vector<std::int64_t> ints_of(const AP& a) {
  std::vector<std::int64_t> r;
  for (const AP& v : a.values()) {
    EXPECT_EQ(v.ints_size(), 1) << a.name() << ": elements use the repeated slot";
    r.push_back(v.ints(0));
  }
  return r;
}

TEST(MindIR, FileHasMindSporesLayout) {
  random::seed_all(1);
  models::LeNet5 net;
  const std::string path = temp_path("lenet_layout.mindir");
  export_mindir(net, {Abstract::tensor(DType::kFloat32, {1, 1, 32, 32})}, path);
  mind_ir::ModelProto m = read_proto(path);
  EXPECT_TRUE(m.has_producer_name());
  EXPECT_TRUE(m.has_model_version());
  EXPECT_EQ(m.ir_version(), "0.1.1");
  EXPECT_TRUE(m.little_endian());
  EXPECT_EQ(m.mind_ir_version(), 1);
  const auto& g = m.graph();
  ASSERT_EQ(g.input_size(), 1);
  EXPECT_EQ(g.input(0).name(), g.name() + ":x0");
  EXPECT_EQ(g.input(0).tensor(0).data_type(), mind_ir::TensorProto::FLOAT);
  EXPECT_EQ(std::vector<std::int64_t>(g.input(0).tensor(0).dims().begin(),
                                      g.input(0).tensor(0).dims().end()),
            (std::vector<std::int64_t>{1, 1, 32, 32}));
  ASSERT_EQ(g.parameter_size(), 8);
  EXPECT_EQ(g.parameter(0).name(), g.name() + ":conv1.weight");
  EXPECT_EQ(g.parameter(0).ref_key(), "conv1.weight");
  EXPECT_EQ(g.parameter(0).raw_data().size(), 6u * 25 * 4);
  std::multiset<std::string> ops;
  std::map<std::string, const mind_ir::PrimitiveProto*> prims;
  for (const auto& p : m.primitives()) prims[p.name()] = &p;
  for (const auto& n : g.node()) {
    if (n.op_type() == "Constant") continue;
    ASSERT_EQ(n.op_type().rfind("REF::", 0), 0u) << n.op_type();
    ASSERT_TRUE(prims.count(n.op_type().substr(5))) << n.op_type();
    ops.insert(prims[n.op_type().substr(5)]->op_type());
    EXPECT_EQ(n.output_size(), 1);
    EXPECT_EQ(n.attribute(0).name(), "shape");
  }
  EXPECT_EQ(ops.count("Conv2D"), 2u);
  EXPECT_EQ(ops.count("MaxPool"), 2u);
  EXPECT_EQ(ops.count("ReLU"), 4u);
  EXPECT_EQ(ops.count("MatMul"), 3u);
  EXPECT_EQ(ops.count("BiasAdd"), 3u);
  EXPECT_EQ(ops.count("Flatten"), 1u);
  EXPECT_EQ(ops.count("Load"), 8u);
  EXPECT_EQ(ops.count("UpdateState"), 1u);
  EXPECT_EQ(ops.count("Depend"), 1u);
  for (const auto& [name, p] : prims) {
    auto a = attrs_of(*p);
    if (p->op_type() == "Conv2D") {
      for (const char* k :
           {"kernel_size", "mode", "out_channel", "pad", "pad_mode", "format", "pad_list", "groups",
            "stride", "group", "dilation", "input_names", "output_names"}) {
        EXPECT_TRUE(a.count(k)) << k;
      }
      EXPECT_EQ(a["stride"]->type(), AP::TUPLE);
      EXPECT_EQ(ints_of(*a["stride"]), (std::vector<std::int64_t>{1, 1, 1, 1}));
      EXPECT_EQ(ints_of(*a["kernel_size"]), (std::vector<std::int64_t>{5, 5}));
      EXPECT_EQ(a["pad_mode"]->s(), "valid");
      EXPECT_EQ(a["out_channel"]->type(), AP::INT64);
      EXPECT_EQ(a["input_names"]->type(), AP::LIST);
      EXPECT_EQ(a["input_names"]->values(0).strings(0), "x");
    }
    if (p->op_type() == "MaxPool") {
      EXPECT_EQ(ints_of(*a["kernel_size"]), (std::vector<std::int64_t>{1, 1, 2, 2}));
      EXPECT_EQ(ints_of(*a["strides"]), (std::vector<std::int64_t>{1, 1, 2, 2}));
      EXPECT_EQ(a["pad_mode"]->s(), "VALID");
      EXPECT_EQ(a["format"]->s(), "NCHW");
    }
    if (p->op_type() == "MatMul") {
      EXPECT_EQ(a["transpose_b"]->type(), AP::BOOL);
      EXPECT_EQ(a["transpose_b"]->i(), 1);
      EXPECT_EQ(a["transpose_x2"]->i(), 1);
      EXPECT_EQ(a["transpose_a"]->i(), 0);
    }
    if (p->op_type() == "BiasAdd") {
      EXPECT_EQ(a["format"]->s(), "NCHW");
    }
    if (p->op_type() == "Depend") {
      EXPECT_EQ(a["side_effect_propagate"]->i(), 1);
    }
  }
  EXPECT_EQ(g.output_size(), 1);
  EXPECT_EQ(g.output(0).tensor(0).dims_size(), 2);
}

TEST(MindIR, ResNetFileHasBatchNormAndConstantOperands) {
  testing::SmallResNet net;
  const std::string path = temp_path("resnet_layout.mindir");
  export_mindir(net, {Abstract::tensor(DType::kFloat32, {2, 3, 8, 8})}, path);
  mind_ir::ModelProto m = read_proto(path);
  std::map<std::string, const mind_ir::PrimitiveProto*> prims;
  for (const auto& p : m.primitives()) prims[p.name()] = &p;
  std::map<std::string, const mind_ir::NodeProto*> consts;
  int bn = 0, reduce = 0, getitem = 0;
  for (const auto& n : m.graph().node()) {
    if (n.op_type() == "Constant") {
      consts[n.output(0)] = &n;
      continue;
    }
    const auto* p = prims.at(n.op_type().substr(5));
    auto a = attrs_of(*p);
    if (p->op_type() == "BatchNorm") {
      ++bn;
      EXPECT_EQ(n.input_size(), 5);
      EXPECT_EQ(a["is_training"]->type(), AP::BOOL);
      EXPECT_EQ(a["is_training"]->i(), 0);
      EXPECT_EQ(a["epsilon"]->type(), AP::FLOAT);
      EXPECT_FLOAT_EQ(a["epsilon"]->f(), 1e-5f);
      EXPECT_FLOAT_EQ(a["momentum"]->f(), 0.1f);
      EXPECT_EQ(a["format"]->s(), "NCHW");
      EXPECT_EQ(n.attribute(0).type(), AP::TUPLE);  // the 5-tuple abstract
      EXPECT_EQ(n.attribute(0).values_size(), 5);
    }
    if (p->op_type() == "TupleGetItem") {
      ++getitem;
      const auto* c = consts.at(n.input(1));
      EXPECT_EQ(c->attribute(0).type(), AP::INT64);
      EXPECT_EQ(c->attribute(0).i(), 0);
    }
    if (p->op_type() == "ReduceMean") {
      ++reduce;
      ASSERT_EQ(n.input_size(), 2);
      const auto* c = consts.at(n.input(1));
      EXPECT_EQ(c->attribute(0).type(), AP::TUPLE);
      EXPECT_EQ(ints_of(c->attribute(0)), (std::vector<std::int64_t>{2, 3}));
      EXPECT_EQ(a["keep_dims"]->type(), AP::BOOL);
      EXPECT_FALSE(a.count("axis"));
    }
    if (p->op_type() == "Softmax") {
      EXPECT_EQ(ints_of(*a["axis"]), (std::vector<std::int64_t>{-1}));
    }
    if (p->op_type() == "Conv2D" && a["pad_mode"]->s() == "same") {
      EXPECT_EQ(ints_of(*a["pad_list"]), (std::vector<std::int64_t>{1, 1, 1, 1}));
    }
  }
  EXPECT_EQ(bn, 2);
  EXPECT_EQ(getitem, 2);
  EXPECT_EQ(reduce, 1);
}

class Tiny : public nn::Cell {
 public:
  Tiny() : Cell("Tiny") { fc_ = &register_cell("fc", std::make_shared<nn::Dense>(3, 2)); }
  ops::Var construct(const std::vector<ops::Var>& in) override { return nn::relu((*fc_)(in[0])); }
  nn::Dense* fc_;
};

TEST(MindIR, EveryTruncationIsAFormatError) {
  Tiny net;
  const std::string path = temp_path("tiny.mindir");
  export_mindir(net, {Abstract::tensor(DType::kFloat32, {1, 3})}, path);
  const std::string bytes = read_bytes(path);
  ASSERT_GT(bytes.size(), 100u);
  EXPECT_NO_THROW(parse_mindir(bytes.data(), bytes.size(), "whole"));
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_THROW(parse_mindir(bytes.data(), n, "cut"), FormatError) << "cut at " << n;
  }
}

TEST(MindIR, MalformedFilesAreFormatErrors) {
  Tiny net;
  const std::string path = temp_path("tiny2.mindir");
  export_mindir(net, {Abstract::tensor(DType::kFloat32, {1, 3})}, path);
  mind_ir::ModelProto m = read_proto(path);
  auto message_of = [](const mind_ir::ModelProto& p) -> std::string {
    std::string b = p.SerializeAsString();
    try {
      parse_mindir(b.data(), b.size(), "bad.mindir");
    } catch (const FormatError& e) {
      return e.what();
    }
    return "no error";
  };
  {
    mind_ir::ModelProto bad = m;
    bad.mutable_graph()->mutable_parameter(0)->mutable_raw_data()->pop_back();
    EXPECT_NE(message_of(bad).find("expected raw_data of 24 bytes"), std::string::npos)
        << message_of(bad);
  }
  {
    mind_ir::ModelProto bad = m;
    bad.mutable_graph()->mutable_parameter(0)->set_data_type(14);
    EXPECT_NE(message_of(bad).find("data_type"), std::string::npos);
  }
  {
    mind_ir::ModelProto bad = m;
    bad.mutable_graph()->mutable_output(0)->set_name("nowhere");
    EXPECT_NE(message_of(bad).find("'nowhere'"), std::string::npos);
  }
  {
    mind_ir::ModelProto bad = m;
    for (auto& p : *bad.mutable_primitives()) {
      if (p.op_type() == "ReLU") p.set_op_type("Foo");
    }
    std::string msg = message_of(bad);
    EXPECT_NE(msg.find("unknown op 'Foo'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("at node 'Tiny_construct:"), std::string::npos) << msg;
    // The inputs' types, inferred as far as the reader got, and where loom's ops are listed.
    EXPECT_NE(msg.find("with inputs (<Tensor[Float32], (1, 2)>)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("docs/ops.md lists the ops loom reads"), std::string::npos) << msg;
  }
  {
    mind_ir::ModelProto bad = m;
    bad.set_mind_ir_version(99);
    EXPECT_NE(message_of(bad).find("mind_ir_version"), std::string::npos);
  }
  EXPECT_THROW(load_mindir(temp_path("missing.mindir")), FormatError);
  const std::string junk = "not a mindir file at all";
  EXPECT_THROW(parse_mindir(junk.data(), junk.size(), "junk"), FormatError);
}

TEST(MindIR, ModelsOverTheSizeLimitAreRefused) {
  models::LeNet5 net;
  ExportOptions o;
  o.max_bytes = 100000;  // stands for protobuf's 2 GB
  try {
    export_mindir(net, {Abstract::tensor(DType::kFloat32, {1, 1, 32, 32})}, temp_path("big.mindir"),
                  o);
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("2 GB"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(temp_path("big.mindir")));
}

TEST(MindIR, WrongInputsAreValueErrors) {
  Tiny net;
  const std::string path = temp_path("tiny3.mindir");
  export_mindir(net, {Abstract::tensor(DType::kFloat32, {1, 3})}, path);
  GraphCell cell = load_mindir(path);
  EXPECT_THROW(cell.run({}), ValueError);
  EXPECT_THROW(cell(Tensor(DType::kInt32, {1, 3})), ValueError);
  EXPECT_EQ(cell(Tensor(DType::kFloat32, {5, 3})).shape(), Shape({5, 2}));
}

// A file MindSpore 2.10 exported (primitive-function form, mind_ir_version 3: MatMul, BiasAdd,
// BatchNorm, AvgPool, ReduceMean and Softmax take their init arguments as Constant inputs),
// with MindSpore's own GraphCell output on a fixed input (tests/mindir/data/).
TEST(MindIR, LoadsAMindSpore210ExportWithItsOutputs) {
  const std::string dir = std::string(LOOM_SOURCE_DIR) + "/tests/mindir/data/";
  GraphCell cell = load_mindir(dir + "ms210_small_resnet.mindir");
  EXPECT_EQ(cell.producer(), "MindSpore");
  EXPECT_EQ(cell.model_version(), "2.10.0");
  EXPECT_EQ(cell.mind_ir_version(), 3);
  EXPECT_EQ(cell.op_counts().at("BatchNorm"), 2u);
  EXPECT_EQ(cell.op_counts().at("AvgPool"), 1u);
  EXPECT_EQ(cell.op_counts().at("Load"), 12u);
  EXPECT_EQ(cell.parameters().size(), 12u);
  ASSERT_EQ(cell.inputs().size(), 1u);
  EXPECT_EQ(cell.inputs()[0].name, "x");
  const Tensor x = data::load_npy(dir + "ms210_small_resnet_x.npy");
  const Tensor want = data::load_npy(dir + "ms210_small_resnet_y.npy");
  EXPECT_LE(max_abs_diff(cell(x), want), 1e-6);
  // loom re-exports what it loaded (attribute form) and gets the same outputs back.
  const std::string path = temp_path("ms_reexport.mindir");
  {
    std::ofstream out(path, std::ios::binary);
    out << serialize_graph(cell.graph(), cell.inputs().size());
  }
  GraphCell again = load_mindir(path);
  EXPECT_EQ(again.mind_ir_version(), 1);
  EXPECT_LE(max_abs_diff(again(x), want), 1e-6);
}

// The same MindSpore 2.10 export as a trainable Cell (mindir::GraphNet): its weights are
// Parameters named as in MindSpore's network (BatchNorm's moving statistics not trained), it
// computes what the GraphCell computes, five momentum steps on a fixed batch lower the loss,
// only the trainable weights move, and a checkpoint saved from it carries MindSpore's names.
TEST(MindIR, GraphNetFineTunesAMindSpore210Export) {
  const std::string dir = std::string(LOOM_SOURCE_DIR) + "/tests/mindir/data/";
  auto net = load_mindir_net(dir + "ms210_small_resnet.mindir");
  const Tensor x = data::load_npy(dir + "ms210_small_resnet_x.npy");
  const Tensor want = data::load_npy(dir + "ms210_small_resnet_y.npy");
  std::map<std::string, Tensor> before;
  std::set<std::string> frozen;
  for (auto& [name, p] : net->parameters_and_names()) {
    before[name] = p->value.clone();
    if (!p->requires_grad) frozen.insert(name);
  }
  ASSERT_EQ(before.size(), 12u);
  EXPECT_EQ(frozen, (std::set<std::string>{"bn1.moving_mean", "bn1.moving_variance",
                                           "bn2.moving_mean", "bn2.moving_variance"}));
  EXPECT_TRUE(before.count("conv1.weight") && before.count("fc.bias"));
  net->set_train(false);
  const Tensor y = (*net)(ops::Var(ir::Value::tensor(x))).value().as_tensor();
  EXPECT_LE(max_abs_diff(y, want), 1e-6);

  net->set_train(true);
  nn::TrainOneStepCell step(
      std::make_shared<nn::WithLossCell>(
          net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(/*sparse=*/true)),
      {.kind = nn::OptimizerKind::kMomentum, .learning_rate = 0.5, .momentum = 0.9});
  Tensor labels(DType::kInt32, {2});
  labels.set(0, 3);
  labels.set(1, 7);
  std::vector<double> losses;
  for (int i = 0; i < 5; ++i) losses.push_back(step.step(x, labels).get(0));
  EXPECT_LT(losses.back(), losses.front()) << losses.front() << " -> " << losses.back();
  for (auto& [name, p] : net->parameters_and_names()) {
    EXPECT_EQ(p->value.bitwise_equal(before.at(name)), frozen.count(name) > 0) << name;
  }
  const std::string ckpt = temp_path("graph_net.ckpt");
  checkpoint::save_checkpoint(*net, ckpt);
  std::set<std::string> names;
  for (const auto& [name, t] : checkpoint::load_checkpoint(ckpt).tensors) names.insert(name);
  std::set<std::string> expected;
  for (const auto& [name, t] : before) expected.insert(name);
  EXPECT_EQ(names, expected);
}

// A Conv2D -> MaxPool -> ReduceMean -> Softmax graph (weights as parameters with values).
struct SpellingGraph {
  ir::Module module;
  ir::FuncGraph* graph = nullptr;
  SpellingGraph() {
    graph = module.add_graph("spelling");
    module.set_entry(graph);
    ir::Parameter* x = graph->add_parameter("x", Abstract::tensor(DType::kFloat32, {1, 3, 8, 8}));
    ir::Parameter* w = graph->add_parameter("w", Abstract::tensor(DType::kFloat32, {4, 3, 3, 3}));
    w->set_default(random_input({4, 3, 3, 3}, 5));
    using ir::Value;
    ir::Node* y = graph->add_call(
        ops::make_op("Conv2D", {{"out_channel", Value::i64(4)},
                                {"kernel_size", Value::ints({3, 3})},
                                {"pad_mode", Value::string("same")},
                                {"stride", Value::ints({2, 2})}}),
        {x, w});
    y = graph->add_call(ops::make_op("MaxPool", {{"kernel_size", Value::ints({2, 2})},
                                                 {"strides", Value::ints({2, 2})}}),
                        {y});
    y = graph->add_call(ops::make_op("ReduceMean", {{"axis", Value::ints({2, 3})}}), {y});
    y = graph->add_call(ops::make_op("Softmax", {{"axis", Value::ints({-1})}}), {y});
    graph->set_output(y);
    passes::infer_graph(graph);
  }
};

// The attributes of the first call of `op` in a loaded graph.
const ir::Primitive& prim_of(const GraphCell& cell, const std::string& op) {
  for (const ir::CNode* c : cell.graph().topo_order()) {
    if (c->primitive() && c->primitive()->name() == op) return *c->primitive();
  }
  throw ValueError("no " + op + " in the graph");
}

void set_int(AP* a, std::int64_t v) {
  const std::string name = a->name();
  a->Clear();
  a->set_name(name);
  a->set_type(AP::INT64);
  a->set_i(v);
}

// The reader undoes each attribute's MindIR encoding as the op declares it (OpDef::mindir):
// MindSpore's other spellings of the same attributes load to the same primitives.
TEST(MindIR, ReadsMindSporesSpellingsOfAttributes) {
  SpellingGraph sg;
  const std::string bytes = serialize_graph(*sg.graph, 1);
  mind_ir::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(bytes));
  int changed = 0;
  for (auto& p : *m.mutable_primitives()) {
    for (AP& a : *p.mutable_attribute()) {
      // Conv2D: stride as a scalar, pad_mode and format as enum ints (SAME 1, NCHW 0), pad as a
      // scalar.
      if (p.op_type() == "Conv2D" && a.name() == "stride") set_int(&a, 2), ++changed;
      if (p.op_type() == "Conv2D" && a.name() == "pad_mode") set_int(&a, 1), ++changed;
      if (p.op_type() == "Conv2D" && a.name() == "format") set_int(&a, 0), ++changed;
      if (p.op_type() == "Conv2D" && a.name() == "pad") set_int(&a, 0), ++changed;
      // MaxPool: kernel_size as a scalar, pad_mode lowercase; Softmax: axis as a scalar.
      if (p.op_type() == "MaxPool" && a.name() == "kernel_size") set_int(&a, 2), ++changed;
      if (p.op_type() == "MaxPool" && a.name() == "pad_mode") a.set_s("valid"), ++changed;
      if (p.op_type() == "Softmax" && a.name() == "axis") set_int(&a, -1), ++changed;
    }
    if (p.op_type() == "Conv2D") {
      // dilation as MindSpore's (1, 1, h, w) stays as written: (1, 1, 1, 1).
      EXPECT_EQ(ints_of(*attrs_of(p).at("dilation")), (std::vector<std::int64_t>{1, 1, 1, 1}));
    }
  }
  ASSERT_EQ(changed, 7);
  // ReduceMean's axis Constant as an integer tensor.
  std::map<std::string, mind_ir::NodeProto*> consts;
  for (auto& n : *m.mutable_graph()->mutable_node()) {
    if (n.op_type() == "Constant") consts[n.output(0)] = &n;
  }
  bool axis_done = false;
  for (const auto& n : m.graph().node()) {
    for (const auto& p : m.primitives()) {
      if (n.op_type() != "REF::" + p.name() || p.op_type() != "ReduceMean") continue;
      AP* a = consts.at(n.input(1))->mutable_attribute(0);
      a->Clear();
      a->set_name("value");
      a->set_type(AP::TENSORS);
      mind_ir::TensorProto* t = a->add_tensors();
      t->set_data_type(mind_ir::TensorProto::INT64);
      t->add_dims(2);
      const std::int64_t axes[2] = {2, 3};
      t->set_raw_data(std::string(reinterpret_cast<const char*>(axes), sizeof axes));
      axis_done = true;
    }
  }
  ASSERT_TRUE(axis_done);

  GraphCell plain = parse_mindir(bytes.data(), bytes.size(), "plain");
  const std::string other = m.SerializeAsString();
  GraphCell cell = parse_mindir(other.data(), other.size(), "other");
  for (const char* op : {"Conv2D", "MaxPool", "ReduceMean", "Softmax"}) {
    EXPECT_EQ(prim_of(cell, op), prim_of(plain, op)) << op;
  }
  const ir::Primitive& conv = prim_of(cell, "Conv2D");
  EXPECT_EQ(conv.attr("stride").as_ints(), (std::vector<std::int64_t>{2, 2}));
  EXPECT_EQ(conv.attr("dilation").as_ints(), (std::vector<std::int64_t>{1, 1}));
  EXPECT_EQ(conv.attr("pad_mode").as_string(), "same");
  EXPECT_EQ(prim_of(cell, "MaxPool").attr("pad_mode").as_string(), "VALID");
  EXPECT_EQ(prim_of(cell, "ReduceMean").attr("axis").as_ints(), (std::vector<std::int64_t>{2, 3}));
  const Tensor x = random_input({1, 3, 8, 8}, 6);
  EXPECT_EQ(max_abs_diff(cell(x), plain(x)), 0.0);
}

// Conv2D's pad_list is the padding the kernels apply (ops/conv_geometry.h): SAME at stride 2 on
// 8 wide with a 3-wide kernel pads 0 before and 1 after.
TEST(MindIR, Conv2DPadListIsTheAppliedPadding) {
  SpellingGraph sg;
  mind_ir::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(serialize_graph(*sg.graph, 1)));
  int convs = 0;
  for (const auto& p : m.primitives()) {
    if (p.op_type() != "Conv2D") continue;
    ++convs;
    const auto a = attrs_of(p);
    EXPECT_EQ(ints_of(*a.at("pad_list")), (std::vector<std::int64_t>{0, 1, 0, 1}));
    // group and its second name groups are written next to each other, in name order.
    std::vector<std::string> names;
    for (const AP& attr : p.attribute()) names.push_back(attr.name());
    auto group = std::find(names.begin(), names.end(), "group");
    ASSERT_NE(group, names.end());
    EXPECT_EQ(*(group + 1), "groups");
  }
  EXPECT_EQ(convs, 1);
}

// Ops without a MindIR form (OpDef::mindir.absent_because) are refused by name.
TEST(MindIR, OpsWithoutAMindIRFormAreRefused) {
  const ops::OpDef& fused = ops::Registry::global().get("MatMulBiasAct");
  ASSERT_FALSE(fused.mindir.supported());
  ir::Module module;
  ir::FuncGraph* g = module.add_graph("fused");
  module.set_entry(g);
  std::vector<ir::Node*> args;
  for (const Shape& s : {Shape{2, 3}, Shape{3, 4}, Shape{4}}) {
    args.push_back(g->add_parameter("p" + std::to_string(args.size()),
                                    Abstract::tensor(DType::kFloat32, s)));
  }
  g->set_output(g->add_call(ops::make_op("MatMulBiasAct"), args));
  try {
    serialize_graph(*g, 3);
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("no MindIR encoding for op 'MatMulBiasAct'"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace loom::mindir
