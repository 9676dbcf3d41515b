// nn/cell.h and nn/layers.h: source locations of traced nodes (the user's call lines), Dense on
// inputs of rank > 2, and trace-time errors for user mistakes (feature size, channel count, rank)
// naming the Cell path and the shapes in both PyNative and traced modes.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "core/random/random.h"
#include "core/ir/anf.h"
#include "core/ir/error.h"
#include "runtime/interpreter.h"
#include "nn/cell.h"
#include "nn/context.h"
#include "nn/layers.h"

namespace loom::nn {
namespace {

using ir::Abstract;
using ir::Value;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Tensor random_input(Shape shape) {
  Tensor t(DType::kFloat32, std::move(shape));
  random::RandomStream("trace_errors_test.x").fill_normal(t, 0.0, 1.0);
  return t;
}

// Records the line of each call next to it.
struct Lines {
  int conv = 0, relu = 0, seq = 0, flatten = 0, fc = 0, add = 0;
};

class Net : public Cell {
 public:
  explicit Net(Lines* lines) : Cell("Net"), lines_(lines) {
    conv_ = &register_cell("conv", std::make_shared<Conv2d>(
                                       Conv2dOptions(3, 4, 3).pad_mode("valid").has_bias(true)));
    auto seq = std::make_shared<SequentialCell>();
    seq->append(std::make_shared<ReLU>()).append(std::make_shared<Identity>());
    seq_ = &register_cell("seq", seq);
    fc_ = &register_cell("fc", std::make_shared<Dense>(4 * 6 * 6, 5));
  }
  ops::Var construct(const std::vector<ops::Var>& in) override {
    ops::Var x = (*conv_)(in[0]); lines_->conv = __LINE__;
    x = relu(x); lines_->relu = __LINE__;
    x = (*seq_)(x); lines_->seq = __LINE__;
    x = flatten(x); lines_->flatten = __LINE__;
    x = (*fc_)(x); lines_->fc = __LINE__;
    lines_->add = __LINE__ + 1;
    return add(x, x);
  }

 private:
  Lines* lines_;
  Conv2d* conv_;
  SequentialCell* seq_;
  Dense* fc_;
};

TEST(TraceLocations, NodesCarryTheLineOfTheUsersCall) {
  Lines lines;
  Net net(&lines);
  Traced t = trace(net, {Abstract::tensor(DType::kFloat32, {2, 3, 8, 8})}, "net");
  ASSERT_NE(lines.fc, 0);
  int seen = 0;
  for (ir::CNode* c : t.graph->topo_order()) {
    const ir::DebugInfo& d = c->debug();
    SCOPED_TRACE(d.scope);
    EXPECT_EQ(d.file, "tests/nn/trace_errors_test.cc");  // relative to the project root
    int expected = 0;
    if (d.scope.rfind("Net/conv/", 0) == 0) expected = lines.conv;  // Conv2D and BiasAdd
    else if (d.scope == "Net/ReLU") expected = lines.relu;
    else if (d.scope.rfind("Net/seq/", 0) == 0) expected = lines.seq;  // inside seq's children
    else if (d.scope == "Net/Flatten") expected = lines.flatten;
    else if (d.scope.rfind("Net/fc/", 0) == 0) expected = lines.fc;  // MatMul and BiasAdd
    else if (d.scope == "Net/Add") expected = lines.add;
    ASSERT_NE(expected, 0) << "unexpected node";
    EXPECT_EQ(d.line, expected);
    ++seen;
  }
  EXPECT_EQ(seen, 8);  // Conv2D, BiasAdd, ReLU, ReLU (seq/0), Flatten, MatMul, BiasAdd, Add
}

TEST(TraceLocations, ALayerTracedAloneGetsTheTraceCall) {
  Dense fc(4, 3);
  const int line = __LINE__ + 1;
  Traced t = trace(fc, {Abstract::tensor(DType::kFloat32, {2, 4})}, "fc");
  for (ir::CNode* c : t.graph->topo_order()) {
    EXPECT_TRUE(ends_with(c->debug().file, "trace_errors_test.cc")) << c->debug().file;
    EXPECT_EQ(c->debug().line, line) << c->debug().scope;
  }
}

TEST(DenseRank, RankThreeMatchesPyNativeAndTraced) {
  ModeScope pynative(ExecMode::kPyNative);
  Dense fc(4, 3);
  const Tensor x = random_input({2, 5, 4});
  const Tensor eager = fc(ops::Var(Value::tensor(x))).value().as_tensor();
  EXPECT_EQ(eager.shape(), (Shape{2, 5, 3}));

  Traced t = trace(fc, {Abstract::tensor(DType::kFloat32, {2, 5, 4})}, "fc3");
  EXPECT_EQ(t.graph->output()->abstract()->shape(), (Shape{2, 5, 3}));
  std::vector<std::string> ops;
  for (ir::CNode* c : t.graph->topo_order()) ops.push_back(c->debug().scope);
  EXPECT_EQ(ops, (std::vector<std::string>{"Dense/Reshape", "Dense/MatMul", "Dense/BiasAdd",
                                           "Dense/Reshape"}));
  const Tensor traced = runtime::interpret(*t.graph, {Value::tensor(x)}).as_tensor();
  ASSERT_EQ(traced.shape(), eager.shape());
  const std::vector<double> a = eager.to_doubles(), b = traced.to_doubles();
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6) << i;

