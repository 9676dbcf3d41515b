// The 2-layer MLP problem of nn/train.h's tests (train_test.cc, loss_scale_test.cc): a local MSE
// loss, the sizes, and the fixed pseudo-random values weights and batches are made from.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "nn/cell.h"

namespace loom::nn::test_mlp {

// mean((logits - labels)²) over every element.
class LocalMSE : public Cell {
 public:
  LocalMSE() : Cell("LocalMSE") {}
  ops::Var construct(const std::vector<ops::Var>& in) override {
    ops::Emitter& e = current_emitter();
    const ops::Var d = sub(in[0], in[1]);
    const Shape s = e.shape_of(d);
    std::int64_t n = 1;
    std::vector<std::int64_t> axes;
    for (std::size_t i = 0; i < s.size(); ++i) {
      n *= s[i];
      axes.push_back(static_cast<std::int64_t>(i));
    }
    const ops::Var sum = e.reduce_sum(mul(d, d), axes, /*keep_dims=*/false);
    return mul(sum, e.scalar_like(sum, 1.0 / static_cast<double>(n)));
  }
};

constexpr std::int64_t kN = 6, kIn = 4, kHidden = 5, kOut = 3;

inline double pseudo(int i, double scale) { return scale * std::sin(0.7 * i + 0.3); }

}  // namespace loom::nn::test_mlp
