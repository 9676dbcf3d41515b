// The CUDA kernels against the CPU kernels (ggml's test-backend-ops idea): every row of the CPU
// op test table (tests/ops/op_table.h) whose op has a CUDA kernel for the row's dtype runs on
// both backends from the same host inputs, in the row's own dtypes and again with its floating
// inputs as Float64, and the outputs are compared element by element with per-dtype tolerances;
// the worst element is reported. A CUDA kernel that declares in-place facts runs again with its
// outputs in its inputs' buffers, as the runtime may run it. Larger rows at LeNet / ResNet shapes
// (grid-stride loops, many blocks, cuDNN's algorithm choice) follow the same path. Then: every
// op that LeNet and the ResNets use in training (every optimizer), evaluation and the unfused
// pipelines has a Float32 CUDA kernel, and in deterministic mode the reductions, BatchNormGrad
// and the convolution gradients give the same bits twice. The Float16 / BFloat16 kernels that
// the CPU lacks (the tensor-core convolutions and products of mixed precision) are compared with
// what the runtime computes on the CPU in their place: the CPU's Float32 kernel on the inputs
// widened exactly, each output rounded to the 16-bit dtype.
//
// Without a usable GPU (or in a build without the CUDA backend) the binary prints why and exits
// 77, which ctest reports as skipped. A plain run selects the GPU suites only (the CPU table's
// own tests are linked in with the rows and left out by the default filter).
//
//   build/bin/loom_gpu_tests                               # everything, a summary at the end
//   build/bin/loom_gpu_tests --gtest_filter='*KernelCheck*conv2d*'
//   LOOM_GPU_CHECK_CPU_AS_GPU=1 build/bin/loom_gpu_tests  # the CPU backend stands in: a check
//                                                          # of this harness without a GPU
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/gpu/cuda_backend.h"
#include "backends/kernel.h"
#include "core/ir/abstract.h"
#include "core/ir/error.h"
#include "core/random/random.h"
#include "ops/op.h"
#include "tests/ops/op_table.h"

