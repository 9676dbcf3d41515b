// Nodes, graphs and the Module that owns them; graph walks (topological order, graphs used).
// Graphs used as values are found in constants, inside tuples and inside primitive attributes.
// Walks are iterative so that deep graphs never exhaust the C++ stack, and terminate on
// malformed (cyclic) graphs.
#include "core/ir/anf.h"

#include <unordered_map>
#include <unordered_set>

#include "core/ir/error.h"

namespace loom::ir {

std::string_view role_name(Role role) {
  switch (role) {
    case Role::kForward: return "forward";
    case Role::kBackward: return "backward";
    case Role::kOptimizer: return "optimizer";
  }
  return "forward";
}

Node* CNode::input(std::size_t i) const {
  if (i >= inputs_.size()) {
    throw InternalError("CNode::input: expected an index below " + std::to_string(inputs_.size()) +
                        ", got " + std::to_string(i));
  }
  return inputs_[i];
}

const Primitive* CNode::primitive() const {
  if (inputs_.empty() || !inputs_[0] || !inputs_[0]->is_value()) return nullptr;
  const Value& v = static_cast<const ValueNode*>(inputs_[0])->value();
  return v.is_primitive() ? v.as_primitive().get() : nullptr;
}

FuncGraph* CNode::called_graph() const {
  if (inputs_.empty() || !inputs_[0] || !inputs_[0]->is_value()) return nullptr;
  const Value& v = static_cast<const ValueNode*>(inputs_[0])->value();
  return v.is_graph() ? v.as_graph() : nullptr;
}

bool CNode::is_call_to(std::string_view name) const {
  const Primitive* p = primitive();
  return p && p->name() == name;
}

Parameter* FuncGraph::parameter(std::size_t i) const {
  if (i >= parameters_.size()) {
    throw InternalError("FuncGraph::parameter: expected an index below " +
                        std::to_string(parameters_.size()) + " in @" + name_ + ", got " +
                        std::to_string(i));
  }
  return parameters_[i];
}

Parameter* FuncGraph::add_parameter(std::string name, AbstractPtr abstract) {
  if (name.empty()) {
    throw ValueError("FuncGraph::add_parameter: expected a name in @" + name_ + ", got \"\"");
  }
  Parameter* p = module_->new_parameter(this);
  p->set_name(std::move(name));
  p->set_abstract(std::move(abstract));
  parameters_.push_back(p);
  return p;
}

ValueNode* FuncGraph::add_value(Value value) {
  AbstractPtr abstract = Abstract::of_value(value);
  ValueNode* v = module_->new_value(this, std::move(value));
  v->set_abstract(std::move(abstract));
  return v;
}

CNode* FuncGraph::add_cnode(std::vector<Node*> inputs, DebugInfo debug) {
  if (inputs.empty()) {
    throw InternalError("FuncGraph::add_cnode: expected a callee in @" + name_ + ", got no input");
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i]) {
      throw InternalError("FuncGraph::add_cnode: expected non-null inputs in @" + name_ +
                          ", got null input " + std::to_string(i));
    }
  }
  CNode* c = module_->new_cnode(this, std::move(inputs));
  c->set_debug(std::move(debug));
  return c;
}

CNode* FuncGraph::add_call(PrimitivePtr prim, const std::vector<Node*>& args, DebugInfo debug) {
  std::vector<Node*> inputs{add_value(Value::primitive(std::move(prim)))};
  inputs.insert(inputs.end(), args.begin(), args.end());
  return add_cnode(std::move(inputs), std::move(debug));
}

CNode* FuncGraph::add_call(FuncGraph* callee, const std::vector<Node*>& args, DebugInfo debug) {
  std::vector<Node*> inputs{add_value(Value::graph(callee))};
  inputs.insert(inputs.end(), args.begin(), args.end());
  return add_cnode(std::move(inputs), std::move(debug));
}

