// Rows and exact cases of the optimizer updates (ApplyMomentum, CombineMomentum, ApplyAdam): two steps of each
// with the numbers written out, every attribute mode, and the inference errors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backends/eager.h"
#include "backends/thread_pool.h"
#include "core/ir/error.h"
#include "ops/op.h"
#include "tests/ops/op_table.h"
#include "tests/ops/test_util.h"

namespace loom::testing {
namespace {

using ir::Value;

InputSpec param(Shape shape, Gen gen = Gen::kNormal) { return {.shape = shape, .gen = gen}; }
InputSpec scalar(Gen gen = Gen::kUniform01) { return {.shape = {}, .gen = gen}; }

std::vector<InputSpec> momentum_inputs() {
  return {param({3, 4}), param({3, 4}), scalar(), param({3, 4}), scalar()};
}

std::vector<InputSpec> adam_inputs() {
  return {param({2, 5}), param({2, 5}), param({2, 5}, Gen::kPositive),
          scalar(),      scalar(),      scalar(),
          scalar(),      scalar(),      scalar(),
          param({2, 5})};
}

// Optimizer updates are not differentiable: their rows only run forward.
OpCase row(std::string name, std::string op, ir::Primitive::Attrs attrs,
           std::vector<InputSpec> inputs) {
  OpCase c;
  c.name = std::move(name);
  c.op = std::move(op);
  c.attrs = std::move(attrs);
  c.inputs = std::move(inputs);
  c.check_grad = false;
  return c;
}

static const CaseRegistrar kRows({
    row("apply_momentum", "ApplyMomentum", {}, momentum_inputs()),
    row("apply_momentum_nesterov_scaled", "ApplyMomentum",
        {{"use_nesterov", Value::boolean(true)}, {"gradient_scale", Value::f32(0.5f)}},
        momentum_inputs()),
    row("combine_momentum", "CombineMomentum", {},
        {scalar(), scalar(), param({3, 4}), param({3, 4}), param({3, 4}), param({5}), param({5}),
         param({5})}),
    row("combine_momentum_nesterov_scaled", "CombineMomentum",
        {{"use_nesterov", Value::boolean(true)}, {"gradient_scale", Value::f32(0.5f)}},
        {scalar(), scalar(), param({2, 3}), param({2, 3}), param({2, 3})}),
    row("apply_adam", "ApplyAdam", {}, adam_inputs()),
    row("apply_adam_nesterov", "ApplyAdam", {{"use_nesterov", Value::boolean(true)}},
        adam_inputs()),
});

Value vec(DType dt, std::vector<double> v) {
  return Value::tensor(Tensor::from_doubles(dt, {static_cast<std::int64_t>(v.size())}, v));
}
Value num(DType dt, double v) { return Value::tensor(Tensor::scalar(dt, v)); }

class OptimizerByDType : public ::testing::TestWithParam<DType> {
 protected:
  DType dt() const { return GetParam(); }
  double tol() const { return dt() == DType::kFloat64 ? 1e-12 : 2e-6; }
};

// Momentum 0.9, learning rate 0.1, starting from variable (1, 2) and accumulation (0.5, -1);
// gradients (0.2, 0.4) then (-0.1, 0.3).
std::vector<Value> momentum_steps(DType dt, ir::Primitive::Attrs attrs) {
  Value var = vec(dt, {1, 2}), accum = vec(dt, {0.5, -1});
  std::vector<Value> results;
  for (const std::vector<double>& g : {std::vector<double>{0.2, 0.4}, {-0.1, 0.3}}) {
    Value out = backend::run_op("ApplyMomentum",
                                {var, accum, num(dt, 0.1), vec(dt, g), num(dt, 0.9)}, attrs);
    var = out.elements()[0];
    accum = out.elements()[1];
    results.push_back(var);
    results.push_back(accum);
  }
  return results;
}

TEST_P(OptimizerByDType, MomentumTwoSteps) {
  // accumulation = 0.9 * (0.5, -1) + (0.2, 0.4) = (0.65, -0.5); variable -= 0.1 * that.
  // Then 0.9 * (0.65, -0.5) + (-0.1, 0.3) = (0.485, -0.15).
  const std::vector<Value> r = momentum_steps(dt(), {});
  expect_values(r[0], {0.935, 2.05}, tol());
  expect_values(r[1], {0.65, -0.5}, tol());
  expect_values(r[2], {0.8865, 2.065}, tol());
  expect_values(r[3], {0.485, -0.15}, tol());
  EXPECT_EQ(r[0].as_tensor().dtype(), dt());
}

TEST_P(OptimizerByDType, NesterovMomentumTwoSteps) {
  // variable -= 0.1 * gradient + 0.1 * 0.9 * accumulation:
  // step 1: 1 - (0.02 + 0.0585) = 0.9215, 2 - (0.04 - 0.045) = 2.005;
  // step 2: 0.9215 - (-0.01 + 0.04365) = 0.88785, 2.005 - (0.03 - 0.0135) = 1.9885.
  const std::vector<Value> r = momentum_steps(dt(), {{"use_nesterov", Value::boolean(true)}});
  expect_values(r[0], {0.9215, 2.005}, tol());
  expect_values(r[1], {0.65, -0.5}, tol());
  expect_values(r[2], {0.88785, 1.9885}, tol());
  expect_values(r[3], {0.485, -0.15}, tol());
}

TEST_P(OptimizerByDType, MomentumGradientScale) {
  // gradient_scale 2: accumulation = 0.9 * (0.5, -1) + 2 * (0.2, 0.4) = (0.85, -0.1);
  // step 2: 0.9 * (0.85, -0.1) + 2 * (-0.1, 0.3) = (0.565, 0.51).
  const std::vector<Value> r = momentum_steps(dt(), {{"gradient_scale", Value::f32(2.0f)}});
  expect_values(r[0], {0.915, 2.01}, tol());
  expect_values(r[1], {0.85, -0.1}, tol());
  expect_values(r[2], {0.8585, 1.959}, tol());
  expect_values(r[3], {0.565, 0.51}, tol());
}

// beta1 0.9, beta2 0.999, epsilon 1e-8, lr 0.01, from var (1, -0.5), m (0.1, 0), v (0.01, 0.04);
// gradients (0.2, -0.4) at beta powers (0.9, 0.999), then (-0.1, 0.3) at (0.81, 0.998001).
std::vector<Value> adam_steps(DType dt, ir::Primitive::Attrs attrs) {
  Value var = vec(dt, {1, -0.5}), m = vec(dt, {0.1, 0}), v = vec(dt, {0.01, 0.04});
  const double powers[2][2] = {{0.9, 0.999}, {0.81, 0.998001}};
  const std::vector<double> grads[2] = {{0.2, -0.4}, {-0.1, 0.3}};
  std::vector<Value> results;
  for (int s = 0; s < 2; ++s) {
    Value out =
        backend::run_op("ApplyAdam",
                        {var, m, v, num(dt, powers[s][0]), num(dt, powers[s][1]), num(dt, 0.01),
                         num(dt, 0.9), num(dt, 0.999), num(dt, 1e-8), vec(dt, grads[s])},
                        attrs);
    var = out.elements()[0];
    m = out.elements()[1];
    v = out.elements()[2];
    results.insert(results.end(), {var, m, v});
  }
  return results;
}

TEST_P(OptimizerByDType, AdamTwoSteps) {
  // Step 1: lr_t = 0.01 * sqrt(0.001) / 0.1 = 0.0031622776601683794;
  // m = (0.11, -0.04), v = (0.01003, 0.04012);
  // var = 1 - lr_t * 0.11 / (sqrt(0.01003) + 1e-8) = 0.9965267009680814,
  //       -0.5 + lr_t * 0.04 / (sqrt(0.04012) + 1e-8) = -0.4993684910535775.
  // Step 2: lr_t = 0.01 * sqrt(0.001999) / 0.19; m = (0.089, -0.006),
  // v = (0.01002997, 0.04016988).
  const std::vector<Value> r = adam_steps(dt(), {});
  expect_values(r[0], {0.9965267009680814, -0.4993684910535775}, tol());
  expect_values(r[1], {0.11, -0.04}, tol());
  expect_values(r[2], {0.01003, 0.04012}, tol());
  expect_values(r[3], {0.9944355136216532, -0.4992980454722015}, tol());
  expect_values(r[4], {0.089, -0.006}, tol());
  expect_values(r[5], {0.01002997, 0.04016988}, tol());
}

TEST_P(OptimizerByDType, NesterovAdamTwoSteps) {
  // The step uses beta1 * m + (1 - beta1) * g: (0.9 * 0.11 + 0.1 * 0.2, 0.9 * -0.04 - 0.04) =
  // (0.119, -0.076) in step 1 and (0.0701, 0.0246) in step 2.
  const std::vector<Value> r = adam_steps(dt(), {{"use_nesterov", Value::boolean(true)}});
  expect_values(r[0], {0.996242521956379, -0.49880013300179726}, tol());
  expect_values(r[1], {0.11, -0.04}, tol());
  expect_values(r[3], {0.9945954182149788, -0.4990889598854388}, tol());
  expect_values(r[5], {0.01002997, 0.04016988}, tol());
}

// CombineMomentum is ApplyMomentum per parameter, bitwise: three parameters (one empty, one
// longer than a parallel block so the index space is cut inside it), plain and Nesterov with a
// gradient scale, with 1 and 4 threads.
TEST_P(OptimizerByDType, CombineMomentumIsApplyMomentumPerParameterBitwise) {
  const std::vector<Shape> shapes = {{3, 4}, {0}, {40000}};
  std::mt19937 rng(7);
  std::normal_distribution<double> normal;
  auto random = [&](const Shape& s) {
    Tensor t(dt(), s);
    for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, normal(rng));
    return Value::tensor(t);
  };
  for (const ir::Primitive::Attrs& attrs :
       {ir::Primitive::Attrs{}, ir::Primitive::Attrs{{"use_nesterov", Value::boolean(true)},
                                                     {"gradient_scale", Value::f32(0.5f)}}}) {
    std::vector<Value> args = {num(dt(), 0.1), num(dt(), 0.9)};
    std::vector<Value> expected;
    for (const Shape& s : shapes) {
      const Value var = random(s), accum = random(s), grad = random(s);
      args.insert(args.end(), {var, accum, grad});
      const Value one =
          backend::run_op("ApplyMomentum", {var, accum, args[0], grad, args[1]}, attrs);
      expected.insert(expected.end(), {one.elements()[0], one.elements()[1]});
    }
    std::vector<Tensor> inputs;
    for (const Value& v : args) inputs.push_back(v.as_tensor());
    for (int threads : {1, 4}) {
      SCOPED_TRACE(threads);
      backend::ThreadPool pool(threads);
      const std::vector<Tensor> all = run_kernel_outputs(pool, "CombineMomentum", inputs, attrs);
      ASSERT_EQ(all.size(), expected.size());
      for (std::size_t i = 0; i < expected.size(); ++i) {
        EXPECT_TRUE(all[i].bitwise_equal(expected[i].as_tensor())) << "output " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizer, OptimizerByDType,
                         ::testing::Values(DType::kFloat32, DType::kFloat64),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(dtype_name(info.param));
                         });

Value zeros(DType dt, Shape shape) { return Value::tensor(Tensor(dt, std::move(shape))); }

TEST(Optimizer, CombineMomentumErrors) {
  const DType f = DType::kFloat32;
  EXPECT_EQ(op_error<ValueError>("CombineMomentum", {num(f, 0.1), num(f, 0.9), zeros(f, {2}),
                                                     zeros(f, {2}), zeros(f, {2}), zeros(f, {2})}),
            "CombineMomentum: expected learning_rate, momentum, then (variable, accumulation, "
            "gradient) triples, got 6 inputs");
  EXPECT_EQ(op_error<ShapeError>("CombineMomentum", {num(f, 0.1), num(f, 0.9), zeros(f, {2, 3}),
                                                     zeros(f, {2, 3}), zeros(f, {3, 2})}),
            "CombineMomentum: expected gradient 0 of shape (2, 3) like variable 0, got (3, 2)");
  EXPECT_EQ(op_error<TypeError>("CombineMomentum", {num(f, 0.1), num(DType::kFloat64, 0.9),
                                                    zeros(f, {2}), zeros(f, {2}), zeros(f, {2})}),
            "CombineMomentum: expected momentum to be Float32, got Float64");
}

TEST(Optimizer, MomentumErrors) {
  const DType f = DType::kFloat32;
  EXPECT_EQ(op_error<ShapeError>("ApplyMomentum", {zeros(f, {2, 3}), zeros(f, {2, 3}), num(f, 0.1),
                                                   zeros(f, {3, 2}), num(f, 0.9)}),
            "ApplyMomentum: expected gradient of shape (2, 3) like variable, got (3, 2)");
  EXPECT_EQ(op_error<ShapeError>("ApplyMomentum", {zeros(f, {2, 3}), zeros(f, {2}), num(f, 0.1),
                                                   zeros(f, {2, 3}), num(f, 0.9)}),
            "ApplyMomentum: expected accumulation of shape (2, 3) like variable, got (2)");
  EXPECT_EQ(op_error<ShapeError>("ApplyMomentum", {zeros(f, {2}), zeros(f, {2}), zeros(f, {2}),
                                                   zeros(f, {2}), num(f, 0.9)}),
            "ApplyMomentum: expected learning_rate to be a scalar of shape () or (1), got (2)");
  EXPECT_EQ(op_error<TypeError>("ApplyMomentum", {zeros(f, {2}), zeros(f, {2}), num(f, 0.1),
                                                  zeros(f, {2}), num(DType::kFloat64, 0.9)}),
            "ApplyMomentum: expected momentum to be Float32 like variable, got Float64");
  EXPECT_EQ(
      op_error<TypeError>("ApplyMomentum", {zeros(DType::kInt32, {2}), zeros(DType::kInt32, {2}),
                                            num(DType::kInt32, 1), zeros(DType::kInt32, {2}),
                                            num(DType::kInt32, 1)}),
      "ApplyMomentum: expected variable to have a floating dtype, got Int32");
  // A shape-(1) learning rate is accepted, as MindSpore does.
  const Value out = backend::run_op(
      "ApplyMomentum", {zeros(f, {2}), zeros(f, {2}), zeros(f, {1}), zeros(f, {2}), num(f, 0.9)});
  EXPECT_EQ(out.elements().size(), 2u);
}

TEST(Optimizer, AdamErrors) {
  const DType f = DType::kFloat32;
  auto args = [&](Shape v_shape, Value beta1_power, Value grad) {
    return std::vector<Value>{zeros(f, {4}), zeros(f, {4}), zeros(f, v_shape), beta1_power,
                              num(f, 0.9),   num(f, 0.1),   num(f, 0.9),       num(f, 0.999),
                              num(f, 1e-8),  grad};
  };
  EXPECT_EQ(op_error<ShapeError>("ApplyAdam", args({4}, num(f, 0.9), zeros(f, {5}))),
            "ApplyAdam: expected grad of shape (4) like var, got (5)");
  EXPECT_EQ(op_error<ShapeError>("ApplyAdam", args({2, 2}, num(f, 0.9), zeros(f, {4}))),
            "ApplyAdam: expected v of shape (4) like var, got (2, 2)");
  EXPECT_EQ(op_error<ShapeError>("ApplyAdam", args({4}, zeros(f, {1, 1}), zeros(f, {4}))),
            "ApplyAdam: expected beta1_power to be a scalar of shape () or (1), got (1, 1)");
  EXPECT_EQ(op_error<TypeError>("ApplyAdam", args({4}, num(DType::kFloat64, 0.9), zeros(f, {4}))),
            "ApplyAdam: expected beta1_power to be Float32 like var, got Float64");
  EXPECT_EQ(op_error<ValueError>("ApplyAdam", args({4}, num(f, 1), zeros(f, {4}))),
            "ApplyAdam: expected beta1_power other than 1, got 1");
  EXPECT_EQ(op_error<ValueError>("ApplyAdam", {zeros(f, {4})}),
            "ApplyAdam: expected 10 inputs, got 1");
}

TEST(Optimizer, InferenceFillsUnknownDims) {
  ir::PrimitivePtr p = ops::make_op("ApplyMomentum");
  const DType f = DType::kFloat32;
  std::vector<ir::AbstractPtr> in{ir::Abstract::tensor(f, {-1, 3}),
                                  ir::Abstract::tensor(f, {2, -1}), ir::Abstract::tensor(f, {}),
                                  ir::Abstract::tensor(f, {2, 3}), ir::Abstract::tensor(f, {})};
  EXPECT_EQ(ops::infer(*p, in)->to_string(),
            "<Tuple[<Tensor[Float32], (2, 3)>, <Tensor[Float32], (2, 3)>]>");
}

TEST(Optimizer, NotDifferentiable) {
  for (const char* op : {"ApplyMomentum", "ApplyAdam"}) {
    const ops::OpDef& def = ops::Registry::global().get(op);
    EXPECT_FALSE(def.bprop);
    EXPECT_EQ(def.not_differentiable_because, "optimizer update; applied after gradients");
  }
}

}  // namespace
}  // namespace loom::testing
