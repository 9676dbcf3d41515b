// nn/layers.h (AvgPool2d, Sigmoid, Tanh, GELU, Softmax, Identity, Dropout) and nn/loss.h
// (SoftmaxCrossEntropyWithLogits, MSELoss, L1Loss): PyNative and traced-then-interpreted results
// agree, the losses give hand-computed values, Dropout is the identity in eval mode,
// reproducible under seed_all and keeps its key as a Parameter advanced by each training call,
// and a wrong reduction name is a ValueError.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>

#include "core/random/random.h"
#include "core/ir/anf.h"
#include "core/ir/error.h"
#include "runtime/interpreter.h"
#include "nn/cell.h"
#include "nn/context.h"
#include "nn/layers.h"
#include "nn/loss.h"

namespace loom::nn {
namespace {

using ir::Abstract;
using ir::Value;

Tensor random_input(DType dtype, Shape shape, const char* name = "layers_loss_test.x") {
  Tensor t(dtype, std::move(shape));
  random::RandomStream(name).fill_normal(t, 0.0, 1.0);
  return t;
}

void expect_close(const Tensor& a, const Tensor& b, double tol) {
  ASSERT_EQ(a.shape(), b.shape());
  const std::vector<double> va = a.to_doubles(), vb = b.to_doubles();
  for (std::size_t i = 0; i < va.size(); ++i) EXPECT_NEAR(va[i], vb[i], tol) << "element " << i;
}

// Runs cell on `args` in PyNative mode, then traces it for their abstracts and interprets the
// graph; expects the two to agree within 1e-6 and returns the PyNative result.
Tensor eager_and_traced(Cell& cell, const std::vector<Tensor>& args) {
  std::vector<ops::Var> vars;
  std::vector<ir::AbstractPtr> abstracts;
  std::vector<Value> values;
  for (const Tensor& t : args) {
    vars.emplace_back(Value::tensor(t));
    abstracts.push_back(Abstract::tensor(t.dtype(), t.shape()));
    values.push_back(Value::tensor(t));
  }
  ops::Var eager;
  {
    ModeScope pynative(ExecMode::kPyNative);
    eager = cell(vars);
  }
  EXPECT_TRUE(eager.is_value());
  const Tensor y_eager = eager.value().as_tensor();
  Traced t = trace(cell, abstracts, "net");
  const Tensor y_traced = runtime::interpret(*t.graph, values).as_tensor();
  expect_close(y_traced, y_eager, 1e-6);
  return y_eager;
}

std::vector<double> run(Cell& cell, const std::vector<Tensor>& args) {
  return eager_and_traced(cell, args).to_doubles();
}

Tensor f32(Shape shape, std::vector<float> v) { return Tensor::from_vector<float>(shape, v); }

// ---- Layers ---------------------------------------------------------------------------------

TEST(Layers, ActivationsMatchBetweenPyNativeAndTraced) {
  const Tensor x = random_input(DType::kFloat32, {3, 5});
  const std::vector<double> xs = x.to_doubles();
  Sigmoid sigmoid;
  Tanh tanh_cell;
  GELU gelu;
  Identity identity;
  const std::vector<double> s = run(sigmoid, {x}), t = run(tanh_cell, {x}), g = run(gelu, {x}),
                            id = run(identity, {x});
  for (std::size_t i = 0; i < xs.size(); ++i) {
    EXPECT_NEAR(s[i], 1.0 / (1.0 + std::exp(-xs[i])), 1e-6);
    EXPECT_NEAR(t[i], std::tanh(xs[i]), 1e-6);
    const double v = xs[i];
    EXPECT_NEAR(g[i], 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))),
                1e-6);
    EXPECT_EQ(id[i], xs[i]);
  }
}

TEST(Layers, GeluMatchesMindSporesExample) {
  GELU gelu;
  const std::vector<double> y = run(gelu, {f32({3}, {1, 2, 3})});
  EXPECT_NEAR(y[0], 0.841192, 1e-6);
  EXPECT_NEAR(y[1], 1.9545976, 1e-6);
  EXPECT_NEAR(y[2], 2.9963627, 1e-6);
}

