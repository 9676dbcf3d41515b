// nn/cell.h and nn/layers.h: MindSpore's LeNet5 as a Cell — parameter names and count, the same
// construct in PyNative, interpreted and compiled graph modes, seeded initialization, node
// scopes, the Cell path in trace errors, and weight gradients of the traced graph.
#include "nn/cell.h"
#include "nn/context.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/random/random.h"
#include "core/autodiff/grad.h"
#include "core/ir/anf.h"
#include "core/ir/error.h"
#include "runtime/executable.h"
#include "runtime/interpreter.h"
#include "nn/layers.h"

namespace loom::nn {
namespace {

using ir::Abstract;
using ir::Value;

// MindSpore's model zoo LeNet5 (models/official/cv/lenet/src/lenet.py).
class LeNet5 : public Cell {
 public:
  explicit LeNet5(std::int64_t num_class = 10, std::int64_t num_channel = 1) : Cell("LeNet5") {
    conv1_ = &register_cell(
        "conv1", std::make_shared<Conv2d>(Conv2dOptions(num_channel, 6, 5).pad_mode("valid")));
    conv2_ = &register_cell("conv2",
                            std::make_shared<Conv2d>(Conv2dOptions(6, 16, 5).pad_mode("valid")));
    fc1_ = &register_cell("fc1", std::make_shared<Dense>(16 * 5 * 5, 120));
    fc2_ = &register_cell("fc2", std::make_shared<Dense>(120, 84));
    fc3_ = &register_cell("fc3", std::make_shared<Dense>(84, num_class));
    relu_ = &register_cell("relu", std::make_shared<ReLU>());
    max_pool2d_ = &register_cell("max_pool2d", std::make_shared<MaxPool2d>(2, 2));
    flatten_ = &register_cell("flatten", std::make_shared<Flatten>());
  }

  ops::Var construct(const std::vector<ops::Var>& inputs) override {
    ops::Var x = (*max_pool2d_)((*relu_)((*conv1_)(inputs[0])));
    x = (*max_pool2d_)((*relu_)((*conv2_)(x)));
    x = (*flatten_)(x);
    x = (*relu_)((*fc1_)(x));
    x = (*relu_)((*fc2_)(x));
    return (*fc3_)(x);
  }

 private:
  Conv2d *conv1_, *conv2_;
  Dense *fc1_, *fc2_, *fc3_;
  ReLU* relu_;
  MaxPool2d* max_pool2d_;
  Flatten* flatten_;
};

// loss(net(x), label), MindSpore's WithLossCell with SoftmaxCrossEntropyWithLogits(sparse=True).
class WithLoss : public Cell {
 public:
  explicit WithLoss(std::shared_ptr<Cell> net) : Cell("WithLossCell") {
    net_ = &register_cell("network", std::move(net));
  }
  ops::Var construct(const std::vector<ops::Var>& inputs) override {
    return current_emitter().emit("SparseSoftmaxCrossEntropyWithLogits",
                                  {(*net_)(inputs[0]), inputs[1]});
  }

