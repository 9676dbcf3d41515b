// Fine-tuning a model exported elsewhere: a MindIR file (MindSpore's mindspore.export of LeNet-5,
// or loom's) loaded as a trainable Cell (mindir::GraphNet), trained on Fashion-MNIST through
// nn::Model, evaluated before and after, and saved as a checkpoint with the file's parameter
// names, which MindSpore's load_checkpoint / load_param_into_net read into its own network.
//
//   loom_example_finetune_mindir [--mindir FILE] [--samples N] [--out DIR]
//
// FILE takes (N, 1, 32, 32) Float32 images and gives 10 logits (LeNet-5's signature). Without
// --mindir the example first exports loom's LeNet-5 (untrained, seed 1) to DIR/lenet.mindir and
// starts from that file.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "core/random/random.h"
#include "mindir/graph_net.h"
#include "mindir/mindir.h"
#include "models/lenet/dataset.h"
#include "models/lenet/lenet.h"
#include "nn/loss.h"
#include "nn/metrics.h"
#include "nn/model.h"
#include "optim/optimizer.h"

using namespace loom;

int main(int argc, char** argv) {
  std::int64_t samples = 6000;
  std::string out = ".", file;
  bool usage_error = argc % 2 == 0;  // every flag takes a value
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--samples") {
      samples = std::atoll(argv[i + 1]);
    } else if (flag == "--out") {
      out = argv[i + 1];
    } else if (flag == "--mindir") {
      file = argv[i + 1];
    } else {
      usage_error = true;
    }
  }
  if (usage_error || samples < 32) {
    std::fprintf(stderr, "usage: %s [--mindir FILE] [--samples N >= 32] [--out DIR]\n", argv[0]);
    return 2;
  }
  try {
    random::seed_all(1);
    if (file.empty()) {
      models::LeNet5 lenet;
      file = out + "/lenet.mindir";
      mindir::export_mindir(lenet, {Tensor(DType::kFloat32, {1, 1, 32, 32})}, file);
      std::printf("exported loom's untrained LeNet-5 to %s\n", file.c_str());
    }
    auto net = mindir::load_mindir_net(file);
    std::printf("loaded %s (%s): %zu parameters\n", file.c_str(),
                net->graph_cell().producer().c_str(), net->parameters_and_names().size());

    auto optimizer = std::make_shared<optim::Momentum>(
        optim::Momentum::Options{.learning_rate = 0.01, .momentum = 0.9});
    nn::Model model(net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(/*sparse=*/true),
                    optimizer, {{"accuracy", std::make_shared<nn::Accuracy>()}});
    const auto test = [] { return models::lenet::create_test_dataset({}); };
    std::printf("test accuracy before: %.4f\n", model.eval(test()).at("accuracy"));
    model.train(1, models::lenet::create_train_dataset({.num_samples = samples}));
    std::printf("test accuracy after one epoch on %lld images: %.4f\n",
                static_cast<long long>(samples), model.eval(test()).at("accuracy"));

    const std::string ckpt = out + "/finetuned.ckpt";
    checkpoint::save_checkpoint(*net, ckpt);
    std::printf("checkpoint: %s (", ckpt.c_str());
    const auto params = net->parameters_and_names();
    for (std::size_t i = 0; i < params.size(); ++i) {
      std::printf("%s%s", i ? ", " : "", params[i].first.c_str());
    }
    std::printf(")\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom_example_finetune_mindir: %s\n", e.what());
    return 1;
  }
  return 0;
}
