// Type/shape inference with specialization (the `infer` pass).
//
// Starting from the entry graph's parameter abstracts (and weights' default values), gives
// every node an abstract, calling ops::infer for primitives. A graph called with argument
// abstracts it was not yet inferred for is specialized: cloned, and the call redirected to the
// clone, so every graph in the result has one signature. If takes the join of its branches'
// outputs (dims that differ become -1); While iterates until the loop state's abstracts are
// stable (widening differing dims to -1). Recursive calls are solved by fixed-point iteration
// starting from "no value yet". Errors name the op, the node's scope and the shapes.
#pragma once

#include <vector>

#include "core/ir/abstract.h"

namespace loom::ir {
class Module;
class FuncGraph;
class Node;
}  // namespace loom::ir

namespace loom::passes {

// Infers `graph` for the given parameter abstracts (missing ones: the parameters' current
// abstracts), annotating nodes in place and specializing callees. Returns the output abstract.
ir::AbstractPtr infer_graph(ir::FuncGraph* graph, const std::vector<ir::AbstractPtr>& args = {});

// The abstract of `n` in a first-order graph being built (a model reader's), inferred on the
// spot from its inputs' (recursively; parameters and values have theirs) and stored on the
// nodes; null when an input's is unknown, a call is not of a primitive, or ops::infer fails
// (the graph's later inference reports it).
ir::AbstractPtr infer_node(ir::Node* n);

// The `infer` pass: infer_graph(module.entry()). Returns true when any abstract changed.
bool infer_module(ir::Module& module);

}  // namespace loom::passes
