/// \file
/// A function compiled once per input signature: the one cache of compiled programs that every
/// caller of the runtime uses — a graph-mode call of a Cell, Model's evaluation, the training
/// step (nn/), MindIR's GraphCell, and later the Python module.
///
/// The caller supplies a builder: given the signature (the abstracts of the arguments it will
/// pass), it makes the program — traces a Cell, differentiates it, appends the optimizer's
/// update — and may dump those stages. The CompiledFunction then runs the pipeline of passes
/// (core/passes/pipeline.h: the purpose's, or a caller's --passes text), dumping every stage
/// when a save_graphs directory is set, compiles the result (runtime::compile) with the donations
/// the builder asked for, and caches it by signature. Later calls with the same signature run the
/// cached plan. Observers (runtime/observer.h) installed here reach every plan, nested ones and
/// interpreted graphs included.
///
///     runtime::CompiledFunction f(
///         [&](const std::vector<ir::AbstractPtr>& sig,
///             const runtime::CompiledFunction::Dump& dump) {
///           runtime::Program p = ...;  // p.module, p.graph, p.donate
///           dump(*p.module, "traced");
///           return p;
///         },
///         {.name = "step", .purpose = passes::Purpose::kTrain});
///     CompiledFunction::Entry& e = f.entry({Abstract::tensor(kFloat32, {32, 1, 32, 32}), ...});
///     ir::Value out = f.run(e, args);
///
/// Donation: an output leaf donated to a parameter ends up in that argument's storage after
/// run(), written in place where the plan allows it and copied otherwise, also when the graph
/// runs through the interpreter — so a caller never writes results back by hand.
///
/// Dumps: with save_graphs_dir D, the first program goes to `D/<name>/`, a program for another
/// signature to `D/<name>_1/`, ...: `NN_<stage>.ir` (parses back with ir-opt) and
/// `NN_<stage>.dot`.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/ir/abstract.h"
#include "core/ir/value.h"
#include "core/passes/pipeline.h"
#include "runtime/executable.h"
#include "runtime/observer.h"

namespace loom::ir {
class Module;
class FuncGraph;
}  // namespace loom::ir

namespace loom::backend {
class Backend;
}  // namespace loom::backend

namespace loom::runtime {

/// What a builder makes for one signature.
struct Program {
  /// An empty program (no module, no graph).
  Program();
  /// A program of `graph` inside `module` (null for a graph owned elsewhere, as of_graph's are),
  /// with its donations and the builder's bookkeeping (the members below).
  Program(std::unique_ptr<ir::Module> module, ir::FuncGraph* graph,
          std::vector<std::pair<std::size_t, std::size_t>> donate = {},
          std::shared_ptr<void> info = nullptr);
  ~Program();
  /// Movable, not copyable.
  ///@{
  Program(Program&&) noexcept;
  Program& operator=(Program&&) noexcept;
  ///@}

  std::unique_ptr<ir::Module> module;  ///< owns everything below
  ir::FuncGraph* graph = nullptr;      ///< the function to run (the module's entry)
  /// (output leaf, parameter): output leaves (tuples flattened) written into arguments.
  std::vector<std::pair<std::size_t, std::size_t>> donate;
  std::shared_ptr<void> info;          ///< the builder's own bookkeeping for this signature

  /// `info` as the builder's own type `T` (unchecked: it must be a `T`).
  template <class T>
  T& info_as() const { return *static_cast<T*>(info.get()); }
};

/// How a CompiledFunction builds, compiles and runs its programs.
struct FunctionOptions {
  std::string name = "function";   ///< the function's name: its dump folder's, its RunEvent's
  passes::Purpose purpose = passes::Purpose::kEval;  ///< picks the pipeline (unless `passes`)
  std::string passes;              ///< replaces the purpose's pipeline when not empty
  backend::Backend* backend = nullptr;  ///< null: the CPU
  bool interpret = false;          ///< run the graph through the interpreter (PyNative)
  std::string save_graphs_dir;     ///< "" = no dumps
  std::int64_t max_loop_iterations = 10'000'000;  ///< CompileOptions::max_loop_iterations
  /// Shared with other functions that never run at the same time (runtime::SharedArena).
  std::shared_ptr<SharedArena> shared_arena;
};

/// A function compiled once per input signature and cached (runtime/compiled_function.h).
class CompiledFunction {
 public:
  /// Dumps a stage of the program under `label` (the next `NN_<label>.ir` and `.dot` of its dump
  /// folder); does nothing without a save_graphs directory.
  using Dump = std::function<void(const ir::Module&, const std::string& label)>;
  /// The builder: makes the Program for `signature`, dumping its stages through `dump`.
  using Build =
      std::function<Program(const std::vector<ir::AbstractPtr>& signature, const Dump& dump)>;

