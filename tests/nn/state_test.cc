// Training with state: the global exec mode (nn/context.h), Cell::assign in PyNative mode and
// while tracing, the compiled graph-mode root call and its cache, BatchNorm2d (parameters, input
// checks, moving statistics by hand), Dropout keys as step state in TrainOneStepCell (graph mode
// equals PyNative step after step, a compiled step draws a new mask every step), CellList and
// ReLU6.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "core/random/random.h"
#include "core/ir/anf.h"
#include "core/ir/error.h"
#include "runtime/executable.h"
#include "runtime/interpreter.h"
#include "nn/cell.h"
#include "nn/context.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/train.h"

namespace loom::nn {
namespace {

using ir::Abstract;
using ir::Value;

Tensor random_input(DType dtype, Shape shape, const char* name = "state_test.x") {
  Tensor t(dtype, std::move(shape));
  random::RandomStream(name).fill_normal(t, 0.0, 1.0);
  return t;
}

void expect_close(const Tensor& a, const Tensor& b, double tol, const std::string& what = "") {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  const std::vector<double> va = a.to_doubles(), vb = b.to_doubles();
  for (std::size_t i = 0; i < va.size(); ++i) {
    EXPECT_NEAR(va[i], vb[i], tol) << what << " element " << i;
  }
}

std::vector<std::int64_t> ints(const Tensor& t) {
  const std::int64_t* p = t.data<std::int64_t>();
  return std::vector<std::int64_t>(p, p + t.numel());
}

Tensor call(Cell& cell, const Tensor& x) {
  return cell(ops::Var(Value::tensor(x))).value().as_tensor();
}

// y = x + count; count += 1 (a Float32 (1) state parameter).
class Counter : public Cell {
 public:
  Counter() : Cell("Counter") {
    count_ = &register_parameter("count", Tensor::from_vector<float>({1}, {0.f}));
    count_->requires_grad = false;
  }
  ops::Var construct(const std::vector<ops::Var>& in) override {
    const ops::Var c = param(*count_);
    ops::Emitter& e = current_emitter();
    assign(*count_, add(c, e.constant(Value::tensor(Tensor::from_vector<float>({1}, {1.f})))));
    return add(in[0], c);
  }
  Parameter& count() { return *count_; }

 private:
  Parameter* count_;
};

// The same Counter twice: the second call sees the first's update.
class TwiceCounter : public Cell {
 public:
  TwiceCounter() : Cell("Twice") { c_ = &register_cell("c", std::make_shared<Counter>()); }
  ops::Var construct(const std::vector<ops::Var>& in) override {
    return (*c_)((*c_)(in[0]));
  }
  Counter* c_;
};

// A Cell assigning what it is given, for the error cases.
class BadAssign : public Cell {
 public:
  explicit BadAssign(Tensor value) : Cell("Bad"), value_(std::move(value)) {
    p_ = &register_parameter("state", Tensor::from_vector<float>({3}, {0.f, 0.f, 0.f}));
    p_->requires_grad = false;
  }
  ops::Var construct(const std::vector<ops::Var>& in) override {
    assign(*p_, ops::Var(current_emitter().constant(Value::tensor(value_))));
    return in[0];
  }

