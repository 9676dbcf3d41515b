// The printed grad of a 2-layer MLP before and after `inline,simplify,dce`, compared with the
// checked-in golden/*.ir (LOOM_UPDATE_GOLDEN=1 rewrites them), and the flattening check: after
// the passes the gradient is one graph without calls.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/autodiff/grad.h"
#include "core/ir/anf.h"
#include "core/ir/printer.h"
#include "core/ir/verify.h"
#include "core/passes/pass.h"
#include "runtime/interpreter.h"
#include "tests/core/autodiff/test_util.h"

namespace loom::autodiff {
namespace {

using namespace testing;  // NOLINT
using ir::FuncGraph;
using ir::Module;
using ir::Value;

void expect_golden(const std::string& name, const std::string& text) {
  const std::string path = std::string(LOOM_SOURCE_DIR) + "/tests/core/autodiff/golden/" + name;
  const char* update = std::getenv("LOOM_UPDATE_GOLDEN");
  if (update && std::string(update) == "1") {
    std::ofstream(path) << text;
    return;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in) << "missing " << path << " (run with LOOM_UPDATE_GOLDEN=1)";
  std::stringstream want;
  want << in.rdbuf();
  EXPECT_EQ(text, want.str()) << "golden " << name << " differs (LOOM_UPDATE_GOLDEN=1 rewrites)";
}

TEST(GradGolden, MlpBeforeAndAfterPasses) {
  Module m;
  FuncGraph* loss = build_mlp(m, DType::kFloat32);
  FuncGraph* g = grad(loss, {.get_all = true, .get_by_list = true});
  m.set_entry(g);
  ir::verify(m);
  std::vector<Value> args = mlp_args(DType::kFloat32);
  Value before = runtime::interpret(*g, args);
  expect_golden("mlp_grad_before.ir", ir::print_module(m));

  passes::PassManager::parse("inline,simplify,dce").run(m);
  ir::verify(m, {.require_abstracts = true});
  expect_golden("mlp_grad_after.ir", ir::print_module(m));

  // One flat graph: nothing reachable but the entry, and no graph calls in it.
  EXPECT_EQ(m.reachable_graphs().size(), 1u);
  for (ir::CNode* c : m.entry()->topo_order()) {
    EXPECT_EQ(c->called_graph(), nullptr);
    EXPECT_FALSE(c->is_call_to(ir::kIfPrim) || c->is_call_to(ir::kWhilePrim));
  }
  // The passes keep the values.
  Value after = runtime::interpret(*m.entry(), args);
  for (std::size_t i = 0; i < 2; ++i) {
    for (std::size_t j = 0; j < before.elements()[i].elements().size(); ++j) {
      EXPECT_EQ(values(before.elements()[i].elements()[j]),
                values(after.elements()[i].elements()[j]));
    }
  }
}

}  // namespace
}  // namespace loom::autodiff
