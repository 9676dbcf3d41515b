// Cells and tracing. Each thread keeps a stack of emitters (the top is current_emitter()), a
// stack of Cell scope names (joined into DebugInfo::scope and error paths) and, while tracing,
// the tracer mapping nn::Parameters to graph weights. PyNative mode is simply the empty stack.
#include "nn/cell.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <source_location>
#include <unordered_map>

#include "backends/eager.h"
#include "core/trace/graph_emitter.h"
#include "core/ir/anf.h"
#include "core/ir/error.h"
#include "core/ir/verify.h"
#include "core/passes/infer.h"
#include "runtime/executable.h"
#include "nn/context.h"
#include "nn/initializer.h"
#include "ops/op.h"

namespace loom::nn {
namespace {

using ir::Value;

// Appends CNodes to the traced graph with the current Cell path as their scope. Inference errors
// carry no context here: the Cell that is running appends its path.
class TraceEmitter final : public ops::Emitter {
 public:
  explicit TraceEmitter(ir::FuncGraph* graph) : nodes_(graph) {}

  ops::Var emit(std::string_view op, const std::vector<ops::Var>& args,
                ir::Primitive::Attrs attrs) override;
  ops::Var constant(ir::Value value) override { return nodes_.constant(std::move(value)); }
  ir::AbstractPtr abstract_of(const ops::Var& v) override { return nodes_.abstract_of(v); }

  ir::FuncGraph* graph() const { return nodes_.target(); }
  ir::Node* node_of(const ops::Var& v) { return nodes_.node_of(v); }
  std::unordered_map<Parameter*, ir::Parameter*> weights;
  std::vector<Parameter*> weight_order;
  std::vector<std::pair<Parameter*, ops::Var>> assigned;  // in order of the first assign

  // p's graph weight, made on first use.
  ir::Parameter* weight(Parameter& p) {
    auto it = weights.find(&p);
    if (it == weights.end()) {
      ir::Parameter* w = graph()->add_parameter(
          p.name, ir::Abstract::tensor(p.value.dtype(), p.value.shape()));
      w->set_default(p.value);
      it = weights.emplace(&p, w).first;
      weight_order.push_back(&p);
    }
    return it->second;
  }

 private:
  trace::GraphEmitter nodes_;  // node_of: Values become constants of the graph
};

// A user call site: file relative to the project root (see cell.h), line; file "" for none.
struct Site {
  std::string file;
  int line = 0;
};

struct ThreadState {
  std::vector<ops::Emitter*> emitters;
  std::vector<std::string> scopes;
  TraceEmitter* tracer = nullptr;
  bool error_has_path = false;  // the innermost Cell already appended its path
  Site cell_site;               // the current user call site (set by Cell::operator())
  const Site* op_site = nullptr;  // a free function's own user call site, while it emits
};

ThreadState& state() {
  thread_local ThreadState s;
  return s;
}

std::string join_scopes(const std::vector<std::string>& scopes) {
  std::string s;
  for (const std::string& part : scopes) {
    if (!s.empty()) s += '/';
    s += part;
  }
  return s;
}

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

// Relative to the project root when under it; nullopt for the nn library's own files.
std::optional<Site> user_site(const std::source_location& loc) {
  std::string file = loc.file_name();
  const std::string& root = project_root();
  if (!root.empty() && file.rfind(root, 0) == 0) file = file.substr(root.size());
  if (file.rfind("nn/", 0) == 0) return std::nullopt;
  return Site{std::move(file), static_cast<int>(loc.line())};
}

// Makes a free function's user call site (if it is one) the site of the nodes it emits.
class OpSiteScope {
 public:
  explicit OpSiteScope(const std::source_location& loc) : saved_(state().op_site) {
    site_ = user_site(loc);
    if (site_) state().op_site = &*site_;
  }
  ~OpSiteScope() { state().op_site = saved_; }
  OpSiteScope(const OpSiteScope&) = delete;
  OpSiteScope& operator=(const OpSiteScope&) = delete;

