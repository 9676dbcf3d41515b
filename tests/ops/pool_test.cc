// The pooling kernels' fast path (backends/cpu/pool_kernels.cc) against their reference path
// (LOOM_POOL=reference), bitwise: random shapes with odd sizes, batch 1, several channels, ties,
// NaNs with distinct payloads, -Inf, -0.0, on 1 and 2 threads, in Float32 and Float64. Outputs
// start as NaN bytes, so an element a kernel leaves unwritten fails the comparison too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/kernel.h"
#include "backends/thread_pool.h"
#include "core/ir/abstract.h"
#include "ops/op.h"
#include "tests/ops/test_util.h"

namespace loom::testing {
namespace {

using ir::Value;
using Attrs = ir::Primitive::Attrs;
using Ints = std::vector<std::int64_t>;

Attrs pool_attrs(Ints kernel, Ints strides, const std::string& pad_mode) {
  return {{"kernel_size", Value::ints(kernel)},
          {"strides", Value::ints(strides)},
          {"pad_mode", Value::string(pad_mode)}};
}

// A NaN with the given payload, as T.
template <typename T>
T nan_with_payload(std::uint32_t payload) {
  if constexpr (std::is_same_v<T, float>) {
    const std::uint32_t bits = 0x7FC00000u | payload;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  } else {
    const std::uint64_t bits = 0x7FF8000000000000ull | payload;
    double d;
    std::memcpy(&d, &bits, sizeof d);
    return d;
  }
}

// Values with many ties (small integers), -0.0, -Inf and NaNs (several payloads when
// `nan_payloads`, else one: sums of differently paid NaNs depend on operand order). One plane in
// four is all -Inf, so that whole windows tie at -Inf.
template <typename T>
Tensor tricky(const Shape& shape, std::mt19937& rng, bool nan_payloads) {
  Tensor t(DTypeOf<T>::value, shape);
  T* p = t.data<T>();
  const std::int64_t plane = shape[2] * shape[3];
  std::uniform_int_distribution<int> kind(0, 99), small(-3, 3), payload(1, 5);
  std::normal_distribution<double> normal;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    const int k = kind(rng);
    if ((i / plane) % 4 == 3) {
      p[i] = -std::numeric_limits<T>::infinity();
    } else if (k < 50) {
      p[i] = static_cast<T>(small(rng));
    } else if (k < 60) {
      p[i] = T(-0.0);
    } else if (k < 70) {
      p[i] = -std::numeric_limits<T>::infinity();
    } else if (k < 77) {
      p[i] = nan_with_payload<T>(nan_payloads ? payload(rng) : 0);
    } else {
      p[i] = static_cast<T>(normal(rng));
    }
  }
  return t;
}

// dout / grad: finite values, some -0.0.
template <typename T>
Tensor gradient(const Shape& shape, std::mt19937& rng) {
  Tensor t(DTypeOf<T>::value, shape);
  std::normal_distribution<double> normal;
  std::uniform_int_distribution<int> kind(0, 9);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    t.data<T>()[i] = kind(rng) == 0 ? T(-0.0) : static_cast<T>(normal(rng));
  }
  return t;
}

struct PoolCase {
  Shape x;
  Ints kernel, strides;
  std::string pad_mode;
};

const std::vector<PoolCase>& pool_cases() {
  static const std::vector<PoolCase> cases = {
      {{1, 1, 7, 9}, {2, 2}, {2, 2}, "VALID"},
      {{1, 1, 7, 9}, {2, 2}, {2, 2}, "SAME"},
      {{2, 3, 8, 9}, {2, 2}, {2, 2}, "VALID"},  // even rows, a column no window covers
      {{1, 2, 6, 10}, {2, 2}, {2, 2}, "SAME"},  // nothing to pad
      {{2, 3, 7, 9}, {3, 3}, {2, 2}, "VALID"},
      {{2, 3, 7, 9}, {3, 3}, {2, 2}, "SAME"},   // one row and column of padding before
      {{3, 6, 28, 28}, {2, 2}, {2, 2}, "VALID"},  // LeNet's pools
      {{5, 16, 10, 10}, {2, 2}, {2, 2}, "VALID"},
      {{1, 2, 2, 2}, {2, 2}, {2, 2}, "VALID"},
      {{1, 2, 3, 3}, {3, 3}, {2, 2}, "SAME"},
      {{2, 2, 5, 150}, {2, 2}, {2, 2}, "SAME"},   // rows longer than one block of windows
      {{1, 3, 9, 151}, {3, 3}, {2, 2}, "SAME"},
      {{1, 2, 11, 40}, {3, 3}, {2, 2}, "VALID"},
      {{2, 2, 8, 8}, {3, 3}, {2, 2}, "SAME"},     // even: padding after only
      {{1, 2, 112, 112}, {3, 3}, {2, 2}, "SAME"},  // the ResNet stem's max-pool
      {{2, 3, 9, 8}, {2, 2}, {1, 1}, "SAME"},     // not on the fast path: the reference itself
      {{2, 3, 9, 8}, {3, 3}, {3, 3}, "VALID"},
  };
  return cases;
}