 private:
  Tensor value_;
  Parameter* p_;
};

TEST(Context, DefaultIsGraphAndModeScopeRestores) {
  EXPECT_EQ(context_mode(), ExecMode::kGraph);
  {
    ModeScope s(ExecMode::kPyNative);
    EXPECT_EQ(context_mode(), ExecMode::kPyNative);
    auto net = std::make_shared<WithLossCell>(std::make_shared<Dense>(2, 1),
                                              std::make_shared<MSELoss>());
    EXPECT_EQ(TrainOneStepCell(net, {}).mode(), ExecMode::kPyNative);
    EXPECT_EQ(TrainOneStepCell(net, {}, ExecMode::kGraph).mode(), ExecMode::kGraph);
  }
  EXPECT_EQ(context_mode(), ExecMode::kGraph);
}

TEST(Assign, PyNativeWritesInPlace) {
  ModeScope pynative(ExecMode::kPyNative);
  Counter c;
  const void* storage = c.count().value.raw_data();
  const Tensor x = Tensor::from_vector<float>({2}, {1.f, 2.f});
  EXPECT_EQ(call(c, x).to_doubles(), (std::vector<double>{1, 2}));
  EXPECT_EQ(call(c, x).to_doubles(), (std::vector<double>{2, 3}));
  EXPECT_EQ(c.count().value.to_doubles(), (std::vector<double>{2}));
  EXPECT_EQ(c.count().value.raw_data(), storage);
  EXPECT_EQ(c.num_compilations(), 0u);
}

TEST(Assign, TraceRecordsUpdatesAndLaterReadsSeeThem) {
  TwiceCounter net;
  Traced t = trace(net, {Abstract::tensor(DType::kFloat32, {2})}, "twice");
  ASSERT_EQ(t.updates.size(), 1u);
  EXPECT_EQ(t.updates[0], &net.c_->count());
  ASSERT_EQ(t.weights.size(), 1u);
  EXPECT_EQ(t.graph->parameter(1)->name(), "c.count");
  ASSERT_TRUE(t.graph->output()->abstract()->is_tuple());
  EXPECT_EQ(t.graph->output()->abstract()->elements().size(), 2u);
  EXPECT_EQ(net.c_->count().value.to_doubles(), (std::vector<double>{0}));  // nothing written
  const Tensor x = Tensor::from_vector<float>({2}, {1.f, 2.f});
  const Value out = runtime::interpret(*t.graph, {Value::tensor(x)});
  // (x + 0) + 1, and the count after both calls.
  EXPECT_EQ(out.elements()[0].as_tensor().to_doubles(), (std::vector<double>{2, 3}));
  EXPECT_EQ(out.elements()[1].as_tensor().to_doubles(), (std::vector<double>{2}));

  // PyNative and graph mode agree, call after call, and both write the Parameter.
  TwiceCounter other;
  for (int i = 0; i < 3; ++i) {
    const Tensor g = call(net, x);
    Tensor p;
    {
      ModeScope pynative(ExecMode::kPyNative);
      p = call(other, x);
    }
    EXPECT_EQ(g.to_doubles(), p.to_doubles()) << i;
    EXPECT_EQ(net.c_->count().value.to_doubles(), other.c_->count().value.to_doubles()) << i;
  }
  EXPECT_EQ(net.c_->count().value.to_doubles(), (std::vector<double>{6}));
  EXPECT_EQ(net.num_compilations(), 1u);
  EXPECT_EQ(other.num_compilations(), 0u);
}

TEST(Assign, MismatchesAreValueErrorsNamingTheParameter) {
  const Tensor x = Tensor::from_vector<float>({1}, {0.f});
  const std::string prefix =
      "Cell.assign: expected a value of Float32 (3) for parameter 'state', got ";
  struct Case {
    Tensor value;
    std::string got;
  };
  const std::vector<Case> cases = {
      {Tensor::from_vector<float>({2}, {1.f, 2.f}), "Float32 (2)"},
      {Tensor::from_vector<double>({3}, {1, 2, 3}), "Float64 (3)"},
  };
  for (ExecMode mode : {ExecMode::kPyNative, ExecMode::kGraph}) {
    ModeScope scope(mode);
    for (const Case& c : cases) {
      BadAssign bad(c.value);
      try {
        call(bad, x);
        ADD_FAILURE() << "expected a ValueError";
      } catch (const ValueError& e) {
        EXPECT_EQ(std::string(e.what()), prefix + c.got + " (in Bad)");
      }
      EXPECT_THROW(trace(bad, {Abstract::tensor(DType::kFloat32, {1})}, "bad"), ValueError);
    }
  }
}

TEST(CompiledCall, CachesPerSignatureAndTrainingFlag) {
  SequentialCell net;
  net.append(std::make_shared<Dense>(4, 3)).append(std::make_shared<Dropout>(0.5));
  const Tensor x = random_input(DType::kFloat32, {2, 4});
  const Tensor y0 = call(net, x);
  call(net, x);
  const Tensor y2 = call(net, x);
  EXPECT_EQ(net.num_compilations(), 1u);  // 3 calls, 1 compilation
  expect_close(y0, y2, 0);                // eval: Dropout is the identity
  call(net, random_input(DType::kFloat32, {5, 4}));
  EXPECT_EQ(net.num_compilations(), 2u);  // a new shape
  call(net, x);
  EXPECT_EQ(net.num_compilations(), 2u);
  net.set_train(true);
  const Tensor t0 = call(net, x);
  const Tensor t1 = call(net, x);
  EXPECT_EQ(net.num_compilations(), 3u);  // training: another graph
  EXPECT_NE(t0.to_doubles(), t1.to_doubles());  // a new mask every call
  net.set_train(false);
  call(net, x);
  EXPECT_EQ(net.num_compilations(), 3u);
  // Inner Cells are not compiled on their own when the root is called.
  for (auto& [name, c] : net.cells_and_names()) EXPECT_EQ(c->num_compilations(), 0u) << name;
  // PyNative calls compile nothing.
  ModeScope pynative(ExecMode::kPyNative);
  call(net, x);
  EXPECT_EQ(net.num_compilations(), 3u);
}

TEST(CompiledCall, UpdatesKeepTheParametersStorage) {
  random::seed_all(5);
  Dropout drop(0.5);
  drop.set_train(true);
  random::seed_all(0);
  const void* key_storage = drop.key().value.raw_data();
  const std::vector<std::int64_t> key0 = ints(drop.key().value);
  const Tensor x = random_input(DType::kFloat32, {8, 8});
  for (int i = 0; i < 3; ++i) call(drop, x);
  EXPECT_EQ(drop.key().value.raw_data(), key_storage);
  EXPECT_EQ(ints(drop.key().value), (std::vector<std::int64_t>{key0[0], key0[1] + 3}));
}

// ---- BatchNorm2d ------------------------------------------------------------------------------

TEST(BatchNorm2d, ParametersInMindSporesOrder) {
  auto seq = std::make_shared<SequentialCell>();
  seq->append(std::make_shared<BatchNorm2d>(3));
  const auto params = seq->parameters_and_names();
  ASSERT_EQ(params.size(), 4u);
  const std::vector<std::string> names = {"0.gamma", "0.beta", "0.moving_mean",
                                          "0.moving_variance"};
  const std::vector<double> init = {1, 0, 0, 1};
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(params[i].first, names[i]);
    EXPECT_EQ(params[i].second->requires_grad, i < 2) << names[i];
    EXPECT_EQ(params[i].second->value.shape(), (Shape{3}));
    EXPECT_EQ(params[i].second->value.to_doubles(), std::vector<double>(3, init[i])) << names[i];
  }
  BatchNorm2d frozen(2, 1e-5, 0.9, /*affine=*/false, "0.5");
  EXPECT_FALSE(frozen.gamma().requires_grad);
  EXPECT_FALSE(frozen.beta().requires_grad);
  EXPECT_EQ(frozen.gamma().value.to_doubles(), (std::vector<double>{0.5, 0.5}));
  EXPECT_THROW(BatchNorm2d(0), ValueError);
  EXPECT_THROW(BatchNorm2d(2, 1e-5, 1.5), ValueError);
}

class BnNet : public Cell {
 public:
  BnNet() : Cell("Net") { bn_ = &register_cell("bn1", std::make_shared<BatchNorm2d>(3)); }
  ops::Var construct(const std::vector<ops::Var>& in) override { return (*bn_)(in[0]); }
  BatchNorm2d* bn_;
};

TEST(BatchNorm2d, InputChecksNameTheCellPath) {
  BnNet net;
  const std::vector<std::pair<Shape, std::string>> cases = {
      {{2, 3},
       "BatchNorm2d: expected x of rank 4 (N, C, H, W), got x of shape (2, 3) (in Net/bn1)"},
      {{1, 2, 4, 4},
       "BatchNorm2d: expected input channels 3, got x of shape (1, 2, 4, 4) (in Net/bn1)"},
  };
  for (const auto& [shape, expected] : cases) {
    try {
      trace(net, {Abstract::tensor(DType::kFloat32, shape)}, "bad");
      ADD_FAILURE() << "traced: expected a ShapeError";
    } catch (const ShapeError& e) {
      EXPECT_EQ(std::string(e.what()), expected);
    }
    for (ExecMode mode : {ExecMode::kPyNative, ExecMode::kGraph}) {
      ModeScope scope(mode);
      try {
        call(net, random_input(DType::kFloat32, shape));
        ADD_FAILURE() << "expected a ShapeError";
      } catch (const ShapeError& e) {
        EXPECT_EQ(std::string(e.what()), expected);
      }
    }
  }
}

// Per channel: mean, biased variance and count of x (N, C, H, W).
struct Stats {
  std::vector<double> mean, var;
  double m;
};
Stats channel_stats(const Tensor& x) {
  const Shape& s = x.shape();
  const std::vector<double> v = x.to_doubles();
  const std::int64_t n = s[0], c = s[1], hw = s[2] * s[3];
  Stats st{std::vector<double>(c, 0.0), std::vector<double>(c, 0.0), static_cast<double>(n * hw)};
  for (std::int64_t ch = 0; ch < c; ++ch) {
    for (std::int64_t i = 0; i < n; ++i) {
      for (std::int64_t j = 0; j < hw; ++j) st.mean[ch] += v[(i * c + ch) * hw + j];
    }
    st.mean[ch] /= st.m;
    for (std::int64_t i = 0; i < n; ++i) {
      for (std::int64_t j = 0; j < hw; ++j) {
        const double d = v[(i * c + ch) * hw + j] - st.mean[ch];
        st.var[ch] += d * d;
      }
    }
    st.var[ch] /= st.m;
  }
  return st;
}

TEST(BatchNorm2d, MovingStatisticsByHandInBothModes) {
  const Tensor x = random_input(DType::kFloat32, {2, 3, 4, 5});
  const Stats st = channel_stats(x);
  for (ExecMode mode : {ExecMode::kPyNative, ExecMode::kGraph}) {
    ModeScope scope(mode);
    BnNet net;
    net.set_train(true);
    std::vector<double> mm(3, 0.0), mv(3, 1.0);
    for (int step = 0; step < 3; ++step) {
      const Tensor y = call(net, x);
      for (int c = 0; c < 3; ++c) {
        mm[c] = 0.9 * mm[c] + 0.1 * st.mean[c];
        mv[c] = 0.9 * mv[c] + 0.1 * st.var[c] * st.m / (st.m - 1);  // unbiased
      }
      expect_close(net.bn_->moving_mean().value, Tensor::from_doubles(DType::kFloat32, {3}, mm),
                   1e-5, "moving_mean");
      expect_close(net.bn_->moving_variance().value,
                   Tensor::from_doubles(DType::kFloat32, {3}, mv), 1e-5, "moving_variance");
      // Training output: batch statistics (gamma 1, beta 0).
      const std::vector<double> yv = y.to_doubles(), xv = x.to_doubles();
      for (std::size_t i = 0; i < xv.size(); ++i) {
        const std::size_t c = (i / 20) % 3;
        EXPECT_NEAR(yv[i], (xv[i] - st.mean[c]) / std::sqrt(st.var[c] + 1e-5), 1e-4);
      }
    }
    // Eval: the moving statistics normalize and nothing is assigned.
    net.set_train(false);
    const Tensor y = call(net, x);
    const std::vector<double> yv = y.to_doubles(), xv = x.to_doubles();
    for (std::size_t i = 0; i < xv.size(); ++i) {
      const std::size_t c = (i / 20) % 3;
      EXPECT_NEAR(yv[i], (xv[i] - mm[c]) / std::sqrt(mv[c] + 1e-5), 1e-5);
    }
    expect_close(net.bn_->moving_mean().value, Tensor::from_doubles(DType::kFloat32, {3}, mm),
                 1e-5, "moving_mean after eval");
    Traced t = trace(net, {Abstract::tensor(DType::kFloat32, {2, 3, 4, 5})}, "eval");
    EXPECT_TRUE(t.updates.empty());
  }
}

// ---- Graph mode equals PyNative over training steps ---------------------------------------------

class ConvBnDrop : public Cell {
 public:
  ConvBnDrop() : Cell("ConvBnDrop") {
    conv_ = &register_cell("conv", std::make_shared<Conv2d>(Conv2dOptions(2, 4, 3)));
    bn_ = &register_cell("bn1", std::make_shared<BatchNorm2d>(4));
    relu_ = &register_cell("relu", std::make_shared<ReLU>());
    drop_ = &register_cell("drop", std::make_shared<Dropout>(0.3));
    fc_ = &register_cell("fc", std::make_shared<Dense>(4 * 6 * 6, 3));
  }
  ops::Var construct(const std::vector<ops::Var>& in) override {
    ops::Var x = (*relu_)((*bn_)((*conv_)(in[0])));
    return (*fc_)(flatten((*drop_)(x)));
  }
  Conv2d* conv_;
  BatchNorm2d* bn_;
  ReLU* relu_;
  Dropout* drop_;
  Dense* fc_;
};

std::shared_ptr<WithLossCell> make_bn_net(std::uint64_t seed) {
  random::seed_all(seed);
  auto net = std::make_shared<WithLossCell>(std::make_shared<ConvBnDrop>(),
                                            std::make_shared<MSELoss>());
  random::seed_all(0);
  net->set_train(true);
  return net;
}

TEST(TrainState, GraphEqualsPyNativeWithBatchNormAndDropout) {
  auto g = make_bn_net(21), p = make_bn_net(21);
  const OptimizerSpec opt{.kind = OptimizerKind::kMomentum, .learning_rate = 0.05};
  TrainOneStepCell graph(g, opt, ExecMode::kGraph);
  TrainOneStepCell pynative(p, opt, ExecMode::kPyNative);
  const Tensor x = random_input(DType::kFloat32, {4, 2, 6, 6});
  const Tensor y = random_input(DType::kFloat32, {4, 3}, "state_test.y");
  std::vector<const void*> storage;
  for (auto& [name, prm] : g->parameters_and_names()) storage.push_back(prm->value.raw_data());
  const std::vector<double> mm0 = g->parameters_and_names()[2].second->value.to_doubles();
  for (int s = 0; s < 5; ++s) {
    const double lg = graph.step(x, y).to_doubles()[0];
    const double lp = pynative.step(x, y).to_doubles()[0];
    EXPECT_NEAR(lg, lp, 1e-6) << "step " << s;
    const auto pg = g->parameters_and_names(), pp = p->parameters_and_names();
    ASSERT_EQ(pg.size(), pp.size());
    for (std::size_t i = 0; i < pg.size(); ++i) {
      expect_close(pg[i].second->value, pp[i].second->value, 1e-6,
                   pg[i].first + " step " + std::to_string(s));
    }
  }
  const auto pg = g->parameters_and_names();
  std::vector<std::string> names;
  for (auto& [name, prm] : pg) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "conv.weight", "bn1.gamma", "bn1.beta",
                       "bn1.moving_mean", "bn1.moving_variance",
                       "drop.key", "fc.weight", "fc.bias"}));
  // The moving statistics and the key moved, in place.
  EXPECT_NE(pg[3].second->value.to_doubles(), mm0);
  EXPECT_EQ(ints(pg[5].second->value), ints(p->parameters_and_names()[5].second->value));
  for (std::size_t i = 0; i < pg.size(); ++i) {
    EXPECT_EQ(pg[i].second->value.raw_data(), storage[i]) << pg[i].first;
  }
  EXPECT_EQ(graph.num_compilations(), 1u);
  EXPECT_GT(graph.compile_seconds(), 0.0);
  ASSERT_NE(graph.last_executable(), nullptr);
  EXPECT_FALSE(graph.last_executable()->interpreted());
  // 5 trainable weights + 5 moments + 3 assigned values (moving_mean, moving_variance, key),
  // each an output donated to its argument; whatever could not be written in place was copied.
  EXPECT_EQ(graph.last_executable()->donations_in_place() +
                graph.last_executable()->donation_copies(),
            13u);
  std::cout << "[ donation ] in place " << graph.last_executable()->donations_in_place()
            << ", copied " << graph.last_executable()->donation_copies() << "\n";
  // Eval flips make another step graph (no updates: BatchNorm uses the moving statistics).
  g->set_train(false);
  graph.step(x, y);
  EXPECT_EQ(graph.num_compilations(), 2u);
}

