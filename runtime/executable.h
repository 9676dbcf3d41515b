/// \file
/// The compiled runtime: a first-order, inferred FuncGraph turned once into a flat list of kernel
/// launches over numbered buffers, with a static memory plan (runtime/memory_plan.h).
///
///     std::unique_ptr<Executable> exe = compile(*module.entry());
///     Value y = exe->run({Value::tensor(x)});          // equals runtime::interpret, bitwise
///     exe->peak_bytes();                                // the planned arena
///
/// compile() looks every kernel up once (by op and OpDef::kernel_dtype_from's dtype), resolves the
/// structural ops (MakeTuple, TupleGetItem, Depend, StopGradient) into buffer aliasing, turns
/// tensor constants into pre-filled buffers, lets a single-output elementwise op write into an
/// input it is the last user of (same shape and dtype), and plans the intermediates' memory.
/// Control flow runs as nested plans: each If branch and each While cond / body graph (named by a
/// constant graph argument) is compiled once, from the abstracts already on its nodes, into its own
/// Executable, cached per graph inside the parent. The parent gets a "control" launch (no kernel):
/// an If evaluates its predicate buffer (a one-element tensor or a scalar), runs the chosen
/// branch's Executable on the argument values and copies the result leaves (tuples flattened, in
/// order) into its own planned output buffers; a While runs cond's Executable on the state, then
/// body's, until cond is false, bounded by CompileOptions::max_loop_iterations (a ValueError, not
/// a hang; the interpreter's limit by default), and copies the final state's leaves out. A
/// sub-Executable that cannot be flattened runs the interpreter itself. Graphs the compiler does
/// not handle (graph calls, non-tensor parameters, If / While with graph-valued parameters,
/// recursion through control flow, or outputs whose shapes are not known) run through the
/// interpreter instead: interpreted() says so.
///
/// Buffers: every planned intermediate is a view (Tensor::view) at its planned offset in one arena
/// of peak_bytes(), allocated once and reused by every run; a buffer is zero-filled before the
/// launch that first writes it (kernels get zeroed outputs, as in eager execution), unless that
/// launch's kernel writes every element anyway (writes_every_output_element). Results a run
/// returns never share memory with the next run: results that live in the arena and together
/// take at most a quarter of it (a loss) are copied out and the arena is kept; larger ones keep
/// the arena (the caller now holds that memory) and the next run takes a fresh one.
///
/// Donation (CompileOptions::donate): an output leaf may be written straight into the caller's
/// argument tensor (a training step updating weights in place). Valid when shapes and dtypes match
/// and the argument is dead after the launch that writes the output; otherwise the output is
/// copied into the argument after the run and donation_copies() counts it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "core/ir/value.h"
#include "runtime/memory_plan.h"
#include "runtime/observer.h"

namespace loom::ir {
class FuncGraph;
}  // namespace loom::ir

