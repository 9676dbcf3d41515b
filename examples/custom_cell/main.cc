// MindSpore's quick start, in C++: a network written by the user as an nn::Cell (a small CNN with
// a residual block, BatchNorm, Dropout and a Dense classifier), trained on Fashion-MNIST through
// nn::Model with a callback of the user's own, checkpointed, evaluated, and exported to MindIR.
//
//   loom_example_custom_cell [--samples N] [--epochs E] [--out DIR]
//       (defaults: 6000 training images, 1 epoch, DIR ".")
//
// Writes DIR/custom_cell-<epoch>_<step>.ckpt and DIR/custom_cell.mindir; prints the test accuracy.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/train_state.h"
#include "core/random/random.h"
#include "data/dataset.h"
#include "mindir/mindir.h"
#include "nn/callback.h"
#include "nn/cell.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/metrics.h"
#include "nn/model.h"
#include "optim/optimizer.h"

using namespace loom;

namespace {

// relu(x + bn2(conv2(relu(bn1(conv1(x)))))): two 3x3 convolutions keeping the shape.
class ResidualBlock : public nn::Cell {
 public:
  explicit ResidualBlock(std::int64_t channels) : Cell("ResidualBlock") {
    conv1_ = &register_cell("conv1", std::make_shared<nn::Conv2d>(
                                         nn::Conv2dOptions(channels, channels, 3)));
    bn1_ = &register_cell("bn1", std::make_shared<nn::BatchNorm2d>(channels));
    conv2_ = &register_cell("conv2", std::make_shared<nn::Conv2d>(
                                         nn::Conv2dOptions(channels, channels, 3)));
    bn2_ = &register_cell("bn2", std::make_shared<nn::BatchNorm2d>(channels));
  }
  ops::Var construct(const std::vector<ops::Var>& in) override {
    ops::Var h = nn::relu((*bn1_)((*conv1_)(in[0])));
    h = (*bn2_)((*conv2_)(h));
    return nn::relu(nn::add(h, in[0]));
  }

 private:
  nn::Conv2d *conv1_, *conv2_;
  nn::BatchNorm2d *bn1_, *bn2_;
};

// (N, 1, 28, 28) -> stem conv 16 -> pool -> residual block -> pool -> dropout -> dense (N, 10).
class Net : public nn::Cell {
 public:
  Net() : Cell("Net") {
    stem_ = &register_cell("stem", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(1, 16, 3)));
    bn_ = &register_cell("bn", std::make_shared<nn::BatchNorm2d>(16));
    pool_ = &register_cell("pool", std::make_shared<nn::MaxPool2d>(2, 2));
    block_ = &register_cell("block", std::make_shared<ResidualBlock>(16));
    dropout_ = &register_cell("dropout", std::make_shared<nn::Dropout>(0.2));
    fc_ = &register_cell("fc", std::make_shared<nn::Dense>(16 * 7 * 7, 10));
  }
  ops::Var construct(const std::vector<ops::Var>& in) override {
    ops::Var h = (*pool_)(nn::relu((*bn_)((*stem_)(in[0]))));  // (N, 16, 14, 14)
    h = (*pool_)((*block_)(h));                                 // (N, 16, 7, 7)
    return (*fc_)((*dropout_)(nn::flatten(h)));
  }

 private:
  nn::Conv2d* stem_;
  nn::BatchNorm2d* bn_;
  nn::MaxPool2d* pool_;
  ResidualBlock* block_;
  nn::Dropout* dropout_;
  nn::Dense* fc_;
};

// The user's callback: one line per epoch with the mean loss, the steps and the time.
class EpochSummary : public nn::Callback {
 public:
  void on_train_epoch_begin(nn::RunContext&) override { begin_ = Clock::now(); }
  void on_train_epoch_end(nn::RunContext& rc) override {
    const double s = std::chrono::duration<double>(Clock::now() - begin_).count();
    std::printf("epoch %lld/%lld: %lld steps, mean loss %.4f, %.1f s\n",
                static_cast<long long>(rc.cur_epoch_num), static_cast<long long>(rc.epoch_num),
                static_cast<long long>(rc.batch_num), rc.epoch_loss_mean, s);
  }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point begin_;
};

// Fashion-MNIST, 28x28, scaled to [0, 1] and normalized with the training images' mean and
// standard deviation; the first `samples` rows (0: all), shuffled when training.
data::DatasetPtr fashion_mnist(const std::string& usage, std::int64_t samples, bool train) {
  data::DatasetPtr ds = data::MnistDataset(data::fashion_mnist_dir(""), usage);
  if (samples > 0) ds = ds->take(samples);
  ds = ds->map({data::Rescale(1.0 / 255, 0), data::Normalize({0.2860}, {0.3530}),
                data::HWC2CHW()},
               "image");
  if (train) ds = ds->shuffle();
  return ds->batch(32, /*drop_remainder=*/train);
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t samples = 6000, epochs = 1;
  std::string out = ".";
  bool usage_error = argc % 2 == 0;  // every flag takes a value
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--samples") {
      samples = std::atoll(argv[i + 1]);
    } else if (flag == "--epochs") {
      epochs = std::atoll(argv[i + 1]);
    } else if (flag == "--out") {
      out = argv[i + 1];
    } else {
      usage_error = true;
    }
  }
  if (usage_error || samples < 32 || epochs < 1) {
    std::fprintf(stderr, "usage: %s [--samples N >= 32] [--epochs E >= 1] [--out DIR]\n",
                 argv[0]);
    return 2;
  }
  try {
    random::seed_all(1);
    auto net = std::make_shared<Net>();
    auto optimizer = std::make_shared<optim::Momentum>(
        optim::Momentum::Options{.learning_rate = 0.01, .momentum = 0.9});
    nn::Model model(net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(/*sparse=*/true),
                    optimizer, {{"accuracy", std::make_shared<nn::Accuracy>()}});

    EpochSummary summary;
    checkpoint::ModelCheckpoint ckpt("custom_cell", out, {.save_checkpoint_steps = 0});
    model.train(epochs, fashion_mnist("train", samples, true), {&summary, &ckpt});
    std::printf("checkpoint: %s\n", ckpt.latest().c_str());

    const double accuracy = model.eval(fashion_mnist("test", 0, false)).at("accuracy");
    std::printf("test accuracy: %.4f\n", accuracy);

    const std::string mindir = out + "/custom_cell.mindir";
    mindir::export_mindir(*net, {Tensor(DType::kFloat32, {1, 1, 28, 28})}, mindir);
    std::printf("mindir: %s\n", mindir.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom_example_custom_cell: %s\n", e.what());
    return 1;
  }
  return 0;
}
