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
// the output are each traversed once. Each step is its op's own block functor (KernelDef::block,
// declared where the op's CPU kernels are registered), looked up once per node by prepare, so
// the arithmetic is the unfused kernels' own.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/elementwise.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/cpu.h"
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
  cpu::pool(k).parallel_for(m, grain, [&](std::int64_t lo, std::int64_t hi) {
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

// Conv2DBiasAct runs the backend's own Conv2D kernel, prepared once for the node.
struct ConvBiasActPlan {
  ir::PrimitivePtr conv;       // the Conv2D primitive (attributes without `act`)
  const KernelDef* kernel;     // the CPU Conv2D kernel of this dtype
  Prepared prepared;           // its own prepare's plan and workspace
};

Prepared prepare_conv2d_bias_act(const PrepareContext& c) {
  auto plan = std::make_shared<ConvBiasActPlan>();
  ir::Primitive::Attrs attrs = c.prim.attrs();
  attrs.erase("act");
  plan->conv = std::make_shared<ir::Primitive>("Conv2D", std::move(attrs));
  plan->kernel = cpu_backend().find_kernel("Conv2D", c.inputs[0].dtype);
  if (!plan->kernel) throw InternalError("Conv2DBiasAct: expected a CPU Conv2D kernel, got none");
  if (plan->kernel->prepare) {
    plan->prepared = plan->kernel->prepare(
        PrepareContext{*plan->conv, c.inputs.first(2), c.outputs, c.exec});
  }
  const std::size_t workspace = plan->prepared.workspace_bytes;
  return Prepared{std::move(plan), workspace};
}

template <typename T>
void conv2d_bias_act(const KernelContext& k) {
  const ConvBiasActPlan& plan = k.state<ConvBiasActPlan>();
  plan.kernel->run(KernelContext{*plan.conv, k.inputs.first(2), k.outputs, k.exec,
                                 plan.prepared.state.get(), k.workspace, k.workspace_bytes});
  Tensor& y = k.out(0);
  const std::int64_t channels = y.dim(1);
  const std::int64_t plane = y.dim(2) * y.dim(3);
  const T* bias = k.in(2).data<T>();
  T* py = y.data<T>();
  const Act act = act_of(k);
  const std::int64_t grain = std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, plane));
  cpu::pool(k).parallel_for(y.dim(0) * channels, grain, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t p = lo; p < hi; ++p) {
      bias_act_run(py + p * plane, plane, bias[p % channels], act);
    }
  });
}

// ---- FusedElementwise -----------------------------------------------------------------------

// Elements per block: each step's buffer of a block fits in L1 (16 KiB of Float64).
constexpr std::int64_t kBlock = 2048;

// The program decoded once per node: each step's block functor (the CPU kernel registration of
// its op declares it, KernelDef::block) and operands, and a broadcast plan per input not laid
// out like the output.
struct FusedPlan {
  struct Step {
    BlockFn block;
    std::vector<std::size_t> operands;
  };
  std::vector<Step> steps;
  std::vector<std::unique_ptr<cpu::BroadcastPlan>> plans;  // null: read in place
};

Prepared prepare_fused_elementwise(const PrepareContext& c) {
  auto plan = std::make_shared<FusedPlan>();
  const DType dtype = c.outputs[0].dtype;
  for (const ops::FusedStep& s : ops::fused_program(c.attr("program"), c.inputs.size())) {
    const KernelDef* def = cpu_backend().find_kernel(s.op, dtype);
    if (def == nullptr || def->block == nullptr) {
      throw InternalError("FusedElementwise: expected a CPU block functor for " + s.op + " " +
                          std::string(dtype_name(dtype)) + ", got none");
    }
    plan->steps.push_back({def->block, s.operands});
  }
  const Shape& out = c.outputs[0].shape;
  for (const TensorType& in : c.inputs) {
    plan->plans.push_back(in.shape == out ? nullptr
                                          : std::make_unique<cpu::BroadcastPlan>(
                                                out, std::initializer_list<const Shape*>{&in.shape}));
  }
  return Prepared{std::move(plan), 0};
}

template <typename T>
void fused_elementwise(const KernelContext& k) {
  const FusedPlan& plan = k.state<FusedPlan>();
  const std::size_t num_inputs = k.inputs.size();
  Tensor& y = k.out(0);
  T* py = y.data<T>();
  const std::size_t num_values = num_inputs + plan.steps.size();
  cpu::pool(k).parallel_for(y.numel(), cpu::kElementwiseGrain, [&](std::int64_t begin,
                                                                   std::int64_t end) {
    // One kBlock buffer per gathered input and per step but the last, kept by the thread (no
    // allocation once it has grown).
    thread_local std::vector<T> buffers;
    buffers.resize(std::max(buffers.size(), num_values * static_cast<std::size_t>(kBlock)));
    std::vector<const void*> values(num_values);
    for (std::int64_t s = begin; s < end; s += kBlock) {
      const std::int64_t n = std::min(kBlock, end - s);
      for (std::size_t i = 0; i < num_inputs; ++i) {
        const T* x = k.in(i).data<T>();
        if (!plan.plans[i]) {
          values[i] = x + s;
          continue;
        }
        T* buf = buffers.data() + i * kBlock;
        plan.plans[i]->for_each_run(s, s + n, [&](std::int64_t o, const std::int64_t* in,
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
      for (std::size_t j = 0; j < plan.steps.size(); ++j) {
        const FusedPlan::Step& st = plan.steps[j];
        const std::size_t v = num_inputs + j;
        T* dst = j + 1 == plan.steps.size() ? py + s : buffers.data() + v * kBlock;
        const void* operands[2] = {values[st.operands[0]],
                                   st.operands.size() > 1 ? values[st.operands[1]] : nullptr};
        st.block(operands, dst, n);
        values[v] = dst;
      }
    }
  });
}

}  // namespace

void register_cpu_fused_kernels(KernelRegistry& r) {
  r.add("MatMulBiasAct", DType::kFloat32, matmul_bias_act<float>).writes_every_output_element();
  r.add("MatMulBiasAct", DType::kFloat64, matmul_bias_act<double>).writes_every_output_element();
  r.add("Conv2DBiasAct", DType::kFloat32, conv2d_bias_act<float>)
      .with_prepare(prepare_conv2d_bias_act)
      .writes_every_output_element();
  r.add("Conv2DBiasAct", DType::kFloat64, conv2d_bias_act<double>)
      .with_prepare(prepare_conv2d_bias_act)
      .writes_every_output_element();
  r.add("FusedElementwise", DType::kFloat32, fused_elementwise<float>)
      .with_prepare(prepare_fused_elementwise)
      .elementwise();
  r.add("FusedElementwise", DType::kFloat64, fused_elementwise<double>)
      .with_prepare(prepare_fused_elementwise)
      .elementwise();
}

}  // namespace loom::backend
