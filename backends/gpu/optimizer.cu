// CUDA kernels of the optimizer updates (ApplyMomentum, CombineMomentum, ApplyAdam), Float32 and
// Float64: one elementwise pass that reads the current values and writes the new ones to the
// outputs; CombineMomentum updates up to ops::kMaxCombinedParameters parameters in one launch
// (a grid row per parameter).
//
// The arithmetic is the CPU kernels' (backends/cpu/optimizer_kernels.cc) operation for operation,
// in the same order and with one rounding per operation (device_math.cuh: no fused multiply-adds).
// The scalar inputs (learning rate, momentum, Adam's betas and powers) are rank-0 tensors in
// device memory, read by every thread, so a launch never waits for the host; Adam's bias-corrected
// rate is computed by each thread from them with the same operations, so every element uses the
// same value. Each thread reads element i of every input before writing element i of the
// outputs, which is what lets the training step update the variable and its state in place
// (the may_overwrite pairs, as the CPU declares them).
//
// One difference from the CPU kernel: ApplyAdam with beta1_power == 1 (the bias correction
// divides by 1 - beta1_power) cannot be rejected without reading the scalar on the host and so
// waiting for the stream; here it gives an infinite rate and non-finite variables.
#include <algorithm>
#include <cstdint>
#include <string>

#include "backends/gpu/cuda.h"
#include "backends/gpu/device_math.cuh"
#include "core/ir/error.h"
#include "ops/op.h"

namespace loom::backend::cuda {

namespace {

// Element i of one parameter's momentum update: ApplyMomentum's and CombineMomentum's arithmetic.
template <typename T>
__device__ inline void momentum_element(const T* var, const T* accum, const T* grad, T lr,
                                        T momentum, T scale, bool nesterov, T* var_out,
                                        T* accum_out, std::int64_t i) {
  const T v = var[i];
  const T acc = accum[i];
  const T g0 = grad[i];
  if (nesterov) {
    const T g = dm::mul(g0, scale);
    const T a = dm::add(dm::mul(acc, momentum), g);
    accum_out[i] = a;
    var_out[i] = dm::sub(v, dm::add(dm::mul(g, lr), dm::mul(dm::mul(a, momentum), lr)));
  } else {
    const T a = dm::add(dm::mul(acc, momentum), dm::mul(g0, scale));
    accum_out[i] = a;
    var_out[i] = dm::sub(v, dm::mul(a, lr));
  }
}

template <typename T>
__global__ void apply_momentum_kernel(const T* var, const T* accum, const T* lr_in,
                                      const T* grad, const T* momentum_in, T scale,
                                      bool nesterov, T* var_out, T* accum_out, std::int64_t n) {
  const T lr = *lr_in;
  const T momentum = *momentum_in;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    momentum_element(var, accum, grad, lr, momentum, scale, nesterov, var_out, accum_out, i);
  }
}

// CombineMomentum's parameters, passed by value (3 KiB of the 4 KiB argument space).
template <typename T>
struct MomentumGroup {
  const T* var[ops::kMaxCombinedParameters];
  const T* accum[ops::kMaxCombinedParameters];
  const T* grad[ops::kMaxCombinedParameters];
  T* var_out[ops::kMaxCombinedParameters];
  T* accum_out[ops::kMaxCombinedParameters];
  std::int64_t n[ops::kMaxCombinedParameters];
};

// Parameter blockIdx.y, its elements strided over blockIdx.x.
template <typename T>
__global__ void combine_momentum_kernel(MomentumGroup<T> g, const T* lr_in,
                                        const T* momentum_in, T scale, bool nesterov) {
  const unsigned j = blockIdx.y;
  const T lr = *lr_in;
  const T momentum = *momentum_in;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < g.n[j]; i += stride) {
    momentum_element(g.var[j], g.accum[j], g.grad[j], lr, momentum, scale, nesterov,
                     g.var_out[j], g.accum_out[j], i);
  }
}