std::vector<CNode*> FuncGraph::topo_order() const {
  std::vector<CNode*> order;
  if (!output_ || !output_->is_cnode() || output_->graph() != this) return order;
  enum class State : std::uint8_t { kOnStack, kDone };
  std::unordered_map<const Node*, State> state;
  struct Frame {
    CNode* node;
    std::size_t next;
  };
  std::vector<Frame> stack{{static_cast<CNode*>(output_), 0}};
  state[output_] = State::kOnStack;
  while (!stack.empty()) {
    Frame& top = stack.back();
    if (top.next < top.node->inputs().size()) {
      Node* in = top.node->inputs()[top.next++];
      if (in && in->is_cnode() && in->graph() == this && !state.count(in)) {
        state[in] = State::kOnStack;
        stack.push_back({static_cast<CNode*>(in), 0});
      }
      continue;
    }
    state[top.node] = State::kDone;
    order.push_back(top.node);
    stack.pop_back();
  }
  return order;
}

namespace {
void collect_graphs(const Value& v, std::vector<FuncGraph*>& out,
                    std::unordered_set<FuncGraph*>& seen) {
  if (v.is_graph()) {
    if (seen.insert(v.as_graph()).second) out.push_back(v.as_graph());
  } else if (v.is_tuple()) {
    for (const Value& e : v.elements()) collect_graphs(e, out, seen);
  } else if (v.is_primitive()) {
    for (const auto& [name, attr] : v.as_primitive()->attrs()) collect_graphs(attr, out, seen);
  }
}
}  // namespace

std::vector<FuncGraph*> FuncGraph::used_graphs() const {
  std::vector<FuncGraph*> out;
  std::unordered_set<FuncGraph*> seen;
  auto visit = [&](const Node* n) {
    if (n && n->is_value()) collect_graphs(static_cast<const ValueNode*>(n)->value(), out, seen);
  };
  for (CNode* c : topo_order()) {
    for (Node* in : c->inputs()) visit(in);
  }
  visit(output_);
  return out;
}

Module::Module() = default;
Module::~Module() = default;

FuncGraph* Module::add_graph(std::string name) {
  if (name.empty()) name = "graph";
  if (find_graph(name)) {
    for (int k = 1;; ++k) {
      std::string candidate = name + "_" + std::to_string(k);
      if (!find_graph(candidate)) {
        name = std::move(candidate);
        break;
      }
    }
  }
  graphs_.push_back(std::unique_ptr<FuncGraph>(new FuncGraph(this, std::move(name))));
  graph_list_.push_back(graphs_.back().get());
  by_name_.emplace(graph_list_.back()->name(), graph_list_.back());
  return graph_list_.back();
}

FuncGraph* Module::find_graph(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? nullptr : it->second;
}

void Module::set_entry(FuncGraph* graph) {
  if (graph && graph->module() != this) {
    throw InternalError("Module::set_entry: expected a graph of this module, got @" +
                        graph->name() + " of another");
  }
  entry_ = graph;
}

std::vector<FuncGraph*> Module::reachable_graphs(FuncGraph* root) const {
  if (!root) root = entry_;
  std::vector<FuncGraph*> out;
  if (!root) return out;
  std::unordered_set<FuncGraph*> seen{root};
  out.push_back(root);
  struct Frame {
    std::vector<FuncGraph*> used;
    std::size_t next;
  };
  std::vector<Frame> stack{{root->used_graphs(), 0}};
  while (!stack.empty()) {
    Frame& top = stack.back();
    if (top.next == top.used.size()) {
      stack.pop_back();
      continue;
    }
    FuncGraph* g = top.used[top.next++];
    if (!seen.insert(g).second) continue;
    out.push_back(g);
    stack.push_back({g->used_graphs(), 0});
  }
  return out;
}

Parameter* Module::new_parameter(FuncGraph* graph) {
  nodes_.push_back(std::unique_ptr<Node>(new Parameter(Node::Kind::kParameter, graph, next_id_++)));
  return static_cast<Parameter*>(nodes_.back().get());
}

ValueNode* Module::new_value(FuncGraph* graph, Value value) {
  nodes_.push_back(std::unique_ptr<Node>(new ValueNode(graph, next_id_++, std::move(value))));
  return static_cast<ValueNode*>(nodes_.back().get());
}

CNode* Module::new_cnode(FuncGraph* graph, std::vector<Node*> inputs) {
  nodes_.push_back(std::unique_ptr<Node>(new CNode(graph, next_id_++, std::move(inputs))));
  return static_cast<CNode*>(nodes_.back().get());
}

}  // namespace loom::ir
