// grad(): reverse-mode autodiff by source transformation (docs/autodiff.md walks an example).
//
// For every graph G reached from f, two graphs are made once (memoized, so recursion ends):
//
//   fwd_G(params...)        → MakeTuple(out, R)      R = MakeTuple(every parameter and cnode
//                                                      value of G, plus the residual tuple of
//                                                      every graph call / If / While of G)
//   bwd_G(residuals, dout)  → MakeTuple(d param_1, ..., d param_n)
//
// bwd_G walks G's cnodes in reverse topological order, accumulating adjoints with Add (tuple
// adjoints element by element), and calls each primitive's bprop rule through a GraphEmitter
// whose forward values are TupleGetItem(residuals, k) nodes, created when a rule first reads
// them. MakeTuple and TupleGetItem are routed here directly (sparse tuple adjoints, so a tuple
// element nobody differentiates costs nothing). Graph calls call bwd_H with the call's residual
// tuple; If becomes an If over the branches' bwd graphs; While becomes a forward loop that also
// carries an iteration counter and a stack of the body's residual tuples, and a backward loop
// that pops them. inline + simplify + dce afterwards remove the tuples and flatten the graphs.
#include "core/autodiff/grad.h"

#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/trace/graph_emitter.h"
#include "core/ir/anf.h"
#include "core/ir/error.h"
#include "ops/op.h"
#include "core/passes/infer.h"

namespace loom::autodiff {
using trace::GraphEmitter;
namespace {

using ir::Abstract;
using ir::AbstractPtr;
using ir::CNode;
using ir::FuncGraph;
using ir::Node;
using ir::Parameter;
using ir::Value;

// A tuple abstract of `elements`, or null when any element is unknown.
AbstractPtr tuple_of(const std::vector<AbstractPtr>& elements) {
  for (const AbstractPtr& a : elements) {
    if (!a) return nullptr;
  }
  return Abstract::tuple(elements);
}

AbstractPtr element_of(const AbstractPtr& tuple, std::size_t i) {
  if (!tuple || !tuple->is_tuple() || i >= tuple->elements().size()) return nullptr;
  return tuple->elements()[i];
}

// Values that carry gradients: floating tensors and floating scalars, and tuples holding any.
bool differentiable(const AbstractPtr& a) {
  if (!a) return false;
  if (a->is_tuple()) {
    for (const AbstractPtr& e : a->elements()) {
      if (differentiable(e)) return true;
    }
    return false;
  }
  if (a->is_tensor() || a->kind() == Abstract::Kind::kScalar) return is_floating(a->dtype());
  return false;
}

CNode* make_call(FuncGraph* g, const char* op, const std::vector<Node*>& args, AbstractPtr abs) {
  CNode* c = g->add_call(ops::make_op(op), args);
  c->set_abstract(std::move(abs));
  return c;
}

CNode* tuple_get(FuncGraph* g, Node* tuple, std::size_t i, AbstractPtr abs) {
  return make_call(g, "TupleGetItem", {tuple, g->add_value(Value::i64(static_cast<std::int64_t>(i)))},
                   std::move(abs));
}

CNode* tuple_node(FuncGraph* g, const std::vector<Node*>& elements) {
  std::vector<AbstractPtr> abs;
  for (Node* n : elements) abs.push_back(n->abstract());
  return make_call(g, "MakeTuple", elements, tuple_of(abs));
}

Node* graph_value(FuncGraph* in, FuncGraph* value) { return in->add_value(Value::graph(value)); }

Node* counter_constant(FuncGraph* g, std::int64_t v) {
  return g->add_value(Value::tensor(Tensor::scalar(DType::kInt64, static_cast<double>(v))));
}

// The output abstract of a graph under construction (null while it has no output yet).
AbstractPtr output_abstract(const FuncGraph* g) {
  return g->output() ? g->output()->abstract() : nullptr;
}

AbstractPtr params_abstract(const FuncGraph* g) {
  std::vector<AbstractPtr> abs;
  for (const Parameter* p : g->parameters()) abs.push_back(p->abstract());
  return tuple_of(abs);
}

[[noreturn]] void unsupported(const FuncGraph* g, const CNode* c, const std::string& what) {
  throw ValueError("grad: expected " + what + " in @" + g->name() + ", got node " +
                   (c->name().empty() ? std::to_string(c->id()) : "%" + c->name()));
}

// An adjoint being accumulated: a node, or for a tuple value, one adjoint per element (a
// "sparse" tuple: elements nobody contributed to are zero). Empty means zero.
struct Adjoint {
  Node* node = nullptr;
  std::vector<Adjoint> elements;

