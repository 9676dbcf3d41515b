// loom_mindir_interop: the loom side of tests/mindir/mindir_check.py.
//   loom_mindir_interop export lenet|resnet OUT.mindir X.npy Y.npy
//       builds the network (seed 1; the ResNet-style one with non-trivial BatchNorm statistics),
//       saves a loom checkpoint OUT.ckpt, loads it into a freshly made network (seed 99), exports
//       that at X's shape and writes the network's eval output on X to Y.npy.
//   loom_mindir_interop run MODEL.mindir X.npy Y.npy
//       loads MODEL.mindir (mindir::GraphCell) and writes its output on X to Y.npy.
//   loom_mindir_interop finetune MODEL.mindir X.npy LABELS.npy OUT.ckpt Y.npy [LR]
//       loads MODEL.mindir as a trainable Cell (mindir::GraphNet), trains 5 momentum steps
//       (learning rate LR, default 0.05, momentum 0.9) with sparse softmax cross entropy on (X, LABELS),
//       prints the losses, saves the weights to OUT.ckpt and writes its eval output on X to Y.
#include <iomanip>
#include <iostream>
#include <memory>
#include <string>

#include "core/random/random.h"
#include "checkpoint/checkpoint.h"
#include "core/ir/error.h"
#include "data/npy.h"
#include "mindir/graph_net.h"
#include "mindir/mindir.h"
#include "nn/loss.h"
#include "nn/train.h"
#include "models/lenet/lenet.h"
#include "tests/mindir/nets.h"

namespace {

std::shared_ptr<loom::nn::Cell> make(const std::string& name) {
  if (name == "lenet") return std::make_shared<loom::models::LeNet5>();
  if (name == "resnet") return std::make_shared<loom::testing::SmallResNet>();
  throw loom::ValueError("expected lenet or resnet, got '" + name + "'");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace loom;
  try {
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "export" && argc == 6) {
      random::seed_all(1);
      auto src = make(argv[2]);
      if (auto* r = dynamic_cast<testing::SmallResNet*>(src.get())) r->randomize_bn();
      const std::string out = argv[3];
      checkpoint::save_checkpoint(*src, out + ".ckpt");
      random::seed_all(99);
      auto net = make(argv[2]);
      auto [not_loaded, unused] = checkpoint::load_param_into_net(
          *net, checkpoint::load_checkpoint(out + ".ckpt").tensors, true);
      if (!not_loaded.empty() || !unused.empty()) {
        std::cerr << "checkpoint did not match the network\n";
        return 1;
      }
      const Tensor x = data::load_npy(argv[4]);
      mindir::export_mindir(*net, std::vector<Tensor>{x}, out);
      net->set_train(false);
      const Tensor y = (*net)(ops::Var(ir::Value::tensor(x))).value().as_tensor();
      data::save_npy(argv[5], y);
      return 0;
    }
    if (cmd == "run" && argc == 5) {
      mindir::GraphCell cell = mindir::load_mindir(argv[2]);
      data::save_npy(argv[4], cell(data::load_npy(argv[3])));
      return 0;
    }
    if (cmd == "finetune" && (argc == 7 || argc == 8)) {
      const double lr = argc == 8 ? std::stod(argv[7]) : 0.05;
      auto net = mindir::load_mindir_net(argv[2]);
      const Tensor x = data::load_npy(argv[3]);
      const Tensor labels = data::load_npy(argv[4]);
      net->set_train(true);
      nn::TrainOneStepCell step(
          std::make_shared<nn::WithLossCell>(
              net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(/*sparse=*/true)),
          {.kind = nn::OptimizerKind::kMomentum, .learning_rate = lr, .momentum = 0.9});
      std::cout << "losses:";
      for (int i = 0; i < 5; ++i) std::cout << " " << std::setprecision(9) << step.step(x, labels).get(0);
      std::cout << "\n";
      checkpoint::save_checkpoint(*net, argv[5]);
      net->set_train(false);
      data::save_npy(argv[6], (*net)(ops::Var(ir::Value::tensor(x))).value().as_tensor());
      return 0;
    }
    std::cerr << "usage: loom_mindir_interop export lenet|resnet OUT X.npy Y.npy | run MODEL X.npy "
                 "Y.npy | finetune MODEL X.npy LABELS.npy OUT.ckpt Y.npy [LR]\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
