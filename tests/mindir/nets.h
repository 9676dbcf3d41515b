// Networks shared by the MindIR tests and the interop tool: a small ResNet-style network with
// BatchNorm and a residual Add, the same layers as tests/mindir/mindir_check.py's MindSpore one.
#pragma once

#include <memory>

#include "nn/cell.h"
#include "nn/layers.h"

namespace loom::testing {

//   x (N, 3, 8, 8) → conv1 3×3 same (8) → bn1 → relu ─┬→ conv2 3×3 pad 1 → bn2 → Add → relu
//                                                      └──────────────────────────┘
//   → AvgPool 2×2 → ReduceMean (2, 3) → fc Dense(8 → 10) → Softmax
class SmallResNet : public nn::Cell {
 public:
  SmallResNet() : Cell("SmallResNet") {
    conv1_ = &register_cell(
        "conv1", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(3, 8, 3).pad_mode("same")));
    bn1_ = &register_cell("bn1", std::make_shared<nn::BatchNorm2d>(8));
    conv2_ = &register_cell("conv2", std::make_shared<nn::Conv2d>(
                                         nn::Conv2dOptions(8, 8, 3).pad_mode("pad").padding(1)));
    bn2_ = &register_cell("bn2", std::make_shared<nn::BatchNorm2d>(8));
    pool_ = &register_cell("pool", std::make_shared<nn::AvgPool2d>(2, 2));
    fc_ = &register_cell("fc", std::make_shared<nn::Dense>(8, 10));
    softmax_ = &register_cell("sm", std::make_shared<nn::Softmax>());
  }
  ops::Var construct(const std::vector<ops::Var>& in) override {
    ops::Var y = nn::relu((*bn1_)((*conv1_)(in[0])));
    ops::Var z = (*bn2_)((*conv2_)(y));
    z = nn::relu(nn::add(z, y));
    z = (*pool_)(z);
    z = nn::current_emitter().emit(
        "ReduceMean", {z},
        {{"axis", ir::Value::ints({2, 3})}, {"keep_dims", ir::Value::boolean(false)}});
    return (*softmax_)((*fc_)(z));
  }
  // Non-trivial moving statistics and affine parameters (a fixed pattern per channel).
  void randomize_bn() {
    int k = 0;
    for (nn::BatchNorm2d* bn : {bn1_, bn2_}) {
      ++k;
      Tensor& m = bn->moving_mean().value;
      Tensor& v = bn->moving_variance().value;
      Tensor& g = bn->gamma().value;
      Tensor& b = bn->beta().value;
      for (std::int64_t i = 0; i < m.numel(); ++i) {
        m.data<float>()[i] = 0.1f * static_cast<float>((i * 7 + k) % 5) - 0.2f;
        v.data<float>()[i] = 0.5f + 0.25f * static_cast<float>((i * 3 + k) % 4);
        g.data<float>()[i] = 0.8f + 0.05f * static_cast<float>(i % 5);
        b.data<float>()[i] = 0.03f * static_cast<float>(i % 3) - 0.02f;
      }
    }
  }

 private:
  nn::Conv2d *conv1_, *conv2_;
  nn::BatchNorm2d *bn1_, *bn2_;
  nn::AvgPool2d* pool_;
  nn::Dense* fc_;
  nn::Softmax* softmax_;
};

}  // namespace loom::testing
