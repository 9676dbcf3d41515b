// CPU kernels of the fused ops (ops/fused_ops.cc), Float32 and Float64.
//
// MatMulBiasAct is the MatMul gemm followed by one pass over the product adding the bias and
// applying the activation; Conv2DBiasAct runs the registered Conv2D kernel and then the same
// kind of pass per channel plane. The activation arithmetic is the unfused kernels' own, so
// both equal the unfused chain bit for bit.
//
// FusedElementwise evaluates its program block by block: each task walks its range in blocks
// of kBlock elements, gathers each broadcast input's block into a buffer (inputs shaped like the
// output are read in place), and runs every step over the block into that step's buffer, the
// last one straight into the output. The buffers of a block stay in L1/L2, so the inputs and
// the output are each traversed once. The per-op arithmetic follows the unfused kernels (scalar
// std::sqrt, NaN-propagating Maximum/Minimum, Eigen's exp/log with the scalar fallback near
// their edges, the overflow-free Sigmoid); ops using Eigen's vectorized functions may differ
// from the unfused result in the last ulp where a packet boundary falls differently.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "backends/cpu/elementwise.h"
#include "backends/cpu/gemm.h"
#include "backends/kernel.h"
#include "backends/thread_pool.h"
#include "core/ir/error.h"
#include "ops/op.h"

namespace loom::backend {

namespace {

enum class Act { kNone, kReLU, kReLU6 };

Act act_of(const KernelContext& k) {
  const std::string& act = k.attr("act").as_string();
  if (act == "relu") return Act::kReLU;
  if (act == "relu6") return Act::kReLU6;
  return Act::kNone;
}

// y[i] = act(y[i] + bias) over a run of n elements, with ReLU and ReLU6's own comparisons.
template <typename T>
void bias_act_run(T* y, std::int64_t n, T bias, Act act) {
  switch (act) {
    case Act::kNone:
      for (std::int64_t i = 0; i < n; ++i) y[i] = y[i] + bias;
      break;
    case Act::kReLU:
      for (std::int64_t i = 0; i < n; ++i) {
        const T v = y[i] + bias;
        y[i] = v < T(0) ? T(0) : v;
      }
      break;
    case Act::kReLU6:
      for (std::int64_t i = 0; i < n; ++i) {
        const T v = y[i] + bias;
        y[i] = v < T(0) ? T(0) : (v > T(6) ? T(6) : v);
      }
      break;
  }
}

constexpr std::int64_t kGrain = 16384;

template <typename T>
void matmul_bias_act(const KernelContext& k) {
  const Tensor& a = k.in(0);
  const Tensor& b = k.in(1);
  Tensor& c = k.out(0);
  const bool ta = k.attr("transpose_a").as_bool();
  const bool tb = k.attr("transpose_b").as_bool();
  const std::int64_t m = c.dim(0), n = c.dim(1);
  const std::int64_t inner = ta ? a.dim(0) : a.dim(1);
  T* y = c.data<T>();
  cpu::gemm(ta, tb, m, n, inner, T(1), a.data<T>(), std::max<std::int64_t>(1, a.dim(1)),
            b.data<T>(), std::max<std::int64_t>(1, b.dim(1)), T(0), y,
            std::max<std::int64_t>(1, n), cpu::gemm_for_shape(m, n, inner));  // as MatMul's
  const T* bias = k.in(2).data<T>();
  const Act act = act_of(k);
  const std::int64_t grain = std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, n));
  k.pool.parallel_for(m, grain, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t r = lo; r < hi; ++r) {
      T* row = y + r * n;
      switch (act) {
        case Act::kNone:
          for (std::int64_t j = 0; j < n; ++j) row[j] = row[j] + bias[j];
          break;
        case Act::kReLU:
          for (std::int64_t j = 0; j < n; ++j) {
            const T v = row[j] + bias[j];
            row[j] = v < T(0) ? T(0) : v;
          }
          break;
        case Act::kReLU6:
          for (std::int64_t j = 0; j < n; ++j) {
            const T v = row[j] + bias[j];
            row[j] = v < T(0) ? T(0) : (v > T(6) ? T(6) : v);
          }
          break;
      }
    }
  });
}

