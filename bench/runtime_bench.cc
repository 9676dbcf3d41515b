// The compiled runtime's costs (bench/README.md records the figures):
//   - dispatch overhead per kernel: a chain of 1000 tiny Adds (4 floats), compiled vs eager
//     backend::run_op (which infers, allocates and looks the kernel up on every call), and
//     compiled with an observer installed (runtime/observer.h: timing and two calls per launch);
//   - compile() time of the flattened forward+backward graph of a 20-layer CNN;
//   - LeNet-5's inference latency at batch 1 through the C++ API: the Cell called in graph mode
//     (compiled once, then the signature cache), and nn::Model::predict (which also copies the
//     result to the host and restores the training flags).
#include <benchmark/benchmark.h>

#include <memory>

#include "backends/eager.h"
#include "core/autodiff/grad.h"
#include "core/ir/anf.h"
#include "core/passes/pass.h"
#include "runtime/executable.h"
#include "ops/op.h"
#include "core/random/random.h"
#include "models/zoo.h"
#include "nn/context.h"
#include "nn/loss.h"
#include "nn/model.h"

namespace {

using namespace loom;  // NOLINT
using ir::Abstract;
using ir::FuncGraph;
using ir::Node;
using ir::Value;

constexpr int kChain = 1000;

Node* call(FuncGraph* g, const char* op, std::vector<Node*> args, ir::Primitive::Attrs attrs = {}) {
  return g->add_call(ops::make_op(op, std::move(attrs)), args);
}

Value input() { return Value::tensor(Tensor::from_doubles(DType::kFloat32, {4}, {1, 2, 3, 4})); }

void BM_CompiledAddChain(benchmark::State& state) {
  ir::Module m;
  FuncGraph* g = m.add_graph("chain");
  Node* x = g->add_parameter("x", Abstract::tensor(DType::kFloat32, {4}));
  Node* h = x;
  for (int i = 0; i < kChain; ++i) h = call(g, "Add", {h, x});
  g->set_output(h);
  auto exe = runtime::compile(*g);
  Value xv = input();
  for (auto _ : state) benchmark::DoNotOptimize(exe->run({xv}));
  state.counters["per_op"] = benchmark::Counter(kChain, benchmark::Counter::kIsIterationInvariantRate |
                                                            benchmark::Counter::kInvert);
}
BENCHMARK(BM_CompiledAddChain)->Unit(benchmark::kMicrosecond);

struct CountLaunches : runtime::Observer {
  void after_launch(const runtime::LaunchEvent&) override { ++launches; }
  std::int64_t launches = 0;
};

void BM_CompiledAddChainObserved(benchmark::State& state) {
  ir::Module m;
  FuncGraph* g = m.add_graph("chain");
  Node* x = g->add_parameter("x", Abstract::tensor(DType::kFloat32, {4}));
  Node* h = x;
  for (int i = 0; i < kChain; ++i) h = call(g, "Add", {h, x});
  g->set_output(h);
  auto exe = runtime::compile(*g);
  auto count = std::make_shared<CountLaunches>();
  exe->set_observers(std::make_shared<runtime::ObserverList>(runtime::ObserverList{count}));
  Value xv = input();
  for (auto _ : state) benchmark::DoNotOptimize(exe->run({xv}));
  state.counters["per_op"] = benchmark::Counter(kChain, benchmark::Counter::kIsIterationInvariantRate |
                                                            benchmark::Counter::kInvert);
}
BENCHMARK(BM_CompiledAddChainObserved)->Unit(benchmark::kMicrosecond);

void BM_EagerAddChain(benchmark::State& state) {
  ir::PrimitivePtr add = ops::make_op("Add");
  Value xv = input();
  for (auto _ : state) {
    Value h = xv;
    for (int i = 0; i < kChain; ++i) {
      std::vector<Value> args = {h, xv};
      h = backend::run_op(*add, args);
    }
    benchmark::DoNotOptimize(h);
  }
  state.counters["per_op"] = benchmark::Counter(kChain, benchmark::Counter::kIsIterationInvariantRate |
                                                            benchmark::Counter::kInvert);
}
BENCHMARK(BM_EagerAddChain)->Unit(benchmark::kMicrosecond);

// grad(20 × (Conv2D 3x3 same → ReLU), Flatten, MatMul, SparseSoftmaxCrossEntropyWithLogits)
// with respect to every weight, after inline,simplify,dce.
FuncGraph* build_cnn_grad(ir::Module& m, int layers) {
  FuncGraph* f = m.add_graph("cnn");
  Node* x = f->add_parameter("x", Abstract::tensor(DType::kFloat32, {8, 3, 16, 16}));
  Node* labels = f->add_parameter("labels", Abstract::tensor(DType::kInt32, {8}));
  Node* h = x;
  std::int64_t c = 3;
  for (int i = 0; i < layers; ++i) {
    std::string name = "w";
    name += std::to_string(i);
    ir::Parameter* w = f->add_parameter(name, Abstract::tensor(DType::kFloat32, {8, c, 3, 3}));
    w->set_default(Tensor(DType::kFloat32, {8, c, 3, 3}));
    h = call(f, "ReLU", {call(f, "Conv2D", {h, w}, {{"out_channel", Value::i64(8)},
                                                    {"kernel_size", Value::ints({3, 3})},
                                                    {"pad_mode", Value::string("same")}})});
    c = 8;
  }
  ir::Parameter* fc = f->add_parameter("fc", Abstract::tensor(DType::kFloat32, {8 * 16 * 16, 10}));
  fc->set_default(Tensor(DType::kFloat32, {8 * 16 * 16, 10}));
  h = call(f, "MatMul", {call(f, "Flatten", {h}), fc});
  f->set_output(call(f, "SparseSoftmaxCrossEntropyWithLogits", {h, labels}));
  m.set_entry(f);
  FuncGraph* g = autodiff::grad(f, {.get_by_list = true, .return_value = true});
  m.set_entry(g);
  passes::PassManager::parse("inline,simplify,dce").run(m);
  return m.entry();
}

void BM_CompileCnn20(benchmark::State& state) {
  ir::Module m;
  FuncGraph* g = build_cnn_grad(m, 20);
  std::size_t launches = 0;
  for (auto _ : state) {
    auto exe = runtime::compile(*g);
    launches = exe->launches().size();
    benchmark::DoNotOptimize(exe);
  }
  state.counters["launches"] = static_cast<double>(launches);
}
BENCHMARK(BM_CompileCnn20)->Unit(benchmark::kMillisecond);

// For comparison: autodiff plus the pass pipeline that produce the graph compile() takes.
void BM_GradAndPassesCnn20(benchmark::State& state) {
  for (auto _ : state) {
    ir::Module m;
    benchmark::DoNotOptimize(build_cnn_grad(m, 20));
  }
}
BENCHMARK(BM_GradAndPassesCnn20)->Unit(benchmark::kMillisecond);

}  // namespace

