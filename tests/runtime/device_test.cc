// The runtime is device-generic: a plan compiled for a backend other than the CPU gets its arena,
// its constants, its zero-fills and its copies from that backend, reads If predicates through
// it, and never touches a device tensor from the host. The backend here is the tests' fake GPU
// (tests/fake_device.h): every storage it makes says Device::kCUDA, so a host accessor
// (Tensor::get, clone...) would throw, and its memory is closed to the host outside its own
// kernels and copies, so a raw host read (memset, memcpy) would fault. Its kernels are the CPU's.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>

#include "backends/backend.h"
#include "backends/eager.h"
#include "core/ir/anf.h"
#include "core/ir/control_flow.h"
#include "core/ir/error.h"
#include "ops/op.h"
#include "runtime/compiled_function.h"
#include "runtime/executable.h"
#include "runtime/interpreter.h"
#include "tests/fake_device.h"

namespace loom::runtime {
namespace {

using ir::Abstract;
using ir::FuncGraph;
using ir::Module;
using ir::Node;
using ir::Value;

using testing::FakeDevice;

FakeDevice& fake() { return testing::fake_device(); }

Node* call(FuncGraph* g, const char* op, std::vector<Node*> args, ir::Primitive::Attrs a = {}) {
  return g->add_call(ops::make_op(op, std::move(a)), args);
}

// y = If(sum(relu(x @ w) + c) > 0, exp, neg)(relu(x @ w) + c), c a constant.
FuncGraph* build(Module& m) {
  FuncGraph* g = m.add_graph("main");
  Node* x = g->add_parameter("x", Abstract::tensor(DType::kFloat32, {2, 3}));
  Node* w = g->add_parameter("w", Abstract::tensor(DType::kFloat32, {3, 2}));
  Node* c = g->add_value(Value::tensor(Tensor::from_vector<float>({2}, {0.5f, -0.25f})));
  Node* h = call(g, "Add", {call(g, "ReLU", {call(g, "MatMul", {x, w})}), c});
  Node* s = call(g, "ReduceSum", {h});
  Node* pred = call(g, "Greater", {s, g->add_value(Value::tensor(Tensor::scalar(DType::kFloat32, 0)))});
  Node* y = ir::cond(g, pred, {h},
      [&](FuncGraph* b, const std::vector<Node*>& p) { return call(b, "Exp", {p[0]}); },
      [&](FuncGraph* b, const std::vector<Node*>& p) { return call(b, "Neg", {p[0]}); });
  g->set_output(y);
  m.set_entry(g);
  return g;
}

TEST(Device, APlanOnAnotherBackendUsesItForEverything) {
  FakeDevice& dev = fake();
  ASSERT_EQ(&backend::get_backend(Device::kCUDA), &dev);
  Module m;
  FuncGraph* g = build(m);
  const Tensor x = Tensor::from_vector<float>({2, 3}, {1, -2, 3, 0.5f, 1, -1});
  for (float sign : {1.0f, -1.0f}) {  // both branches
    SCOPED_TRACE(sign > 0 ? "then" : "else");
    Tensor w = Tensor::from_vector<float>({3, 2}, {0.5f, -1, 1, 0.25f, -0.5f, 2});
    for (std::int64_t i = 0; i < w.numel(); ++i) w.set(i, sign * w.get(i));
    const Value want = interpret(*g, {Value::tensor(x), Value::tensor(w)});

    const long allocations = dev.allocations(), to_host = dev.to_host();
    auto exe = compile(*g, dev);
    EXPECT_FALSE(exe->interpreted());
    const Value got = exe->run({Value::tensor(backend::to_device(x, dev)),
                                Value::tensor(backend::to_device(w, dev))});
    ASSERT_TRUE(got.is_tensor());
    EXPECT_EQ(got.as_tensor().device(), Device::kCUDA);
    EXPECT_TRUE(backend::to_host(got.as_tensor()).bitwise_equal(want.as_tensor()));
    EXPECT_GT(dev.allocations(), allocations);  // the arena (and the uploaded constant)
    EXPECT_GT(dev.to_host(), to_host + 1);      // the predicate was read through the backend
  }
  EXPECT_GT(dev.zero_fills() + dev.device_copies(), 0);
}

// The fake device's memory is closed to the host outside its kernels and copies: a raw host read
// faults (what a missing to_host would do on a GPU), and the accessors refuse.
TEST(Device, TheFakeDevicesMemoryIsClosedToTheHost) {
  if (!fake().guarded()) GTEST_SKIP() << "LOOM_FAKE_DEVICE_GUARD=0";
  const Tensor d = backend::to_device(Tensor::from_vector<float>({2}, {1, 2}), fake());
  EXPECT_EQ(backend::to_host(d).get(1), 2.0);
  EXPECT_THROW(d.get(0), TypeError);
  EXPECT_DEATH(
      {
        const volatile float* p = static_cast<const float*>(d.raw_data());
        std::exit(p[0] == 1.0f ? 3 : 4);
      },
      "fake device: segmentation fault");
}

TEST(Device, ArgumentsMustLiveOnThePlansDevice) {
  Module m;
  FuncGraph* g = build(m);
  auto exe = compile(*g, fake());
  try {
    exe->run({Value::tensor(Tensor(DType::kFloat32, {2, 3})),
              Value::tensor(Tensor(DType::kFloat32, {3, 2}))});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(), "run: expected argument 0 on CUDA, got a tensor on CPU");
  }
}

// Eager ops run where their tensors are; mixing devices is an error.
TEST(Device, EagerOpsRunOnTheirTensorsDevice) {
  FakeDevice& dev = fake();
  const Tensor a = backend::to_device(Tensor::from_vector<float>({2}, {1, -2}), dev);
  const Value r = backend::run_op("ReLU", {Value::tensor(a)});
  EXPECT_EQ(r.as_tensor().device(), Device::kCUDA);
  EXPECT_EQ(backend::to_host(r.as_tensor()).get(1), 0.0);
  try {
    backend::run_op("Add", {Value::tensor(a), Value::tensor(Tensor::from_vector<float>({2}, {1, 1}))});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(), "Add: expected every tensor on CUDA, got one on CPU");
  }
}

// A compiled function on the device: the pipeline, the plan and the donations all there.
TEST(Device, CompiledFunctionsCompileForTheirBackend) {
  Module m;
  FuncGraph* g = build(m);
  auto f = CompiledFunction::of_graph(g, {.backend = &fake()});
  const Tensor x = Tensor::from_vector<float>({2, 3}, {1, -2, 3, 0.5f, 1, -1});
  const Tensor w = Tensor::from_vector<float>({3, 2}, {0.5f, -1, 1, 0.25f, -0.5f, 2});
  const Value want = interpret(*g, {Value::tensor(x), Value::tensor(w)});
  const Value got = (*f)({Value::tensor(backend::to_device(x, fake())),
                          Value::tensor(backend::to_device(w, fake()))});
  EXPECT_TRUE(backend::to_host(got.as_tensor()).bitwise_equal(want.as_tensor()));
}

}  // namespace
}  // namespace loom::runtime
