// Cells: construct bodies run through the current emitter — eagerly when nothing is pushed
// (PyNative), into a graph while a core/trace Tracer is (graph mode). This file decides what the
// trace room is told: each Cell call is a scope, user code's call sites are the nodes' sites,
// Parameters are the tracer's weights and Cell::assign its assignments.
#include "nn/cell.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <source_location>
#include <unordered_map>

#include "backends/eager.h"
#include "backends/backend.h"
#include "core/ir/anf.h"
#include "core/ir/control_flow.h"
#include "core/ir/error.h"
#include "core/ir/verify.h"
#include "core/passes/infer.h"
#include "core/trace/tracer.h"
#include "nn/context.h"
#include "runtime/compiled_function.h"
#include "nn/initializer.h"
#include "ops/op.h"

namespace loom::nn {
namespace {

using ir::Value;

// The project's source root as the compiler spells it, derived from this file's own path
// ("/src/loom/nn/cell.cc" -> "/src/loom/"; "" when the compiler gives relative paths).
const std::string& project_root() {
  static const std::string root = [] {
    std::string self = std::source_location::current().file_name();
    const std::string suffix = "nn/cell.cc";
    if (self.size() >= suffix.size() &&
        self.compare(self.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return self.substr(0, self.size() - suffix.size());
    }
    return std::string();
  }();
  return root;
}

// Relative to the project root when under it; nullopt for the nn library's own files and the
// Python bindings'.
std::optional<trace::Site> user_site(const std::source_location& loc) {
  std::string file = loc.file_name();
  const std::string& root = project_root();
  if (!root.empty() && file.rfind(root, 0) == 0) file = file.substr(root.size());
  // The Python bindings' own calls are not user code either: Python callers pass their sites.
  if (file.rfind("nn/", 0) == 0 || file.rfind("python/src/", 0) == 0) return std::nullopt;
  return trace::Site{std::move(file), static_cast<int>(loc.line())};
}

// Makes a free function's user call site (if it is one) the site of the nodes it emits.
class OpSiteScope {
 public:
  explicit OpSiteScope(const std::source_location& loc)
      : site_(user_site(loc)), guard_(site_ ? &*site_ : nullptr) {}

 private:
  std::optional<trace::Site> site_;
  trace::OpSiteGuard guard_;
};

// The tracer of the trace now running on this thread, when it is also the current emitter (an
// emitter pushed inside a trace sees plain values, like PyNative).
trace::Tracer* active_tracer() {
  trace::Tracer* t = trace::current_tracer();
  return t != nullptr && trace::current() == t ? t : nullptr;
}

}  // namespace

ops::Emitter& current_emitter() {
  static backend::EagerEmitter eager;
  ops::Emitter* e = trace::current();
  return e ? *e : static_cast<ops::Emitter&>(eager);
}

EmitterScope::EmitterScope(ops::Emitter& emitter) : scope_(emitter) {}

std::string current_cell_path() { return trace::current_scope(); }

// ---------------------------------------------------------------------------------------------
// Ops for construct bodies

ops::Var relu(const ops::Var& x, SourceLocation loc) {
  OpSiteScope site(loc);
  return current_emitter().emit("ReLU", {x});
}

ops::Var matmul(const ops::Var& a, const ops::Var& b, bool transpose_a, bool transpose_b,
                SourceLocation loc) {
  OpSiteScope site(loc);
  return current_emitter().emit("MatMul", {a, b},
                                {{"transpose_a", Value::boolean(transpose_a)},
                                 {"transpose_b", Value::boolean(transpose_b)}});
}

ops::Var bias_add(const ops::Var& x, const ops::Var& bias, SourceLocation loc) {
  OpSiteScope site(loc);
  return current_emitter().emit("BiasAdd", {x, bias});
}

ops::Var add(const ops::Var& a, const ops::Var& b, SourceLocation loc) {
  OpSiteScope site(loc);
  return current_emitter().add(a, b);
}
ops::Var sub(const ops::Var& a, const ops::Var& b, SourceLocation loc) {
  OpSiteScope site(loc);
  return current_emitter().sub(a, b);
}
ops::Var mul(const ops::Var& a, const ops::Var& b, SourceLocation loc) {
  OpSiteScope site(loc);
  return current_emitter().mul(a, b);
}

ops::Var conv2d(const ops::Var& x, const ops::Var& w, std::int64_t out_channel,
                std::vector<std::int64_t> kernel, std::vector<std::int64_t> stride,
                const std::string& pad_mode, std::vector<std::int64_t> pad, SourceLocation loc) {
  OpSiteScope site(loc);
  return current_emitter().emit("Conv2D", {x, w},
                                {{"out_channel", Value::i64(out_channel)},
                                 {"kernel_size", Value::ints(kernel)},
                                 {"stride", Value::ints(stride)},
                                 {"pad_mode", Value::string(pad_mode)},
                                 {"pad", Value::ints(pad)}});
}

ops::Var max_pool(const ops::Var& x, std::vector<std::int64_t> kernel,
                  std::vector<std::int64_t> stride, const std::string& pad_mode,
                  SourceLocation loc) {
  OpSiteScope site(loc);
  return current_emitter().emit("MaxPool", {x},
                                {{"kernel_size", Value::ints(kernel)},
                                 {"strides", Value::ints(stride)},
                                 {"pad_mode", Value::string(pad_mode)}});
}

ops::Var reshape(const ops::Var& x, const Shape& shape, SourceLocation loc) {
  OpSiteScope site(loc);
  return current_emitter().reshape(x, shape);
}

ops::Var flatten(const ops::Var& x, SourceLocation loc) {
  OpSiteScope site(loc);
  return current_emitter().emit("Flatten", {x});
}

std::vector<ops::Var> cond(const ops::Var& pred, const std::vector<ops::Var>& args,
                           const BranchFn& then_fn, const BranchFn& else_fn, SourceLocation loc) {
  if (!then_fn || !else_fn) throw ValueError("cond: expected two branch functions, got none");
  trace::Tracer* tracer = active_tracer();
  if (tracer == nullptr) {  // PyNative (or an emitter of values): run the branch chosen
    if (!pred.is_value() || !pred.value().is_tensor() || pred.value().as_tensor().numel() != 1) {
      throw ValueError("cond: expected a one-element tensor predicate");
    }
    const bool taken = backend::to_host(pred.value().as_tensor()).get(0) != 0;
    return taken ? then_fn(args) : else_fn(args);
  }
  OpSiteScope site(loc);
  ir::FuncGraph* graph = tracer->target();
  std::vector<ir::Node*> arg_nodes;
  for (const ops::Var& a : args) arg_nodes.push_back(tracer->node_of(a));
  std::size_t num_results = 0;
  // A branch is traced into its graph by a child tracer: its nodes get the enclosing scopes and
  // sites; the parent's weights and values it uses are lifted into parameters by ir::cond.
  auto branch = [&](const BranchFn& fn) {
    return [&, fn](ir::FuncGraph* g, const std::vector<ir::Node*>& params) -> ir::Node* {
      trace::Tracer child(g, tracer);
      std::vector<ops::Var> in;
      for (std::size_t i = 0; i < params.size(); ++i) {
        static_cast<ir::Parameter*>(params[i])->set_abstract(arg_nodes[i]->abstract());
        in.emplace_back(params[i]);
      }
      std::vector<ops::Var> out;
      {
        trace::TracerScope active(child);
        out = fn(in);
      }
      if (num_results != 0 && out.size() != num_results) {
        throw ValueError("cond: expected both branches to return " +
                         std::to_string(num_results) + " values, got " +
                         std::to_string(out.size()));
      }
      num_results = out.size();
      if (out.empty()) throw ValueError("cond: expected a branch to return values, got none");
      return child.node_of(child.make_tuple(out));
    };
  };
  ir::Node* node = ir::cond(graph, tracer->node_of(pred), arg_nodes, branch(then_fn),
                            branch(else_fn));
  auto* c = static_cast<ir::CNode*>(node);
  c->set_debug(tracer->debug_for("If"));
  // The branches' output kind (both alike; the graph's inference joins them when it runs).
  ir::FuncGraph* then_g = static_cast<ir::ValueNode*>(c->arg(1))->value().as_graph();
  c->set_abstract(then_g->output()->abstract());
  std::vector<ops::Var> results;
  for (std::size_t i = 0; i < num_results; ++i) {
    results.push_back(tracer->tuple_get(ops::Var(node), static_cast<std::int64_t>(i)));
  }
  return results;
}

// ---------------------------------------------------------------------------------------------
// Cell

ops::Var Cell::operator()(std::vector<ops::Var> inputs, SourceLocation loc) {
  if (context_mode() == ExecMode::kGraph && trace::scope_depth() == 0 &&
      trace::current() == nullptr &&
      std::all_of(inputs.begin(), inputs.end(), [](const ops::Var& v) {
        return v.is_value() && v.value().is_tensor();
      })) {
    return call_compiled(inputs, loc);
  }
  // This call's site becomes the current user call site (when it is user code), and the op site
  // of an enclosing free function no longer applies inside.
  const std::optional<trace::Site> site = user_site(loc);
  return call_in_scope(inputs, site ? &*site : nullptr);
}

ops::Var Cell::call_at(std::vector<ops::Var> inputs, const trace::Site* site) {
  if (context_mode() == ExecMode::kGraph && trace::scope_depth() == 0 &&
      trace::current() == nullptr &&
      std::all_of(inputs.begin(), inputs.end(), [](const ops::Var& v) {
        return v.is_value() && v.value().is_tensor();
      })) {
    return call_compiled(inputs, SourceLocation::current());
  }
  return call_in_scope(inputs, site);
}

ops::Var Cell::call_in_scope(const std::vector<ops::Var>& inputs, const trace::Site* site) {
  if (trace::scope_depth() == 0) trace::error_has_path() = false;
  trace::ScopeGuard scope(
      trace::scope_depth() == 0 || registered_name_.empty() ? cls_name_ : registered_name_,
      site);
  try {
    ops::Var out = construct(inputs);
    trace::error_has_path() = false;  // an error a construct caught and recovered from is forgotten
    return out;
  } catch (const Error& e) {
    if (trace::error_has_path()) throw;
    trace::error_has_path() = true;
    rethrow_with_context(e, " (in " + trace::current_scope() + ")");
  }
}

Parameter& Cell::register_parameter(std::string local_name, Tensor value) {
  for (const auto& p : params_) {
    if (p->name == local_name) {
      throw ValueError(cls_name_ + ".register_parameter: expected a new name, got '" +
                       local_name + "' twice");
    }
  }
  params_.push_back(std::make_unique<Parameter>(
      Parameter{.name = std::move(local_name), .value = std::move(value)}));
  return *params_.back();
}

Parameter& Cell::register_parameter(std::string local_name, const Shape& shape, DType dtype,
                                    std::shared_ptr<const Initializer> init) {
  RandomStream stream(local_name);
  Parameter& p = register_parameter(local_name, init->init(shape, dtype, stream));
  p.initializer = std::move(init);
  return p;
}

void Cell::add_child(std::string name, std::shared_ptr<Cell> cell) {
  if (!cell) throw ValueError(cls_name_ + ".register_cell: expected a cell, got null");
  for (const auto& [n, c] : children_) {
    if (n == name) {
      throw ValueError(cls_name_ + ".register_cell: expected a new name, got '" + name +
                       "' twice");
    }
  }
  cell->registered_name_ = name;
  if (auto_prefix_) cell->prefix_names(name);
  children_.emplace_back(std::move(name), std::move(cell));
}

void Cell::prefix_names(const std::string& prefix) {
  for (auto& [name, p] : parameters_and_names()) {
    p->name = prefix + "." + p->name;
    if (p->initializer) {
      RandomStream stream(p->name);
      p->value = p->initializer->init(p->value.shape(), p->value.dtype(), stream);
    }
  }
}

std::vector<std::pair<std::string, Parameter*>> Cell::parameters_and_names() {
  std::vector<std::pair<std::string, Parameter*>> out;
  for (const auto& p : params_) out.emplace_back(p->name, p.get());
  for (const auto& [name, child] : children_) {
    for (auto& entry : child->parameters_and_names()) out.push_back(std::move(entry));
  }
  return out;
}

std::vector<std::pair<std::string, Cell*>> Cell::cells_and_names() {
  std::vector<std::pair<std::string, Cell*>> out;
  for (const auto& [name, child] : children_) {
    out.emplace_back(name, child.get());
    for (auto& [sub, c] : child->cells_and_names()) out.emplace_back(name + "." + sub, c);
  }
  return out;
}

void to_device(Parameter& p, backend::Backend& backend) {
  if (p.value.defined() && p.value.device() != backend.device()) {
    p.value = backend::to_device(p.value, backend);
  }
}

void Cell::to_device(backend::Backend& backend) {
  for (auto& [name, p] : parameters_and_names()) nn::to_device(*p, backend);
}

void Cell::set_train(bool mode) {
  training_ = mode;
  for (const auto& [name, child] : children_) child->set_train(mode);
}

namespace {

// A weight's default in a traced graph: the Parameter's value, or a host snapshot of a device
// value (graph dumps print defaults and MindIR export writes them, both on the host).
Tensor weight_default(const Parameter& p) { return backend::to_host(p.value); }

}  // namespace

ops::Var Cell::param(Parameter& p) {
  trace::Tracer* tracer = active_tracer();
  if (tracer == nullptr) {
    // A non-trainable Parameter may be assigned in place later in this call: a snapshot keeps
    // the value read here, as in graph mode. Trainable ones are shared (no copy).
    return ops::Var(
        Value::tensor(p.requires_grad ? p.value : backend::clone_on_device(p.value)));
  }
  if (const ops::Var* v = tracer->assigned(&p)) return *v;
  return ops::Var(static_cast<ir::Node*>(tracer->weight(&p, p.name, weight_default(p))));
}

void Cell::assign(Parameter& p, const ops::Var& value) {
  trace::Tracer* tracer = active_tracer();
  const bool tracing = tracer != nullptr;
  auto mismatch = [&](const std::string& got) {
    return ValueError("Cell.assign: expected a value of " +
                      std::string(dtype_name(p.value.dtype())) + " " +
                      shape_to_string(p.value.shape()) + " for parameter '" + p.name + "', got " +
                      got);
  };
  if (!tracing) {
    if (!value.is_value() || !value.value().is_tensor()) throw mismatch("a non-tensor value");
    const Tensor& v = value.value().as_tensor();
    if (v.dtype() != p.value.dtype() || v.shape() != p.value.shape()) {
      throw mismatch(std::string(dtype_name(v.dtype())) + " " + shape_to_string(v.shape()));
    }
    copy_into(p.value, v);  // in place, whichever devices they are on
    return;
  }
  ir::AbstractPtr a = tracer->abstract_of(value);
  if (!a || !a->is_tensor()) throw mismatch("a non-tensor value");
  if (a->dtype() != p.value.dtype() || !a->has_rank() || a->shape() != p.value.shape()) {
    throw mismatch(std::string(dtype_name(a->dtype())) + " " +
                   (a->has_rank() ? shape_to_string(a->shape()) : std::string("(unknown rank)")));
  }
  // The graph reads the old value through its weight.
  tracer->weight(&p, p.name, weight_default(p));
  tracer->assign(&p, value);
}

// ---------------------------------------------------------------------------------------------
// Graph-mode root calls

namespace {

// The number of tensor leaves of `a` (tuples flattened), or nullopt when some leaf is not a
// tensor or is unknown.
std::optional<std::size_t> tensor_leaves(const ir::AbstractPtr& a) {
  if (!a) return std::nullopt;
  if (a->is_tensor()) return 1;
  if (!a->is_tuple()) return std::nullopt;
  std::size_t n = 0;
  for (const ir::AbstractPtr& e : a->elements()) {
    std::optional<std::size_t> k = tensor_leaves(e);
    if (!k) return std::nullopt;
    n += *k;
  }
  return n;
}

// What a graph-mode root call needs of its program: the weights it passes, and whether the
// output carries state updates after construct's output.
struct CellProgram {
  std::vector<Parameter*> weights;
  bool has_updates = false;
};

}  // namespace

runtime::CompiledFunction& Cell::compiled_function() {
  if (!compiled_) {
    compiled_ = std::make_unique<runtime::CompiledFunction>(
        [this](const std::vector<ir::AbstractPtr>& signature,
               const runtime::CompiledFunction::Dump& dump) {
          Traced t = trace(*this, signature, cls_name_, root_call_site_);
          dump(*t.module, "traced");
          // The assigned Parameters' new values are donated to their weights: updated in place.
          std::vector<std::pair<std::size_t, std::size_t>> donate;
          if (!t.updates.empty()) {
            if (std::optional<std::size_t> leaves =
                    tensor_leaves(t.graph->output()->abstract()->elements()[0])) {
              for (std::size_t i = 0; i < t.updates.size(); ++i) {
                const auto w = std::find(t.weights.begin(), t.weights.end(), t.updates[i]);
                donate.emplace_back(*leaves + i, signature.size() + static_cast<std::size_t>(
                                                                         w - t.weights.begin()));
              }
            }
          }
          auto info = std::make_shared<CellProgram>();
          info->weights = t.weights;
          info->has_updates = !t.updates.empty();
          return runtime::Program(std::move(t.module), t.graph, std::move(donate),
                                  std::move(info));
        },
        runtime::FunctionOptions{.name = cls_name_,
                                 .purpose = passes::Purpose::kEval,
                                 .backend = &context_backend()});
  }
  return *compiled_;
}

ops::Var Cell::call_compiled(const std::vector<ops::Var>& inputs, SourceLocation loc) {
  std::vector<ir::AbstractPtr> signature;
  for (const ops::Var& v : inputs) {
    const Tensor& t = v.value().as_tensor();
    signature.push_back(ir::Abstract::tensor(t.dtype(), t.shape()));
  }
  root_call_site_ = loc;
  runtime::CompiledFunction& fn = compiled_function();
  const std::size_t before = fn.num_compilations();
  runtime::CompiledFunction::Entry& e = fn.entry(signature, training_ ? "train" : "eval");
  num_compilations_ += fn.num_compilations() - before;
  const CellProgram& program = e.program.info_as<CellProgram>();
  // Inputs and Parameters on the function's device (copied / moved once; nothing on the CPU).
  backend::Backend& b = fn.options().backend ? *fn.options().backend : backend::cpu_backend();
  std::vector<Value> args;
  for (const ops::Var& v : inputs) {
    args.push_back(Value::tensor(backend::to_device(v.value().as_tensor(), b)));
  }
  for (Parameter* p : program.weights) {
    nn::to_device(*p, b);
    args.push_back(Value::tensor(p->value));
  }
  Value out = fn.run(e, std::move(args));  // updates land in the Parameters (donation)
  return ops::Var(program.has_updates ? out.elements()[0] : out);
}

void Cell::add_observer(std::shared_ptr<runtime::Observer> observer) {
  compiled_function().add_observer(std::move(observer));
}

void Cell::remove_observer(const runtime::Observer* observer) {
  compiled_function().remove_observer(observer);
}

// ---------------------------------------------------------------------------------------------
// Tracing

Traced::Traced() = default;
Traced::~Traced() = default;
Traced::Traced(Traced&&) noexcept = default;
Traced& Traced::operator=(Traced&&) noexcept = default;

Traced trace(Cell& cell, const std::vector<ir::AbstractPtr>& inputs, std::string name,
             SourceLocation loc) {
  Traced t;
  t.module = std::make_unique<ir::Module>();
  t.graph = t.module->add_graph(std::move(name));
  t.module->set_entry(t.graph);
  trace::Tracer tracer(t.graph);
  std::vector<ops::Var> args;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    args.emplace_back(t.graph->add_parameter("x" + std::to_string(i), inputs[i]));
  }
  ops::Var out;
  {
    trace::TracerScope active(tracer);
    out = cell(std::move(args), loc);
    if (!tracer.assignments().empty()) {
      std::vector<ops::Var> elements{out};
      for (const auto& [p, v] : tracer.assignments()) {
        elements.push_back(v);
        t.updates.push_back(static_cast<Parameter*>(const_cast<void*>(p)));
      }
      out = tracer.make_tuple(elements);
    }
  }
  t.graph->set_output(tracer.node_of(out));
  passes::infer_graph(t.graph);
  ir::verify(*t.module);
  for (const void* p : tracer.weight_order()) {
    t.weights.push_back(static_cast<Parameter*>(const_cast<void*>(p)));
  }
  return t;
}

}  // namespace loom::nn
