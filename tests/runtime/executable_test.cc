// The compiled runtime against the interpreter (bitwise), its memory plan, in-place writes,
// donation, the compile cache, hooks, control flow as nested plans (If, While, their gradients)
// and the interpreter fallback for graph calls.
#include <gtest/gtest.h>

#include <cstring>
#include <iostream>
#include <limits>
#include <random>
#include <set>
#include <tuple>

#include "backends/eager.h"
#include "backends/kernel.h"
#include "backends/thread_pool.h"
#include "core/autodiff/grad.h"
#include "core/ir/anf.h"
#include "core/ir/control_flow.h"
#include "core/ir/error.h"
#include "core/passes/pass.h"
#include "runtime/compiled_function.h"
#include "runtime/executable.h"
#include "runtime/interpreter.h"
#include "ops/op.h"
#include "tests/core/autodiff/test_util.h"

namespace loom::runtime {
namespace {

using ir::Abstract;
using ir::FuncGraph;
using ir::Module;
using ir::Node;
using ir::Value;

Node* call(FuncGraph* g, const char* op, std::vector<Node*> args, ir::Primitive::Attrs attrs = {}) {
  return g->add_call(ops::make_op(op, std::move(attrs)), args);
}

Tensor random_tensor(DType dtype, const Shape& shape, std::mt19937& rng, double lo = -1, double hi = 1) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  for (double& x : v) x = d(rng);
  return Tensor::from_doubles(dtype, shape, v);
}

// Bitwise equality of two values of the same structure.
::testing::AssertionResult same(const Value& a, const Value& b) {
  if (a.is_tensor() && b.is_tensor()) {
    if (a.as_tensor().bitwise_equal(b.as_tensor())) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << a.as_tensor().describe() << " differs from "
                                         << b.as_tensor().describe();
  }
  if (a.is_tuple() && b.is_tuple() && a.elements().size() == b.elements().size()) {
    for (std::size_t i = 0; i < a.elements().size(); ++i) {
      auto r = same(a.elements()[i], b.elements()[i]);
      if (!r) return r << " at element " << i;
    }
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "different kinds";
}

std::vector<BufferLife> random_lives(std::mt19937& rng, int n) {
  std::vector<BufferLife> lives;
  for (int i = 0; i < n; ++i) {
    std::int64_t a = rng() % 50, b = a + rng() % 10;
    lives.push_back({static_cast<std::size_t>(1 + rng() % 5000), a, b});
  }
  return lives;
}

TEST(MemoryPlan, PlansAreDisjointAndTheCheckerCatchesOverlap) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    auto lives = random_lives(rng, 60);
    for (PlanStrategy s : {PlanStrategy::kBestFit, PlanStrategy::kFirstFitDecreasing}) {
      MemoryPlan plan = plan_memory(lives, s);
      EXPECT_NO_THROW(check_plan(lives, plan));
      EXPECT_LE(plan.peak_bytes, plan.sum_bytes);
    }
  }
  std::vector<BufferLife> lives = {{100, 0, 3}, {100, 2, 5}};
  MemoryPlan bad;
  bad.offsets = {0, 64};
  bad.peak_bytes = 256;
  EXPECT_THROW(check_plan(lives, bad), InternalError);
  // Disjoint lifetimes may share bytes.
  lives = {{100, 0, 1}, {100, 2, 5}};
  MemoryPlan plan = plan_memory(lives);
  EXPECT_EQ(plan.peak_bytes, 128u);
  EXPECT_EQ(plan.sum_bytes, 256u);
}

TEST(Executable, StructuralOpsConstantsAndWeights) {
  Module m;
  FuncGraph* g = m.add_graph("main");
  Node* x = g->add_parameter("x", Abstract::tensor(DType::kFloat32, {2, 3}));
  ir::Parameter* w = g->add_parameter("w", Abstract::tensor(DType::kFloat32, {2, 3}));
  w->set_default(Tensor::from_doubles(DType::kFloat32, {2, 3}, {1, 2, 3, 4, 5, 6}));
  Node* c = g->add_value(Value::tensor(Tensor::from_doubles(DType::kFloat32, {3}, {1, -1, 2})));
  Node* a = call(g, "Mul", {call(g, "Add", {x, w}), c});
  Node* t = call(g, "MakeTuple", {a, call(g, "ReLU", {a}), x});
  Node* r = call(g, "Depend", {call(g, "TupleGetItem", {t, g->add_value(Value::i64(1))}), a});
  g->set_output(call(g, "MakeTuple", {call(g, "StopGradient", {r}),
                                      call(g, "TupleGetItem", {t, g->add_value(Value::i64(-1))})}));
  auto exe = compile(*g);
  EXPECT_FALSE(exe->interpreted());
  EXPECT_EQ(exe->launches().size(), 3u);  // Add, Mul, ReLU: no launch for structural ops
  std::mt19937 rng(1);
  Value xv = Value::tensor(random_tensor(DType::kFloat32, {2, 3}, rng));
  EXPECT_TRUE(same(exe->run({xv}), interpret(*g, {xv})));
  EXPECT_TRUE(same(exe->run({xv}), interpret(*g, {xv})));  // a second run reuses buffers
  // The parameter passed through is the caller's tensor.
  EXPECT_TRUE(exe->run({xv}).elements()[1].as_tensor().shares_storage_with(xv.as_tensor()));
  EXPECT_THROW(exe->run({Value::tensor(Tensor(DType::kFloat32, {3, 2}))}), ValueError);
}

// Depend(value, x) is an ordering edge in the compiled plan: the launch reading the Depend runs
// after x's producer even where the memory-aware scheduler would run it first. Without the
// Depend, Exp(small) allocates least and runs first; with Depend(small, Neg(Neg(big))) it runs
// after both Negs (and after the last Neg, which frees as much as it allocates). The results are
// the interpreter's either way.
TEST(Executable, DependOrdersTheLaunchThatReadsIt) {
  for (bool ordered : {false, true}) {
    SCOPED_TRACE(ordered ? "with Depend" : "without Depend");
    Module m;
    FuncGraph* g = m.add_graph("main");
    Node* small = g->add_parameter("small", Abstract::tensor(DType::kFloat32, {4}));
    Node* big = g->add_parameter("big", Abstract::tensor(DType::kFloat32, {1000}));
    Node* n2 = call(g, "Neg", {call(g, "Neg", {big})});
    Node* e = call(g, "Exp", {ordered ? call(g, "Depend", {small, n2}) : small});
    g->set_output(call(g, "MakeTuple", {e, call(g, "Neg", {n2})}));
    auto exe = compile(*g);
    std::vector<std::string> order;
    for (const auto& l : exe->launches()) order.push_back(l.prim->name());
    const std::vector<std::string> expected =
        ordered ? std::vector<std::string>{"Neg", "Neg", "Neg", "Exp"}
                : std::vector<std::string>{"Exp", "Neg", "Neg", "Neg"};
    EXPECT_EQ(order, expected);
    std::mt19937 rng(3);
    const std::vector<Value> args{Value::tensor(random_tensor(DType::kFloat32, {4}, rng)),
                                  Value::tensor(random_tensor(DType::kFloat32, {1000}, rng))};
    EXPECT_TRUE(same(exe->run(args), interpret(*g, args)));
  }
}

