// A small CNN's gradients equal PyTorch's on the same weights and inputs
// (tests/core/autodiff/reference/cnn_reference.py writes the oracle).
#include <gtest/gtest.h>

#include "core/autodiff/grad.h"
#include "core/ir/anf.h"
#include "runtime/interpreter.h"
#include "ops/op.h"
#include "tests/core/autodiff/test_util.h"
#include "tests/ops/reference.h"

namespace loom::autodiff {
namespace {

using namespace testing;  // NOLINT
using ir::FuncGraph;
using ir::Module;
using ir::Node;
using ir::Value;

TEST(GradCnn, MatchesPyTorch) {
  std::map<std::string, Tensor> ref = loom::testing::read_reference("autodiff_cnn.txt");
  Module m;
  FuncGraph* f = m.add_graph("cnn");
  std::vector<Node*> p;
  for (const char* name : {"x", "w", "b", "fc", "labels"}) {
    p.push_back(f->add_parameter(name, ir::Abstract::of_value(Value::tensor(ref.at(name)))));
  }
  Node* conv = call(f, "Conv2D", {p[0], p[1]},
                    {{"out_channel", Value::i64(3)}, {"kernel_size", Value::ints({3, 3})}});
  Node* h = call(f, "ReLU", {call(f, "BiasAdd", {conv, p[2]})});
  h = call(f, "MaxPool", {h}, {{"kernel_size", Value::ints({2, 2})}, {"strides", Value::ints({2, 2})}});
  Node* logits = call(f, "MatMul", {call(f, "Flatten", {h}), p[3]});
  Node* ce = call(f, "SoftmaxCrossEntropyWithLogits", {logits, p[4]});
  Node* loss = f->add_call(ops::make_op("TupleGetItem"), {ce, f->add_value(Value::i64(0))});
  f->set_output(call(f, "ReduceMean", {loss}));
  m.set_entry(f);
  annotate(f);
  FuncGraph* g = grad(f, {.get_all = true, .return_value = true});
  std::vector<Value> args;
  for (const char* name : {"x", "w", "b", "fc", "labels"}) args.push_back(Value::tensor(ref.at(name)));
  Value got = runtime::interpret(*g, args);
  EXPECT_LT(loom::testing::max_abs_diff(got.elements()[0].as_tensor(), ref.at("loss")), 1e-5);
  const char* grads[] = {"dx", "dw", "db", "dfc"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_LT(loom::testing::max_abs_diff(got.elements()[1].elements()[i].as_tensor(), ref.at(grads[i])),
              1e-5)
        << grads[i];
  }
}

}  // namespace
}  // namespace loom::autodiff
