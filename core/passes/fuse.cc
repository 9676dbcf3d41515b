// fuse: replaces groups of nodes by the fused ops of ops/fused_ops.cc, driven by op traits.
// It runs after autodiff (the fused ops have no gradient rule).
//
// Fuses, in every graph reachable from the entry:
//   MatMul(x, w){ta, tb} → BiasAdd(·, b) [→ ReLU | ReLU6]   into MatMulBiasAct(x, w, b){ta, tb, act}
//   MatMul(x, w){ta, tb} → Add(·, b)     [→ ReLU | ReLU6]   likewise, when b is a rank-1 tensor
//                                                           of the product's (known) column count
//   Conv2D(x, w){...}    → BiasAdd(·, b) [→ ReLU | ReLU6]   into Conv2DBiasAct(x, w, b){..., act}
//   a maximal connected group of >= 2 elementwise nodes (ops marked OpDef::fusable)
//   of one Float32/Float64 dtype and one known output shape into
//   FusedElementwise(inputs...){program}, the group's last node its result.
// Every absorbed node but the group's result must be used only inside the group (Manager::users)
// and be no graph's output; the fused node takes the result's name and abstract, and the debug
// info (Cell scope, source line, role) of the product for MatMulBiasAct / Conv2DBiasAct (the
// Dense or Conv2d Cell that owns the weights, not a shared activation Cell), of the result for
// FusedElementwise.
//
// Leaves alone:
//   - a MatMul, Conv2D or BiasAdd whose result has another user (it is computed anyway, so
//     fusing would duplicate work), and a BiasAdd in NHWC format;
//   - an elementwise node whose output shape differs from the group's result (broadcasting
//     grows the shape: it stays outside and feeds the group as an input), whose abstract is
//     missing or of unknown shape, or of another dtype (comparisons, integer arithmetic);
//   - inputs that are not tensors (a scalar constant such as F32(2)): the kernel reads tensors;
//   - nodes in different graphs: a group never crosses a closure boundary.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

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

// True when every use of `node` is by `user` and it is no graph's output.
bool only_used_by(const ir::Manager& mgr, const Node* node, const CNode* user) {
  if (!mgr.output_of(node).empty()) return false;
  const std::vector<ir::Use> uses = mgr.users(node);
  return !uses.empty() && std::all_of(uses.begin(), uses.end(),
                                      [&](const ir::Use& u) { return u.user == user; });
}

// The single cnode using `node` (possibly several times), or null.
CNode* single_user(const ir::Manager& mgr, const Node* node) {
  if (!mgr.output_of(node).empty()) return nullptr;
  const std::vector<ir::Use> uses = mgr.users(node);
  if (uses.empty()) return nullptr;
  for (const ir::Use& u : uses) {
    if (u.user != uses[0].user) return nullptr;
  }
  return uses[0].user;
}

CNode* make_successor(FuncGraph& graph, const CNode* old, ir::PrimitivePtr prim,
                      const std::vector<Node*>& args, const ir::DebugInfo& debug) {
  CNode* c = graph.add_call(std::move(prim), args, debug);
  c->set_abstract(old->abstract());
  c->set_name(old->name());
  return c;
}

// ---- Product + bias + activation ------------------------------------------------------------

// True when `add` is Add(mm, b) with b a rank-1 tensor of mm's known column count: then it is
// BiasAdd(mm, b) element for element.
bool add_is_matmul_bias(const CNode* add, const Node* mm) {
  if (add->num_args() != 2 || add->arg(0) != mm) return false;
  const auto& ma = mm->abstract();
  const auto& ba = add->arg(1)->abstract();
  if (!ma || !ba || !ma->is_tensor() || !ba->is_tensor() || !ma->shape_known() ||
      !ba->shape_known()) {
    return false;
  }
  return ma->shape().size() == 2 && ba->shape().size() == 1 && ba->shape()[0] == ma->shape()[1] &&
         ba->dtype() == ma->dtype();
}

