/// \file
/// The reference interpreter: evaluates any FuncGraph on concrete values by running each node's
/// kernel eagerly — graph calls, If, While, recursion, tuples. Slow and simple on purpose: it is
/// the oracle the compiled runtime must agree with, and the executor of PyNative-style
/// debugging.
///
///     Value y = interpret(*module.entry(), {Value::tensor(x)});
///
/// Parameters beyond the given arguments take their default value (weights); a missing argument
/// without a default is a ValueError naming the parameter.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/ir/value.h"
#include "runtime/observer.h"

namespace loom::ir {
class FuncGraph;
class CNode;
}  // namespace loom::ir

namespace loom::runtime {

/// Limits and hooks of one interpret() call.
struct InterpretOptions {
  /// Deeper graph-call nesting (runaway recursion) is an error, not a stack overflow.
  int max_call_depth = 2000;
  /// A While running more iterations than this is an error, not a hang.
  std::int64_t max_loop_iterations = 10'000'000;
  /// Called after every cnode is evaluated (tests).
  std::function<void(const ir::CNode&, const ir::Value&)> on_node;
  /// Called around every kernel launch, If and While (runtime/observer.h): the events of a
  /// compiled plan, at `depth` (+1 inside each If / While).
  const ObserverList* observers = nullptr;
  int depth = 0;  ///< the depth of the graph's own events (a nested plan's: its parent's + 1)
};

/// Evaluates `graph` on `args` and returns its output. Throws ValueError for too many arguments,
/// a missing one without a default, nesting beyond max_call_depth or a While beyond
/// max_loop_iterations, and the errors of the ops it runs.
ir::Value interpret(const ir::FuncGraph& graph, const std::vector<ir::Value>& args,
                    const InterpretOptions& options = {});

}  // namespace loom::runtime