// Plans given one SharedArena (a Model's training step and evaluation) take their memory from it:
// the larger plan's arena serves both, whichever ran first; a result that fills its arena is
// copied out rather than handed over with the shared memory.
TEST(Executable, PlansGivenASharedArenaUseOneMemory) {
  Module m;
  auto chain = [&](const std::string& name, std::int64_t n, bool big_output) {
    FuncGraph* g = m.add_graph(name);
    Node* x = g->add_parameter("x", Abstract::tensor(DType::kFloat32, {n}));
    Node* a = call(g, "Exp", {x});
    Node* c = call(g, "Mul", {a, call(g, "Add", {a, x})});
    g->set_output(big_output ? c : call(g, "ReduceMean", {c}));
    return g;
  };
  FuncGraph* big = chain("big", 4096, false);
  FuncGraph* small = chain("small", 64, false);
  FuncGraph* handed = chain("handed", 1024, true);
  std::mt19937 rng(3);
  const Value xb = Value::tensor(random_tensor(DType::kFloat32, {4096}, rng));
  const Value xs = Value::tensor(random_tensor(DType::kFloat32, {64}, rng));
  const Value xh = Value::tensor(random_tensor(DType::kFloat32, {1024}, rng));
  for (bool big_first : {true, false}) {
    CompileOptions o;
    o.shared_arena = std::make_shared<SharedArena>();
    auto eb = compile(*big, backend::cpu_backend(), o);
    auto es = compile(*small, backend::cpu_backend(), o);
    EXPECT_GT(eb->peak_bytes(), es->peak_bytes());
    if (big_first) {
      EXPECT_TRUE(same(eb->run({xb}), interpret(*big, {xb})));
      const Storage* memory = o.shared_arena->storage.get();
      EXPECT_TRUE(same(es->run({xs}), interpret(*small, {xs})));
      EXPECT_EQ(o.shared_arena->storage.get(), memory);  // the small plan took the big arena
    } else {
      EXPECT_TRUE(same(es->run({xs}), interpret(*small, {xs})));
      EXPECT_TRUE(same(eb->run({xb}), interpret(*big, {xb})));  // a larger arena replaced it
    }
    EXPECT_GE(o.shared_arena->storage->nbytes(), eb->peak_bytes());
    for (int i = 0; i < 2; ++i) {
      EXPECT_TRUE(same(eb->run({xb}), interpret(*big, {xb})));
      EXPECT_TRUE(same(es->run({xs}), interpret(*small, {xs})));
    }
    // A result that fills its arena is copied out of a shared one (a plan of its own hands its
    // arena over instead), so the other plans' runs cannot overwrite it.
    const Storage* memory = o.shared_arena->storage.get();
    auto eh = compile(*handed, backend::cpu_backend(), o);
    const Value out = eh->run({xh});
    EXPECT_EQ(o.shared_arena->storage.get(), memory);
    EXPECT_FALSE(out.as_tensor().shares_storage_with(Tensor::view(
        o.shared_arena->storage, 0, DType::kFloat32, {1})));
    const Value want = interpret(*handed, {xh});
    EXPECT_TRUE(same(eb->run({xb}), interpret(*big, {xb})));
    EXPECT_TRUE(same(out, want));  // not overwritten by the big plan's run
  }
}

TEST(Executable, ElementwiseChainRunsInPlace) {
  Module m;
  FuncGraph* g = m.add_graph("main");
  Node* x = g->add_parameter("x", Abstract::tensor(DType::kFloat32, {64}));
  Node* h = call(g, "Exp", {x});
  for (int i = 0; i < 10; ++i) h = call(g, i % 2 ? "Tanh" : "ReLU", {call(g, "Add", {h, x})});
  g->set_output(h);
  auto exe = compile(*g);
  // Every op after the first writes into its dying input: one buffer for the whole chain.
  EXPECT_EQ(exe->num_in_place(), 20u);
  EXPECT_EQ(exe->peak_bytes(), 256u);
  std::mt19937 rng(2);
  Value xv = Value::tensor(random_tensor(DType::kFloat32, {64}, rng));
  EXPECT_TRUE(same(exe->run({xv}), interpret(*g, {xv})));
  CompileOptions no_in_place;
  no_in_place.in_place = false;
  auto plain = compile(*g, backend::cpu_backend(), no_in_place);
  EXPECT_EQ(plain->num_in_place(), 0u);
  EXPECT_TRUE(same(plain->run({xv}), interpret(*g, {xv})));
}

// The in-place rewrite relies on every kernel declared elementwise (KernelDef::elementwise)
// tolerating an output that is one of its same-shaped inputs: check each with a Float32 kernel.
TEST(Executable, ElementwiseKernelsTolerateInOutAliasing) {
  std::mt19937 rng(3);
  int checked = 0;
  for (const ops::OpDef* def : ops::Registry::global().all()) {
    const backend::KernelDef* k = backend::cpu_backend().find_kernel(def->name, DType::kFloat32);
    if (!k || !k->elementwise_in_place || def->num_inputs < 1 || def->num_inputs > 3) continue;
    ir::PrimitivePtr prim;
    try {
      prim = ops::make_op(def->name);
    } catch (const Error&) {
      continue;  // required attributes
    }
    std::vector<Value> args;
    for (int i = 0; i < def->num_inputs; ++i) {
      args.push_back(Value::tensor(random_tensor(DType::kFloat32, {3, 70}, rng, 0.1, 2)));
    }
    Value want;
    try {
      want = backend::run_op(*prim, args);
    } catch (const Error&) {
      continue;  // needs other dtypes
    }
    if (!want.is_tensor() || want.as_tensor().dtype() != DType::kFloat32) continue;
    for (int j = 0; j < def->num_inputs; ++j) {
      std::vector<Tensor> ins;
      for (const Value& a : args) ins.push_back(a.as_tensor().clone());
      std::vector<Tensor> outs = {ins[static_cast<std::size_t>(j)]};
      backend::run_kernel(*k, *prim, ins, outs, backend::cpu_backend());
      EXPECT_TRUE(outs[0].bitwise_equal(want.as_tensor())) << def->name << " aliasing input " << j;
    }
    ++checked;
  }
  EXPECT_GT(checked, 10);
}

// Exp and Log decide their out-of-range fallback from x before writing y, so they run in place
// too (an earlier version read x after overwriting it).
TEST(Executable, ExpAndLogRunInPlace) {
  Module m;
  FuncGraph* g = m.add_graph("main");
  Node* x = g->add_parameter("x", Abstract::tensor(DType::kFloat32, {3, 70}));
  g->set_output(call(g, "Log", {call(g, "Exp", {x})}));
  auto exe = compile(*g);
  EXPECT_EQ(exe->num_in_place(), 1u);
  std::mt19937 rng(9);
  Value xv = Value::tensor(random_tensor(DType::kFloat32, {3, 70}, rng));
  EXPECT_TRUE(same(exe->run({xv}), interpret(*g, {xv})));
}

// ---- Gradient graphs of tests/core/autodiff, flattened -----------------------------------

TEST(Executable, MlpGradientEqualsInterpreter) {
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    Module m;
    FuncGraph* loss = autodiff::testing::build_mlp(m, dt);
    FuncGraph* g = autodiff::grad(loss, {.get_all = true, .get_by_list = true, .return_value = true});
    m.set_entry(g);
    passes::PassManager::parse("inline,simplify,dce").run(m);
    std::vector<Value> args = autodiff::testing::mlp_args(dt);
    auto exe = compile(*m.entry());
    ASSERT_FALSE(exe->interpreted());
    Value want = interpret(*m.entry(), args);
    EXPECT_TRUE(same(exe->run(args), want));
    EXPECT_TRUE(same(exe->run(args), want));
    // Forward only, with the weights' defaults.
    auto fwd = compile(*loss);
    EXPECT_TRUE(same(fwd->run({args[0], args[1]}), interpret(*loss, {args[0], args[1]})));
  }
}