TEST(Layers, SoftmaxRowsSumToOneAlongTheAxis) {
  const Tensor x = random_input(DType::kFloat32, {2, 3, 4});
  Softmax last;  // axis -1
  const std::vector<double> y = run(last, {x});
  for (int r = 0; r < 6; ++r) {
    double sum = 0;
    for (int c = 0; c < 4; ++c) sum += y[r * 4 + c];
    EXPECT_NEAR(sum, 1.0, 1e-6);
  }
  Softmax middle(1);
  const std::vector<double> z = run(middle, {x});
  for (int n = 0; n < 2; ++n) {
    for (int c = 0; c < 4; ++c) {
      double sum = 0;
      for (int k = 0; k < 3; ++k) sum += z[n * 12 + k * 4 + c];
      EXPECT_NEAR(sum, 1.0, 1e-6);
    }
  }
  // Softmax([0, ln 3]) = [1/4, 3/4].
  EXPECT_EQ(run(last, {f32({1, 2}, {0.f, static_cast<float>(std::log(3.0))})}).size(), 2u);
  const std::vector<double> q = run(last, {f32({1, 2}, {0.f, static_cast<float>(std::log(3.0))})});
  EXPECT_NEAR(q[0], 0.25, 1e-6);
  EXPECT_NEAR(q[1], 0.75, 1e-6);
}

