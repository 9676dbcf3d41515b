// Observers on a training step (runtime/observer.h): every kernel launch of a compiled
// TrainOneStepCell, the launches of its If's nested plans included, in order, with Cell scopes,
// source lines and roles; inputs kept intact for an observer that asks; and the same events from
// the interpreter in PyNative mode.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include "core/ir/printer.h"
#include "core/random/random.h"
#include "nn/cell.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/train.h"
#include "runtime/executable.h"
#include "runtime/observer.h"

namespace loom::nn {
namespace {

using ir::Value;

// Source lines of Gated::construct, checked in the events.
constexpr int kLineFc1 = __LINE__ + 13;
constexpr int kLineCond = __LINE__ + 15;
constexpr int kLineFc2 = __LINE__ + 19;

// h = fc1(x); if sum(h) > 0: g = relu(h) * 2 else: g = h * h; fc2(g).
class Gated : public Cell {
 public:
  Gated() : Cell("Gated") {
    fc1_ = &register_cell("fc1", std::make_shared<Dense>(4, 3));
    fc2_ = &register_cell("fc2", std::make_shared<Dense>(3, 2));
  }
  ops::Var construct(const std::vector<ops::Var>& in) override {
    ops::Emitter& e = current_emitter();
    const ops::Var h = (*fc1_)(in[0]);
    const ops::Var sum = e.reduce_sum(h, {0, 1}, false);
    const ops::Var pred = e.emit("Greater", {sum, e.scalar_like(sum, 0.0)});
    const ops::Var g = cond(pred, {h},
        [&](const std::vector<ops::Var>& a) {
          return std::vector<ops::Var>{mul(relu(a[0]), e.scalar_like(a[0], 2.0))};
        },
        [&](const std::vector<ops::Var>& a) { return std::vector<ops::Var>{mul(a[0], a[0])}; })[0];
    return (*fc2_)(g);
  }

 private:
  Dense* fc1_;
  Dense* fc2_;
};

struct Event {
  bool after;
  int depth;
  std::string graph, op, scope, file, forward;
  int line;
  ir::Role role;
  std::size_t inputs, outputs;
};

class Recorder : public runtime::Observer {
 public:
  void before_launch(const runtime::LaunchEvent& e) override { add(false, e); }
  void after_launch(const runtime::LaunchEvent& e) override { add(true, e); }
  std::vector<Event> events;

 private:
  void add(bool after, const runtime::LaunchEvent& e) {
    events.push_back({after, e.depth, std::string(e.graph), std::string(e.op), e.debug.scope,
                      e.debug.file, e.debug.forward, e.debug.line, e.debug.role, e.inputs.size(),
                      e.outputs.size()});
    if (after) {
      EXPECT_GE(e.elapsed_ns, 0);
    } else {
      EXPECT_EQ(e.elapsed_ns, -1);
    }
  }
};

// Copies the inputs before each launch and compares them after it.
class IntactInputs : public runtime::Observer {
 public:
  explicit IntactInputs(bool ask) : ask_(ask) {}
  bool needs_intact_inputs() const override { return ask_; }
  void before_launch(const runtime::LaunchEvent& e) override {
    saved_.clear();
    for (const Tensor& t : e.inputs) saved_.push_back(t.clone());
  }
  void after_launch(const runtime::LaunchEvent& e) override {
    ++launches;
    if (e.op == "If" || e.op == "While") return;  // their nested launches were checked
    for (std::size_t i = 0; i < e.inputs.size(); ++i) {
      if (!e.inputs[i].bitwise_equal(saved_[i])) {
        ++changed;
        break;
      }
    }
  }
  int launches = 0;
  int changed = 0;