TEST(Executable, ChainGradientEqualsInterpreter) {
  // The grad_test chain: ten ops, gradient of every input.
  Module m;
  FuncGraph* f = m.add_graph("chain");
  Node* x = f->add_parameter("x", Abstract::tensor(DType::kFloat64, {3, 4}));
  Node* y = f->add_parameter("y", Abstract::tensor(DType::kFloat64, {4}));
  Node* h = call(f, "Mul", {x, y});
  h = call(f, "Tanh", {h});
  h = call(f, "Sub", {h, call(f, "Square", {y})});
  h = call(f, "Sigmoid", {h});
  h = call(f, "MatMul", {h, call(f, "Transpose", {call(f, "Reshape", {call(f, "Exp", {x})},
                                                        {{"shape", Value::ints({3, 4})}})},
                                  {{"perm", Value::ints({1, 0})}})});
  h = call(f, "Softmax", {h});
  f->set_output(call(f, "ReduceSum", {call(f, "Mul", {h, h})}));
  m.set_entry(f);
  FuncGraph* g = autodiff::grad(f, {.get_all = true});
  m.set_entry(g);
  passes::PassManager::parse("inline,simplify,dce").run(m);
  std::mt19937 rng(4);
  std::vector<Value> args = {Value::tensor(random_tensor(DType::kFloat64, {3, 4}, rng)),
                             Value::tensor(random_tensor(DType::kFloat64, {4}, rng))};
  auto exe = compile(*m.entry());
  ASSERT_FALSE(exe->interpreted());
  EXPECT_TRUE(same(exe->run(args), interpret(*m.entry(), args)));
}

// ---- Random graphs -----------------------------------------------------------------------

struct RandomGraph {
  Module m;
  FuncGraph* g = nullptr;
  std::vector<Value> args;
};

Shape random_shape(std::mt19937& rng) {
  Shape s(1 + rng() % 3);
  for (auto& d : s) d = 1 + static_cast<std::int64_t>(rng() % 5);
  return s;
}

void build_random(RandomGraph& r, std::mt19937& rng) {
  FuncGraph* g = r.g = r.m.add_graph("random");
  struct Item {
    Node* node;
    Shape shape;
  };
  std::vector<Item> pool;
  auto add_param = [&](const Shape& s) {
    Node* p = g->add_parameter("p" + std::to_string(r.args.size()), Abstract::tensor(DType::kFloat32, s));
    r.args.push_back(Value::tensor(random_tensor(DType::kFloat32, s, rng)));
    pool.push_back({p, s});
    return pool.back();
  };
  auto fresh = [&](const Shape& s) -> Item {
    if (rng() % 2) return add_param(s);
    return {g->add_value(Value::tensor(random_tensor(DType::kFloat32, s, rng))), s};
  };
  const int nparams = 1 + static_cast<int>(rng() % 3);
  for (int i = 0; i < nparams; ++i) add_param(random_shape(rng));
  const int nops = 3 + static_cast<int>(rng() % 14);
  static const char* unary[] = {"ReLU", "Tanh", "Sigmoid", "Square", "Neg", "Exp"};
  static const char* binary[] = {"Add", "Sub", "Mul"};
  for (int i = 0; i < nops; ++i) {
    const Item a = pool[rng() % pool.size()];
    const std::int64_t rank = static_cast<std::int64_t>(a.shape.size());
    switch (rng() % 9) {
      case 0:
      case 1: {
        const char* op = unary[rng() % 6];
        if (!ops::Registry::global().find(op)) op = "ReLU";
        pool.push_back({call(g, op, {a.node}), a.shape});
        break;
      }
      case 2:
      case 3: {  // same shape, or a broadcast row
        Item b = a;
        std::vector<Item> same_shape;
        for (const Item& it : pool) if (it.shape == a.shape) same_shape.push_back(it);
        if (rng() % 3 == 0) {
          b = fresh({a.shape.back()});
        } else if (!same_shape.empty()) {
          b = same_shape[rng() % same_shape.size()];
        }
        Node* n = rng() % 2 ? call(g, binary[rng() % 3], {a.node, b.node})
                            : call(g, binary[rng() % 3], {b.node, a.node});
        pool.push_back({n, a.shape});
        break;
      }
      case 4: {  // MatMul (m, k) x (k, n)
        if (rank != 2) { pool.push_back({call(g, "Reshape", {a.node}, {{"shape", Value::ints({-1, a.shape.back()})}}), {shape_numel(a.shape) / a.shape.back(), a.shape.back()}}); break; }
        const std::int64_t n = 1 + static_cast<std::int64_t>(rng() % 5);
        Item b = fresh({a.shape[1], n});
        pool.push_back({call(g, "MatMul", {a.node, b.node}), {a.shape[0], n}});
        break;
      }
      case 5: {
        Shape s = a.shape;
        std::reverse(s.begin(), s.end());
        pool.push_back({call(g, "Reshape", {a.node}, {{"shape", Value::ints(s)}}), s});
        break;
      }
      case 6: {
        std::vector<std::int64_t> perm(static_cast<std::size_t>(rank));
        for (std::int64_t i2 = 0; i2 < rank; ++i2) perm[static_cast<std::size_t>(i2)] = rank - 1 - i2;
        Shape s(a.shape.rbegin(), a.shape.rend());
        pool.push_back({call(g, "Transpose", {a.node}, {{"perm", Value::ints(perm)}}), s});
        break;
      }
      case 7: {
        const std::int64_t axis = static_cast<std::int64_t>(rng() % static_cast<unsigned>(rank));
        const bool keep = rng() % 2;
        Shape s = a.shape;
        if (keep) s[static_cast<std::size_t>(axis)] = 1; else s.erase(s.begin() + axis);
        if (s.empty()) s = {};
        Node* n = call(g, "ReduceSum", {a.node},
                       {{"axis", Value::ints({axis})}, {"keep_dims", Value::boolean(keep)}});
        if (s.empty()) break;  // keep shapes of rank >= 1 in the pool
        pool.push_back({n, s});
        break;
      }
      default:
        pool.push_back({call(g, "Softmax", {a.node}), a.shape});
    }
  }
  // Output: the last node, or a tuple of a few (a parameter may be among them).
  if (rng() % 3 == 0) {
    g->set_output(pool.back().node);
  } else {
    std::vector<Node*> outs = {pool.back().node};
    for (int i = 0; i < 2; ++i) outs.push_back(pool[rng() % pool.size()].node);
    if (rng() % 4 == 0) outs.push_back(call(g, "StopGradient", {outs[0]}));
    g->set_output(call(g, "MakeTuple", outs));
  }
  r.m.set_entry(g);
}

TEST(Executable, RandomGraphsEqualInterpreter) {
  std::size_t in_place = 0, peak = 0, sum = 0;
  for (unsigned seed = 0; seed < 300; ++seed) {
    std::mt19937 rng(seed);
    RandomGraph r;
    build_random(r, rng);
    Value want = interpret(*r.g, r.args);
    for (bool ip : {true, false}) {
      CompileOptions o;
      o.in_place = ip;
      o.strategy = seed % 2 ? PlanStrategy::kBestFit : PlanStrategy::kFirstFitDecreasing;
      auto exe = compile(*r.g, backend::cpu_backend(), o);
      ASSERT_FALSE(exe->interpreted());
      ASSERT_TRUE(same(exe->run(r.args), want)) << "seed " << seed << " in_place " << ip;
      ASSERT_TRUE(same(exe->run(r.args), want)) << "second run, seed " << seed;
      if (ip) in_place += exe->num_in_place(), peak += exe->peak_bytes(), sum += exe->sum_of_intermediate_bytes();
    }
  }
  EXPECT_GT(in_place, 100u);
  std::cout << "random graphs: " << in_place << " in-place launches, planned peak " << peak
            << " B of " << sum << " B intermediates\n";
}

// ---- A 4-layer CNN's gradient at batch 32 ---------------------------------------------------