TEST(TrainState, RootCallsInGraphModeEqualPyNativeWithBatchNormAndDropout) {
  auto g = make_bn_net(33), p = make_bn_net(33);
  Cell& gb = g->backbone();
  Cell& pb = p->backbone();
  const Tensor x = random_input(DType::kFloat32, {4, 2, 6, 6});
  for (int s = 0; s < 4; ++s) {
    const Tensor yg = call(gb, x);
    Tensor yp;
    {
      ModeScope pynative(ExecMode::kPyNative);
      yp = call(pb, x);
    }
    expect_close(yg, yp, 1e-6, "output, call " + std::to_string(s));
    const auto pg = gb.parameters_and_names(), pp = pb.parameters_and_names();
    for (std::size_t i = 0; i < pg.size(); ++i) {
      if (pg[i].second->value.dtype() == DType::kInt64) {
        EXPECT_EQ(ints(pg[i].second->value), ints(pp[i].second->value)) << pg[i].first;
      } else {
        expect_close(pg[i].second->value, pp[i].second->value, 1e-6, pg[i].first);
      }
    }
  }
  EXPECT_EQ(gb.num_compilations(), 1u);
  EXPECT_EQ(pb.num_compilations(), 0u);
}

TEST(TrainState, CompiledStepDrawsANewMaskEveryStep) {
  // With learning rate 0 the weights stay put, so the loss changes only with the mask.
  auto drop_net = [] {
    random::seed_all(4);
    auto seq = std::make_shared<SequentialCell>();
    seq->append(std::make_shared<Dense>(16, 16)).append(std::make_shared<Dropout>(0.5));
    auto net = std::make_shared<WithLossCell>(seq, std::make_shared<MSELoss>());
    random::seed_all(0);
    net->set_train(true);
    return net;
  };
  auto g = drop_net(), p = drop_net();
  const OptimizerSpec opt{.kind = OptimizerKind::kMomentum, .learning_rate = 0.0};
  TrainOneStepCell graph(g, opt, ExecMode::kGraph);
  TrainOneStepCell pynative(p, opt, ExecMode::kPyNative);
  const Tensor x = random_input(DType::kFloat32, {8, 16});
  const Tensor y = random_input(DType::kFloat32, {8, 16}, "state_test.y");
  std::vector<double> losses;
  for (int s = 0; s < 4; ++s) {
    const double lg = graph.step(x, y).to_doubles()[0];
    EXPECT_EQ(lg, pynative.step(x, y).to_doubles()[0]) << "step " << s;  // the same masks
    for (double l : losses) EXPECT_NE(lg, l) << "step " << s;            // a new mask
    losses.push_back(lg);
  }
  EXPECT_EQ(graph.num_compilations(), 1u);

  // The compiled root call draws the same masks as PyNative calls, call after call.
  random::seed_all(9);
  Dropout a(0.5), b(0.5);
  random::seed_all(0);
  a.set_train(true);
  b.set_train(true);
  for (int s = 0; s < 3; ++s) {
    const Tensor ya = call(a, x);
    ModeScope pynative_scope(ExecMode::kPyNative);
    expect_close(ya, call(b, x), 0, "call " + std::to_string(s));
  }
  EXPECT_EQ(a.num_compilations(), 1u);
}