  bool zero() const {
    if (node) return false;
    for (const Adjoint& e : elements) {
      if (!e.zero()) return false;
    }
    return true;
  }
};

struct Pair {
  FuncGraph* fwd = nullptr;
  FuncGraph* bwd = nullptr;
};

// Where fwd_G put each value of G in its residual tuple R.
struct ForwardInfo {
  std::unordered_map<const Node*, std::size_t> slot;      // a parameter or cnode's value
  std::unordered_map<const Node*, std::size_t> residual;  // a call / If / While's residuals
  AbstractPtr residuals_abstract;
};

// The graphs an If's forward and backward call for its two branches. When the branches' residual
// tuples differ in kind (they usually do), each forward branch returns both tuples — its own and
// the other's filled with zeros of the known shapes, as JAX's cond does — so that the If has one
// result kind; each backward branch picks its own.
struct IfBranches {
  FuncGraph* fwd_then = nullptr;
  FuncGraph* fwd_else = nullptr;
  FuncGraph* bwd_then = nullptr;
  FuncGraph* bwd_else = nullptr;
};

class Transformer {
 public:
  Pair get(FuncGraph* g);
  IfBranches if_branches(FuncGraph* then_g, FuncGraph* else_g, const ir::DebugInfo& debug);

 private:
  void build_forward(FuncGraph* g, const Pair& p);
  void build_backward(FuncGraph* g, const Pair& p);
  Node* forward_while(FuncGraph* fg, CNode* c, const std::vector<Node*>& init, Node** residual);

