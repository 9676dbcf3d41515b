// optim/update.h under the graph emitter: each rule traced into a graph, run by the reference
// interpreter, and compared with the same rule run eagerly (bitwise: same kernels, same order).
#include <gtest/gtest.h>

#include "backends/eager.h"
#include "core/trace/graph_emitter.h"
#include "core/ir/anf.h"
#include "runtime/interpreter.h"
#include "optim/update.h"

namespace loom::optim {
namespace {

using ir::Value;

Value f64(const std::vector<double>& v) {
  return Value::tensor(
      Tensor::from_doubles(DType::kFloat64, {static_cast<std::int64_t>(v.size())}, v));
}

// Builds a graph with four (3,)-tensor parameters (param, slot1, slot2, grad), emits `rule` on
// them (lr 0.1), and returns the interpreted outputs next to the eager ones.
template <typename Rule>
void expect_traced_equals_eager(Rule rule) {
  const std::vector<Value> args = {f64({1.0, 2.0, -1.5}), f64({0.1, -0.2, 0.3}),
                                   f64({0.01, 0.02, 0.03}), f64({0.5, 3.0, -1.75})};
  ir::Module m;
  ir::FuncGraph* g = m.add_graph("step");
  std::vector<Var> in;
  for (const char* name : {"param", "s1", "s2", "grad"}) {
    in.emplace_back(g->add_parameter(name, ir::Abstract::tensor(DType::kFloat64, {3})));
  }
  trace::GraphEmitter ge(g);
  std::vector<Var> traced = rule(ge, in);
  g->set_output(ge.node_of(ge.make_tuple(traced)));
  const Value out = runtime::interpret(*g, args);

  backend::EagerEmitter ee;
  std::vector<Var> eager_in;
  for (const Value& a : args) eager_in.emplace_back(a);
  std::vector<Var> eager = rule(ee, eager_in);
  ASSERT_EQ(out.elements().size(), eager.size());
  for (std::size_t i = 0; i < eager.size(); ++i) {
    EXPECT_EQ(out.elements()[i].as_tensor().to_doubles(),
              eager[i].value().as_tensor().to_doubles())
        << "output " << i;
  }
}

TEST(TracedUpdateTest, MatchesEager) {
  expect_traced_equals_eager([](ops::Emitter& e, const std::vector<Var>& a) {
    auto [p, acc] = momentum_update(e, a[0], a[1], a[3], e.scalar_like(a[0], 0.1), 0.9, true, 0.01);
    return std::vector<Var>{p, acc};
  });
  expect_traced_equals_eager([](ops::Emitter& e, const std::vector<Var>& a) {
    auto [p, acc] = sgd_update(e, a[0], a[1], a[3], e.scalar_like(a[0], 0.1), 0.9, 0.3, false,
                               0.01, false);
    return std::vector<Var>{p, acc};
  });
  expect_traced_equals_eager([](ops::Emitter& e, const std::vector<Var>& a) {
    AdamResult r = adamw_update(e, a[0], a[1], a[2], a[3], e.scalar_like(a[0], 0.1), 0.9, 0.999,
                                1e-8, 3, 0.01);
    return std::vector<Var>{r.param, r.m, r.v};
  });
  expect_traced_equals_eager([](ops::Emitter& e, const std::vector<Var>& a) {
    return clip_by_global_norm(e, {a[0], a[3]}, 1.0);
  });
}

}  // namespace
}  // namespace loom::optim