 private:
  bool ask_;
  std::vector<Tensor> saved_;
};

std::shared_ptr<WithLossCell> gated_with_loss() {
  random::seed_all(7);
  auto net = std::make_shared<Gated>();
  // Positive weights and inputs: sum(h) > 0, the then-branch runs.
  for (auto& [name, p] : net->parameters_and_names()) {
    for (std::int64_t i = 0; i < p->value.numel(); ++i) {
      p->value.set(i, 0.05 + 0.01 * static_cast<double>(i % 7));
    }
  }
  return std::make_shared<WithLossCell>(net, std::make_shared<MSELoss>());
}

Tensor input() {
  return Tensor::from_vector<float>({2, 4}, {0.5f, 1.f, 1.5f, 2.f, 0.25f, 0.75f, 1.25f, 1.75f});
}
Tensor target() { return Tensor::from_vector<float>({2, 2}, {1.f, 0.f, 0.f, 1.f}); }

TEST(Observers, TwoObserversSeeEveryLaunchOfATrainingStepWithAnIf) {
  TrainOneStepCell step(gated_with_loss(), OptimizerSpec{.learning_rate = 0.01},
                        ExecMode::kGraph);
  auto recorder = std::make_shared<Recorder>();
  auto intact = std::make_shared<IntactInputs>(/*ask=*/true);
  step.add_observer(recorder);
  step.add_observer(intact);
  step.step(input(), target());
  const runtime::Executable* exe = step.last_executable();
  ASSERT_NE(exe, nullptr);
  EXPECT_FALSE(exe->interpreted());

  // Events come in pairs, before and after, properly nested: a launch at depth d encloses only
  // launches at depth d + 1 (the If's branch), and the top level is the plan's launches, in
  // order.
  std::vector<std::string> top;
  std::vector<const Event*> stack;
  int nested = 0, forward_ifs = 0, backward_ifs = 0;
  for (const Event& e : recorder->events) {
    if (!e.after) {
      EXPECT_EQ(e.depth, static_cast<int>(stack.size())) << e.op;
      stack.push_back(&e);
      if (e.depth == 0) top.push_back(e.op);
      if (e.depth == 1) ++nested;
      if (e.op == "If") (e.role == ir::Role::kBackward ? backward_ifs : forward_ifs)++;
    } else {
      ASSERT_FALSE(stack.empty());
      EXPECT_EQ(stack.back()->op, e.op);
      EXPECT_EQ(stack.back()->depth, e.depth);
      stack.pop_back();
    }
  }
  EXPECT_TRUE(stack.empty());
  std::vector<std::string> planned;
  for (const auto& l : exe->launches()) planned.push_back(l.prim->name());
  EXPECT_EQ(top, planned);  // every top-level launch, in the plan's order
  EXPECT_EQ(forward_ifs, 1);
  EXPECT_EQ(backward_ifs, 1);
  EXPECT_GE(nested, 3);  // the then-branch's ReLU and Mul, and its gradient's kernels

  // Scopes, lines and roles.
  bool saw_fc1 = false, saw_branch_relu = false, saw_backward_matmul = false, saw_update = false;
  for (const Event& e : recorder->events) {
    if (e.after) continue;
    // fc1's product (fused with its bias by the training pipeline: MatMulBiasAct).
    if (e.role == ir::Role::kForward && e.op.rfind("MatMul", 0) == 0 && e.depth == 0 &&
        e.scope.rfind("WithLossCell/_backbone/fc1/", 0) == 0) {
      saw_fc1 = true;
      EXPECT_EQ(e.file, "tests/nn/observer_test.cc");
      EXPECT_EQ(e.line, kLineFc1);
    }
    if (e.depth == 1 && e.op == "ReLU" && e.role == ir::Role::kForward) {
      saw_branch_relu = true;
      EXPECT_EQ(e.scope, "WithLossCell/_backbone/ReLU");
      EXPECT_EQ(e.line, kLineCond + 2);
    }
    if (e.role == ir::Role::kBackward && e.op == "MatMul" &&
        e.forward == "WithLossCell/_backbone/fc2/MatMul") {
      saw_backward_matmul = true;
      EXPECT_EQ(e.scope, "Gradients/WithLossCell/_backbone/fc2/MatMul");
      EXPECT_EQ(e.line, kLineFc2);
    }
    // The updates of its small parameters, combined into one launch (combine_updates).
    if (e.role == ir::Role::kOptimizer &&
        (e.op == "ApplyMomentum" || e.op == "CombineMomentum")) {
      saw_update = true;
      EXPECT_EQ(e.scope.rfind("Momentum/", 0), 0u) << e.scope;
    }
  }
  EXPECT_TRUE(saw_fc1);
  EXPECT_TRUE(saw_branch_relu);
  EXPECT_TRUE(saw_backward_matmul);
  EXPECT_TRUE(saw_update);

  // The second observer saw the same launches and every input intact after its launch.
  int launches = 0;
  for (const Event& e : recorder->events) launches += e.after ? 1 : 0;
  EXPECT_EQ(intact->launches, launches);
  EXPECT_EQ(intact->changed, 0);

  // Removed, they see nothing more; the step goes on.
  const std::size_t seen = recorder->events.size();
  step.remove_observer(recorder.get());
  step.remove_observer(intact.get());
  step.step(input(), target());
  EXPECT_EQ(recorder->events.size(), seen);
}

// Without the request, in-place reuse may overwrite an input during its launch: the reason an
// observer reading inputs afterwards asks for them to be kept. Asking costs a second plan with
// more memory, not different results.
TEST(Observers, IntactInputsAreAPlanOfTheirOwnWithTheSameResults) {
  auto run = [](bool ask, int* changed, std::size_t* peak) {
    TrainOneStepCell step(gated_with_loss(), OptimizerSpec{.learning_rate = 0.01},
                          ExecMode::kGraph);
    auto intact = std::make_shared<IntactInputs>(ask);
    step.add_observer(intact);
    const Tensor loss = step.step(input(), target());
    *changed = intact->changed;
    *peak = step.last_executable()->peak_bytes();
    std::vector<Tensor> weights;
    for (auto& [name, p] : step.network().parameters_and_names()) weights.push_back(p->value);
    weights.push_back(loss);
    return weights;
  };
  int changed_default = 0, changed_kept = 0;
  std::size_t peak_default = 0, peak_kept = 0;
  const std::vector<Tensor> a = run(false, &changed_default, &peak_default);
  const std::vector<Tensor> b = run(true, &changed_kept, &peak_kept);
  EXPECT_GT(changed_default, 0);
  EXPECT_EQ(changed_kept, 0);
  EXPECT_GE(peak_kept, peak_default);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i].bitwise_equal(b[i])) << i;
}

