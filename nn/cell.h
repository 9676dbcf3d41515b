/// \file
/// Cells: networks written once, run in PyNative mode (each op at once, on tensors) or traced into
/// a FuncGraph (graph mode). MindSpore's Cell vocabulary with libtorch's registration habits.
///
///     class LeNet5 : public nn::Cell {
///      public:
///       LeNet5() : Cell("LeNet5") {
///         conv1_ = &register_cell("conv1", std::make_shared<nn::Conv2d>(
///                                              nn::Conv2dOptions(1, 6, 5).pad_mode("valid")));
///         fc1_ = &register_cell("fc1", std::make_shared<nn::Dense>(400, 120));
///       }
///       ops::Var construct(const std::vector<ops::Var>& in) override {
///         return (*fc1_)(nn::flatten(nn::relu((*conv1_)(in[0]))));
///       }
///     };
///
///     LeNet5 net;
///     ops::Var y = net(ops::Var(Value::tensor(x)));   // y holds a Value: compiled (graph mode,
///                                                      // the default) or op by op (PyNative)
///     nn::Traced t = nn::trace(net, {Abstract::tensor(kFloat32, {2, 1, 32, 32})}, "lenet");
///     runtime::interpret(*t.graph, {Value::tensor(x)});             // graph mode, same numbers
///
/// One construct, two modes: construct bodies call the free functions below (relu, matmul...),
/// which emit through current_emitter(). Outside trace() that is a process-wide EagerEmitter, so a
/// call computes at once (PyNative; in graph mode a root call traces first, see "Execution
/// mode"); inside trace() it is a tracing emitter that appends inferred CNodes to the graph, each
/// with DebugInfo::scope = the Cell path and the op ("LeNet5/fc1/MatMul").
///
/// Parameters: a Cell owns its Parameters and child Cells. A Parameter's name is its full dotted
/// path ("fc1.weight"), updated when its Cell is registered into a parent. While tracing, param(p)
/// returns the graph Parameter standing for p: created on first use with p.value as its default
/// (a weight), appended after the inputs in first-use order and named by p's full name.
///
/// Source locations: while tracing, each CNode's DebugInfo also gets the file and line of the
/// user's code that made it. `file` is the path relative to the project's source root
/// ("tests/nn/trace_errors_test.cc"), or the compiler's path unchanged for a file outside it. The
/// free functions below and Cell::operator() take a trailing std::source_location (defaulted to
/// the caller's). The rule, per emitted node:
///   - a call site counts only if it is user code, i.e. not in the nn library itself (nn/*):
///     a layer's own calls (Dense's matmul in nn/layers.cc) never show up;
///   - each Cell call sets the thread's "current user call site": its own location when that is
///     user code, else the enclosing one (SequentialCell calling its children keeps the user's
///     call of the SequentialCell; trace() counts as the root Cell's call site);
///   - a node made by a free function called from user code gets that call's location (the more
///     specific site); any other node (a layer's internal ops, current_emitter().emit(...) made
///     anywhere) gets the current user call site, i.e. the line where the user called the
///     innermost Cell whose call was user code. So a Dense used at line 42 of a construct gives
///     MatMul and BiasAdd nodes with line 42. Nodes made outside any such site get file "" and
///     line 0. PyNative mode makes no nodes; the sites are tracked the same way.
///
/// Errors: a loom::Error thrown inside a Cell's construct gets `" (in <Cell path>)"` appended once,
/// by the innermost Cell ("Dense: expected ... (in LeNet5/fc1)").
///
/// Execution mode (nn/context.h). In ExecMode::kPyNative every call runs construct eagerly, as
/// above. In ExecMode::kGraph (the default) a call of a ROOT Cell — no Cell is running on this
/// thread and no emitter is pushed (so not while tracing) — whose inputs all hold concrete
/// tensors is a compiled call: the first call per (input dtypes and shapes, training()) traces
/// construct (trace() below), compiles the graph (runtime::CompiledFunction: the eval pipeline,
/// on the context's device) and caches it in the Cell; every call then runs it with the current
/// Parameter values as the weight arguments and writes the assigned state back into the
/// Parameters (donated: updated in place when the runtime can, else copied; the same storage
/// either way). num_compilations() counts the compilations. Other calls (inner Cells, symbolic
/// inputs, non-tensor inputs) run construct directly on the current emitter.
///
/// Devices: a compiled call runs on the device of the context when the Cell first compiled
/// (nn/context.h). Its tensor inputs are copied there (backend::to_device: nothing for tensors
/// already there), the Parameters it uses are moved there (nn::to_device below: once, they stay),
/// and its results stay there (backend::to_host reads them). While tracing, a weight's default
/// value in the graph is its Parameter's value, or a host snapshot of it for a Parameter on a
/// device (what graph dumps print and MindIR export writes).
///
/// State updates (MindSpore's Assign): Cell::assign(p, value) sets Parameter p (normally one with
/// requires_grad == false, e.g. BatchNorm2d's moving statistics or Dropout's key) to `value`,
/// whose dtype and shape must equal p.value's (else ValueError naming the parameter).
///   - PyNative: the value is copied into p.value's storage at once (in place; the Tensor handle
///     and its data pointer stay the same). So that a value read before the assign keeps the old
///     value, as in graph mode, PyNative param(p) returns a copy of a non-trainable Parameter
///     (requires_grad == false) and shares the storage of a trainable one.
///   - While tracing: the assignment is recorded (p becomes a graph weight if it was not one);
///     a later param(p) in the same trace returns the assigned value, so a Cell used twice in one
///     construct sees its own update. A second assign of p replaces the recorded value.
///     trace() lists the assigned Parameters in Traced::updates, in order of their first assign,
///     and then the traced graph's output is
///         MakeTuple(construct's output, new value of updates[0], new value of updates[1], ...)
///     (without assignments the output is construct's output itself, as before). Nothing is
///     written into the Parameters by tracing; whoever runs the graph writes the new values back
///     (the compiled root call above; TrainOneStepCell, which differentiates element 0 only).
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include "core/ir/abstract.h"
#include "core/ir/tensor.h"
#include "core/trace/tracer.h"
#include "ops/emitter.h"

