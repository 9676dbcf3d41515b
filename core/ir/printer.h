/// \file
/// The text form of the IR (grammar in docs/ir.md). print → parse → print gives the same text.
///
/// ```
/// # IR entry: @main
/// # Total subgraphs: 1
///
/// subgraph @main(%x: <Tensor[Float32], (2, 3)>) {
///   %0 = ReLU(%x) : <Tensor[Float32], (2, 3)> scope("Net/relu")
///   Return(%0)
/// }
/// ```
#pragma once

#include <string>
#include <unordered_map>

namespace loom::ir {

class Module;
class FuncGraph;
class Node;
class CNode;
class Value;

/// Options of the printers.
struct PrintOptions {
  /// When set, the line defining this node is marked with ">>" in the left margin (used by
  /// error messages; marked text does not parse back).
  const Node* highlight = nullptr;
};

/// The text of the module's entry graph and every graph reachable from it (only the two header
/// lines when the module has no entry).
std::string print_module(const Module& module, const PrintOptions& options = {});
/// The text of one graph alone (graph values it uses appear by name, as `@name`).
std::string print_graph(const FuncGraph& graph, const PrintOptions& options = {});
/// A constant as it appears in an argument list: I64(3), F32(0.5), "s", (1, 2), Tensor(...).
std::string print_value(const Value& value);

/// How the printer labels the graph's cnodes (without the `%`): a named node by its name, an
/// unnamed one by its number among the unnamed in topo_order(). Stable for a graph that does not
/// change: dumps and observers name nodes this way, so that "Conv2D-op3" is `%3` in the IR text.
std::unordered_map<const CNode*, std::string> cnode_labels(const FuncGraph& graph);

}  // namespace loom::ir
