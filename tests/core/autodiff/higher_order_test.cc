// Gradients of gradients: the grad graph is ordinary IR, so grad() applies to it again.
#include <gtest/gtest.h>

#include <cmath>

#include "core/autodiff/grad.h"
#include "core/ir/anf.h"
#include "core/ir/verify.h"
#include "runtime/interpreter.h"
#include "tests/core/autodiff/test_util.h"

namespace loom::autodiff {
namespace {

using namespace testing;  // NOLINT
using ir::FuncGraph;
using ir::Module;
using ir::Node;
using ir::Value;

// d²/dx² of Σ f(x) elementwise, via grad(Σ grad(f)).
std::vector<double> second_derivative(const char* op_or_cube, const std::vector<double>& xs) {
  Module m;
  FuncGraph* f = m.add_graph("f");
  Node* x = f->add_parameter("x", f64_abs({static_cast<std::int64_t>(xs.size())}));
  Node* y = std::string(op_or_cube) == "cube" ? call(f, "Mul", {call(f, "Mul", {x, x}), x})
                                              : call(f, op_or_cube, {x});
  f->set_output(call(f, "ReduceSum", {y}));
  m.set_entry(f);
  annotate(f);
  FuncGraph* d1 = grad(f);
  FuncGraph* d2 = grad(sum_of(d1, "sum_d1", false));
  ir::verify(*d2);
  return values(runtime::interpret(*d2, {f64(xs, {static_cast<std::int64_t>(xs.size())})}));
}

TEST(GradOfGrad, CubeIsSixX) {
  std::vector<double> xs{0.5, -2, 3.25};
  std::vector<double> got = second_derivative("cube", xs);
  for (std::size_t i = 0; i < xs.size(); ++i) EXPECT_DOUBLE_EQ(got[i], 6 * xs[i]);
}

TEST(GradOfGrad, TanhSecondDerivative) {
  std::vector<double> xs{0.5, -2, 0.1};
  std::vector<double> got = second_derivative("Tanh", xs);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    double t = std::tanh(xs[i]);
    EXPECT_NEAR(got[i], -2 * t * (1 - t * t), 1e-14);
  }
}

// H v for the MLP loss w.r.t. its input: grad of <grad_x L, v> against central differences of
// grad_x L along v.
TEST(GradOfGrad, MlpHessianVectorProduct) {
  Module m;
  FuncGraph* loss = build_mlp(m, DType::kFloat64);
  FuncGraph* gx = grad(loss);
  FuncGraph* hvp = grad(sum_of(gx, "dot_grad_v", true));
  ir::verify(*hvp);
  std::vector<Value> a = mlp_args(DType::kFloat64);
  std::vector<double> x = values(a[0]);
  std::vector<double> v(x.size());
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::cos(0.9 * static_cast<double>(i));
  std::vector<Value> hargs = a;
  hargs.push_back(f64(v, {4, 3}));
  std::vector<double> got = values(runtime::interpret(*hvp, hargs));
  const double eps = 1e-5;
  auto grad_at = [&](double s) {
    std::vector<double> xs = x;
    for (std::size_t i = 0; i < xs.size(); ++i) xs[i] += s * v[i];
    std::vector<Value> args = a;
    args[0] = f64(xs, {4, 3});
    return values(runtime::interpret(*gx, args));
  };
  std::vector<double> plus = grad_at(eps), minus = grad_at(-eps), fd(x.size());
  for (std::size_t i = 0; i < fd.size(); ++i) fd[i] = (plus[i] - minus[i]) / (2 * eps);
  EXPECT_LT(rel_error(got, fd), 1e-6);
}

}  // namespace
}  // namespace loom::autodiff