template <typename T>
void conv2d_bias_act(const KernelContext& k) {
  const Kernel conv = KernelRegistry::global().find("Conv2D", DTypeOf<T>::value, Device::kCPU);
  if (!conv) throw InternalError("Conv2DBiasAct: expected a CPU Conv2D kernel, got none");
  ir::Primitive::Attrs attrs = k.prim.attrs();
  attrs.erase("act");
  const ir::Primitive conv_prim("Conv2D", std::move(attrs));
  conv(KernelContext{conv_prim, k.inputs.first(2), k.outputs, k.pool});
  Tensor& y = k.out(0);
  const std::int64_t channels = y.dim(1);
  const std::int64_t plane = y.dim(2) * y.dim(3);
  const T* bias = k.in(2).data<T>();
  T* py = y.data<T>();
  const Act act = act_of(k);
  const std::int64_t grain = std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, plane));
  k.pool.parallel_for(y.dim(0) * channels, grain, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t p = lo; p < hi; ++p) {
      bias_act_run(py + p * plane, plane, bias[p % channels], act);
    }
  });
}

// ---- FusedElementwise -----------------------------------------------------------------------

// Elements per block: each step's buffer of a block fits in L1 (16 KiB of Float64).
constexpr std::int64_t kBlock = 2048;

enum class StepOp {
  kAdd, kSub, kMul, kRealDiv, kMaximum, kMinimum,
  kNeg, kSquare, kAbs, kSqrt, kExp, kLog, kReLU, kReLU6, kSigmoid, kTanh,
};

StepOp step_op(const std::string& name) {
  static const std::pair<const char*, StepOp> kTable[] = {
      {"Add", StepOp::kAdd},     {"Sub", StepOp::kSub},         {"Mul", StepOp::kMul},
      {"RealDiv", StepOp::kRealDiv}, {"Maximum", StepOp::kMaximum}, {"Minimum", StepOp::kMinimum},
      {"Neg", StepOp::kNeg},     {"Square", StepOp::kSquare},   {"Abs", StepOp::kAbs},
      {"Sqrt", StepOp::kSqrt},   {"Exp", StepOp::kExp},         {"Log", StepOp::kLog},
      {"ReLU", StepOp::kReLU},   {"ReLU6", StepOp::kReLU6},     {"Sigmoid", StepOp::kSigmoid},
      {"Tanh", StepOp::kTanh},
  };
  for (const auto& [n, op] : kTable) {
    if (name == n) return op;
  }
  throw InternalError("FusedElementwise: expected a supported op, got '" + name + "'");
}

template <typename T>
using Array = Eigen::Array<T, Eigen::Dynamic, 1>;
template <typename T>
using In = Eigen::Map<const Array<T>>;
template <typename T>
using Out = Eigen::Map<Array<T>>;

// y = op(a[, b]) over n contiguous elements (y may alias neither a nor b).
template <typename T>
void run_step(StepOp op, const T* a, const T* b, T* y, std::int64_t n) {
  switch (op) {
    case StepOp::kAdd: for (std::int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i]; return;
    case StepOp::kSub: for (std::int64_t i = 0; i < n; ++i) y[i] = a[i] - b[i]; return;
    case StepOp::kMul: for (std::int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i]; return;
    case StepOp::kRealDiv: for (std::int64_t i = 0; i < n; ++i) y[i] = a[i] / b[i]; return;
    case StepOp::kMaximum:
      for (std::int64_t i = 0; i < n; ++i) y[i] = a[i] != a[i] ? a[i] : (a[i] > b[i] ? a[i] : b[i]);
      return;
    case StepOp::kMinimum:
      for (std::int64_t i = 0; i < n; ++i) y[i] = a[i] != a[i] ? a[i] : (a[i] < b[i] ? a[i] : b[i]);
      return;
    case StepOp::kNeg: for (std::int64_t i = 0; i < n; ++i) y[i] = -a[i]; return;
    case StepOp::kSquare: for (std::int64_t i = 0; i < n; ++i) y[i] = a[i] * a[i]; return;
    case StepOp::kAbs:
      for (std::int64_t i = 0; i < n; ++i) y[i] = a[i] < T(0) ? -a[i] : a[i];
      return;
    case StepOp::kSqrt: for (std::int64_t i = 0; i < n; ++i) y[i] = std::sqrt(a[i]); return;
    case StepOp::kReLU:
      for (std::int64_t i = 0; i < n; ++i) y[i] = a[i] < T(0) ? T(0) : a[i];
      return;
    case StepOp::kReLU6:
      for (std::int64_t i = 0; i < n; ++i) y[i] = a[i] < T(0) ? T(0) : (a[i] > T(6) ? T(6) : a[i]);
      return;
    case StepOp::kExp: {
      constexpr bool kFloat = std::is_same_v<T, float>;
      constexpr T kLow = kFloat ? T(-87) : T(-708);
      constexpr T kHigh = kFloat ? T(88) : T(709);
      In<T> x(a, n);
      Out<T>(y, n) = x.exp();
      for (std::int64_t i = 0; i < n; ++i) {
        if (a[i] < kLow || a[i] > kHigh) y[i] = std::exp(a[i]);
      }
      return;
    }
    case StepOp::kLog: {
      constexpr T kMinNormal = std::numeric_limits<T>::min();
      In<T> x(a, n);
      Out<T>(y, n) = x.log();
      for (std::int64_t i = 0; i < n; ++i) {
        if (a[i] < kMinNormal) y[i] = std::log(a[i]);
      }
      return;
    }
    case StepOp::kSigmoid: {
      In<T> x(a, n);
      Out<T>(y, n) = (-x.abs()).exp();
      for (std::int64_t i = 0; i < n; ++i) y[i] = (a[i] >= T(0) ? T(1) : y[i]) / (T(1) + y[i]);
      return;
    }
    case StepOp::kTanh: Out<T>(y, n) = In<T>(a, n).tanh(); return;
  }
}

