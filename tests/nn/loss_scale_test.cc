// nn/train.h's loss scaling (LossScale) on a Float32 MLP: the dynamic rule gives, step after step,
// the scales and counters of MindSpore's own DynamicLossScaleUpdateCell for the same overflow
// pattern (tests/nn/reference/loss_scale.txt, from loss_scale_reference.py), an overflowing step
// leaves every weight and optimizer state bitwise unchanged and does not count as an optimizer
// step, a step that does not overflow is bitwise the unscaled step (the scale is a power of 2),
// in graph and PyNative mode; fixed:keep applies the update; messages for misuse.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/ir/error.h"
#include "nn/layers.h"
#include "nn/train.h"
#include "tests/nn/mlp_util.h"
#include "tests/ops/test_util.h"

namespace loom::nn {
namespace {

using test_mlp::LocalMSE;
using test_mlp::kN, test_mlp::kIn, test_mlp::kHidden, test_mlp::kOut;
using test_mlp::pseudo;
using loom::testing::error_of;

std::shared_ptr<WithLossCell> make_mlp() {
  auto seq = std::make_shared<SequentialCell>();
  seq->append(std::make_shared<Dense>(kIn, kHidden))
      .append(std::make_shared<ReLU>())
      .append(std::make_shared<Dense>(kHidden, kOut));
  auto net = std::make_shared<WithLossCell>(seq, std::make_shared<LocalMSE>());
  int k = 0;
  for (auto& [name, p] : net->parameters_and_names()) {
    std::vector<double> v(static_cast<std::size_t>(p->value.numel()));
    for (double& x : v) x = pseudo(k++, 0.6);
    p->value = Tensor::from_doubles(DType::kFloat32, p->value.shape(), v);
  }
  return net;
}

// A batch; `overflow`: one input element is +Inf, so the loss and the gradients are not finite.
Tensor data(bool overflow) {
  std::vector<double> v(kN * kIn);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = pseudo(static_cast<int>(i) + 100, 1.0);
  if (overflow) v[5] = std::numeric_limits<double>::infinity();
  return Tensor::from_doubles(DType::kFloat32, {kN, kIn}, v);
}
Tensor label() {
  std::vector<double> v(kN * kOut);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = pseudo(static_cast<int>(i) + 200, 0.8);
  return Tensor::from_doubles(DType::kFloat32, {kN, kOut}, v);
}

const OptimizerSpec kMomentum{.kind = OptimizerKind::kMomentum, .learning_rate = 0.05,
                              .momentum = 0.9, .weight_decay = 0.0};

// Every weight and optimizer state, copied.
std::vector<Tensor> snapshot(WithLossCell& net, const TrainOneStepCell& step) {
  std::vector<Tensor> out;
  for (auto& [name, p] : net.parameters_and_names()) out.push_back(p->value.clone());
  for (const auto& [name, st] : step.states()) out.push_back(st.clone());
  return out;
}

bool all_bitwise_equal(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!a[i].bitwise_equal(b[i])) return false;
  }
  return true;
}

// One case of tests/nn/reference/loss_scale.txt.
struct Case {
  std::string name;
  double init = 0, factor = 0;
  std::int64_t window = 0;
  std::map<std::string, std::vector<double>> rows;  // overflow, scale, counters: one per step
};

std::vector<Case> read_cases() {
  const std::string path = std::string(LOOM_SOURCE_DIR) + "/tests/nn/reference/loss_scale.txt";
  std::ifstream in(path);
  if (!in) throw FormatError(path + ": expected a readable file (run loss_scale_reference.py)");
  std::vector<Case> cases;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream s(line);
    std::string head;
    s >> head;
    if (head == "case") {
      Case c;
      s >> c.name >> c.init >> c.factor >> c.window;
      cases.push_back(c);
      continue;
    }
    if (cases.empty()) throw FormatError(path + ": expected a case line first");
    double v;
    while (s >> v) cases.back().rows[head].push_back(v);
  }
  return cases;
}

