// Gradients of a plain C++ function built as IR, by autodiff::grad (source transformation: the
// gradient is itself a graph).
//
//   f(x) = Σ q,  p = x⁴ by a While (p ← p · x, three times),  q = Σp > 1 ? p · p : 3 p
//   h(x) = Σ (Σx > 0 ? x³ : x²)
//
// prints and runs grad(f), value_and_grad(f) (GradOptions::return_value) and the second
// derivative of h as grad(grad(h)) (grad-of-grad through a While is not supported, see
// core/autodiff/grad.h, so the second order goes through an If only), on inputs taking either
// branch, and checks each against the analytic derivative (exit 1 on a mismatch).
//
//   build/bin/loom_example_grad
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/autodiff/grad.h"
#include "core/ir/anf.h"
#include "core/ir/control_flow.h"
#include "core/ir/printer.h"
#include "core/ir/tensor.h"
#include "core/ir/value.h"
#include "ops/op.h"
#include "runtime/interpreter.h"

using namespace loom;
using ir::FuncGraph;
using ir::Node;
using ir::Value;

namespace {

// A gradient graph and every graph it reaches (its forward and backward halves, the If branches
// and While bodies) as IR text.
std::string print_with_callees(ir::Module& m, FuncGraph* g) {
  m.set_entry(g);
  return ir::print_module(m);
}

Node* call(FuncGraph* g, const char* op, const std::vector<Node*>& args) {
  return g->add_call(ops::make_op(op), args);
}
Node* constant(FuncGraph* g, double v) {
  return g->add_value(Value::tensor(Tensor::scalar(DType::kFloat64, v)));
}
Value vec(const std::vector<double>& v) {
  return Value::tensor(
      Tensor::from_doubles(DType::kFloat64, {static_cast<std::int64_t>(v.size())}, v));
}

FuncGraph* build_f(ir::Module& m) {
  FuncGraph* f = m.add_graph("f");
  Node* x = f->add_parameter("x", ir::Abstract::tensor(DType::kFloat64, {3}));
  Node* loop = ir::while_loop(f, {x, constant(f, 0)},
      [&](FuncGraph* c, const std::vector<Node*>& s) {
        return call(c, "Less", {s[1], constant(c, 3)});
      },
      [&](FuncGraph* b, const std::vector<Node*>& s) {  // x is captured (loop-invariant)
        return std::vector<Node*>{call(b, "Mul", {s[0], x}), call(b, "Add", {s[1], constant(b, 1)})};
      });
  Node* p = f->add_call(ops::make_op("TupleGetItem"), {loop, f->add_value(Value::i64(0))});
  Node* big = call(f, "Greater", {call(f, "ReduceSum", {p}), constant(f, 1)});
  Node* q = ir::cond(f, big, {p},
      [&](FuncGraph* b, const std::vector<Node*>& a) { return call(b, "Mul", {a[0], a[0]}); },
      [&](FuncGraph* b, const std::vector<Node*>& a) { return call(b, "Mul", {a[0], constant(b, 3)}); });
  f->set_output(call(f, "ReduceSum", {q}));
  return f;
}

FuncGraph* build_h(ir::Module& m) {
  FuncGraph* h = m.add_graph("h");
  Node* x = h->add_parameter("x", ir::Abstract::tensor(DType::kFloat64, {3}));
  Node* positive = call(h, "Greater", {call(h, "ReduceSum", {x}), constant(h, 0)});
  Node* y = ir::cond(h, positive, {x},
      [&](FuncGraph* b, const std::vector<Node*>& a) {
        return call(b, "Mul", {call(b, "Mul", {a[0], a[0]}), a[0]});
      },
      [&](FuncGraph* b, const std::vector<Node*>& a) { return call(b, "Mul", {a[0], a[0]}); });
  h->set_output(call(h, "ReduceSum", {y}));
  return h;
}

int failures = 0;

// Compares got with want (elementwise, relative 1e-12) and prints one line.
void check(const std::string& what, const std::vector<double>& got,
           const std::vector<double>& want) {
  double err = got.size() == want.size() ? 0 : INFINITY;
  for (std::size_t i = 0; i < got.size() && i < want.size(); ++i) {
    err = std::max(err, std::abs(got[i] - want[i]) / std::max(1.0, std::abs(want[i])));
  }
  std::printf("%-44s max error %.3g %s\n", what.c_str(), err, err < 1e-12 ? "ok" : "MISMATCH");
  if (!(err < 1e-12)) ++failures;
}

}  // namespace

int main() {
  try {
    ir::Module m;
    FuncGraph* f = build_f(m);
    FuncGraph* h = build_h(m);
    m.set_entry(f);

    // One input per branch of f's If: Σx⁴ = 2.79 (then: f' = 8x⁷) and 0.31 (else: f' = 12x³).
    const std::vector<std::vector<double>> inputs{{0.5, -1.2, 0.9}, {0.3, -0.5, 0.7}};
    auto f_value = [](const std::vector<double>& x) {
      double s4 = 0, s8 = 0;
      for (double v : x) s4 += std::pow(v, 4), s8 += std::pow(v, 8);
      return s4 > 1 ? s8 : 3 * s4;
    };
    auto f_grad = [](const std::vector<double>& x) {
      double s4 = 0;
      for (double v : x) s4 += std::pow(v, 4);
      std::vector<double> d;
      for (double v : x) d.push_back(s4 > 1 ? 8 * std::pow(v, 7) : 12 * std::pow(v, 3));
      return d;
    };

    FuncGraph* df = autodiff::grad(f);
    std::printf("grad(f):\n%s\n", print_with_callees(m, df).c_str());
    for (const auto& x : inputs) {
      check("grad(f)", runtime::interpret(*df, {vec(x)}).as_tensor().to_doubles(), f_grad(x));
    }

    // The top graphs only from here on (the graphs they call are named by @name).
    FuncGraph* vdf = autodiff::grad(f, {.return_value = true});
    std::printf("value_and_grad(f):\n%s\n", ir::print_graph(*vdf).c_str());
    for (const auto& x : inputs) {
      const Value out = runtime::interpret(*vdf, {vec(x)});
      check("value_and_grad(f): value", out.elements()[0].as_tensor().to_doubles(), {f_value(x)});
      check("value_and_grad(f): grad", out.elements()[1].as_tensor().to_doubles(), f_grad(x));
    }

    // grad(h) returns h'(x) elementwise; grad of it (its output summed, as ones_like sens does)
    // is h''(x): 6x when Σx > 0, else 2.
    FuncGraph* dh = autodiff::grad(h);
    FuncGraph* d2h = autodiff::grad(dh);
    std::printf("grad(grad(h)):\n%s\n", ir::print_graph(*d2h).c_str());
    for (const auto& x : std::vector<std::vector<double>>{{0.5, -1.2, 0.9}, {-0.5, 0.25, -1.0}}) {
      std::vector<double> want;
      for (double v : x) want.push_back(x[0] + x[1] + x[2] > 0 ? 6 * v : 2.0);
      check("grad(grad(h))", runtime::interpret(*d2h, {vec(x)}).as_tensor().to_doubles(), want);
    }

    std::printf("%s\n", failures == 0 ? "all gradients match the analytic derivatives"
                                      : "some gradients do not match");
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
