// A user-defined op, registered from outside loom's tree: Swish(x) = x * sigmoid(x).
//
// Everything about the op sits in one OpDef (name, inference, bprop written with ops::Emitter,
// summary), added to the op registry at start-up; its CPU kernels (Float32 and Float64) go to the
// CPU backend's KernelRegistry. The bprop is then checked against central finite differences in
// Float64 (eagerly, through backend::run_bprop), and the op is used in a network traced, differ-
// entiated and compiled by TrainOneStepCell.
//
//   build/bin/loom_example_custom_op      (exit 1 when the gradient check or training fails)
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "backends/backend.h"
#include "backends/eager.h"
#include "core/ir/error.h"
#include "core/ir/tensor.h"
#include "core/random/random.h"
#include "nn/cell.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/train.h"
#include "ops/op.h"

using namespace loom;

namespace {

// The op: one floating tensor in, the same type out.
void register_swish_op() {
  ops::OpDef def;
  def.name = "Swish";
  def.num_inputs = 1;
  def.trait = ops::Trait::kElementwise;
  def.infer = [](const ops::InferContext& c) {
    const ir::Abstract& x = c.tensor(0);
    if (!is_floating(x.dtype())) {
      throw TypeError(c.error("expected a floating tensor, got " + x.to_string()));
    }
    return c.input(0);
  };
  // d/dx x s(x) = s + x s (1 - s), s = sigmoid(x): built from differentiable ops, so the gradient
  // is itself differentiable.
  def.bprop = [](ops::Emitter& e, const ops::BpropArgs& a) -> ops::Grads {
    const ops::Var& x = a.inputs[0];
    const ops::Var s = e.emit("Sigmoid", {x});
    const ops::Var one_minus_s = e.sub(e.scalar_like(s, 1.0), s);
    const ops::Var dydx = e.add(s, e.mul(e.mul(x, s), one_minus_s));
    return {e.mul(a.dout, dydx)};
  };
  def.summary = "x * sigmoid(x) (examples/custom_op: a user-registered op)";
  def.mindir.absent_because = "a user's op, unknown to MindSpore";
  ops::Registry::global_mutable().add(std::move(def));
}

template <class T>
void swish_kernel(const backend::KernelContext& k) {
  const T* x = k.in(0).data<T>();
  T* y = k.out(0).data<T>();
  for (std::int64_t i = 0; i < k.in(0).numel(); ++i) y[i] = x[i] / (T(1) + std::exp(-x[i]));
}

void register_swish_kernels() {
  backend::KernelRegistry& r = backend::cpu_backend().kernels_mutable();
  r.add("Swish", DType::kFloat32, swish_kernel<float>).writes_every_output_element();
  r.add("Swish", DType::kFloat64, swish_kernel<double>).writes_every_output_element();
}

// Max |bprop - central differences| of <dout, Swish(x)> over x, in Float64 on random inputs.
double gradient_check_error() {
  random::RandomStream rng("custom_op/gradcheck");
  Tensor x(DType::kFloat64, {16});
  Tensor dout(DType::kFloat64, {16});
  rng.fill_normal(x, 0.0, 2.0);
  rng.fill_normal(dout, 0.0, 1.0);
  const ir::Value out = backend::run_op("Swish", {ir::Value::tensor(x)});
  const auto prim = ops::make_op("Swish");
  const ir::Value xs[] = {ir::Value::tensor(x)};
  const Tensor analytic =
      backend::run_bprop(*prim, xs, out, ir::Value::tensor(dout))[0].as_tensor();
  auto loss_at = [&](const Tensor& at) {  // <dout, Swish(at)>
    const Tensor y = backend::run_op("Swish", {ir::Value::tensor(at)}).as_tensor();
    double sum = 0;
    for (std::int64_t i = 0; i < y.numel(); ++i) sum += dout.get(i) * y.get(i);
    return sum;
  };
  const double h = 1e-6;
  double max_error = 0;
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    Tensor plus = x.clone(), minus = x.clone();
    plus.set(i, x.get(i) + h);
    minus.set(i, x.get(i) - h);
    const double numeric = (loss_at(plus) - loss_at(minus)) / (2 * h);
    max_error = std::max(max_error, std::abs(numeric - analytic.get(i)));
  }
  return max_error;
}

// Dense -> Swish -> Dense; Swish called by name, as any registered op.
class SwishNet : public nn::Cell {
 public:
  SwishNet() : Cell("SwishNet") {
    fc1_ = &register_cell("fc1", std::make_shared<nn::Dense>(4, 16));
    fc2_ = &register_cell("fc2", std::make_shared<nn::Dense>(16, 2));
  }
  ops::Var construct(const std::vector<ops::Var>& in) override {
    return (*fc2_)(nn::current_emitter().emit("Swish", {(*fc1_)(in[0])}));
  }

 private:
  nn::Dense* fc1_;
  nn::Dense* fc2_;
};

}  // namespace

int main() {
  try {
    register_swish_op();
    register_swish_kernels();

    const double error = gradient_check_error();
    std::printf("Swish gradient check (Float64, 16 random inputs): max error %.3g\n", error);
    if (!(error < 1e-6)) {
      std::fprintf(stderr, "Swish: expected a gradient error below 1e-6, got %.3g\n", error);
      return 1;
    }

    random::seed_all(1);
    auto net = std::make_shared<SwishNet>();
    auto with_loss = std::make_shared<nn::WithLossCell>(
        net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(/*sparse=*/true));
    nn::TrainOneStepCell step(with_loss, nn::OptimizerSpec{.learning_rate = 0.1});
    net->set_train(true);
    Tensor x(DType::kFloat32, {16, 4});
    Tensor y(DType::kInt32, {16});
    random::RandomStream rng("custom_op/data");
    rng.fill_normal(x, 0.0, 1.0);
    for (int i = 0; i < 16; ++i) y.data<std::int32_t>()[i] = x.get(i * 4) * x.get(i * 4 + 1) > 0;
    double first = 0, last = 0;
    for (int s = 0; s < 60; ++s) {
      const double loss = step.step(x, y).get(0);
      if (s == 0) first = loss;
      last = loss;
    }
    std::printf("SwishNet: loss %.4f -> %.4f over 60 steps\n", first, last);
    if (!(last < first / 2)) {
      std::fprintf(stderr, "SwishNet: expected the loss to halve, got %.4f -> %.4f\n", first, last);
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
