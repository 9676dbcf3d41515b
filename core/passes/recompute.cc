// recompute: computes the activation after a training BatchNorm again in the backward pass
// instead of keeping it from the forward pass (MindSpore's recompute, PyTorch's activation
// checkpointing, for the one case where it costs almost nothing).
//
// In a convolution → BatchNorm → ReLU chain, the backward pass reads ReLU's output z twice: the
// next convolution's filter gradient takes it as its input, and ReluGrad as its mask. Both come
// late, so every z of the network is kept through the forward pass and the start of the
// backward pass, where the memory peaks. The BatchNorm's gradient keeps its input x and its
// saved mean and inverse std anyway, and z = act((x - mean) · scale · inv_std + bias) from
// exactly those (ops/norm_loss_ops.cc: BatchNorm computes y from its saved statistics, so the
// result is bitwise the forward one). The pass rewrites, after autodiff,
//
//   %bn = BatchNorm(%x, %scale, %bias, %mean, %var) {is_training: true}
//   %z  = ReLU(TupleGetItem(%bn, 0))                 used in the forward and backward passes
// to, for the uses by backward nodes (DebugInfo::role),
//   %zr = BatchNormApply(Depend(%x, %d), %scale, %bias, TupleGetItem(%bn, 3),
//                        TupleGetItem(%bn, 4)) {act: "relu"}
// where %d is a backward input of the first backward user of %z (the gradient it works on, such
// as the filter gradient's dout): the Depend keeps the runtime's scheduler from computing %zr
// before the backward pass reaches it (runtime/executable.cc turns it into an ordering edge).
// The forward %z then dies at its last forward use. ReLU6 likewise (act "relu6").
//
// Mixed precision (core/passes/amp.h) puts casts in that chain. At O1, O2 and auto a BatchNorm
// reads %xw = Cast(%h){Float32} of a low-precision %h, and at O1 and O2 its y is narrowed before
// the ReLU: %z = ReLU(Cast(TupleGetItem(%bn, 0)){BFloat16}). The pass then recomputes
//   - %xw for its backward users (BatchNormGrad) as Cast(Depend(%h, %d)){Float32}: the widening
//     is exact, and %h is half the size of the Float32 copy that otherwise stays alive;
//   - %z as Cast(BatchNormApply(Cast(Depend(%h, %d)){Float32}, ...){act}){BFloat16}: ReLU and
//     rounding to the low dtype commute (rounding is monotone and keeps zero).
// At auto the ReLU computes in Float32 and its result is narrowed for the next convolution:
// %zn = Cast(ReLU(TupleGetItem(%bn, 0))){BFloat16}. The ReLU's backward users (ReluGrad) get the
// Float32 recomputation above, and %zn's (the next filter gradient) get
// Cast(BatchNormApply(...){act}){BFloat16}, the same computation as %zn's, so neither the
// Float32 activation nor its 16-bit copy is kept.
//
// Leaves alone: a BatchNorm in inference mode (its y is not computed from saved statistics); an
// activation without forward users (nothing to free) or without backward users (nothing to
// recompute), or that is a graph's output; uses in other graphs; a first backward user with no
// backward input to order after; dtypes without kernels (only Float32 and Float64 have them).
#include <unordered_map>

#include "core/ir/anf.h"
#include "core/ir/error.h"
#include "core/ir/manager.h"
#include "core/passes/low_precision.h"
#include "core/passes/pass.h"
#include "ops/op.h"

