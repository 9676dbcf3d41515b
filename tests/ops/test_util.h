// Helpers shared by the op test files: catching an error's message and comparing a tensor with
// expected numbers.
//
//   EXPECT_EQ(error_of<TypeError>([] { run("GeLU", {i64({1}, {1})}); }), "GeLU: ...");
//   EXPECT_EQ(op_error<ShapeError>("MatMul", {a, b}), "MatMul: ...");
//   expect_tensor(run("ReLU", {x}), DType::kFloat32, {3}, {0, 0, 2});
//   expect_tensor(y, {2, 2}, {1, 2, 3, 4}, 1e-6);
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "backends/eager.h"
#include "backends/thread_pool.h"
#include "core/ir/error.h"
#include "core/ir/tensor.h"
#include "core/ir/value.h"

namespace loom::testing {

// The message of the E that `fn` throws. When `fn` throws nothing, records a test failure and
// returns "no error". An exception that is not an E propagates (and fails the test).
template <typename E = Error>
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "no error";
}

// The message of the E that running `op` eagerly on `args` throws (see error_of).
template <typename E = Error>
std::string op_error(std::string_view op, const std::vector<ir::Value>& args,
                     ir::Primitive::Attrs attrs = {}) {
  return error_of<E>([&] { backend::run_op(op, args, std::move(attrs)); });
}

// Expects `fn` to throw an E whose message is exactly `message`.
template <typename E = Error>
void expect_error(const std::function<void()>& fn, const std::string& message) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected: " << message;
  } catch (const E& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

// A `tolerance` that compares each element with EXPECT_DOUBLE_EQ (within 4 ULPs) instead of
// EXPECT_NEAR.
inline constexpr double kDoubleEq = -1;

// Expects `actual` to hold exactly expected.size() elements, each within `tolerance` (absolute)
// of the expected one, or within 4 ULPs when `tolerance` is kDoubleEq. A NaN in `expected` asks
// for a NaN. The shape is not checked.
void expect_values(const Tensor& actual, const std::vector<double>& expected,
                   double tolerance = 0);
// The same for a Value, which must be a tensor.
void expect_values(const ir::Value& actual, const std::vector<double>& expected,
                   double tolerance = 0);

// expect_values, after asserting that `actual` has shape `shape`.
void expect_tensor(const Tensor& actual, const Shape& shape, const std::vector<double>& expected,
                   double tolerance = 0);
// The same for a Value, which must be a tensor.
void expect_tensor(const ir::Value& actual, const Shape& shape,
                   const std::vector<double>& expected, double tolerance = 0);
// The same, also expecting dtype `dtype`.
void expect_tensor(const Tensor& actual, DType dtype, const Shape& shape,
                   const std::vector<double>& expected, double tolerance = 0);

// Expects `actual` to have the shape of `expected` and every element to differ from the expected
// one by less than `tolerance` × max(1, |expected|) (the worst element is reported).
void expect_close(const Tensor& actual, const Tensor& expected, double tolerance);

// Runs op's CPU kernel on `pool` (run_op always uses the global one) and returns its outputs
// (one for an op with a tensor result, one per element of a tuple). The outputs start with
// every byte 0xFF (NaN for floats): the runtime does not clear them, so a kernel must write
// every element it returns.
std::vector<Tensor> run_kernel_outputs(backend::ThreadPool& pool, std::string_view op,
                                       const std::vector<Tensor>& inputs,
                                       ir::Primitive::Attrs attrs = {});
// The first (or only) output of run_kernel_outputs.
Tensor run_kernel(backend::ThreadPool& pool, std::string_view op,
                  const std::vector<Tensor>& inputs, ir::Primitive::Attrs attrs = {});

// run_kernel with LOOM_CONV=im2col: the convolutions' reference path (im2col + GEMM).
Tensor run_im2col(backend::ThreadPool& pool, std::string_view op,
                  const std::vector<Tensor>& inputs, ir::Primitive::Attrs attrs = {});

// Sets an environment variable for its lifetime and then restores the old value (the kernels'
// switches: LOOM_CONV=im2col, LOOM_POOL=reference).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// A tensor of standard normal samples from std::mt19937(seed), each rounded to Float32 so that
// the Float32 and Float64 tensors of one seed hold the same numbers.
Tensor random_normal(DType dtype, Shape shape, unsigned seed);

// The same numbers as Float64.
Tensor widen(const Tensor& t);

}  // namespace loom::testing
