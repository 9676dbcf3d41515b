// The pass framework: named module-to-module rewrites, a registry of them, and a PassManager
// that runs a pipeline of them with verification and timing.
//
// A pass is `bool run(ir::Module&)`: it rewrites the module in place through ir::Manager and
// returns whether it changed anything. Its name is its file name and its ir-opt flag
// (core/passes/simplify.cc, "simplify", `ir-opt --passes=simplify`), in snake_case.
//
//   PassManager pm = PassManager::parse("inline,repeat(simplify,dce)");
//   bool changed = pm.run(module);   // verifies after each pass when options().verify
//   std::cerr << pm.timing_report();
//
// docs/passes.md lists the passes with one line each.
//
// Dumps: with set_save_graphs_dir("dumps"), run() writes the module before the first pass and
// after every pass run (the file naming of MindSpore's save_graphs):
//   dumps/00_input.ir, dumps/01_inline.ir, dumps/01_inline.dot, dumps/02_simplify.ir, ...
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace loom::ir {
class Abstract;
class Manager;
class Module;
class FuncGraph;
class Node;
class Primitive;
class Value;
}  // namespace loom::ir

namespace loom::passes {

struct PassInfo {
  std::string name;     // snake_case; equal to the pass's file name and ir-opt flag
  std::string summary;  // one line: what it does
  std::function<bool(ir::Module&)> run;  // true when the module changed
};

class PassRegistry {
 public:
  // The registry of the built-in passes (filled on first use).
  static const PassRegistry& global();

  // Throws InternalError for a name that is not snake_case, a duplicate, or a missing run.
  void add(PassInfo info);
  const PassInfo* find(std::string_view name) const;  // null when absent
  // Throws ValueError("expected a pass of (dce, infer, inline, simplify), got 'foo'") when absent.
  const PassInfo& get(std::string_view name) const;
  // Every pass, sorted by name.
  std::vector<const PassInfo*> all() const;
  // "dce, infer, inline, simplify": the sorted names, for messages and usage text.
  std::string names() const;

 private:
  std::vector<std::unique_ptr<PassInfo>> passes_;
};

// The skeleton of the graph-by-graph passes: runs `rewrite` on every graph reachable from the
// module's entry, with one Manager for all of them; true when any call changed something.
bool rewrite_graphs(ir::Module& module,
                    const std::function<bool(ir::Manager&, ir::FuncGraph&)>& rewrite);

// The built-in passes, one file each; PassRegistry::global() calls these (an explicit list
// rather than static registration objects, which static libraries would drop).
void register_inline(PassRegistry& registry);
void register_simplify(PassRegistry& registry);
void register_dce(PassRegistry& registry);
void register_cse(PassRegistry& registry);
void register_fold_constants(PassRegistry& registry);
void register_fuse(PassRegistry& registry);
void register_recompute(PassRegistry& registry);
void register_combine_updates(PassRegistry& registry);

// How fold_constants computes an op on constant arguments. core/passes comes before the
// backends and cannot call a kernel itself, so whoever links a backend installs one:
//
//   passes::set_constant_evaluator([](const ir::Primitive& p, const std::vector<ir::Value>& a) {
//     return backend::run_op(p, a);
//   });
//
// It returns the op's result, or throws a loom::Error (no kernel for the dtype, bad arguments),
// which leaves the node unfolded. Without one (the default), fold_constants changes nothing.
// Process-wide; an empty function uninstalls it.
using ConstantEvaluator =
    std::function<ir::Value(const ir::Primitive&, const std::vector<ir::Value>&)>;
void set_constant_evaluator(ConstantEvaluator evaluator);
const ConstantEvaluator& constant_evaluator();

// How long one pipeline slot took, summed over its runs (a slot inside a repeat group runs once
// per round).
struct PassTiming {
  std::string name;
  int runs = 0;
  int changed_runs = 0;  // runs that reported a change
  double seconds = 0;
};

// Whether a PassManager verifies after every pass unless told otherwise: true in debug builds
// and whenever the LOOM_VERIFY_IR build option is on (its default, so tests always verify);
// false only in a release build configured with -DLOOM_VERIFY_IR=OFF.
bool verify_by_default();

struct PassManagerOptions {
  // ir::verify after the input is read and after every pass.
  bool verify = verify_by_default();
  // Write NN_input.ir before the first pass when dumping (a caller that dumped the stages
  // before the pipeline itself turns it off).
  bool dump_input = true;
  // A repeat group that still changes the module after this many rounds is a bug in a pass
  // (rewrites that undo each other); run() throws InternalError instead of looping forever.
  int max_rounds = 32;
};

class PassManager {
 public:
  using Options = PassManagerOptions;

  explicit PassManager(Options options = {},
                       const PassRegistry& registry = PassRegistry::global());

