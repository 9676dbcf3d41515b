// infer: gives every node an abstract, specializing graphs per argument signature.
//
// Two phases, as MindSpore's AnalysisEngine and Specializer do it:
//
// 1. Analysis, which changes no graph. A *context* is a graph analyzed for one signature (the
//    abstracts of its parameters); it holds an abstract per cnode and the contexts each of its
//    calls, If branches and While bodies run. A call of @f with argument abstracts S runs the
//    context (f, S), made once and shared by every call with that signature. Primitives go
//    through ops::infer (attributes completed with their defaults first). If runs both branches
//    with its args and joins their outputs; While runs cond and body with the loop state (the
//    inits), joins the body's output into the state and repeats until the state is stable.
//    A call that reaches a context still being analyzed (recursion) reads that context's output
//    from the previous round, or "no value yet" (null) in the first round; null flows through
//    primitives and tuples, and If's join ignores it, so a base case in one branch gives the
//    recursion its first value. Rounds repeat until no abstract changes. A recursive call whose
//    signature differs from the one being analyzed (a counter, a shrinking shape) is widened by
//    joining it with that signature, so that recursion meets a signature it has seen.
// 2. Specialization. The contexts reachable from the root are written back into the module:
//    per graph, the first context whose signature fits the graph's current parameter abstracts
//    (or, when the whole module is inferred, simply the first) keeps the graph in place; every
//    other context gets a deep copy of the graph (`@f_spec1`, `@f_spec2`, ...). Every node then
//    takes its context's abstract and every call, If branch and While body is redirected
//    (Manager::set_input) to the graph of the context it ran. Contexts that analysis abandoned
//    (a While body analyzed for a state later widened, a signature of an earlier round) are
//    simply not written back, so they leave no graphs behind.
//
// The join of two abstracts keeps what both agree on: differing dims become -1, differing
// ranks an unknown rank, differing scalar values no value; kinds and dtypes must agree.
#include "core/passes/infer.h"

#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "core/ir/anf.h"
#include "core/ir/error.h"
#include "core/ir/manager.h"
#include "core/passes/pass.h"
#include "ops/op.h"

