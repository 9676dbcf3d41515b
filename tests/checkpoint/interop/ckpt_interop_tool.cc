// ckpt_interop_tool: loom's side of tests/checkpoint/interop/mindspore_check.py (checkpoint
// interoperability with MindSpore, label interop). Each subcommand does one thing with loom's
// checkpoint code and models::LeNet5; the Python script does the MindSpore side and compares.
//
//   save-lenet OUT.ckpt SEED           a LeNet5 drawn after seed_all(SEED), save_checkpoint(net)
//   forward CKPT IN.bin OUT.bin N      strict load_param_into_net into LeNet5 (every parameter
//                                      loaded, no checkpoint entry left over), run it on N×1×32×32
//                                      raw float32 IN.bin, write the (N, 10) float32 logits raw
//   resave IN.ckpt OUT.ckpt [--crc-check] [--crc]
//                                      load_checkpoint (crc_check when asked) and save again
//                                      (with the CRC trailer with --crc)
//   dump CKPT [--crc-check]            one line per entry, in file order:
//                                      "tensor NAME DTYPE SHAPE CRC32" (SHAPE "2,3"; "" for 0-d,
//                                      CRC32 of the raw bytes in hex) or "str NAME UTF8-HEX"
//   train-lenet DIR SEED               trains LeNet5 (Momentum) 2 epochs × 4 steps on synthetic
//                                      data with ModelCheckpoint (every 3 steps) into DIR and
//                                      prints the newest file's path
//   continue OPT IN.ckpt X.bin Y.bin N STEPS OUT.ckpt
//                                      LeNet5 with optimizer OPT (momentum lr 0.01 | sgd lr 0.01
//                                      momentum 0.9 | adam lr 0.001 | adamw lr 0.001 weight decay
//                                      0.01): every parameter and every optimizer entry loaded from
//                                      IN.ckpt by MindSpore's names, then STEPS training steps on
//                                      the batch (N×1×32×32 float32 X.bin, N int32 labels Y.bin),
//                                      printing each loss; OUT.ckpt gets the parameters and the
//                                      optimizer's entries
//
// Exit status 0 on success; 1 with the error on stderr otherwise.
#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/random/random.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/train_state.h"
#include "core/ir/tensor.h"
#include "core/ir/value.h"
#include "data/dataset.h"
#include "models/lenet/lenet.h"
#include "nn/loss.h"
#include "nn/model.h"
#include "nn/train.h"
#include "optim/optimizer.h"