namespace loom::runtime {

/// One arena for top-level plans that never run at the same time (a Model's training step and
/// its evaluation): each takes the shared memory when it is large enough, else allocates the
/// larger size and leaves it here for the next (a plan keeps the memory it took). Nested plans
/// (If / While) never share: they run inside their parent's run.
struct SharedArena {
  std::shared_ptr<Storage> storage;  ///< the shared memory (null until a plan first runs)
};

/// How compile() builds a plan.
struct CompileOptions {
  /// (output leaf index, parameter index): the output leaf (outputs flattened in order) is
  /// written into that parameter's argument tensor.
  std::vector<std::pair<std::size_t, std::size_t>> donate;
  bool in_place = true;  ///< elementwise ops may write into a dying input
  /// The launches in a memory-aware order (Executable's list scheduling); false: the graph's
  /// topological order.
  bool schedule = true;
  std::shared_ptr<SharedArena> shared_arena;  ///< null: an arena of the plan's own
  /// Every launch's inputs stay intact through the launch, for observers that read them after it
  /// (Observer::needs_intact_inputs): no in-place outputs, no donation into an input of the same
  /// launch (those donations become copies after the run).
  bool keep_inputs = false;
  /// Run the graph through the reference interpreter instead of a plan (PyNative mode; the
  /// observers and donations behave the same).
  bool interpret = false;
  PlanStrategy strategy = PlanStrategy::kSmallerOfBoth;  ///< how the memory plan places buffers
  /// A compiled While running more iterations than this is a ValueError, not a hang (the
  /// interpreter's default limit; nested plans inherit it).
  std::int64_t max_loop_iterations = 10'000'000;
};

/// A compiled plan: kernel launches over numbered buffers with a static memory plan, or an
/// interpreted graph (runtime/executable.h).
class Executable {
 public:
  /// An If / While launch's nested plans and argument trees (defined in executable.cc).
  struct Control;
  /// One launch of the plan: a kernel on buffers, or a control launch (If / While).
  struct Launch {
    const backend::KernelDef* kernel = nullptr;  ///< the kernel (null for a control launch)
    ir::PrimitivePtr prim;             ///< the node's primitive
    std::vector<std::size_t> inputs;   ///< buffer ids
    std::vector<std::size_t> outputs;  ///< buffer ids
    /// Buffers whose writers run before this launch although it does not read them: the second
    /// arguments of the Depend nodes it reads its arguments through (an ordering edge).
    std::vector<std::size_t> after;
    std::string name;   ///< the node's name
    std::string label;  ///< ir::cnode_labels: the node in its graph's IR text
    ir::DebugInfo debug;  ///< the node's debug info (scope, source line, role)
    std::shared_ptr<const void> state;  ///< the kernel's Prepared::state
    std::ptrdiff_t workspace = -1;      ///< the buffer of its Prepared::workspace_bytes, if any
    std::vector<bool> fresh;  ///< per output: this launch writes the buffer first (allocates it)
    /// The fresh outputs are zero-filled before the kernel runs; false when the kernel writes
    /// every element of every output itself (writes_every_output_element).
    bool zero_fresh = true;
    std::shared_ptr<Control> control;  ///< If / While: a control launch (kernel unset)
  };
  /// kWorkspace: a kernel's scratch memory, planned like an intermediate, live for its launch.
  enum class BufferKind { kParameter, kConstant, kIntermediate, kWorkspace };
  /// One buffer of the plan; a buffer id is its index in buffers().
  struct Buffer {
    BufferKind kind;        ///< what the buffer holds
    DType dtype;            ///< its element type
    Shape shape;            ///< its shape
    std::size_t param = 0;  ///< kParameter: which graph parameter
    Tensor value;           ///< kConstant: the data; kIntermediate: the cached tensor
  };

  ~Executable();

  /// Runs the launches on the arguments (missing trailing ones take the parameters' defaults).
  /// Throws ValueError when an argument's dtype or shape differs from the compiled signature.
  ir::Value run(std::vector<ir::Value> args);

  /// True when the graph runs through the interpreter instead of a plan.
  bool interpreted() const { return fallback_ != nullptr; }
  /// The nested plans of the If / While launches, per branch / cond / body graph.
  const std::map<const ir::FuncGraph*, std::unique_ptr<Executable>>& nested() const { return subs_; }
  /// The launches, in the order a run makes them.
  const std::vector<Launch>& launches() const { return launches_; }
  /// Every buffer, by buffer id.
  const std::vector<Buffer>& buffers() const { return buffers_; }
  /// The memory plan of the planned buffers (planned_buffers()).
  const MemoryPlan& plan() const { return plan_; }
  /// Lifetimes of the planned buffers (plan().offsets[i] belongs to planned_buffers()[i]).
  const std::vector<BufferLife>& lives() const { return lives_; }
  /// The ids of the buffers the memory plan places (intermediates and workspaces), in plan order.
  const std::vector<std::size_t>& planned_buffers() const { return planned_; }
  /// The arena's size in bytes (plan().peak_bytes).
  std::size_t peak_bytes() const { return plan_.peak_bytes; }
  /// Σ (rounded) bytes of every tensor a launch writes: the memory without any reuse, as eager
  /// execution allocates it. plan().sum_bytes is the sum over the planned buffers (after in-place
  /// merging), the footprint without the arena's sharing.
  std::size_t sum_of_intermediate_bytes() const { return sum_intermediates_; }
  /// How many elementwise launches write their output into a dying input.
  std::size_t num_in_place() const { return num_in_place_; }
  /// How many donated outputs are written straight into their argument tensor.
  std::size_t donations_in_place() const { return donations_in_place_; }
  /// How many donated outputs are copied into their argument tensor after the run.
  std::size_t donation_copies() const { return donation_copies_.size(); }