namespace loom::passes {

namespace {

using ir::Abstract;
using ir::AbstractPtr;
using ir::CNode;
using ir::FuncGraph;
using ir::Node;

// Rounds of the whole analysis; only recursion needs more than one, and each round can only
// widen an output, so a recursion that still changes after this many is a bug here.
constexpr int kMaxRounds = 32;
// Widenings of one While's loop state; the join only loses facts, so it stabilizes sooner.
constexpr int kMaxLoopWidenings = 32;
// Contexts nested in one another at most (a guard against recursion whose arguments change
// kind at every level, which widening cannot catch, and against exhausting the C++ stack).
constexpr std::size_t kMaxDepth = 256;

bool same(const AbstractPtr& a, const AbstractPtr& b) {
  if (!a || !b) return a == b;
  return a == b || a->equals(*b);
}

std::string text(const AbstractPtr& a) { return a ? a->to_string() : "no value"; }

// The least abstract that accepts both, with null (no value yet) as the identity; nullopt when
// the kinds or dtypes differ.
std::optional<AbstractPtr> join(const AbstractPtr& a, const AbstractPtr& b) {
  if (!a) return b;
  if (!b || a->equals(*b)) return a;
  if (a->kind() != b->kind()) return std::nullopt;
  switch (a->kind()) {
    case Abstract::Kind::kTensor: {
      if (a->dtype() != b->dtype()) return std::nullopt;
      if (!a->has_rank() || !b->has_rank() || a->shape().size() != b->shape().size()) {
        return Abstract::tensor_unranked(a->dtype());
      }
      Shape dims = a->shape();
      for (std::size_t i = 0; i < dims.size(); ++i) {
        if (dims[i] != b->shape()[i]) dims[i] = ir::kUnknownDim;
      }
      return Abstract::tensor(a->dtype(), std::move(dims));
    }
    case Abstract::Kind::kScalar:
      if (a->dtype() != b->dtype()) return std::nullopt;
      return Abstract::scalar(a->dtype());  // not equal, so the values differ
    case Abstract::Kind::kString: return Abstract::string();
    case Abstract::Kind::kTuple: {
      if (a->elements().size() != b->elements().size()) return std::nullopt;
      std::vector<AbstractPtr> elements;
      for (std::size_t i = 0; i < a->elements().size(); ++i) {
        std::optional<AbstractPtr> e = join(a->elements()[i], b->elements()[i]);
        if (!e) return std::nullopt;
        elements.push_back(*e);
      }
      return Abstract::tuple(std::move(elements));
    }
    case Abstract::Kind::kType:
    case Abstract::Kind::kFunc:
    case Abstract::Kind::kNone: return a;
  }
  return std::nullopt;
}

bool is_bool_predicate(const Abstract& p) {
  if (p.dtype() != DType::kBool) return false;
  if (p.kind() == Abstract::Kind::kScalar) return true;
  return p.is_tensor() && p.has_rank() && p.shape().empty();
}

// The graph held by input `i` of `c`, or null when that input is not a graph constant.
FuncGraph* graph_at(const CNode& c, std::size_t i) {
  if (i >= c.size() || !c.input(i)->is_value()) return nullptr;
  const ir::Value& v = static_cast<const ir::ValueNode*>(c.input(i))->value();
  return v.is_graph() ? v.as_graph() : nullptr;
}

// "%mm", or for an unnamed cnode what it applies ("MatMul", "the call of @f").
std::string label(const CNode& c) {
  if (!c.name().empty()) return "%" + c.name();
  if (const ir::Primitive* p = c.primitive()) return p->name();
  if (const FuncGraph* g = c.called_graph()) return "the call of @" + g->name();
  return "a cnode";
}

// What an error about `c` gets appended: the Cell path (unless the message has it already, as
// ops' own messages do), the node and its graph, and the source line where known.
std::string context_of(const CNode& c, const std::string& message) {
  const ir::DebugInfo& d = c.debug();
  std::string s;
  if (!d.scope.empty() && message.find("(in " + d.scope + ")") == std::string::npos) {
    s += " (in " + d.scope + ")";
  }
  s += " at " + label(c) + " in @" + c.graph()->name();
  if (!d.file.empty()) s += ", " + d.file + ":" + std::to_string(d.line);
  return s;
}

[[noreturn]] void fail(const CNode& c, const Error& e) {
  rethrow_with_context(e, context_of(c, e.what()));
}

std::string signature_key(const std::vector<AbstractPtr>& signature) {
  std::string key;
  for (const AbstractPtr& a : signature) key += a->to_string() + ";";
  return key;
}

// One graph analyzed for one signature.
struct Context {
  FuncGraph* graph = nullptr;
  std::vector<AbstractPtr> signature;  // one per parameter, never null
  std::vector<CNode*> order;           // graph->topo_order(); analysis does not change graphs
  std::unordered_map<const Node*, AbstractPtr> values;  // parameters and cnodes
  // The contexts each call (input 0), If (inputs 2, 3) and While (inputs 1, 2) ran last, by
  // the input index that holds the graph.
  std::unordered_map<const CNode*, std::vector<std::pair<std::size_t, Context*>>> callees;
  AbstractPtr output;  // null until a round finished analyzing it
  int round = 0;       // the last round that analyzed it
  bool in_progress = false;
};

class Analyzer {
 public:
  // Analyzes `root` for `signature` to a fixed point; returns the root context.
  Context* solve(FuncGraph* root, std::vector<AbstractPtr> signature) {
    Context* ctx = context_for(root, std::move(signature));
    for (round_ = 1;; ++round_) {
      recursed_ = false;
      changed_ = false;
      analyze(*ctx);
      if (!recursed_ || !changed_) break;
      if (round_ == kMaxRounds) {
        throw InternalError("infer: expected the inference of @" + root->name() +
                            " to reach a fixed point within " + std::to_string(kMaxRounds) +
                            " rounds, got a change in every round");
      }
    }
    return ctx;
  }