FuncGraph* build_cnn(Module& m, std::vector<Value>& args, std::int64_t batch, int conv_layers) {
  std::mt19937 rng(5);
  FuncGraph* f = m.add_graph("cnn");
  auto weight = [&](const char* name, Shape s) {
    ir::Parameter* p = f->add_parameter(name, Abstract::tensor(DType::kFloat32, s));
    p->set_default(random_tensor(DType::kFloat32, s, rng, -0.2, 0.2));
    return p;
  };
  Node* x = f->add_parameter("x", Abstract::tensor(DType::kFloat32, {batch, 1, 28, 28}));
  Node* labels = f->add_parameter("labels", Abstract::tensor(DType::kInt32, {batch}));
  args.push_back(Value::tensor(random_tensor(DType::kFloat32, {batch, 1, 28, 28}, rng)));
  std::vector<double> l(static_cast<std::size_t>(batch));
  for (auto& v : l) v = static_cast<double>(rng() % 10);
  args.push_back(Value::tensor(Tensor::from_doubles(DType::kInt32, {batch}, l)));
  Node* h = x;
  std::int64_t c = 1, hw = 28;
  for (int i = 0; i < conv_layers; ++i) {
    const std::int64_t oc = i < 2 ? 8 * (i + 1) : 16;
    const bool pool = i < 2;
    Node* w = weight(("conv" + std::to_string(i)).c_str(), {oc, c, 3, 3});
    h = call(f, "Conv2D", {h, w}, {{"out_channel", Value::i64(oc)}, {"kernel_size", Value::ints({3, 3})},
                                   {"pad_mode", Value::string(pool ? "valid" : "same")}});
    h = call(f, "ReLU", {h});
    if (pool) {
      h = call(f, "MaxPool", {h}, {{"kernel_size", Value::ints({2, 2})}, {"strides", Value::ints({2, 2})}});
      hw = (hw - 2) / 2;
    }
    c = oc;
  }
  h = call(f, "Flatten", {h});
  h = call(f, "ReLU", {call(f, "MatMul", {h, weight("fc1", {c * hw * hw, 64})})});
  h = call(f, "MatMul", {h, weight("fc2", {64, 10})});
  f->set_output(call(f, "SparseSoftmaxCrossEntropyWithLogits", {h, labels}));
  m.set_entry(f);
  return f;
}

TEST(Executable, CnnGradientPeakIsAtMostHalfTheIntermediates) {
  Module m;
  std::vector<Value> args;
  FuncGraph* f = build_cnn(m, args, 32, 2);
  FuncGraph* g = autodiff::grad(f, {.get_by_list = true, .return_value = true});
  m.set_entry(g);
  passes::PassManager::parse("inline,simplify,dce").run(m);
  std::size_t peaks[3];
  for (PlanStrategy s : {PlanStrategy::kBestFit, PlanStrategy::kFirstFitDecreasing, PlanStrategy::kSmallerOfBoth}) {
    CompileOptions o;
    o.strategy = s;
    auto exe = compile(*m.entry(), backend::cpu_backend(), o);
    ASSERT_FALSE(exe->interpreted());
    check_plan(exe->lives(), exe->plan());
    std::cout << "cnn grad (batch 32, " << exe->launches().size() << " launches, "
              << (s == PlanStrategy::kBestFit ? "best-fit" : s == PlanStrategy::kFirstFitDecreasing ? "first-fit decreasing" : "smaller of both")
              << "): planned peak " << exe->peak_bytes() << " B, sum of intermediates "
 << exe->sum_of_intermediate_bytes() << " B (" << exe->plan().sum_bytes
              << " B in distinct buffers), in-place " << exe->num_in_place() << "\n";
    // The bound holds for the strategy compile uses; either heuristic alone may miss it (best
    // fit plans 0.51 of the intermediates since ReLU's gradient became one ReluGrad).
    if (s == PlanStrategy::kSmallerOfBoth) {
      EXPECT_LE(exe->peak_bytes() * 2, exe->sum_of_intermediate_bytes());
    }
    peaks[static_cast<int>(s)] = exe->peak_bytes();
    EXPECT_TRUE(same(exe->run(args), interpret(*m.entry(), args)));
  }
  EXPECT_EQ(peaks[2], std::min(peaks[0], peaks[1]));
}

// ---- Donation --------------------------------------------------------------------------------

// step(w, accum, x, y) → (loss, w', accum') with a least-squares gradient and ApplyMomentum.
FuncGraph* build_step(Module& m, bool read_w_after_update) {
  FuncGraph* g = m.add_graph("step");
  Node* w = g->add_parameter("w", Abstract::tensor(DType::kFloat32, {4, 3}));
  Node* accum = g->add_parameter("accum", Abstract::tensor(DType::kFloat32, {4, 3}));
  Node* x = g->add_parameter("x", Abstract::tensor(DType::kFloat32, {8, 4}));
  Node* y = g->add_parameter("y", Abstract::tensor(DType::kFloat32, {8, 3}));
  Node* err = call(g, "Sub", {call(g, "MatMul", {x, w}), y});
  Node* loss = call(g, "ReduceMean", {call(g, "Square", {err})});
  Node* grad = call(g, "MatMul", {call(g, "Transpose", {x}, {{"perm", Value::ints({1, 0})}}), err});
  Node* lr = g->add_value(Value::tensor(Tensor::scalar(DType::kFloat32, 0.01)));
  Node* mom = g->add_value(Value::tensor(Tensor::scalar(DType::kFloat32, 0.9)));
  Node* upd = call(g, "ApplyMomentum", {w, accum, lr, grad, mom});
  Node* w2 = call(g, "TupleGetItem", {upd, g->add_value(Value::i64(0))});
  Node* a2 = call(g, "TupleGetItem", {upd, g->add_value(Value::i64(1))});
  if (read_w_after_update) {
    g->set_output(call(g, "MakeTuple", {loss, w2, a2, call(g, "Add", {w, w})}));
  } else {
    g->set_output(call(g, "MakeTuple", {loss, w2, a2}));
  }
  m.set_entry(g);
  return g;
}

TEST(Executable, DonatedWeightsAreUpdatedInPlace) {
  for (bool read_after : {false, true}) {
    Module m;
    FuncGraph* g = build_step(m, read_after);
    CompileOptions o;
    o.donate = {{1, 0}, {2, 1}};
    // The scheduler runs the read of w (Add) before the update, so both donations are in place;
    // in the graph's order, w is read after the update and its donation is a copy.
    EXPECT_EQ(compile(*g, backend::cpu_backend(), o)->donations_in_place(), 2u);
    o.schedule = false;
    auto exe = compile(*g, backend::cpu_backend(), o);
    EXPECT_EQ(exe->donations_in_place(), read_after ? 1u : 2u);
    EXPECT_EQ(exe->donation_copies(), read_after ? 1u : 0u);  // w is read after the update
    std::mt19937 rng(6);
    Tensor w = random_tensor(DType::kFloat32, {4, 3}, rng), accum = random_tensor(DType::kFloat32, {4, 3}, rng);
    Tensor x = random_tensor(DType::kFloat32, {8, 4}, rng), y = random_tensor(DType::kFloat32, {8, 3}, rng);
    for (int step = 0; step < 3; ++step) {
      Value want = interpret(*g, {Value::tensor(w.clone()), Value::tensor(accum.clone()), Value::tensor(x),
                                  Value::tensor(y)});
      const void* w_data = w.raw_data();
      Value got = exe->run({Value::tensor(w), Value::tensor(accum), Value::tensor(x), Value::tensor(y)});
      EXPECT_TRUE(same(got, want)) << "step " << step;
      EXPECT_TRUE(got.elements()[1].as_tensor().shares_storage_with(w));
      EXPECT_TRUE(got.elements()[2].as_tensor().shares_storage_with(accum));
      EXPECT_EQ(w.raw_data(), w_data);
      EXPECT_TRUE(w.bitwise_equal(want.elements()[1].as_tensor()));
    }
  }
}