 private:
  std::optional<Site> site_;
  const Site* saved_;
};

ops::Var TraceEmitter::emit(std::string_view op, const std::vector<ops::Var>& args,
                            ir::Primitive::Attrs attrs) {
  ir::PrimitivePtr prim = ops::make_op(op, std::move(attrs));
  std::vector<ir::Node*> inputs;
  std::vector<ir::AbstractPtr> abstracts;
  bool known = true;
  for (const ops::Var& a : args) {
    ir::Node* n = nodes_.node_of(a);
    inputs.push_back(n);
    abstracts.push_back(n->abstract());
    known = known && n->abstract() != nullptr;
  }
  // Infer before adding the node, so that a failing op leaves no half-built node behind.
  ir::AbstractPtr out = known ? ops::infer(*prim, abstracts) : nullptr;
  std::vector<std::string> scope = state().scopes;
  scope.emplace_back(op);
  const Site& site = state().op_site ? *state().op_site : state().cell_site;
  ir::CNode* c = graph()->add_call(
      prim, inputs,
      ir::DebugInfo{.scope = join_scopes(scope), .file = site.file, .line = site.line});
  c->set_abstract(std::move(out));
  return ops::Var(static_cast<ir::Node*>(c));
}

class StateGuard {
 public:
  explicit StateGuard(TraceEmitter* tracer) : saved_(state().tracer) {
    state().emitters.push_back(tracer);
    state().tracer = tracer;
  }
  ~StateGuard() {
    state().emitters.pop_back();
    state().tracer = saved_;
  }