TEST(TrainState, TrainableAssignedParameterIsRefused) {
  class Bad : public Cell {
   public:
    Bad() : Cell("Bad") { w_ = &register_parameter("w", Tensor::from_vector<float>({1}, {1.f})); }
    ops::Var construct(const std::vector<ops::Var>& in) override {
      const ops::Var w = param(*w_);
      assign(*w_, add(w, w));
      return current_emitter().reduce_sum(mul(add(in[0], w), in[1]), {0}, false);
    }
    Parameter* w_;
  };
  TrainOneStepCell train(std::make_shared<Bad>(), {});
  EXPECT_THROW(train.step(Tensor::from_vector<float>({1}, {1.f}),
                          Tensor::from_vector<float>({1}, {1.f})),
               ValueError);
}

// ---- CellList and ReLU6 -------------------------------------------------------------------------

TEST(CellList, AppendIndexIterateAndRefuseToBeCalled) {
  auto list = std::make_shared<CellList>();
  list->append(std::make_shared<Dense>(4, 4)).append(std::make_shared<ReLU6>());
  EXPECT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[1].cls_name(), "ReLU6");
  EXPECT_THROW((*list)[2], ValueError);
  std::vector<std::string> kinds;
  for (Cell* c : *list) kinds.push_back(c->cls_name());
  EXPECT_EQ(kinds, (std::vector<std::string>{"Dense", "ReLU6"}));
  const auto params = list->parameters_and_names();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].first, "0.weight");
  EXPECT_EQ(params[1].first, "0.bias");
  const Tensor x = random_input(DType::kFloat32, {2, 4});
  for (ExecMode mode : {ExecMode::kPyNative, ExecMode::kGraph}) {
    ModeScope scope(mode);
    try {
      call(*list, x);
      ADD_FAILURE() << "expected a TypeError";
    } catch (const TypeError& e) {
      EXPECT_EQ(std::string(e.what()),
                "CellList: a CellList is a container and cannot be called; call its cells "
                "instead (in CellList)");
    }
  }
  // A parent calls the listed cells.
  class Uses : public Cell {
   public:
    explicit Uses(std::shared_ptr<CellList> l) : Cell("Uses") {
      list_ = &register_cell("layers", std::move(l));
    }
    ops::Var construct(const std::vector<ops::Var>& in) override {
      ops::Var x = in[0];
      for (Cell* c : *list_) x = (*c)(x);
      return x;
    }
    CellList* list_;
  };
  Uses net(list);
  EXPECT_EQ(net.parameters_and_names()[0].first, "layers.0.weight");
  const Tensor y = call(net, x);
  for (double v : y.to_doubles()) {
    EXPECT_GE(v, 0.0);
    EXPECT_LE(v, 6.0);
  }
}

TEST(ReLU6, ClipsToZeroAndSix) {
  ReLU6 r;
  const Tensor x = Tensor::from_vector<float>({5}, {-3.f, 0.f, 2.5f, 6.f, 9.f});
  for (ExecMode mode : {ExecMode::kPyNative, ExecMode::kGraph}) {
    ModeScope scope(mode);
    EXPECT_EQ(call(r, x).to_doubles(), (std::vector<double>{0, 0, 2.5, 6, 6}));
  }
}

}  // namespace
}  // namespace loom::nn