TEST(Executable, DonationMustMatchShapeAndDtype) {
  Module m;
  FuncGraph* g = build_step(m, false);
  CompileOptions o;
  o.donate = {{0, 0}};  // the rank-0 loss into w (4, 3)
  EXPECT_THROW(compile(*g, backend::cpu_backend(), o), ValueError);
}

// ---- Compile cache, hooks, control flow ------------------------------------------------------

TEST(CompiledFunction, CompilesOncePerSignature) {
  Module m;
  FuncGraph* g = m.add_graph("f");
  Node* x = g->add_parameter("x", Abstract::tensor(DType::kFloat32, {2}));
  g->set_output(call(g, "ReLU", {call(g, "Mul", {x, x})}));
  m.set_entry(g);
  std::unique_ptr<CompiledFunction> f = CompiledFunction::of_graph(g);
  CompiledFunction& fn = *f;
  std::mt19937 rng(8);
  for (Shape s : {Shape{2}, Shape{2}, Shape{3, 4}, Shape{2}, Shape{3, 4}, Shape{5}}) {
    Value xv = Value::tensor(random_tensor(DType::kFloat32, s, rng));
    Value got = fn({xv});
    EXPECT_TRUE(same(got, interpret(*g, {xv})));
  }
  EXPECT_EQ(fn.num_compilations(), 3u);
  fn({Value::tensor(random_tensor(DType::kFloat64, {2}, rng))});
  EXPECT_EQ(fn.num_compilations(), 4u);
}

// Every kernel declaring that it writes every output element (KernelDef::writes_every_output:
// the runtime then does not zero-fill its outputs) must do so: run it on outputs filled with NaN
// bytes and compare with the eager result (zeroed outputs), bitwise. Every op with such a CPU
// kernel needs a case here.
TEST(Executable, KernelsListedAsWritingEveryElementDoSo) {
  std::mt19937 rng(11);
  const Shape s{3, 5};
  auto pos = [&](const Shape& sh) { return random_tensor(DType::kFloat32, sh, rng, 0.25, 2.0); };
  auto any = [&](const Shape& sh) { return random_tensor(DType::kFloat32, sh, rng); };
  auto scalar = [](double v) { return Tensor::scalar(DType::kFloat32, v); };
  Tensor mask(DType::kBool, s);
  for (std::int64_t i = 0; i < mask.numel(); ++i) mask.data<bool>()[i] = (i * 7) % 3 == 0;
  struct Case {
    const char* op;
    std::vector<Tensor> in;
    ir::Primitive::Attrs attrs;
  };
  std::vector<Case> cases;
  for (const char* op : {"Add", "Sub", "Mul", "RealDiv", "Pow", "Maximum", "Minimum", "Equal",
                         "Less", "Greater"}) {
    cases.push_back({op, {pos(s), pos(s)}, {}});
  }
  cases.push_back({"Add", {any(s), any({5})}, {}});  // broadcast
  for (const char* op : {"Neg", "Square", "Abs", "Sign", "Sqrt", "Rsqrt", "Exp", "Log",
                         "ZerosLike", "OnesLike", "ReLU", "ReLU6", "Sigmoid", "Tanh", "GeLU",
                         "Flatten"}) {
    cases.push_back({op, {op == std::string("Flatten") ? any({3, 2, 4}) : pos(s)}, {}});
  }
  cases.push_back({"Select", {mask, any(s), any(s)}, {}});
  cases.push_back({"ReluGrad", {any(s), any(s)}, {}});  // y of both signs
  cases.push_back({"MatMul", {any({3, 4}), any({4, 5})}, {}});
  cases.push_back({"MatMul", {any({4, 3}), any({5, 4})},
                   {{"transpose_a", Value::boolean(true)}, {"transpose_b", Value::boolean(true)}}});
  cases.push_back({"BiasAdd", {any({2, 3, 4, 4}), any({3})}, {}});
  cases.push_back({"BiasAdd", {any(s), any({5})}, {}});
  cases.push_back({"BiasAddGrad", {any({2, 3, 4, 4})}, {}});
  cases.push_back({"BiasAddGrad", {any(s)}, {}});
  cases.push_back({"MatMulBiasAct", {any({3, 4}), any({4, 5}), any({5})},
                   {{"act", Value::string("relu")}}});
  cases.push_back({"ApplyMomentum", {any(s), any(s), scalar(0.1), any(s), scalar(0.9)}, {}});
  cases.push_back({"CombineMomentum",
                   {scalar(0.1), scalar(0.9), any(s), any(s), any(s), any({5}), any({5}), any({5})},
                   {}});
  cases.push_back({"ApplyAdam", {any(s), any(s), pos(s), scalar(0.9), scalar(0.99), scalar(0.01),
                                 scalar(0.9), scalar(0.999), scalar(1e-8), any(s)},
                   {}});
  // Convolution: every path of conv_kernels.cc where the build has AVX-512 (direct kernels for
  // few channels, implicit GEMMs for more, im2col + GEMM at stride 2 and for pointwise layers, a
  // pointwise image straight into the output, the filter gradient's GEMM over image blocks).
  auto conv = [](std::int64_t out_channel, std::int64_t k, std::int64_t stride, const char* pad) {
    return ir::Primitive::Attrs{
        {"out_channel", Value::i64(out_channel)}, {"kernel_size", Value::ints({k, k})},
        {"pad_mode", Value::string(pad)},         {"pad", Value::ints({0, 0, 0, 0})},
        {"stride", Value::ints({stride, stride})}, {"dilation", Value::ints({1, 1})},
        {"group", Value::i64(1)}};
  };
  auto sized = [](ir::Primitive::Attrs a, const char* key, std::vector<std::int64_t> v) {
    a[key] = Value::ints(v);
    return a;
  };
  // (in, out) channels: (3, 4) and (8, 4) take the direct kernels at stride 1, (20, 24) the
  // implicit GEMMs.
  for (std::int64_t stride : {1, 2}) {
    for (const auto& [in, out] : std::vector<std::pair<std::int64_t, std::int64_t>>{{3, 4}, {20, 24}}) {
      cases.push_back({"Conv2D", {any({2, in, 9, 9}), any({out, in, 3, 3})},
                       conv(out, 3, stride, "same")});
      const std::int64_t o = stride == 1 ? 9 : 5;
      const std::int64_t dx_in = in == 3 ? 8 : in;
      cases.push_back({"Conv2DBackpropInput", {any({2, out, o, o}), any({out, dx_in, 3, 3})},
                       sized(conv(out, 3, stride, "same"), "input_size", {2, dx_in, 9, 9})});
      cases.push_back({"Conv2DBackpropFilter", {any({2, out, o, o}), any({2, in, 9, 9})},
                       sized(conv(out, 3, stride, "same"), "filter_size", {out, in, 3, 3})});
    }
  }
  cases.push_back({"Conv2D", {any({1, 3, 4, 4}), any({5, 3, 1, 1})}, conv(5, 1, 1, "valid")});
  cases.push_back({"Conv2DBackpropInput", {any({1, 5, 4, 4}), any({5, 3, 1, 1})},
                   sized(conv(5, 1, 1, "valid"), "input_size", {1, 3, 4, 4})});
  cases.push_back({"Conv2DBackpropFilter", {any({3, 5, 4, 4}), any({3, 3, 4, 4})},
                   sized(conv(5, 1, 1, "valid"), "filter_size", {5, 3, 1, 1})});
  // Pooling: the fast path's 2x2/2 (odd sizes leave cells no window covers) and overlapping
  // 3x3/2 SAME, and the reference path (2x2/1).
  auto pool = [](std::int64_t k, std::int64_t stride, const char* pad) {
    return ir::Primitive::Attrs{{"kernel_size", Value::ints({k, k})},
                                {"strides", Value::ints({stride, stride})},
                                {"pad_mode", Value::string(pad)}};
  };
  for (const auto& [k, stride, pad] : std::vector<std::tuple<std::int64_t, std::int64_t, const char*>>{
           {2, 2, "valid"}, {2, 2, "same"}, {3, 2, "same"}, {2, 1, "same"}}) {
    const Shape x{2, 3, 7, 9};
    const ir::Primitive::Attrs a = pool(k, stride, pad);
    const Value pooled =
        backend::run_op(*ops::make_op("MaxPool", a), std::vector<Value>{Value::tensor(any(x))});
    const Shape p = pooled.as_tensor().shape();
    cases.push_back({"MaxPool", {any(x)}, a});
    cases.push_back({"MaxPoolGrad", {any(x), pooled.as_tensor(), any(p)}, a});
    cases.push_back({"MaxPoolGradGrad", {any(x), pooled.as_tensor(), any(x)}, a});
    cases.push_back({"AvgPool", {any(x)}, a});
    cases.push_back({"AvgPoolGrad", {any(x), pooled.as_tensor(), any(p)}, a});
  }
  // FloatStatus: finite input, and one with an Inf (its single element either way).
  cases.push_back({"FloatStatus", {any({5, 7})}, {}});
  {
    Tensor inf = any({5, 7});
    inf.set(12, std::numeric_limits<double>::infinity());
    cases.push_back({"FloatStatus", {inf}, {}});
  }
  // BatchNorm and its gradient, training and inference, NCHW and (N, C).
  for (bool training : {true, false}) {
    const ir::Primitive::Attrs a = {{"is_training", Value::boolean(training)}};
    for (const Shape& x : {Shape{3, 4, 5, 6}, Shape{7, 4}}) {
      cases.push_back({"BatchNorm", {any(x), pos({4}), any({4}), any({4}), pos({4})}, a});
      cases.push_back({"BatchNormGrad", {any(x), any(x), pos({4}), any({4}), pos({4})}, a});
    }
  }
  for (const char* act : {"none", "relu"}) {
    cases.push_back({"BatchNormApply", {any({3, 4, 5, 6}), any({4}), any({4}), any({4}), pos({4})},
                     {{"act", Value::string(act)}}});
  }
  // Conv2DBiasAct: the Conv2D kernel, then the bias and activation pass over every element.
  for (std::int64_t stride : {1, 2}) {
    ir::Primitive::Attrs a = conv(24, 3, stride, "same");
    a["act"] = Value::string("relu");
    cases.push_back({"Conv2DBiasAct", {any({2, 20, 9, 9}), any({24, 20, 3, 3}), any({24})}, a});
  }
  std::set<std::string> declared;
  for (const backend::KernelDef* d : backend::cpu_backend().kernels().all()) {
    if (d->writes_every_output) declared.insert(d->op);
  }
  std::set<std::string> covered;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.op);
    ASSERT_TRUE(declared.count(c.op)) << c.op;
    covered.insert(c.op);
    std::vector<Value> args;
    for (const Tensor& t : c.in) args.push_back(Value::tensor(t));
    const ir::PrimitivePtr prim = ops::make_op(c.op, c.attrs);
    const Value ref = backend::run_op(*prim, args);
    std::vector<Tensor> ref_leaves;
    if (ref.is_tensor()) {
      ref_leaves.push_back(ref.as_tensor());
    } else {
      for (const Value& e : ref.elements()) ref_leaves.push_back(e.as_tensor());
    }
    std::vector<Tensor> outs;
    for (const Tensor& r : ref_leaves) {
      Tensor t(r.dtype(), r.shape());
      std::memset(t.raw_data(), 0xFF, t.nbytes());  // NaN for floats, true-ish garbage for Bool
      outs.push_back(t);
    }
    const DType key = c.op == std::string("Select") ? c.in[1].dtype() : c.in[0].dtype();
    const backend::KernelDef* k = backend::cpu_backend().find_kernel(c.op, key);
    ASSERT_TRUE(k);
    ASSERT_TRUE(k->writes_every_output);
    backend::run_kernel(*k, *prim, c.in, outs, backend::cpu_backend());
    for (std::size_t i = 0; i < outs.size(); ++i) {
      if (outs[i].dtype() == DType::kBool) {  // compare truth values: garbage bytes are not 0/1
        for (std::int64_t j = 0; j < outs[i].numel(); ++j) {
          ASSERT_EQ(outs[i].data<bool>()[j], ref_leaves[i].data<bool>()[j]) << j;
        }
      } else {
        EXPECT_TRUE(outs[i].bitwise_equal(ref_leaves[i])) << "output " << i;
      }
    }
  }
  EXPECT_EQ(covered, declared);  // every declaring op has a case
}