namespace loom::ir {
class FuncGraph;
class Module;
}  // namespace loom::ir

namespace loom::runtime {
class CompiledFunction;
class Observer;
}  // namespace loom::runtime

namespace loom::backend {
class Backend;
}  // namespace loom::backend

namespace loom::nn {

class Initializer;

/// The emitter construct bodies talk to: the innermost pushed one (a trace), else a process-wide
/// EagerEmitter (PyNative).
ops::Emitter& current_emitter();

/// Pushes `emitter` as current_emitter() for the lifetime of the scope (this thread only).
class EmitterScope {
 public:
  /// Makes `emitter` the current emitter until this scope ends; `emitter` must outlive it.
  explicit EmitterScope(ops::Emitter& emitter);
  EmitterScope(const EmitterScope&) = delete;
  EmitterScope& operator=(const EmitterScope&) = delete;

 private:
  trace::EmitterScope scope_;
};

/// The path of the Cells now running on this thread, joined by '/' as in DebugInfo::scope
/// ("LeNet5/fc1"); "" outside any Cell. The same in PyNative mode and while tracing.
std::string current_cell_path();

// Ops for construct bodies, emitted through current_emitter(). Names and attributes as in
// docs/ops.md. Each takes the call site last (`loc`, defaulted to the caller's; see "Source
// locations" above).

/// The type of the `loc` (call site) arguments in this file: std::source_location.
using SourceLocation = std::source_location;

/// ReLU(x): max(x, 0), elementwise.
ops::Var relu(const ops::Var& x, SourceLocation loc = SourceLocation::current());
/// MatMul(a, b): the product of rank-2 `a` and `b`, each transposed first when its transpose_a /
/// transpose_b is set.
ops::Var matmul(const ops::Var& a, const ops::Var& b, bool transpose_a = false,
                bool transpose_b = false, SourceLocation loc = SourceLocation::current());
/// BiasAdd(x, bias): `x` plus the rank-1 `bias` along its channel axis (axis 1, NCHW).
ops::Var bias_add(const ops::Var& x, const ops::Var& bias,
                  SourceLocation loc = SourceLocation::current());
/// Elementwise, broadcasting `a` + `b`, `a` - `b`, `a` * `b` (Add, Sub, Mul).
///@{
ops::Var add(const ops::Var& a, const ops::Var& b, SourceLocation loc = SourceLocation::current());
ops::Var sub(const ops::Var& a, const ops::Var& b, SourceLocation loc = SourceLocation::current());
ops::Var mul(const ops::Var& a, const ops::Var& b, SourceLocation loc = SourceLocation::current());
///@}
/// Conv2D(x, w): the 2-D cross-correlation of `x` (N, C, H, W) with `w` (out_channel, C, kh, kw),
/// `kernel` being (kh, kw). pad_mode "same", "valid" or "pad"; pad (top, bottom, left, right)
/// only with "pad".
ops::Var conv2d(const ops::Var& x, const ops::Var& w, std::int64_t out_channel,
                std::vector<std::int64_t> kernel, std::vector<std::int64_t> stride = {1, 1},
                const std::string& pad_mode = "valid",
                std::vector<std::int64_t> pad = {0, 0, 0, 0},
                SourceLocation loc = SourceLocation::current());
/// MaxPool(x): the maximum of `x` (N, C, H, W) over each `kernel` window, the windows `stride`
/// apart (the op's strides attribute); pad_mode "valid" or "same".
ops::Var max_pool(const ops::Var& x, std::vector<std::int64_t> kernel,
                  std::vector<std::int64_t> stride, const std::string& pad_mode = "valid",
                  SourceLocation loc = SourceLocation::current());
/// Reshape(x) to `shape` (one dim may be -1: inferred); `x` itself when it already has that
/// shape.
ops::Var reshape(const ops::Var& x, const Shape& shape,
                 SourceLocation loc = SourceLocation::current());
/// Flatten(x): (N, ...) to (N, the product of the rest).
ops::Var flatten(const ops::Var& x, SourceLocation loc = SourceLocation::current());

/// A branch of cond(): takes the branch arguments, returns the branch's values.
using BranchFn = std::function<std::vector<ops::Var>(const std::vector<ops::Var>& args)>;
/// Control flow inside a construct, in both modes: `pred` is a one-element Bool (or numeric)
/// tensor; the branches take `args` and return values of the same kinds and shapes; the result
/// is the values of the branch taken. PyNative runs the branch the predicate chooses (nonzero:
/// then_fn); while tracing, both branches are traced into branch graphs of an If
/// (core/ir/control_flow.h: values of the enclosing trace a branch uses, weights included, become
/// extra arguments), so the compiled graph decides at run time and the gradient flows through
/// the branch taken. Parameters may not be assigned inside a branch (ValueError). Throws
/// ValueError when a branch function is empty, when (PyNative) `pred` is not a one-element
/// tensor, and when (tracing) a branch returns no values or the two return different numbers of
/// values.
///
///     ops::Emitter& e = nn::current_emitter();
///     ops::Var sum = e.reduce_sum(h, {}, false);  // over all axes
///     ops::Var y = nn::cond(e.emit("Greater", {sum, e.scalar_like(sum, 0.0)}), {h},
///         [&](const std::vector<ops::Var>& a) {
///           return std::vector<ops::Var>{nn::relu(a[0])};
///         },
///         [&](const std::vector<ops::Var>& a) {
///           return std::vector<ops::Var>{nn::mul(a[0], a[0])};
///         })[0];
std::vector<ops::Var> cond(const ops::Var& pred, const std::vector<ops::Var>& args,
                           const BranchFn& then_fn, const BranchFn& else_fn,
                           SourceLocation loc = SourceLocation::current());

/// A trainable (or frozen) tensor of a Cell.
struct Parameter {
  std::string name;  ///< the full dotted path ("fc1.weight")
  Tensor value;  ///< the current value, on the host or a device (see to_device)
  /// Whether training computes its gradient and updates it (TrainOneStepCell); false for a
  /// frozen parameter or for state such as BatchNorm2d's moving statistics.
  bool requires_grad = true;
  /// Set when the value was drawn by an initializer: it is drawn again (from RandomStream(name))
  /// whenever the full name changes, so the final values depend only on the seed in force and the
  /// final name. Null for a value given explicitly.
  std::shared_ptr<const Initializer> initializer;
};

/// p.value on `backend`'s device: when it lives elsewhere, replaced by a copy there (backend::
/// to_device; tensors that shared the old value keep it). Nothing when it is there already.
void to_device(Parameter& p, backend::Backend& backend);

/// MindSpore's nn.Cell: a network or a layer of one. A subclass registers its Parameters and
/// child Cells in its constructor and writes construct; calling the Cell runs construct, op by
/// op (PyNative) or compiled (graph mode), as described in cell.h.
class Cell {
 public:
  /// cls_name names the Cell in scopes and error paths when it is the outermost one.
  /// auto_prefix (MindSpore's argument): whether registering a child prefixes the child's
  /// parameter names with the child's name. Wrappers (WithLossCell) pass false, so the wrapped
  /// network keeps its names ("conv1.weight", not "_backbone.conv1.weight").
  explicit Cell(std::string cls_name = "Cell", bool auto_prefix = true)
      : cls_name_(std::move(cls_name)), auto_prefix_(auto_prefix) {}
  virtual ~Cell() = default;
  Cell(const Cell&) = delete;
  Cell& operator=(const Cell&) = delete;

