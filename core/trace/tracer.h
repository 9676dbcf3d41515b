/// \file
/// Tracing: recording calls of ops as a graph. A construct body (nn::Cell) calls ops through the
/// current emitter; while a Tracer is pushed, that emitter appends inferred CNodes to the traced
/// graph (GraphEmitter), each with the Cell path and the op as its scope ("LeNet5/fc1/MatMul")
/// and the user's source line. This room keeps the per-thread state tracing needs — the emitter
/// stack, the scope stack, the current source sites — and the Tracer itself: the graph, the
/// weights it has made parameters of, and the state assignments recorded while tracing. nn/
/// decides what a Cell, a parameter and a user call site are; it tells this room through the
/// guards below.
///
/// ```
/// trace::Tracer t(graph);
/// trace::EmitterScope active(t);                    // t is trace::current() on this thread
/// { trace::ScopeGuard cell("LeNet5"); ... }          // nodes get scope "LeNet5/<op>"
/// ir::Parameter* w = t.weight(&param, "fc1.weight", value);
/// ```
#pragma once

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/ir/anf.h"
#include "core/trace/graph_emitter.h"
#include "ops/emitter.h"

namespace loom::trace {

/// A source location the user would recognise: file relative to the project root, line; file ""
/// for none.
struct Site {
  std::string file;  ///< The file, relative to the project root; "" for none.
  int line = 0;      ///< The line in that file.
};

/// The emitter on top of this thread's stack, or null when nothing is pushed (PyNative: nn/ then
/// runs ops eagerly).
ops::Emitter* current();

/// Pushes an emitter for the lifetime of the scope (this thread only).
class EmitterScope {
 public:
  /// Pushes `emitter`; the destructor pops it.
  explicit EmitterScope(ops::Emitter& emitter);
  ~EmitterScope();
  EmitterScope(const EmitterScope&) = delete;
  EmitterScope& operator=(const EmitterScope&) = delete;
};

/// The scope path of this thread ("LeNet5/fc1"), "" outside any scope.
std::string current_scope();
/// The depth of this thread's scope stack (0: no Cell is running).
std::size_t scope_depth();

/// Pushes one scope name for the lifetime of the guard; the site the nodes inside get is `site`
/// when given (a Cell called from user code), else the enclosing one; an op site set outside no
/// longer applies inside.
class ScopeGuard {
 public:
  /// Pushes `name` and, when `site` is not null, makes `*site` the current site; the destructor
  /// pops the name and restores the sites that were current before.
  ScopeGuard(std::string name, const Site* site);
  ~ScopeGuard();
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;

 private:
  Site saved_site_;
  const Site* saved_op_site_;
};

/// While it lives, nodes emitted get `site` (a free function's own user call site) instead of
/// the enclosing Cell's; a null site changes nothing.
class OpSiteGuard {
 public:
  /// Makes `site` the current op site unless it is null; the destructor restores the previous.
  explicit OpSiteGuard(const Site* site);
  ~OpSiteGuard();
  OpSiteGuard(const OpSiteGuard&) = delete;
  OpSiteGuard& operator=(const OpSiteGuard&) = delete;

 private:
  const Site* saved_;
};

/// Whether an error's context (" (in <path>)") was already appended by an inner scope; the
/// innermost Cell appends it once.
bool& error_has_path();

/// The emitter of a trace: a GraphEmitter whose nodes get the thread's scope path with the op
/// name and the current site, and which makes weights and records assignments.
class Tracer final : public GraphEmitter {
 public:
  /// The tracer of a top-level trace, appending to `graph`.
  explicit Tracer(ir::FuncGraph* graph) : GraphEmitter(graph) {}
  /// The tracer of a branch or loop body graph inside `parent`'s trace: its weights are the
  /// parent's nodes (the control-flow builder lifts them into parameters), and it records no
  /// assignments of its own.
  Tracer(ir::FuncGraph* graph, Tracer* parent) : GraphEmitter(graph), parent_(parent) {
    allow_foreign_nodes(true);
  }
  /// The tracer of the enclosing trace; null for a top-level tracer.
  Tracer* parent() const { return parent_; }

  /// The graph parameter standing for the weight `key` (an nn::Parameter), made on first use:
  /// named `name`, with `value` as its default, appended after the graph's inputs.
  ir::Parameter* weight(const void* key, const std::string& name, const Tensor& value);
  /// The keys of the weights this tracer made, in the order their parameters were appended
  /// (empty for a branch or loop body tracer, whose weights are its parent's).
  const std::vector<const void*>& weight_order() const { return weight_order_; }

  /// Records an assignment (a state update) of `value` to `key` while tracing; a second assign
  /// of the same key replaces the value. Throws ValueError in a branch or loop body tracer.
  void assign(const void* key, const ops::Var& value);
  /// The value assigned to `key` so far, or null.
  const ops::Var* assigned(const void* key) const;
  /// The assignments recorded while tracing, as (key, value), in order of their first assign.
  const std::vector<std::pair<const void*, ops::Var>>& assignments() const { return assigned_; }

  /// The debug info a node of `op` gets now: the scope path with the op, the current site.
  ir::DebugInfo debug_for(std::string_view op) override;

 private:
  Tracer* parent_ = nullptr;
  std::unordered_map<const void*, ir::Parameter*> weights_;
  std::vector<const void*> weight_order_;
  std::vector<std::pair<const void*, ops::Var>> assigned_;
};

/// The Tracer pushed most recently on this thread (null when not tracing). Cells check that it is
/// also current(): an emitter pushed inside a trace sees plain values.
Tracer* current_tracer();

/// Pushes a Tracer as the current emitter and current tracer for the lifetime of the guard.
class TracerScope {
 public:
  /// Pushes `tracer`; the destructor pops it and restores the previous current tracer.
  explicit TracerScope(Tracer& tracer);
  ~TracerScope();
  TracerScope(const TracerScope&) = delete;
  TracerScope& operator=(const TracerScope&) = delete;

 private:
  Tracer* saved_;
};

}  // namespace loom::trace