// An observer calling a function after each launch.
struct LambdaObserver : Observer {
  explicit LambdaObserver(std::function<void(const LaunchEvent&)> f) : after(std::move(f)) {}
  void after_launch(const LaunchEvent& e) override { after(e); }
  std::function<void(const LaunchEvent&)> after;
};

TEST(Executable, ObserverSeesEveryLaunch) {
  Module m;
  FuncGraph* g = m.add_graph("f");
  Node* x = g->add_parameter("x", Abstract::tensor(DType::kFloat32, {2, 2}));
  Node* a = call(g, "MatMul", {x, x});
  a->set_name("mm");
  a->set_debug({.scope = "Net/dense", .file = "", .line = 0});
  g->set_output(call(g, "ReLU", {a}));
  auto exe = compile(*g);
  std::vector<std::string> seen;
  auto observer = std::make_shared<LambdaObserver>([&](const LaunchEvent& i) {
    seen.push_back(std::string(i.op) + ":" + std::string(i.name) + ":" + i.debug.scope);
    EXPECT_EQ(i.inputs.size(), i.op == "MatMul" ? 2u : 1u);
    EXPECT_EQ(i.outputs.size(), 1u);
    EXPECT_GE(i.elapsed_ns, 0);
  });
  exe->set_observers(std::make_shared<ObserverList>(ObserverList{observer}));
  exe->run({Value::tensor(Tensor::from_doubles(DType::kFloat32, {2, 2}, {1, -2, 3, 4}))});
  EXPECT_EQ(seen, (std::vector<std::string>{"MatMul:mm:Net/dense", "ReLU::"}));
  exe->set_observers(nullptr);
  exe->run({Value::tensor(Tensor::from_doubles(DType::kFloat32, {2, 2}, {1, -2, 3, 4}))});
  EXPECT_EQ(seen.size(), 2u);
}

TEST(Executable, ControlFlowRunsAsNestedPlansAndGraphCallsFallBack) {
  Module m;
  FuncGraph* g = m.add_graph("main");
  Node* x = g->add_parameter("x", Abstract::tensor(DType::kFloat64, {}));
  Node* pred = call(g, "Greater", {x, g->add_value(Value::tensor(Tensor::scalar(DType::kFloat64, 0)))});
  Node* out = ir::cond(g, pred, {x},
      [&](FuncGraph* b, const std::vector<Node*>& p) { return call(b, "Mul", {p[0], p[0]}); },
      [&](FuncGraph* b, const std::vector<Node*>& p) { return call(b, "Neg", {p[0]}); });
  g->set_output(out);
  m.set_entry(g);
  auto exe = compile(*g);
  EXPECT_FALSE(exe->interpreted());  // the If is a control launch over nested plans
  for (double v : {3.0, -2.0}) {
    Value xv = Value::tensor(Tensor::scalar(DType::kFloat64, v));
    EXPECT_TRUE(same(exe->run({xv}), interpret(*g, {xv})));
  }
  // A graph call still runs through the interpreter.
  FuncGraph* h = m.add_graph("caller");
  Node* hx = h->add_parameter("x", Abstract::tensor(DType::kFloat64, {}));
  h->set_output(call(h, "Neg", {h->add_call(g, {hx})}));
  auto caller = compile(*h);
  EXPECT_TRUE(caller->interpreted());
  Value xv = Value::tensor(Tensor::scalar(DType::kFloat64, 5));
  EXPECT_TRUE(same(caller->run({xv}), interpret(*h, {xv})));
}

}  // namespace
}  // namespace loom::runtime

