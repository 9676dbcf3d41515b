// grad() through If (captured values, data-dependent predicates), While (data-dependent trip
// counts, loop-invariant captures) and recursion, checked by central finite differences.
#include <gtest/gtest.h>

#include <cmath>

#include "core/autodiff/grad.h"
#include "core/ir/anf.h"
#include "core/ir/control_flow.h"
#include "core/ir/verify.h"
#include "runtime/interpreter.h"
#include "ops/op.h"
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

// build_cond_net (test_util.h): f(x; w) = Σ y², y = Σx > 0 ? x * tanh(w) : -x; the then-branch
// captures tanh(w), so w's gradient flows only through that branch.
struct CondNet {
  Module m;
  FuncGraph* f = build_cond_net(m);
};

TEST(GradControlFlow, CondBothBranchesAndCapturedWeight) {
  CondNet n;
  FuncGraph* g = grad(n.f, {.get_all = true, .get_by_list = true});
  ir::verify(*g);
  Value w = f64({0.4, -1.5, 0.9}, {3});
  for (const Value& x : {f64({0.5, 1.0, -0.2}, {3}), f64({-0.5, 0.3, -0.9}, {3})}) {
    Value got = runtime::interpret(*g, {x, w});
    std::vector<double> dx = values(got.elements()[0].elements()[0]);
    std::vector<double> dw = values(got.elements()[1].elements()[0]);
    EXPECT_LT(rel_error(dx, numeric_grad(*n.f, {x, w}, 0)), kTol);
    std::vector<double> fd_w = numeric_grad(*n.f, {x, w}, 1);
    bool then_branch = values(x)[0] + values(x)[1] + values(x)[2] > 0;
    if (then_branch) {
      EXPECT_LT(rel_error(dw, fd_w), kTol);
    } else {
      EXPECT_EQ(dw, (std::vector<double>{0, 0, 0}));  // the else branch does not use w
    }
  }
}

// build_loop_net (test_util.h): repeat x = tanh(W x) while Σ x² > bound and fewer than 20 iterations; f = Σ x_final * c.
// The trip count depends on x; W and bound are captured (loop-invariant state).
struct LoopNet {
  Module m;
  FuncGraph* f = build_loop_net(m);
};

TEST(GradControlFlow, WhileWithDataDependentTripCount) {
  LoopNet n;
  FuncGraph* g = grad(n.f, {.get_all = true});
  ir::verify(*g);
  Value w = f64({0.5, -0.4, 0.3, 0.2, 0.6, -0.5, -0.3, 0.1, 0.7}, {3, 3});
  for (const Value& x : {f64({0.9, -0.8, 0.7}, {3, 1}), f64({0.2, 0.1, -0.15}, {3, 1}),
                         f64({0.1, 0.1, 0.1}, {3, 1})}) {
    Value got = runtime::interpret(*g, {x, w});
    EXPECT_LT(rel_error(values(got.elements()[0]), numeric_grad(*n.f, {x, w}, 0)), kTol);
    EXPECT_LT(rel_error(values(got.elements()[1]), numeric_grad(*n.f, {x, w}, 1)), kTol);
  }
}

// power(x, n) = n > 0 ? x * power(x, n - 1) : ones_like(x), recursive through If on a Float64
// counter; f(x, n) = Σ power(x, n), so d f / d x = n x^(n-1).
TEST(GradControlFlow, RecursiveGraph) {
  Module m;
  FuncGraph* power = m.add_graph("power");
  Node* x = power->add_parameter("x", f64_abs({3}));
  Node* n = power->add_parameter("n", f64_abs({}));
  Node* rec = nullptr;
  Node* out = ir::cond(power, call(power, "Greater", {n, power->add_value(scalar(0))}), {x, n},
      [&](FuncGraph* b, const std::vector<Node*>& p) {
        rec = b->add_call(power, {p[0], call(b, "Sub", {p[1], b->add_value(scalar(1))})});
        rec->set_abstract(f64_abs({3}));
        return call(b, "Mul", {p[0], rec});
      },
      [&](FuncGraph* b, const std::vector<Node*>& p) { return call(b, "OnesLike", {p[0]}); });
  power->set_output(out);
  FuncGraph* f = m.add_graph("f");
  Node* fx = f->add_parameter("x", f64_abs({3}));
  Node* fn = f->add_parameter("n", f64_abs({}));
  f->set_output(call(f, "ReduceSum", {f->add_call(power, {fx, fn})}));
  m.set_entry(f);
  annotate(f);
  FuncGraph* g = grad(f);
  ir::verify(*g);
  std::vector<double> xs{0.5, -1.25, 2};
  for (double k : {0.0, 1.0, 3.0}) {
    std::vector<double> got = values(runtime::interpret(*g, {f64(xs, {3}), scalar(k)}));
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(got[i], k * std::pow(xs[i], k - 1), 1e-12) << k;
    EXPECT_LT(rel_error(got, numeric_grad(*f, {f64(xs, {3}), scalar(k)}, 0)), kTol);
  }
}

}  // namespace
}  // namespace loom::autodiff
