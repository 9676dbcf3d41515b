// grad() on straight-line graphs and graph calls, checked by central finite differences of the
// primal (Float64, via the interpreter), and the GradOptions combinations.
#include <gtest/gtest.h>

#include <cmath>

#include "core/autodiff/grad.h"
#include "core/ir/anf.h"
#include "core/ir/error.h"
#include "core/ir/verify.h"
#include "runtime/interpreter.h"
#include "tests/core/autodiff/test_util.h"

namespace loom::autodiff {
namespace {

using namespace testing;  // NOLINT
using ir::FuncGraph;
using ir::Module;
using ir::Node;
using ir::Parameter;
using ir::Value;

constexpr double kTol = 1e-6;

// Checks every element of grad_g's tuple output (d f / d args[which[i]]) against differences.
void expect_grads(const FuncGraph& f, const FuncGraph& grad_g, const std::vector<Value>& args,
                  const std::vector<std::size_t>& which) {
  Value got = runtime::interpret(grad_g, args);
  ASSERT_TRUE(got.is_tuple());
  ASSERT_EQ(got.elements().size(), which.size());
  for (std::size_t i = 0; i < which.size(); ++i) {
    std::vector<double> fd = numeric_grad(f, args, which[i]);
    EXPECT_LT(rel_error(values(got.elements()[i]), fd), kTol) << "argument " << which[i];
  }
}

// x ↦ Σ sqrt(square(log(sigmoid(tanh(exp x) * x + x)))) / exp x: ten ops, each used once or twice.
TEST(Grad, ChainOfTenOps) {
  Module m;
  FuncGraph* f = m.add_graph("chain");
  Node* x = f->add_parameter("x", f64_abs({4}));
  Node* a = call(f, "Exp", {x});
  Node* b = call(f, "Tanh", {a});
  Node* c = call(f, "Mul", {b, x});
  Node* d = call(f, "Add", {c, x});
  Node* e = call(f, "Sigmoid", {d});
  Node* l = call(f, "Log", {e});
  Node* s = call(f, "Square", {l});
  Node* q = call(f, "Sqrt", {s});
  Node* r = call(f, "RealDiv", {q, a});
  f->set_output(call(f, "ReduceSum", {r}));
  m.set_entry(f);
  annotate(f);
  FuncGraph* g = grad(f, {.get_all = true});
  ir::verify(*g);
  expect_grads(*f, *g, {f64({0.3, -0.7, 1.1, 0.05}, {4})}, {0});
  // Default options: the gradient of the first input alone.
  FuncGraph* g1 = grad(f);
  Value dx = runtime::interpret(*g1, {f64({0.3, -0.7, 1.1, 0.05}, {4})});
  EXPECT_LT(rel_error(values(dx), numeric_grad(*f, {f64({0.3, -0.7, 1.1, 0.05}, {4})}, 0)), kTol);
}

// h(x, w) = tanh(x * w); f(x, w) = Σ h(x, w) * h(h(x, w), w): a graph called twice.
TEST(Grad, GraphCalledTwice) {
  Module m;
  FuncGraph* h = m.add_graph("h");
  {
    Node* x = h->add_parameter("x");
    Node* w = h->add_parameter("w");
    h->set_output(call(h, "Tanh", {call(h, "Mul", {x, w})}));
  }
  FuncGraph* f = m.add_graph("f");
  Node* x = f->add_parameter("x", f64_abs({3}));
  Node* w = f->add_parameter("w", f64_abs({3}));
  Node* y1 = f->add_call(h, {x, w});
  Node* y2 = f->add_call(h, {y1, w});
  f->set_output(call(f, "ReduceSum", {call(f, "Mul", {y1, y2})}));
  m.set_entry(f);
  annotate(f);
  FuncGraph* g = grad(f, {.get_all = true});
  ir::verify(*g);
  expect_grads(*f, *g, {f64({0.5, -1.2, 2.0}, {3}), f64({0.9, 0.4, -0.3}, {3})}, {0, 1});
}

// f(x, y; w1, w2) = Σ (x * w1 + y * w2 * w2) with weights w1, w2 (parameters with defaults).
struct WeightedNet {
  Module m;
  FuncGraph* f = nullptr;
  Parameter* w1 = nullptr;
  Parameter* w2 = nullptr;
  WeightedNet() {
    f = m.add_graph("net");
    Node* x = f->add_parameter("x", f64_abs({2}));
    w1 = f->add_parameter("w1", f64_abs({2}));
    w1->set_default(Tensor::from_doubles(DType::kFloat64, {2}, {0.5, -2}));
    Node* y = f->add_parameter("y", f64_abs({2}));
    w2 = f->add_parameter("w2", f64_abs({2}));
    w2->set_default(Tensor::from_doubles(DType::kFloat64, {2}, {3, 0.25}));
    Node* t = call(f, "Add", {call(f, "Mul", {x, w1}), call(f, "Mul", {call(f, "Mul", {y, w2}), w2})});
    f->set_output(call(f, "ReduceSum", {call(f, "Tanh", {t})}));
    m.set_entry(f);
    annotate(f);
  }
  std::vector<Value> args() const {
    return {f64({0.1, 0.2}, {2}), f64({0.5, -2}, {2}), f64({-0.3, 0.4}, {2}), f64({3, 0.25}, {2})};
  }
};

TEST(GradOptions, GetAllGivesEveryInputButNotWeights) {
  WeightedNet n;
  FuncGraph* g = grad(n.f, {.get_all = true});
  expect_grads(*n.f, *g, n.args(), {0, 2});
}

TEST(GradOptions, WeightsListGivesThoseWeights) {
  WeightedNet n;
  FuncGraph* g = grad(n.f, {.weights = {n.w2}});
  expect_grads(*n.f, *g, n.args(), {3});
}

TEST(GradOptions, GetByListGivesEveryWeight) {
  WeightedNet n;
  FuncGraph* g = grad(n.f, {.get_by_list = true});
  expect_grads(*n.f, *g, n.args(), {1, 3});
  // The weights' defaults carry over: the grad graph runs with only the inputs given.
  Value got = runtime::interpret(*g, {f64({0.1, 0.2}, {2}), f64({0.5, -2}, {2}),
                                      f64({-0.3, 0.4}, {2})});
  EXPECT_LT(rel_error(values(got.elements()[1]), numeric_grad(*n.f, n.args(), 3)), kTol);
}

TEST(GradOptions, GetAllAndWeightsGivesBothTuples) {
  WeightedNet n;
  FuncGraph* g = grad(n.f, {.get_all = true, .get_by_list = true});
  Value got = runtime::interpret(*g, n.args());
  ASSERT_EQ(got.elements().size(), 2u);
  EXPECT_LT(rel_error(values(got.elements()[0].elements()[1]), numeric_grad(*n.f, n.args(), 2)),
            kTol);
  EXPECT_LT(rel_error(values(got.elements()[1].elements()[0]), numeric_grad(*n.f, n.args(), 1)),
            kTol);
}

TEST(GradOptions, ReturnValueGivesOutputFirst) {
  WeightedNet n;
  FuncGraph* g = grad(n.f, {.return_value = true});
  Value got = runtime::interpret(*g, n.args());
  ASSERT_EQ(got.elements().size(), 2u);
  EXPECT_DOUBLE_EQ(values(got.elements()[0])[0], values(runtime::interpret(*n.f, n.args()))[0]);
  EXPECT_LT(rel_error(values(got.elements()[1]), numeric_grad(*n.f, n.args(), 0)), kTol);
}

// sens_param: the output gradient is an input; for y = tanh(x) * 2 it gives sens * 2(1 - y²/4).
TEST(GradOptions, SensParamIsTheOutputGradient) {
  Module m;
  FuncGraph* f = m.add_graph("f");
  Node* x = f->add_parameter("x", f64_abs({3}));
  f->set_output(call(f, "Mul", {call(f, "Tanh", {x}), f->add_value(scalar(2))}));
  m.set_entry(f);
  annotate(f);
  FuncGraph* g = grad(f, {.sens_param = true});
  ASSERT_EQ(g->parameters().size(), 2u);
  std::vector<double> xs{0.1, -0.5, 2}, sens{1, -3, 0.5};
  std::vector<double> got = values(runtime::interpret(*g, {f64(xs, {3}), f64(sens, {3})}));
  for (int i = 0; i < 3; ++i) {
    double t = std::tanh(xs[i]);
    EXPECT_NEAR(got[i], sens[i] * 2 * (1 - t * t), 1e-14);
  }
  // Without sens_param a non-scalar output is differentiated against ones.
  FuncGraph* g1 = grad(f);
  EXPECT_NEAR(values(runtime::interpret(*g1, {f64(xs, {3})}))[0], 2 * (1 - std::pow(std::tanh(0.1), 2)),
              1e-14);
}

// Integer inputs get zero gradients; StopGradient blocks; an op without bprop gives zeros.
TEST(Grad, ZeroGradientPolicy) {
  Module m;
  FuncGraph* f = m.add_graph("f");
  Node* x = f->add_parameter("x", f64_abs({2}));
  Node* k = f->add_parameter("k", ir::Abstract::tensor(DType::kInt64, {2}));
  Node* kf = call(f, "Cast", {k}, {{"dst_type", Value::dtype(DType::kFloat64)}});
  Node* blocked = call(f, "StopGradient", {call(f, "Exp", {x})});
  Node* y = call(f, "Mul", {call(f, "Mul", {x, kf}), blocked});
  f->set_output(call(f, "ReduceSum", {y}));
  m.set_entry(f);
  annotate(f);
  FuncGraph* g = grad(f, {.get_all = true});
  Value got = runtime::interpret(
      *g, {f64({1, 2}, {2}), Value::tensor(Tensor::from_doubles(DType::kInt64, {2}, {3, 4}))});
  // d/dx (x * k * stop(exp x)) = k * exp(x), the StopGradient factor treated as a constant.
  EXPECT_NEAR(values(got.elements()[0])[0], 3 * std::exp(1.0), 1e-12);
  EXPECT_NEAR(values(got.elements()[0])[1], 4 * std::exp(2.0), 1e-12);
  EXPECT_EQ(got.elements()[1].as_tensor().dtype(), DType::kInt64);
  EXPECT_EQ(values(got.elements()[1]), (std::vector<double>{0, 0}));
}

TEST(Grad, NonTensorOutputNeedsSens) {
  Module m;
  FuncGraph* f = m.add_graph("f");
  Node* x = f->add_parameter("x", f64_abs({2}));
  f->set_output(call(f, "MakeTuple", {x, x}));
  annotate(f);
  EXPECT_THROW(grad(f), ValueError);
  FuncGraph* g = grad(f, {.sens_param = true});
  Value got = runtime::interpret(*g, {f64({1, 2}, {2}),
                                      Value::tuple({f64({1, 1}, {2}), f64({2, 3}, {2})})});
  EXPECT_EQ(values(got), (std::vector<double>{3, 4}));
}

}  // namespace
}  // namespace loom::autodiff

namespace loom::autodiff {
namespace {

// A graph without abstracts: grad() runs the infer pass first.
TEST(Grad, InfersAnUninferredGraph) {
  using namespace testing;  // NOLINT
  ir::Module m;
  ir::FuncGraph* f = m.add_graph("f");
  ir::Node* x = f->add_parameter("x", f64_abs({2}));
  f->set_output(call(f, "ReduceSum", {call(f, "Mul", {call(f, "Exp", {x}), x})}));
  m.set_entry(f);
  ir::FuncGraph* g = grad(f);
  std::vector<double> got = values(runtime::interpret(*g, {f64({0.5, -1}, {2})}));
  EXPECT_NEAR(got[0], std::exp(0.5) * 1.5, 1e-12);
  EXPECT_NEAR(got[1], 0, 1e-12);
}

}  // namespace
}  // namespace loom::autodiff
