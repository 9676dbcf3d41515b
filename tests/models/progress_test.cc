// tools/progress.h: the training display — log lines every 10% of an epoch off a terminal, a
// redrawn status line on one, and the per-epoch summary with the test metrics.
#include "tools/progress.h"

#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/ir/tensor.h"
#include "nn/layers.h"
#include "nn/train.h"

namespace loom::tools {
namespace {

// Runs one epoch of `steps` steps with loss 1.0 through the callback; `read` false: as on a
// GPU before the model read the first losses (no mean yet).
std::string run_epoch(bool terminal, std::int64_t steps, bool read = true) {
  std::ostringstream out;
  ProgressCallback cb(out, terminal);
  nn::RunContext rc;
  rc.epoch_num = 2;
  rc.cur_epoch_num = 1;
  rc.batch_num = steps;
  cb.on_train_epoch_begin(rc);
  for (std::int64_t i = 1; i <= steps; ++i) {
    rc.step_in_epoch = i;
    rc.cur_step_num = i;
    rc.batch_size = 32;
    rc.loss = Tensor::scalar(DType::kFloat32, 1.0);
    rc.epoch_loss_mean = read ? 1.0 : 0.0;
    rc.epoch_loss_steps = read ? i : 0;
    cb.on_train_step_end(rc);
  }
  rc.metrics = {{"accuracy", 0.875}, {"loss", 0.5}};
  cb.on_train_epoch_end(rc);
  return out.str();
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (auto p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(Progress, ShowsNoLossBeforeAnyWasRead) {
  const std::string out = run_epoch(/*terminal=*/false, 20, /*read=*/false);
  EXPECT_NE(out.find("epoch 1/2 step 2/20 (10%): loss -, "), std::string::npos) << out;
}

TEST(Progress, LogsEveryTenthOfAnEpochOffATerminal) {
  const std::string out = run_epoch(/*terminal=*/false, 64);
  EXPECT_EQ(count(out, "\n"), 10) << out;  // 10%, ..., 90%, then the summary
  EXPECT_EQ(count(out, "\r"), 0);
  EXPECT_NE(out.find("epoch 1/2 step 7/64 (10%): loss 1.0000, "), std::string::npos) << out;
  EXPECT_NE(out.find("epoch 1/2 step 58/64 (90%)"), std::string::npos) << out;
  EXPECT_NE(out.find("epoch 1/2: train loss 1.0000, test loss 0.5000, test accuracy 0.8750, "),
            std::string::npos)
      << out;
}

TEST(Progress, FewerStepsThanTenthsLogEachStep) {
  const std::string out = run_epoch(false, 3);
  EXPECT_EQ(count(out, "\n"), 3) << out;  // steps 1 and 2, then the summary
}

TEST(Progress, RedrawsOneLineOnATerminalAtMostTenTimesASecond) {
  const std::string out = run_epoch(/*terminal=*/true, 1000);
  // The first step and the last are always drawn; 1000 fast steps take far less than 0.1 s.
  EXPECT_GE(count(out, "\repoch 1/2 ["), 2) << out;
  EXPECT_LE(count(out, "\repoch 1/2 ["), 5) << out;
  EXPECT_NE(out.find("[####################] 1000/1000  loss 1.0000"), std::string::npos) << out;
  EXPECT_EQ(count(out, "\n"), 1);  // only the summary ends a line
  EXPECT_NE(out.find("\r\033[Kepoch 1/2: train loss 1.0000"), std::string::npos);
}

TEST(Progress, FormatsDurations) {
  EXPECT_EQ(ProgressCallback::format_duration(0), "0:00");
  EXPECT_EQ(ProgressCallback::format_duration(65.4), "1:05");
  EXPECT_EQ(ProgressCallback::format_duration(3600 * 12 + 7), "12:00:07");
  EXPECT_EQ(ProgressCallback::format_duration(-1), "?");
}

}  // namespace
}  // namespace loom::tools

namespace loom::tools {
namespace {

// A one-layer network whose loss is the sum of its outputs times the labels.
class DotLoss : public nn::Cell {
 public:
  DotLoss() : nn::Cell("DotLoss") {}
  ops::Var construct(const std::vector<ops::Var>& in) override {
    return nn::current_emitter().reduce_sum(nn::mul(in[0], in[1]), {}, false);
  }
};

TEST(Progress, SaysWhichStepsLossScalingSkippedAndTheScale) {
  auto net = std::make_shared<nn::WithLossCell>(std::make_shared<nn::Dense>(3, 2),
                                                std::make_shared<DotLoss>());
  nn::TrainOneStepCell step(net, nn::OptimizerSpec{.kind = nn::OptimizerKind::kMomentum,
                                                   .learning_rate = 0.1, .momentum = 0.9});
  step.set_loss_scale(nn::LossScale::dynamic(1024, 2, 100));
  std::ostringstream out;
  ProgressCallback cb(out, /*terminal=*/false);
  nn::RunContext rc;
  rc.epoch_num = 1;
  rc.cur_epoch_num = 1;
  rc.batch_num = 2;
  rc.train_network = &step;
  cb.on_train_epoch_begin(rc);
  const Tensor y = Tensor::from_doubles(DType::kFloat32, {1, 2}, {1, -1});
  for (int i = 1; i <= 2; ++i) {  // step 1 overflows (an Inf input), step 2 does not
    const double x0 = i == 1 ? std::numeric_limits<double>::infinity() : 0.5;
    rc.loss = step.step(Tensor::from_doubles(DType::kFloat32, {1, 3}, {x0, 1, 2}), y);
    rc.step_in_epoch = rc.cur_step_num = i;
    rc.batch_size = 1;
    rc.epoch_loss_mean = 1.0;
    rc.epoch_loss_steps = i;
    cb.on_train_step_end(rc);
  }
  cb.on_train_epoch_end(rc);
  const std::string s = out.str();
  EXPECT_EQ(count(s, "update skipped"), 1) << s;
  EXPECT_NE(s.find("step 1: an Inf or NaN gradient, update skipped; loss scale 512\n"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("epoch 1/1: train loss 1.0000, loss scale 512 (1 step skipped), "),
            std::string::npos)
      << s;
}

}  // namespace
}  // namespace loom::tools
