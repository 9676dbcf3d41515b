/// \file
/// The ANF IR: nodes, first-order function graphs, and the Module that owns them.
///
/// Every intermediate value is named by a node; graphs are values; nothing is mutated except
/// through ir::Manager (core/ir/manager.h).
///
/// - Parameter: a graph input, or a weight (a parameter with a default Tensor)
/// - ValueNode: a constant Value: tensor, scalar, string, tuple, Primitive, FuncGraph, None
/// - CNode: an application: input 0 is the callee (a ValueNode holding a Primitive or a
///   FuncGraph), inputs 1..n are the arguments
///
/// A FuncGraph has ordered parameters and one output node (several results go through a
/// MakeTuple). Its nodes are its parameters and the nodes reachable from its output; they use
/// only that graph's own parameters, nodes and constants (no free variables). Nested graphs
/// appear only as values.
///
/// Ownership: a Module owns every graph and node created in it; nodes and graphs are referred to
/// by raw pointers that stay valid as long as the Module lives. Nodes made dead by a rewrite stay
/// allocated until the Module is destroyed.
///
/// ```
/// Module m;
/// FuncGraph* g = m.add_graph("main");
/// Parameter* x = g->add_parameter("x", Abstract::tensor(DType::kFloat32, {2, 3}));
/// CNode* y = g->add_call(make_primitive("ReLU"), {x});
/// g->set_output(y);
/// m.set_entry(g);
/// ```
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/ir/abstract.h"
#include "core/ir/tensor.h"
#include "core/ir/value.h"

namespace loom::ir {

class FuncGraph;
class Module;
class Manager;

/// What part of a training step a node belongs to. Tracing makes forward nodes (kForward);
/// autodiff marks the nodes it emits for a forward node's gradient as backward (kBackward),
/// naming that node; the training step marks the optimizer's update (kOptimizer).
enum class Role : std::uint8_t { kForward, kBackward, kOptimizer };
/// The role's name: "forward", "backward" or "optimizer".
std::string_view role_name(Role role);

/// Where a node came from: the Cell path that created it ("LeNet5/conv1/Conv2D") and, where
/// known, the C++ (or Python) source location of the call; also the node's Role.
struct DebugInfo {
  std::string scope;           ///< The Cell path and op ("LeNet5/conv1/Conv2D"); "" if none.
  std::string file;            ///< The source file of the call; "" when unknown.
  int line = 0;                ///< The source line of the call; 0 when unknown.
  Role role = Role::kForward;  ///< The part of a training step the node belongs to.
  /// A backward node: the scope of the forward node whose gradient it computes ("" otherwise).
  std::string forward;

  /// True when every field has its default value (no debug information).
  bool empty() const {
    return scope.empty() && file.empty() && line == 0 && role == Role::kForward && forward.empty();
  }
  /// Field-by-field equality.
  bool operator==(const DebugInfo&) const = default;
};

/// A node of a FuncGraph: a Parameter, a ValueNode or a CNode. Nodes are made through their
/// graph (FuncGraph::add_parameter, add_value, add_cnode), owned by the Module and not copyable.
class Node {
 public:
  /// Which class the node is: kParameter (Parameter), kValue (ValueNode), kCNode (CNode).
  enum class Kind { kParameter, kValue, kCNode };

  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  /// Which class the node is.
  Kind kind() const { return kind_; }
  /// Kind tests: true when the node is a Parameter, a ValueNode or a CNode, as the function
  /// names.
  ///@{
  bool is_parameter() const { return kind_ == Kind::kParameter; }
  bool is_value() const { return kind_ == Kind::kValue; }
  bool is_cnode() const { return kind_ == Kind::kCNode; }
  ///@}

  /// The graph this node was created in.
  FuncGraph* graph() const { return graph_; }
  /// Unique within the Module, increasing in creation order.
  std::uint64_t id() const { return id_; }