  /// The Cell's computation, written by subclasses with the op functions, child Cells and
  /// param(): the output for `inputs`. Called through operator(), which gives it the Cell's scope;
  /// the same body runs in PyNative mode and while tracing.
  virtual ops::Var construct(const std::vector<ops::Var>& inputs) = 0;

  /// Calls construct on `inputs` (or on the single input `x`) inside this Cell's scope; errors
  /// get the Cell path appended. In graph mode a root call with concrete tensors runs the
  /// compiled graph instead ("Execution mode" in cell.h). `loc` is the call site recorded on the
  /// nodes traced inside ("Source locations" in cell.h).
  ///@{
  ops::Var operator()(const ops::Var& x, SourceLocation loc = SourceLocation::current()) {
    return (*this)(std::vector<ops::Var>{x}, loc);
  }
  ops::Var operator()(std::vector<ops::Var> inputs,
                      SourceLocation loc = SourceLocation::current());
  ///@}
  /// The same call made from another language (Python): `site` (may be null: none) is the call
  /// site recorded on the nodes traced inside, as `loc` is for operator().
  ops::Var call_at(std::vector<ops::Var> inputs, const trace::Site* site);

  /// A parameter with an explicit value / drawn by `init` (of `shape` and `dtype`) from
  /// RandomStream(full name). The returned reference stays valid for the Cell's lifetime. Throws
  /// ValueError on a repeated name.
  ///@{
  Parameter& register_parameter(std::string local_name, Tensor value);
  Parameter& register_parameter(std::string local_name, const Shape& shape, DType dtype,
                                std::shared_ptr<const Initializer> init);
  ///@}
  /// Adds `cell` as the child `name` and returns it. When this Cell was made with auto_prefix (the
  /// default), the child's parameters are renamed `name.their name` (re-drawn, see Parameter).
  /// Throws ValueError on a null `cell` or a repeated name.
  template <class C>
  C& register_cell(std::string name, std::shared_ptr<C> cell) {
    C& ref = *cell;
    add_child(std::move(name), std::move(cell));
    return ref;
  }