namespace loom::testing {
namespace {

using ir::Value;
using Attrs = ir::Primitive::Attrs;
using Ints = std::vector<std::int64_t>;

// LOOM_GPU_CHECK_CPU_AS_GPU=1 puts the CPU backend in the CUDA backend's place: a check of this
// harness (the rows, the comparison, the summary) on a machine without a GPU.
bool cpu_as_gpu() {
  static const bool on = [] {
    const char* v = std::getenv("LOOM_GPU_CHECK_CPU_AS_GPU");
    return v != nullptr && std::string(v) == "1";
  }();
  return on;
}

backend::Backend* cuda() {
  return cpu_as_gpu() ? &backend::cpu_backend() : backend::find_backend(Device::kCUDA);
}

// ---- Results, printed as a summary after the run --------------------------------------------

struct RowResult {
  std::string name;
  std::string status;  // "ok", "FAIL", "no CUDA kernel", "no CPU kernel", "skipped"
  std::string detail;
};

std::mutex g_mu;
std::vector<RowResult> g_results;

void record(const std::string& name, const std::string& status, const std::string& detail) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_results.push_back({name, status, detail});
}

// ---- Running one kernel on one backend -------------------------------------------------------

void flatten(const ir::AbstractPtr& a, std::vector<backend::TensorType>& out) {
  if (a->is_tuple()) {
    for (const ir::AbstractPtr& e : a->elements()) flatten(e, out);
  } else {
    out.push_back({a->dtype(), a->shape()});
  }
}

struct Prepared {
  ir::PrimitivePtr prim;
  std::vector<backend::TensorType> outputs;
  DType key = DType::kFloat32;  // the dtype the kernels are registered under
};

Prepared prepare(const std::string& op, const Attrs& attrs, const std::vector<Tensor>& inputs) {
  Prepared p;
  p.prim = ops::make_op(op, attrs);
  std::vector<ir::AbstractPtr> abstracts;
  for (const Tensor& t : inputs) abstracts.push_back(ir::Abstract::of_value(Value::tensor(t)));
  flatten(ops::infer(*p.prim, abstracts), p.outputs);
  const ops::OpDef& def = ops::Registry::global().get(op);
  const auto from = static_cast<std::size_t>(def.kernel_dtype_from);
  p.key = def.kernel_dtype_from >= 0 && from < inputs.size() ? inputs[from].dtype()
                                                              : p.outputs.at(0).dtype;
  return p;
}

// (input, output) pairs: that output is the input's own buffer, as the runtime makes it for the
// in-place facts a kernel declares.
using Aliasing = std::vector<std::pair<std::size_t, std::size_t>>;

// Runs `k` on backend `b` over copies of the host inputs and returns the outputs on the host.
// Outputs start as the runtime hands them over: zero-filled, or every byte 0xFF (NaN) for a
// kernel that declares it writes every element; `alias` makes outputs their inputs' buffers.

std::vector<Tensor> run_on(backend::Backend& b, const backend::KernelDef& k, const Prepared& p,
                           const std::vector<Tensor>& host_inputs, const Aliasing& alias = {}) {
  std::vector<Tensor> inputs;
  for (const Tensor& t : host_inputs) inputs.push_back(backend::to_device(t.clone(), b));
  std::vector<Tensor> outputs;
  for (const backend::TensorType& t : p.outputs) {
    Tensor h(t.dtype, t.shape);
    std::memset(h.raw_data(), k.writes_every_output ? 0xFF : 0x00, h.nbytes());
    outputs.push_back(backend::to_device(h, b));
  }
  for (const auto& [in, out] : alias) outputs[out] = inputs[in];
  backend::run_kernel(k, *p.prim, inputs, outputs, b);
  b.synchronize();
  std::vector<Tensor> host;
  for (const Tensor& t : outputs) host.push_back(backend::to_host(t));
  return host;
}

// ---- Comparison ------------------------------------------------------------------------------

// Ops whose outputs are sums over many products or elements: their Float32 error is judged
// against the output's scale (max |expected|) rather than each element's own magnitude.
bool accumulates(const std::string& op) {
  static const std::set<std::string> kOps = {
      "MatMul", "BatchMatMul", "MatMulBiasAct", "Conv2D", "Conv2DBackpropInput",
      "Conv2DBackpropFilter", "Conv2DBiasAct", "BiasAddGrad", "ReduceSum", "ReduceMean",
      "BatchNorm", "BatchNormGrad", "L2Loss", "SoftmaxCrossEntropyWithLogits",
      "SparseSoftmaxCrossEntropyWithLogits", "AvgPoolGrad", "LayerNorm", "LayerNormGrad",
      "Softmax", "LogSoftmax", "ApplyAdam"};
  return kOps.count(op) > 0;
}

bool is_conv(const std::string& op) { return op.rfind("Conv2D", 0) == 0; }

struct Tolerance {
  double atol, rtol, scaled;  // |a - b| <= max(atol + rtol |b|, scaled * max(1, max |b|))
};

Tolerance tolerance_for(DType dtype, const std::string& op) {
  const bool acc = accumulates(op);
  switch (dtype) {
    case DType::kFloat64:
      return {1e-12, 1e-10, acc ? 1e-10 : 0.0};
    case DType::kFloat16:
    case DType::kBFloat16:
      return {1e-2, 1e-2, acc ? 1e-2 : 0.0};
    default:  // Float32; cuDNN's Winograd / FFT algorithms round more than a direct sum
      return {1e-5, 1e-4, acc ? (is_conv(op) ? 5e-4 : 1e-4) : 0.0};
  }
}

struct Worst {
  double ratio = 0;  // |a - b| / allowed (> 1: a failure); +inf for a NaN or integer mismatch
  std::size_t output = 0;
  std::int64_t index = -1;
  double expected = 0, actual = 0;
  std::int64_t bad = 0;  // elements over the tolerance
};

std::string describe(const Worst& w) {
  std::ostringstream s;
  s.precision(9);
  if (w.index < 0) return "no elements";
  s << "worst " << (std::isinf(w.ratio) ? std::string("mismatch") : [&] {
    std::ostringstream r;
    r.precision(3);
    r << w.ratio << "x tol";
    return r.str();
  }()) << " at out" << w.output << "[" << w.index << "]: cpu " << w.expected << ", cuda "
    << w.actual << " (|d| " << std::abs(w.actual - w.expected) << ")";
  if (w.bad > 0) s << "; " << w.bad << " element(s) over the tolerance";
  return s.str();
}

void compare(const Tensor& expected, const Tensor& actual, std::size_t output,
             const std::string& op, Worst& worst) {
  if (expected.numel() == 0) return;
  const DType dt = expected.dtype();
  const bool floating = is_floating(dt);
  const Tolerance tol = tolerance_for(dt, op);
  double scale = 1;
  if (floating) {
    for (std::int64_t i = 0; i < expected.numel(); ++i) {
      const double v = std::abs(expected.get(i));
      if (std::isfinite(v)) scale = std::max(scale, v);
    }
  }
  for (std::int64_t i = 0; i < expected.numel(); ++i) {
    const double b = expected.get(i), a = actual.get(i);
    double ratio = 0;
    if (!floating) {
      ratio = a == b ? 0 : INFINITY;
    } else if (std::isnan(b) || std::isnan(a)) {
      ratio = std::isnan(a) && std::isnan(b) ? 0 : INFINITY;
    } else if (std::isinf(b) || std::isinf(a)) {
      ratio = a == b ? 0 : INFINITY;
    } else {
      const double allowed = std::max(tol.atol + tol.rtol * std::abs(b), tol.scaled * scale);
      ratio = std::abs(a - b) / allowed;
    }
    if (ratio > 1) ++worst.bad;
    if (ratio > worst.ratio || worst.index < 0) {
      worst.ratio = ratio;
      worst.output = output;
      worst.index = i;
      worst.expected = b;
      worst.actual = a;
    }
  }
}

// The CPU's stand-in for a Float16 / BFloat16 kernel it lacks, as the runtime's Float32
// fallback computes it (passes::compute_low_precision_in_float32): the Float32 kernel on the
// inputs widened exactly, each Float32 output rounded to `low`. Empty where the CPU has no
// Float32 kernel either.
Tensor converted(const Tensor& t, DType to) {
  return Tensor::from_doubles(to, t.shape(), t.to_doubles());
}

std::vector<Tensor> widened_reference(const OpCase& c, const std::vector<Tensor>& inputs,
                                      DType low) {
  std::vector<Tensor> wide;
  for (const Tensor& t : inputs) wide.push_back(t.dtype() == low ? converted(t, DType::kFloat32) : t);
  const Prepared p = prepare(c.op, c.attrs, wide);
  const backend::KernelDef* k = backend::cpu_backend().find_kernel(c.op, p.key);
  if (k == nullptr) return {};
  std::vector<Tensor> out = run_on(backend::cpu_backend(), *k, p, wide);
  for (Tensor& t : out) {
    if (t.dtype() == DType::kFloat32) t = converted(t, low);
  }
  return out;
}

// ---- The rows ----------------------------------------------------------------------------------

struct Param {
  OpCase row;
  bool as_f64 = false;
  std::string label;  // test name
};

bool has_floating_input(const OpCase& c) {
  for (const InputSpec& s : c.inputs) {
    if (is_floating(s.dtype)) return true;
  }
  return false;
}

Attrs conv_attrs(std::int64_t out_channel, Ints kernel, const std::string& pad_mode, Ints pad,
                 Ints stride) {
  return {{"out_channel", Value::i64(out_channel)}, {"kernel_size", Value::ints(kernel)},
          {"pad_mode", Value::string(pad_mode)},   {"pad", Value::ints(pad)},
          {"stride", Value::ints(stride)},          {"dilation", Value::ints({1, 1})},
          {"group", Value::i64(1)}};
}

Attrs with(Attrs a, const std::string& key, Value v) {
  a[key] = std::move(v);
  return a;
}

Attrs pool_attrs(Ints kernel, Ints strides, const std::string& pad_mode) {
  return {{"kernel_size", Value::ints(kernel)},
          {"strides", Value::ints(strides)},
          {"pad_mode", Value::string(pad_mode)}};
}

Value step(const char* op, std::vector<std::int64_t> operands) {
  std::vector<Value> e{Value::string(op)};
  for (std::int64_t i : operands) e.push_back(Value::i64(i));
  return Value::tuple(std::move(e));
}

InputSpec normal(Shape s) { return {.shape = std::move(s)}; }
InputSpec positive(Shape s) { return {.shape = std::move(s), .gen = Gen::kPositive}; }
InputSpec distinct(Shape s) { return {.shape = std::move(s), .gen = Gen::kDistinct}; }
InputSpec scalar_spec(Gen gen = Gen::kUniform01) { return {.shape = {}, .gen = gen}; }
InputSpec labels(Shape s, std::int64_t classes) {
  return {.shape = std::move(s), .dtype = DType::kInt32, .gen = Gen::kIndices, .high = classes};
}

// Rows at the sizes LeNet (batch 256) and ResNet-18 (batch 32, 32x32 layout) train at, and
// elementwise / reduction sizes past one block and past the grid-stride limit. Float32 only.
std::vector<OpCase> large_cases() {
  const Attrs bn_train = {{"is_training", Value::boolean(true)},
                          {"epsilon", Value::f32(1e-4f)},
                          {"momentum", Value::f32(0.9f)}};
  const Attrs bn_infer = with(bn_train, "is_training", Value::boolean(false));
  const Attrs bn_grad = {{"is_training", Value::boolean(true)}, {"epsilon", Value::f32(1e-4f)}};
  const Attrs c3 = conv_attrs(64, {3, 3}, "pad", {1, 1, 1, 1}, {1, 1});
  const Attrs c3s2 = conv_attrs(128, {3, 3}, "pad", {1, 1, 1, 1}, {2, 2});
  const Attrs c1s2 = conv_attrs(128, {1, 1}, "valid", {0, 0, 0, 0}, {2, 2});
  const Attrs lenet1 = conv_attrs(6, {5, 5}, "valid", {0, 0, 0, 0}, {1, 1});
  const Attrs lenet2 = conv_attrs(16, {5, 5}, "valid", {0, 0, 0, 0}, {1, 1});
  const Attrs pool2 = pool_attrs({2, 2}, {2, 2}, "VALID");
  // AdamWeightDecay's and clip-by-norm's fused updates: every op the fuse pass puts in them.
  const Value adamw = Value::tuple({step("Mul", {0, 1}), step("Sub", {5, 2}),
                                    step("Sqrt", {3}), step("RealDiv", {6, 7}),
                                    step("Maximum", {8, 4}), step("Add", {9, 0}),
                                    step("ReLU", {10})});
  const bool yes = true;
  std::vector<OpCase> c = {
      // LeNet-5 at batch 256.
      {.name = "lenet_conv1", .op = "Conv2D", .attrs = lenet1,
       .inputs = {normal({256, 1, 32, 32}), normal({6, 1, 5, 5})}},
      {.name = "lenet_conv2", .op = "Conv2D", .attrs = lenet2,
       .inputs = {normal({256, 6, 14, 14}), normal({16, 6, 5, 5})}},
      {.name = "lenet_conv1_filter_grad", .op = "Conv2DBackpropFilter",
       .attrs = with(lenet1, "filter_size", Value::ints({6, 1, 5, 5})),
       .inputs = {normal({256, 6, 28, 28}), normal({256, 1, 32, 32})}},
      {.name = "lenet_conv2_input_grad", .op = "Conv2DBackpropInput",
       .attrs = with(lenet2, "input_size", Value::ints({256, 6, 14, 14})),
       .inputs = {normal({256, 16, 10, 10}), normal({16, 6, 5, 5})}},
      {.name = "lenet_maxpool", .op = "MaxPool", .attrs = pool2,
       .inputs = {distinct({256, 6, 28, 28})}},
      {.name = "lenet_maxpool_grad", .op = "MaxPoolGrad", .attrs = pool2,
       .inputs = {distinct({256, 6, 28, 28}), normal({256, 6, 14, 14}),
                  normal({256, 6, 14, 14})}},
      {.name = "lenet_fc1", .op = "MatMulBiasAct",
       .attrs = {{"act", Value::string("relu")}, {"transpose_b", Value::boolean(yes)}},
       .inputs = {normal({256, 400}), normal({120, 400}), normal({120})}},
      {.name = "lenet_fc1_weight_grad", .op = "MatMul",
       .attrs = {{"transpose_a", Value::boolean(yes)}},
       .inputs = {normal({256, 120}), normal({256, 400})}},
      {.name = "lenet_fc1_input_grad", .op = "MatMul",
       .inputs = {normal({256, 120}), normal({120, 400})}},
      {.name = "lenet_bias_grad", .op = "BiasAddGrad", .inputs = {normal({256, 120})}},
      // A convolution's bias gradient: 6 columns over 256 rows after the rows stage (the block
      // column kernel), and a column stage narrower than a warp.
      {.name = "lenet_conv_bias_grad", .op = "BiasAddGrad", .inputs = {normal({256, 6, 28, 28})}},
      {.name = "reduce_sum_narrow_cols", .op = "ReduceSum", .attrs = {{"axis", Value::ints({0})}},
       .inputs = {normal({200, 5, 3})}},
      // Disjoint windows that leave the last row and column uncovered (their gradient is 0).
      {.name = "maxpool_grad_uncovered", .op = "MaxPoolGrad", .attrs = pool2,
       .inputs = {distinct({4, 3, 7, 7}), normal({4, 3, 3, 3}), normal({4, 3, 3, 3})}},
      // Disjoint windows with gaps between them (kernel 2, stride 3), and with explicit pads.
      {.name = "maxpool_grad_gaps", .op = "MaxPoolGrad",
       .attrs = pool_attrs({2, 2}, {3, 3}, "VALID"),
       .inputs = {distinct({2, 2, 8, 8}), normal({2, 2, 3, 3}), normal({2, 2, 3, 3})}},
      {.name = "maxpool_grad_disjoint_pad", .op = "MaxPoolGrad",
       .attrs = with(pool_attrs({2, 2}, {2, 2}, "PAD"), "pad", Value::ints({1, 0, 1, 0})),
       .inputs = {distinct({2, 2, 5, 5}), normal({2, 2, 3, 3}), normal({2, 2, 3, 3})}},
      {.name = "lenet_loss", .op = "SparseSoftmaxCrossEntropyWithLogits",
       .inputs = {normal({256, 10}), labels({256}, 10)}},
      {.name = "lenet_loss_grad", .op = "SparseSoftmaxCrossEntropyWithLogits",
       .attrs = {{"is_grad", Value::boolean(yes)}},
       .inputs = {normal({256, 10}), labels({256}, 10)}},
      {.name = "lenet_relu_grad", .op = "ReluGrad",
       .inputs = {normal({256, 6, 28, 28}), normal({256, 6, 28, 28})}},
      // ResNet-18 (32x32 layout) at batch 32.
      {.name = "resnet_conv3x3", .op = "Conv2D", .attrs = c3,
       .inputs = {normal({32, 64, 16, 16}), normal({64, 64, 3, 3})}},
      {.name = "resnet_conv3x3_stride2", .op = "Conv2D", .attrs = c3s2,
       .inputs = {normal({32, 64, 16, 16}), normal({128, 64, 3, 3})}},
      {.name = "resnet_conv1x1_stride2", .op = "Conv2D", .attrs = c1s2,
       .inputs = {normal({32, 64, 16, 16}), normal({128, 64, 1, 1})}},
      {.name = "resnet_conv3x3_input_grad", .op = "Conv2DBackpropInput",
       .attrs = with(c3, "input_size", Value::ints({32, 64, 16, 16})),
       .inputs = {normal({32, 64, 16, 16}), normal({64, 64, 3, 3})}},
      {.name = "resnet_conv3x3_stride2_input_grad", .op = "Conv2DBackpropInput",
       .attrs = with(c3s2, "input_size", Value::ints({32, 64, 16, 16})),
       .inputs = {normal({32, 128, 8, 8}), normal({128, 64, 3, 3})}},
      {.name = "resnet_conv3x3_filter_grad", .op = "Conv2DBackpropFilter",
       .attrs = with(c3, "filter_size", Value::ints({64, 64, 3, 3})),
       .inputs = {normal({32, 64, 16, 16}), normal({32, 64, 16, 16})}},
      {.name = "resnet_conv1x1_stride2_filter_grad", .op = "Conv2DBackpropFilter",
       .attrs = with(c1s2, "filter_size", Value::ints({128, 64, 1, 1})),
       .inputs = {normal({32, 128, 8, 8}), normal({32, 64, 16, 16})}},
      {.name = "resnet_batchnorm_train", .op = "BatchNorm", .attrs = bn_train,
       .inputs = {normal({32, 64, 16, 16}), positive({64}), normal({64}), normal({64}),
                  positive({64})}},
      {.name = "resnet_batchnorm_infer", .op = "BatchNorm", .attrs = bn_infer,
       .inputs = {normal({32, 64, 16, 16}), positive({64}), normal({64}), normal({64}),
                  positive({64})}},
      {.name = "resnet_batchnorm_grad", .op = "BatchNormGrad", .attrs = bn_grad,
       .inputs = {normal({32, 64, 16, 16}), normal({32, 64, 16, 16}), positive({64}),
                  normal({64}), positive({64})}},
      {.name = "resnet_pool_mean", .op = "ReduceMean",
       .attrs = {{"axis", Value::ints({2, 3})}, {"keep_dims", Value::boolean(yes)}},
       .inputs = {normal({32, 512, 4, 4})}},
      {.name = "resnet_pool_mean_grad", .op = "BroadcastTo",
       .attrs = {{"shape", Value::ints({32, 512, 4, 4})}}, .inputs = {normal({32, 512, 1, 1})}},
      {.name = "resnet_residual_add", .op = "Add",
       .inputs = {normal({32, 64, 32, 32}), normal({32, 64, 32, 32})}},
      {.name = "resnet_momentum", .op = "ApplyMomentum",
       .inputs = {normal({512, 512, 3, 3}), normal({512, 512, 3, 3}), scalar_spec(),
                  normal({512, 512, 3, 3}), scalar_spec()}},
      // Past the grid-stride limit of the elementwise launches (262,140 x 256 elements).
      {.name = "relu_70m", .op = "ReLU", .inputs = {normal({70000000})}},
      {.name = "reduce_sum_4m", .op = "ReduceSum", .inputs = {normal({1 << 22})}},
      {.name = "reduce_sum_rows", .op = "ReduceSum", .attrs = {{"axis", Value::ints({1})}},
       .inputs = {normal({4096, 1000})}},
      {.name = "fused_adamw_1m", .op = "FusedElementwise", .attrs = {{"program", adamw}},
       .inputs = {normal({1 << 20}), normal({1 << 20}), normal({1 << 20}),
                  positive({1 << 20}), normal({})}},
  };
  for (OpCase& r : c) r.name = "large_" + r.name;
  return c;
}

// A FusedElementwise row over every op the training graphs fuse (small, in both dtypes).
std::vector<OpCase> extra_cases() {
  const Value all_ops = Value::tuple({step("Mul", {0, 1}), step("Sub", {4, 2}),
                                      step("Sqrt", {3}), step("RealDiv", {5, 6}),
                                      step("Maximum", {7, 0}), step("Add", {8, 1}),
                                      step("ReLU", {9}), step("Square", {10})});
  return {{.name = "fused_training_ops", .op = "FusedElementwise",
           .attrs = {{"program", all_ops}},
           .inputs = {normal({7, 33}), normal({7, 33}), normal({33}), positive({7, 33})}}};
}

// The convolutions and matrix products of mixed precision in Float16 and BFloat16 (the tensor
// cores): LeNet's and ResNet-18's shapes, with SAME padding split unevenly (the padded copy) and
// a batched product; and the elementwise ops with 16-bit kernels.
std::vector<OpCase> half_cases() {
  const Attrs c3 = conv_attrs(64, {3, 3}, "pad", {1, 1, 1, 1}, {1, 1});
  const Attrs c3s2 = conv_attrs(128, {3, 3}, "pad", {1, 1, 1, 1}, {2, 2});
  const Attrs same_s2 = conv_attrs(16, {3, 3}, "same", {0, 0, 0, 0}, {2, 2});
  const Attrs lenet1 = conv_attrs(6, {5, 5}, "valid", {0, 0, 0, 0}, {1, 1});
  const Attrs lenet2 = conv_attrs(16, {5, 5}, "valid", {0, 0, 0, 0}, {1, 1});
  const bool yes = true;
  std::vector<OpCase> out;
  for (DType dt : {DType::kBFloat16, DType::kFloat16}) {
    auto in = [dt](Shape s) { return InputSpec{.shape = std::move(s), .dtype = dt}; };
    const std::string suffix = dt == DType::kBFloat16 ? "_bf16" : "_f16";
    std::vector<OpCase> rows = {
        {.name = "lenet_conv1", .op = "Conv2D", .attrs = lenet1,
         .inputs = {in({64, 1, 32, 32}), in({6, 1, 5, 5})}},
        {.name = "lenet_conv2", .op = "Conv2D", .attrs = lenet2,
         .inputs = {in({64, 6, 14, 14}), in({16, 6, 5, 5})}},
        {.name = "lenet_fc1", .op = "MatMul", .attrs = {{"transpose_b", Value::boolean(yes)}},
         .inputs = {in({256, 400}), in({120, 400})}},
        {.name = "lenet_conv2_input_grad", .op = "Conv2DBackpropInput",
         .attrs = with(lenet2, "input_size", Value::ints({64, 6, 14, 14})),
         .inputs = {in({64, 16, 10, 10}), in({16, 6, 5, 5})}},
        {.name = "lenet_conv1_filter_grad", .op = "Conv2DBackpropFilter",
         .attrs = with(lenet1, "filter_size", Value::ints({6, 1, 5, 5})),
         .inputs = {in({64, 6, 28, 28}), in({64, 1, 32, 32})}},
        {.name = "resnet_conv3x3", .op = "Conv2D", .attrs = c3,
         .inputs = {in({32, 64, 16, 16}), in({64, 64, 3, 3})}},
        {.name = "resnet_conv3x3_stride2_input_grad", .op = "Conv2DBackpropInput",
         .attrs = with(c3s2, "input_size", Value::ints({32, 64, 16, 16})),
         .inputs = {in({32, 128, 8, 8}), in({128, 64, 3, 3})}},
        {.name = "resnet_conv3x3_filter_grad", .op = "Conv2DBackpropFilter",
         .attrs = with(c3, "filter_size", Value::ints({64, 64, 3, 3})),
         .inputs = {in({32, 64, 16, 16}), in({32, 64, 16, 16})}},
        {.name = "same_stride2", .op = "Conv2D", .attrs = same_s2,
         .inputs = {in({4, 8, 10, 10}), in({16, 8, 3, 3})}},
        {.name = "same_stride2_input_grad", .op = "Conv2DBackpropInput",
         .attrs = with(same_s2, "input_size", Value::ints({4, 8, 10, 10})),
         .inputs = {in({4, 16, 5, 5}), in({16, 8, 3, 3})}},
        {.name = "same_stride2_filter_grad", .op = "Conv2DBackpropFilter",
         .attrs = with(same_s2, "filter_size", Value::ints({16, 8, 3, 3})),
         .inputs = {in({4, 16, 5, 5}), in({4, 8, 10, 10})}},
        {.name = "lenet_fc1_weight_grad", .op = "MatMul",
         .attrs = {{"transpose_a", Value::boolean(yes)}},
         .inputs = {in({256, 120}), in({256, 400})}},
        {.name = "odd_sizes", .op = "MatMul", .inputs = {in({7, 33}), in({33, 5})}},
        {.name = "batched", .op = "BatchMatMul", .attrs = {{"transpose_b", Value::boolean(yes)}},
         .inputs = {in({3, 4, 17, 24}), in({3, 4, 9, 24})}},
        // The elementwise ops left in the low dtype between them.
        {.name = "residual_add", .op = "Add", .inputs = {in({32, 64, 16, 16}), in({32, 64, 16, 16})}},
        {.name = "broadcast_mul", .op = "Mul", .inputs = {in({8, 5, 7}), in({5, 1})}},
        {.name = "sub", .op = "Sub", .inputs = {in({1000}), in({1000})}},
        {.name = "maximum", .op = "Maximum", .inputs = {in({77}), in({77})}},
        {.name = "relu", .op = "ReLU", .inputs = {in({32, 64, 16, 16})}},
        {.name = "relu_grad", .op = "ReluGrad", .inputs = {in({32, 64, 16, 16}), in({32, 64, 16, 16})}},
        {.name = "bias_add", .op = "BiasAdd", .inputs = {in({32, 16, 10, 10}), in({16})}},
    };
    for (OpCase& r : rows) {
      r.name = "half_" + r.name + suffix;
      out.push_back(std::move(r));
    }
  }
  return out;
}

std::vector<Param> params(const std::vector<OpCase>& rows, bool also_f64) {
  std::vector<Param> out;
  for (const OpCase& c : rows) {
    out.push_back({c, false, c.name});
    if (also_f64 && has_floating_input(c)) out.push_back({c, true, c.name + "_f64"});
  }
  return out;
}

// The table's MaxPoolGrad rows pass a random `out` (the CPU kernel reads only its shape); the
// training graph always passes MaxPool's own output, which cuDNN's backward pass reads, so the
// rows get MaxPool(x) here.
void fix_inputs(const OpCase& c, std::vector<Tensor>& inputs) {
  if ((c.op == "MaxPoolGrad" || c.op == "MaxPoolGradGrad") && inputs.size() == 3) {
    const Prepared p = prepare("MaxPool", c.attrs, {inputs[0]});
    const backend::KernelDef* k = backend::cpu_backend().find_kernel("MaxPool", p.key);
    if (k != nullptr) inputs[1] = run_on(backend::cpu_backend(), *k, p, {inputs[0]})[0];
  }
}

// The aliasings the runtime may give the kernel: an elementwise kernel's output in any input of
// its dtype and shape (one at a time), and a kernel's declared (input, output) pairs, all
// together (a donated optimizer state) and one by one.
std::vector<Aliasing> aliasings(const backend::KernelDef& k, const std::vector<Tensor>& inputs,
                                const Prepared& p) {
  auto fits = [&](std::size_t i, std::size_t j) {
    return i < inputs.size() && j < p.outputs.size() && inputs[i].dtype() == p.outputs[j].dtype &&
           inputs[i].shape() == p.outputs[j].shape;
  };
  std::vector<Aliasing> out;
  if (k.elementwise_in_place && p.outputs.size() == 1) {
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (fits(i, 0)) out.push_back({{i, 0}});
    }
  }
  Aliasing declared;
  for (const auto& [i, j] : k.in_place) {
    if (fits(i, j)) declared.emplace_back(i, j);
  }
  if (!declared.empty()) {
    out.push_back(declared);
    if (declared.size() > 1) {
      for (const auto& pair : declared) out.push_back({pair});
    }
  }
  return out;
}

