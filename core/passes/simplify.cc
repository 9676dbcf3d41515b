// simplify: local algebraic rewrites, repeated until none applies.
//
// Rewrites, in every graph reachable from the entry (each rule replaces one cnode through
// Manager::replace; a new node takes over the replaced node's name, abstract and debug info; an
// existing cnode that takes its place gets its abstract where its own is less precise, as when a
// polymorphic callee's `(4, -1)` meets its call site's `(4, 16)` after inlining):
//   TupleGetItem(MakeTuple(a0, ..., an), k)   → ak        (k a constant integer, may be negative)
//   If(pred, @then, @else, args...)           → @then(args...) or @else(args...) when pred is a
//                                               constant: a Bool scalar or a rank-0 Bool tensor
//                                               (inline then flattens the call)
//   Reshape(x){shape}                         → x         when shape (its -1 resolved) is x's
//                                                          known shape
//   Reshape(Reshape(x){s1}){s2}               → Reshape(x){s2} (a reshape keeps the element
//                                               order, so only the last shape counts; the inner
//                                               Reshape stays while something else uses it)
//   Cast(x){dst_type}                         → x         when x is a tensor of dtype dst_type
//   Cast(Cast(x){w}){d}                       → Cast(x){d} when x → w is exact (Float16 or
//                                               BFloat16 to Float32 or Float64, Float32 to
//                                               Float64): the amp pass's and autodiff's casts
//                                               that cancel (then x itself when d is x's dtype)
//   Mul(x, 1), Mul(1, x), Add(x, 0), Add(0, x), Sub(x, 0) → x
//                                   when the constant is a tensor or scalar of ones / zeros of
//                                   x's dtype whose shape broadcasts into x's known-rank shape,
//                                   so the result has exactly x's shape and dtype
//   OnesLike(x)                               → a constant one of x's dtype and shape, when x
//                                               has one element and a known shape (the loss's
//                                               gradient seed, which Mul(g, 1) then drops)
//   Transpose(Transpose(x){p}){q}             → Transpose(x){p∘q} (perm r[j] = p[q[j]]), or x
//                                               when p∘q is the identity
//   Transpose(x){identity perm}               → x
//
// Leaves alone:
//   - Depend(x, y) and StopGradient(x): identities on values, but Depend orders side effects
//     and StopGradient blocks gradients; removing either changes meaning.
//   - the arithmetic identities when x's abstract is missing or of unknown rank, when the
//     constant has another dtype (promotion), or when broadcasting would grow x's shape
//     (Mul(x: (3), ones: (2, 3)) is (2, 3), not x). `x + 0 → x` ignores the sign of zero
//     (-0 + 0 is +0), as XLA's and TVM's simplifiers do.
//   - every rule when the replaced node's abstract conflicts with the replacement's (neither
//     accepts the other): the IR disagrees with itself, and verify should say so, not this pass.
//   - If with a predicate that is not a constant node (even one whose abstract knows a value),
//     or whose chosen branch does not take one parameter per arg (invalid IR).
#include <algorithm>
#include <optional>

#include "core/ir/anf.h"
#include "core/ir/error.h"
#include "core/ir/manager.h"
#include "core/passes/low_precision.h"
#include "core/passes/pass.h"

