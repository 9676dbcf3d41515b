// The reference interpreter. Each graph call evaluates the callee's nodes in topological order
// into a local value table; If and While call their graph arguments; every other primitive goes
// to backend::run_op (structural ops included). Graph calls recurse on the C++ stack, bounded by
// max_call_depth.
#include "runtime/interpreter.h"

#include <chrono>
#include <unordered_map>

#include "backends/backend.h"
#include "backends/eager.h"
#include "core/ir/anf.h"
#include "core/ir/error.h"
#include "core/ir/printer.h"
#include "ops/op.h"

namespace loom::runtime {

namespace {

using ir::CNode;
using ir::FuncGraph;
using ir::Node;
using ir::Value;

class Interpreter {
 public:
  explicit Interpreter(const InterpretOptions& options)
      : options_(options),
        observers_(options.observers && !options.observers->empty() ? options.observers : nullptr),
        control_depth_(options.depth) {}

  Value call(const FuncGraph& graph, const std::vector<Value>& args) {
    if (++depth_ > options_.max_call_depth) {
      depth_ = 0;
      throw ValueError("interpret: expected graph calls nested at most " +
                       std::to_string(options_.max_call_depth) + " deep, got deeper at @" +
                       graph.name() + " (unbounded recursion?)");
    }
    const auto& params = graph.parameters();
    if (args.size() > params.size()) {
      throw ValueError("interpret: expected at most " + std::to_string(params.size()) +
                       " arguments for @" + graph.name() + ", got " + std::to_string(args.size()));
    }
    std::unordered_map<const Node*, Value> env;
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (i < args.size()) {
        env[params[i]] = args[i];
      } else if (params[i]->has_default()) {
        env[params[i]] = Value::tensor(*params[i]->default_value());
      } else {
        throw ValueError("interpret: expected an argument for parameter %" + params[i]->name() +
                         " of @" + graph.name() + ", got none");
      }
    }
    auto value_of = [&](const Node* n) -> const Value& {
      if (n->is_value()) return static_cast<const ir::ValueNode*>(n)->value();
      auto it = env.find(n);
      if (it == env.end()) {
        throw InternalError("interpret: expected a value for a node of @" + graph.name() +
                            ", got none (a free variable? run verify)");
      }
      return it->second;
    };
    for (const CNode* c : graph.topo_order()) {
      Value v = eval(graph, *c, value_of);
      if (options_.on_node) options_.on_node(*c, v);
      env[c] = std::move(v);
    }
    if (!graph.output()) throw InternalError("interpret: @" + graph.name() + " has no output");
    Value out = value_of(graph.output());
    --depth_;
    return out;
  }

 private:
  template <typename ValueOf>
  Value eval(const FuncGraph& graph, const CNode& c, ValueOf& value_of) {
    std::vector<Value> args;
    args.reserve(c.num_args());
    for (std::size_t i = 0; i < c.num_args(); ++i) args.push_back(value_of(c.arg(i)));
    if (FuncGraph* callee = c.called_graph()) return call(*callee, args);
    const ir::Primitive* prim = c.primitive();
    if (!prim) {
      throw InternalError("interpret: expected a primitive or graph callee in @" + graph.name() +
                          ", got another node");
    }
    if (observers_ && is_launch(*prim)) return observed(graph, c, *prim, args);
    return run(graph, c, *prim, args);
  }

  // Kernels, If and While: what a compiled plan launches (structural ops are not launches).
  static bool is_launch(const ir::Primitive& prim) {
    const ops::OpDef* def = ops::Registry::global().find(prim.name());
    return def == nullptr || def->trait != ops::Trait::kStructural;
  }

  static void tensors_of(const Value& v, std::vector<Tensor>& out) {
    if (v.is_tensor()) {
      out.push_back(v.as_tensor());
    } else if (v.is_tuple()) {
      for (const Value& e : v.elements()) tensors_of(e, out);
    }
  }

