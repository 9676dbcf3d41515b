// combine_updates: the momentum updates of small parameters in one launch (MindSpore's
// CombineMomentum fusion; PyTorch's foreach optimizers), after autodiff.
//
// A training step updates every parameter with its own ApplyMomentum. For a small parameter
// (a bias, a BatchNorm scale, LeNet's layers) the launch costs more than the update: on a GPU each
// is a kernel of a few microseconds, on the CPU a parallel region. The pass rewrites, in every
// graph reachable from the entry,
//
//   %u0 = ApplyMomentum(%w0, %m0, %lr, %g0, %mom) {use_nesterov, gradient_scale}
//   %u1 = ApplyMomentum(%w1, %m1, %lr, %g1, %mom) {the same attributes}
// to
//   %c  = CombineMomentum(%lr, %mom, %w0, %m0, %g0, %w1, %m1, %g1) {use_nesterov, gradient_scale}
//   %u0 = MakeTuple(TupleGetItem(%c, 0), TupleGetItem(%c, 1)), %u1 likewise with 2 and 3,
//
// for the updates with the same learning rate node, the same momentum (node, or constant of equal
// value), the same attributes and dtype, whose parameters have at most kSmallParameter elements;
// at most ops::kMaxCombinedParameters to a CombineMomentum (in graph order). The arithmetic is
// ApplyMomentum's element for element, so the weights are bitwise those without the pass.
//
// Leaves alone: a single update of its kind (nothing to combine); parameters over
// kSmallParameter elements (their update is bandwidth-bound anyway, and left alone it still runs
// as soon as its gradient is ready, freeing it); updates of unknown shape or of a dtype without
// kernels (Float32 and Float64 have them); a group where an update's inputs depend on another
// update's result (combining would make a cycle).
#include <map>
#include <set>
#include <string>
#include <unordered_map>

#include "core/ir/anf.h"
#include "core/ir/error.h"
#include "core/ir/manager.h"
#include "core/ir/printer.h"
#include "core/passes/pass.h"
#include "ops/op.h"

namespace loom::passes {

namespace {

using ir::CNode;
using ir::FuncGraph;
using ir::Node;
using ir::Value;

// Parameters up to this many elements are combined.
constexpr std::int64_t kSmallParameter = 65536;

// The grouping key of an ApplyMomentum call that may be combined, or "" when it may not.
std::string key_of(const CNode* c) {
  if (!c->is_call_to("ApplyMomentum") || c->num_args() != 5) return "";
  const ir::AbstractPtr& a = c->arg(0)->abstract();
  if (!a || !a->is_tensor() || !a->shape_known() || shape_numel(a->shape()) > kSmallParameter ||
      (a->dtype() != DType::kFloat32 && a->dtype() != DType::kFloat64)) {
    return "";
  }
  const ir::Primitive* p = c->primitive();
  std::string key = std::string(dtype_name(a->dtype())) + "|lr " +
                    std::to_string(reinterpret_cast<std::uintptr_t>(c->arg(2)));
  const Node* momentum = c->arg(4);
  key += momentum->is_value()
             ? "|momentum " + ir::print_value(static_cast<const ir::ValueNode*>(momentum)->value())
             : "|momentum " + std::to_string(reinterpret_cast<std::uintptr_t>(momentum));
  for (const char* attr : {"use_nesterov", "gradient_scale"}) {
    key += std::string("|") + attr + " " + (p->has_attr(attr) ? ir::print_value(p->attr(attr)) : "");
  }
  return key;
}

// True when an input of a member depends on a member's result (through users, transitively).
bool would_cycle(const ir::Manager& mgr, const std::vector<CNode*>& members) {
  std::set<const Node*> downstream;
  std::vector<const Node*> work(members.begin(), members.end());
  while (!work.empty()) {
    const Node* n = work.back();
    work.pop_back();
    for (const ir::Use& u : mgr.users(n)) {
      if (downstream.insert(u.user).second) work.push_back(u.user);
    }
  }
  for (const CNode* m : members) {
    for (std::size_t i = 0; i < m->num_args(); ++i) {
      if (downstream.count(m->arg(i))) return true;
    }
  }
  return false;
}

bool combine(ir::Manager& mgr, FuncGraph& graph, const std::vector<CNode*>& members) {
  if (members.size() < 2 || would_cycle(mgr, members)) return false;
  const CNode* first = members.front();
  std::vector<Node*> args = {first->arg(2), first->arg(4)};
  std::vector<ir::AbstractPtr> outs;
  for (CNode* m : members) {
    for (std::size_t i : {0, 1, 3}) args.push_back(m->arg(i));
    for (const ir::AbstractPtr& e : m->abstract()->elements()) outs.push_back(e);
  }
  const ir::Primitive* p = first->primitive();
  ir::Primitive::Attrs attrs;
  for (const char* attr : {"use_nesterov", "gradient_scale"}) {
    if (p->has_attr(attr)) attrs[attr] = p->attr(attr);
  }
  ir::DebugInfo debug = first->debug();
  const std::size_t slash = debug.scope.find('/');
  debug.scope = (slash == std::string::npos ? std::string("") : debug.scope.substr(0, slash + 1)) +
                "CombineMomentum";
  CNode* c = graph.add_call(ops::make_op("CombineMomentum", std::move(attrs)), args, debug);
  c->set_abstract(ir::Abstract::tuple(std::move(outs)));
  for (std::size_t j = 0; j < members.size(); ++j) {
    CNode* m = members[j];
    std::vector<Node*> parts;
    for (std::int64_t k : {0, 1}) {
      CNode* get = graph.add_call(ops::make_op("TupleGetItem"),
                                  {c, graph.add_value(Value::i64(static_cast<std::int64_t>(2 * j) + k))},
                                  m->debug());
      get->set_abstract(m->abstract()->elements()[static_cast<std::size_t>(k)]);
      parts.push_back(get);
    }
    CNode* pair = graph.add_call(ops::make_op("MakeTuple"), parts, m->debug());
    pair->set_abstract(m->abstract());
    pair->set_name(m->name());
    mgr.replace(m, pair);
  }
  return true;
}

bool combine_graph(ir::Manager& mgr, FuncGraph& graph) {
  std::map<std::string, std::vector<CNode*>> groups;  // in graph order within each group
  std::vector<std::string> order;
  for (CNode* c : graph.topo_order()) {
    const std::string key = key_of(c);
    if (key.empty()) continue;
    auto [it, fresh] = groups.try_emplace(key);
    if (fresh) order.push_back(key);
    it->second.push_back(c);
  }
  bool changed = false;
  for (const std::string& key : order) {
    const std::vector<CNode*>& all = groups.at(key);
    for (std::size_t b = 0; b < all.size(); b += ops::kMaxCombinedParameters) {
      const std::size_t e = std::min(all.size(), b + ops::kMaxCombinedParameters);
      changed |= combine(mgr, graph, std::vector<CNode*>(all.begin() + static_cast<std::ptrdiff_t>(b),
                                                         all.begin() + static_cast<std::ptrdiff_t>(e)));
    }
  }
  return changed;
}

}  // namespace

void register_combine_updates(PassRegistry& registry) {
  registry.add(PassInfo{
      .name = "combine_updates",
      .summary = "the ApplyMomentum updates of small parameters with one learning rate and "
                 "momentum into CombineMomentum launches (after autodiff)",
      .run = [](ir::Module& m) { return rewrite_graphs(m, combine_graph); },
  });
}

}  // namespace loom::passes