namespace {

using namespace loom;

[[noreturn]] void usage() {
  std::cerr << "usage: ckpt_interop_tool save-lenet OUT.ckpt SEED\n"
               "       ckpt_interop_tool forward CKPT IN.bin OUT.bin N\n"
               "       ckpt_interop_tool resave IN.ckpt OUT.ckpt [--crc-check] [--crc]\n"
               "       ckpt_interop_tool dump CKPT [--crc-check]\n"
               "       ckpt_interop_tool train-lenet DIR SEED\n"
               "       ckpt_interop_tool continue OPT IN.ckpt X.bin Y.bin N STEPS OUT.ckpt\n";
  std::exit(2);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_file(const std::string& path, const void* data, std::size_t n) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
  if (!out) throw std::runtime_error("cannot write " + path);
}

struct Flags {
  checkpoint::LoadOptions load;
  checkpoint::SaveOptions save;
};

Flags flags(int argc, char** argv, int first_flag, bool save_flags) {
  Flags o;
  for (int i = first_flag; i < argc; ++i) {
    if (std::string(argv[i]) == "--crc-check") {
      o.load.crc_check = true;
    } else if (save_flags && std::string(argv[i]) == "--crc") {
      o.save.crc = true;
    } else {
      usage();
    }
  }
  return o;
}

int save_lenet(const std::string& out, std::uint64_t seed) {
  random::seed_all(seed);
  models::LeNet5 net;
  std::cout << checkpoint::save_checkpoint(net, out) << "\n";
  return 0;
}

int forward(const std::string& ckpt, const std::string& in, const std::string& out, std::int64_t n) {
  models::LeNet5 net;
  net.set_train(false);
  const checkpoint::Checkpoint ck = checkpoint::load_checkpoint(ckpt);
  const auto [param_not_load, ckpt_not_load] =
      checkpoint::load_param_into_net(net, ck.tensors, /*strict_load=*/true);
  if (!param_not_load.empty() || !ckpt_not_load.empty()) {
    std::cerr << "forward: " << param_not_load.size() << " parameter(s) not loaded, "
              << ckpt_not_load.size() << " checkpoint entr(ies) unused:";
    for (const auto& s : param_not_load) std::cerr << " param:" << s;
    for (const auto& s : ckpt_not_load) std::cerr << " ckpt:" << s;
    std::cerr << "\n";
    return 1;
  }
  const std::string bytes = read_file(in);
  Tensor x(DType::kFloat32, {n, 1, 32, 32});
  if (bytes.size() != x.nbytes()) {
    throw std::runtime_error(in + ": expected " + std::to_string(x.nbytes()) + " bytes, got " +
                             std::to_string(bytes.size()));
  }
  std::memcpy(x.raw_data(), bytes.data(), bytes.size());
  const Tensor y = net(ops::Var(ir::Value::tensor(x))).value().as_tensor();
  if (y.dtype() != DType::kFloat32 || y.shape() != Shape{n, 10}) {
    throw std::runtime_error("forward: unexpected output " + shape_to_string(y.shape()));
  }
  write_file(out, y.raw_data(), y.nbytes());
  return 0;
}

int resave(const std::string& in, const std::string& out, const Flags& o) {
  std::cout << checkpoint::save_checkpoint(checkpoint::load_checkpoint(in, o.load), out, o.save)
            << "\n";
  return 0;
}

std::string hex(const std::string& s) {
  static const char* digits = "0123456789abcdef";
  std::string h;
  for (unsigned char c : s) h += {digits[c >> 4], digits[c & 15]};
  return h;
}

int dump(const std::string& path, const checkpoint::LoadOptions& o) {
  const checkpoint::Checkpoint ck = checkpoint::load_checkpoint(path, o);
  for (const auto& [name, t] : ck.tensors) {
    std::string shape;
    for (std::size_t i = 0; i < t.shape().size(); ++i) {
      shape += (i ? "," : "") + std::to_string(t.shape()[i]);
    }
    uLong c = crc32(0L, Z_NULL, 0);
    if (t.nbytes() > 0) {
      c = crc32(c, static_cast<const Bytef*>(t.raw_data()), static_cast<uInt>(t.nbytes()));
    }
    char crc[16];
    std::snprintf(crc, sizeof crc, "%08lx", static_cast<unsigned long>(c));
    std::cout << "tensor\t" << name << "\t" << checkpoint::tensor_type_name(t.dtype()) << "\t"
              << shape << "\t" << crc << "\n";
  }
  for (const auto& [name, s] : ck.strings) std::cout << "str\t" << name << "\t" << hex(s) << "\n";
  return 0;
}

std::shared_ptr<optim::Optimizer> interop_optimizer(const std::string& name) {
  if (name == "momentum") {
    return std::make_shared<optim::Momentum>(
        optim::Momentum::Options{.learning_rate = 0.01, .momentum = 0.9});
  }
  if (name == "sgd") {
    return std::make_shared<optim::SGD>(optim::SGD::Options{.learning_rate = 0.01, .momentum = 0.9});
  }
  if (name == "adam") return std::make_shared<optim::Adam>(optim::Adam::Options{.learning_rate = 0.001});
  if (name == "adamw") {
    return std::make_shared<optim::AdamWeightDecay>(
        optim::AdamWeightDecay::Options{.learning_rate = 0.001, .weight_decay = 0.01});
  }
  throw std::runtime_error("unknown optimizer " + name);
}

int continue_training(const std::string& opt_name, const std::string& in_ckpt,
                      const std::string& x_path, const std::string& y_path, std::int64_t n,
                      int steps, const std::string& out_ckpt) {
  auto net = std::make_shared<models::LeNet5>();
  std::shared_ptr<optim::Optimizer> opt = interop_optimizer(opt_name);
  nn::TrainOneStepCell step(
      std::make_shared<nn::WithLossCell>(net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true)),
      opt, nn::ExecMode::kGraph);
  const checkpoint::Checkpoint ck = checkpoint::load_checkpoint(in_ckpt);
  const auto [param_not_load, unused] =
      checkpoint::load_param_into_net(*net, ck.tensors, /*strict_load=*/true);
  if (!param_not_load.empty()) throw std::runtime_error("parameter not loaded: " + param_not_load[0]);
  opt->load_entries(ck.tensors);  // every state by MindSpore's name, global_step, beta powers
  Tensor x(DType::kFloat32, {n, 1, 32, 32});
  Tensor y(DType::kInt32, {n});
  const std::string xb = read_file(x_path), yb = read_file(y_path);
  if (xb.size() != x.nbytes() || yb.size() != y.nbytes()) throw std::runtime_error("batch sizes");
  std::memcpy(x.raw_data(), xb.data(), xb.size());
  std::memcpy(y.raw_data(), yb.data(), yb.size());
  net->set_train(true);
  for (int i = 0; i < steps; ++i) {
    std::printf("%.9g\n", step.step(x, y).get(0));
  }
  checkpoint::NamedTensors out;
  for (auto& [name, p] : net->parameters_and_names()) out.emplace_back(name, p->value);
  for (auto& entry : opt->checkpoint_entries()) out.push_back(std::move(entry));
  checkpoint::save_checkpoint(out, out_ckpt);
  return 0;
}

