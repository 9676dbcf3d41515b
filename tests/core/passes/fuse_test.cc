// fuse end to end: a network's graph interpreted before and after the pass, on random inputs,
// gives the same outputs — bit for bit where the fused kernels do the unfused arithmetic
// (products with bias and ReLU/ReLU6, plain arithmetic chains), within 1e-6 relative where a
// chain uses Eigen's vectorized exp/tanh.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "core/ir/anf.h"
#include "core/ir/parser.h"
#include "core/ir/value.h"
#include "core/passes/pass.h"
#include "runtime/interpreter.h"

namespace loom::passes {
namespace {

using ir::Value;

// Attributes are written out in full: the interpreter reads a parsed primitive as it stands.
// Two Dense layers (BiasAdd + ReLU, Add + ReLU6), a conv block, an arithmetic chain with a
// broadcast bias and a scalar-shaped input, and a transcendental diamond (an
// intermediate with two users, both inside the chain).
constexpr const char* kNet = R"(
subgraph @main(%x: <Tensor[Float32], (64, 48)>, %w1: <Tensor[Float32], (300, 48)>,
               %b1: <Tensor[Float32], (300)>, %w2: <Tensor[Float32], (300, 70)>,
               %b2: <Tensor[Float32], (70)>, %y: <Tensor[Float32], (64, 300)>,
               %img: <Tensor[Float32], (2, 3, 9, 9)>, %k: <Tensor[Float32], (4, 3, 3, 3)>,
               %kb: <Tensor[Float32], (4)>, %s: <Tensor[Float32], (1, 1)>) {
  %mm = MatMul(%x, %w1) {transpose_a: Bool(0), transpose_b: Bool(1)} : <Tensor[Float32], (64, 300)>
  %z = BiasAdd(%mm, %b1) {format: "NCHW"} : <Tensor[Float32], (64, 300)>
  %h = ReLU(%z) : <Tensor[Float32], (64, 300)>
  %mm2 = MatMul(%h, %w2) {transpose_a: Bool(0), transpose_b: Bool(0)} : <Tensor[Float32], (64, 70)>
  %z2 = Add(%mm2, %b2) : <Tensor[Float32], (64, 70)>
  %out1 = ReLU6(%z2) : <Tensor[Float32], (64, 70)>
  %m = Mul(%h, %y) : <Tensor[Float32], (64, 300)>
  %a = Add(%m, %b1) : <Tensor[Float32], (64, 300)>
  %d = RealDiv(%a, %s) : <Tensor[Float32], (64, 300)>
  %q = Square(%d) : <Tensor[Float32], (64, 300)>
  %mx = Maximum(%q, %y) : <Tensor[Float32], (64, 300)>
  %out2 = Sub(%mx, %h) : <Tensor[Float32], (64, 300)>
  %e = Exp(%y) : <Tensor[Float32], (64, 300)>
  %t = Tanh(%e) : <Tensor[Float32], (64, 300)>
  %sg = Sigmoid(%e) : <Tensor[Float32], (64, 300)>
  %out3 = Mul(%t, %sg) : <Tensor[Float32], (64, 300)>
  %c = Conv2D(%img, %k) {dilation: (I64(1), I64(1)), format: "NCHW", group: I64(1), kernel_size: (I64(3), I64(3)), mode: I64(1), out_channel: I64(4), pad: (I64(0), I64(0), I64(0), I64(0)), pad_mode: "same", stride: (I64(1), I64(1))} : <Tensor[Float32], (2, 4, 9, 9)>
  %cb = BiasAdd(%c, %kb) {format: "NCHW"} : <Tensor[Float32], (2, 4, 9, 9)>
  %out4 = ReLU(%cb) : <Tensor[Float32], (2, 4, 9, 9)>
  %all = MakeTuple(%out1, %out2, %out3, %out4)
  Return(%all)
}
)";

std::vector<Value> random_args(const ir::FuncGraph& g, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(-2, 2);
  std::vector<Value> args;
  for (const ir::Parameter* p : g.parameters()) {
    const Shape& shape = p->abstract()->shape();
    std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
    for (double& x : v) x = dist(rng);
    if (p->name() == "s") v[0] = 0.75;  // the divisor
    args.push_back(Value::tensor(Tensor::from_doubles(DType::kFloat32, shape, v)));
  }
  return args;
}

std::size_t count_calls(const ir::FuncGraph& g, std::string_view op) {
  const auto order = g.topo_order();
  return static_cast<std::size_t>(std::count_if(
      order.begin(), order.end(), [&](const ir::CNode* c) { return c->is_call_to(op); }));
}

TEST(Fuse, FusedGraphComputesWhatTheOriginalDoes) {
  std::unique_ptr<ir::Module> module = ir::parse_module(kNet);
  const std::vector<Value> args = random_args(*module->entry(), 7);
  const Value before = runtime::interpret(*module->entry(), args);

  PassManager pm = PassManager::parse("fuse");
  ASSERT_TRUE(pm.run(*module));
  const ir::FuncGraph& g = *module->entry();
  EXPECT_EQ(count_calls(g, "MatMulBiasAct"), 2u);
  EXPECT_EQ(count_calls(g, "Conv2DBiasAct"), 1u);
  // out2's chain, and out3's diamond: %e's two users are both in out3's group, so it joins.
  EXPECT_EQ(count_calls(g, "FusedElementwise"), 2u);
  EXPECT_EQ(count_calls(g, "Exp"), 0u);
  EXPECT_EQ(count_calls(g, "MatMul") + count_calls(g, "BiasAdd") + count_calls(g, "ReLU"), 0u);
  const Value after = runtime::interpret(g, args);

  ASSERT_TRUE(before.is_tuple() && after.is_tuple());
  ASSERT_EQ(before.elements().size(), after.elements().size());
  for (std::size_t o = 0; o < before.elements().size(); ++o) {
    const Tensor& a = before.elements()[o].as_tensor();
    const Tensor& b = after.elements()[o].as_tensor();
    ASSERT_EQ(a.shape(), b.shape()) << "output " << o;
    const bool exact = o != 2;  // out3 uses Eigen's exp and tanh
    for (std::int64_t i = 0; i < a.numel(); ++i) {
      if (exact) {
        ASSERT_EQ(a.get(i), b.get(i)) << "output " << o << " element " << i;
      } else {
        ASSERT_NEAR(a.get(i), b.get(i), 1e-6 * std::max(1.0, std::abs(a.get(i))))
            << "output " << o << " element " << i;
      }
    }
  }
  // A second run finds nothing left to fuse.
  EXPECT_FALSE(PassManager::parse("fuse").run(*module));
}

}  // namespace
}  // namespace loom::passes