  Value observed(const FuncGraph& graph, const CNode& c, const ir::Primitive& prim,
                 const std::vector<Value>& args) {
    std::vector<Tensor> ins, outs;
    for (const Value& a : args) tensors_of(a, ins);
    auto labels = labels_.find(&graph);
    if (labels == labels_.end()) labels = labels_.emplace(&graph, ir::cnode_labels(graph)).first;
    LaunchEvent event{launches_++, control_depth_,        graph.name(), prim.name(),
                      c.name(),    c.debug(),             ins,          outs,
                      -1,          labels->second.at(&c), &graph,       &prim};
    notify_before(*observers_, event);
    const auto t0 = std::chrono::steady_clock::now();
    Value v = run(graph, c, prim, args);
    event.elapsed_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::steady_clock::now() - t0).count();
    tensors_of(v, outs);
    event.outputs = outs;
    notify_after(*observers_, event);
    return v;
  }

  Value run(const FuncGraph& graph, const CNode& c, const ir::Primitive& prim,
            const std::vector<Value>& args) {
    if (prim.name() == ir::kIfPrim || prim.name() == ir::kWhilePrim) {
      ++control_depth_;
      struct Leave {
        int& depth;
        ~Leave() { --depth; }
      } leave{control_depth_};
      return prim.name() == ir::kIfPrim ? eval_if(args) : eval_while(args);
    }
    try {
      return backend::run_op(prim, args);
    } catch (const Error& e) {
      if (c.debug().empty()) throw;
      std::string where = " (in " + (c.debug().scope.empty() ? "@" + graph.name() : c.debug().scope);
      if (!c.debug().file.empty()) where += " at " + c.debug().file + ":" + std::to_string(c.debug().line);
      rethrow_with_context(e, where + ")");
    }
  }

  static bool truth(const Value& v, const char* what) {
    if (v.is_scalar()) return v.as_bool();
    if (v.is_tensor() && v.as_tensor().numel() == 1) {
      return backend::to_host(v.as_tensor()).get(0) != 0;
    }
    throw TypeError(std::string("interpret: expected a scalar ") + what + ", got a " +
                    std::string(Value::kind_name(v.kind())));
  }

  Value eval_if(const std::vector<Value>& args) {
    if (args.size() < 3 || !args[1].is_graph() || !args[2].is_graph()) {
      throw TypeError("If: expected (pred, @then, @else, args...), got other inputs");
    }
    std::vector<Value> branch_args(args.begin() + 3, args.end());
    return call(*(truth(args[0], "If predicate") ? args[1] : args[2]).as_graph(), branch_args);
  }

  Value eval_while(const std::vector<Value>& args) {
    if (args.size() < 2 || !args[0].is_graph() || !args[1].is_graph()) {
      throw TypeError("While: expected (@cond, @body, init...), got other inputs");
    }
    const FuncGraph& cond = *args[0].as_graph();
    const FuncGraph& body = *args[1].as_graph();
    std::vector<Value> state(args.begin() + 2, args.end());
    for (std::int64_t it = 0;; ++it) {
      if (!truth(call(cond, state), "While condition")) break;
      if (it >= options_.max_loop_iterations) {
        throw ValueError("While: expected at most " + std::to_string(options_.max_loop_iterations) +
                         " iterations, got more (@" + body.name() + ")");
      }
      Value next = call(body, state);
      if (!next.is_tuple() || next.elements().size() != state.size()) {
        throw TypeError("While: expected @" + body.name() + " to return a tuple of " +
                        std::to_string(state.size()) + " values, got another value");
      }
      state = next.elements();
    }
    return Value::tuple(std::move(state));
  }

  const InterpretOptions& options_;
  const ObserverList* observers_;
  int depth_ = 0;          // graph calls
  int control_depth_ = 0;  // If / While nesting, for observers
  std::size_t launches_ = 0;
  std::unordered_map<const FuncGraph*, std::unordered_map<const CNode*, std::string>> labels_;
};

}  // namespace

Value interpret(const FuncGraph& graph, const std::vector<Value>& args,
                const InterpretOptions& options) {
  Interpreter interp(options);
  return interp.call(graph, args);
}

}  // namespace loom::runtime