TEST(Layers, AvgPool2dAveragesWindows) {
  // x (1, 1, 4, 4) = 0..15; 2×2 windows with stride 2: means of {0,1,4,5}, {2,3,6,7}, ...
  std::vector<float> v(16);
  for (int i = 0; i < 16; ++i) v[i] = static_cast<float>(i);
  AvgPool2d pool(2, 2);
  const Tensor y = eager_and_traced(pool, {f32({1, 1, 4, 4}, v)});
  EXPECT_EQ(y.shape(), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(y.to_doubles(), (std::vector<double>{2.5, 4.5, 10.5, 12.5}));
  // MindSpore's defaults: kernel 1, stride 1, "valid": the identity.
  AvgPool2d unit;
  const Tensor x = random_input(DType::kFloat32, {2, 3, 5, 5});
  expect_close(eager_and_traced(unit, {x}), x, 0);
  AvgPool2d same(3, 2, "same");
  EXPECT_EQ(eager_and_traced(same, {x}).shape(), (Shape{2, 3, 3, 3}));
}

TEST(Layers, DropoutIsTheIdentityInEvalMode) {
  Dropout drop;  // p = 0.5
  EXPECT_DOUBLE_EQ(drop.p(), 0.5);
  EXPECT_DOUBLE_EQ(drop.keep_prob(), 0.5);
  EXPECT_FALSE(drop.training());
  const Tensor x = random_input(DType::kFloat32, {4, 8});
  expect_close(eager_and_traced(drop, {x}), x, 0);
  Traced t = trace(drop, {Abstract::tensor(DType::kFloat32, {4, 8})}, "eval");
  for (ir::CNode* c : t.graph->topo_order()) EXPECT_NE(c->debug().scope, "Dropout/Dropout");
}

TEST(Layers, DropoutArguments) {
  EXPECT_DOUBLE_EQ(Dropout(0.2).keep_prob(), 0.8);
  EXPECT_DOUBLE_EQ(Dropout::with_keep_prob(0.9)->p(), 1.0 - 0.9);
  try {
    Dropout bad(1.0);
    FAIL() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_EQ(std::string(e.what()), "Dropout: expected p in [0, 1), got 1");
  }
  EXPECT_THROW(Dropout::with_keep_prob(0.0), ValueError);
  // p = 0 keeps everything even in training.
  Dropout none(0.0);
  none.set_train(true);
  const Tensor x = random_input(DType::kFloat32, {4, 8});
  expect_close(none(ops::Var(Value::tensor(x))).value().as_tensor(), x, 0);
}

// A network with two Dropouts, so that their keys are told apart by their names.
class TwoDropouts : public Cell {
 public:
  TwoDropouts() : Cell("TwoDropouts") {
    a_ = &register_cell("a", std::make_shared<Dropout>(0.25));
    b_ = &register_cell("b", std::make_shared<Dropout>(0.25));
  }
  ops::Var construct(const std::vector<ops::Var>& inputs) override {
    return current_emitter().make_tuple({(*a_)(inputs[0]), (*b_)(inputs[0])});
  }
  Dropout *a_, *b_;
};

std::vector<double> dropout_output(Cell& cell, const Tensor& x) {
  return cell(ops::Var(Value::tensor(x))).value().as_tensor().to_doubles();
}

std::vector<std::int64_t> ints(const Tensor& t) {
  const std::int64_t* p = t.data<std::int64_t>();
  return std::vector<std::int64_t>(p, p + t.numel());
}

TEST(Layers, DropoutIsReproducibleUnderSeedAll) {
  const Tensor x = Tensor::from_doubles(DType::kFloat32, {64, 64},
                                        std::vector<double>(64 * 64, 1.0));
  for (ExecMode mode : {ExecMode::kPyNative, ExecMode::kGraph}) {
    ModeScope scope(mode);
    auto two_steps = [&](std::uint64_t seed) {
      random::seed_all(seed);
      Dropout drop(0.25);
      drop.set_train(true);
      std::vector<double> first = dropout_output(drop, x);
      std::vector<double> second = dropout_output(drop, x);
      return std::make_pair(first, second);
    };
    const auto a = two_steps(7), b = two_steps(7), c = two_steps(8);
    random::seed_all(0);
    EXPECT_EQ(a.first, b.first);    // same seed, same masks
    EXPECT_EQ(a.second, b.second);
    EXPECT_NE(a.first, a.second);   // a fresh key each call
    EXPECT_NE(a.first, c.first);    // another seed, another mask

    // Kept elements are scaled by 1 / keep_prob; the kept fraction is close to keep_prob.
    std::int64_t kept = 0;
    for (double v : a.first) {
      if (v != 0) {
        EXPECT_NEAR(v, 1.0 / 0.75, 1e-6);
        ++kept;
      }
    }
    const double fraction = static_cast<double>(kept) / 4096.0;
    EXPECT_NEAR(fraction, 0.75, 0.03);
  }
}

TEST(Layers, DropoutKeyIsANamedNonTrainableParameter) {
  random::seed_all(3);
  TwoDropouts net;
  const auto params = net.parameters_and_names();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].first, "a.key");
  EXPECT_EQ(params[1].first, "b.key");
  EXPECT_FALSE(params[0].second->requires_grad);
  EXPECT_EQ(params[0].second->value.dtype(), DType::kInt64);
  EXPECT_EQ(params[0].second->value.shape(), (Shape{2}));
  // Drawn from RandomStream("a.key") under the seed in force: the same for a fresh network.
  random::seed_all(3);
  TwoDropouts again;
  EXPECT_EQ(ints(again.a_->key().value), ints(net.a_->key().value));
  EXPECT_NE(ints(again.a_->key().value), ints(net.b_->key().value));
  random::seed_all(0);

  net.set_train(true);
  const Tensor x = Tensor::from_doubles(DType::kFloat32, {32, 32},
                                        std::vector<double>(32 * 32, 1.0));
  const std::vector<std::int64_t> key_a = ints(net.a_->key().value);
  const Value y = net(ops::Var(Value::tensor(x))).value();
  ASSERT_EQ(y.elements().size(), 2u);
  // Two keys, two masks.
  EXPECT_NE(y.elements()[0].as_tensor().to_doubles(), y.elements()[1].as_tensor().to_doubles());
  // Each call advances the key's counter word by one.
  EXPECT_EQ(ints(net.a_->key().value), (std::vector<std::int64_t>{key_a[0], key_a[1] + 1}));
  // Called on its own, a goes on from its own (advanced) key: the next mask, not the first.
  const std::vector<double> alone = dropout_output(*net.a_, x);
  EXPECT_NE(alone, y.elements()[0].as_tensor().to_doubles());
  // The same network rebuilt under the same seed gives the same masks.
  again.set_train(true);
  const Value y2 = again(ops::Var(Value::tensor(x))).value();
  EXPECT_EQ(y2.elements()[0].as_tensor().to_doubles(), y.elements()[0].as_tensor().to_doubles());
  EXPECT_EQ(y2.elements()[1].as_tensor().to_doubles(), y.elements()[1].as_tensor().to_doubles());
}