// PyNative mode runs the same step graph through the interpreter: the observers see its
// launches too, with the same ops, scopes and roles at the top level.
TEST(Observers, TheInterpreterReportsTheSameLaunches) {
  auto ops_of = [](ExecMode mode) {
    TrainOneStepCell step(gated_with_loss(), OptimizerSpec{.learning_rate = 0.01}, mode);
    auto recorder = std::make_shared<Recorder>();
    step.add_observer(recorder);
    step.step(input(), target());
    std::multiset<std::string> ops;
    for (const Event& e : recorder->events) {
      if (e.after) ops.insert(e.op + "@" + std::string(ir::role_name(e.role)) + "@" + e.scope);
    }
    return ops;
  };
  const auto interpreted = ops_of(ExecMode::kPyNative);
  const auto compiled = ops_of(ExecMode::kGraph);
  EXPECT_FALSE(interpreted.empty());
  // Both run the step graph the pipeline made: the same launches.
  EXPECT_EQ(interpreted, compiled);
  // The small parameters' updates in one launch (the combine_updates pass).
  EXPECT_EQ(interpreted.count("CombineMomentum@optimizer@Momentum/CombineMomentum"), 1u);
  EXPECT_EQ(interpreted.count("If@forward@WithLossCell/_backbone/If"), 1u);
}

// Each run of the step is bracketed by run_begin / run_end naming the function and its compiled
// graph; every launch's label is its node's %label in that graph's IR text (nested ones in their
// branch graph's), and the labels are the same in PyNative mode, which interprets that graph.
class Labels : public runtime::Observer {
 public:
  void run_begin(const runtime::RunEvent& e) override {
    ++begins;
    EXPECT_EQ(open, false);
    open = true;
    function = std::string(e.function);
    text = ir::print_graph(e.graph);
    EXPECT_EQ(e.result, nullptr);
    EXPECT_EQ(e.args.size(), e.graph.parameters().size());
    graph = &e.graph;
  }
  void run_end(const runtime::RunEvent& e) override {
    ++ends;
    EXPECT_TRUE(open);
    EXPECT_EQ(&e.graph, graph);
    ASSERT_NE(e.result, nullptr);
    EXPECT_TRUE(e.result->is_tuple());  // (loss, new weights, new states...)
    open = false;
  }
  void after_launch(const runtime::LaunchEvent& e) override {
    EXPECT_TRUE(open) << e.op;
    ASSERT_NE(e.func_graph, nullptr);
    const std::string line = "  %" + std::string(e.label) + " = " + std::string(e.op) + "(";
    const std::string in = e.depth == 0 ? text : ir::print_graph(*e.func_graph);
    EXPECT_NE(in.find(line), std::string::npos) << line;
    if (e.depth == 0) {
      EXPECT_EQ(e.func_graph, graph);
    }
    labels.push_back(std::string(e.op) + "-op" + std::string(e.label) + "@" + std::to_string(e.depth));
  }
  int begins = 0, ends = 0;
  bool open = false;
  std::string function, text;
  const ir::FuncGraph* graph = nullptr;
  std::vector<std::string> labels;
};

