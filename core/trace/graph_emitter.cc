// GraphEmitter: op calls become inferred CNodes with debug info.
#include "core/trace/graph_emitter.h"

#include "core/ir/anf.h"
#include "core/ir/error.h"
#include "ops/op.h"

namespace loom::trace {

ir::Node* GraphEmitter::node_of(const ops::Var& v) {
  if (v.is_node()) {
    ir::Node* n = v.node();
    if (n->graph() != target_ && !n->is_value() && !foreign_) {
      throw InternalError("GraphEmitter: expected a node of @" + target_->name() + ", got one of @" +
                          (n->graph() ? n->graph()->name() : std::string("?")));
    }
    if (n->graph() != target_ && n->is_value()) {
      return target_->add_value(static_cast<ir::ValueNode*>(n)->value());
    }
    return n;
  }
  if (v.is_value()) return target_->add_value(v.value());
  throw InternalError("GraphEmitter: expected a defined Var, got none");
}

ops::Var GraphEmitter::emit(std::string_view op, const std::vector<ops::Var>& args,
                            ir::Primitive::Attrs attrs) {
  ir::PrimitivePtr prim = ops::make_op(op, std::move(attrs));
  std::vector<ir::Node*> inputs;
  std::vector<ir::AbstractPtr> abstracts;
  bool known = true;
  for (const ops::Var& a : args) {
    ir::Node* n = node_of(a);
    inputs.push_back(n);
    abstracts.push_back(n->abstract());
    known = known && n->abstract() != nullptr;
  }
  // Inferred before the node is added, so that a failing op leaves no half-built node behind.
  ir::AbstractPtr out = known ? ops::infer(*prim, abstracts, where_) : nullptr;
  ir::CNode* c = target_->add_call(prim, inputs, debug_for(op));
  c->set_abstract(std::move(out));
  return ops::Var(static_cast<ir::Node*>(c));
}

ops::Var GraphEmitter::constant(ir::Value value) {
  return ops::Var(static_cast<ir::Node*>(target_->add_value(std::move(value))));
}

ir::AbstractPtr GraphEmitter::abstract_of(const ops::Var& v) {
  if (v.is_node()) return v.node()->abstract();
  if (v.is_value()) return ir::Abstract::of_value(v.value());
  return nullptr;
}

}  // namespace loom::trace
