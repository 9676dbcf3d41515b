#include "tests/ops/test_util.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>

#include "backends/backend.h"
#include "backends/cpu/cpu.h"
#include "backends/kernel.h"
#include "core/ir/abstract.h"
#include "ops/op.h"

namespace loom::testing {

void expect_values(const Tensor& actual, const std::vector<double>& expected, double tolerance) {
  ASSERT_EQ(actual.numel(), static_cast<std::int64_t>(expected.size()));
  for (std::int64_t i = 0; i < actual.numel(); ++i) {
    const double e = expected[static_cast<std::size_t>(i)];
    if (std::isnan(e)) {
      EXPECT_TRUE(std::isnan(actual.get(i))) << "element " << i;
    } else if (tolerance == kDoubleEq) {
      EXPECT_DOUBLE_EQ(actual.get(i), e) << "element " << i;
    } else {
      EXPECT_NEAR(actual.get(i), e, tolerance) << "element " << i;
    }
  }
}

void expect_values(const ir::Value& actual, const std::vector<double>& expected,
                   double tolerance) {
  ASSERT_TRUE(actual.is_tensor());
  expect_values(actual.as_tensor(), expected, tolerance);
}

void expect_tensor(const Tensor& actual, const Shape& shape, const std::vector<double>& expected,
                   double tolerance) {
  ASSERT_EQ(actual.shape(), shape);
  expect_values(actual, expected, tolerance);
}

void expect_tensor(const ir::Value& actual, const Shape& shape,
                   const std::vector<double>& expected, double tolerance) {
  ASSERT_TRUE(actual.is_tensor());
  expect_tensor(actual.as_tensor(), shape, expected, tolerance);
}

void expect_tensor(const Tensor& actual, DType dtype, const Shape& shape,
                   const std::vector<double>& expected, double tolerance) {
  EXPECT_EQ(actual.dtype(), dtype);
  expect_tensor(actual, shape, expected, tolerance);
}

void expect_close(const Tensor& actual, const Tensor& expected, double tolerance) {
  ASSERT_EQ(actual.shape(), expected.shape());
  double worst = 0;
  for (std::int64_t i = 0; i < actual.numel(); ++i) {
    const double scale = std::max(1.0, std::abs(expected.get(i)));
    worst = std::max(worst, std::abs(actual.get(i) - expected.get(i)) / scale);
  }
  EXPECT_LT(worst, tolerance);
}

std::vector<Tensor> run_kernel_outputs(backend::ThreadPool& pool, std::string_view op,
                                       const std::vector<Tensor>& inputs,
                                       ir::Primitive::Attrs attrs) {
  const backend::KernelDef* kernel = backend::cpu_backend().find_kernel(op, inputs[0].dtype());
  EXPECT_NE(kernel, nullptr) << op;
  if (kernel == nullptr) return {};
  const ir::PrimitivePtr prim = ops::make_op(op, std::move(attrs));
  std::vector<ir::AbstractPtr> abstracts;
  for (const Tensor& t : inputs) abstracts.push_back(ir::Abstract::of_value(ir::Value::tensor(t)));
  const ir::AbstractPtr out = ops::infer(*prim, abstracts);
  std::vector<Tensor> outputs;
  for (const ir::AbstractPtr& a :
       out->is_tuple() ? out->elements() : std::vector<ir::AbstractPtr>{out}) {
    outputs.emplace_back(a->dtype(), a->shape());
    std::memset(outputs.back().raw_data(), 0xFF, outputs.back().nbytes());
  }
  backend::cpu::CpuContext ctx(&pool);
  backend::run_kernel(*kernel, *prim, inputs, outputs, backend::cpu_backend(), &ctx);
  return outputs;
}

Tensor run_kernel(backend::ThreadPool& pool, std::string_view op,
                  const std::vector<Tensor>& inputs, ir::Primitive::Attrs attrs) {
  std::vector<Tensor> outputs = run_kernel_outputs(pool, op, inputs, std::move(attrs));
  if (outputs.empty()) return Tensor();
  return outputs[0];
}

Tensor run_im2col(backend::ThreadPool& pool, std::string_view op,
                  const std::vector<Tensor>& inputs, ir::Primitive::Attrs attrs) {
  const ScopedEnv im2col("LOOM_CONV", "im2col");
  return run_kernel(pool, op, inputs, std::move(attrs));
}

ScopedEnv::ScopedEnv(const char* name, const char* value) : name_(name) {
  if (const char* old = std::getenv(name)) old_ = old;
  setenv(name, value, 1);
}

ScopedEnv::~ScopedEnv() {
  if (old_) {
    setenv(name_.c_str(), old_->c_str(), 1);
  } else {
    unsetenv(name_.c_str());
  }
}

Tensor random_normal(DType dtype, Shape shape, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  for (double& e : v) e = static_cast<float>(normal(rng));
  return Tensor::from_doubles(dtype, std::move(shape), v);
}

Tensor widen(const Tensor& t) {
  return Tensor::from_doubles(DType::kFloat64, t.shape(), t.to_doubles());
}

}  // namespace loom::testing
