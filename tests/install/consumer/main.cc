// A network written outside loom's tree, against the installed headers and libraries: a Cell of
// two Dense layers with a ReLU, trained by TrainOneStepCell (graph mode: traced, differentiated,
// compiled) on a fixed batch until the loss falls; prints the first and last loss.
#include <cstdio>
#include <memory>
#include <vector>

#include "core/ir/tensor.h"
#include "core/random/random.h"
#include "nn/cell.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/train.h"

namespace {

class Net : public loom::nn::Cell {
 public:
  Net() : Cell("Net") {
    fc1_ = &register_cell("fc1", std::make_shared<loom::nn::Dense>(4, 16));
    fc2_ = &register_cell("fc2", std::make_shared<loom::nn::Dense>(16, 2));
  }
  loom::ops::Var construct(const std::vector<loom::ops::Var>& in) override {
    return (*fc2_)(loom::nn::relu((*fc1_)(in[0])));
  }

 private:
  loom::nn::Dense* fc1_;
  loom::nn::Dense* fc2_;
};

}  // namespace

int main() {
  using namespace loom;
  random::seed_all(1);
  auto net = std::make_shared<Net>();
  auto with_loss = std::make_shared<nn::WithLossCell>(
      net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(/*sparse=*/true));
  nn::TrainOneStepCell step(with_loss, nn::OptimizerSpec{.learning_rate = 0.1});
  net->set_train(true);
  Tensor x(DType::kFloat32, {8, 4});
  Tensor y(DType::kInt32, {8});
  random::RandomStream rng("consumer/data");
  rng.fill_normal(x, 0.0, 1.0);
  for (int i = 0; i < 8; ++i) y.data<std::int32_t>()[i] = x.get(i * 4) > 0 ? 1 : 0;
  double first = 0, last = 0;
  for (int s = 0; s < 50; ++s) {
    const double loss = step.step(x, y).get(0);
    if (s == 0) first = loss;
    last = loss;
  }
  std::printf("consumer: loss %.4f -> %.4f over 50 steps\n", first, last);
  return last < first / 2 ? 0 : 1;
}