std::string describe(const Aliasing& a) {
  std::string s;
  for (const auto& [i, j] : a) {
    s += (s.empty() ? "" : ", ") + std::string("in") + std::to_string(i) + "=out" +
         std::to_string(j);
  }
  return s;
}

class KernelCheck : public ::testing::TestWithParam<Param> {};

TEST_P(KernelCheck, MatchesTheCpuKernel) {
  const Param& param = GetParam();
  const OpCase& c = param.row;
  ASSERT_NE(cuda(), nullptr) << backend::cuda_unavailable_reason();
  const ops::OpDef* def = ops::Registry::global().find(c.op);
  ASSERT_NE(def, nullptr) << c.op;
  if (def->trait == ops::Trait::kStructural || def->trait == ops::Trait::kControlFlow) {
    record(param.label, "skipped", "structural op, no kernel");
    GTEST_SKIP() << "structural op";
  }
  std::vector<Tensor> inputs;
  for (const Value& v : make_inputs(c, param.as_f64)) inputs.push_back(v.as_tensor());
  fix_inputs(c, inputs);
  const Prepared p = prepare(c.op, c.attrs, inputs);
  const std::string key = c.op + "/" + std::string(dtype_name(p.key));
  const backend::KernelDef* gpu = cuda()->find_kernel(c.op, p.key);
  const backend::KernelDef* cpu = backend::cpu_backend().find_kernel(c.op, p.key);
  if (gpu == nullptr) {
    record(param.label, "no CUDA kernel", key);
    GTEST_SKIP() << "no CUDA kernel for " << key;
  }
  const bool half = p.key == DType::kFloat16 || p.key == DType::kBFloat16;
  std::vector<Tensor> expected;
  if (cpu != nullptr) {
    expected = run_on(backend::cpu_backend(), *cpu, p, inputs);
  } else if (half) {
    expected = widened_reference(c, inputs, p.key);
  }
  if (expected.empty()) {
    record(param.label, "no CPU kernel", key);
    GTEST_SKIP() << "no CPU kernel for " << key;
  }
  std::vector<Tensor> actual;
  try {
    actual = run_on(*cuda(), *gpu, p, inputs);
  } catch (const std::exception& e) {
    record(param.label, "FAIL", key + ": the CUDA kernel threw: " + e.what());
    FAIL() << key << ": the CUDA kernel threw: " << e.what();
  }
  ASSERT_EQ(actual.size(), expected.size());
  Worst worst;
  for (std::size_t i = 0; i < expected.size(); ++i) compare(expected[i], actual[i], i, c.op, worst);
  std::string detail = key + ": " + describe(worst);
  bool failed = worst.ratio > 1;
  // In place, as the runtime may run it: the same numbers.
  for (const Aliasing& alias : aliasings(*gpu, inputs, p)) {
    std::string what = "in place (" + describe(alias) + ")";
    try {
      const std::vector<Tensor> aliased = run_on(*cuda(), *gpu, p, inputs, alias);
      Worst w;
      for (std::size_t i = 0; i < expected.size(); ++i) compare(expected[i], aliased[i], i, c.op, w);
      if (w.ratio > 1) {
        failed = true;
        detail += "; " + what + ": " + describe(w);
      } else {
        detail += "; " + what + " ok";
      }
    } catch (const std::exception& e) {
      failed = true;
      detail += "; " + what + " threw: " + e.what();
    }
  }
  std::cout << "  " << param.label << " " << detail << "\n";
  if (failed) {
    record(param.label, "FAIL", detail);
    ADD_FAILURE() << detail;
  } else {
    record(param.label, "ok", detail);
  }
}