  /// A readable name: required for parameters, optional for cnodes (the printer numbers the
  /// unnamed ones). Names are unique within a graph when the IR is well formed.
  const std::string& name() const { return name_; }
  /// Replaces the name (uniqueness is not checked here; verify() checks it).
  void set_name(std::string name) { name_ = std::move(name); }

  /// The inferred abstract value; null until inference ran.
  const AbstractPtr& abstract() const { return abstract_; }
  /// Replaces the abstract value (null clears it).
  void set_abstract(AbstractPtr abstract) { abstract_ = std::move(abstract); }

  /// Where the node came from and the part of a training step it belongs to.
  const DebugInfo& debug() const { return debug_; }
  /// Replaces the debug information.
  void set_debug(DebugInfo debug) { debug_ = std::move(debug); }

 protected:
  /// A node of class `kind` in `graph`, with the Module-wide `id`.
  Node(Kind kind, FuncGraph* graph, std::uint64_t id) : kind_(kind), graph_(graph), id_(id) {}

 private:
  Kind kind_;
  FuncGraph* graph_;
  std::uint64_t id_;
  std::string name_;
  AbstractPtr abstract_;
  DebugInfo debug_;
};

/// A graph input, or a weight (a parameter with a default Tensor). Made by
/// FuncGraph::add_parameter.
class Parameter final : public Node {
 public:
  /// A weight carries its value; graph inputs have none.
  const std::optional<Tensor>& default_value() const { return default_; }
  /// True for a weight (the parameter has a default value).
  bool has_default() const { return default_.has_value(); }
  /// Makes the parameter a weight with `value` as its default (replacing any previous one).
  void set_default(Tensor value) { default_ = std::move(value); }

 private:
  friend class Module;
  using Node::Node;
  std::optional<Tensor> default_;
};

/// A constant Value in a graph. Made by FuncGraph::add_value.
class ValueNode final : public Node {
 public:
  /// The constant.
  const Value& value() const { return value_; }

 private:
  friend class Module;
  ValueNode(FuncGraph* graph, std::uint64_t id, Value value)
      : Node(Kind::kValue, graph, id), value_(std::move(value)) {}
  Value value_;
};

/// An application: input 0 is the callee (a ValueNode holding a Primitive or a FuncGraph),
/// inputs 1..n are the arguments. Made by FuncGraph::add_cnode and add_call; after creation
/// only ir::Manager changes its inputs.
class CNode final : public Node {
 public:
  /// Every input, the callee first.
  const std::vector<Node*>& inputs() const { return inputs_; }
  /// The number of inputs, the callee included.
  std::size_t size() const { return inputs_.size(); }
  /// Input `i` (0 is the callee); throws InternalError when `i` is out of range.
  Node* input(std::size_t i) const;
  /// Input 0, the callee.
  Node* callee() const { return input(0); }
  /// The number of arguments (the inputs after the callee).
  std::size_t num_args() const { return inputs_.empty() ? 0 : inputs_.size() - 1; }
  /// Argument `i`, i.e. input i + 1; throws InternalError when out of range.
  Node* arg(std::size_t i) const { return input(i + 1); }

  /// The callee's Primitive, or null when the callee is not a Primitive constant.
  const Primitive* primitive() const;
  /// The called graph, or null when the callee is not a FuncGraph constant.
  FuncGraph* called_graph() const;
  /// True when the callee is the primitive named `name`.
  bool is_call_to(std::string_view name) const;

 private:
  friend class Module;
  friend class Manager;  ///< the only place inputs change after creation
  CNode(FuncGraph* graph, std::uint64_t id, std::vector<Node*> inputs)
      : Node(Kind::kCNode, graph, id), inputs_(std::move(inputs)) {}
  std::vector<Node*> inputs_;
};

/// A first-order function graph: ordered parameters and one output node. Made by
/// Module::add_graph and owned by that module; not copyable.
class FuncGraph {
 public:
  FuncGraph(const FuncGraph&) = delete;
  FuncGraph& operator=(const FuncGraph&) = delete;