namespace loom::passes {

namespace {

using ir::CNode;
using ir::FuncGraph;
using ir::Node;
using ir::Value;

// The BatchNorm{is_training: true} call whose y (output 0) `act_input` takes, or null.
CNode* training_batch_norm_of(const Node* act_input) {
  if (!act_input->is_cnode()) return nullptr;
  const auto* get = static_cast<const CNode*>(act_input);
  if (!get->is_call_to("TupleGetItem") || get->num_args() != 2 || !get->arg(0)->is_cnode() ||
      !get->arg(1)->is_value()) {
    return nullptr;
  }
  const Value& index = static_cast<const ir::ValueNode*>(get->arg(1))->value();
  if (!index.is_scalar() || index.as_int() != 0) return nullptr;
  auto* bn = static_cast<CNode*>(get->arg(0));
  if (!bn->is_call_to("BatchNorm") || bn->num_args() != 5) return nullptr;
  const ir::Primitive* prim = bn->primitive();
  if (!prim->has_attr("is_training") || !prim->attr("is_training").as_bool()) return nullptr;
  const auto& a = bn->abstract();
  if (!a || !a->is_tuple() || a->elements().size() != 5) return nullptr;
  const auto& y = a->elements()[0];
  if (!y->is_tensor() || (y->dtype() != DType::kFloat32 && y->dtype() != DType::kFloat64)) {
    return nullptr;
  }
  return bn;
}

bool is_backward(const Node* n) {
  return n->is_cnode() && static_cast<const CNode*>(n)->debug().role == ir::Role::kBackward;
}

// `n` when it is an exact widening Cast of a Float16 / BFloat16 value (amp's Cast to Float32 before
// BatchNorm), else null.
const CNode* widening_of_half(const Node* n) {
  if (!n->is_cnode()) return nullptr;
  const auto* c = static_cast<const CNode*>(n);
  if (!c->is_call_to("Cast") || c->num_args() != 1 || !c->abstract() ||
      !c->abstract()->is_tensor() || !c->arg(0)->abstract() || !c->arg(0)->abstract()->is_tensor()) {
    return nullptr;
  }
  const DType from = c->arg(0)->abstract()->dtype();
  return is_half_float(from) && widens_exactly(from, c->abstract()->dtype()) ? c : nullptr;
}

// The widening `w` made again from its half-precision input, ordered after `anchor`.
CNode* widen_again(FuncGraph& graph, const CNode* w, const Node* anchor,
                   const ir::DebugInfo& debug) {
  CNode* ordered = graph.add_call(ops::make_op("Depend"), {w->arg(0), const_cast<Node*>(anchor)},
                                  debug);
  ordered->set_abstract(w->arg(0)->abstract());
  CNode* again = graph.add_call(ops::make_op("Cast", w->primitive()->attrs()), {ordered}, debug);
  again->set_abstract(w->abstract());
  return again;
}

// Splits the uses of `n` into backward and forward ones; with both, finds the first backward user
// (all in `graph`) and a backward input of it to order a recomputation after. Null when there is
// nothing to do.
const Node* backward_anchor(ir::Manager& mgr, const FuncGraph& graph, const Node* n,
                            const std::unordered_map<const CNode*, std::size_t>& position,
                            std::vector<ir::Use>& backward) {
  std::vector<ir::Use> forward;
  for (const ir::Use& u : mgr.users(n)) {
    (u.user->debug().role == ir::Role::kBackward ? backward : forward).push_back(u);
  }
  if (backward.empty() || forward.empty()) return nullptr;
  const CNode* first = nullptr;
  for (const ir::Use& u : backward) {
    if (u.user->graph() != &graph || !position.contains(u.user)) return nullptr;
    if (first == nullptr || position.at(u.user) < position.at(first)) first = u.user;
  }
  for (std::size_t i = 0; i < first->num_args(); ++i) {
    if (first->arg(i) != n && is_backward(first->arg(i))) return first->arg(i);
  }
  return nullptr;
}

ir::DebugInfo backward_debug(const CNode* of) {
  ir::DebugInfo debug = of->debug();
  debug.role = ir::Role::kBackward;
  debug.forward = of->debug().scope;
  return debug;
}

bool recompute_graph(ir::Manager& mgr, FuncGraph& graph) {
  const std::vector<CNode*> order = graph.topo_order();
  std::unordered_map<const CNode*, std::size_t> position;
  for (std::size_t i = 0; i < order.size(); ++i) position[order[i]] = i;
  bool changed = false;
  for (CNode* act : order) {
    if (act->debug().role == ir::Role::kBackward || !mgr.output_of(act).empty()) continue;
    // A mixed-precision graph's exact widening Cast(x){Float32} of a Float16 / BFloat16 x kept
    // for the backward pass (BatchNorm's input at amp O2): the backward users get a widening of
    // their own, so the Float32 copy dies after its forward users and x (half its size) is kept.
    if (const CNode* widening = widening_of_half(act)) {
      std::vector<ir::Use> backward;
      const Node* anchor = backward_anchor(mgr, graph, act, position, backward);
      if (anchor == nullptr) continue;
      CNode* again = widen_again(graph, widening, anchor, backward_debug(act));
      if (!act->name().empty()) again->set_name(act->name() + "_recompute");
      for (const ir::Use& u : backward) mgr.set_input(u.user, u.index, again);
      changed = true;
      continue;
    }
    // `act` is the value whose backward uses are recomputed: the activation, or (amp auto) the
    // activation's narrowing Cast; `relu` the activation.
    const CNode* relu = act;
    const CNode* narrow = nullptr;
    if (act->is_call_to("Cast") && act->num_args() == 1 && act->abstract() &&
        act->abstract()->is_tensor() && is_half_float(act->abstract()->dtype()) &&
        act->arg(0)->is_cnode() && act->arg(0)->abstract() && act->arg(0)->abstract()->is_tensor() &&
        widens_exactly(act->abstract()->dtype(), act->arg(0)->abstract()->dtype())) {
      relu = static_cast<const CNode*>(act->arg(0));
      narrow = act;
    }
    std::string act_name;
    if (relu->is_call_to("ReLU")) act_name = "relu";
    if (relu->is_call_to("ReLU6")) act_name = "relu6";
    if (act_name.empty() || relu->num_args() != 1) continue;
    // The activation of the BatchNorm's y, or (amp O2) of y cast to Float16 / BFloat16.
    CNode* bn = training_batch_norm_of(relu->arg(0));
    if (bn == nullptr && narrow == nullptr && act->arg(0)->is_cnode()) {
      const auto* c = static_cast<const CNode*>(act->arg(0));
      if (c->is_call_to("Cast") && c->num_args() == 1 && c->abstract() &&
          c->abstract()->is_tensor() && is_half_float(c->abstract()->dtype())) {
        bn = training_batch_norm_of(c->arg(0));
        narrow = c;
      }
    }
    if (bn == nullptr) continue;
    std::vector<ir::Use> backward;
    const Node* anchor = backward_anchor(mgr, graph, act, position, backward);
    if (anchor == nullptr) continue;

    const ir::DebugInfo debug = backward_debug(act);
    auto element = [&](std::int64_t i) {
      CNode* get = graph.add_call(ops::make_op("TupleGetItem"), {bn, graph.add_value(Value::i64(i))},
                                  bn->debug());
      get->set_abstract(bn->abstract()->elements()[static_cast<std::size_t>(i)]);
      return get;
    };
    // The BatchNorm's input, ordered after the anchor; when it is a widening of a half-precision
    // value (amp O2), widened again from that value, so the forward Float32 copy is not kept for
    // this either.
    Node* input = nullptr;
    if (const CNode* widening = widening_of_half(bn->arg(0))) {
      input = widen_again(graph, widening, anchor, debug);
    } else {
      CNode* ordered =
          graph.add_call(ops::make_op("Depend"), {bn->arg(0), const_cast<Node*>(anchor)}, debug);
      ordered->set_abstract(bn->arg(0)->abstract());
      input = ordered;
    }
    CNode* again = graph.add_call(ops::make_op("BatchNormApply", {{"act", Value::string(act_name)}}),
                                  {input, bn->arg(1), bn->arg(2), element(3), element(4)}, debug);
    // ReLU commutes with rounding to the low dtype (monotone, zero kept): the narrowed
    // recomputation is the activation's value.
    CNode* result = again;
    if (narrow != nullptr) {
      again->set_abstract(bn->abstract()->elements()[0]);
      result = graph.add_call(ops::make_op("Cast", narrow->primitive()->attrs()), {again}, debug);
    }
    result->set_abstract(act->abstract());
    if (!act->name().empty()) result->set_name(act->name() + "_recompute");
    for (const ir::Use& u : backward) mgr.set_input(u.user, u.index, result);
    changed = true;
  }
  return changed;
}

}  // namespace

void register_recompute(PassRegistry& registry) {
  registry.add(PassInfo{
      .name = "recompute",
      .summary = "the ReLU after a training BatchNorm computed again in the backward pass "
                 "(BatchNormApply) instead of kept from the forward pass (after autodiff)",
      .run = [](ir::Module& m) { return rewrite_graphs(m, recompute_graph); },
  });
}

}  // namespace loom::passes