TEST(Layers, TracedDropoutReadsItsKeyAndReturnsTheNextOne) {
  random::seed_all(11);
  Dropout drop(0.5);
  drop.set_train(true);
  random::seed_all(0);
  const Tensor key0 = drop.key().value.clone();
  const Tensor x = random_input(DType::kFloat32, {16, 16});
  Traced t = trace(drop, {Abstract::tensor(DType::kFloat32, {16, 16})}, "train");
  ASSERT_EQ(t.updates.size(), 1u);
  EXPECT_EQ(t.updates[0], &drop.key());
  ASSERT_EQ(t.weights.size(), 1u);
  EXPECT_EQ(t.graph->parameter(1)->name(), "key");
  // Tracing writes nothing.
  EXPECT_EQ(ints(drop.key().value), ints(key0));
  // (y, key + [0, 1]): the key is an input, so each run with the next key draws a new mask.
  const Value out0 = runtime::interpret(*t.graph, {Value::tensor(x), Value::tensor(key0)});
  ASSERT_EQ(out0.elements().size(), 2u);
  const Tensor key1 = out0.elements()[1].as_tensor();
  EXPECT_EQ(ints(key1), (std::vector<std::int64_t>{ints(key0)[0], ints(key0)[1] + 1}));
  const Value out1 = runtime::interpret(*t.graph, {Value::tensor(x), Value::tensor(key1)});
  EXPECT_NE(out1.elements()[0].as_tensor().to_doubles(),
            out0.elements()[0].as_tensor().to_doubles());
  // The same masks as PyNative calls, step after step.
  ModeScope pynative(ExecMode::kPyNative);
  expect_close(drop(ops::Var(Value::tensor(x))).value().as_tensor(),
               out0.elements()[0].as_tensor(), 0);
  expect_close(drop(ops::Var(Value::tensor(x))).value().as_tensor(),
               out1.elements()[0].as_tensor(), 0);
}

// ---- Losses ---------------------------------------------------------------------------------

TEST(Loss, MSELossValues) {
  const Tensor logits = f32({2}, {1, 2}), labels = f32({2}, {0, 0});
  MSELoss mean;
  MSELoss sum("sum");
  MSELoss none("none");
  const Tensor m = eager_and_traced(mean, {logits, labels});
  EXPECT_EQ(m.shape(), Shape{});
  EXPECT_EQ(m.to_doubles(), (std::vector<double>{2.5}));
  EXPECT_EQ(run(sum, {logits, labels}), (std::vector<double>{5.0}));
  EXPECT_EQ(run(none, {logits, labels}), (std::vector<double>{1.0, 4.0}));
  // MindSpore's example: [1, 2, 3] vs [1, 1, 1] → mean 5/3.
  EXPECT_NEAR(run(mean, {f32({3}, {1, 2, 3}), f32({3}, {1, 1, 1})})[0], 5.0 / 3.0, 1e-6);
}

TEST(Loss, L1LossValues) {
  L1Loss mean;
  L1Loss sum("sum");
  L1Loss none("none");
  const Tensor logits = f32({2, 2}, {1, -2, 3, 0}), labels = f32({2, 2}, {0, 0, 1, 0.5f});
  EXPECT_EQ(run(mean, {logits, labels}), (std::vector<double>{(1 + 2 + 2 + 0.5) / 4}));
  EXPECT_EQ(run(sum, {logits, labels}), (std::vector<double>{5.5}));
  EXPECT_EQ(run(none, {logits, labels}), (std::vector<double>{1, 2, 2, 0.5}));
  // MindSpore's example: [1, 2, 3] vs [1, 2, 2] → 1/3.
  EXPECT_NEAR(run(mean, {f32({3}, {1, 2, 3}), f32({3}, {1, 2, 2})})[0], 1.0 / 3.0, 1e-6);
}