namespace loom::passes {

namespace {

using ir::CNode;
using ir::FuncGraph;
using ir::Node;
using ir::Value;

// A simplification loop that has not converged after this many sweeps has rules that undo
// each other: a bug, reported rather than looping.
constexpr int kMaxSweeps = 100;

const Value* constant_of(const Node* node) {
  return node->is_value() ? &static_cast<const ir::ValueNode*>(node)->value() : nullptr;
}

const CNode* call_of(const Node* node, std::string_view prim) {
  if (!node->is_cnode()) return nullptr;
  const auto* c = static_cast<const CNode*>(node);
  return c->is_call_to(prim) ? c : nullptr;
}

// True when `by` may replace `node` as far as their abstracts tell (see compatible()).
bool same_abstract(const Node* node, const Node* by) {
  return compatible(node->abstract(), by->abstract());
}

// A new cnode of `graph` standing in for `old`: old's name, abstract and debug info.
CNode* successor(FuncGraph& graph, const CNode* old, ir::PrimitivePtr prim,
                 const std::vector<Node*>& args) {
  CNode* c = graph.add_call(std::move(prim), args, old->debug());
  c->set_abstract(old->abstract());
  c->set_name(old->name());
  return c;
}

CNode* successor(FuncGraph& graph, const CNode* old, FuncGraph* callee,
                 const std::vector<Node*>& args) {
  CNode* c = graph.add_call(callee, args, old->debug());
  c->set_abstract(old->abstract());
  c->set_name(old->name());
  return c;
}

// ---- Tuples and control flow ----------------------------------------------------------------

Node* tuple_get_item_of_make_tuple(const CNode* c) {
  if (!c->is_call_to("TupleGetItem") || c->num_args() != 2) return nullptr;
  const CNode* tuple = call_of(c->arg(0), "MakeTuple");
  const Value* index = constant_of(c->arg(1));
  if (!tuple || !index || !index->is_scalar() || !is_integral(index->as_scalar().dtype())) {
    return nullptr;
  }
  const auto n = static_cast<std::int64_t>(tuple->num_args());
  std::int64_t k = index->as_int();
  if (k < 0) k += n;
  if (k < 0 || k >= n) return nullptr;
  Node* element = tuple->arg(static_cast<std::size_t>(k));
  return same_abstract(c, element) ? element : nullptr;
}

// The value of a constant Bool predicate, or nullopt.
std::optional<bool> constant_predicate(const Node* pred) {
  const Value* v = constant_of(pred);
  if (!v) return std::nullopt;
  if (v->is_scalar() && v->as_scalar().dtype() == DType::kBool) return v->as_bool();
  if (v->is_tensor() && v->as_tensor().dtype() == DType::kBool && v->as_tensor().rank() == 0) {
    return v->as_tensor().get(0) != 0;
  }
  return std::nullopt;
}

Node* if_with_constant_predicate(FuncGraph& graph, const CNode* c) {
  if (!c->is_call_to(ir::kIfPrim) || c->num_args() < 3) return nullptr;
  const std::optional<bool> pred = constant_predicate(c->arg(0));
  if (!pred) return nullptr;
  const Value* branch = constant_of(c->arg(*pred ? 1 : 2));
  if (!branch || !branch->is_graph()) return nullptr;
  FuncGraph* chosen = branch->as_graph();
  std::vector<Node*> args(c->inputs().begin() + 4, c->inputs().end());
  if (chosen->parameters().size() != args.size()) return nullptr;
  return successor(graph, c, chosen, args);
}

// ---- Shape and dtype identities -------------------------------------------------------------

Node* reshape_to_same_shape(const CNode* c) {
  if (!c->is_call_to("Reshape") || c->num_args() != 1 || !c->primitive()->has_attr("shape")) {
    return nullptr;
  }
  Node* x = c->arg(0);
  if (!x->abstract() || !x->abstract()->is_tensor() || !x->abstract()->shape_known()) {
    return nullptr;
  }
  const Shape& from = x->abstract()->shape();
  const Value& attr = c->primitive()->attr("shape");
  if (!attr.is_tuple()) return nullptr;
  Shape to = attr.as_ints();
  const auto unknown = std::find(to.begin(), to.end(), ir::kUnknownDim);
  if (unknown != to.end()) {
    // Resolve the one -1 from the element count, as Reshape's inference does.
    std::int64_t known = 1;
    for (auto it = to.begin(); it != to.end(); ++it) known *= it == unknown ? 1 : *it;
    const std::int64_t numel = shape_numel(from);
    if (known == 0 || numel % known != 0) return nullptr;
    *unknown = numel / known;
  }
  return to == from && same_abstract(c, x) ? x : nullptr;
}

Node* reshape_of_reshape(FuncGraph& graph, const CNode* c) {
  if (!c->is_call_to("Reshape") || c->num_args() != 1) return nullptr;
  const CNode* inner = call_of(c->arg(0), "Reshape");
  if (!inner || inner->num_args() != 1) return nullptr;
  const ir::PrimitivePtr& prim =
      static_cast<const ir::ValueNode*>(c->callee())->value().as_primitive();
  return successor(graph, c, prim, {inner->arg(0)});
}

Node* cast_to_same_dtype(const CNode* c) {
  if (!c->is_call_to("Cast") || c->num_args() != 1 || !c->primitive()->has_attr("dst_type")) {
    return nullptr;
  }
  const Value& dst = c->primitive()->attr("dst_type");
  Node* x = c->arg(0);
  if (!dst.is_dtype() || !x->abstract() || !x->abstract()->is_tensor() ||
      x->abstract()->dtype() != dst.as_dtype()) {
    return nullptr;
  }
  return same_abstract(c, x) ? x : nullptr;
}

CNode* cast_of_exact_cast(FuncGraph& graph, const CNode* c) {
  if (!c->is_call_to("Cast") || c->num_args() != 1) return nullptr;
  const CNode* inner = call_of(c->arg(0), "Cast");
  if (!inner || inner->num_args() != 1) return nullptr;
  const Node* x = inner->arg(0);
  if (!x->abstract() || !x->abstract()->is_tensor() || !inner->abstract() ||
      !inner->abstract()->is_tensor() ||
      !widens_exactly(x->abstract()->dtype(), inner->abstract()->dtype())) {
    return nullptr;
  }
  const ir::PrimitivePtr& prim =
      static_cast<const ir::ValueNode*>(c->callee())->value().as_primitive();
  return successor(graph, c, prim, {inner->arg(0)});
}

// ---- Arithmetic identities ------------------------------------------------------------------

// True when `node` is a constant whose every element is `unit`, of x's dtype, and whose shape
// broadcasts into x's shape without growing it. x must have a tensor abstract of known rank.
bool is_unit_for(const Node* node, double unit, const Node* x) {
  const Value* v = constant_of(node);
  const ir::AbstractPtr& xa = x->abstract();
  if (!v || !xa || !xa->is_tensor() || !xa->has_rank()) return false;
  if (v->is_scalar()) {
    return v->as_scalar().dtype() == xa->dtype() && v->as_double() == unit;
  }
  if (!v->is_tensor()) return false;
  const Tensor& t = v->as_tensor();
  const Shape& xs = xa->shape();
  if (!t.defined() || t.dtype() != xa->dtype() || t.rank() > static_cast<std::int64_t>(xs.size())) {
    return false;
  }
  const std::size_t lead = xs.size() - t.shape().size();
  for (std::size_t i = 0; i < t.shape().size(); ++i) {
    // A dim of 1 stretches to any dim of x; another dim must equal x's (known) dim.
    const std::int64_t d = t.shape()[i];
    if (d != 1 && d != xs[lead + i]) return false;
  }
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    if (t.get(i) != unit) return false;
  }
  return true;
}

Node* arithmetic_identity(const CNode* c) {
  if (c->num_args() != 2) return nullptr;
  Node* a = c->arg(0);
  Node* b = c->arg(1);
  Node* x = nullptr;
  if (c->is_call_to("Mul")) {
    x = is_unit_for(b, 1, a) ? a : is_unit_for(a, 1, b) ? b : nullptr;
  } else if (c->is_call_to("Add")) {
    x = is_unit_for(b, 0, a) ? a : is_unit_for(a, 0, b) ? b : nullptr;
  } else if (c->is_call_to("Sub")) {
    x = is_unit_for(b, 0, a) ? a : nullptr;
  }
  return x && same_abstract(c, x) ? x : nullptr;
}

// OnesLike of a single-element tensor of known shape: the constant (one element: no large
// constants enter the graph).
Node* ones_like_of_one_element(FuncGraph& graph, const CNode* c) {
  if (!c->is_call_to("OnesLike") || c->num_args() != 1) return nullptr;
  const ir::AbstractPtr& a = c->arg(0)->abstract();
  if (!a || !a->is_tensor() || !a->shape_known() || shape_numel(a->shape()) != 1) return nullptr;
  Tensor one(a->dtype(), a->shape());
  one.set(0, 1.0);
  ir::ValueNode* v = graph.add_value(Value::tensor(std::move(one)));
  v->set_abstract(ir::Abstract::of_value(v->value()));
  return same_abstract(c, v) ? v : nullptr;
}

// ---- Transposes -----------------------------------------------------------------------------

// The perm of a Transpose call with negative entries normalized, or nullopt when it is not a
// permutation (invalid IR is left for verify and inference to report).
std::optional<std::vector<std::int64_t>> perm_of(const CNode* c) {
  if (c->num_args() != 1 || !c->primitive()->has_attr("perm")) return std::nullopt;
  const Value& attr = c->primitive()->attr("perm");
  if (!attr.is_tuple()) return std::nullopt;
  std::vector<std::int64_t> perm = attr.as_ints();
  const auto rank = static_cast<std::int64_t>(perm.size());
  std::vector<bool> seen(perm.size(), false);
  for (std::int64_t& p : perm) {
    if (p < -rank || p >= rank) return std::nullopt;
    if (p < 0) p += rank;
    if (seen[static_cast<std::size_t>(p)]) return std::nullopt;
    seen[static_cast<std::size_t>(p)] = true;
  }
  return perm;
}

bool is_identity(const std::vector<std::int64_t>& perm) {
  for (std::size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] != static_cast<std::int64_t>(i)) return false;
  }
  return true;
}