 private:
  TraceEmitter* saved_;
};

}  // namespace

ops::Emitter& current_emitter() {
  static backend::EagerEmitter eager;
  ThreadState& s = state();
  return s.emitters.empty() ? static_cast<ops::Emitter&>(eager) : *s.emitters.back();
}

EmitterScope::EmitterScope(ops::Emitter& emitter) { state().emitters.push_back(&emitter); }
EmitterScope::~EmitterScope() { state().emitters.pop_back(); }

std::string current_cell_path() { return join_scopes(state().scopes); }

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

// ---------------------------------------------------------------------------------------------
// Cell

ops::Var Cell::operator()(std::vector<ops::Var> inputs, SourceLocation loc) {
  ThreadState& s = state();
  if (context_mode() == ExecMode::kGraph && s.scopes.empty() && s.emitters.empty() &&
      std::all_of(inputs.begin(), inputs.end(), [](const ops::Var& v) {
        return v.is_value() && v.value().is_tensor();
      })) {
    return call_compiled(inputs, loc);
  }
  if (s.scopes.empty()) s.error_has_path = false;
  s.scopes.push_back(s.scopes.empty() || registered_name_.empty() ? cls_name_ : registered_name_);
  // This call's site becomes the current user call site (when it is user code), and the op site
  // of an enclosing free function no longer applies inside.
  struct Pop {
    Site saved_site;
    const Site* saved_op;
    ~Pop() {
      state().scopes.pop_back();
      state().cell_site = std::move(saved_site);
      state().op_site = saved_op;
    }
  } pop{s.cell_site, s.op_site};
  if (std::optional<Site> site = user_site(loc)) s.cell_site = std::move(*site);
  s.op_site = nullptr;
  try {
    ops::Var out = construct(inputs);
    s.error_has_path = false;  // an error a construct caught and recovered from is forgotten
    return out;
  } catch (const Error& e) {
    if (s.error_has_path) throw;
    s.error_has_path = true;
    rethrow_with_context(e, " (in " + join_scopes(s.scopes) + ")");
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

void Cell::set_train(bool mode) {
  training_ = mode;
  for (const auto& [name, child] : children_) child->set_train(mode);
}

ops::Var Cell::param(Parameter& p) {
  TraceEmitter* tracer = state().tracer;
  // An emitter pushed inside a trace (EmitterScope) sees plain values, like PyNative.
  if (tracer == nullptr || &current_emitter() != tracer) {
    // A non-trainable Parameter may be assigned in place later in this call: a snapshot keeps
    // the value read here, as in graph mode. Trainable ones are shared (no copy).
    return ops::Var(Value::tensor(p.requires_grad ? p.value : p.value.clone()));
  }
  for (const auto& [q, v] : tracer->assigned) {
    if (q == &p) return v;
  }
  return ops::Var(static_cast<ir::Node*>(tracer->weight(p)));
}

void Cell::assign(Parameter& p, const ops::Var& value) {
  TraceEmitter* tracer = state().tracer;
  const bool tracing = tracer != nullptr && &current_emitter() == tracer;
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
    if (v.raw_data() != p.value.raw_data()) {
      std::memcpy(p.value.raw_data(), v.raw_data(), v.nbytes());
    }
    return;
  }
  ir::AbstractPtr a = tracer->abstract_of(value);
  if (!a || !a->is_tensor()) throw mismatch("a non-tensor value");
  if (a->dtype() != p.value.dtype() || !a->has_rank() || a->shape() != p.value.shape()) {
    throw mismatch(std::string(dtype_name(a->dtype())) + " " +
                   (a->has_rank() ? shape_to_string(a->shape()) : std::string("(unknown rank)")));
  }
  tracer->weight(p);  // the graph reads the old value through its weight
  for (auto& [q, v] : tracer->assigned) {
    if (q == &p) {
      v = value;
      return;
    }
  }
  tracer->assigned.emplace_back(&p, value);
}

// ---------------------------------------------------------------------------------------------
// Graph-mode root calls

struct Cell::CompiledCall {
  std::unique_ptr<ir::Module> module;
  std::vector<Parameter*> weights, updates;
  std::unique_ptr<runtime::Executable> exe;
};

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

}  // namespace

ops::Var Cell::call_compiled(const std::vector<ops::Var>& inputs, SourceLocation loc) {
  std::string key;
  std::vector<ir::AbstractPtr> abstracts;
  for (const ops::Var& v : inputs) {
    const Tensor& t = v.value().as_tensor();
    key += std::string(dtype_name(t.dtype())) + shape_to_string(t.shape()) + ";";
    abstracts.push_back(ir::Abstract::tensor(t.dtype(), t.shape()));
  }
  key += training_ ? "train" : "eval";
  auto it = compiled_.find(key);
  if (it == compiled_.end()) {
    auto c = std::make_shared<CompiledCall>();
    Traced t = trace(*this, abstracts, cls_name_, loc);
    std::vector<std::pair<std::size_t, std::size_t>> donate;
    if (!t.updates.empty()) {
      if (std::optional<std::size_t> leaves =
              tensor_leaves(t.graph->output()->abstract()->elements()[0])) {
        for (std::size_t i = 0; i < t.updates.size(); ++i) {
          const auto w = std::find(t.weights.begin(), t.weights.end(), t.updates[i]);
          donate.emplace_back(*leaves + i,
                              inputs.size() + static_cast<std::size_t>(w - t.weights.begin()));
        }
      }
    }
    c->exe = runtime::compile(*t.graph, backend::cpu_backend(), {.donate = std::move(donate)});
    c->weights = std::move(t.weights);
    c->updates = std::move(t.updates);
    c->module = std::move(t.module);
    ++num_compilations_;
    it = compiled_.emplace(key, std::move(c)).first;
  }
  CompiledCall& c = *it->second;
  std::vector<Value> args;
  for (const ops::Var& v : inputs) args.push_back(v.value());
  for (Parameter* p : c.weights) args.push_back(Value::tensor(p->value));
  Value out = c.exe->run(std::move(args));
  if (c.updates.empty()) return ops::Var(std::move(out));
  const auto& el = out.elements();
  for (std::size_t i = 0; i < c.updates.size(); ++i) {
    const Tensor& v = el[1 + i].as_tensor();
    Tensor& dst = c.updates[i]->value;
    if (v.raw_data() != dst.raw_data()) std::memcpy(dst.raw_data(), v.raw_data(), dst.nbytes());
  }
  return ops::Var(el[0]);
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
  TraceEmitter tracer(t.graph);
  std::vector<ops::Var> args;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    args.emplace_back(t.graph->add_parameter("x" + std::to_string(i), inputs[i]));
  }
  ops::Var out;
  {
    StateGuard guard(&tracer);
    out = cell(std::move(args), loc);
    if (!tracer.assigned.empty()) {
      std::vector<ops::Var> elements{out};
      for (const auto& [p, v] : tracer.assigned) {
        elements.push_back(v);
        t.updates.push_back(p);
      }
      out = tracer.make_tuple(elements);
    }
  }
  t.graph->set_output(tracer.node_of(out));
  passes::infer_graph(t.graph);
  ir::verify(*t.module);
  t.weights = std::move(tracer.weight_order);
  return t;
}

}  // namespace loom::nn