TEST(Loss, SoftmaxCrossEntropyWithLogitsValues) {
  // Rows of logits [0, 0] and [0, ln 3]: log_softmax = [-ln 2, -ln 2] and [-ln 4, ln 3 - ln 4].
  const float ln3 = static_cast<float>(std::log(3.0));
  const Tensor logits = f32({2, 2}, {0, 0, 0, ln3});
  const Tensor dense_labels = f32({2, 2}, {1, 0, 0, 1});
  const Tensor sparse_labels = Tensor::from_vector<std::int32_t>({2}, {0, 1});
  const double l0 = std::log(2.0), l1 = std::log(4.0) - std::log(3.0);

  SoftmaxCrossEntropyWithLogits dense;  // sparse false, mean
  EXPECT_FALSE(dense.sparse());
  EXPECT_EQ(dense.reduction(), "mean");
  const Tensor dm = eager_and_traced(dense, {logits, dense_labels});
  EXPECT_EQ(dm.shape(), Shape{});
  EXPECT_NEAR(dm.to_doubles()[0], (l0 + l1) / 2, 1e-6);
  SoftmaxCrossEntropyWithLogits dense_none(false, "none");
  const std::vector<double> dn = run(dense_none, {logits, dense_labels});
  ASSERT_EQ(dn.size(), 2u);
  EXPECT_NEAR(dn[0], l0, 1e-6);
  EXPECT_NEAR(dn[1], l1, 1e-6);
  SoftmaxCrossEntropyWithLogits dense_sum(false, "sum");
  EXPECT_NEAR(run(dense_sum, {logits, dense_labels})[0], l0 + l1, 1e-6);

  SoftmaxCrossEntropyWithLogits sparse(true);
  EXPECT_NEAR(run(sparse, {logits, sparse_labels})[0], (l0 + l1) / 2, 1e-6);
  SoftmaxCrossEntropyWithLogits sparse_none(true, "none");
  const std::vector<double> sn = run(sparse_none, {logits, sparse_labels});
  ASSERT_EQ(sn.size(), 2u);
  EXPECT_NEAR(sn[0], l0, 1e-6);
  EXPECT_NEAR(sn[1], l1, 1e-6);
  SoftmaxCrossEntropyWithLogits sparse_sum(true, "sum");
  EXPECT_NEAR(run(sparse_sum, {logits, Tensor::from_vector<std::int64_t>({2}, {0, 1})})[0],
              l0 + l1, 1e-6);
}

TEST(Loss, SparseAndDenseAgreeOnRandomLogits) {
  const Tensor logits = random_input(DType::kFloat64, {5, 7});
  const Tensor labels = Tensor::from_vector<std::int32_t>({5}, {0, 6, 3, 3, 1});
  std::vector<double> onehot(35, 0.0);
  const std::vector<std::int32_t> idx = {0, 6, 3, 3, 1};
  for (int i = 0; i < 5; ++i) onehot[i * 7 + idx[i]] = 1.0;
  const Tensor dense_labels = Tensor::from_doubles(DType::kFloat64, {5, 7}, onehot);
  for (const char* reduction : {"mean", "sum", "none"}) {
    SoftmaxCrossEntropyWithLogits sparse(true, reduction), dense(false, reduction);
    expect_close(eager_and_traced(sparse, {logits, labels}),
                 eager_and_traced(dense, {logits, dense_labels}), 1e-12);
  }
}

TEST(Loss, WrongReductionIsAValueError) {
  auto message = [](auto make) -> std::string {
    try {
      make();
    } catch (const ValueError& e) {
      return e.what();
    }
    return "no ValueError";
  };
  EXPECT_EQ(message([] { MSELoss l("avg"); }),
            "MSELoss: expected reduction 'mean', 'sum' or 'none', got 'avg'");
  EXPECT_EQ(message([] { L1Loss l("Mean"); }),
            "L1Loss: expected reduction 'mean', 'sum' or 'none', got 'Mean'");
  EXPECT_EQ(message([] { SoftmaxCrossEntropyWithLogits l(true, ""); }),
            "SoftmaxCrossEntropyWithLogits: expected reduction 'mean', 'sum' or 'none', got ''");
}

TEST(Loss, WrongInputCountNamesTheCell) {
  MSELoss loss;
  try {
    loss(ops::Var(Value::tensor(f32({2}, {1, 2}))));
    FAIL() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_EQ(std::string(e.what()),
              "MSELoss: expected 2 inputs (logits, labels), got 1 (in MSELoss)");
  }
}

}  // namespace
}  // namespace loom::nn