const auto kName = [](const ::testing::TestParamInfo<Param>& info) { return info.param.label; };

INSTANTIATE_TEST_SUITE_P(Table, KernelCheck, ::testing::ValuesIn(params(all_cases(), true)),
                         kName);
INSTANTIATE_TEST_SUITE_P(Fused, KernelCheck, ::testing::ValuesIn(params(extra_cases(), true)),
                         kName);
INSTANTIATE_TEST_SUITE_P(Large, KernelCheck, ::testing::ValuesIn(params(large_cases(), false)),
                         kName);
INSTANTIATE_TEST_SUITE_P(Half, KernelCheck, ::testing::ValuesIn(params(half_cases(), false)),
                         kName);

// ---- Coverage ----------------------------------------------------------------------------------

std::string missing_float32(const std::vector<std::string>& ops) {
  std::string missing;
  for (const std::string& op : ops) {
    if (cuda()->find_kernel(op, DType::kFloat32) == nullptr) {
      missing += (missing.empty() ? "" : ", ") + op;
    }
  }
  return missing;
}

// The ops of LeNet's and ResNet-18/50's compiled training steps with every optimizer (momentum,
// sgd, adam, adamw; --clip-grad-norm, --weight-decay) and of their evaluation graphs, read off
// `loom train MODEL --save-graphs D` (the last stage of D/train_step and D/eval), plus the ops
// the fuse pass puts inside their FusedElementwise programs.
TEST(GpuCoverage, TrainingAndEvaluationOpsHaveFloat32CudaKernels) {
  ASSERT_NE(cuda(), nullptr) << backend::cuda_unavailable_reason();
  const std::vector<std::string> ops = {
      // LeNet-5 and the ResNets: forward, backward, evaluation
      "Add", "BatchNorm", "BatchNormApply", "BatchNormGrad", "BiasAddGrad", "BroadcastTo", "Conv2D",
      "Conv2DBackpropFilter", "Conv2DBackpropInput", "Flatten", "FusedElementwise", "MatMul",
      "MatMulBiasAct", "MaxPool", "MaxPoolGrad", "Mul", "OnesLike", "ReLU", "ReduceMean",
      "ReluGrad", "Reshape", "SparseSoftmaxCrossEntropyWithLogits",
      // optimizers: Momentum, Adam; SGD (Greater, Select, ZerosLike); AdamWeightDecay and
      // weight decay (fused Mul / Sub / Add / Sqrt / RealDiv); --clip-grad-norm (Square,
      // ReduceSum, Maximum)
      "ApplyMomentum", "CombineMomentum", "ApplyAdam", "Greater", "Select", "ZerosLike", "Sub", "Sqrt", "RealDiv",
      "Square", "ReduceSum", "Maximum"};
  const std::string missing = missing_float32(ops);
  EXPECT_TRUE(missing.empty()) << "ops of LeNet / ResNet training and evaluation without a "
                                  "Float32 CUDA kernel: " << missing;
}