  /// The observers called around every launch (runtime/observer.h), also by the nested plans (at
  /// depth + 1) and by an interpreted graph; null or empty: none, at the cost of one branch.
  void set_observers(std::shared_ptr<const ObserverList> observers, int depth = 0);
  /// The name of the compiled graph.
  const std::string& graph_name() const { return graph_name_; }
  /// The backend the plan runs on.
  backend::Backend& backend() const { return *backend_; }

 private:
  friend class Compiler;
  friend std::unique_ptr<Executable> compile(const ir::FuncGraph&, backend::Backend&,
                                             const CompileOptions&);
  Executable() = default;

  /// An output or structural value: a tensor buffer, a tuple of trees, or a non-tensor constant.
  struct Tree {
    std::ptrdiff_t buffer = -1;
    std::vector<Tree> elements;
    bool is_tuple = false;
    ir::Value constant;
  };
  ir::Value build(const Tree& t) const;
  void run_control(const Launch& l);
  /// Every launch in order, then the donation copies (a run's work on the device).
  void run_launches(const ObserverList* observers);
  /// A run as the recording's replay (recorded_ set), `args` staged into its buffers.
  void replay(const std::vector<ir::Value>& args);
  ir::Value run_interpreted(const std::vector<ir::Value>& args);

  std::map<const ir::FuncGraph*, std::unique_ptr<Executable>> subs_;  ///< nested plans, per graph

  backend::Backend* backend_ = nullptr;
  std::vector<Launch> launches_;
  std::vector<Buffer> buffers_;
  std::vector<ir::Value> param_defaults_;  ///< none when the parameter has no default
  std::vector<std::size_t> param_buffers_;
  Tree output_;
  std::vector<std::pair<std::size_t, std::size_t>> donation_copies_;  ///< (buffer, parameter)
  std::vector<BufferLife> lives_;
  std::vector<std::size_t> planned_;
  MemoryPlan plan_;
  std::size_t sum_intermediates_ = 0;
  std::size_t num_in_place_ = 0, donations_in_place_ = 0;
  std::shared_ptr<const ObserverList> observers_;
  int depth_ = 0;
  std::string graph_name_;
  const ir::FuncGraph* graph_ = nullptr;  ///< the flat plan's graph (launch events name it)
  const ir::FuncGraph* fallback_ = nullptr;
  std::vector<std::pair<std::size_t, std::size_t>> fallback_donate_;  ///< interpreted: write-back
  std::int64_t max_loop_iterations_ = 10'000'000;
  std::vector<Tensor> ins_, outs_;  ///< scratch
  std::vector<Tensor> cur_;         ///< the tensor of each buffer during a run
  bool escapes_arena(const ir::Value& v) const;
  std::size_t arena_bytes(const ir::Value& v) const;           ///< bytes of v's tensors in the arena
  ir::Value copy_out_of_arena(const ir::Value& v) const;  ///< v with its arena tensors cloned
  std::shared_ptr<Storage> arena_;  ///< the planned intermediates' memory; null until first run
  std::shared_ptr<SharedArena> shared_arena_;  ///< where arena_ comes from, when shared
  /// The run recorded by the backend (a CUDA graph: Backend::record), made at the second run
  /// without observers and replayed from then on; plans with control launches run launch by
  /// launch. recorded_args_ holds the argument buffers the recording reads.
  std::unique_ptr<backend::RecordedWork> recorded_;
  std::vector<Tensor> recorded_args_;
  bool recordable_ = true;  ///< cleared by a control launch, a refused or spent chance
  bool ran_ = false;  ///< a run went launch by launch (the warm-up before a recording)
  std::vector<char> donated_params_;  ///< per parameter: written by the run (donated)
};

/// Compiles `graph` (inferring it first when a node lacks an abstract). The Executable keeps its
/// primitives and constants; it does not refer to the Module afterwards, except an interpreted()
/// one, which runs the graph itself. The second form compiles for the CPU backend with the
/// default options.
///@{
std::unique_ptr<Executable> compile(const ir::FuncGraph& graph, backend::Backend& b,
                                    const CompileOptions& options = {});
std::unique_ptr<Executable> compile(const ir::FuncGraph& graph);
///@}

}  // namespace loom::runtime