template <typename T>
void apply_momentum(const KernelContext& k) {
  const std::int64_t n = k.in(0).numel();
  if (n == 0) return;
  const T scale = static_cast<T>(k.attr("gradient_scale").as_double());
  const bool nesterov = k.attr("use_nesterov").as_bool();
  apply_momentum_kernel<T><<<blocks(n), kThreads, 0, context(k).stream>>>(
      k.in(0).data<T>(), k.in(1).data<T>(), k.in(2).data<T>(), k.in(3).data<T>(),
      k.in(4).data<T>(), scale, nesterov, k.out(0).data<T>(), k.out(1).data<T>(), n);
  LOOM_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void combine_momentum(const KernelContext& k) {
  const std::size_t count = (k.inputs.size() - 2) / 3;
  if (count > ops::kMaxCombinedParameters) {
    throw InternalError("CombineMomentum: expected at most " +
                        std::to_string(ops::kMaxCombinedParameters) + " parameters, got " +
                        std::to_string(count));
  }
  MomentumGroup<T> g{};
  std::int64_t largest = 0;
  for (std::size_t j = 0; j < count; ++j) {
    const std::size_t i = 2 + 3 * j;
    g.var[j] = k.in(i).data<T>();
    g.accum[j] = k.in(i + 1).data<T>();
    g.grad[j] = k.in(i + 2).data<T>();
    g.var_out[j] = k.out(2 * j).data<T>();
    g.accum_out[j] = k.out(2 * j + 1).data<T>();
    g.n[j] = k.in(i).numel();
    largest = std::max(largest, g.n[j]);
  }
  if (largest == 0) return;
  const T scale = static_cast<T>(k.attr("gradient_scale").as_double());
  const bool nesterov = k.attr("use_nesterov").as_bool();
  const dim3 grid(blocks(largest), static_cast<unsigned>(count));
  combine_momentum_kernel<T><<<grid, kThreads, 0, context(k).stream>>>(
      g, k.in(0).data<T>(), k.in(1).data<T>(), scale, nesterov);
  LOOM_CUDA_CHECK(cudaGetLastError());
}

struct AdamScalars {
  const void* beta1_power;
  const void* beta2_power;
  const void* lr;
  const void* beta1;
  const void* beta2;
  const void* epsilon;
};

template <typename T>
__global__ void apply_adam_kernel(const T* var, const T* m, const T* v, AdamScalars s,
                                  const T* grad, bool nesterov, T* var_out, T* m_out, T* v_out,
                                  std::int64_t n) {
  const T beta1_power = *static_cast<const T*>(s.beta1_power);
  const T beta2_power = *static_cast<const T*>(s.beta2_power);
  const T lr = *static_cast<const T*>(s.lr);
  const T beta1 = *static_cast<const T*>(s.beta1);
  const T beta2 = *static_cast<const T*>(s.beta2);
  const T epsilon = *static_cast<const T*>(s.epsilon);
  const T one = 1;
  const T lr_t = dm::div(dm::mul(lr, dm::sqrt(dm::sub(one, beta2_power))),
                         dm::sub(one, beta1_power));
  const T one_minus_beta1 = dm::sub(one, beta1);
  const T one_minus_beta2 = dm::sub(one, beta2);
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const T g = grad[i];
    const T mv = m[i];
    const T vv = v[i];
    const T x = var[i];
    const T mi = dm::add(mv, dm::mul(dm::sub(g, mv), one_minus_beta1));
    const T vi = dm::add(vv, dm::mul(dm::sub(dm::mul(g, g), vv), one_minus_beta2));
    const T step = nesterov ? dm::add(dm::mul(mi, beta1), dm::mul(one_minus_beta1, g)) : mi;
    m_out[i] = mi;
    v_out[i] = vi;
    var_out[i] = dm::sub(x, dm::div(dm::mul(lr_t, step), dm::add(dm::sqrt(vi), epsilon)));
  }
}

template <typename T>
void apply_adam(const KernelContext& k) {
  const std::int64_t n = k.in(0).numel();
  if (n == 0) return;
  const AdamScalars s{k.in(3).raw_data(), k.in(4).raw_data(), k.in(5).raw_data(),
                      k.in(6).raw_data(), k.in(7).raw_data(), k.in(8).raw_data()};
  const bool nesterov = k.attr("use_nesterov").as_bool();
  apply_adam_kernel<T><<<blocks(n), kThreads, 0, context(k).stream>>>(
      k.in(0).data<T>(), k.in(1).data<T>(), k.in(2).data<T>(), s, k.in(9).data<T>(), nesterov,
      k.out(0).data<T>(), k.out(1).data<T>(), k.out(2).data<T>(), n);
  LOOM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void register_optimizer_kernels(KernelRegistry& r) {
  // As the CPU declares them: every output element written, the variable and its state may be
  // updated in place (element i of each input is read before element i of an output is written).
  for (KernelDef* d : {&r.add("ApplyMomentum", DType::kFloat32, apply_momentum<float>),
                       &r.add("ApplyMomentum", DType::kFloat64, apply_momentum<double>)}) {
    d->writes_every_output_element().may_overwrite(0, 0).may_overwrite(1, 1);
  }
  for (KernelDef* d : {&r.add("CombineMomentum", DType::kFloat32, combine_momentum<float>),
                       &r.add("CombineMomentum", DType::kFloat64, combine_momentum<double>)}) {
    d->writes_every_output_element();
    for (std::size_t j = 0; j < ops::kMaxCombinedParameters; ++j) {
      d->may_overwrite(2 + 3 * j, 2 * j).may_overwrite(3 + 3 * j, 2 * j + 1);
    }
  }
  for (KernelDef* d : {&r.add("ApplyAdam", DType::kFloat32, apply_adam<float>),
                       &r.add("ApplyAdam", DType::kFloat64, apply_adam<double>)}) {
    d->writes_every_output_element().may_overwrite(0, 0).may_overwrite(1, 1).may_overwrite(2, 2);
  }
}

}  // namespace loom::backend::cuda