// Fuses the product + bias [+ activation] chain ending at `bias`, a BiasAdd or Add whose first
// argument is a MatMul or Conv2D cnode; true when it did.
bool fuse_bias_act(ir::Manager& mgr, FuncGraph& graph, CNode* bias) {
  if (bias->num_args() != 2 || !bias->arg(0)->is_cnode()) return false;
  auto* product = static_cast<CNode*>(bias->arg(0));
  const bool is_matmul = product->is_call_to("MatMul");
  const bool is_conv = product->is_call_to("Conv2D");
  if ((!is_matmul && !is_conv) || product->graph() != &graph || product->num_args() != 2) {
    return false;
  }
  if (bias->is_call_to("BiasAdd")) {
    const ir::Primitive* prim = bias->primitive();
    if (prim->has_attr("format") && prim->attr("format").as_string() != "NCHW") return false;
  } else if (!(is_matmul && bias->is_call_to("Add") && add_is_matmul_bias(bias, product))) {
    return false;
  }
  if (!only_used_by(mgr, product, bias)) return false;
  // The fused kernels are Float32 and Float64 only.
  if (const auto& a = product->abstract();
      a && a->is_tensor() && a->dtype() != DType::kFloat32 && a->dtype() != DType::kFloat64) {
    return false;
  }

  CNode* result = bias;
  std::string act = "none";
  if (CNode* user = single_user(mgr, bias);
      user && user->graph() == &graph && user->num_args() == 1) {
    if (user->is_call_to("ReLU")) act = "relu";
    if (user->is_call_to("ReLU6")) act = "relu6";
    if (act != "none") result = user;
  }
  ir::Primitive::Attrs attrs = product->primitive()->attrs();
  attrs["act"] = Value::string(act);
  CNode* fused =
      make_successor(graph, result, ops::make_op(is_matmul ? "MatMulBiasAct" : "Conv2DBiasAct",
                                                 std::move(attrs)),
                     {product->arg(0), product->arg(1), bias->arg(1)}, product->debug());
  return mgr.replace(result, fused);
}

bool fuse_products(ir::Manager& mgr, FuncGraph& graph) {
  bool changed = false;
  for (CNode* c : graph.topo_order()) {
    if (mgr.users(c).empty() && mgr.output_of(c).empty()) continue;  // left dead by a fusion
    if (c->is_call_to("BiasAdd") || c->is_call_to("Add")) changed |= fuse_bias_act(mgr, graph, c);
  }
  return changed;
}

// ---- Elementwise chains ---------------------------------------------------------------------

bool fusible_dtype(DType d) { return d == DType::kFloat32 || d == DType::kFloat64; }

// A node FusedElementwise can compute: a call of a supported op with a known-shape Float32 or
// Float64 tensor result.
bool fusible_elementwise(const Node* node) {
  if (!node->is_cnode()) return false;
  const auto* c = static_cast<const CNode*>(node);
  const ir::Primitive* prim = c->primitive();
  if (!prim) return false;
  const ops::OpDef* def = ops::Registry::global().find(prim->name());
  if (!def || !def->fusable) return false;
  if (!prim->attrs().empty() || c->num_args() != static_cast<std::size_t>(def->num_inputs)) {
    return false;
  }
  const auto& a = c->abstract();
  return a && a->is_tensor() && a->shape_known() && fusible_dtype(a->dtype());
}

// True when `node` may feed a FusedElementwise of dtype `dtype` as an input: a tensor of it.
bool tensor_input(const Node* node, DType dtype) {
  if (node->is_value()) {
    const Value& v = static_cast<const ir::ValueNode*>(node)->value();
    return v.is_tensor() && v.as_tensor().dtype() == dtype;
  }
  const auto& a = node->abstract();
  return a && a->is_tensor() && a->dtype() == dtype;
}

struct Group {
  std::vector<CNode*> members;  // in topo order; the last is the result
  std::vector<Node*> inputs;    // distinct, in order of first use
};