  /// The module that owns this graph.
  Module* module() const { return module_; }
  /// The graph's name, unique in its module.
  const std::string& name() const { return name_; }

  /// The parameters, in order.
  const std::vector<Parameter*>& parameters() const { return parameters_; }
  /// Parameter `i`; throws InternalError when `i` is out of range.
  Parameter* parameter(std::size_t i) const;
  /// Appends a parameter. Throws ValueError when the name is empty.
  Parameter* add_parameter(std::string name, AbstractPtr abstract = nullptr);

  /// A constant in this graph; its abstract is Abstract::of_value(value).
  ValueNode* add_value(Value value);
  /// An application; every input must be non-null (InternalError otherwise).
  CNode* add_cnode(std::vector<Node*> inputs, DebugInfo debug = {});
  /// Shorthands: a call of a primitive / of a graph with the given arguments (the callee is
  /// added as a new constant of this graph).
  ///@{
  CNode* add_call(PrimitivePtr prim, const std::vector<Node*>& args, DebugInfo debug = {});
  CNode* add_call(FuncGraph* callee, const std::vector<Node*>& args, DebugInfo debug = {});
  ///@}

  /// The output node; null until set.
  Node* output() const { return output_; }
  /// Sets the output while the graph is being built. Once a Manager tracks the module, use
  /// Manager::set_output so that def-use edges stay consistent.
  void set_output(Node* output) { output_ = output; }

  /// The CNodes reachable from the output, each after its inputs (a post-order depth-first walk
  /// taking inputs left to right). Deterministic; never recurses on the C++ stack; terminates on
  /// cyclic (malformed) graphs, leaving the cycle's back edge out of the order.
  std::vector<CNode*> topo_order() const;
  /// Graphs that appear as values in this graph's nodes (also inside tuples and primitive
  /// attributes), in topo order of first appearance.
  std::vector<FuncGraph*> used_graphs() const;

 private:
  friend class Module;
  FuncGraph(Module* module, std::string name) : module_(module), name_(std::move(name)) {}

  Module* module_;
  std::string name_;
  std::vector<Parameter*> parameters_;
  Node* output_ = nullptr;
};

/// Owns graphs and their nodes: every graph and node created in a module stays valid, at the
/// same address, as long as the module lives. Not copyable.
class Module {
 public:
  Module();
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// A new empty graph. Names are unique in a module: a taken name gets a suffix "_1", "_2"...
  FuncGraph* add_graph(std::string name);
  /// The graph named `name`, or null when there is none.
  FuncGraph* find_graph(std::string_view name) const;
  /// Every graph ever added, in creation order (including ones no longer reachable).
  const std::vector<FuncGraph*>& graphs() const { return graph_list_; }

  /// The graph a module computes; the printer starts there.
  FuncGraph* entry() const { return entry_; }
  /// Sets the entry graph (null clears it); throws InternalError for a graph of another module.
  void set_entry(FuncGraph* graph);

  /// The entry (or `root`) and every graph reachable from it through graph values: root first,
  /// then depth-first in order of first use. Each graph appears once, so recursion terminates.
  std::vector<FuncGraph*> reachable_graphs(FuncGraph* root = nullptr) const;

 private:
  friend class FuncGraph;
  Parameter* new_parameter(FuncGraph* graph);
  ValueNode* new_value(FuncGraph* graph, Value value);
  CNode* new_cnode(FuncGraph* graph, std::vector<Node*> inputs);

  std::vector<std::unique_ptr<FuncGraph>> graphs_;
  std::vector<FuncGraph*> graph_list_;
  std::unordered_map<std::string, FuncGraph*> by_name_;
  std::vector<std::unique_ptr<Node>> nodes_;
  FuncGraph* entry_ = nullptr;
  std::uint64_t next_id_ = 0;
};

}  // namespace loom::ir