 private:
  Context* context_for(FuncGraph* graph, std::vector<AbstractPtr> signature) {
    auto it = contexts_.find({graph, signature_key(signature)});
    if (it != contexts_.end()) return it->second.get();
    // A recursive call with a new signature: widen it against the one the graph is being
    // analyzed with (the innermost), so that a recursion whose arguments change every level
    // meets a signature it has seen after finitely many widenings.
    for (auto s = stack_.rbegin(); s != stack_.rend(); ++s) {
      if ((*s)->graph != graph) continue;
      std::vector<AbstractPtr> widened;
      for (std::size_t i = 0; i < signature.size(); ++i) {
        std::optional<AbstractPtr> j = join((*s)->signature[i], signature[i]);
        if (!j) break;
        widened.push_back(*j);
      }
      if (widened.size() == signature.size()) signature = std::move(widened);
      it = contexts_.find({graph, signature_key(signature)});
      if (it != contexts_.end()) return it->second.get();
      break;
    }
    auto ctx = std::make_unique<Context>();
    ctx->graph = graph;
    ctx->signature = std::move(signature);
    ctx->order = graph->topo_order();
    Context* raw = ctx.get();
    contexts_.emplace(std::make_pair(graph, signature_key(raw->signature)), std::move(ctx));
    return raw;
  }

  // The context's output: analyzed now, or what it had when it is being analyzed already
  // (recursion) or was analyzed earlier in this round.
  AbstractPtr run(Context& ctx) {
    if (ctx.in_progress) {
      recursed_ = true;
      return ctx.output;
    }
    if (ctx.round != round_) analyze(ctx);
    return ctx.output;
  }

  void analyze(Context& ctx) {
    FuncGraph& g = *ctx.graph;
    if (stack_.size() >= kMaxDepth) {
      // Name the graph that recurs most: the one whose calls keep changing their arguments.
      std::unordered_map<const FuncGraph*, int> count;
      const FuncGraph* deepest = &g;
      for (const Context* s : stack_) {
        if (++count[s->graph] > count[deepest]) deepest = s->graph;
      }
      throw ValueError("infer: expected calls nested at most " + std::to_string(kMaxDepth) +
                       " deep, got deeper through @" + deepest->name() +
                       " (a recursion whose arguments change kind at every level?)");
    }
    ctx.in_progress = true;
    ctx.round = round_;
    stack_.push_back(&ctx);
    for (std::size_t i = 0; i < g.parameters().size(); ++i) {
      ctx.values[g.parameter(i)] = ctx.signature[i];
    }
    for (CNode* c : ctx.order) {
      AbstractPtr a = infer_cnode(ctx, *c);
      AbstractPtr& slot = ctx.values[c];
      if (!same(slot, a)) changed_ = true;
      slot = std::move(a);
    }
    if (g.output() == nullptr) {
      throw InternalError("infer: expected @" + g.name() + " to have an output, got none");
    }
    AbstractPtr out = value_of(ctx, *g.output());
    if (!same(out, ctx.output)) changed_ = true;
    ctx.output = std::move(out);
    stack_.pop_back();
    ctx.in_progress = false;
  }

  AbstractPtr value_of(const Context& ctx, const Node& node) const {
    if (node.is_value()) {
      return Abstract::of_value(static_cast<const ir::ValueNode&>(node).value());
    }
    auto it = ctx.values.find(&node);
    if (it == ctx.values.end()) {
      throw InternalError("infer: expected every input in @" + ctx.graph->name() +
                          " to be defined in it, got %" + node.name());
    }
    return it->second;
  }

