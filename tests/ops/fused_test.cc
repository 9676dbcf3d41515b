// The fused ops: table rows (not differentiable: they are made after autodiff), each fused op
// against the unfused chain it stands for — bit for bit where the arithmetic is the same, within
// 1e-6 relative where Eigen's vectorized exp/log/tanh may split packets differently — and the
// errors of malformed programs and mismatched shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backends/eager.h"
#include "core/ir/error.h"
#include "ops/op.h"
#include "tests/ops/op_table.h"
#include "tests/ops/test_util.h"

namespace loom::testing {
namespace {

using ir::Value;

Value step(const char* op, std::vector<std::int64_t> operands) {
  std::vector<Value> e{Value::string(op)};
  for (std::int64_t i : operands) e.push_back(Value::i64(i));
  return Value::tuple(std::move(e));
}

Value program(std::vector<Value> steps) { return Value::tuple(std::move(steps)); }

ir::Primitive::Attrs conv_attrs(std::int64_t out_channel, std::string pad_mode = "valid") {
  return {{"out_channel", Value::i64(out_channel)},
          {"kernel_size", Value::ints({3, 3})},
          {"pad_mode", Value::string(std::move(pad_mode))}};
}

ir::Primitive::Attrs with(ir::Primitive::Attrs attrs, const char* key, Value v) {
  attrs[key] = std::move(v);
  return attrs;
}

// (x * y + b) then ReLU, b broadcast along the last axis.
const Value kMulAddRelu = program({step("Mul", {0, 1}), step("Add", {3, 2}), step("ReLU", {4})});

static const CaseRegistrar kRows({
    {.name = "matmul_bias_act", .op = "MatMulBiasAct",
     .attrs = {{"act", Value::string("relu")}},
     .inputs = {{.shape = {3, 4}}, {.shape = {4, 5}}, {.shape = {5}}}, .check_grad = false},
    {.name = "matmul_bias_act_transpose_b_relu6", .op = "MatMulBiasAct",
     .attrs = {{"transpose_b", Value::boolean(true)}, {"act", Value::string("relu6")}},
     .inputs = {{.shape = {3, 4}}, {.shape = {5, 4}}, {.shape = {5}}}, .check_grad = false},
    {.name = "conv2d_bias_act", .op = "Conv2DBiasAct",
     .attrs = with(conv_attrs(4, "same"), "act", Value::string("relu")),
     .inputs = {{.shape = {2, 3, 5, 5}}, {.shape = {4, 3, 3, 3}}, {.shape = {4}}},
     .check_grad = false},
    {.name = "fused_elementwise", .op = "FusedElementwise",
     .attrs = {{"program", kMulAddRelu}},
     .inputs = {{.shape = {4, 5}}, {.shape = {4, 5}}, {.shape = {5}}}, .check_grad = false},
});

Value random_tensor(Shape shape, std::uint64_t seed, bool f64, Gen gen = Gen::kNormal) {
  return Value::tensor(make_tensor(InputSpec{.shape = std::move(shape), .gen = gen}, seed, f64));
}

// Bitwise (tolerance 0) or relative-tolerance equality of two tensors.
void expect_same(const Value& fused, const Value& unfused, double tolerance) {
  ASSERT_TRUE(fused.is_tensor() && unfused.is_tensor());
  const Tensor& a = fused.as_tensor();
  const Tensor& b = unfused.as_tensor();
  ASSERT_EQ(a.shape(), b.shape());
  ASSERT_EQ(a.dtype(), b.dtype());
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    if (tolerance == 0) {
      ASSERT_EQ(a.get(i), b.get(i)) << "element " << i;
    } else {
      ASSERT_NEAR(a.get(i), b.get(i), tolerance * std::max(1.0, std::abs(b.get(i))))
          << "element " << i;
    }
  }
}

Value act(const std::string& name, Value x) {
  if (name == "relu") return backend::run_op("ReLU", {std::move(x)});
  if (name == "relu6") return backend::run_op("ReLU6", {std::move(x)});
  return x;
}

class FusedBiasAct : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(FusedBiasAct, MatMulEqualsUnfusedBitwise) {
  const auto& [act_name, f64] = GetParam();
  for (bool tb : {false, true}) {
    // Large enough for gemm's own blocking and several parallel_for chunks of the bias pass.
    const Value x = random_tensor({67, 130}, 1, f64);
    const Value w = random_tensor(tb ? Shape{300, 130} : Shape{130, 300}, 2, f64);
    const Value b = random_tensor({300}, 3, f64, Gen::kUniform01);
    const ir::Primitive::Attrs mm = {{"transpose_b", Value::boolean(tb)}};
    const Value unfused =
        act(act_name, backend::run_op("BiasAdd", {backend::run_op("MatMul", {x, w}, mm), b}));
    const Value fused = backend::run_op("MatMulBiasAct", {x, w, b},
                                        with(mm, "act", Value::string(act_name)));
    expect_same(fused, unfused, 0);
  }
}

TEST_P(FusedBiasAct, Conv2DEqualsUnfusedBitwise) {
  const auto& [act_name, f64] = GetParam();
  const Value x = random_tensor({2, 3, 9, 11}, 4, f64);
  const Value w = random_tensor({5, 3, 3, 3}, 5, f64);
  const Value b = random_tensor({5}, 6, f64);
  const ir::Primitive::Attrs conv = with(conv_attrs(5, "pad"), "pad", Value::ints({1, 0, 2, 1}));
  const Value unfused =
      act(act_name, backend::run_op("BiasAdd", {backend::run_op("Conv2D", {x, w}, conv), b}));
  const Value fused =
      backend::run_op("Conv2DBiasAct", {x, w, b}, with(conv, "act", Value::string(act_name)));
  expect_same(fused, unfused, 0);
}

INSTANTIATE_TEST_SUITE_P(Acts, FusedBiasAct,
                         ::testing::Combine(::testing::Values("none", "relu", "relu6"),
                                            ::testing::Bool()));

// Runs `prog` both fused and step by step through the unfused kernels.
void expect_program_matches(const Value& prog, const std::vector<Value>& inputs,
                            double tolerance) {
  std::vector<Value> values = inputs;
  for (const ops::FusedStep& s : ops::fused_program(prog, inputs.size())) {
    std::vector<Value> args;
    for (std::size_t i : s.operands) args.push_back(values[i]);
    values.push_back(backend::run_op(s.op, args));
  }
  const Value fused = backend::run_op("FusedElementwise", inputs, {{"program", prog}});
  expect_same(fused, values.back(), tolerance);
}

TEST(FusedElementwise, ArithmeticChainEqualsUnfusedBitwise) {
  for (bool f64 : {false, true}) {
    // 3 x 7000 spans several blocks and chunks, with a partial last block; the bias and the
    // scalar broadcast.
    const std::vector<Value> in = {random_tensor({3, 7000}, 7, f64),
                                   random_tensor({3, 7000}, 8, f64),
                                   random_tensor({7000}, 9, f64, Gen::kPositive),
                                   random_tensor({3, 1}, 10, f64)};
    const Value prog = program({step("Mul", {0, 1}), step("RealDiv", {4, 2}),
                                step("Sub", {5, 3}), step("Maximum", {6, 0}),
                                step("Minimum", {7, 1}), step("Square", {8}), step("Neg", {9}),
                                step("Abs", {10}), step("Sqrt", {11}), step("ReLU6", {12}),
                                step("Add", {13, 13}), step("ReLU", {14})});
    expect_program_matches(prog, in, 0);
  }
}

TEST(FusedElementwise, TranscendentalChainEqualsUnfused) {
  for (bool f64 : {false, true}) {
    const std::vector<Value> in = {random_tensor({5, 3001}, 11, f64),
                                   random_tensor({5, 3001}, 12, f64, Gen::kPositive)};
    const Value prog = program({step("Exp", {0}), step("Log", {1}), step("Sigmoid", {2}),
                                step("Tanh", {3}), step("Mul", {4, 5}), step("Add", {6, 0})});
    expect_program_matches(prog, in, 1e-6);
  }
}

TEST(FusedElementwise, InferenceAgreesWithTheComponents) {
  const std::vector<ir::AbstractPtr> in = {ir::Abstract::tensor(DType::kFloat32, {4, 5}),
                                           ir::Abstract::tensor(DType::kFloat32, {4, 5}),
                                           ir::Abstract::tensor(DType::kFloat32, {5})};
  const ir::AbstractPtr out =
      ops::infer(*ops::make_op("FusedElementwise", {{"program", kMulAddRelu}}), in);
  ASSERT_TRUE(out->is_tensor());
  EXPECT_EQ(out->shape(), (Shape{4, 5}));
  EXPECT_EQ(out->dtype(), DType::kFloat32);
}

template <typename E>
std::string infer_error(const std::string& op, ir::Primitive::Attrs attrs,
                        const std::vector<ir::AbstractPtr>& inputs) {
  return error_of<E>([&] { ops::infer(*ops::make_op(op, std::move(attrs)), inputs); });
}

TEST(FusedElementwise, MalformedProgramsAreClearErrors) {
  const std::vector<ir::AbstractPtr> two = {ir::Abstract::tensor(DType::kFloat32, {4}),
                                            ir::Abstract::tensor(DType::kFloat32, {4})};
  EXPECT_EQ(infer_error<ValueError>("FusedElementwise",
                                    {{"program", program({step("MatMul", {0, 1})})}}, two),
            "FusedElementwise: expected program steps of a fusable elementwise op, got "
            "'MatMul'");
  EXPECT_NE(infer_error<ValueError>("FusedElementwise",
                                    {{"program", program({step("Add", {0, 2})})}}, two)
                .find("expected program operand indices below 2"),
            std::string::npos);
  EXPECT_NE(infer_error<ValueError>("FusedElementwise",
                                    {{"program", program({step("Add", {0})})}}, two)
                .find("expected program a 'Add' step to take 2 operands"),
            std::string::npos);
}

TEST(FusedBiasAct, ShapeErrorsNameTheFusedOp) {
  const std::vector<ir::AbstractPtr> in = {ir::Abstract::tensor(DType::kFloat32, {3, 4}),
                                           ir::Abstract::tensor(DType::kFloat32, {4, 5}),
                                           ir::Abstract::tensor(DType::kFloat32, {4})};
  const std::string e = infer_error<ShapeError>("MatMulBiasAct", {}, in);
  EXPECT_NE(e.find("BiasAdd: expected a rank-1 bias of length 5"), std::string::npos) << e;
  EXPECT_NE(e.find("MatMulBiasAct"), std::string::npos) << e;
  EXPECT_THROW(ops::make_op("MatMulBiasAct", {{"act", Value::string("gelu")}}), ValueError);
}

}  // namespace
}  // namespace loom::testing