// Grows the group whose result is `root` over arguments used only inside it.
Group grow_group(const ir::Manager& mgr, FuncGraph& graph, CNode* root,
                 const std::unordered_set<const CNode*>& taken,
                 const std::unordered_map<const CNode*, std::size_t>& position) {
  const auto& ra = root->abstract();
  std::unordered_set<const CNode*> in_group{root};
  std::vector<CNode*> members{root};
  for (bool grew = true; grew;) {
    grew = false;
    for (std::size_t m = 0; m < members.size(); ++m) {
      for (Node* arg : members[m]->inputs()) {
        if (!arg->is_cnode() || !fusible_elementwise(arg) || arg->graph() != &graph) continue;
        auto* c = static_cast<CNode*>(arg);
        if (in_group.count(c) || taken.count(c)) continue;
        if (c->abstract()->shape() != ra->shape() || c->abstract()->dtype() != ra->dtype()) {
          continue;
        }
        if (!mgr.output_of(c).empty()) continue;
        const std::vector<ir::Use> uses = mgr.users(c);
        const bool inside = std::all_of(uses.begin(), uses.end(), [&](const ir::Use& u) {
          return in_group.count(u.user) != 0;
        });
        if (!inside) continue;
        in_group.insert(c);
        members.push_back(c);
        grew = true;
      }
    }
  }
  std::sort(members.begin(), members.end(), [&](const CNode* a, const CNode* b) {
    return position.at(a) < position.at(b);
  });
  Group g{.members = std::move(members), .inputs = {}};
  for (CNode* c : g.members) {
    for (std::size_t i = 0; i < c->num_args(); ++i) {
      Node* arg = c->arg(i);
      const bool internal = arg->is_cnode() && in_group.count(static_cast<CNode*>(arg));
      if (!internal && std::find(g.inputs.begin(), g.inputs.end(), arg) == g.inputs.end()) {
        g.inputs.push_back(arg);
      }
    }
  }
  return g;
}

// The FusedElementwise program of a group: one step per member, operands numbered inputs first.
Value group_program(const Group& g) {
  std::unordered_map<const Node*, std::int64_t> index;
  for (std::size_t i = 0; i < g.inputs.size(); ++i) {
    index[g.inputs[i]] = static_cast<std::int64_t>(i);
  }
  std::vector<Value> steps;
  for (const CNode* c : g.members) {
    std::vector<Value> step{Value::string(c->primitive()->name())};
    for (std::size_t i = 0; i < c->num_args(); ++i) step.push_back(Value::i64(index.at(c->arg(i))));
    index[c] = static_cast<std::int64_t>(g.inputs.size() + steps.size());
    steps.push_back(Value::tuple(std::move(step)));
  }
  return Value::tuple(std::move(steps));
}

bool fuse_elementwise(ir::Manager& mgr, FuncGraph& graph) {
  const std::vector<CNode*> order = graph.topo_order();
  std::unordered_map<const CNode*, std::size_t> position;
  for (std::size_t i = 0; i < order.size(); ++i) position[order[i]] = i;
  std::unordered_set<const CNode*> taken;
  std::vector<Group> groups;
  // Results first (reverse topo order), so each group starts at its last node and grows upward.
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    CNode* c = *it;
    if (taken.count(c) || !fusible_elementwise(c)) continue;
    if (mgr.users(c).empty() && mgr.output_of(c).empty()) continue;
    Group g = grow_group(mgr, graph, c, taken, position);
    if (g.members.size() < 2) continue;
    const DType dtype = c->abstract()->dtype();
    if (!std::all_of(g.inputs.begin(), g.inputs.end(),
                     [&](const Node* n) { return tensor_input(n, dtype); })) {
      continue;
    }
    for (const CNode* m : g.members) taken.insert(m);
    groups.push_back(std::move(g));
  }
  bool changed = false;
  for (const Group& g : groups) {
    CNode* result = g.members.back();
    CNode* fused = make_successor(graph, result,
                                  ops::make_op("FusedElementwise", {{"program", group_program(g)}}),
                                  g.inputs, result->debug());
    changed |= mgr.replace(result, fused);
  }
  return changed;
}

bool run_fuse(ir::Module& module) {
  const bool products = rewrite_graphs(module, fuse_products);
  const bool chains = rewrite_graphs(module, fuse_elementwise);
  return products || chains;
}

}  // namespace

void register_fuse(PassRegistry& registry) {
  registry.add(PassInfo{
      .name = "fuse",
      .summary = "MatMul/Conv2D + bias (+ ReLU/ReLU6) into MatMulBiasAct/Conv2DBiasAct, chains "
                 "of elementwise ops into FusedElementwise (after autodiff)",
      .run = run_fuse,
  });
}

}  // namespace loom::passes