Node* transpose_of_transpose(FuncGraph& graph, const CNode* c) {
  if (!c->is_call_to("Transpose")) return nullptr;
  const auto q = perm_of(c);
  if (!q) return nullptr;
  if (is_identity(*q)) {
    Node* x = c->arg(0);
    const ir::AbstractPtr& xa = x->abstract();
    // A perm whose length is not x's rank is invalid; leave it for inference to report.
    if (xa && xa->is_tensor() && xa->has_rank() && xa->shape().size() != q->size()) {
      return nullptr;
    }
    return same_abstract(c, x) ? x : nullptr;
  }
  const CNode* inner = call_of(c->arg(0), "Transpose");
  if (!inner) return nullptr;
  const auto p = perm_of(inner);
  if (!p || p->size() != q->size()) return nullptr;
  // Output axis j of the outer transpose is inner axis q[j], which is x's axis p[q[j]].
  std::vector<std::int64_t> r(q->size());
  for (std::size_t j = 0; j < r.size(); ++j) r[j] = (*p)[static_cast<std::size_t>((*q)[j])];
  Node* x = inner->arg(0);
  if (is_identity(r)) return same_abstract(c, x) ? x : nullptr;
  ir::Primitive::Attrs attrs = c->primitive()->attrs();
  attrs["perm"] = Value::ints(r);
  return successor(graph, c, ir::make_primitive("Transpose", std::move(attrs)), {x});
}