namespace loom::runtime {
namespace {

// Intermediates live in one planned arena; a result handed to the caller keeps its arena, and
// the next run takes a fresh one instead of overwriting what the caller holds.
TEST(Executable, ReturnedResultsAreNeverOverwrittenByTheNextRun) {
  ir::Module m;
  ir::FuncGraph* g = m.add_graph("main");
  ir::Node* x = g->add_parameter("x", ir::Abstract::tensor(DType::kFloat32, {2, 3}));
  ir::Node* t = g->add_call(ops::make_op("Neg"), {x});
  ir::Node* u = g->add_call(ops::make_op("Exp"), {t});
  g->set_output(g->add_call(ops::make_op("MakeTuple"), {u, g->add_call(ops::make_op("Square"), {t})}));
  auto exe = compile(*g);
  EXPECT_FALSE(exe->interpreted());
  auto arg = [](double base) {
    return ir::Value::tensor(Tensor::from_doubles(DType::kFloat32, {2, 3}, {base, 1, 2, 3, 4, 5}));
  };
  ir::Value first = exe->run({arg(0)});
  const Tensor kept = first.elements()[0].as_tensor().clone();
  ir::Value second = exe->run({arg(9)});
  EXPECT_TRUE(first.elements()[0].as_tensor().bitwise_equal(kept));
  EXPECT_FALSE(first.elements()[0].as_tensor().shares_storage_with(second.elements()[0].as_tensor()));
  // Both results of one run sit in the same arena.
  EXPECT_TRUE(second.elements()[0].as_tensor().shares_storage_with(second.elements()[1].as_tensor()));
  EXPECT_EQ(second.elements()[1].as_tensor().get(0), 81.0);
}

// A small result (a loss) is copied out of the arena, which the next run reuses: no new arena
// (and no page faults) per run, and the caller's result still never changes.
TEST(Executable, SmallResultsAreCopiedOutAndTheArenaIsKept) {
  ir::Module m;
  ir::FuncGraph* g = m.add_graph("main");
  ir::Node* x = g->add_parameter("x", ir::Abstract::tensor(DType::kFloat32, {1000}));
  ir::Node* e = g->add_call(ops::make_op("Exp"), {x});
  ir::Node* n = g->add_call(ops::make_op("Mul"), {e, x});
  g->set_output(g->add_call(ops::make_op("ReduceSum"), {n}));
  auto exe = compile(*g);
  std::vector<const void*> exp_out;
  exe->set_observers(std::make_shared<ObserverList>(
      ObserverList{std::make_shared<LambdaObserver>([&](const LaunchEvent& i) {
        if (i.op == "Exp") exp_out.push_back(i.outputs[0].raw_data());
      })}));
  auto arg = [](double v) {
    return ir::Value::tensor(Tensor::from_doubles(DType::kFloat32, {1000},
                                                  std::vector<double>(1000, v)));
  };
  ir::Value first = exe->run({arg(0.5)});
  const Tensor kept = first.as_tensor().clone();
  ir::Value second = exe->run({arg(-0.5)});
  ASSERT_EQ(exp_out.size(), 2u);
  EXPECT_EQ(exp_out[0], exp_out[1]);  // the same arena both runs
  EXPECT_TRUE(first.as_tensor().bitwise_equal(kept));
  EXPECT_FALSE(first.as_tensor().shares_storage_with(second.as_tensor()));
  EXPECT_TRUE(second.as_tensor().bitwise_equal(
      interpret(*g, {arg(-0.5)}).as_tensor()));
}

}  // namespace
}  // namespace loom::runtime