// The graphs before the fuse pass (PyNative mode, --passes without fuse) run BiasAdd and Fill
// where the fused graph has MatMulBiasAct and constants.
TEST(GpuCoverage, UnfusedPipelineOpsHaveFloat32CudaKernels) {
  ASSERT_NE(cuda(), nullptr) << backend::cuda_unavailable_reason();
  const std::string missing = missing_float32({"BiasAdd", "Fill"});
  EXPECT_TRUE(missing.empty()) << "ops of the unfused training graphs without a Float32 CUDA "
                                  "kernel: " << missing;
}

// ---- Determinism -------------------------------------------------------------------------------

// Runs a kernel twice on the GPU, each time prepared afresh, in deterministic mode: the outputs
// must be the same bits (and close to the CPU's).
// Deterministic mode for the scope (then back to the default: seed 0, off).
struct DeterministicMode {
  DeterministicMode() { random::seed_all(7, /*deterministic=*/true); }
  ~DeterministicMode() { random::seed_all(0, false); }
};

void expect_repeatable(const OpCase& c) {
  SCOPED_TRACE(c.name);
  const DeterministicMode deterministic;
  std::vector<Tensor> inputs;
  for (const Value& v : make_inputs(c, false)) inputs.push_back(v.as_tensor());
  const Prepared p = prepare(c.op, c.attrs, inputs);
  const backend::KernelDef* gpu = cuda()->find_kernel(c.op, p.key);
  if (gpu == nullptr) {
    ADD_FAILURE() << "no CUDA kernel for " << c.op << "/" << dtype_name(p.key);
    return;
  }
  const std::vector<Tensor> first = run_on(*cuda(), *gpu, p, inputs);
  const std::vector<Tensor> second = run_on(*cuda(), *gpu, p, inputs);
  ASSERT_EQ(first.size(), second.size());
  for (std::size_t i = 0; i < first.size(); ++i) {
    EXPECT_TRUE(first[i].bitwise_equal(second[i]))
        << c.op << " output " << i << " differs between two deterministic runs";
  }
  const backend::KernelDef* cpu = backend::cpu_backend().find_kernel(c.op, p.key);
  if (cpu != nullptr) {
    const std::vector<Tensor> expected = run_on(backend::cpu_backend(), *cpu, p, inputs);
    Worst worst;
    for (std::size_t i = 0; i < expected.size(); ++i) compare(expected[i], first[i], i, c.op, worst);
    std::cout << "  deterministic " << c.name << ": " << describe(worst) << "\n";
    EXPECT_LE(worst.ratio, 1) << describe(worst);
  }
}

