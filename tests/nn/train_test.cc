// nn/train.h: WithLossCell and TrainOneStepCell on a 2-layer MLP with a local MSE loss. Graph
// mode equals the PyNative (interpreted) path and a hand-written reference (analytic gradients
// of the MLP, optimizer formulas of optim/update.h); weights are updated in place; one
// compilation per input signature.
#include "nn/train.h"

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <memory>
#include <vector>

#include "core/ir/error.h"
#include "runtime/executable.h"
#include "nn/layers.h"
#include "tests/nn/mlp_util.h"

namespace loom::nn {
namespace {

using test_mlp::LocalMSE;
using test_mlp::kN, test_mlp::kIn, test_mlp::kHidden, test_mlp::kOut;
using test_mlp::pseudo;

struct Mlp {
  std::shared_ptr<Dense> fc1, fc2;
  std::shared_ptr<WithLossCell> net;
};

// Float64 weights with fixed values, so that every copy of the network starts equal.
Mlp make_mlp() {
  Mlp m;
  m.fc1 = std::make_shared<Dense>(kIn, kHidden);
  m.fc2 = std::make_shared<Dense>(kHidden, kOut);
  auto seq = std::make_shared<SequentialCell>();
  seq->append(m.fc1).append(std::make_shared<ReLU>()).append(m.fc2);
  m.net = std::make_shared<WithLossCell>(seq, std::make_shared<LocalMSE>());
  int k = 0;
  for (auto& [name, p] : m.net->parameters_and_names()) {
    std::vector<double> v(static_cast<std::size_t>(p->value.numel()));
    for (double& x : v) x = pseudo(k++, 0.6);
    p->value = Tensor::from_doubles(DType::kFloat64, p->value.shape(), v);
  }
  return m;
}

Tensor data() {
  std::vector<double> v(kN * kIn);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = pseudo(static_cast<int>(i) + 100, 1.0);
  return Tensor::from_doubles(DType::kFloat64, {kN, kIn}, v);
}
Tensor label() {
  std::vector<double> v(kN * kOut);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = pseudo(static_cast<int>(i) + 200, 0.8);
  return Tensor::from_doubles(DType::kFloat64, {kN, kOut}, v);
}

// The hand-written reference: weights W1 (H, I), b1 (H), W2 (O, H), b2 (O).
struct Ref {
  std::vector<std::vector<double>> w;  // W1, b1, W2, b2
  std::vector<std::vector<double>> s1, s2;
  std::int64_t t = 0;
  double beta1_power = 1, beta2_power = 1;

  explicit Ref(Mlp& m)
      : w{m.fc1->weight().value.to_doubles(), m.fc1->bias()->value.to_doubles(),
          m.fc2->weight().value.to_doubles(), m.fc2->bias()->value.to_doubles()} {
    for (auto& x : w) {
      s1.emplace_back(x.size(), 0.0);
      s2.emplace_back(x.size(), 0.0);
    }
  }

  // Returns the loss; fills g.
  double loss_and_grad(const std::vector<double>& x, const std::vector<double>& y,
                       std::vector<std::vector<double>>& g) const {
    const auto &W1 = w[0], &b1 = w[1], &W2 = w[2], &b2 = w[3];
    g = {std::vector<double>(W1.size()), std::vector<double>(b1.size()),
         std::vector<double>(W2.size()), std::vector<double>(b2.size())};
    double loss = 0;
    const double scale = 1.0 / static_cast<double>(kN * kOut);
    for (std::int64_t n = 0; n < kN; ++n) {
      std::vector<double> h(kHidden), a(kHidden), out(kOut), dy(kOut), da(kHidden, 0.0);
      for (std::int64_t j = 0; j < kHidden; ++j) {
        h[j] = b1[j];
        for (std::int64_t i = 0; i < kIn; ++i) h[j] += x[n * kIn + i] * W1[j * kIn + i];
        a[j] = h[j] > 0 ? h[j] : 0.0;
      }
      for (std::int64_t o = 0; o < kOut; ++o) {
        out[o] = b2[o];
        for (std::int64_t j = 0; j < kHidden; ++j) out[o] += a[j] * W2[o * kHidden + j];
        const double d = out[o] - y[n * kOut + o];
        loss += d * d * scale;
        dy[o] = 2 * d * scale;
        g[3][o] += dy[o];
        for (std::int64_t j = 0; j < kHidden; ++j) {
          g[2][o * kHidden + j] += dy[o] * a[j];
          da[j] += dy[o] * W2[o * kHidden + j];
        }
      }
      for (std::int64_t j = 0; j < kHidden; ++j) {
        const double dh = h[j] > 0 ? da[j] : 0.0;
        g[1][j] += dh;
        for (std::int64_t i = 0; i < kIn; ++i) g[0][j * kIn + i] += dh * x[n * kIn + i];
      }
    }
    return loss;
  }

