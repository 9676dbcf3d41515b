// The graph emitter: the ops::Emitter that bprop rules talk to when core/autodiff builds a
// backward graph. Each emit() becomes a CNode of the target graph whose abstract comes from
// ops::infer, so the gradient is ordinary, inferred IR that can be differentiated again.
//
//   GraphEmitter e(bwd_graph);
//   ops::Var dx = e.mul(dout, e.emit("Exp", {x}));   // two CNodes appended to bwd_graph
//
// A Var holding a node must name a node of the target graph (a parameter, constant or cnode);
// a Var holding a Value becomes a constant of the target graph. When an input's abstract is
// unknown (a residual tuple of a recursive graph), the new node gets no abstract either.
#pragma once

#include "ops/emitter.h"

namespace loom::ir {
class FuncGraph;
class Node;
}  // namespace loom::ir

namespace loom::trace {

class GraphEmitter final : public ops::Emitter {
 public:
  explicit GraphEmitter(ir::FuncGraph* target) : target_(target) {}

  ops::Var emit(std::string_view op, const std::vector<ops::Var>& args,
                ir::Primitive::Attrs attrs = {}) override;
  ops::Var constant(ir::Value value) override;
  ir::AbstractPtr abstract_of(const ops::Var& v) override;

  // The node of the target graph standing for `v` (a constant is added for a Value).
  ir::Node* node_of(const ops::Var& v);
  ir::FuncGraph* target() const { return target_; }

 private:
  ir::FuncGraph* target_;
};

}  // namespace loom::trace