TEST(Observers, RunsAreBracketedAndLaunchesCarryTheirIrLabels) {
  std::vector<std::string> by_mode[2];
  for (ExecMode mode : {ExecMode::kGraph, ExecMode::kPyNative}) {
    TrainOneStepCell step(gated_with_loss(), OptimizerSpec{.learning_rate = 0.01}, mode);
    auto labels = std::make_shared<Labels>();
    step.add_observer(labels);
    step.step(input(), target());
    step.step(input(), target());
    EXPECT_EQ(labels->begins, 2);
    EXPECT_EQ(labels->ends, 2);
    EXPECT_EQ(labels->function, "train_step");
    std::vector<std::string> sorted = labels->labels;
    std::sort(sorted.begin(), sorted.end());
    by_mode[mode == ExecMode::kGraph ? 0 : 1] = sorted;
  }
  EXPECT_FALSE(by_mode[0].empty());
  EXPECT_EQ(by_mode[0], by_mode[1]);
}

// nn::cond's gradient is the taken branch's: one training step of Gated equals one step of the
// network written with that branch alone, for inputs that take either branch.
class Straight : public Cell {
 public:
  explicit Straight(bool then_branch) : Cell("Gated"), then_(then_branch) {
    fc1_ = &register_cell("fc1", std::make_shared<Dense>(4, 3));
    fc2_ = &register_cell("fc2", std::make_shared<Dense>(3, 2));
  }
  ops::Var construct(const std::vector<ops::Var>& in) override {
    const ops::Var h = (*fc1_)(in[0]);
    const ops::Var g = then_ ? mul(relu(h), current_emitter().scalar_like(h, 2.0)) : mul(h, h);
    return (*fc2_)(g);
  }

 private:
  bool then_;
  Dense* fc1_;
  Dense* fc2_;
};

TEST(Cond, TheGradientIsTheTakenBranchs) {
  for (bool positive : {true, false}) {
    SCOPED_TRACE(positive ? "then" : "else");
    Tensor x = input();
    if (!positive) {
      for (std::int64_t i = 0; i < x.numel(); ++i) x.set(i, -x.get(i));
    }
    std::vector<std::vector<double>> weights;
    for (int which = 0; which < 2; ++which) {
      random::seed_all(7);
      std::shared_ptr<Cell> net;
      if (which == 0) {
        net = std::make_shared<Gated>();
      } else {
        net = std::make_shared<Straight>(positive);
      }
      for (auto& [name, p] : net->parameters_and_names()) {
        for (std::int64_t i = 0; i < p->value.numel(); ++i) {
          p->value.set(i, 0.05 + 0.01 * static_cast<double>(i % 7));
        }
      }
      TrainOneStepCell step(std::make_shared<WithLossCell>(net, std::make_shared<MSELoss>()),
                            OptimizerSpec{.learning_rate = 0.1}, ExecMode::kGraph);
      step.step(x, target());
      std::vector<double> w;
      for (auto& [name, p] : net->parameters_and_names()) {
        for (double v : p->value.to_doubles()) w.push_back(v);
      }
      weights.push_back(w);
    }
    ASSERT_EQ(weights[0].size(), weights[1].size());
    for (std::size_t i = 0; i < weights[0].size(); ++i) {
      EXPECT_NEAR(weights[0][i], weights[1][i], 1e-6) << i;
    }
    // The step moved the weights (the loss has a gradient through the branch).
    EXPECT_NE(weights[0][0], 0.05);
  }
}

}  // namespace
}  // namespace loom::nn