// The replacement of `c`, or null when no rule applies.
Node* simplify_node(FuncGraph& graph, const CNode* c) {
  if (c->primitive() == nullptr) return nullptr;
  if (Node* r = tuple_get_item_of_make_tuple(c)) return r;
  if (Node* r = if_with_constant_predicate(graph, c)) return r;
  if (Node* r = reshape_to_same_shape(c)) return r;
  if (Node* r = reshape_of_reshape(graph, c)) return r;
  if (Node* r = cast_to_same_dtype(c)) return r;
  if (Node* r = cast_of_exact_cast(graph, c)) return r;
  if (Node* r = arithmetic_identity(c)) return r;
  if (Node* r = ones_like_of_one_element(graph, c)) return r;
  if (Node* r = transpose_of_transpose(graph, c)) return r;
  return nullptr;
}

bool run_simplify(ir::Module& module) {
  ir::Manager mgr(module);
  bool changed = false;
  for (int sweep = 1;; ++sweep) {
    bool swept = false;
    for (FuncGraph* graph : module.reachable_graphs()) {
      // Inputs come before their users in topo order, so one sweep usually reaches the fixed
      // point; a node an earlier rewrite left dead is skipped.
      for (CNode* c : graph->topo_order()) {
        if (mgr.users(c).empty() && mgr.output_of(c).empty()) continue;
        if (Node* r = simplify_node(*graph, c)) {
          keep_precise_abstract(*c, *r);
          swept |= mgr.replace(c, r);
        }
      }
    }
    if (!swept) break;
    changed = true;
    if (sweep == kMaxSweeps) {
      throw InternalError("simplify: expected a fixed point within " +
                          std::to_string(kMaxSweeps) + " sweeps, got a change in every sweep");
    }
  }
  return changed;
}

}  // namespace

void register_simplify(PassRegistry& registry) {
  registry.add(PassInfo{
      .name = "simplify",
      .summary = "algebraic rewrites to a fixed point: tuple get of make-tuple, constant If, "
                 "no-op Reshape/Cast, Reshape pairs, casts of exact widening casts, x*1, x+0, "
                 "x-0, OnesLike of one element, transpose pairs",
      .run = run_simplify,
  });
}

}  // namespace loom::passes