void check_against_mindspore(ExecMode mode) {
  const std::vector<Case> cases = read_cases();
  ASSERT_EQ(cases.size(), 3u);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto net = make_mlp();
    TrainOneStepCell step(net, kMomentum, mode);
    step.set_loss_scale(LossScale::dynamic(c.init, c.factor, c.window));
    const std::vector<double>& pattern = c.rows.at("overflow");
    std::int64_t skipped = 0, updates = 0;
    for (std::size_t s = 0; s < pattern.size(); ++s) {
      SCOPED_TRACE("step " + std::to_string(s + 1));
      const bool overflow = pattern[s] != 0;
      const std::vector<Tensor> before = snapshot(*net, step);
      step.step(data(overflow), label());
      EXPECT_EQ(step.overflow(), overflow);
      skipped += overflow ? 1 : 0;
      updates += overflow ? 0 : 1;
      EXPECT_EQ(step.skipped_steps(), skipped);
      EXPECT_EQ(step.num_steps(), updates);  // a skipped update is not an optimizer step
      if (overflow) {
        EXPECT_TRUE(all_bitwise_equal(before, snapshot(*net, step)));
      } else {
        EXPECT_FALSE(all_bitwise_equal(before, snapshot(*net, step)));
      }
      // MindSpore's scale, a Float32 value, exactly; its counters.
      EXPECT_EQ(step.loss_scale(), c.rows.at("scale")[s]);
      const auto& st = step.loss_scale_states();
      EXPECT_EQ(st.at("current_iterator_step").get(0), c.rows.at("current_iterator_step")[s]);
      EXPECT_EQ(st.at("last_overflow_iterator_step").get(0),
                c.rows.at("last_overflow_iterator_step")[s]);
    }
  }
}

TEST(LossScale, DynamicScaleFollowsMindSporesUpdateCell) {
  check_against_mindspore(ExecMode::kGraph);
}

TEST(LossScale, DynamicScaleFollowsMindSporesUpdateCellInPyNative) {
  check_against_mindspore(ExecMode::kPyNative);
}

TEST(LossScale, StepsWithoutOverflowAreBitwiseTheUnscaledSteps) {
  auto plain = make_mlp(), fixed = make_mlp(), dynamic = make_mlp();
  TrainOneStepCell a(plain, kMomentum), b(fixed, kMomentum), c(dynamic, kMomentum);
  b.set_loss_scale(LossScale::fixed(1024));
  c.set_loss_scale(LossScale::dynamic(std::ldexp(1.0, 20), 2, 2));
  for (int s = 0; s < 6; ++s) {
    const Tensor la = a.step(data(false), label());
    EXPECT_TRUE(la.bitwise_equal(b.step(data(false), label()))) << s;
    EXPECT_TRUE(la.bitwise_equal(c.step(data(false), label()))) << s;
  }
  EXPECT_TRUE(all_bitwise_equal(snapshot(*plain, a), snapshot(*fixed, b)));
  EXPECT_TRUE(all_bitwise_equal(snapshot(*plain, a), snapshot(*dynamic, c)));
  EXPECT_EQ(b.loss_scale(), 1024);
  EXPECT_EQ(c.loss_scale(), std::ldexp(1.0, 23));  // doubled after steps 2, 4 and 6
  EXPECT_EQ(c.skipped_steps(), 0);
  EXPECT_EQ(c.num_steps(), 6);
}

TEST(LossScale, FixedScaleSkipsOrKeepsTheOverflowingUpdate) {
  auto dropping = make_mlp(), keeping = make_mlp();
  TrainOneStepCell drop(dropping, kMomentum), keep(keeping, kMomentum);
  drop.set_loss_scale(LossScale::fixed(128));
  keep.set_loss_scale(LossScale::fixed(128, /*drop_overflow_update=*/false));
  const std::vector<Tensor> before = snapshot(*dropping, drop);
  drop.step(data(true), label());
  keep.step(data(true), label());
  EXPECT_TRUE(drop.overflow());
  EXPECT_TRUE(all_bitwise_equal(before, snapshot(*dropping, drop)));
  EXPECT_EQ(drop.loss_scale(), 128);
  // fixed:keep checks nothing: the update is applied, the weights are no longer finite.
  EXPECT_FALSE(keep.overflow());
  EXPECT_EQ(keep.num_steps(), 1);
  EXPECT_TRUE(std::isnan(keeping->parameters_and_names()[0].second->value.get(0)));
  // The states: the scale alone (no counters).
  ASSERT_EQ(drop.loss_scale_states().size(), 1u);
  EXPECT_EQ(drop.loss_scale_states().begin()->first, "scale_sense");
}