  AbstractPtr infer_cnode(Context& ctx, const CNode& c) {
    if (c.size() == 0) {
      throw InternalError("infer: expected a callee for every cnode of @" + ctx.graph->name() +
                          ", got none");
    }
    std::vector<AbstractPtr> args;
    bool waiting = false;  // some argument has no value yet (recursion in progress)
    for (std::size_t i = 1; i < c.size(); ++i) {
      args.push_back(value_of(ctx, *c.input(i)));
      waiting |= args.back() == nullptr;
    }
    if (waiting) {
      ctx.callees.erase(&c);
      return nullptr;
    }
    if (FuncGraph* callee = c.called_graph()) return infer_call(ctx, c, *callee, std::move(args));
    const ir::Primitive* prim = c.primitive();
    if (prim == nullptr) {
      throw InternalError("infer: expected a Primitive or FuncGraph callee for " + label(c) +
                          " in @" + ctx.graph->name() + ", got another node");
    }
    AbstractPtr out = infer_primitive(c, *prim, args);
    if (prim->name() == ir::kIfPrim) return infer_if(ctx, c, args);
    if (prim->name() == ir::kWhilePrim) return infer_while(ctx, c, args);
    return out;
  }

  // ops::infer with the op's attribute defaults filled in (parsed and hand-built primitives
  // may leave them out); errors get the node's context.
  AbstractPtr infer_primitive(const CNode& c, const ir::Primitive& prim,
                              const std::vector<AbstractPtr>& args) {
    try {
      auto it = complete_.find(&prim);
      if (it == complete_.end()) {
        it = complete_.emplace(&prim, ops::make_op(prim.name(), prim.attrs())).first;
      }
      return ops::infer(*it->second, args, c.debug().scope);
    } catch (const Error& e) {
      fail(c, e);
    }
  }

  // Checks that `callee` takes one parameter per argument (verify's invariant 8).
  static void check_arity(const CNode& c, const FuncGraph& callee, std::size_t num_args,
                          const std::string& what) {
    if (callee.parameters().size() == num_args) return;
    fail(c, ValueError("infer: expected " + what + " @" + callee.name() + " to take " +
                       std::to_string(num_args) + " parameters (one per argument), got " +
                       std::to_string(callee.parameters().size())));
  }

  AbstractPtr infer_call(Context& ctx, const CNode& c, FuncGraph& callee,
                         std::vector<AbstractPtr> args) {
    check_arity(c, callee, args.size(), "the callee");
    Context* target = context_for(&callee, std::move(args));
    AbstractPtr out = run(*target);
    ctx.callees[&c] = {{0, target}};
    return out;
  }

  AbstractPtr infer_if(Context& ctx, const CNode& c, const std::vector<AbstractPtr>& args) {
    // ops::infer checked the arity (pred, then, else) and the predicate.
    FuncGraph* then_g = graph_at(c, 2);
    FuncGraph* else_g = graph_at(c, 3);
    if (!then_g || !else_g) {
      fail(c, InternalError("If: expected graph constants at inputs 2 and 3, got other nodes"));
    }
    const std::vector<AbstractPtr> branch_args(args.begin() + 3, args.end());
    check_arity(c, *then_g, branch_args.size(), "If branch");
    check_arity(c, *else_g, branch_args.size(), "If branch");
    Context* then_ctx = context_for(then_g, branch_args);
    Context* else_ctx = context_for(else_g, branch_args);
    AbstractPtr a = run(*then_ctx);
    AbstractPtr b = run(*else_ctx);
    ctx.callees[&c] = {{2, then_ctx}, {3, else_ctx}};
    std::optional<AbstractPtr> out = join(a, b);
    if (!out) {
      fail(c, TypeError("If: expected both branches to return the same kind, got " + text(a) +
                        " and " + text(b)));
    }
    return *out;
  }