  std::unordered_map<const FuncGraph*, Pair> memo_;
  std::unordered_map<const FuncGraph*, ForwardInfo> info_;
  std::map<std::pair<const FuncGraph*, const FuncGraph*>, IfBranches> if_memo_;
};

namespace {

// Whether zeros of abstract `a` can be built: tensors of known shape, tuples of them.
bool zeros_known(const AbstractPtr& a) {
  if (!a) return false;
  if (a->is_tuple()) {
    for (const AbstractPtr& e : a->elements()) {
      if (!zeros_known(e)) return false;
    }
    return true;
  }
  return a->is_tensor() && a->shape_known();
}

// Zeros of abstract `a` (zeros_known) in g: Fill per tensor, MakeTuple per tuple.
Node* zeros_of(FuncGraph* g, const AbstractPtr& a, const ir::DebugInfo& debug) {
  if (a->is_tuple()) {
    std::vector<Node*> parts;
    for (const AbstractPtr& e : a->elements()) parts.push_back(zeros_of(g, e, debug));
    return tuple_node(g, parts);
  }
  CNode* c = g->add_call(ops::make_op("Fill", {{"dtype", Value::dtype(a->dtype())},
                                                {"shape", Value::ints(a->shape())},
                                                {"value", Value::f64(0.0)}}),
                         {}, debug);
  c->set_abstract(a);
  return c;
}

}  // namespace

IfBranches Transformer::if_branches(FuncGraph* then_g, FuncGraph* else_g,
                                    const ir::DebugInfo& debug) {
  auto key = std::make_pair(static_cast<const FuncGraph*>(then_g),
                            static_cast<const FuncGraph*>(else_g));
  if (auto it = if_memo_.find(key); it != if_memo_.end()) return it->second;
  const Pair pt = get(then_g);
  const Pair pe = get(else_g);
  IfBranches b{pt.fwd, pe.fwd, pt.bwd, pe.bwd};
  const AbstractPtr rt = info_[then_g].residuals_abstract;
  const AbstractPtr re = info_[else_g].residuals_abstract;
  const bool same = rt && re && rt->to_string() == re->to_string();
  if (!same && zeros_known(rt) && zeros_known(re)) {
    ir::Module& m = *then_g->module();
    const AbstractPtr both = Abstract::tuple({rt, re});
    const ir::DebugInfo zeros_debug{.scope = debug.scope.empty() ? std::string()
                                                                 : "Gradients/" + debug.scope,
                                    .file = debug.file,
                                    .line = debug.line,
                                    .role = ir::Role::kBackward,
                                    .forward = debug.scope};
    // fwd: (out, own residuals) -> (out, (then residuals, else residuals)).
    auto forward = [&](const Pair& p, std::size_t own) {
      FuncGraph* w = m.add_graph(p.fwd->name() + "_joined");
      std::vector<Node*> params;
      for (const Parameter* q : p.fwd->parameters()) {
        params.push_back(w->add_parameter(q->name(), q->abstract()));
      }
      CNode* call = w->add_call(p.fwd, params);
      call->set_abstract(output_abstract(p.fwd));
      Node* out = tuple_get(w, call, 0, element_of(call->abstract(), 0));
      Node* mine = tuple_get(w, call, 1, own == 0 ? rt : re);
      Node* other = zeros_of(w, own == 0 ? re : rt, zeros_debug);
      w->set_output(tuple_node(w, {out, tuple_node(w, own == 0 ? std::vector<Node*>{mine, other}
                                                              : std::vector<Node*>{other, mine})}));
      return w;
    };
    // bwd: ((then residuals, else residuals), dout) -> own bwd(own residuals, dout).
    auto backward = [&](const Pair& p, std::size_t own) {
      FuncGraph* w = m.add_graph(p.bwd->name() + "_joined");
      Node* residuals = w->add_parameter("residuals", both);
      Node* dout = w->add_parameter("dout", p.bwd->parameter(1)->abstract());
      CNode* call =
          w->add_call(p.bwd, {tuple_get(w, residuals, own, own == 0 ? rt : re), dout});
      call->set_abstract(output_abstract(p.bwd));
      w->set_output(call);
      return w;
    };
    b = {forward(pt, 0), forward(pe, 1), backward(pt, 0), backward(pe, 1)};
  }
  return if_memo_[key] = b;
}

Pair Transformer::get(FuncGraph* g) {
  if (auto it = memo_.find(g); it != memo_.end()) return it->second;
  ir::Module& m = *g->module();
  Pair p{m.add_graph("fwd_" + g->name()), m.add_graph("bwd_" + g->name())};
  for (const Parameter* param : g->parameters()) p.fwd->add_parameter(param->name(), param->abstract());
  p.bwd->add_parameter("residuals");
  p.bwd->add_parameter("dout", g->output() ? g->output()->abstract() : nullptr);
  memo_[g] = p;
  build_forward(g, p);
  p.bwd->parameter(0)->set_abstract(info_[g].residuals_abstract);
  build_backward(g, p);
  return p;
}

// ---- The forward graph --------------------------------------------------------------------

void Transformer::build_forward(FuncGraph* g, const Pair& p) {
  FuncGraph* fg = p.fwd;
  ForwardInfo& info = info_[g];
  std::unordered_map<const Node*, Node*> map;
  std::vector<Node*> saved;
  auto save = [&](Node* n) {
    saved.push_back(n);
    return saved.size() - 1;
  };
  for (std::size_t i = 0; i < g->parameters().size(); ++i) {
    map[g->parameter(i)] = fg->parameter(i);
    info.slot[g->parameter(i)] = save(fg->parameter(i));
  }
  auto value = [&](Node* n, const CNode* user) -> Node* {
    if (auto it = map.find(n); it != map.end()) return it->second;
    if (!n->is_value()) {
      throw InternalError("grad: expected a node of @" + g->name() + ", got a foreign node");
    }
    const Value& v = static_cast<ir::ValueNode*>(n)->value();
    if (v.is_graph()) {
      unsupported(g, user, "graphs used only as callees, If branches or While bodies");
    }
    return map[n] = fg->add_value(v);
  };

  for (CNode* c : g->topo_order()) {
    std::vector<Node*> args;
    std::size_t first_data = 0;
    const ir::Primitive* prim = c->primitive();
    const bool is_if = prim && prim->name() == ir::kIfPrim;
    const bool is_while = prim && prim->name() == ir::kWhilePrim;
    if (is_if) first_data = 3;
    if (is_while) first_data = 2;
    for (std::size_t i = 0; i < c->num_args(); ++i) {
      if (i == 0 && is_if) args.push_back(value(c->arg(0), c));
      if (i >= first_data) args.push_back(value(c->arg(i), c));
    }
    Node* out = nullptr;
    if (FuncGraph* h = c->called_graph()) {
      Pair ph = get(h);
      CNode* call = fg->add_call(ph.fwd, args);
      call->set_abstract(output_abstract(ph.fwd));
      out = tuple_get(fg, call, 0, c->abstract());
      info.residual[c] = save(tuple_get(fg, call, 1, element_of(call->abstract(), 1)));
    } else if (is_if) {
      auto* t = static_cast<ir::ValueNode*>(c->arg(1));
      auto* e = static_cast<ir::ValueNode*>(c->arg(2));
      if (!t->is_value() || !e->is_value() || !t->value().is_graph() || !e->value().is_graph()) {
        unsupported(g, c, "If with constant graph branches");
      }
      const IfBranches ib = if_branches(t->value().as_graph(), e->value().as_graph(), c->debug());
      std::vector<Node*> inputs{fg->add_value(static_cast<ir::ValueNode*>(c->callee())->value()),
                                args[0], graph_value(fg, ib.fwd_then), graph_value(fg, ib.fwd_else)};
      inputs.insert(inputs.end(), args.begin() + 1, args.end());
      CNode* node = fg->add_cnode(inputs, c->debug());
      out = tuple_get(fg, node, 0, c->abstract());
      info.residual[c] = save(tuple_get(fg, node, 1, nullptr));
    } else if (is_while) {
      Node* residual = nullptr;
      out = forward_while(fg, c, args, &residual);
      info.residual[c] = save(residual);
    } else if (prim) {
      std::vector<Node*> inputs{fg->add_value(static_cast<ir::ValueNode*>(c->callee())->value())};
      inputs.insert(inputs.end(), args.begin(), args.end());
      out = fg->add_cnode(inputs, c->debug());
      out->set_abstract(c->abstract());
    } else {
      unsupported(g, c, "a primitive or graph callee");
    }
    out->set_name(c->name());
    map[c] = out;
    info.slot[c] = save(out);
  }
  Node* result = value(g->output(), nullptr);
  CNode* residuals = tuple_node(fg, saved);
  info.residuals_abstract = residuals->abstract();
  fg->set_output(tuple_node(fg, {result, residuals}));
}

// While(@C, @B, init...) → While(@C', @B', init..., counter = 0, stack = None), where C' tests C
// on the original state and B' runs fwd_B, counts, and pushes fwd_B's residual tuple:
// stack' = MakeTuple(R_i, stack). Returns the original state tuple; *residual gets
// MakeTuple(final counter, final stack).
Node* Transformer::forward_while(FuncGraph* fg, CNode* c, const std::vector<Node*>& init,
                                 Node** residual) {
  FuncGraph* g = c->graph();
  auto* cv = static_cast<ir::ValueNode*>(c->arg(0));
  auto* bv = static_cast<ir::ValueNode*>(c->arg(1));
  if (!cv->is_value() || !bv->is_value() || !cv->value().is_graph() || !bv->value().is_graph()) {
    unsupported(g, c, "While with constant graph cond and body");
  }
  FuncGraph* cond = cv->value().as_graph();
  FuncGraph* body = bv->value().as_graph();
  const std::size_t k = init.size();
  Pair pb = get(body);
  ir::Module& m = *g->module();
  const AbstractPtr counter_abs = Abstract::tensor(DType::kInt64, {});

  auto add_state_params = [&](FuncGraph* h, const FuncGraph* like) {
    std::vector<Node*> s;
    for (std::size_t i = 0; i < k; ++i) {
      s.push_back(h->add_parameter("s" + std::to_string(i), like->parameter(i)->abstract()));
    }
    s.push_back(h->add_parameter("counter", counter_abs));
    s.push_back(h->add_parameter("stack"));
    return s;
  };

  FuncGraph* cond2 = m.add_graph("fwd_" + cond->name());
  std::vector<Node*> cs = add_state_params(cond2, cond);
  CNode* test = cond2->add_call(cond, std::vector<Node*>(cs.begin(), cs.begin() + k));
  test->set_abstract(output_abstract(cond));
  cond2->set_output(test);

  FuncGraph* body2 = m.add_graph("fwd_" + body->name() + "_counted");
  std::vector<Node*> bs = add_state_params(body2, body);
  CNode* r = body2->add_call(pb.fwd, std::vector<Node*>(bs.begin(), bs.begin() + k));
  r->set_abstract(output_abstract(pb.fwd));
  Node* next = tuple_get(body2, r, 0, body->output()->abstract());
  std::vector<Node*> next_state;
  for (std::size_t i = 0; i < k; ++i) {
    next_state.push_back(tuple_get(body2, next, i, element_of(next->abstract(), i)));
  }
  next_state.push_back(make_call(body2, "Add", {bs[k], counter_constant(body2, 1)}, counter_abs));
  next_state.push_back(make_call(body2, "MakeTuple", {tuple_get(body2, r, 1, nullptr), bs[k + 1]},
                                 nullptr));
  body2->set_output(make_call(body2, "MakeTuple", next_state, nullptr));

  std::vector<Node*> inputs{fg->add_value(static_cast<ir::ValueNode*>(c->callee())->value()),
                            graph_value(fg, cond2), graph_value(fg, body2)};
  inputs.insert(inputs.end(), init.begin(), init.end());
  inputs.push_back(counter_constant(fg, 0));
  inputs.push_back(fg->add_value(Value::none()));
  CNode* loop = fg->add_cnode(inputs, c->debug());
  std::vector<Node*> state;
  for (std::size_t i = 0; i < k; ++i) state.push_back(tuple_get(fg, loop, i, element_of(c->abstract(), i)));
  *residual = make_call(fg, "MakeTuple",
                        {tuple_get(fg, loop, k, counter_abs), tuple_get(fg, loop, k + 1, nullptr)},
                        nullptr);
  CNode* out = make_call(fg, "MakeTuple", state, c->abstract());
  return out;
}

// ---- The backward graph -------------------------------------------------------------------

class Backward {
 public:
  Backward(FuncGraph* g, const Pair& p, const ForwardInfo& info, Transformer& transformer)
      : g_(g), bg_(p.bwd), info_(info), e_(p.bwd), transformer_(transformer),
        get_([&transformer](FuncGraph* h) { return transformer.get(h); }) {
    e_.set_where("autodiff");
  }

