// Writes one event file of every kind into argv[1], for tensorboard_check.py: scalars "loss" at
// steps 0..4 (1/(step+1)), a histogram "weights" at step 2 (the 12 values -0.55, -0.45, ...,
// 0.55), a 4x5 RGB image "img" at step 1, text "note", a graph with Cell scopes, and an hparams
// session with metric "accuracy" (0.875 at step 4), ended with success.
#include <cstdio>
#include <exception>

#include "core/ir/anf.h"
#include "summary/summary_record.h"

using namespace loom;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  try {
    summary::SummaryRecord rec(argv[1]);
    for (int s = 0; s < 5; ++s) rec.add_scalar("loss", 1.0 / (s + 1), s);
    std::vector<double> w;
    for (int i = 0; i < 12; ++i) w.push_back(-0.55 + 0.1 * i);
    rec.add_histogram("weights", Tensor::from_vector<double>({12}, w), 2);
    Tensor img(DType::kUInt8, {3, 4, 5});  // CHW
    for (std::int64_t i = 0; i < img.numel(); ++i) img.set(i, static_cast<double>(i * 4 % 256));
    rec.add_image("img", img, 1);
    rec.add_text("note", "hello from loom", 0);

    ir::Module m;
    ir::FuncGraph* g = m.add_graph("main");
    ir::Parameter* x = g->add_parameter("x", ir::Abstract::tensor(DType::kFloat32, {2, 3}));
    ir::Parameter* wt = g->add_parameter("fc.weight", ir::Abstract::tensor(DType::kFloat32, {3, 4}));
    wt->set_default(Tensor(DType::kFloat32, {3, 4}));
    ir::CNode* mm = g->add_call(ir::make_primitive("MatMul"), {x, wt}, {.scope = "Net/fc/MatMul"});
    ir::CNode* r = g->add_call(ir::make_primitive("ReLU"), {mm}, {.scope = "Net/act/ReLU"});
    g->set_output(r);
    m.set_entry(g);
    rec.add_graph(*g);

    rec.add_hparams({{"lr", 0.01}, {"optimizer", "Momentum"}, {"batch_size", 32},
                     {"model", "LeNet5"}, {"seed", 1}, {"amp", false}},
                    {"loss", "accuracy"});
    rec.add_scalar("accuracy", 0.875, 4);
    rec.end_hparams_session(true, 4);
    rec.close();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tb_writer: %s\n", e.what());
    return 1;
  }
  return 0;
}