  AbstractPtr infer_while(Context& ctx, const CNode& c, const std::vector<AbstractPtr>& args) {
    FuncGraph* cond_g = graph_at(c, 1);
    FuncGraph* body_g = graph_at(c, 2);
    if (!cond_g || !body_g) {
      fail(c, InternalError("While: expected graph constants at inputs 1 and 2, got other nodes"));
    }
    std::vector<AbstractPtr> state(args.begin() + 2, args.end());
    const std::size_t k = state.size();
    check_arity(c, *cond_g, k, "While condition");
    check_arity(c, *body_g, k, "While body");
    for (int widenings = 0;; ++widenings) {
      Context* cond_ctx = context_for(cond_g, state);
      Context* body_ctx = context_for(body_g, state);
      AbstractPtr pred = run(*cond_ctx);
      AbstractPtr next = run(*body_ctx);
      ctx.callees[&c] = {{1, cond_ctx}, {2, body_ctx}};
      if (pred && !is_bool_predicate(*pred)) {
        fail(c, TypeError("While: expected @" + cond_g->name() +
                          " to return a Bool scalar predicate, got " + pred->to_string()));
      }
      if (!next) return nullptr;  // the body recurses and has no value yet
      if (!next->is_tuple() || next->elements().size() != k) {
        fail(c,
             TypeError("While: expected body @" + body_g->name() + " to return a tuple of " +
                       std::to_string(k) + " elements (one per init), got " + next->to_string()));
      }
      bool stable = true;
      for (std::size_t i = 0; i < k; ++i) {
        std::optional<AbstractPtr> j = join(state[i], next->elements()[i]);
        if (!j) {
          fail(c, TypeError("While: expected body @" + body_g->name() +
                            " to keep the kind of state element " + std::to_string(i) + ", got " +
                            state[i]->to_string() + " and " + next->elements()[i]->to_string()));
        }
        if (!same(*j, state[i])) {
          stable = false;
          state[i] = *j;
        }
      }
      if (stable) return Abstract::tuple(std::move(state));
      if (widenings + 1 == kMaxLoopWidenings) {
        fail(c, InternalError("While: expected the loop state to become stable within " +
                              std::to_string(kMaxLoopWidenings) + " widenings, got " +
                              Abstract::tuple(state)->to_string()));
      }
    }
  }