TEST(LossScale, StatesAreMindSporesParametersAndRestore) {
  auto net = make_mlp();
  TrainOneStepCell step(net, kMomentum);
  EXPECT_TRUE(step.loss_scale_states().empty());
  EXPECT_EQ(step.loss_scale(), 1);
  step.set_loss_scale(LossScale::dynamic());
  const auto& st = step.loss_scale_states();
  ASSERT_EQ(st.size(), 3u);
  EXPECT_EQ(st.at("scale_sense").dtype(), DType::kFloat32);
  EXPECT_EQ(st.at("scale_sense").shape(), Shape{});
  EXPECT_EQ(st.at("scale_sense").get(0), 16777216);
  EXPECT_EQ(st.at("current_iterator_step").dtype(), DType::kInt32);
  EXPECT_EQ(st.at("current_iterator_step").get(0), 1);
  EXPECT_EQ(st.at("last_overflow_iterator_step").get(0), 0);
  // MindSpore may save a scalar as (1,): the value is taken.
  step.set_loss_scale_state("scale_sense", Tensor::from_doubles(DType::kFloat32, {1}, {256}));
  step.set_loss_scale_state("current_iterator_step", Tensor::scalar(DType::kInt32, 7));
  step.step(data(false), label());
  EXPECT_EQ(step.loss_scale(), 256);
  EXPECT_EQ(step.loss_scale_states().at("current_iterator_step").get(0), 8);
  EXPECT_EQ(error_of<ValueError>([&] {
              step.set_loss_scale_state("loss_scale", Tensor::scalar(DType::kFloat32, 1));
            }),
            "TrainOneStepCell.set_loss_scale_state: expected a state of loss scaling dynamic "
            "(init 16777216, factor 2, window 2000), got 'loss_scale'");
  EXPECT_EQ(error_of<ValueError>([&] {
              step.set_loss_scale_state("scale_sense", Tensor::scalar(DType::kFloat64, 1));
            }),
            "TrainOneStepCell.set_loss_scale_state: state 'scale_sense' is Float32(), got "
            "Float64()");
}

TEST(LossScale, MisuseIsAClearError) {
  EXPECT_EQ(error_of<ValueError>([] { LossScale::fixed(0); }),
            "loss scale: expected a finite positive scale (as Float32), got 0");
  EXPECT_EQ(error_of<ValueError>([] { LossScale::fixed(1e39); }),
            "loss scale: expected a finite positive scale (as Float32), got 1e+39");
  EXPECT_EQ(error_of<ValueError>([] { LossScale::dynamic(1024, 0.5); }),
            "loss scale: expected a scale factor >= 1, got 0.5");
  EXPECT_EQ(error_of<ValueError>([] { LossScale::dynamic(1024, 2, 0); }),
            "loss scale: expected a scale window in [1, 2147483647], got 0");
  EXPECT_EQ(LossScale{}.describe(), "none");
  EXPECT_EQ(LossScale::fixed().describe(), "fixed 128");
  EXPECT_EQ(LossScale::fixed(64, false).describe(), "fixed 64 (updates kept on overflow)");
  EXPECT_EQ(LossScale::dynamic().describe(), "dynamic (init 16777216, factor 2, window 2000)");
  auto net = make_mlp();
  TrainOneStepCell step(net, kMomentum);
  step.step(data(false), label());
  EXPECT_EQ(error_of<ValueError>([&] { step.set_loss_scale(LossScale::fixed()); }),
            "TrainOneStepCell.set_loss_scale: set it before the first step");
}

}  // namespace
}  // namespace loom::nn