int train_lenet(const std::string& dir, std::uint64_t seed) {
  random::seed_all(seed);
  auto net = std::make_shared<models::LeNet5>();
  constexpr std::int64_t kRows = 16, kBatch = 4;
  Tensor x(DType::kFloat32, {kRows, 1, 32, 32});
  Tensor y(DType::kInt32, {kRows});
  for (std::int64_t i = 0; i < x.numel(); ++i) x.set(i, std::sin(0.013 * static_cast<double>(i)));
  for (std::int64_t i = 0; i < kRows; ++i) y.set(i, static_cast<double>((i * 7) % 10));
  auto ds = data::TensorSlicesDataset({"image", "label"}, {x, y})->batch(kBatch, true);
  nn::Model model(net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true),
                  {.kind = nn::OptimizerKind::kMomentum, .learning_rate = 0.01});
  checkpoint::ModelCheckpoint ckpt("lenet", dir, {.save_checkpoint_steps = 3});
  model.train(2, ds, {&ckpt});
  std::cout << ckpt.latest() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) usage();
  const std::string cmd = argv[1];
  try {
    if (cmd == "save-lenet" && argc == 4) return save_lenet(argv[2], std::stoull(argv[3]));
    if (cmd == "forward" && argc == 6) return forward(argv[2], argv[3], argv[4], std::stoll(argv[5]));
    if (cmd == "resave" && argc >= 4) return resave(argv[2], argv[3], flags(argc, argv, 4, true));
    if (cmd == "dump" && argc >= 3) return dump(argv[2], flags(argc, argv, 3, false).load);
    if (cmd == "train-lenet" && argc == 4) return train_lenet(argv[2], std::stoull(argv[3]));
    if (cmd == "continue" && argc == 9) {
      return continue_training(argv[2], argv[3], argv[4], argv[5], std::stoll(argv[6]),
                               std::stoi(argv[7]), argv[8]);
    }
  } catch (const std::exception& e) {
    std::cerr << "ckpt_interop_tool " << cmd << ": " << e.what() << "\n";
    return 1;
  }
  usage();
}