  double step(const OptimizerSpec& o, const std::vector<double>& x, const std::vector<double>& y) {
    std::vector<std::vector<double>> g;
    const double loss = loss_and_grad(x, y, g);
    ++t;
    // MindSpore's beta powers: running products, advanced before the update.
    beta1_power *= o.beta1;
    beta2_power *= o.beta2;
    for (std::size_t k = 0; k < w.size(); ++k) {
      for (std::size_t i = 0; i < w[k].size(); ++i) {
        const double gi = g[k][i] + o.weight_decay * w[k][i];
        if (o.kind == OptimizerKind::kMomentum) {
          s1[k][i] = o.momentum * s1[k][i] + gi;
          w[k][i] -= o.learning_rate * s1[k][i];
        } else {
          s1[k][i] = o.beta1 * s1[k][i] + (1 - o.beta1) * gi;
          s2[k][i] = o.beta2 * s2[k][i] + (1 - o.beta2) * gi * gi;
          const double lr_t = o.learning_rate * std::sqrt(1 - beta2_power) / (1 - beta1_power);
          w[k][i] -= lr_t * s1[k][i] / (std::sqrt(s2[k][i]) + o.eps.value_or(1e-8));
        }
      }
    }
    return loss;
  }
};

void expect_near(const std::vector<double>& a, const std::vector<double>& b, double tol,
                 const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tol) << what << "[" << i << "]";
}

std::vector<std::vector<double>> weights_of(Mlp& m) {
  return {m.fc1->weight().value.to_doubles(), m.fc1->bias()->value.to_doubles(),
          m.fc2->weight().value.to_doubles(), m.fc2->bias()->value.to_doubles()};
}

void run_ten_steps(const OptimizerSpec& opt) {
  Mlp graph_mlp = make_mlp(), pynative_mlp = make_mlp();
  Ref ref(graph_mlp);
  TrainOneStepCell graph(graph_mlp.net, opt, ExecMode::kGraph);
  TrainOneStepCell pynative(pynative_mlp.net, opt, ExecMode::kPyNative);
  const Tensor x = data(), y = label();
  const std::vector<double> xd = x.to_doubles(), yd = y.to_doubles();

  std::vector<const void*> storage;
  for (auto& [name, p] : graph_mlp.net->parameters_and_names()) storage.push_back(p->value.raw_data());

  std::vector<double> losses;
  for (int s = 0; s < 10; ++s) {
    const double lg = graph.step(x, y).to_doubles()[0];
    const double lp = pynative.step(x, y).to_doubles()[0];
    const double lr = ref.step(opt, xd, yd);
    EXPECT_NEAR(lg, lp, 1e-6) << "step " << s;
    EXPECT_NEAR(lg, lr, 1e-6) << "step " << s;
    losses.push_back(lg);
    const auto wg = weights_of(graph_mlp), wp = weights_of(pynative_mlp);
    for (std::size_t k = 0; k < wg.size(); ++k) {
      expect_near(wg[k], wp[k], 1e-6, "pynative w" + std::to_string(k));
      expect_near(wg[k], ref.w[k], 1e-6, "reference w" + std::to_string(k));
    }
  }
  EXPECT_LT(losses.back(), losses.front());
  for (std::size_t i = 1; i < losses.size(); ++i) EXPECT_LT(losses[i], losses[i - 1]) << i;

  // In place: the Parameters keep their storage; one compilation for ten steps.
  std::size_t i = 0;
  for (auto& [name, p] : graph_mlp.net->parameters_and_names()) {
    EXPECT_EQ(p->value.raw_data(), storage[i++]) << name;
  }
  EXPECT_EQ(graph.num_compilations(), 1u);
  EXPECT_EQ(graph.num_steps(), 10);
  ASSERT_NE(graph.last_executable(), nullptr);
  EXPECT_FALSE(graph.last_executable()->interpreted());
  // Every new weight and optimizer state is written straight into its argument: 4 weights plus
  // 4 accumulations (Momentum) or 4 + 8 moments (Adam), nothing copied back.
  const std::size_t outputs = opt.kind == OptimizerKind::kMomentum ? 8 : 12;
  EXPECT_EQ(graph.last_executable()->donations_in_place(), outputs);
  EXPECT_EQ(graph.last_executable()->donation_copies(), 0u);
  EXPECT_EQ(pynative.last_executable(), nullptr);

  // States, named as in MindSpore, equal the reference's.
  const std::vector<std::string> names = {"0.weight", "0.bias",
                                          "2.weight", "2.bias"};
  for (std::size_t k = 0; k < names.size(); ++k) {
    if (opt.kind == OptimizerKind::kMomentum) {
      const Tensor* s = graph.state("moments." + names[k]);
      ASSERT_NE(s, nullptr) << names[k];
      expect_near(s->to_doubles(), ref.s1[k], 1e-6, "moments");
    } else {
      const Tensor* m1 = graph.state("moment1." + names[k]);
      const Tensor* m2 = graph.state("moment2." + names[k]);
      ASSERT_NE(m1, nullptr) << names[k];
      ASSERT_NE(m2, nullptr) << names[k];
      expect_near(m1->to_doubles(), ref.s1[k], 1e-6, "moment1");
      expect_near(m2->to_doubles(), ref.s2[k], 1e-9, "moment2");
    }
  }
}

TEST(Train, WithLossCellComputesTheLossOfTheBackbone) {
  Mlp m = make_mlp();
  const Tensor x = data(), y = label();
  const double loss =
      (*m.net)({ops::Var(ir::Value::tensor(x)), ops::Var(ir::Value::tensor(y))})
          .value()
          .as_tensor()
          .to_doubles()[0];
  Ref ref(m);
  std::vector<std::vector<double>> g;
  EXPECT_NEAR(loss, ref.loss_and_grad(x.to_doubles(), y.to_doubles(), g), 1e-12);
  EXPECT_EQ(m.net->parameters_and_names()[0].first, "0.weight");
}

TEST(Train, MomentumGraphEqualsPyNativeAndReference) {
  run_ten_steps({.kind = OptimizerKind::kMomentum, .learning_rate = 0.02, .momentum = 0.5,
                 .weight_decay = 1e-3});
}

TEST(Train, AdamGraphEqualsPyNativeAndReference) {
  run_ten_steps({.kind = OptimizerKind::kAdam, .learning_rate = 0.01, .beta1 = 0.9,
                 .beta2 = 0.999, .eps = 1e-8, .weight_decay = 1e-4});
}

TEST(Train, ANewInputShapeCompilesOnceMore) {
  Mlp m = make_mlp();
  TrainOneStepCell train(m.net, {.kind = OptimizerKind::kAdam, .learning_rate = 0.01});
  const Tensor x = data(), y = label();
  train.step(x, y);
  train.step(x, y);
  EXPECT_EQ(train.num_compilations(), 1u);
  std::vector<double> x2(2 * kIn, 0.5), y2(2 * kOut, 0.1);
  const Tensor xs = Tensor::from_doubles(DType::kFloat64, {2, kIn}, x2);
  const Tensor ys = Tensor::from_doubles(DType::kFloat64, {2, kOut}, y2);
  train.step(xs, ys);
  EXPECT_EQ(train.num_compilations(), 2u);
  train.step(xs, ys);
  train.step(x, y);
  EXPECT_EQ(train.num_compilations(), 2u);
  EXPECT_EQ(train.num_steps(), 5);
}

// return_gradients: the step also outputs each trainable parameter's gradient. On a first
// Momentum step (zero moments) the update is w' = w - lr * g, so g = (w - w') / lr.
TEST(Train, ReturnsTheGradientsWhenAsked) {
  Mlp m = make_mlp();
  const double lr = 0.5;
  TrainOneStepCell train(m.net, {.kind = OptimizerKind::kMomentum, .learning_rate = lr});
  const Tensor x = data(), y = label();
  EXPECT_EQ(train.step_graph(), nullptr);
  train.step(x, y);
  EXPECT_TRUE(train.gradients().empty());
  ASSERT_NE(train.step_graph(), nullptr);
  train.set_return_gradients(true);
  std::vector<std::vector<double>> before;
  std::vector<std::string> names;
  for (auto& [name, p] : m.net->parameters_and_names()) {
    before.push_back(p->value.to_doubles());
    names.push_back(name);
  }
  // Zero the moments so that this step is a plain gradient step.
  for (const auto& [name, t] : train.states()) train.set_state(name, Tensor(t.dtype(), t.shape()));
  train.step(x, y);
  EXPECT_EQ(train.num_compilations(), 2u);
  ASSERT_EQ(train.gradients().size(), names.size());
  std::size_t k = 0;
  for (auto& [name, p] : m.net->parameters_and_names()) {
    EXPECT_EQ(train.gradients()[k].first, name);
    const std::vector<double> after = p->value.to_doubles(), g = train.gradients()[k].second.to_doubles();
    ASSERT_EQ(g.size(), after.size());
    for (std::size_t i = 0; i < g.size(); ++i) {
      EXPECT_NEAR(g[i], (before[k][i] - after[i]) / lr, 1e-12) << name << "[" << i << "]";
    }
    ++k;
  }
}

// The learning rate is a step input: changing it takes effect at the next step without a new
// compilation (schedules rely on it). With zero moments, a step moves w by lr * g exactly.
TEST(Train, TheLearningRateChangesWithoutRecompiling) {
  Mlp a = make_mlp(), b = make_mlp();
  TrainOneStepCell ta(a.net, {.kind = OptimizerKind::kMomentum, .learning_rate = 0.1, .momentum = 0});
  TrainOneStepCell tb(b.net, {.kind = OptimizerKind::kMomentum, .learning_rate = 0.3, .momentum = 0});
  const Tensor x = data(), y = label();
  ta.set_learning_rate(0.3);
  ta.step(x, y);
  tb.step(x, y);
  auto pa = a.net->parameters_and_names(), pb = b.net->parameters_and_names();
  for (std::size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(pa[i].second->value.bitwise_equal(pb[i].second->value)) << pa[i].first;
  }
  ta.set_learning_rate(0.05);
  ta.step(x, y);
  EXPECT_EQ(ta.num_compilations(), 1u);
  EXPECT_THROW(ta.set_learning_rate(-1), ValueError);
}

// The gradient reducer sits between autodiff and the update: scaling every gradient by 3 equals
// tripling the learning rate (with momentum 0: w' = w - lr * g).
TEST(Train, TheGradientReducerTransformsTheGradientsBeforeTheUpdate) {
  Mlp a = make_mlp(), b = make_mlp();
  TrainOneStepCell ta(a.net, {.kind = OptimizerKind::kMomentum, .learning_rate = 0.25, .momentum = 0});
  TrainOneStepCell tb(b.net, {.kind = OptimizerKind::kMomentum, .learning_rate = 0.75, .momentum = 0});
  std::vector<std::string> seen;
  ta.set_gradient_reducer([&](ops::Emitter& e, const std::vector<ops::Var>& grads,
                              const std::vector<std::string>& names) {
    seen = names;
    std::vector<ops::Var> out;
    for (const ops::Var& g : grads) out.push_back(e.mul(g, e.scalar_like(g, 3.0)));
    return out;
  });
  const Tensor x = data(), y = label();
  ta.step(x, y);
  tb.step(x, y);
  EXPECT_EQ(seen, (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  auto pa = a.net->parameters_and_names(), pb = b.net->parameters_and_names();
  for (std::size_t i = 0; i < pa.size(); ++i) {
    const auto va = pa[i].second->value.to_doubles(), vb = pb[i].second->value.to_doubles();
    for (std::size_t j = 0; j < va.size(); ++j) EXPECT_NEAR(va[j], vb[j], 1e-14) << pa[i].first;
  }
  EXPECT_THROW(ta.set_gradient_reducer(nullptr), ValueError);
}

TEST(Train, RejectsBadHyperParameters) {
  Mlp m = make_mlp();
  EXPECT_THROW(TrainOneStepCell(m.net, {.kind = OptimizerKind::kAdam, .beta1 = 1.0}), ValueError);
  EXPECT_THROW(TrainOneStepCell(m.net, {.learning_rate = -1}), ValueError);
  EXPECT_THROW(TrainOneStepCell(nullptr, {}), ValueError);
}

}  // namespace
}  // namespace loom::nn
