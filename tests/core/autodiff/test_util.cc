#include "tests/core/autodiff/test_util.h"

#include <cmath>
#include <string>
#include <unordered_set>

#include "core/ir/control_flow.h"
#include "core/ir/error.h"
#include "runtime/interpreter.h"
#include "ops/op.h"

namespace loom::autodiff::testing {

using ir::Abstract;
using ir::AbstractPtr;
using ir::CNode;
using ir::FuncGraph;
using ir::Node;
using ir::Value;

Node* call(FuncGraph* g, const char* op, std::vector<Node*> args, ir::Primitive::Attrs attrs) {
  return g->add_call(ops::make_op(op, std::move(attrs)), args);
}
Value f64(const std::vector<double>& v, Shape shape) {
  return Value::tensor(Tensor::from_doubles(DType::kFloat64, std::move(shape), v));
}
Value scalar(double v) { return Value::tensor(Tensor::scalar(DType::kFloat64, v)); }
Value boolean(bool v) { return Value::tensor(Tensor::scalar(DType::kBool, v ? 1 : 0)); }
AbstractPtr f64_abs(Shape shape) { return Abstract::tensor(DType::kFloat64, std::move(shape)); }
std::vector<double> values(const Value& v) { return v.as_tensor().to_doubles(); }

namespace {

void annotate_graph(FuncGraph* g, std::unordered_set<FuncGraph*>& active);

void enter(FuncGraph* h, const std::vector<Node*>& args, std::unordered_set<FuncGraph*>& active) {
  for (std::size_t i = 0; i < h->parameters().size() && i < args.size(); ++i) {
    if (!h->parameter(i)->abstract()) h->parameter(i)->set_abstract(args[i]->abstract());
  }
  if (!active.count(h)) annotate_graph(h, active);
}

AbstractPtr output_of(const FuncGraph* h) { return h->output() ? h->output()->abstract() : nullptr; }

void annotate_graph(FuncGraph* g, std::unordered_set<FuncGraph*>& active) {
  active.insert(g);
  for (CNode* c : g->topo_order()) {
    if (c->abstract()) continue;
    std::vector<Node*> args(c->inputs().begin() + 1, c->inputs().end());
    if (FuncGraph* h = c->called_graph()) {
      enter(h, args, active);
      c->set_abstract(output_of(h));
    } else if (c->is_call_to(ir::kIfPrim)) {
      FuncGraph* t = static_cast<ir::ValueNode*>(c->arg(1))->value().as_graph();
      FuncGraph* e = static_cast<ir::ValueNode*>(c->arg(2))->value().as_graph();
      std::vector<Node*> data(args.begin() + 3, args.end());
      enter(t, data, active);
      enter(e, data, active);
      c->set_abstract(output_of(t) ? output_of(t) : output_of(e));
    } else if (c->is_call_to(ir::kWhilePrim)) {
      FuncGraph* cond = static_cast<ir::ValueNode*>(c->arg(0))->value().as_graph();
      FuncGraph* body = static_cast<ir::ValueNode*>(c->arg(1))->value().as_graph();
      std::vector<Node*> data(args.begin() + 2, args.end());
      enter(cond, data, active);
      enter(body, data, active);
      std::vector<AbstractPtr> abs;
      for (Node* n : data) abs.push_back(n->abstract());
      c->set_abstract(Abstract::tuple(abs));
    } else {
      std::vector<AbstractPtr> abs;
      for (Node* n : args) abs.push_back(n->abstract());
      c->set_abstract(ops::infer(*c->primitive(), abs));
    }
    if (!c->abstract()) {
      throw InternalError("annotate: no abstract for a node of @" + g->name() +
                          " (set a recursive call's abstract by hand)");
    }
  }
}

}  // namespace

void annotate(FuncGraph* g) {
  std::unordered_set<FuncGraph*> active;
  annotate_graph(g, active);
}

std::vector<double> numeric_grad(const FuncGraph& f, std::vector<Value> args, std::size_t which,
                                 double h) {
  const Tensor base = args[which].as_tensor();
  std::vector<double> x = base.to_doubles();
  std::vector<double> g(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    auto at = [&](double xi) {
      std::vector<double> y = x;
      y[i] = xi;
      args[which] = Value::tensor(Tensor::from_doubles(base.dtype(), base.shape(), y));
      return runtime::interpret(f, args).as_tensor().get(0);
    };
    g[i] = (at(x[i] + h) - at(x[i] - h)) / (2 * h);
  }
  return g;
}

double rel_error(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-12);
}

}  // namespace loom::autodiff::testing

namespace loom::autodiff::testing {

namespace {
std::vector<double> pattern(std::size_t n, double scale, double shift) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = scale * std::sin(1.7 * static_cast<double>(i) + shift);
  return v;
}
}  // namespace