  /// Every parameter of this Cell and its children, recursively in registration order, with its
  /// full name ("conv1.weight", "fc1.bias").
  std::vector<std::pair<std::string, Parameter*>> parameters_and_names();
  /// Every descendant Cell, recursively in registration order (each before its own children),
  /// with its dotted path from this Cell ("conv1", "block.conv1"); not this Cell itself.
  std::vector<std::pair<std::string, Cell*>> cells_and_names();

  /// Moves every Parameter of this Cell and its children to `backend`'s device (nn::to_device):
  /// a network placed before its first run. Compiled calls, TrainOneStepCell's steps and Model's
  /// evaluation move the Parameters they use to their own device themselves.
  void to_device(backend::Backend& backend);

  /// Sets the training flag of this Cell and all its descendants (MindSpore's set_train).
  void set_train(bool mode = true);
  /// The training flag: false until set_train().
  bool training() const { return training_; }

  /// The name given to the constructor ("Cell" by default).
  const std::string& cls_name() const { return cls_name_; }

  /// The Var standing for p: its value (PyNative; a copy when !p.requires_grad, see "State
  /// updates" in cell.h), its graph weight or, after assign(p, v) in the same trace, v (while
  /// tracing).
  ops::Var param(Parameter& p);

  /// Sets p to `value` ("State updates" in cell.h). Throws ValueError ("Cell.assign: expected a
  /// value of Float32 (4) for parameter 'bn.moving_mean', got Float32 (3)") on a dtype or shape
  /// mismatch, or when value is not a tensor.
  void assign(Parameter& p, const ops::Var& value);