  // Row by row, the same as the rank-2 call on each (5, 4) slice.
  const std::vector<double> xs = x.to_doubles();
  for (int n = 0; n < 2; ++n) {
    std::vector<double> slice(xs.begin() + n * 20, xs.begin() + (n + 1) * 20);
    const Tensor y2 = fc(ops::Var(Value::tensor(Tensor::from_doubles(DType::kFloat32, {5, 4},
                                                                      slice))))
                          .value()
                          .as_tensor();
    const std::vector<double> r = y2.to_doubles();
    for (std::size_t i = 0; i < r.size(); ++i) EXPECT_NEAR(r[i], a[n * 15 + i], 1e-6);
  }
}

// net(x) in PyNative and graph mode and trace(net, x's abstract) all throw ShapeError
// `expected`.
void expect_both_modes_throw(Cell& net, const Shape& shape, const std::string& expected) {
  try {
    trace(net, {Abstract::tensor(DType::kFloat32, shape)}, "bad");
    ADD_FAILURE() << "traced: expected a ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_EQ(std::string(e.what()), expected) << "traced";
  }
  for (ExecMode mode : {ExecMode::kPyNative, ExecMode::kGraph}) {
    ModeScope scope(mode);
    const char* name = mode == ExecMode::kPyNative ? "PyNative" : "graph";
    try {
      net(ops::Var(Value::tensor(random_input(shape))));
      ADD_FAILURE() << name << ": expected a ShapeError";
    } catch (const ShapeError& e) {
      EXPECT_EQ(std::string(e.what()), expected) << name;
    }
  }
}

class ConvNet : public Cell {
 public:
  ConvNet() : Cell("Net") {
    conv_ = &register_cell("conv", std::make_shared<Conv2d>(Conv2dOptions(3, 2, 3)));
    fc_ = &register_cell("fc", std::make_shared<Dense>(2 * 8 * 8, 4));
  }
  ops::Var construct(const std::vector<ops::Var>& in) override {
    return (*fc_)(flatten((*conv_)(in[0])));
  }

 private:
  Conv2d* conv_;
  Dense* fc_;
};

class DenseNet : public Cell {
 public:
  DenseNet() : Cell("Net") { fc_ = &register_cell("fc", std::make_shared<Dense>(4, 2)); }
  ops::Var construct(const std::vector<ops::Var>& in) override { return (*fc_)(in[0]); }

 private:
  Dense* fc_;
};

TEST(TraceErrors, DenseWrongFeatureSize) {
  DenseNet net;
  expect_both_modes_throw(
      net, {2, 5},
      "Dense: expected x's last dim to equal in_channels 4, got x of shape (2, 5) (in Net/fc)");
  expect_both_modes_throw(
      net, {2, 3, 5},
      "Dense: expected x's last dim to equal in_channels 4, got x of shape (2, 3, 5) "
      "(in Net/fc)");
}

TEST(TraceErrors, Conv2dWrongChannelCount) {
  ConvNet net;
  expect_both_modes_throw(
      net, {1, 1, 8, 8},
      "Conv2d: expected input channels 3, got x of shape (1, 1, 8, 8) (in Net/conv)");
}

TEST(TraceErrors, RankMistakes) {
  ConvNet conv_net;
  expect_both_modes_throw(
      conv_net, {8, 8},
      "Conv2d: expected x of rank 4 (N, C, H, W), got x of shape (8, 8) (in Net/conv)");
  DenseNet dense_net;
  expect_both_modes_throw(
      dense_net, {4},
      "Dense: expected x of rank >= 2 (..., in_channels 4), got x of shape (4) (in Net/fc)");
  // The error state does not leak into the next call.
  EXPECT_NO_THROW(trace(conv_net, {Abstract::tensor(DType::kFloat32, {1, 3, 8, 8})}, "ok"));
  EXPECT_NO_THROW(trace(dense_net, {Abstract::tensor(DType::kFloat32, {2, 4})}, "ok"));
}

// A construct that reads its input on the host works op by op (PyNative) and is a TypeError
// saying why when traced: in graph mode it runs once, on graph values.
class HostReader : public Cell {
 public:
  HostReader() : Cell("HostReader") {}
  ops::Var construct(const std::vector<ops::Var>& in) override {
    const double first = in[0].value().as_tensor().get(0);
    return first > 0 ? relu(in[0]) : in[0];
  }
};

TEST(TraceErrors, ReadingATracedValueOnTheHost) {
  HostReader net;
  Tensor x = Tensor::from_vector<float>({2}, {1.0f, -1.0f});
  {
    ModeScope pynative(ExecMode::kPyNative);
    EXPECT_EQ(net(ops::Var(Value::tensor(x))).value().as_tensor().to_doubles(),
              (std::vector<double>{1.0, 0.0}));
  }
  try {
    trace(net, {Abstract::tensor(DType::kFloat32, {2})}, "host");
    FAIL() << "expected a TypeError";
  } catch (const TypeError& e) {
    EXPECT_EQ(std::string(e.what()),
              "Var::value: expected a concrete value, got a traced graph value (a construct "
              "traced in graph mode cannot read tensors on the host; compute with ops, branch on "
              "data with nn::cond, or run it in PyNative mode) (in HostReader)");
  }
}

}  // namespace
}  // namespace loom::nn
