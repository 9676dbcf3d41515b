/// \file
/// Observers: code that watches a compiled function run, launch by launch — the debugger's dumps
/// and watchpoints, the profiler, tests. Any number may be installed on a compiled function
/// (runtime::CompiledFunction, and through it Cell, Model and TrainOneStepCell); each gets a call
/// before and after every kernel launch of the step, the launches of nested If / While plans and
/// of graphs that run through the interpreter included, in execution order.
///
///     class Count : public runtime::Observer {
///      public:
///       void after_launch(const runtime::LaunchEvent& e) override {
///         ++launches[std::string(e.op)];
///       }
///       std::map<std::string, int> launches;
///     };
///     auto count = std::make_shared<Count>();
///     train_step.add_observer(count);
///
/// What an event says: the node's op, name, Cell scope and source line; its role (forward,
/// backward with the scope of the forward node it differentiates, optimizer); its input and
/// output tensors (flattened) and, after the launch, the time it took. An If or While is one
/// launch whose before and after enclose the launches of the branch or loop it runs (depth + 1).
///
/// Observers must not change the tensors. With in-place reuse (the default plan), an output may
/// share its buffer with an input that is dead afterwards, so after_launch can see that input
/// already overwritten; an observer that reads inputs after the launch returns true from
/// needs_intact_inputs(), and the function is then compiled without in-place reuse (a second
/// plan: its memory is larger, its results the same). With no observer installed a launch costs
/// one branch more than without the feature (bench/README.md, "Observers").
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "core/ir/anf.h"
#include "core/ir/tensor.h"
#include "core/ir/value.h"

namespace loom::runtime {

/// One kernel launch (or If / While launch), as before_launch and after_launch see it.
struct LaunchEvent {
  std::size_t index;        ///< position in its plan's launch order (or graph's evaluation order)
  int depth;                ///< 0 for the function's own launches, +1 inside each If / While
  std::string_view graph;   ///< the graph whose plan holds the launch
  std::string_view op;      ///< the primitive's name
  std::string_view name;    ///< the node's name ("" when unnamed)
  const ir::DebugInfo& debug;  ///< scope, file, line, role, forward
  std::span<const Tensor> inputs;   ///< the launch's input tensors (tuples flattened)
  /// The launch's output tensors (tuples flattened); empty in before_launch for a graph that runs
  /// through the interpreter.
  std::span<const Tensor> outputs;
  std::int64_t elapsed_ns;  ///< after_launch: the launch's wall time; before_launch: -1
  /// The node's label in its graph's IR text (ir::cnode_labels: "%3" prints as "3"): the same in
  /// graph and PyNative mode, and in every run of the program.
  std::string_view label;
  const ir::FuncGraph* func_graph;  ///< the graph whose plan holds the launch
  const ir::Primitive* prim;        ///< the primitive, attributes complete
};

/// One run of a compiled function's program: the launches between run_begin and run_end are its
/// own (nested If / While launches included).
struct RunEvent {
  std::string_view function;     ///< FunctionOptions::name: "train_step", "eval", a Cell's name
  const ir::FuncGraph& graph;    ///< the program's graph as compiled (after the pipeline)
  std::span<const ir::Value> args;  ///< the arguments given, for graph.parameters() in order
                                    /// (trailing parameters left out take their defaults)
  const ir::Value* result;          ///< run_end: the program's output; run_begin: null
};

/// Code that watches a compiled function run (runtime/observer.h); every hook does nothing unless
/// overridden.
class Observer {
 public:
  virtual ~Observer() = default;
  /// Around each run of a program (runtime::CompiledFunction::run). run_end is not called when a
  /// launch throws.
  ///@{
  virtual void run_begin(const RunEvent& event) {}
  virtual void run_end(const RunEvent& event) {}
  ///@}
  /// Around each launch, in execution order; after_launch's event carries the launch's time.
  ///@{
  virtual void before_launch(const LaunchEvent& event) {}
  virtual void after_launch(const LaunchEvent& event) {}
  ///@}
  /// True when after_launch reads the launch's inputs: the function is then compiled without
  /// in-place reuse, so that they stay intact.
  virtual bool needs_intact_inputs() const { return false; }
};

/// Observers, called in order.
using ObserverList = std::vector<std::shared_ptr<Observer>>;

/// Calls every observer of `list` in order: its before_launch, after_launch, run_begin or
/// run_end hook.
///@{
inline void notify_before(const ObserverList& list, const LaunchEvent& e) {
  for (const auto& o : list) o->before_launch(e);
}
inline void notify_after(const ObserverList& list, const LaunchEvent& e) {
  for (const auto& o : list) o->after_launch(e);
}
inline void notify_run_begin(const ObserverList& list, const RunEvent& e) {
  for (const auto& o : list) o->run_begin(e);
}
inline void notify_run_end(const ObserverList& list, const RunEvent& e) {
  for (const auto& o : list) o->run_end(e);
}
///@}

/// Process-wide default observers: every runtime::CompiledFunction made afterwards starts with
/// them (a context setting such as debug::set_check_numerics). Thread-safe. add_default_observer
/// throws ValueError for a null observer.
void add_default_observer(std::shared_ptr<Observer> observer);
/// Removes `observer` from the defaults (functions made before keep it); nothing when it is not
/// one. Thread-safe.
void remove_default_observer(const Observer* observer);
/// A copy of the current default observers. Thread-safe.
ObserverList default_observers();

}  // namespace loom::runtime