// Every pooling op on each case, fast path on 1 and 2 threads against the reference path.
template <typename T>
void check_fast_path_matches_reference() {
  backend::ThreadPool one(1), two(2);
  std::mt19937 rng(17);
  for (const PoolCase& c : pool_cases()) {
    const Attrs attrs = pool_attrs(c.kernel, c.strides, c.pad_mode);
    const Tensor x = tricky<T>(c.x, rng, true);
    const Tensor x_avg = tricky<T>(c.x, rng, false);
    Tensor pooled;
    {
      const ScopedEnv reference("LOOM_POOL", "reference");
      pooled = run_kernel(one, "MaxPool", {x}, attrs);
    }
    const Tensor dout = gradient<T>(pooled.shape(), rng);
    const Tensor grad = gradient<T>(c.x, rng);
    const std::vector<std::pair<std::string, std::vector<Tensor>>> calls = {
        {"MaxPool", {x}},
        {"MaxPoolGrad", {x, pooled, dout}},
        {"MaxPoolGradGrad", {x, pooled, grad}},
        {"AvgPool", {x_avg}},
        {"AvgPoolGrad", {x_avg, pooled, dout}},
    };
    for (const auto& [op, args] : calls) {
      SCOPED_TRACE(op + " x " + shape_to_string(c.x) + " kernel " +
                   std::to_string(c.kernel[0]) + " stride " + std::to_string(c.strides[0]) + " " +
                   c.pad_mode);
      Tensor want;
      {
        const ScopedEnv reference("LOOM_POOL", "reference");
        want = run_kernel(one, op, args, attrs);
      }
      EXPECT_TRUE(run_kernel(one, op, args, attrs).bitwise_equal(want)) << "1 thread";
      EXPECT_TRUE(run_kernel(two, op, args, attrs).bitwise_equal(want)) << "2 threads";
    }
  }
}

TEST(Pool, FastPathMatchesReferenceFloat32) { check_fast_path_matches_reference<float>(); }
TEST(Pool, FastPathMatchesReferenceFloat64) { check_fast_path_matches_reference<double>(); }

std::uint32_t bits(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// By hand, on the fast path (2x2/2): a window of -Inf keeps its first element, the first of two
// NaNs wins over a larger number, ties go to the first, and dx gets 0 + dout there (-0.0 becomes
// +0.0, as the reference's zero plus dout).
TEST(Pool, MaxPool2x2FirstMaximumByHand) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan_a = nan_with_payload<float>(1);
  const float nan_b = nan_with_payload<float>(2);
  Tensor x(DType::kFloat32, {1, 1, 2, 6});
  const std::vector<float> xv = {-inf, -inf, 3, nan_a, 7, 7,  //
                                 -inf, -inf, nan_b, 5, 7, 2};
  std::memcpy(x.raw_data(), xv.data(), sizeof(float) * xv.size());
  const Attrs attrs = pool_attrs({2, 2}, {2, 2}, "VALID");
  backend::ThreadPool& pool = backend::ThreadPool::global();
  const Tensor y = run_kernel(pool, "MaxPool", {x}, attrs);
  EXPECT_EQ(y.get(0), -inf);
  EXPECT_EQ(bits(y.data<float>()[1]), bits(nan_a));
  EXPECT_EQ(y.get(2), 7);
  Tensor dout(DType::kFloat32, {1, 1, 1, 3});
  dout.set(0, 1);
  dout.set(1, 2);
  dout.set(2, -0.0);
  const Tensor dx = run_kernel(pool, "MaxPoolGrad", {x, y, dout}, attrs);
  expect_tensor(dx, {1, 1, 2, 6}, {1, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0}, 0);
  EXPECT_EQ(bits(dx.data<float>()[4]), 0u);  // +0.0, not -0.0
  Tensor grad(DType::kFloat32, {1, 1, 2, 6});
  for (std::int64_t i = 0; i < grad.numel(); ++i) grad.set(i, static_cast<double>(i + 1));
  const Tensor gg = run_kernel(pool, "MaxPoolGradGrad", {x, y, grad}, attrs);
  expect_tensor(gg, {1, 1, 1, 3}, {1, 4, 5}, 0);
}

}  // namespace
}  // namespace loom::testing