TEST(GpuDeterminism, RepeatedRunsAreBitwiseEqual) {
  ASSERT_NE(cuda(), nullptr) << backend::cuda_unavailable_reason();
  const std::set<std::string> wanted = {
      "large_reduce_sum_4m", "large_reduce_sum_rows", "large_resnet_pool_mean",
      "large_lenet_bias_grad", "large_lenet_loss", "large_resnet_batchnorm_train",
      "large_resnet_batchnorm_grad", "large_resnet_conv3x3_filter_grad",
      "large_lenet_conv1_filter_grad", "large_resnet_conv3x3_input_grad",
      "large_lenet_maxpool_grad", "large_lenet_fc1_weight_grad"};
  int ran = 0;
  for (const OpCase& c : large_cases()) {
    if (wanted.count(c.name) == 0) continue;
    expect_repeatable(c);
    ++ran;
  }
  EXPECT_EQ(ran, static_cast<int>(wanted.size()));
}

// The recompute pass's premise on the GPU: BatchNormApply{act} on training BatchNorm's saved
// statistics gives act(y) of the GPU's BatchNorm bitwise (Float32 and Float64, float4 and scalar
// element paths).
TEST(GpuRecompute, BatchNormApplyReproducesBatchNormBitwise) {
  ASSERT_NE(cuda(), nullptr) << backend::cuda_unavailable_reason();
  const Attrs bn = {{"is_training", Value::boolean(true)}, {"epsilon", Value::f32(1e-4f)},
                    {"momentum", Value::f32(0.9f)}};
  for (bool f64 : {false, true}) {
    for (const Shape& x : {Shape{32, 64, 16, 16}, Shape{8, 5, 7, 7}, Shape{300, 7}}) {
      SCOPED_TRACE(std::string(f64 ? "Float64 " : "Float32 ") + shape_to_string(x));
      const std::int64_t c = x[1];
      const OpCase bn_case{.name = "bn", .op = "BatchNorm", .attrs = bn,
                           .inputs = {{.shape = x}, {.shape = {c}, .gen = Gen::kPositive},
                                      {.shape = {c}}, {.shape = {c}},
                                      {.shape = {c}, .gen = Gen::kPositive}}};
      std::vector<Tensor> in;
      for (const Value& v : make_inputs(bn_case, f64)) in.push_back(v.as_tensor());
      const Prepared pb = prepare("BatchNorm", bn, in);
      const std::vector<Tensor> out =
          run_on(*cuda(), *cuda()->kernels().find("BatchNorm", pb.key), pb, in);
      for (const char* act : {"none", "relu"}) {
        SCOPED_TRACE(act);
        const Attrs aa = {{"act", Value::string(act)}};
        const std::vector<Tensor> apply_in{in[0], in[1], in[2], out[3], out[4]};
        const Prepared pa = prepare("BatchNormApply", aa, apply_in);
        const backend::KernelDef* k = cuda()->kernels().find("BatchNormApply", pa.key);
        ASSERT_NE(k, nullptr);
        const Tensor again = run_on(*cuda(), *k, pa, apply_in)[0];
        std::int64_t differ = 0;
        for (std::int64_t i = 0; i < again.numel(); ++i) {
          double want = out[0].get(i);
          if (std::string(act) == "relu" && want < 0) want = 0;
          differ += again.get(i) != want;
        }
        EXPECT_EQ(differ, 0) << "elements that differ from act(BatchNorm's y)";
      }
    }
  }
}

