// fold_constants: computes calls whose arguments are all constants and puts the result in their
// place as a constant.
//
// core/passes comes before the backends, so the computing is done by the ConstantEvaluator
// installed with set_constant_evaluator() (pass.h); ir-opt installs backend::run_op, which runs
// the op's CPU kernel. WITHOUT AN EVALUATOR THIS PASS CHANGES NOTHING.
//
// Rewrites, in every graph reachable from the entry, in topo order (so chains fold in one run:
// once Reshape(const) is a constant, the Add that reads it is next):
//   Op(c0, ..., cn)            → the constant Op computes   (Op a registered op with a kernel:
//                                                             elementwise, reduction or opaque)
//   MakeTuple(c0, ..., cn)     → the tuple constant (c0, ..., cn)
//   TupleGetItem(c, k)         → element k of the tuple constant c
// where every ci is a constant tensor, scalar or tuple of them. The constant's abstract is that
// of its value; the replaced node's name goes (constants print inline).
//
// Leaves alone:
//   - If and While (their graphs run in the interpreter; simplify turns an If with a constant
//     predicate into a call), calls of graphs (inline first), Depend (orders side effects) and
//     StopGradient (marks where gradients stop; a constant has none to stop anyway).
//   - Dropout: its result is random by intent even though it is a function of its key; folding
//     it would bake one mask into the graph for good.
//   - results of more than kMaxFoldedElements (2^20) elements in all: a constant lives in the
//     graph and is printed inline in every dump, so a big one is left to be computed at run
//     time. The size comes from the op's inference, before anything is computed.
//   - calls the evaluator refuses (it throws a loom::Error other than InternalError: no CPU
//     kernel for the dtype, arguments the op rejects) and calls whose inference fails: invalid
//     IR is for infer and verify to report, not this pass.
//   - a result whose abstract conflicts with the replaced node's (neither accepts the other).
#include <cstdint>
#include <optional>
#include <ranges>
#include <vector>

#include "core/ir/abstract.h"
#include "core/ir/anf.h"
#include "core/ir/error.h"
#include "core/ir/manager.h"
#include "core/passes/pass.h"
#include "ops/op.h"

namespace loom::passes {

namespace {

using ir::CNode;
using ir::FuncGraph;
using ir::Node;
using ir::Value;

constexpr std::int64_t kMaxFoldedElements = std::int64_t{1} << 20;

bool is_data(const Value& v) {
  if (v.is_tensor()) return v.as_tensor().defined();
  if (v.is_scalar()) return true;
  if (!v.is_tuple()) return false;
  for (const Value& e : v.elements()) {
    if (!is_data(e)) return false;
  }
  return true;
}

// The number of tensor elements an abstract describes, or -1 when a shape is not known.
std::int64_t elements_of(const ir::Abstract& a) {
  if (a.is_tensor()) return a.shape_known() ? shape_numel(a.shape()) : -1;
  if (!a.is_tuple()) return 0;
  std::int64_t total = 0;
  for (const ir::AbstractPtr& e : a.elements()) {
    const std::int64_t n = elements_of(*e);
    if (n < 0) return -1;
    total += n;
  }
  return total;
}

bool foldable_op(const ir::Primitive& prim) {
  const std::string& name = prim.name();
  if (name == "Dropout") return false;
  const ops::OpDef* def = ops::Registry::global().find(name);
  if (!def) return false;
  switch (def->trait) {
    case ops::Trait::kElementwise:
    case ops::Trait::kReduction:
    case ops::Trait::kOpaque: return true;
    case ops::Trait::kStructural: return name == "MakeTuple" || name == "TupleGetItem";
    case ops::Trait::kControlFlow: return false;
  }
  return false;
}

// The constant `c` computes, or nullopt when it is left alone.
std::optional<Value> fold(const CNode* c, const ConstantEvaluator& evaluate) {
  const ir::Primitive* prim = c->primitive();
  if (!prim || !foldable_op(*prim)) return std::nullopt;
  std::vector<Value> args;
  std::vector<ir::AbstractPtr> abstracts;
  // An index loop, not `inputs() | std::views::drop(1)`: clang 14 (the LOOM_FUZZ compiler) cannot
  // compile libstdc++ 12's ranges.
  for (std::size_t i = 1; i < c->inputs().size(); ++i) {
    const Node* in = c->inputs()[i];
    if (!in->is_value()) return std::nullopt;
    const Value& v = static_cast<const ir::ValueNode*>(in)->value();
    if (!is_data(v)) return std::nullopt;
    args.push_back(v);
    abstracts.push_back(ir::Abstract::of_value(v));
  }
  try {
    const ir::AbstractPtr out = ops::infer(*prim, abstracts);
    const std::int64_t n = elements_of(*out);
    if (n < 0 || n > kMaxFoldedElements) return std::nullopt;
    return evaluate(*prim, args);
  } catch (const InternalError&) {
    throw;
  } catch (const Error&) {
    return std::nullopt;
  }
}

bool run_fold_constants(ir::Module& module) {
  const ConstantEvaluator& evaluate = constant_evaluator();
  if (!evaluate) return false;
  ir::Manager mgr(module);
  bool changed = false;
  for (FuncGraph* graph : module.reachable_graphs()) {
    for (CNode* c : graph->topo_order()) {
      if (mgr.users(c).empty() && mgr.output_of(c).empty()) continue;
      std::optional<Value> result = fold(c, evaluate);
      if (!result) continue;
      Node* constant = graph->add_value(std::move(*result));
      if (!compatible(c->abstract(), constant->abstract())) continue;
      changed |= mgr.replace(c, constant);
    }
  }
  return changed;
}

}  // namespace

void register_fold_constants(PassRegistry& registry) {
  registry.add(PassInfo{
      .name = "fold_constants",
      .summary = "computes calls of constants through the installed evaluator (CPU kernels)",
      .run = run_fold_constants,
  });
}

}  // namespace loom::passes
