// GraphNet: a loaded MindIR graph replayed through the emitter (mindir/graph_net.h).
#include "mindir/graph_net.h"

#include <set>
#include <unordered_map>

#include "core/ir/anf.h"
#include "core/ir/error.h"

namespace loom::mindir {

GraphNet::GraphNet(GraphCell cell) : nn::Cell("GraphNet"), cell_(std::move(cell)) {
  const ir::FuncGraph& g = cell_.graph();
  const std::size_t num_inputs = cell_.inputs().size();
  const auto& params = g.parameters();
  // Weights a BatchNorm reads as its mean and variance: state, not trained.
  std::set<const ir::Node*> statistics;
  for (const ir::CNode* c : g.topo_order()) {
    if (c->is_call_to("BatchNorm") && c->num_args() == 5) {
      statistics.insert(c->arg(3));
      statistics.insert(c->arg(4));
    }
  }
  for (std::size_t i = num_inputs; i < params.size(); ++i) {
    const ir::Parameter* p = params[i];
    if (!p->has_default()) {
      throw InternalError("GraphNet: expected graph parameter " + p->name() +
                          " to be a weight with a value");
    }
    nn::Parameter& w = register_parameter(cell_.parameters()[i - num_inputs].first,
                                          p->default_value()->clone());
    w.requires_grad = statistics.count(p) == 0;
    weights_.push_back(&w);
  }
}

ops::Var GraphNet::construct(const std::vector<ops::Var>& inputs) {
  const std::size_t num_inputs = cell_.inputs().size();
  if (inputs.size() != num_inputs) {
    throw ValueError("GraphNet: expected " + std::to_string(num_inputs) + " inputs, got " +
                     std::to_string(inputs.size()));
  }
  std::vector<ops::Var> weights;
  for (nn::Parameter* w : weights_) weights.push_back(param(*w));
  return emit_graph(nn::current_emitter(), cell_.graph(), inputs, weights);
}

ops::Var emit_graph(ops::Emitter& e, const ir::FuncGraph& g, const std::vector<ops::Var>& inputs,
                    const std::vector<ops::Var>& weights) {
  const auto& params = g.parameters();
  if (inputs.size() + weights.size() != params.size()) {
    throw ValueError("MindIR graph @" + g.name() + ": expected " +
                     std::to_string(params.size()) + " inputs and weights, got " +
                     std::to_string(inputs.size()) + " and " + std::to_string(weights.size()));
  }
  std::unordered_map<const ir::Node*, ops::Var> vars;
  for (std::size_t i = 0; i < params.size(); ++i) {
    vars.emplace(params[i], i < inputs.size() ? inputs[i] : weights[i - inputs.size()]);
  }
  auto var_of = [&](const ir::Node* n) -> ops::Var {
    if (auto it = vars.find(n); it != vars.end()) return it->second;
    if (n->is_value()) {
      ops::Var v = e.constant(static_cast<const ir::ValueNode*>(n)->value());
      vars.emplace(n, v);
      return v;
    }
    throw InternalError("MindIR graph: node '" + n->name() + "' used before it is defined");
  };
  for (const ir::CNode* c : g.topo_order()) {
    const ir::Primitive* prim = c->primitive();
    if (prim == nullptr) {
      throw ValueError("MindIR graph: expected only op calls to replay, got a call of a graph "
                       "(control flow) at node '" + c->name() + "'");
    }
    std::vector<ops::Var> args;
    for (std::size_t i = 0; i < c->num_args(); ++i) args.push_back(var_of(c->arg(i)));
    ops::Var out;
    if (prim->name() == "MakeTuple") {
      out = e.make_tuple(args);
    } else if (prim->name() == "TupleGetItem") {
      out = e.tuple_get(args.at(0),
                        static_cast<const ir::ValueNode*>(c->arg(1))->value().as_int());
    } else {
      out = e.emit(prim->name(), args, prim->attrs());
    }
    vars.emplace(c, out);
  }
  return var_of(g.output());
}

std::shared_ptr<GraphNet> load_mindir_net(const std::string& path) {
  return std::make_shared<GraphNet>(load_mindir(path));
}

}  // namespace loom::mindir