// ---- Summary -----------------------------------------------------------------------------------

void print_summary() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_results.empty()) return;
  std::map<std::string, int> counts;
  std::map<std::string, std::set<std::string>> missing;  // status -> op/dtype
  for (const RowResult& r : g_results) {
    ++counts[r.status];
    if (r.status == "no CUDA kernel" || r.status == "no CPU kernel") missing[r.status].insert(r.detail);
  }
  std::cout << "\n==== CUDA kernel check summary ====\n";
  for (const auto& [status, n] : counts) std::cout << "  " << status << ": " << n << "\n";
  for (const RowResult& r : g_results) {
    if (r.status == "FAIL") std::cout << "  FAIL " << r.name << ": " << r.detail << "\n";
  }
  for (const auto& [status, keys] : missing) {
    std::cout << "  " << status << " (op/dtype):";
    for (const std::string& k : keys) std::cout << " " << k;
    std::cout << "\n";
  }
  // CUDA kernels no row exercised.
  std::set<std::string> tested;
  for (const RowResult& r : g_results) {
    if (r.status == "ok" || r.status == "FAIL") tested.insert(r.detail.substr(0, r.detail.find(':')));
  }
  std::set<std::string> untested;
  if (backend::Backend* b = cuda()) {
    for (const backend::KernelDef* k : b->kernels().all()) {
      const std::string key = k->op + "/" + std::string(dtype_name(k->dtype));
      if (tested.count(key) == 0) untested.insert(key);
    }
  }
  std::cout << "  CUDA kernels registered: " << (cuda() ? cuda()->kernels().all().size() : 0)
            << ", compared against the CPU: " << tested.size() << "\n";
  if (!untested.empty()) {
    std::cout << "  CUDA kernels no row compared:";
    for (const std::string& k : untested) std::cout << " " << k;
    std::cout << "\n";
  }
  std::cout << "===================================\n";
}

}  // namespace
}  // namespace loom::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // The CPU table's own tests are linked in with its rows: a plain run runs the GPU suites.
  if (::testing::GTEST_FLAG(filter) == "*") {
    ::testing::GTEST_FLAG(filter) =
        "*KernelCheck.*:GpuCoverage.*:GpuDeterminism.*:GpuRecompute.*";
  }
  if (::testing::GTEST_FLAG(list_tests)) return RUN_ALL_TESTS();
  if (loom::testing::cpu_as_gpu()) {
    std::cout << "loom_gpu_tests: LOOM_GPU_CHECK_CPU_AS_GPU=1, the CPU backend stands in for "
                 "CUDA (a check of the harness, not of any CUDA kernel)\n";
    const int rc = RUN_ALL_TESTS();
    loom::testing::print_summary();
    return rc;
  }
  // The registered CUDA backend, else the real one where the build and the machine have it.
  loom::backend::Backend* gpu = loom::backend::find_backend(loom::Device::kCUDA);
  if (gpu == nullptr) {
    std::cout << "loom_gpu_tests: SKIPPED, no usable CUDA backend: "
              << loom::backend::cuda_unavailable_reason() << "\n";
    return 77;
  }
  std::cout << "loom_gpu_tests: " << gpu->describe() << "\n";
  const int rc = RUN_ALL_TESTS();
  loom::testing::print_summary();
  return rc;
}