  std::map<std::pair<FuncGraph*, std::string>, std::unique_ptr<Context>> contexts_;
  std::vector<Context*> stack_;  // the contexts being analyzed, outermost first
  std::unordered_map<const ir::Primitive*, ir::PrimitivePtr> complete_;
  int round_ = 0;
  bool recursed_ = false;  // this round read the output of a context in progress
  bool changed_ = false;   // this round changed an abstract
};

// The contexts reachable from `root` through the contexts their calls ran, breadth first in
// call order (deterministic).
std::vector<Context*> reachable_contexts(Context* root) {
  std::vector<Context*> order{root};
  std::unordered_set<Context*> seen{root};
  for (std::size_t i = 0; i < order.size(); ++i) {
    for (const CNode* c : order[i]->order) {
      auto it = order[i]->callees.find(c);
      if (it == order[i]->callees.end()) continue;
      for (const auto& [index, callee] : it->second) {
        if (seen.insert(callee).second) order.push_back(callee);
      }
    }
  }
  return order;
}

// Fails on the first cnode still without a value after the fixed point: only a recursion that
// never reaches a base case leaves one.
void check_complete(const std::vector<Context*>& contexts) {
  for (const Context* ctx : contexts) {
    for (const CNode* c : ctx->order) {
      if (ctx->values.at(c)) continue;
      throw ValueError("infer: expected a value for " + label(*c) + " in @" + ctx->graph->name() +
                       ", got none (a recursion without a base case?)");
    }
  }
}

// "f_spec1", "f_spec2", ...: the first name not taken, from the name without an earlier
// "_spec<n>" suffix, so copies of copies do not pile up suffixes.
std::string spec_name(const ir::Module& module, const std::string& name) {
  std::string base = name;
  if (auto pos = base.rfind("_spec");
      pos != std::string::npos && pos + 5 < base.size() &&
      base.find_first_not_of("0123456789", pos + 5) == std::string::npos) {
    base.resize(pos);
  }
  for (int k = 1;; ++k) {
    std::string candidate = base + "_spec" + std::to_string(k);
    if (module.find_graph(candidate) == nullptr) return candidate;
  }
}

// A deep copy of `source` in its module: parameters (names, weights' defaults), the live
// cnodes (names, debug info) and constants. Unlike copy_body, it returns the whole node map,
// which writing a context's abstracts into the copy needs.
FuncGraph* clone_graph(const FuncGraph& source, NodeMap& map) {
  ir::Module& module = *source.module();
  FuncGraph* copy = module.add_graph(spec_name(module, source.name()));
  for (const ir::Parameter* p : source.parameters()) {
    ir::Parameter* q = copy->add_parameter(p->name(), p->abstract());
    if (p->has_default()) q->set_default(*p->default_value());
    q->set_debug(p->debug());
    map.emplace(p, q);
  }
  auto mapped = [&](Node* node) -> Node* {
    if (auto it = map.find(node); it != map.end()) return it->second;
    if (!node->is_value()) {
      throw InternalError("infer: expected every input in @" + source.name() +
                          " to be defined in it, got %" + node->name());
    }
    Node* value = copy->add_value(static_cast<const ir::ValueNode*>(node)->value());
    map.emplace(node, value);
    return value;
  };
  for (const CNode* c : source.topo_order()) {
    std::vector<Node*> inputs;
    for (Node* in : c->inputs()) inputs.push_back(mapped(in));
    CNode* d = copy->add_cnode(std::move(inputs), c->debug());
    d->set_name(c->name());
    d->set_abstract(c->abstract());
    map.emplace(c, d);
  }
  copy->set_output(mapped(source.output()));
  return copy;
}

bool fits(const FuncGraph& graph, const std::vector<AbstractPtr>& signature) {
  for (std::size_t i = 0; i < signature.size(); ++i) {
    const AbstractPtr& declared = graph.parameter(i)->abstract();
    if (declared && !declared->accepts(*signature[i])) return false;
  }
  return true;
}

struct Written {
  bool changed = false;
  std::vector<FuncGraph*> graphs;  // the graphs that now hold the contexts
};

// Phase 2: writes the contexts reachable from `root` back into the module (see the top).
Written specialize(ir::Module& module, Context* root, bool whole_module) {
  const std::vector<Context*> contexts = reachable_contexts(root);
  check_complete(contexts);
  Written written;

  // Which context keeps each graph in place: the root; else the first whose signature the
  // graph's current parameters accept (a graph whose parameters reject every new signature
  // may be called elsewhere with its old one, so it is only taken over when the whole module
  // is being inferred); every other context gets a copy.
  std::unordered_map<FuncGraph*, Context*> in_place{{root->graph, root}};
  for (Context* ctx : contexts) {
    if (!in_place.contains(ctx->graph) && fits(*ctx->graph, ctx->signature)) {
      in_place.emplace(ctx->graph, ctx);
    }
  }
  if (whole_module) {
    for (Context* ctx : contexts) in_place.try_emplace(ctx->graph, ctx);
  }
  struct Target {
    FuncGraph* graph;
    NodeMap map;  // empty in place
  };
  std::unordered_map<Context*, Target> targets;
  for (Context* ctx : contexts) {  // all copies first, from graphs not yet edited
    auto it = in_place.find(ctx->graph);
    if (it != in_place.end() && it->second == ctx) {
      targets.emplace(ctx, Target{ctx->graph, {}});
      continue;
    }
    Target t{nullptr, {}};
    t.graph = clone_graph(*ctx->graph, t.map);
    targets.emplace(ctx, std::move(t));
    written.changed = true;
  }

  ir::Manager mgr(module);
  auto set = [&](Node& node, const AbstractPtr& a) {
    if (same(node.abstract(), a)) return;
    node.set_abstract(a);
    written.changed = true;
  };
  for (Context* ctx : contexts) {
    Target& t = targets.at(ctx);
    auto node = [&](const Node* n) -> Node* {
      return t.map.empty() ? const_cast<Node*>(n) : t.map.at(n);
    };
    written.graphs.push_back(t.graph);
    for (std::size_t i = 0; i < ctx->signature.size(); ++i) {
      set(*t.graph->parameter(i), ctx->signature[i]);
    }
    for (const CNode* c : ctx->order) {
      auto* d = static_cast<CNode*>(node(c));
      set(*d, ctx->values.at(c));
      for (Node* in : d->inputs()) {
        if (in->is_value() && !in->abstract()) {
          in->set_abstract(Abstract::of_value(static_cast<const ir::ValueNode*>(in)->value()));
        }
      }
      auto it = ctx->callees.find(c);
      if (it == ctx->callees.end()) continue;
      for (const auto& [index, callee] : it->second) {
        FuncGraph* callee_graph = targets.at(callee).graph;
        if (graph_at(*d, index) == callee_graph) continue;
        mgr.set_input(d, index, t.graph->add_value(ir::Value::graph(callee_graph)));
        written.changed = true;
      }
    }
  }
  return written;
}

struct Result {
  AbstractPtr output;
  Written written;
};

Result infer_root(FuncGraph* graph, const std::vector<AbstractPtr>& args, bool whole_module) {
  if (graph == nullptr) throw ValueError("infer: expected a graph, got null");
  const auto& params = graph->parameters();
  if (args.size() > params.size()) {
    throw ValueError("infer: expected at most " + std::to_string(params.size()) +
                     " argument abstracts for @" + graph->name() + " (one per parameter), got " +
                     std::to_string(args.size()));
  }
  std::vector<AbstractPtr> signature;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const ir::Parameter& p = *params[i];
    if (i < args.size() && args[i]) {
      signature.push_back(args[i]);
    } else if (p.abstract()) {
      signature.push_back(p.abstract());
    } else if (p.has_default()) {
      signature.push_back(Abstract::of_value(ir::Value::tensor(*p.default_value())));
    } else {
      throw ValueError("infer: expected an abstract for parameter %" + p.name() + " of @" +
                       graph->name() + ", got none");
    }
  }
  Analyzer analyzer;
  Context* root = analyzer.solve(graph, std::move(signature));
  Result result{root->output, specialize(*graph->module(), root, whole_module)};
  return result;
}

bool run_infer(ir::Module& module) { return infer_module(module); }

}  // namespace