 private:
  Cell* net_;
};

Tensor random_input(DType dtype, Shape shape) {
  Tensor t(dtype, std::move(shape));
  random::RandomStream("cell_test.x").fill_normal(t, 0.0, 1.0);
  return t;
}

void expect_close(const Tensor& a, const Tensor& b, double tol) {
  ASSERT_EQ(a.shape(), b.shape());
  const std::vector<double> va = a.to_doubles(), vb = b.to_doubles();
  for (std::size_t i = 0; i < va.size(); ++i) EXPECT_NEAR(va[i], vb[i], tol) << "element " << i;
}

TEST(Cell, LeNet5ParametersAreNamedAsMindSpore) {
  LeNet5 net;
  std::vector<std::string> names;
  std::int64_t total = 0;
  for (auto& [name, p] : net.parameters_and_names()) {
    names.push_back(name);
    EXPECT_EQ(p->name, name);
    EXPECT_TRUE(p->requires_grad);
    total += p->value.numel();
  }
  EXPECT_EQ(names, (std::vector<std::string>{"conv1.weight", "conv2.weight", "fc1.weight",
                                             "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight",
                                             "fc3.bias"}));
  EXPECT_EQ(total, 61684);
  EXPECT_EQ(net.parameters_and_names()[2].second->value.shape(), (Shape{120, 400}));
}

TEST(Cell, SetTrainIsRecursiveAndSequentialNamesByIndex) {
  SequentialCell seq;
  seq.append(std::make_shared<Dense>(4, 3)).append(std::make_shared<ReLU>());
  auto names = seq.parameters_and_names();
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[0].first, "0.weight");
  EXPECT_EQ(names[1].first, "0.bias");
  EXPECT_FALSE(seq.training());
  seq.set_train(true);
  for (auto& [name, c] : seq.cells_and_names()) EXPECT_TRUE(c->training()) << name;
}

TEST(Cell, PyNativeInterpretedAndCompiledAgree) {
  LeNet5 net;
  const Tensor x = random_input(DType::kFloat32, {2, 1, 32, 32});

  ops::Var eager;
  {
    ModeScope pynative(ExecMode::kPyNative);
    eager = net(ops::Var(Value::tensor(x)));
  }
  ASSERT_TRUE(eager.is_value());
  const Tensor y_eager = eager.value().as_tensor();
  EXPECT_EQ(y_eager.shape(), (Shape{2, 10}));

  Traced t = trace(net, {Abstract::tensor(DType::kFloat32, {2, 1, 32, 32})}, "lenet5");
  ASSERT_EQ(t.weights.size(), 8u);
  ASSERT_EQ(t.graph->parameters().size(), 9u);
  EXPECT_EQ(t.graph->parameter(0)->name(), "x0");
  EXPECT_EQ(t.graph->parameter(1)->name(), "conv1.weight");
  EXPECT_EQ(t.graph->parameter(8)->name(), "fc3.bias");
  EXPECT_EQ(t.weights[2]->name, "fc1.weight");

  const Tensor y_interp = runtime::interpret(*t.graph, {Value::tensor(x)}).as_tensor();
  std::unique_ptr<runtime::Executable> exe = runtime::compile(*t.graph);
  EXPECT_FALSE(exe->interpreted());
  const Tensor y_compiled = exe->run({Value::tensor(x)}).as_tensor();
  expect_close(y_interp, y_eager, 1e-6);
  expect_close(y_compiled, y_eager, 1e-6);
  // Graph mode (the default): the root call compiles and runs the same graph.
  EXPECT_EQ(context_mode(), ExecMode::kGraph);
  const Tensor y_graph = net(ops::Var(Value::tensor(x))).value().as_tensor();
  EXPECT_EQ(net.num_compilations(), 1u);
  expect_close(y_graph, y_eager, 1e-6);
}

TEST(Cell, SeedAllMakesInitialWeightsReproducible) {
  auto weights = [](std::uint64_t seed) {
    random::seed_all(seed);
    LeNet5 net;
    std::vector<Tensor> out;
    for (auto& [name, p] : net.parameters_and_names()) out.push_back(p->value);
    return out;
  };
  const std::vector<Tensor> a = weights(1), b = weights(1), c = weights(2);
  random::seed_all(0);
  ASSERT_EQ(a.size(), b.size());
  bool any_differs = false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].nbytes(), b[i].nbytes());
    EXPECT_EQ(std::memcmp(a[i].raw_data(), b[i].raw_data(), a[i].nbytes()), 0) << i;
    any_differs |= std::memcmp(a[i].raw_data(), c[i].raw_data(), a[i].nbytes()) != 0;
  }
  EXPECT_TRUE(any_differs);
  // Dense's default weight bound is 1/√fan_in (HeUniform with negative_slope √5).
  for (double v : a[2].to_doubles()) EXPECT_LE(std::abs(v), 1.0 / std::sqrt(400.0));
}

TEST(Cell, TracedNodesCarryTheCellScope) {
  LeNet5 net;
  Traced t = trace(net, {Abstract::tensor(DType::kFloat32, {2, 1, 32, 32})}, "lenet5");
  std::vector<std::string> scopes;
  for (ir::CNode* c : t.graph->topo_order()) scopes.push_back(c->debug().scope);
  auto has = [&](const std::string& s) {
    return std::find(scopes.begin(), scopes.end(), s) != scopes.end();
  };
  EXPECT_TRUE(has("LeNet5/conv1/Conv2D"));
  EXPECT_TRUE(has("LeNet5/max_pool2d/MaxPool"));
  EXPECT_TRUE(has("LeNet5/fc1/MatMul"));
  EXPECT_TRUE(has("LeNet5/fc1/BiasAdd"));
  EXPECT_TRUE(has("LeNet5/fc3/BiasAdd"));
  EXPECT_EQ(scopes.back(), "LeNet5/fc3/BiasAdd");
}

