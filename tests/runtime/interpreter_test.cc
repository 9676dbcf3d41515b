// The reference interpreter on graph calls, If, While (data-dependent trip counts), recursion
// and tuples, with graphs built by the API and by cond / while_loop (lambda-lifted captures).
#include <gtest/gtest.h>

#include "core/ir/anf.h"
#include "core/ir/control_flow.h"
#include "core/ir/error.h"
#include "core/ir/verify.h"
#include "runtime/interpreter.h"
#include "ops/op.h"

namespace loom::runtime {
namespace {

using ir::FuncGraph;
using ir::Module;
using ir::Node;
using ir::Value;

Value f64(std::vector<double> v, Shape shape) {
  return Value::tensor(Tensor::from_doubles(DType::kFloat64, std::move(shape), v));
}
Value scalar(double v) { return Value::tensor(Tensor::scalar(DType::kFloat64, v)); }
double item(const Value& v) { return v.as_tensor().get(0); }

Node* call(FuncGraph* g, const char* op, std::vector<Node*> args, ir::Primitive::Attrs attrs = {}) {
  return g->add_call(ops::make_op(op, std::move(attrs)), args);
}

TEST(Interpreter, PrimitivesAndWeights) {
  Module m;
  FuncGraph* g = m.add_graph("main");
  Node* x = g->add_parameter("x");
  ir::Parameter* w = g->add_parameter("w");
  w->set_default(Tensor::from_doubles(DType::kFloat64, {2}, {10, 20}));
  g->set_output(call(g, "Add", {call(g, "Mul", {x, x}), w}));
  Value y = interpret(*g, {f64({1, 2}, {2})});
  EXPECT_EQ(y.as_tensor().to_doubles(), (std::vector<double>{11, 24}));
  // An explicit argument overrides the weight's default.
  y = interpret(*g, {f64({1, 2}, {2}), f64({0, 0}, {2})});
  EXPECT_EQ(y.as_tensor().to_doubles(), (std::vector<double>{1, 4}));
}

TEST(Interpreter, MissingArgumentIsAClearError) {
  Module m;
  FuncGraph* g = m.add_graph("main");
  g->set_output(g->add_parameter("x"));
  try {
    interpret(*g, {});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(), "interpret: expected an argument for parameter %x of @main, got none");
  }
}

// fact(n) = n <= 1 ? 1 : n * fact(n - 1), by a recursive graph through If.
TEST(Interpreter, RecursionThroughIf) {
  Module m;
  FuncGraph* fact = m.add_graph("fact");
  Node* n = fact->add_parameter("n");
  Node* one = fact->add_value(scalar(1));
  Node* pred = call(fact, "Greater", {n, one});
  Node* out = ir::cond(fact, pred, {n},
      [&](FuncGraph* b, const std::vector<Node*>& p) {
        Node* rec = b->add_call(fact, {call(b, "Sub", {p[0], b->add_value(scalar(1))})});
        return call(b, "Mul", {p[0], rec});
      },
      [&](FuncGraph* b, const std::vector<Node*>&) { return b->add_value(scalar(1)); });
  fact->set_output(out);
  m.set_entry(fact);
  ir::verify(m);
  EXPECT_EQ(item(interpret(*fact, {scalar(5)})), 120);
  EXPECT_EQ(item(interpret(*fact, {scalar(1)})), 1);
}

TEST(Interpreter, RunawayRecursionIsAnErrorNotACrash) {
  Module m;
  FuncGraph* f = m.add_graph("f");
  f->set_output(f->add_call(f, {f->add_parameter("x")}));
  InterpretOptions options;
  options.max_call_depth = 100;
  EXPECT_THROW(interpret(*f, {scalar(1)}, options), ValueError);
}

// Halve x until it is below 1: a data-dependent trip count; the bound is captured.
TEST(Interpreter, WhileWithDataDependentTripCountAndCapture) {
  Module m;
  FuncGraph* g = m.add_graph("main");
  Node* x = g->add_parameter("x");
  Node* bound = g->add_parameter("bound");
  Node* count0 = g->add_value(scalar(0));
  Node* loop = ir::while_loop(g, {x, count0},
      [&](FuncGraph* c, const std::vector<Node*>& s) { return call(c, "Greater", {s[0], bound}); },
      [&](FuncGraph* b, const std::vector<Node*>& s) {
        return std::vector<Node*>{call(b, "RealDiv", {s[0], b->add_value(scalar(2))}),
                                  call(b, "Add", {s[1], b->add_value(scalar(1))})};
      });
  g->set_output(loop);
  m.set_entry(g);
  ir::verify(m);
  Value out = interpret(*g, {scalar(40), scalar(1)});
  ASSERT_TRUE(out.is_tuple());
  ASSERT_EQ(out.elements().size(), 3u);  // x, count, the captured bound
  EXPECT_EQ(item(out.elements()[0]), 0.625);
  EXPECT_EQ(item(out.elements()[1]), 6);
  EXPECT_EQ(item(out.elements()[2]), 1);
  EXPECT_EQ(item(interpret(*g, {scalar(0.5), scalar(1)}).elements()[1]), 0);
}

TEST(Interpreter, CondCapturesFromTheEnclosingGraphBecomeArguments) {
  Module m;
  FuncGraph* g = m.add_graph("main");
  Node* p = g->add_parameter("p");
  Node* x = g->add_parameter("x");
  Node* w = g->add_parameter("w");
  Node* y = ir::cond(g, p, {x},
      [&](FuncGraph* b, const std::vector<Node*>& a) { return call(b, "Mul", {a[0], w}); },
      [&](FuncGraph* b, const std::vector<Node*>& a) { return call(b, "Neg", {a[0]}); });
  g->set_output(y);
  m.set_entry(g);
  ir::verify(m);
  auto* c = static_cast<ir::CNode*>(y);
  EXPECT_EQ(c->num_args(), 5u);  // pred, @then, @else, x, w
  EXPECT_EQ(c->arg(4), w);
  Value t = Value::tensor(Tensor::scalar(DType::kBool, 1));
  Value f = Value::tensor(Tensor::scalar(DType::kBool, 0));
  EXPECT_EQ(item(interpret(*g, {t, scalar(3), scalar(4)})), 12);
  EXPECT_EQ(item(interpret(*g, {f, scalar(3), scalar(4)})), -3);
}

TEST(Interpreter, TuplesAndNodeHook) {
  Module m;
  FuncGraph* g = m.add_graph("main");
  Node* x = g->add_parameter("x");
  Node* t = call(g, "MakeTuple", {x, call(g, "Neg", {x})});
  g->set_output(g->add_call(ops::make_op("TupleGetItem"), {t, g->add_value(Value::i64(1))}));
  int seen = 0;
  InterpretOptions options;
  options.on_node = [&](const ir::CNode&, const Value&) { ++seen; };
  EXPECT_EQ(item(interpret(*g, {scalar(2)}, options)), -2);
  EXPECT_EQ(seen, 3);
}

TEST(Interpreter, KernelErrorsCarryTheNodeScope) {
  Module m;
  FuncGraph* g = m.add_graph("main");
  Node* x = g->add_parameter("x");
  Node* y = g->add_parameter("y");
  g->set_output(g->add_call(ops::make_op("Add"), {x, y}, {"Net/add", "net.cc", 3}));
  try {
    interpret(*g, {f64({1, 2}, {2}), f64({1, 2, 3}, {3})});
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("(in Net/add at net.cc:3)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace loom::runtime