namespace loom::runtime {
namespace {

using autodiff::testing::f64;
using autodiff::testing::f64_abs;
using autodiff::testing::scalar;

Node* op(FuncGraph* g, const char* name, std::vector<Node*> args, ir::Primitive::Attrs attrs = {}) {
  return g->add_call(ops::make_op(name, std::move(attrs)), args);
}

// (a) An If on a data-dependent predicate (Σx > 0), with a captured weight and a tuple result.
TEST(ExecutableControlFlow, IfOnDataDependentPredicateEqualsInterpreter) {
  Module m;
  FuncGraph* g = m.add_graph("main");
  Node* x = g->add_parameter("x", f64_abs({2, 3}));
  Node* w = g->add_parameter("w", f64_abs({3}));
  Node* tw = op(g, "Tanh", {w});
  Node* pred = op(g, "Greater", {op(g, "ReduceSum", {x}), g->add_value(scalar(0))});
  Node* y = ir::cond(g, pred, {x},
      [&](FuncGraph* b, const std::vector<Node*>& p) {
        return op(b, "MakeTuple", {op(b, "Mul", {p[0], tw}), op(b, "Exp", {p[0]})});
      },
      [&](FuncGraph* b, const std::vector<Node*>& p) {
        return op(b, "MakeTuple", {op(b, "Neg", {p[0]}), op(b, "Square", {p[0]})});
      });
  Node* first = g->add_call(ops::make_op("TupleGetItem"), {y, g->add_value(Value::i64(0))});
  g->set_output(op(g, "MakeTuple", {op(g, "Sigmoid", {first}), y}));
  m.set_entry(g);
  auto exe = compile(*g);
  ASSERT_FALSE(exe->interpreted());
  std::size_t controls = 0;
  for (const auto& l : exe->launches()) controls += l.control != nullptr;
  EXPECT_EQ(controls, 1u);
  ASSERT_EQ(exe->nested().size(), 2u);  // then, else
  for (const auto& [graph, sub] : exe->nested()) EXPECT_FALSE(sub->interpreted()) << graph->name();
  std::mt19937 rng(11);
  Value wv = Value::tensor(random_tensor(DType::kFloat64, {3}, rng));
  int branches[2] = {0, 0};
  for (int trial = 0; trial < 6; ++trial) {
    const double shift = trial % 2 ? 2.0 : -2.0;
    Value xv = Value::tensor(random_tensor(DType::kFloat64, {2, 3}, rng, shift - 1, shift + 1));
    ++branches[trial % 2];
    Value want = interpret(*g, {xv, wv});
    Value got = exe->run({xv, wv});
    EXPECT_TRUE(same(got, want));
    EXPECT_TRUE(same(exe->run({xv, wv}), want));
    EXPECT_TRUE(same(got, want));  // not overwritten by the next run
  }
  EXPECT_EQ(branches[0], 3);
  EXPECT_EQ(branches[1], 3);
}

// (b) A While with a data-dependent trip count: halve x until Σx² is below a captured bound,
// counting the iterations.
struct HalvingLoop {
  Module m;
  FuncGraph* g = nullptr;
  HalvingLoop() {
    g = m.add_graph("main");
    Node* x = g->add_parameter("x", f64_abs({4}));
    Node* bound = g->add_parameter("bound", f64_abs({}));
    Node* loop = ir::while_loop(g, {x, g->add_value(scalar(0))},
        [&](FuncGraph* c, const std::vector<Node*>& s) {
          return op(c, "Greater", {op(c, "ReduceSum", {op(c, "Mul", {s[0], s[0]})}), bound});
        },
        [&](FuncGraph* b, const std::vector<Node*>& s) {
          return std::vector<Node*>{op(b, "RealDiv", {s[0], b->add_value(scalar(2))}),
                                    op(b, "Add", {s[1], b->add_value(scalar(1))})};
        });
    g->set_output(loop);
    m.set_entry(g);
  }
};

TEST(ExecutableControlFlow, WhileWithDataDependentTripCountEqualsInterpreter) {
  HalvingLoop n;
  auto exe = compile(*n.g);
  ASSERT_FALSE(exe->interpreted());
  ASSERT_EQ(exe->nested().size(), 2u);  // cond, body
  for (const auto& [graph, sub] : exe->nested()) EXPECT_FALSE(sub->interpreted()) << graph->name();
  std::set<double> trips;
  for (double scale : {0.01, 1.0, 7.0, 100.0, 3000.0}) {
    Value xv = f64({scale, -0.5 * scale, 0.25 * scale, scale}, {4});
    Value bound = scalar(0.5);
    Value want = interpret(*n.g, {xv, bound});
    Value got = exe->run({xv, bound});
    ASSERT_TRUE(got.is_tuple());
    ASSERT_EQ(got.elements().size(), 3u);  // x, count, the captured bound
    EXPECT_TRUE(same(got, want));
    trips.insert(got.elements()[1].as_tensor().get(0));
  }
  EXPECT_EQ(trips.size(), 5u);
  EXPECT_TRUE(trips.count(0.0));  // a loop that never runs its body
}

TEST(ExecutableControlFlow, WhileIterationLimitIsAnError) {
  // Σx² > -1 always: the loop never ends; the compiled run stops at the interpreter's limit.
  Module m;
  FuncGraph* g = m.add_graph("main");
  Node* x = g->add_parameter("x", f64_abs({}));
  Node* loop = ir::while_loop(g, {x},
      [&](FuncGraph* c, const std::vector<Node*>& s) {
        return op(c, "Greater", {s[0], c->add_value(scalar(-1))});
      },
      [&](FuncGraph* b, const std::vector<Node*>& s) { return std::vector<Node*>{s[0]}; });
  g->set_output(loop);
  m.set_entry(g);
  CompileOptions options;
  options.max_loop_iterations = 1000;
  auto exe = compile(*g, backend::cpu_backend(), options);
  ASSERT_FALSE(exe->interpreted());
  EXPECT_THROW(exe->run({scalar(1)}), ValueError);
}

// (c) The gradient graphs of tests/core/autodiff/control_flow_grad_test.cc (its nets, from
// tests/core/autodiff/test_util.h), after grad + inline,simplify,dce.
struct CondGradNet {
  Module m;
  FuncGraph* f = autodiff::testing::build_cond_net(m);
};

struct LoopGradNet {
  Module m;
  FuncGraph* f = autodiff::testing::build_loop_net(m);
};

std::size_t control_launches(const Executable& exe) {
  std::size_t n = 0;
  for (const auto& l : exe.launches()) n += l.control != nullptr;
  return n;
}

TEST(ExecutableControlFlow, IfGradientEqualsInterpreter) {
  CondGradNet n;
  FuncGraph* g = autodiff::grad(n.f, {.get_all = true, .get_by_list = true});
  n.m.set_entry(g);
  passes::PassManager::parse("inline,simplify,dce").run(n.m);
  auto exe = compile(*n.m.entry());
  std::cout << "If grad: " << exe->launches().size() << " launches, "
            << control_launches(*exe) << " control, interpreted " << exe->interpreted() << "\n";
  ASSERT_FALSE(exe->interpreted());
  EXPECT_GE(control_launches(*exe), 1u);
  Value w = f64({0.4, -1.5, 0.9}, {3});
  for (const Value& x : {f64({0.5, 1.0, -0.2}, {3}), f64({-0.5, 0.3, -0.9}, {3})}) {
    Value want = interpret(*n.m.entry(), {x, w});
    EXPECT_TRUE(same(exe->run({x, w}), want));
    EXPECT_TRUE(same(exe->run({x, w}), want));
  }
}

TEST(ExecutableControlFlow, WhileGradientEqualsInterpreter) {
  LoopGradNet n;
  Value w = f64({0.5, -0.4, 0.3, 0.2, 0.6, -0.5, -0.3, 0.1, 0.7}, {3, 3});
  const std::vector<Value> xs = {f64({0.9, -0.8, 0.7}, {3, 1}), f64({0.2, 0.1, -0.15}, {3, 1}),
                                 f64({0.1, 0.1, 0.1}, {3, 1})};
  {
    auto fwd = compile(*n.f);
    ASSERT_FALSE(fwd->interpreted());
    EXPECT_EQ(control_launches(*fwd), 1u);
    for (const Value& x : xs) EXPECT_TRUE(same(fwd->run({x, w}), interpret(*n.f, {x, w})));
  }
  FuncGraph* g = autodiff::grad(n.f, {.get_all = true});
  n.m.set_entry(g);
  passes::PassManager::parse("inline,simplify,dce").run(n.m);
  // The backward While carries a tape whose kind changes with every iteration (a nested tuple),
  // so the loop state has no stable abstract and the gradient graph runs through the
  // interpreter; the forward loop alone compiles.
  auto exe = compile(*n.m.entry());
  std::cout << "While grad: " << exe->launches().size() << " launches, "
            << control_launches(*exe) << " control, interpreted " << exe->interpreted() << "\n";
  for (const Value& x : xs) {
    Value want = interpret(*n.m.entry(), {x, w});
    EXPECT_TRUE(same(exe->run({x, w}), want));
    EXPECT_TRUE(same(exe->run({x, w}), want));
  }
}

}  // namespace
}  // namespace loom::runtime

namespace loom::runtime {
namespace {

// power(x, n) = n > 0 ? x * power(x, n - 1) : ones_like(x): the If compiles; its then-branch,
// which calls power again, is a nested plan that runs the interpreter.
TEST(ExecutableControlFlow, RecursionThroughIfRunsTheBranchInterpreted) {
  using autodiff::testing::f64_abs;
  using autodiff::testing::scalar;
  Module m;
  FuncGraph* power = m.add_graph("power");
  Node* x = power->add_parameter("x", f64_abs({3}));
  Node* n = power->add_parameter("n", f64_abs({}));
  Node* out = ir::cond(power, call(power, "Greater", {n, power->add_value(scalar(0))}), {x, n},
      [&](FuncGraph* b, const std::vector<Node*>& p) {
        Node* rec = b->add_call(power, {p[0], call(b, "Sub", {p[1], b->add_value(scalar(1))})});
        rec->set_abstract(f64_abs({3}));
        return call(b, "Mul", {p[0], rec});
      },
      [&](FuncGraph* b, const std::vector<Node*>& p) { return call(b, "OnesLike", {p[0]}); });
  power->set_output(out);
  m.set_entry(power);
  autodiff::testing::annotate(power);
  auto exe = compile(*power);
  ASSERT_FALSE(exe->interpreted());
  std::size_t interpreted_subs = 0;
  for (const auto& [graph, sub] : exe->nested()) interpreted_subs += sub->interpreted();
  EXPECT_EQ(interpreted_subs, 1u);
  Value xv = autodiff::testing::f64({0.5, -1.25, 2}, {3});
  for (double k : {0.0, 1.0, 3.0}) {
    EXPECT_TRUE(same(exe->run({xv, scalar(k)}), interpret(*power, {xv, scalar(k)})));
  }
}

}  // namespace
}  // namespace loom::runtime