TEST(Cell, WrongInputSizeNamesTheCellPath) {
  // A 28×28 input leaves 16·4·4 = 256 features for fc1, which expects 400.
  LeNet5 net;
  const std::string expected =
      "Dense: expected x's last dim to equal in_channels 400, got x of shape (2, 256) "
      "(in LeNet5/fc1)";
  try {
    trace(net, {Abstract::tensor(DType::kFloat32, {2, 1, 28, 28})}, "lenet5");
    FAIL() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_EQ(std::string(e.what()), expected);
  }
  for (ExecMode mode : {ExecMode::kPyNative, ExecMode::kGraph}) {
    ModeScope scope(mode);
    try {
      net(ops::Var(Value::tensor(random_input(DType::kFloat32, {2, 1, 28, 28}))));
      FAIL() << "expected a ShapeError";
    } catch (const ShapeError& e) {
      EXPECT_EQ(std::string(e.what()), expected);
    }
  }
  // The error state does not leak into the next call.
  EXPECT_NO_THROW(trace(net, {Abstract::tensor(DType::kFloat32, {2, 1, 32, 32})}, "ok"));
}

TEST(Cell, WeightGradientsOfTheTracedLossMatchFiniteDifferences) {
  auto lenet = std::make_shared<LeNet5>();
  WithLoss net(lenet);
  for (auto& [name, p] : net.parameters_and_names()) {
    p->value = Tensor::from_doubles(DType::kFloat64, p->value.shape(), p->value.to_doubles());
  }
  const Tensor x = random_input(DType::kFloat64, {2, 1, 32, 32});
  const Tensor label = Tensor::from_vector<std::int32_t>({2}, {3, 7});

  Traced t = trace(net,
                   {Abstract::tensor(DType::kFloat64, {2, 1, 32, 32}),
                    Abstract::tensor(DType::kInt32, {2})},
                   "train");
  ASSERT_EQ(t.weights.size(), 8u);
  EXPECT_EQ(t.weights[0]->name, "network.conv1.weight");
  std::vector<ir::Parameter*> graph_weights(t.graph->parameters().begin() + 2,
                                            t.graph->parameters().end());
  ir::FuncGraph* g = autodiff::grad(t.graph, {.weights = graph_weights, .get_by_list = true});
  const Value grads = runtime::interpret(*g, {Value::tensor(x), Value::tensor(label)});
  ASSERT_EQ(grads.elements().size(), 8u);

  auto loss = [&] {
    return net({ops::Var(Value::tensor(x)), ops::Var(Value::tensor(label))})
        .value()
        .as_tensor()
        .to_doubles()[0];
  };
  // One conv weight, one dense weight, one bias: in each, the first entry from a fixed start whose
  // gradient is not zero (ReLU and MaxPool leave many exact zeros, which would test nothing).
  const std::vector<std::pair<std::size_t, std::int64_t>> starts = {{1, 123}, {2, 4567}, {5, 17}};
  const double eps = 1e-6;
  for (auto [w, start] : starts) {
    const std::vector<double> g_w = grads.elements()[w].as_tensor().to_doubles();
    std::int64_t i = start;
    while (i < static_cast<std::int64_t>(g_w.size()) && std::abs(g_w[i]) < 1e-4) ++i;
    ASSERT_LT(i, static_cast<std::int64_t>(g_w.size())) << t.weights[w]->name;
    Parameter& p = *t.weights[w];
    double* data = p.value.data<double>();
    const double saved = data[i];
    data[i] = saved + eps;
    const double up = loss();
    data[i] = saved - eps;
    const double down = loss();
    data[i] = saved;
    const double numeric = (up - down) / (2 * eps);
    const double analytic = g_w[i];
    EXPECT_NEAR(analytic, numeric, 1e-6 + 1e-4 * std::abs(numeric)) << p.name << "[" << i << "]";
  }
}

}  // namespace
}  // namespace loom::nn
