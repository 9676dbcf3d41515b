// A loom graph as a TensorFlow GraphDef, for TensorBoard's graph tab. The Cell scopes become
// name scopes: each CNode becomes a NodeDef named "<cell path>/<op>_<n>", where the cell path is
// its DebugInfo scope without the trailing op name ("LeNet5/conv1/Conv2D" → "LeNet5/conv1") and
// n counts that op in that path from 0 ("LeNet5/conv1/Conv2D_0"); a CNode without scope sits at
// the top level ("MatMul_0"). op is the primitive's name (a called graph appears as
// "Call:<graph name>"). Inputs are the producers' names (":k" for output k > 0 of a compiled
// launch). Graph parameters become op "Parameter" nodes named after the parameter (attribute
// is_weight = true for a parameter with a default value); constants become op "Const" nodes
// "<consumer's cell path>/Const_<n>" with the value's text in attribute "value" (cut at 80
// characters). Tensor-valued nodes carry "_output_shapes". Names keep [A-Za-z0-9_.\-/]; other
// characters become '_'.
#pragma once

#include "summary/proto/tensorboard.pb.h"

namespace loom::ir {
class FuncGraph;
}
namespace loom::runtime {
class Executable;
}

namespace loom::summary {

tb::GraphDef graph_def_from(const ir::FuncGraph& graph);
// A compiled plan: one node per launch, in launch order, named from the launch's scope the same
// way; parameter buffers become "Parameter" nodes "input_<i>", constant buffers "Const" nodes.
tb::GraphDef graph_def_from(const runtime::Executable& exe);

}  // namespace loom::summary
