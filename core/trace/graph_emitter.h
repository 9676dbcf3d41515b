/// \file
/// The IR emitter: the one place where ops called through an ops::Emitter become CNodes. Tracing
/// a Cell's construct (core/trace/tracer.h) and emitting bprop rules in core/autodiff both go
/// through it, so every node is made the same way: the op's attributes checked and completed,
/// its abstract inferred before the node is added (a failing op leaves no half-built node), and
/// its debug info (Cell scope, source line, role) attached.
///
/// ```
/// GraphEmitter e(bwd_graph);
/// e.set_debug({.scope = "Gradients/Net/dense/MatMul", .role = ir::Role::kBackward});
/// ops::Var dx = e.mul(dout, e.emit("Exp", {x}));   // two CNodes appended to bwd_graph
/// ```
///
/// A Var holding a node must name a node of the target graph (a parameter, constant or cnode);
/// a Var holding a Value becomes a constant of the target graph. When an input's abstract is
/// unknown (a residual tuple of a recursive graph), the new node gets no abstract either.
#pragma once

#include <string>
#include <string_view>

#include "core/ir/anf.h"
#include "ops/emitter.h"

namespace loom::trace {

/// An ops::Emitter that appends every op it is given to a target graph as an inferred CNode,
/// with debug info.
class GraphEmitter : public ops::Emitter {
 public:
  /// An emitter appending to `target`.
  explicit GraphEmitter(ir::FuncGraph* target) : target_(target) {}

  /// Appends a CNode applying `op` (attributes checked and completed by ops::make_op) to `args`,
  /// its abstract inferred first (none when an input's abstract is unknown); returns it as a Var.
  /// A failing op throws and adds no CNode.
  ops::Var emit(std::string_view op, const std::vector<ops::Var>& args,
                ir::Primitive::Attrs attrs = {}) override;
  ops::Var constant(ir::Value value) override;
  ir::AbstractPtr abstract_of(const ops::Var& v) override;

  /// The node of the target graph standing for `v` (a constant is added for a Value).
  ir::Node* node_of(const ops::Var& v);
  /// The graph the nodes are appended to.
  ir::FuncGraph* target() const { return target_; }

  /// The debug info of the nodes emitted from now on (by default empty).
  void set_debug(ir::DebugInfo debug) { debug_ = std::move(debug); }
  /// The debug info set by set_debug.
  const ir::DebugInfo& debug() const { return debug_; }
  /// Context appended to inference errors ("autodiff"); "" adds none.
  void set_where(std::string where) { where_ = std::move(where); }
  /// Lets operands be nodes of other graphs (a branch or loop body built before
  /// ir::lift_captures turns those into parameters); refused otherwise.
  void allow_foreign_nodes(bool allow) { foreign_ = allow; }

 protected:
  /// The debug info of a node of `op` about to be emitted: debug() unless a subclass knows more
  /// (the tracer: the Cell path and the user's source line).
  virtual ir::DebugInfo debug_for(std::string_view op) { return debug_; }

 private:
  ir::FuncGraph* target_;
  ir::DebugInfo debug_;
  std::string where_;
  bool foreign_ = false;
};

}  // namespace loom::trace
