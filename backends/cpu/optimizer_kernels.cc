// CPU kernels of the optimizer updates (ApplyMomentum, CombineMomentum, ApplyAdam): one
// elementwise pass that reads the current values and writes the new ones to the outputs. The
// arithmetic follows MindSpore's CPU kernels operation for operation (Adam's moments as m + (g - m) * (1 - beta1),
// its bias-corrected rate computed once in the parameter's dtype).
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/cpu.h"
#include "backends/kernel.h"
#include "backends/thread_pool.h"
#include "core/ir/error.h"
#include "ops/op.h"

namespace loom::backend {

namespace {

constexpr std::int64_t kGrain = 16384;

template <typename T>
T scalar_input(const KernelContext& k, std::size_t i) {
  return k.in(i).data<T>()[0];
}

// One parameter's momentum update over elements [b, e): ApplyMomentum's and CombineMomentum's
// arithmetic (one function, so the two agree bitwise).
template <typename T>
struct MomentumStep {
  T lr, momentum, scale;
  bool nesterov;
  void operator()(const T* var, const T* accum, const T* grad, T* var_out, T* accum_out,
                  std::int64_t b, std::int64_t e) const {
    if (nesterov) {
      for (std::int64_t i = b; i < e; ++i) {
        const T g = grad[i] * scale;
        const T a = accum[i] * momentum + g;
        accum_out[i] = a;
        var_out[i] = var[i] - (g * lr + a * momentum * lr);
      }
    } else {
      for (std::int64_t i = b; i < e; ++i) {
        const T a = accum[i] * momentum + grad[i] * scale;
        accum_out[i] = a;
        var_out[i] = var[i] - a * lr;
      }
    }
  }
};

template <typename T>
MomentumStep<T> momentum_step(const KernelContext& k, std::size_t lr, std::size_t momentum) {
  return {scalar_input<T>(k, lr), scalar_input<T>(k, momentum),
          static_cast<T>(k.attr("gradient_scale").as_double()), k.attr("use_nesterov").as_bool()};
}

template <typename T>
void apply_momentum(const KernelContext& k) {
  const MomentumStep<T> step = momentum_step<T>(k, 2, 4);
  const T* var = k.in(0).data<T>();
  const T* accum = k.in(1).data<T>();
  const T* grad = k.in(3).data<T>();
  T* var_out = k.out(0).data<T>();
  T* accum_out = k.out(1).data<T>();
  cpu::pool(k).parallel_for(k.in(0).numel(), kGrain, [&](std::int64_t b, std::int64_t e) {
    step(var, accum, grad, var_out, accum_out, b, e);
  });
}

// CombineMomentum(lr, momentum, (var, accum, grad)...): the parameters' elements as one index
// space, so one parallel_for updates them all.
template <typename T>
void combine_momentum(const KernelContext& k) {
  const MomentumStep<T> step = momentum_step<T>(k, 0, 1);
  const std::size_t n = (k.inputs.size() - 2) / 3;
  std::vector<std::int64_t> start(n + 1, 0);
  for (std::size_t j = 0; j < n; ++j) start[j + 1] = start[j] + k.in(2 + 3 * j).numel();
  cpu::pool(k).parallel_for(start[n], kGrain, [&](std::int64_t b, std::int64_t e) {
    auto j = static_cast<std::size_t>(std::upper_bound(start.begin(), start.end(), b) -
                                      start.begin() - 1);
    for (; b < e && j < n; ++j) {
      const std::int64_t hi = std::min(e, start[j + 1]);
      if (hi <= b) continue;
      const std::size_t i = 2 + 3 * j;
      step(k.in(i).data<T>(), k.in(i + 1).data<T>(), k.in(i + 2).data<T>(),
           k.out(2 * j).data<T>(), k.out(2 * j + 1).data<T>(), b - start[j], hi - start[j]);
      b = hi;
    }
  });
}

template <typename T>
void apply_adam(const KernelContext& k) {
  const T* var = k.in(0).data<T>();
  const T* m = k.in(1).data<T>();
  const T* v = k.in(2).data<T>();
  const T beta1_power = scalar_input<T>(k, 3);
  const T beta2_power = scalar_input<T>(k, 4);
  const T lr = scalar_input<T>(k, 5);
  const T beta1 = scalar_input<T>(k, 6);
  const T beta2 = scalar_input<T>(k, 7);
  const T epsilon = scalar_input<T>(k, 8);
  const T* grad = k.in(9).data<T>();
  const bool nesterov = k.attr("use_nesterov").as_bool();
  const T one = 1;
  if (beta1_power == one) {
    // The bias correction divides by 1 - beta1_power.
    throw ValueError("ApplyAdam: expected beta1_power other than 1, got 1");
  }
  const T lr_t = lr * std::sqrt(one - beta2_power) / (one - beta1_power);
  T* var_out = k.out(0).data<T>();
  T* m_out = k.out(1).data<T>();
  T* v_out = k.out(2).data<T>();
  cpu::pool(k).parallel_for(k.in(0).numel(), kGrain, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      const T g = grad[i];
      const T mi = m[i] + (g - m[i]) * (one - beta1);
      const T vi = v[i] + (g * g - v[i]) * (one - beta2);
      const T step = nesterov ? mi * beta1 + (one - beta1) * g : mi;
      m_out[i] = mi;
      v_out[i] = vi;
      var_out[i] = var[i] - lr_t * step / (std::sqrt(vi) + epsilon);
    }
  });
}

}  // namespace

void register_cpu_optimizer_kernels(KernelRegistry& r) {
  // Each element of the new variable and state is computed from the same element of the old
  // ones, read first: the training step writes them in place (donation).
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

}  // namespace loom::backend