// The model zoo's LeNet-5 (seed 1) in graph mode and eval, and one (1, 1, 32, 32) image.
struct LeNetBatch1 {
  std::shared_ptr<nn::Cell> net;
  Tensor x{DType::kFloat32, {1, 1, 32, 32}};
  LeNetBatch1() {
    random::seed_all(1);
    nn::set_context_mode(nn::ExecMode::kGraph);
    net = models::recipe("lenet").make_network({});
    net->set_train(false);
    random::RandomStream("bench/lenet_b1").fill_normal(x, 0.0, 1.0);
  }
};

void BM_LeNetCellBatch1(benchmark::State& state) {
  LeNetBatch1 b;
  for (auto _ : state) {
    Tensor y = (*b.net)(ops::Var(Value::tensor(b.x))).value().as_tensor();
    benchmark::DoNotOptimize(y.raw_data());
  }
}
BENCHMARK(BM_LeNetCellBatch1)->Unit(benchmark::kMicrosecond);

void BM_LeNetPredictBatch1(benchmark::State& state) {
  LeNetBatch1 b;
  nn::Model model(b.net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true),
                  nn::OptimizerSpec{});
  for (auto _ : state) {
    Tensor y = model.predict(b.x);
    benchmark::DoNotOptimize(y.raw_data());
  }
}
BENCHMARK(BM_LeNetPredictBatch1)->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