ir::AbstractPtr infer_graph(ir::FuncGraph* graph, const std::vector<ir::AbstractPtr>& args) {
  const bool whole_module = graph != nullptr && graph == graph->module()->entry();
  return infer_root(graph, args, whole_module).output;
}

ir::AbstractPtr infer_node(ir::Node* n) {
  if (n->abstract()) return n->abstract();
  if (n->is_value()) {
    n->set_abstract(ir::Abstract::of_value(static_cast<ir::ValueNode*>(n)->value()));
    return n->abstract();
  }
  if (!n->is_cnode()) return nullptr;
  auto* c = static_cast<CNode*>(n);
  if (!c->primitive()) return nullptr;
  std::vector<AbstractPtr> in;
  for (std::size_t i = 0; i < c->num_args(); ++i) {
    AbstractPtr a = infer_node(c->arg(i));
    if (!a) return nullptr;
    in.push_back(std::move(a));
  }
  try {
    c->set_abstract(ops::infer(*ops::make_op(c->primitive()->name(), c->primitive()->attrs()),
                               in, c->name()));
  } catch (const Error&) {
    return nullptr;
  }
  return c->abstract();
}

bool infer_module(ir::Module& module) {
  if (module.entry() == nullptr) return false;
  Result result = infer_root(module.entry(), {}, /*whole_module=*/true);
  bool changed = result.written.changed;
  // Graphs reached only as values (inside a tuple or a primitive attribute) were run by no
  // call: they are inferred for their own parameters' abstracts, when every one has one.
  std::unordered_set<FuncGraph*> done(result.written.graphs.begin(), result.written.graphs.end());
  for (FuncGraph* g : module.reachable_graphs()) {
    if (done.contains(g)) continue;
    bool declared = true;
    for (const ir::Parameter* p : g->parameters()) declared &= p->abstract() || p->has_default();
    if (!declared) continue;
    Result more = infer_root(g, {}, /*whole_module=*/false);
    changed |= more.written.changed;
    done.insert(more.written.graphs.begin(), more.written.graphs.end());
  }
  return changed;
}

void register_infer(PassRegistry& registry) {
  registry.add(PassInfo{
      .name = "infer",
      .summary = "infers every node's abstract from the entry's parameters, specializing "
                 "graphs called with different signatures",
      .run = run_infer,
  });
}

}  // namespace loom::passes