  // Parses a pipeline: a comma list of pass names and repeat groups, e.g.
  // "inline,repeat(simplify,dce)". A repeat group runs its passes in order, round after round,
  // until a round changes nothing. Whitespace around names is ignored. Throws ValueError for an
  // unknown name ("expected a pass of (dce, infer, inline, simplify), got 'foo'") or malformed text.
  static PassManager parse(std::string_view pipeline, Options options = {},
                           const PassRegistry& registry = PassRegistry::global());

  // Appends one pass; throws ValueError for an unknown name.
  PassManager& add(std::string_view name);
  // Appends a group repeated to a fixed point; throws ValueError for an unknown name or an
  // empty group.
  PassManager& add_repeat(const std::vector<std::string>& names);

  // Runs the pipeline once over `module`; true when any pass changed it. With options().verify,
  // an invalid module throws ir::VerifyError naming the pass after which it became invalid.
  // Timings accumulate over calls.
  bool run(ir::Module& module);

  // Dumps the module into `dir` (created when missing) as run() goes: NN_input.ir before the
  // first pass, then NN_<pass>.ir and NN_<pass>.dot after every pass run, NN a running index
  // ("00", "01", ..., more digits past 99) that keeps counting across the rounds of a repeat
  // group and across calls of run(). Throws FormatError naming the path when the directory
  // cannot be created or a file cannot be written. An empty path turns dumps off.
  PassManager& set_save_graphs_dir(std::string dir);
  const std::string& save_graphs_dir() const { return save_graphs_dir_; }
  // Writes NN_<label>.ir and .dot into the save_graphs directory now (when one is set), in the
  // same numbering: the stages a caller makes before the pipeline (the traced forward graph,
  // its gradient) come first.
  void dump(const ir::Module& module, const std::string& label) {
    save_graphs(module, label, /*with_dot=*/true);
  }

  const Options& options() const { return options_; }
  // The pipeline as text, in the form parse() reads: "inline,repeat(simplify,dce)".
  std::string pipeline() const;
  // One entry per pipeline slot, in pipeline order.
  const std::vector<PassTiming>& timings() const { return timings_; }
  // A table of timings() with a total line, for `ir-opt --timing`.
  std::string timing_report() const;

 private:
  struct Step {
    std::vector<std::size_t> slots;  // indices into passes_ / timings_
    bool repeat = false;
  };
  std::size_t add_slot(std::string_view name);
  bool run_slot(std::size_t slot, ir::Module& module);
  // Writes NN_<label>.ir (and .dot when `with_dot`) into save_graphs_dir_, when set.
  void save_graphs(const ir::Module& module, const std::string& label, bool with_dot);

  Options options_;
  const PassRegistry* registry_;
  std::vector<const PassInfo*> passes_;  // one per slot
  std::vector<PassTiming> timings_;      // one per slot
  std::vector<Step> steps_;
  std::string save_graphs_dir_;
  int save_graphs_index_ = 0;  // the NN of the next dump
};

// ---- Helpers shared by the passes ----------------------------------------------------------

using NameSet = std::unordered_set<std::string>;

// The names a new cnode of `graph` must avoid: its parameters' and its live cnodes' names.
NameSet graph_names(const ir::FuncGraph& graph);
// `base` when it is not in `taken`, else the first free base_1, base_2, ...; the result is
// added to `taken`. An empty base stays empty (an unnamed node never clashes).
std::string unique_name(const std::string& base, NameSet& taken);

// True when abstracts `a` and `b` may describe one value: either is null, or one accepts the
// other (the same facts, or unknown dims or rank on one side where the other knows them).
bool compatible(const std::shared_ptr<const ir::Abstract>& a,
                const std::shared_ptr<const ir::Abstract>& b);
// Called before `by` takes the place of `node`: when `by` is a cnode whose abstract is missing or
// less precise than node's, it gets node's (what was known about the value still holds).
// Parameters and constants are never changed: a parameter's abstract is its graph's signature.
void keep_precise_abstract(const ir::Node& node, ir::Node& by);

// Copies the live body of `source` (the cnodes of its topo_order()) into `target` and returns
// the node of `target` that stands for source's output. Each copy keeps its callee, attributes,
// abstract and debug info, and its name unless `taken` holds it (then unique_name). Inputs are
// mapped: a parameter of `source` through `params`, which must map every parameter the body
// uses; a constant to a new constant of `target` (constants belong to one graph); a cnode to
// its copy. `source` itself is left unchanged.
using NodeMap = std::unordered_map<const ir::Node*, ir::Node*>;
ir::Node* copy_body(const ir::FuncGraph& source, ir::FuncGraph& target, const NodeMap& params,
                    NameSet& taken);

}  // namespace loom::passes