struct Step {
  StepOp op;
  std::vector<std::size_t> operands;
};

template <typename T>
void fused_elementwise(const KernelContext& k) {
  const std::size_t num_inputs = k.inputs.size();
  std::vector<Step> steps;
  for (const ops::FusedStep& s : ops::fused_program(k.attr("program"), num_inputs)) {
    steps.push_back(Step{step_op(s.op), s.operands});
  }
  Tensor& y = k.out(0);
  T* py = y.data<T>();
  // Inputs laid out like the output are read in place; the others are gathered per block.
  std::vector<std::unique_ptr<cpu::BroadcastPlan>> plans(num_inputs);
  for (std::size_t i = 0; i < num_inputs; ++i) {
    if (k.in(i).shape() != y.shape()) {
      plans[i] = std::make_unique<cpu::BroadcastPlan>(y.shape(),
                                                      std::initializer_list<const Shape*>{
                                                          &k.in(i).shape()});
    }
  }
  const std::size_t num_values = num_inputs + steps.size();
  k.pool.parallel_for(y.numel(), cpu::kElementwiseGrain, [&](std::int64_t begin,
                                                                 std::int64_t end) {
    // One kBlock buffer per gathered input and per step but the last.
    std::vector<T> buffers(num_values * static_cast<std::size_t>(kBlock));
    std::vector<const T*> values(num_values);
    for (std::int64_t s = begin; s < end; s += kBlock) {
      const std::int64_t n = std::min(kBlock, end - s);
      for (std::size_t i = 0; i < num_inputs; ++i) {
        const T* x = k.in(i).data<T>();
        if (!plans[i]) {
          values[i] = x + s;
          continue;
        }
        T* buf = buffers.data() + i * kBlock;
        plans[i]->for_each_run(s, s + n, [&](std::int64_t o, const std::int64_t* in,
                                             const std::int64_t* step, std::int64_t len) {
          T* dst = buf + (o - s);
          const T* src = x + in[0];
          if (step[0] == 0) {
            std::fill(dst, dst + len, *src);
          } else {
            for (std::int64_t j = 0; j < len; ++j) dst[j] = src[j];
          }
        });
        values[i] = buf;
      }
      for (std::size_t j = 0; j < steps.size(); ++j) {
        const Step& st = steps[j];
        const std::size_t v = num_inputs + j;
        T* dst = j + 1 == steps.size() ? py + s : buffers.data() + v * kBlock;
        const T* a = values[st.operands[0]];
        const T* b = st.operands.size() > 1 ? values[st.operands[1]] : nullptr;
        run_step<T>(st.op, a, b, dst, n);
        values[v] = dst;
      }
    }
  });
}

}  // namespace

void register_cpu_fused_kernels(KernelRegistry& r) {
  r.add("MatMulBiasAct", DType::kFloat32, Device::kCPU, matmul_bias_act<float>);
  r.add("MatMulBiasAct", DType::kFloat64, Device::kCPU, matmul_bias_act<double>);
  r.add("Conv2DBiasAct", DType::kFloat32, Device::kCPU, conv2d_bias_act<float>);
  r.add("Conv2DBiasAct", DType::kFloat64, Device::kCPU, conv2d_bias_act<double>);
  r.add("FusedElementwise", DType::kFloat32, Device::kCPU, fused_elementwise<float>);
  r.add("FusedElementwise", DType::kFloat64, Device::kCPU, fused_elementwise<double>);
}

}  // namespace loom::backend
