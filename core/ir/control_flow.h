/// \file
/// Building structured control flow inside a graph from C++: cond() makes an If, while_loop() a
/// While, each with graph-valued branches or bodies built by C++ callbacks. A callback may use
/// nodes of the enclosing graph (it "captures" them, as a lambda would); those are lambda-lifted
/// into extra parameters of the branch graph and passed as extra arguments, so the IR stays
/// first-order with no free variables.
///
/// ```
/// Node* y = cond(g, pred, {x},
///     [&](FuncGraph* b, const std::vector<Node*>& p) { return b->add_call(relu, {p[0]}); },
///     [&](FuncGraph* b, const std::vector<Node*>& p) { return b->add_call(mul, {p[0], w}); });
/// // w (a node of g) became a parameter of the else-branch and an argument of the If.
/// ```
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace loom::ir {

class FuncGraph;
class Node;

/// Builds the body of a branch / loop graph from its parameters; returns the graph's output.
using GraphBodyFn = std::function<Node*(FuncGraph* graph, const std::vector<Node*>& params)>;

/// If(pred, \@then, \@else, args..., captures...) in `graph`. Both branches take one parameter
/// per arg (plus the captures of either branch) and return a value of the same kind. The branch
/// graphs are new graphs of the module, named after `graph` and `name`. Returns the If node;
/// throws ValueError when a callback returns null.
Node* cond(FuncGraph* graph, Node* pred, const std::vector<Node*>& args, const GraphBodyFn& then_fn,
           const GraphBodyFn& else_fn, const std::string& name = "if");

/// While(\@cond, \@body, init..., captures...) in `graph`. The loop state is the tuple of the
/// inits; cond_fn returns a Bool predicate from the state; body_fn returns the next state's values
/// (one per init). Captured values join the state as loop-invariant elements (the body passes
/// them through unchanged). Returns the While node: a tuple of the final state, inits first.
/// Throws ValueError when body_fn does not return one value per init or a callback returns null.
Node* while_loop(FuncGraph* graph, const std::vector<Node*>& init, const GraphBodyFn& cond_fn,
                 const std::function<std::vector<Node*>(FuncGraph*, const std::vector<Node*>&)>&
                     body_fn,
                 const std::string& name = "while");

/// Makes every node of another graph that `graph` uses a new parameter of `graph` (appended),
/// returning the captured nodes in parameter order; a constant of another graph is copied into
/// `graph` instead. Used by cond/while_loop; exposed for tracers.
std::vector<Node*> lift_captures(FuncGraph* graph);

}  // namespace loom::ir