  /// Compilations made by graph-mode root calls of this Cell (one per input signature and
  /// training flag; see "Execution mode" in cell.h).
  std::size_t num_compilations() const { return num_compilations_; }

  /// Adds / removes an observer of this Cell's graph-mode root calls (runtime/observer.h): called
  /// around every kernel launch of the compiled graph. add_observer throws ValueError on a null
  /// observer; removing one not added does nothing.
  ///@{
  void add_observer(std::shared_ptr<runtime::Observer> observer);
  void remove_observer(const runtime::Observer* observer);
  ///@}
  /// The compiled function of graph-mode root calls (made on first use): its pipeline, dumps
  /// (set_save_graphs_dir) and observers.
  runtime::CompiledFunction& compiled_function();

 private:
  ops::Var call_compiled(const std::vector<ops::Var>& inputs, SourceLocation loc);
  ops::Var call_in_scope(const std::vector<ops::Var>& inputs, const trace::Site* site);
  void add_child(std::string name, std::shared_ptr<Cell> cell);
  void prefix_names(const std::string& prefix);

  std::string cls_name_;
  std::string registered_name_;  ///< the name in the parent ("" for a root)
  std::vector<std::unique_ptr<Parameter>> params_;
  std::vector<std::pair<std::string, std::shared_ptr<Cell>>> children_;
  bool training_ = false;
  bool auto_prefix_ = true;
  std::shared_ptr<runtime::CompiledFunction> compiled_;  ///< graph-mode root calls
  SourceLocation root_call_site_;  ///< the call being compiled: the traced root's call site
  std::size_t num_compilations_ = 0;
};

/// A Cell traced into a graph: the inputs are its first parameters ("x0", "x1"...), followed by
/// the weights in first-use order (each with its Parameter's value as default; an assigned
/// Parameter is always among them).
/// Without updates the graph's output is construct's output; with updates it is
/// MakeTuple(construct's output, new value of updates[0], ...) (see "State updates" in cell.h).
struct Traced {
  /// An empty Traced, its destruction and its moves: defaulted, but defined out of line so that
  /// users of Traced need not see ir::Module's definition. Traced is not copyable.
  ///@{
  Traced();
  ~Traced();
  Traced(Traced&&) noexcept;
  Traced& operator=(Traced&&) noexcept;
  ///@}

  std::unique_ptr<ir::Module> module;  ///< owns `graph` and the branch graphs of any cond()
  ir::FuncGraph* graph = nullptr;  ///< the module's entry
  std::vector<Parameter*> weights;  ///< weights[i] is graph->parameter(num_inputs + i)
  std::vector<Parameter*> updates;  ///< the assigned Parameters, in order of their first assign
};

/// Runs cell's construct on graph parameters with the `inputs` abstracts, into a graph named
/// `name`; the result is inferred and verified. Throws what construct throws (with the Cell path
/// appended).
/// `loc` (the call of trace) is the root Cell's call site.
Traced trace(Cell& cell, const std::vector<ir::AbstractPtr>& inputs, std::string name,
             SourceLocation loc = SourceLocation::current());

}  // namespace loom::nn