  void run();

 private:
  Node* forward(Node* n);
  Node* residual(const CNode* c);
  Node* zeros(const AbstractPtr& a, const std::function<Node*()>& value);
  Node* materialize(const Adjoint& adj, const AbstractPtr& a, const std::function<Node*()>& value);
  Adjoint element(const Adjoint& adj, std::size_t i, const AbstractPtr& tuple_abs);
  void accumulate(Adjoint& into, Adjoint add, const AbstractPtr& a);
  void contribute(Node* arg, Node* grad);
  Node* dout_of(CNode* c) {
    return materialize(adj_[c], c->abstract(), [this, c] { return forward(c); });
  }

  FuncGraph* g_;
  FuncGraph* bg_;
  const ForwardInfo& info_;
  GraphEmitter e_;
  Transformer& transformer_;
  std::function<Pair(FuncGraph*)> get_;
  std::unordered_map<const Node*, Adjoint> adj_;
  std::unordered_map<std::size_t, Node*> fetched_;
};

Node* Backward::forward(Node* n) {
  if (n->is_value()) return bg_->add_value(static_cast<ir::ValueNode*>(n)->value());
  auto it = info_.slot.find(n);
  if (it == info_.slot.end()) throw InternalError("grad: expected a saved forward value");
  Node*& f = fetched_[it->second];
  if (!f) f = tuple_get(bg_, bg_->parameter(0), it->second, n->abstract());
  return f;
}

Node* Backward::residual(const CNode* c) {
  std::size_t k = info_.residual.at(c);
  Node*& f = fetched_[k];
  if (!f) f = tuple_get(bg_, bg_->parameter(0), k, element_of(bg_->parameter(0)->abstract(), k));
  return f;
}

// Zeros shaped like a value of abstract `a`: Fill for a tensor of known shape (no forward value
// needed), ZerosLike of the forward value otherwise; tuples element by element.
Node* Backward::zeros(const AbstractPtr& a, const std::function<Node*()>& value) {
  if (!a) return e_.node_of(e_.zeros_like(ops::Var(value())));
  if (a->is_tuple()) {
    std::vector<Node*> parts;
    for (std::size_t i = 0; i < a->elements().size(); ++i) {
      parts.push_back(zeros(a->elements()[i], [&, i] {
        return tuple_get(bg_, value(), i, a->elements()[i]);
      }));
    }
    return tuple_node(bg_, parts);
  }
  if (a->is_tensor()) {
    if (a->shape_known()) {
      return e_.node_of(e_.emit("Fill", {},
                                {{"dtype", Value::dtype(a->dtype())},
                                 {"shape", Value::ints(a->shape())},
                                 {"value", Value::f32(0)}}));
    }
    return e_.node_of(e_.zeros_like(ops::Var(value())));
  }
  if (a->kind() == Abstract::Kind::kScalar) {
    switch (a->dtype()) {
      case DType::kBool: return bg_->add_value(Value::boolean(false));
      case DType::kInt32: return bg_->add_value(Value::i32(0));
      case DType::kInt64: return bg_->add_value(Value::i64(0));
      case DType::kFloat32: return bg_->add_value(Value::f32(0));
      default: return bg_->add_value(Value::f64(0));
    }
  }
  return bg_->add_value(Value::none());
}

Node* Backward::materialize(const Adjoint& adj, const AbstractPtr& a,
                            const std::function<Node*()>& value) {
  if (adj.node) return adj.node;
  if (adj.zero()) return zeros(a, value);
  std::vector<Node*> parts;
  for (std::size_t i = 0; i < adj.elements.size(); ++i) {
    AbstractPtr ai = element_of(a, i);
    parts.push_back(materialize(adj.elements[i], ai, [&, i] {
      return tuple_get(bg_, value(), i, ai);
    }));
  }
  return tuple_node(bg_, parts);
}

Adjoint Backward::element(const Adjoint& adj, std::size_t i, const AbstractPtr& tuple_abs) {
  if (adj.node) return Adjoint{tuple_get(bg_, adj.node, i, element_of(tuple_abs, i)), {}};
  if (i < adj.elements.size()) return adj.elements[i];
  return {};
}

void Backward::accumulate(Adjoint& into, Adjoint add, const AbstractPtr& a) {
  if (add.zero()) return;
  if (into.zero()) {
    into = std::move(add);
    return;
  }
  if (a && a->is_tuple()) {
    const std::size_t n = a->elements().size();
    Adjoint sum;
    sum.elements.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      sum.elements[i] = element(into, i, a);
      accumulate(sum.elements[i], element(add, i, a), a->elements()[i]);
    }
    into = std::move(sum);
    return;
  }
  into.node = e_.node_of(e_.add(ops::Var(into.node), ops::Var(add.node)));
}

void Backward::contribute(Node* arg, Node* grad) {
  if (arg->is_value() || !differentiable(arg->abstract())) return;
  accumulate(adj_[arg], Adjoint{grad, {}}, arg->abstract());
}

void Backward::run() {
  adj_[g_->output()] = Adjoint{bg_->parameter(1), {}};
  std::vector<CNode*> order = g_->topo_order();
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    CNode* c = *it;
    if (adj_[c].zero()) continue;
    // Every node emitted for c's gradient (its bprop, the sums of its inputs' adjoints) is a
    // backward node naming c: scope "Gradients/<c's scope>" as MindSpore names them, c's line.
    const ir::DebugInfo& fd = c->debug();
    e_.set_debug({.scope = fd.scope.empty() ? std::string() : "Gradients/" + fd.scope,
                  .file = fd.file,
                  .line = fd.line,
                  .role = ir::Role::kBackward,
                  .forward = fd.scope});
    const ir::Primitive* prim = c->primitive();
    if (FuncGraph* h = c->called_graph()) {
      Pair ph = get_(h);
      CNode* call = bg_->add_call(ph.bwd, {residual(c), dout_of(c)});
      call->set_abstract(params_abstract(h));
      for (std::size_t i = 0; i < c->num_args(); ++i) {
        contribute(c->arg(i), tuple_get(bg_, call, i, h->parameter(i)->abstract()));
      }
    } else if (prim->name() == ir::kIfPrim) {
      FuncGraph* t = static_cast<ir::ValueNode*>(c->arg(1))->value().as_graph();
      FuncGraph* e = static_cast<ir::ValueNode*>(c->arg(2))->value().as_graph();
      const IfBranches ib = transformer_.if_branches(t, e, c->debug());
      CNode* node = bg_->add_cnode({bg_->add_value(static_cast<ir::ValueNode*>(c->callee())->value()),
                                    forward(c->arg(0)), graph_value(bg_, ib.bwd_then),
                                    graph_value(bg_, ib.bwd_else), residual(c), dout_of(c)},
                                   e_.debug());
      node->set_abstract(params_abstract(t));
      for (std::size_t i = 3; i < c->num_args(); ++i) {
        contribute(c->arg(i), tuple_get(bg_, node, i - 3, t->parameter(i - 3)->abstract()));
      }
    } else if (prim->name() == ir::kWhilePrim) {
      // The backward loop: state (counter, stack, d_0..d_{k-1}); while counter > 0, pop the
      // body's residual tuple and run bwd_B on it.
      FuncGraph* body = static_cast<ir::ValueNode*>(c->arg(1))->value().as_graph();
      Pair pb = get_(body);
      const std::size_t k = c->num_args() - 2;
      const AbstractPtr counter_abs = Abstract::tensor(DType::kInt64, {});
      ir::Module& m = *g_->module();
      auto add_params = [&](FuncGraph* h) {
        std::vector<Node*> s{h->add_parameter("counter", counter_abs), h->add_parameter("stack")};
        for (std::size_t i = 0; i < k; ++i) {
          s.push_back(h->add_parameter("d" + std::to_string(i), body->parameter(i)->abstract()));
        }
        return s;
      };
      FuncGraph* cond = m.add_graph("bwd_" + body->name() + "_cond");
      std::vector<Node*> cs = add_params(cond);
      cond->set_output(make_call(cond, "Greater", {cs[0], counter_constant(cond, 0)},
                                 Abstract::tensor(DType::kBool, {})));
      FuncGraph* loop_body = m.add_graph("bwd_" + body->name() + "_loop");
      std::vector<Node*> bs = add_params(loop_body);
      Node* ri = tuple_get(loop_body, bs[1], 0, nullptr);
      Node* rest = tuple_get(loop_body, bs[1], 1, nullptr);
      CNode* call = loop_body->add_call(
          pb.bwd, {ri, tuple_node(loop_body, std::vector<Node*>(bs.begin() + 2, bs.end()))});
      call->set_abstract(params_abstract(body));
      std::vector<Node*> next{make_call(loop_body, "Sub", {bs[0], counter_constant(loop_body, 1)},
                                        counter_abs),
                              rest};
      for (std::size_t i = 0; i < k; ++i) {
        next.push_back(tuple_get(loop_body, call, i, body->parameter(i)->abstract()));
      }
      loop_body->set_output(make_call(loop_body, "MakeTuple", next, nullptr));

      Node* res = residual(c);
      Node* dout = dout_of(c);
      std::vector<Node*> inputs{bg_->add_value(static_cast<ir::ValueNode*>(c->callee())->value()),
                                graph_value(bg_, cond), graph_value(bg_, loop_body),
                                tuple_get(bg_, res, 0, counter_abs), tuple_get(bg_, res, 1, nullptr)};
      for (std::size_t i = 0; i < k; ++i) {
        inputs.push_back(tuple_get(bg_, dout, i, element_of(c->abstract(), i)));
      }
      CNode* loop = bg_->add_cnode(inputs, e_.debug());
      for (std::size_t i = 0; i < k; ++i) {
        contribute(c->arg(2 + i), tuple_get(bg_, loop, 2 + i, element_of(c->abstract(), i)));
      }
    } else if (prim->name() == "MakeTuple") {
      Adjoint adj = adj_[c];
      for (std::size_t i = 0; i < c->num_args(); ++i) {
        Node* arg = c->arg(i);
        if (arg->is_value() || !differentiable(arg->abstract())) continue;
        accumulate(adj_[arg], element(adj, i, c->abstract()), arg->abstract());
      }
    } else if (prim->name() == "TupleGetItem") {
      Node* t = c->arg(0);
      AbstractPtr ta = t->abstract();
      if (t->is_value() || !ta || !ta->is_tuple()) continue;
      const auto n = static_cast<std::int64_t>(ta->elements().size());
      std::int64_t k = static_cast<ir::ValueNode*>(c->arg(1))->value().as_int();
      if (k < 0) k += n;
      Adjoint add;
      add.elements.resize(static_cast<std::size_t>(n));
      add.elements[static_cast<std::size_t>(k)] = adj_[c];
      accumulate(adj_[t], std::move(add), ta);
    } else {
      const ops::OpDef& def = ops::Registry::global().get(prim->name());
      if (!def.bprop) continue;  // StopGradient, comparisons, indices: zero gradients
      std::vector<ops::Var> inputs;
      for (std::size_t i = 0; i < c->num_args(); ++i) inputs.emplace_back(forward(c->arg(i)));
      Node* dout = dout_of(c);
      ops::BpropArgs args{*prim, inputs, ops::Var(forward(c)), ops::Var(dout)};
      ops::Grads grads = def.bprop(e_, args);
      if (grads.size() != c->num_args()) {
        throw InternalError("grad: expected " + std::to_string(c->num_args()) +
                            " gradients from the bprop of " + prim->name() + ", got " +
                            std::to_string(grads.size()));
      }
      for (std::size_t i = 0; i < grads.size(); ++i) {
        if (grads[i].defined()) contribute(c->arg(i), e_.node_of(grads[i]));
      }
    }
  }
  e_.set_debug({.role = ir::Role::kBackward});
  std::vector<Node*> grads;
  for (Parameter* p : g_->parameters()) {
    grads.push_back(materialize(adj_[p], p->abstract(), [this, p] { return forward(p); }));
  }
  bg_->set_output(tuple_node(bg_, grads));
}