std::vector<Value> mlp_args(DType dtype) {
  auto t = [&](Shape s, double scale, double shift) {
    std::size_t n = 1;
    for (auto d : s) n *= static_cast<std::size_t>(d);
    return Value::tensor(Tensor::from_doubles(dtype, s, pattern(n, scale, shift)));
  };
  return {t({4, 3}, 1.0, 0.1), t({4, 2}, 0.8, 0.7), t({3, 5}, 0.6, 1.3), t({5}, 0.2, 2.1),
          t({5, 2}, 0.7, 0.4)};
}

FuncGraph* build_mlp(ir::Module& m, DType dtype) {
  FuncGraph* f = m.add_graph("mlp");
  std::vector<Value> a = mlp_args(dtype);
  Node* x = f->add_parameter("x", Abstract::of_value(a[0]));
  Node* y = f->add_parameter("y", Abstract::of_value(a[1]));
  std::vector<Node*> w;
  const char* names[] = {"W1", "b1", "W2"};
  for (int i = 0; i < 3; ++i) {
    ir::Parameter* p = f->add_parameter(names[i], Abstract::of_value(a[2 + i]));
    p->set_default(a[2 + i].as_tensor());
    w.push_back(p);
  }
  Node* h = call(f, "Tanh", {call(f, "BiasAdd", {call(f, "MatMul", {x, w[0]}), w[1]})});
  Node* err = call(f, "Sub", {call(f, "MatMul", {h, w[2]}), y});
  f->set_output(call(f, "ReduceMean", {call(f, "Square", {err})}));
  m.set_entry(f);
  annotate(f);
  return f;
}

FuncGraph* sum_of(FuncGraph* g, const std::string& name, bool with_vector) {
  FuncGraph* s = g->module()->add_graph(name);
  std::vector<Node*> params;
  for (ir::Parameter* p : g->parameters()) {
    ir::Parameter* q = s->add_parameter(p->name(), p->abstract());
    if (p->has_default()) q->set_default(*p->default_value());
    params.push_back(q);
  }
  Node* y = s->add_call(g, params);
  y->set_abstract(g->output()->abstract());
  if (with_vector) y = call(s, "Mul", {y, s->add_parameter("v", g->output()->abstract())});
  s->set_output(call(s, "ReduceSum", {y}));
  annotate(s);
  return s;
}

ir::FuncGraph* build_cond_net(ir::Module& m) {
  using ir::FuncGraph;
  using ir::Node;
  FuncGraph* f = m.add_graph("f");
  Node* x = f->add_parameter("x", f64_abs({3}));
  ir::Parameter* w = f->add_parameter("w", f64_abs({3}));
  w->set_default(Tensor::from_doubles(DType::kFloat64, {3}, {0.4, -1.5, 0.9}));
  Node* tw = call(f, "Tanh", {w});
  Node* pred = call(f, "Greater", {call(f, "ReduceSum", {x}), f->add_value(scalar(0))});
  Node* y = ir::cond(f, pred, {x},
      [&](FuncGraph* b, const std::vector<Node*>& p) { return call(b, "Mul", {p[0], tw}); },
      [&](FuncGraph* b, const std::vector<Node*>& p) { return call(b, "Neg", {p[0]}); });
  f->set_output(call(f, "ReduceSum", {call(f, "Mul", {y, y})}));
  m.set_entry(f);
  annotate(f);
  return f;
}

ir::FuncGraph* build_loop_net(ir::Module& m) {
  using ir::FuncGraph;
  using ir::Node;
  FuncGraph* f = m.add_graph("f");
  Node* x = f->add_parameter("x", f64_abs({3, 1}));
  Node* w = f->add_parameter("W", f64_abs({3, 3}));
  Node* bound = f->add_value(scalar(0.05));
  Node* limit = f->add_value(scalar(20));
  Node* loop = ir::while_loop(f, {x, f->add_value(scalar(0))},
      [&](FuncGraph* c, const std::vector<Node*>& s) {
        Node* big = call(c, "Greater", {call(c, "ReduceSum", {call(c, "Mul", {s[0], s[0]})}), bound});
        Node* few = call(c, "Less", {s[1], limit});
        auto as_f = [&](Node* b) {
          return call(c, "Cast", {b}, {{"dst_type", ir::Value::dtype(DType::kFloat64)}});
        };
        return call(c, "Greater", {call(c, "Mul", {as_f(big), as_f(few)}), c->add_value(scalar(0.5))});
      },
      [&](FuncGraph* b, const std::vector<Node*>& s) {
        return std::vector<Node*>{call(b, "Tanh", {call(b, "MatMul", {w, s[0]})}),
                                  call(b, "Add", {s[1], b->add_value(scalar(1))})};
      });
  Node* xf = f->add_call(ops::make_op("TupleGetItem"), {loop, f->add_value(ir::Value::i64(0))});
  Node* c = f->add_value(f64({1, -2, 0.5}, {3, 1}));
  f->set_output(call(f, "ReduceSum", {call(f, "Mul", {xf, c})}));
  m.set_entry(f);
  annotate(f);
  return f;
}


}  // namespace loom::autodiff::testing