  /// One cached signature: its program and the plan compiled from it.
  struct Entry {
    Program program;                 ///< what the builder made, after the passes
    std::unique_ptr<Executable> exe;  ///< the compiled plan
    std::size_t observers_version = 0;  ///< which observer list the plan has (kept by run())
  };

  /// A function of `build`, with no program compiled yet; starts with the default observers
  /// (add_default_observer). Throws ValueError when `build` is empty.
  explicit CompiledFunction(Build build, FunctionOptions options = {});
  ~CompiledFunction();
  CompiledFunction(const CompiledFunction&) = delete;
  CompiledFunction& operator=(const CompiledFunction&) = delete;

  /// A graph compiled as it is, re-inferred for each signature (MindIR's GraphCell, tests). The
  /// graph must outlive the function.
  static std::unique_ptr<CompiledFunction> of_graph(ir::FuncGraph* graph,
                                                    FunctionOptions options = {});

  /// The entry of `signature` (and `variant`: what else the program depends on, such as the
  /// training flag), built, passed through the pipeline and compiled on first use. Errors of the
  /// builder, the passes or the compiler propagate, and nothing is cached for the signature.
  Entry& entry(const std::vector<ir::AbstractPtr>& signature, std::string_view variant = {});
  /// Runs an entry on `args` (the graph's parameters in order; trailing weights may be left out
  /// and take their defaults).
  ir::Value run(Entry& entry, std::vector<ir::Value> args);
  /// entry() for the arguments' own signature, then run().
  ir::Value operator()(std::vector<ir::Value> args, std::string_view variant = {});

  /// Adds an observer of every plan of this function (called in order of installation); throws
  /// ValueError when it is null. A run in progress keeps the list it started with.
  void add_observer(std::shared_ptr<Observer> observer);
  /// Removes `observer` (nothing when it is not installed).
  void remove_observer(const Observer* observer);
  /// The installed observers, in order of installation.
  const ObserverList& observers() const { return *observers_; }

  /// Replace the pipeline (its text checked at once: set_passes throws on a malformed one) / the
  /// dump folder / interpretation: the cached programs are dropped (by set_interpret only when
  /// the setting changes).
  ///@{
  void set_passes(std::string pipeline);
  void set_save_graphs_dir(std::string dir);
  void set_interpret(bool interpret);
  ///@}
  /// The options, as the setters have changed them.
  const FunctionOptions& options() const { return options_; }
  /// Plans compiled from now on take their arena from `arena` (FunctionOptions::shared_arena).
  void share_arena(std::shared_ptr<SharedArena> arena) { options_.shared_arena = std::move(arena); }

  /// How many programs have been compiled so far (not reset by clear()).
  std::size_t num_compilations() const { return num_compilations_; }
  /// Seconds spent building, running the pipeline and compiling, summed over the programs.
  double compile_seconds() const { return compile_seconds_; }
  /// Ops of the compiled programs that computed in Float32 for want of a Float16 / BFloat16
  /// kernel on the backend (passes::compute_low_precision_in_float32, run after the pipeline:
  /// their values are rounded to the low dtype after each op, so the numerics are the low
  /// dtype's and only the speed is not). Sorted; empty when every op had its kernel.
  const std::vector<std::string>& float32_fallbacks() const { return float32_fallbacks_; }
  /// The entry the last run() used (null before the first).
  const Entry* last() const { return last_; }
  /// Drops the cached programs (the next call of each signature builds and compiles again) and
  /// numbers the dump folders from the start again.
  void clear();

 private:
  Build build_;
  FunctionOptions options_;
  std::map<std::string, std::unique_ptr<Entry>> cache_;
  std::shared_ptr<ObserverList> observers_;
  std::size_t observers_version_ = 1;
  std::size_t num_compilations_ = 0;
  std::size_t num_programs_ = 0;  ///< numbers the dump folders
  double compile_seconds_ = 0;
  std::vector<std::string> float32_fallbacks_;
  Entry* last_ = nullptr;
};

}  // namespace loom::runtime