void Transformer::build_backward(FuncGraph* g, const Pair& p) {
  Backward b(g, p, info_.at(g), *this);
  b.run();
}

// Every node of every graph reachable from f carries an abstract.
bool inferred(FuncGraph* f) {
  for (FuncGraph* g : f->module()->reachable_graphs(f)) {
    for (Parameter* p : g->parameters()) {
      if (!p->abstract()) return false;
    }
    for (CNode* c : g->topo_order()) {
      if (!c->abstract()) return false;
    }
  }
  return true;
}

}  // namespace

ir::FuncGraph* grad(ir::FuncGraph* f, const GradOptions& options) {
  if (!f) throw ValueError("grad: expected a graph, got null");
  if (!inferred(f)) passes::infer_graph(f);
  const AbstractPtr out_abs = f->output()->abstract();
  if (!options.sens_param && (!out_abs || !out_abs->is_tensor())) {
    throw ValueError("grad: expected a tensor output of @" + f->name() +
                     " (or sens_param), got " + (out_abs ? out_abs->to_string() : "none"));
  }
  // Which parameters are weights and which are inputs.
  std::vector<std::size_t> inputs, weights;
  const bool by_list = options.get_by_list || !options.weights.empty();
  for (std::size_t i = 0; i < f->parameters().size(); ++i) {
    Parameter* p = f->parameter(i);
    if (!p->has_default()) inputs.push_back(i);
  }
  if (!options.weights.empty()) {
    for (Parameter* w : options.weights) {
      std::size_t i = 0;
      while (i < f->parameters().size() && f->parameter(i) != w) ++i;
      if (i == f->parameters().size()) {
        throw ValueError("grad: expected weights that are parameters of @" + f->name() +
                         ", got %" + (w ? w->name() : std::string("null")));
      }
      weights.push_back(i);
    }
  } else if (by_list) {
    for (std::size_t i = 0; i < f->parameters().size(); ++i) {
      if (f->parameter(i)->has_default()) weights.push_back(i);
    }
  }
  if (!options.get_all && !by_list && inputs.empty()) {
    throw ValueError("grad: expected an input parameter of @" + f->name() + ", got only weights");
  }

  Transformer t;
  Pair pf = t.get(f);
  FuncGraph* g = f->module()->add_graph("grad_" + f->name());
  std::vector<Node*> params;
  for (Parameter* p : f->parameters()) {
    Parameter* q = g->add_parameter(p->name(), p->abstract());
    if (p->has_default()) q->set_default(*p->default_value());
    params.push_back(q);
  }
  GraphEmitter e(g);
  e.set_where("autodiff");
  e.set_debug({.role = ir::Role::kBackward});
  CNode* call = g->add_call(pf.fwd, params);
  call->set_abstract(output_abstract(pf.fwd));
  Node* out = tuple_get(g, call, 0, out_abs);
  Node* residuals = tuple_get(g, call, 1, element_of(call->abstract(), 1));
  Node* sens = options.sens_param ? g->add_parameter("sens", out_abs)
                                  : e.node_of(e.emit("OnesLike", {ops::Var(out)}));
  CNode* all = g->add_call(pf.bwd, {residuals, sens});
  all->set_abstract(params_abstract(f));
  auto pick = [&](const std::vector<std::size_t>& which) {
    std::vector<Node*> parts;
    for (std::size_t i : which) parts.push_back(tuple_get(g, all, i, f->parameter(i)->abstract()));
    return tuple_node(g, parts);
  };
  Node* result = nullptr;
  if (options.get_all && by_list) {
    result = tuple_node(g, {pick(inputs), pick(weights)});
  } else if (options.get_all) {
    result = pick(inputs);
  } else if (by_list) {
    result = pick(weights);
  } else {
    result = tuple_get(g, all, inputs[0], f->parameter(inputs[0])->abstract());
  }
  if (options.return_value) result = tuple_node(g, {out, result});
  g->set_output(result);
  return g;
}

}  // namespace loom::autodiff
