// The compiled runtime: compile() flattens an inferred graph into launches over buffers, rewrites
// buffer ids for in-place elementwise ops and donations, and plans the intermediates' memory;
// run() walks the launches.
#include "runtime/executable.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "backends/backend.h"
#include "core/ir/abstract.h"
#include "core/ir/anf.h"
#include "core/ir/error.h"
#include "core/ir/printer.h"
#include "core/passes/infer.h"
#include "runtime/interpreter.h"
#include "ops/op.h"

namespace loom::runtime {

namespace {

using ir::CNode;
using ir::FuncGraph;
using ir::Node;
using ir::Value;

constexpr std::int64_t kEnd = INT64_MAX;  // "live to the end of the run"

bool is_control(const ir::Primitive* p) {
  return p && (p->name() == ir::kIfPrim || p->name() == ir::kWhilePrim);
}

// A graph the compiler flattens: primitive callees only (If / While included), tensor parameters.
bool compilable(const FuncGraph& g) {
  for (const CNode* c : g.topo_order()) {
    if (!c->primitive()) return false;
  }
  for (const ir::Parameter* p : g.parameters()) {
    if (p->abstract() && !p->abstract()->is_tensor()) return false;
  }
  return true;
}

bool has_control(const FuncGraph& g) {
  for (const CNode* c : g.topo_order()) {
    if (is_control(c->primitive())) return true;
  }
  return false;
}

// A predicate's value, read through the backend when it lives on a device.
bool truth(const Value& v, const char* what) {
  if (v.is_scalar()) return v.as_bool();
  if (v.is_tensor() && v.as_tensor().numel() == 1) {
    return backend::to_host(v.as_tensor()).get(0) != 0;
  }
  throw TypeError(std::string("run: expected a scalar ") + what + ", got a " +
                  std::string(Value::kind_name(v.kind())));
}

void tensor_leaves(const Value& v, std::vector<Tensor>& out, const std::string& op) {
  if (v.is_tensor()) {
    out.push_back(v.as_tensor());
  } else if (v.is_tuple()) {
    for (const Value& e : v.elements()) tensor_leaves(e, out, op);
  } else {
    throw TypeError(op + ": expected tensor results, got a " + std::string(Value::kind_name(v.kind())));
  }
}

bool needs_infer(const FuncGraph& g) {
  for (const ir::Parameter* p : g.parameters()) {
    if (!p->abstract()) return true;
  }
  for (const CNode* c : g.topo_order()) {
    if (!c->abstract()) return true;
  }
  return false;
}

}  // namespace

// An If / While launch: the trees of its operands (buffers, tuples, non-tensor constants) and
// the nested plans it runs.
struct Executable::Control {
  bool is_while = false;
  Tree pred;               // If: the predicate
  std::vector<Tree> args;  // If: the branch arguments; While: the initial state
  Executable* first = nullptr;   // If: then; While: cond
  Executable* second = nullptr;  // If: else; While: body
};

Executable::~Executable() = default;

class Compiler {
 public:
  Compiler(Executable& exe, const CompileOptions& options) : x_(exe), options_(options) {}

  // An Executable that interprets `graph`; one that runs its flattened launches.
  static std::unique_ptr<Executable> fallback(const FuncGraph& graph, backend::Backend& b,
                                              const CompileOptions& options);
  static std::unique_ptr<Executable> flat(const FuncGraph& graph, backend::Backend& b,
                                          const CompileOptions& options);

  void run(const FuncGraph& g) {
    const std::string where = "compile(@" + g.name() + ")";
    for (const ir::Parameter* p : g.parameters()) {
      const ir::AbstractPtr& a = p->abstract();
      if (!a || !a->is_tensor() || !a->shape_known()) {
        throw ValueError(where + ": expected parameter %" + p->name() +
                         " to have a known tensor shape, got " + (a ? a->to_string() : "none"));
      }
      x_.param_buffers_.push_back(add_buffer(Executable::BufferKind::kParameter, a->dtype(), a->shape()));
      x_.buffers_.back().param = x_.param_defaults_.size();
      x_.param_defaults_.push_back(p->has_default() ? Value::tensor(*p->default_value()) : Value());
      trees_[p] = leaf(x_.param_buffers_.back());
    }
    labels_ = ir::cnode_labels(g);
    x_.graph_ = &g;
    for (const CNode* c : g.topo_order()) trees_[c] = lower(*c);
    if (!g.output()) throw InternalError(where + ": expected an output, got none");
    x_.output_ = tree_of(g.output());
    if (options_.schedule) schedule();
    rewrite_in_place();
    apply_donations();
    plan();
  }

 private:
  using Tree = Executable::Tree;

  std::size_t add_buffer(Executable::BufferKind kind, DType dtype, Shape shape) {
    x_.buffers_.push_back({kind, dtype, std::move(shape), 0, Tensor()});
    return x_.buffers_.size() - 1;
  }
  static Tree leaf(std::size_t b) {
    Tree t;
    t.buffer = static_cast<std::ptrdiff_t>(b);
    return t;
  }

  Tree constant(const Value& v) {
    Tree t;
    if (v.is_tensor()) {
      const Tensor& tensor = v.as_tensor();
      std::size_t b = add_buffer(Executable::BufferKind::kConstant, tensor.dtype(), tensor.shape());
      x_.buffers_[b].value = tensor;
      return leaf(b);
    }
    if (v.is_tuple()) {
      t.is_tuple = true;
      for (const Value& e : v.elements()) t.elements.push_back(constant(e));
      return t;
    }
    t.constant = v;
    return t;
  }

  const Tree& tree_of(const Node* n) {
    auto it = trees_.find(n);
    if (it != trees_.end()) return it->second;
    if (!n->is_value()) {
      throw InternalError("compile: expected a value for a node, got none (a free variable?)");
    }
    return trees_[n] = constant(static_cast<const ir::ValueNode*>(n)->value());
  }

  static void flatten(const Tree& t, std::vector<std::size_t>& out, const std::string& op) {
    if (t.buffer >= 0) {
      out.push_back(static_cast<std::size_t>(t.buffer));
    } else if (t.is_tuple) {
      for (const Tree& e : t.elements) flatten(e, out, op);
    } else {
      throw TypeError(op + ": expected tensor arguments, got a " +
                      std::string(Value::kind_name(t.constant.kind())));
    }
  }

  Tree outputs_of(const ir::Abstract& a, std::vector<std::size_t>& out, const std::string& op) {
    if (a.is_tensor()) {
      if (!a.shape_known()) {
        throw InternalError(op + ": expected a known output shape, got " + a.to_string());
      }
      out.push_back(add_buffer(Executable::BufferKind::kIntermediate, a.dtype(), a.shape()));
      return leaf(out.back());
    }
    if (!a.is_tuple()) {
      throw InternalError(op + ": expected tensor outputs, got " + a.to_string());
    }
    Tree t;
    t.is_tuple = true;
    for (const auto& e : a.elements()) t.elements.push_back(outputs_of(*e, out, op));
    return t;
  }

  Tree lower(const CNode& c) {
    const ir::PrimitivePtr& prim =
        static_cast<const ir::ValueNode*>(c.callee())->value().as_primitive();
    const std::string& name = prim->name();
    const ops::OpDef& def = ops::Registry::global().get(name);
    if (def.trait == ops::Trait::kStructural) {
      if (name == "MakeTuple") {
        Tree t;
        t.is_tuple = true;
        for (std::size_t i = 0; i < c.num_args(); ++i) t.elements.push_back(tree_of(c.arg(i)));
        return t;
      }
      if (name == "TupleGetItem") {
        const Tree& tuple = tree_of(c.arg(0));
        const std::int64_t i = tree_of(c.arg(1)).constant.as_int();
        const auto n = static_cast<std::int64_t>(tuple.elements.size());
        if (!tuple.is_tuple || i < -n || i >= n) {
          throw InternalError("compile: TupleGetItem index out of range or not a tuple");
        }
        return tuple.elements[static_cast<std::size_t>(i < 0 ? i + n : i)];
      }
      return tree_of(c.arg(0));  // Depend, StopGradient
    }
    Executable::Launch l;
    l.prim = prim;
    l.name = c.name();
    l.label = labels_.at(&c);
    l.debug = c.debug();
    if (is_control(prim.get())) return lower_control(c, std::move(l));
    for (std::size_t i = 0; i < c.num_args(); ++i) {
      flatten(tree_of(c.arg(i)), l.inputs, name);
      depend_edges(c.arg(i), l.after);
    }
    if (!c.abstract()) throw InternalError(name + ": expected an inferred node, got none");
    Tree out = outputs_of(*c.abstract(), l.outputs, name);
    if (l.outputs.empty()) throw InternalError(name + ": expected tensor outputs, got none");
    const auto from = static_cast<std::size_t>(def.kernel_dtype_from);
    const DType key = def.kernel_dtype_from >= 0 && from < l.inputs.size()
                          ? x_.buffers_[l.inputs[from]].dtype
                          : x_.buffers_[l.outputs[0]].dtype;
    l.kernel = x_.backend_->find_kernel(name, key);
    if (!l.kernel) {
      throw TypeError(name + ": expected a " + std::string(x_.backend_->name()) + " kernel for " +
                      std::string(dtype_name(key)) + ", got none");
    }
    prepare(l);
    if (!l.kernel->recordable) x_.recordable_ = false;  // e.g. a host-staged all-reduce
    elementwise_.push_back(l.kernel->elementwise_in_place && l.outputs.size() == 1);
    x_.launches_.push_back(std::move(l));
    return out;
  }

  // Depend(value, x) read as an argument (through nested Depends too): x's buffers, whose
  // writers the reading launch must follow (Launch::after). The value is read; x is not.
  void depend_edges(const Node* arg, std::vector<std::size_t>& after) {
    while (arg->is_cnode()) {
      const auto* d = static_cast<const CNode*>(arg);
      if (!d->is_call_to("Depend") || d->num_args() != 2) return;
      buffer_leaves(tree_of(d->arg(1)), after);
      arg = d->arg(0);
    }
  }

  // The kernel's compile-time step: its plan, and its workspace as a buffer of its own.
  void prepare(Executable::Launch& l) {
    if (!l.kernel->prepare) return;
    std::vector<backend::TensorType> in, out;
    for (std::size_t b : l.inputs) in.push_back({x_.buffers_[b].dtype, x_.buffers_[b].shape});
    for (std::size_t b : l.outputs) out.push_back({x_.buffers_[b].dtype, x_.buffers_[b].shape});
    backend::Prepared p =
        l.kernel->prepare(backend::PrepareContext{*l.prim, in, out, x_.backend_->context()});
    l.state = std::move(p.state);
    if (p.workspace_bytes > 0) {
      l.workspace = static_cast<std::ptrdiff_t>(
          add_buffer(Executable::BufferKind::kWorkspace, DType::kUInt8,
                     {static_cast<std::int64_t>(p.workspace_bytes)}));
    }
  }

  // Buffer leaves of a tree (constants skipped): what a control launch reads.
  static void buffer_leaves(const Tree& t, std::vector<std::size_t>& out) {
    if (t.buffer >= 0) out.push_back(static_cast<std::size_t>(t.buffer));
    for (const Tree& e : t.elements) buffer_leaves(e, out);
  }

  Executable* nested(const Tree& t, const std::string& op) {
    if (t.buffer >= 0 || t.is_tuple || !t.constant.is_graph()) {
      throw TypeError(op + ": expected a constant graph argument, got another value");
    }
    const FuncGraph* g = t.constant.as_graph();
    auto it = x_.subs_.find(g);
    if (it == x_.subs_.end()) {
      CompileOptions nested_options;
      nested_options.max_loop_iterations = options_.max_loop_iterations;
      nested_options.keep_inputs = options_.keep_inputs;
      nested_options.in_place = options_.in_place;
      it = x_.subs_.emplace(g, compile(*g, *x_.backend_, nested_options)).first;
    }
    return it->second.get();
  }

  Tree lower_control(const CNode& c, Executable::Launch l) {
    const std::string& name = l.prim->name();
    auto ctl = std::make_shared<Executable::Control>();
    ctl->is_while = name == ir::kWhilePrim;
    const std::size_t first_arg = ctl->is_while ? 2 : 3;
    if (c.num_args() < first_arg) throw TypeError(name + ": expected more arguments");
    if (!ctl->is_while) {
      ctl->pred = tree_of(c.arg(0));
      buffer_leaves(ctl->pred, l.inputs);
    }
    ctl->first = nested(tree_of(c.arg(first_arg - 2)), name);
    ctl->second = nested(tree_of(c.arg(first_arg - 1)), name);
    for (std::size_t i = first_arg; i < c.num_args(); ++i) {
      ctl->args.push_back(tree_of(c.arg(i)));
      buffer_leaves(ctl->args.back(), l.inputs);
    }
    if (!c.abstract()) throw InternalError(name + ": expected an inferred node, got none");
    Tree out = outputs_of(*c.abstract(), l.outputs, name);
    l.control = std::move(ctl);
    x_.recordable_ = false;  // its predicate is read on the host: not in one recording
    elementwise_.push_back(false);
    x_.launches_.push_back(std::move(l));
    return out;
  }

  std::size_t find(std::size_t b) {
    while (rep_.count(b)) b = rep_[b];
    return b;
  }

  void rename_all() {
    for (auto& l : x_.launches_) {
      for (auto& b : l.inputs) b = find(b);
      for (auto& b : l.outputs) b = find(b);
      if (l.control) {
        rename_tree(l.control->pred);
        for (Tree& t : l.control->args) rename_tree(t);
      }
    }
    rename_tree(x_.output_);
  }
  void rename_tree(Tree& t) {
    if (t.buffer >= 0) t.buffer = static_cast<std::ptrdiff_t>(find(static_cast<std::size_t>(t.buffer)));
    for (Tree& e : t.elements) rename_tree(e);
  }
  void output_leaves(const Tree& t, std::vector<std::size_t>& out) const {
    if (t.buffer >= 0) out.push_back(static_cast<std::size_t>(t.buffer));
    for (const Tree& e : t.elements) output_leaves(e, out);
  }
  // Last launch reading each buffer (kEnd for graph outputs, -1 when never read).
  std::vector<std::int64_t> last_uses() const {
    std::vector<std::int64_t> last(x_.buffers_.size(), -1);
    for (std::size_t i = 0; i < x_.launches_.size(); ++i) {
      for (std::size_t b : x_.launches_[i].inputs) last[b] = static_cast<std::int64_t>(i);
    }
    std::vector<std::size_t> outs;
    output_leaves(x_.output_, outs);
    for (std::size_t b : outs) last[b] = kEnd;
    // A donated output that could not be written in place is copied into its argument after the
    // last launch, so it lives to the end too.
    for (auto [b, param] : x_.donation_copies_) last[b] = kEnd;
    return last;
  }
  bool same_layout(std::size_t a, std::size_t b) const {
    return x_.buffers_[a].dtype == x_.buffers_[b].dtype && x_.buffers_[a].shape == x_.buffers_[b].shape;
  }

  // Reorders the launches to keep less memory live (list scheduling, before any buffer is
  // shared): among the launches whose inputs are ready, the one that frees the most bytes net of
  // what it allocates runs next; ties keep the graph's topological order. The graph's order
  // follows its output: the optimizer's updates pull every weight gradient at the end, so a
  // filter gradient (the only reader left of a forward activation and of an incoming gradient)
  // would wait for the whole backward pass, holding both; here it runs as soon as it can. Each
  // buffer has one writer at this point, so the order is any order its readers respect.
  void schedule() {
    auto& L = x_.launches_;
    const std::size_t n = L.size();
    std::vector<std::ptrdiff_t> writer(x_.buffers_.size(), -1);
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t b : L[i].outputs) writer[b] = static_cast<std::ptrdiff_t>(i);
    }
    auto bytes = [&](std::size_t b) {
      const Executable::Buffer& buf = x_.buffers_[b];
      return static_cast<double>(shape_numel(buf.shape)) * static_cast<double>(dtype_size(buf.dtype));
    };
    std::vector<std::size_t> readers(x_.buffers_.size(), 0);  // launches that read it, left
    std::vector<std::vector<std::size_t>> succ(n);
    std::vector<std::vector<std::size_t>> ins(n);  // each launch's distinct inputs
    std::vector<double> allocates(n, 0.0);         // bytes of each launch's outputs
    std::vector<std::size_t> waiting(n, 0);  // producers not yet scheduled
    for (std::size_t i = 0; i < n; ++i) {
      ins[i] = L[i].inputs;
      std::sort(ins[i].begin(), ins[i].end());
      ins[i].erase(std::unique(ins[i].begin(), ins[i].end()), ins[i].end());
      for (std::size_t b : L[i].outputs) allocates[i] += bytes(b);
      std::vector<std::size_t> preds;
      for (std::size_t b : ins[i]) {
        ++readers[b];
        if (writer[b] >= 0) preds.push_back(static_cast<std::size_t>(writer[b]));
      }
      for (std::size_t b : L[i].after) {  // Depend: ordered, not read
        if (writer[b] >= 0) preds.push_back(static_cast<std::size_t>(writer[b]));
      }
      std::sort(preds.begin(), preds.end());
      preds.erase(std::unique(preds.begin(), preds.end()), preds.end());
      for (std::size_t p : preds) succ[p].push_back(i);
      waiting[i] = preds.size();
    }
    std::vector<bool> kept(x_.buffers_.size(), false);  // graph outputs: never freed
    std::vector<std::size_t> outs;
    output_leaves(x_.output_, outs);
    for (std::size_t b : outs) kept[b] = true;
    auto score = [&](std::size_t i) {  // bytes freed (last reader) less bytes allocated
      double s = -allocates[i];
      for (std::size_t b : ins[i]) {
        if (readers[b] == 1 && !kept[b] && x_.buffers_[b].kind == Executable::BufferKind::kIntermediate) {
          s += bytes(b);
        }
      }
      return s;
    };
    std::vector<std::size_t> ready, order;
    for (std::size_t i = 0; i < n; ++i) {
      if (waiting[i] == 0) ready.push_back(i);
    }
    using Order = backend::KernelDef::Order;
    auto order_of = [&](std::size_t i) {
      return L[i].kernel ? L[i].kernel->order : Order::kByMemory;  // If / While: by memory
    };
    // kEarly first, then by memory, kLate last; ties to the graph's order.
    auto rank = [&](std::size_t i) {
      const Order o = order_of(i);
      return o == Order::kEarly ? 0 : o == Order::kByMemory ? 1 : 2;
    };
    while (!ready.empty()) {
      std::size_t best = 0;
      double best_score = score(ready[0]);
      for (std::size_t k = 1; k < ready.size(); ++k) {
        const std::size_t i = ready[k], b = ready[best];
        if (rank(i) != rank(b)) {
          if (rank(i) < rank(b)) {
            best = k;
            best_score = score(i);
          }
          continue;
        }
        const double sc = score(i);
        if (sc > best_score || (sc == best_score && i < b)) {
          best = k;
          best_score = sc;
        }
      }
      const std::size_t i = ready[best];
      ready.erase(ready.begin() + static_cast<std::ptrdiff_t>(best));
      order.push_back(i);
      for (std::size_t b : ins[i]) --readers[b];
      for (std::size_t j : succ[i]) {
        if (--waiting[j] == 0) ready.push_back(j);
      }
    }
    if (order.size() != n) throw InternalError("compile: the launches' dependencies form a cycle");
    std::vector<Executable::Launch> launches;
    std::vector<bool> elementwise;
    launches.reserve(n);
    for (std::size_t i : order) {
      launches.push_back(std::move(L[i]));
      elementwise.push_back(elementwise_[i]);
    }
    L = std::move(launches);
    elementwise_ = std::move(elementwise);
  }

  // A single-output elementwise op that is the last reader of a same-shaped intermediate input
  // writes its output there: the output buffer id becomes the input's.
  void rewrite_in_place() {
    for (const auto& l : x_.launches_) {
      for (std::size_t b : l.outputs) {
        const Executable::Buffer& buf = x_.buffers_[b];
        x_.sum_intermediates_ += round_up(static_cast<std::size_t>(shape_numel(buf.shape)) * dtype_size(buf.dtype));
      }
    }
    if (!options_.in_place || options_.keep_inputs) return;
    const std::vector<std::int64_t> last = last_uses();
    std::unordered_map<std::size_t, std::int64_t> eff_last;  // representative -> its last read
    auto last_of = [&](std::size_t r) {
      auto it = eff_last.find(r);
      return it != eff_last.end() ? it->second : last[r];
    };
    for (std::size_t i = 0; i < x_.launches_.size(); ++i) {
      auto& l = x_.launches_[i];
      for (auto& b : l.inputs) b = find(b);
      if (!elementwise_[i]) continue;
      const std::size_t out = l.outputs[0];
      for (std::size_t b : l.inputs) {
        if (x_.buffers_[b].kind != Executable::BufferKind::kIntermediate) continue;
        if (last_of(b) != static_cast<std::int64_t>(i) || !same_layout(b, out)) continue;
        rep_[out] = b;
        eff_last[b] = last[out];
        l.outputs[0] = b;
        ++x_.num_in_place_;
        break;
      }
    }
    rename_all();
  }

  void apply_donations() {
    x_.donated_params_.assign(x_.param_buffers_.size(), 0);
    if (options_.donate.empty()) return;
    std::vector<std::size_t> leaves;
    output_leaves(x_.output_, leaves);
    std::vector<Tree*> leaf_nodes;
    collect_leaf_nodes(x_.output_, leaf_nodes);
    std::vector<bool> donated_param(x_.param_buffers_.size(), false);
    for (auto [k, p] : options_.donate) {
      if (k >= leaves.size() || p >= x_.param_buffers_.size()) {
        throw ValueError("compile: expected donation (output " + std::to_string(k) + ", parameter " +
                         std::to_string(p) + ") within " + std::to_string(leaves.size()) +
                         " outputs and " + std::to_string(x_.param_buffers_.size()) + " parameters");
      }
      const std::size_t pb = x_.param_buffers_[p];
      const std::size_t ob = find(static_cast<std::size_t>(leaf_nodes[k]->buffer));
      if (!same_layout(ob, pb)) {
        throw ValueError("compile: expected donated output " + std::to_string(k) +
                         " to match parameter " + std::to_string(p) + " in dtype and shape");
      }
      if (donated_param[p]) {
        throw ValueError("compile: expected parameter " + std::to_string(p) + " donated once");
      }
      donated_param[p] = true;
      x_.donated_params_[p] = 1;
      if (ob == pb) continue;  // the output is the argument itself
      if (can_donate(ob, pb, leaves)) {
        rep_[ob] = pb;
        rename_all();
        ++x_.donations_in_place_;
        leaves.clear();
        output_leaves(x_.output_, leaves);
      } else {
        x_.donation_copies_.push_back({ob, p});
        leaf_nodes[k]->buffer = static_cast<std::ptrdiff_t>(pb);
      }
    }
  }
  void collect_leaf_nodes(Tree& t, std::vector<Tree*>& out) {
    if (t.buffer >= 0) out.push_back(&t);
    for (Tree& e : t.elements) collect_leaf_nodes(e, out);
  }
  bool can_donate(std::size_t ob, std::size_t pb, const std::vector<std::size_t>& leaves) {
    if (x_.buffers_[ob].kind != Executable::BufferKind::kIntermediate) return false;
    if (std::count(leaves.begin(), leaves.end(), ob) != 1) return false;
    if (std::count(leaves.begin(), leaves.end(), pb) != 0) return false;
    std::int64_t first_write = -1, last_read = -1;
    for (std::size_t i = 0; i < x_.launches_.size(); ++i) {
      const auto& l = x_.launches_[i];
      if (first_write < 0 && std::count(l.outputs.begin(), l.outputs.end(), ob)) {
        first_write = static_cast<std::int64_t>(i);
      }
      if (std::count(l.inputs.begin(), l.inputs.end(), pb)) last_read = static_cast<std::int64_t>(i);
    }
    if (last_read < first_write) return true;
    if (last_read > first_write) return false;
    // Read and written by the same launch: only where the kernel tolerates the aliasing, and
    // no observer reads the launch's inputs afterwards.
    if (options_.keep_inputs) return false;
    const auto& l = x_.launches_[static_cast<std::size_t>(first_write)];
    if (elementwise_[static_cast<std::size_t>(first_write)]) return true;
    if (l.control || l.kernel->in_place.empty()) return false;
    for (std::size_t i = 0; i < l.inputs.size(); ++i) {
      if (l.inputs[i] != pb) continue;
      bool ok = false;
      for (auto [in, out] : l.kernel->in_place) {
        ok |= in == i && out < l.outputs.size() && l.outputs[out] == ob;
      }
      if (!ok) return false;
    }
    return true;
  }

  void plan() {
    const std::vector<std::int64_t> last = last_uses();
    const auto n = static_cast<std::int64_t>(x_.launches_.size());
    std::unordered_map<std::size_t, std::size_t> index;
    for (std::size_t i = 0; i < x_.launches_.size(); ++i) {
      // A workspace lives for its launch only.
      if (x_.launches_[i].workspace >= 0) {
        const auto b = static_cast<std::size_t>(x_.launches_[i].workspace);
        index[b] = x_.planned_.size();
        x_.planned_.push_back(b);
        const auto at = static_cast<std::int64_t>(i);
        x_.lives_.push_back({static_cast<std::size_t>(x_.buffers_[b].shape[0]), at, at});
      }
      for (std::size_t b : x_.launches_[i].outputs) {
        if (x_.buffers_[b].kind != Executable::BufferKind::kIntermediate || index.count(b)) continue;
        index[b] = x_.planned_.size();
        x_.planned_.push_back(b);
        const Executable::Buffer& buf = x_.buffers_[b];
        const std::int64_t first = static_cast<std::int64_t>(i);
        std::int64_t l = last[b] == kEnd ? n : std::max(last[b], first);
        // An in-place chain rewrites the buffer later: it lives until its last write too.
        for (std::size_t j = i + 1; j < x_.launches_.size(); ++j) {
          for (std::size_t o : x_.launches_[j].outputs) {
            if (o == b) l = std::max(l, static_cast<std::int64_t>(j));
          }
        }
        x_.lives_.push_back({static_cast<std::size_t>(shape_numel(buf.shape)) * dtype_size(buf.dtype),
                             first, l});
      }
    }
    x_.plan_ = plan_memory(x_.lives_, options_.strategy);
    check_plan(x_.lives_, x_.plan_);
    // Which launches write an intermediate first (they allocate it).
    std::vector<bool> seen(x_.buffers_.size(), false);
    for (auto& l : x_.launches_) {
      for (std::size_t b : l.outputs) {
        fresh_.push_back(x_.buffers_[b].kind == Executable::BufferKind::kIntermediate && !seen[b]);
        seen[b] = true;
      }
    }
  }

 public:
  std::vector<bool> fresh_;  // per launch output, flattened over launches

 private:
  Executable& x_;
  const CompileOptions& options_;
  std::unordered_map<const Node*, Tree> trees_;
  std::unordered_map<const CNode*, std::string> labels_;
  std::unordered_map<std::size_t, std::size_t> rep_;
  std::vector<bool> elementwise_;
};

std::size_t Executable::arena_bytes(const Value& v) const {
  if (v.is_tensor()) {
    return arena_ && v.as_tensor().storage() == arena_ ? v.as_tensor().nbytes() : 0;
  }
  std::size_t n = 0;
  if (v.is_tuple()) {
    for (const Value& e : v.elements()) n += arena_bytes(e);
  }
  return n;
}

Value Executable::copy_out_of_arena(const Value& v) const {
  if (v.is_tensor()) {
    return arena_ && v.as_tensor().storage() == arena_
               ? Value::tensor(backend::clone_on_device(v.as_tensor()))
               : v;
  }
  if (v.is_tuple() && escapes_arena(v)) {
    std::vector<Value> elements;
    elements.reserve(v.elements().size());
    for (const Value& e : v.elements()) elements.push_back(copy_out_of_arena(e));
    return Value::tuple(std::move(elements));
  }
  return v;
}

bool Executable::escapes_arena(const Value& v) const {
  if (v.is_tensor()) return arena_ && v.as_tensor().storage() == arena_;
  if (v.is_tuple()) {
    for (const Value& e : v.elements()) {
      if (escapes_arena(e)) return true;
    }
  }
  return false;
}

std::unique_ptr<Executable> compile(const FuncGraph& graph) {
  return compile(graph, backend::cpu_backend());
}

std::unique_ptr<Executable> compile(const FuncGraph& graph, backend::Backend& b,
                                    const CompileOptions& options) {
  if (options.interpret || !compilable(graph)) return Compiler::fallback(graph, b, options);
  if (!has_control(graph)) return Compiler::flat(graph, b, options);
  // Control flow: nested plans, compiled now. Recursion through If / While, and whatever the
  // compiler cannot plan (unknown shapes, graph-valued parameters), runs the interpreter.
  static thread_local std::vector<const FuncGraph*> compiling;
  if (std::find(compiling.begin(), compiling.end(), &graph) != compiling.end()) {
    throw InternalError("compile: @" + graph.name() + " reaches itself through control flow");
  }
  compiling.push_back(&graph);
  struct Pop {
    ~Pop() { compiling.pop_back(); }
  } pop;
  try {
    return Compiler::flat(graph, b, options);
  } catch (const Error&) {
    return Compiler::fallback(graph, b, options);
  }
}

std::unique_ptr<Executable> Compiler::fallback(const FuncGraph& graph, backend::Backend& b,
                                               const CompileOptions& options) {
  std::unique_ptr<Executable> exe(new Executable());
  exe->backend_ = &b;
  exe->fallback_ = &graph;
  exe->graph_name_ = graph.name();
  exe->fallback_donate_ = options.donate;
  exe->max_loop_iterations_ = options.max_loop_iterations;
  return exe;
}

std::unique_ptr<Executable> Compiler::flat(const FuncGraph& graph, backend::Backend& b,
                                           const CompileOptions& options) {
  std::unique_ptr<Executable> exe(new Executable());
  exe->backend_ = &b;
  exe->graph_name_ = graph.name();
  exe->max_loop_iterations_ = options.max_loop_iterations;
  exe->shared_arena_ = options.shared_arena;
  // The graph's abstracts are annotations: filling missing ones does not change its meaning.
  if (needs_infer(graph)) passes::infer_graph(const_cast<FuncGraph*>(&graph));
  Compiler c(*exe, options);
  c.run(graph);
  // Mark first writes: an output slot allocates when `fresh`.
  std::size_t k = 0;
  for (auto& l : exe->launches_) {
    l.fresh.resize(l.outputs.size());
    for (std::size_t j = 0; j < l.outputs.size(); ++j) l.fresh[j] = c.fresh_[k++];
    if (!l.control && l.kernel->writes_every_output) {
      bool empty_input = false;
      for (std::size_t in : l.inputs) empty_input |= shape_numel(exe->buffers_[in].shape) == 0;
      l.zero_fresh = empty_input;
    }
  }
  exe->cur_.resize(exe->buffers_.size());
  for (std::size_t i = 0; i < exe->buffers_.size(); ++i) {
    if (exe->buffers_[i].kind == Executable::BufferKind::kConstant) {
      // Constants live where the kernels read them (copied once to a device).
      exe->cur_[i] = backend::to_device(exe->buffers_[i].value, b);
    }
  }
  return exe;
}

void Executable::set_observers(std::shared_ptr<const ObserverList> observers, int depth) {
  if (observers && observers->empty()) observers.reset();
  observers_ = observers;
  depth_ = depth;
  for (auto& [g, sub] : subs_) sub->set_observers(observers, depth + 1);
}

void Executable::run_control(const Launch& l) {
  const Control& ctl = *l.control;
  const std::string& op = l.prim->name();
  std::vector<Value> args;
  args.reserve(ctl.args.size());
  for (const Tree& t : ctl.args) args.push_back(build(t));
  Value result;
  if (!ctl.is_while) {
    Executable* branch = truth(build(ctl.pred), "If predicate") ? ctl.first : ctl.second;
    result = branch->run(std::move(args));
  } else {
    const std::int64_t max_iterations = max_loop_iterations_;
    for (std::int64_t it = 0;; ++it) {
      if (!truth(ctl.first->run(args), "While condition")) break;
      if (it >= max_iterations) {
        throw ValueError("While: expected at most " + std::to_string(max_iterations) +
                         " iterations, got more");
      }
      Value next = ctl.second->run(args);
      if (!next.is_tuple() || next.elements().size() != args.size()) {
        throw TypeError("While: expected the body to return a tuple of " +
                        std::to_string(args.size()) + " values, got another value");
      }
      args = next.elements();
    }
    result = Value::tuple(std::move(args));
  }
  std::vector<Tensor> leaves;
  tensor_leaves(result, leaves, op);
  if (leaves.size() != l.outputs.size()) {
    throw InternalError(op + ": expected " + std::to_string(l.outputs.size()) + " result tensors, got " +
                        std::to_string(leaves.size()));
  }
  for (std::size_t j = 0; j < leaves.size(); ++j) {
    Tensor& dst = cur_[l.outputs[j]];
    if (leaves[j].dtype() != dst.dtype() || leaves[j].shape() != dst.shape()) {
      throw InternalError(op + ": expected result " + std::to_string(j) + " to be a " +
                          std::string(dtype_name(dst.dtype())) + " tensor of shape " +
                          shape_to_string(dst.shape()) + ", got " + leaves[j].describe());
    }
    backend_->copy(dst.raw_data(), leaves[j].raw_data(), dst.nbytes());
  }
}

Value Executable::build(const Tree& t) const {
  if (t.buffer >= 0) return Value::tensor(cur_[static_cast<std::size_t>(t.buffer)]);
  if (!t.is_tuple) return t.constant;
  std::vector<Value> elements;
  elements.reserve(t.elements.size());
  for (const Tree& e : t.elements) elements.push_back(build(e));
  return Value::tuple(std::move(elements));
}

namespace {

// Output leaf k of `out` (tuples flattened in order), or null.
const Value* output_leaf(const Value& out, std::size_t k, std::size_t& seen) {
  if (!out.is_tuple()) return seen++ == k ? &out : nullptr;
  for (const Value& e : out.elements()) {
    if (const Value* v = output_leaf(e, k, seen)) return v;
  }
  return nullptr;
}

}  // namespace

Value Executable::run_interpreted(const std::vector<Value>& args) {
  InterpretOptions options;
  options.max_loop_iterations = max_loop_iterations_;
  options.observers = observers_.get();
  options.depth = depth_;
  Value out = interpret(*fallback_, args, options);
  // Donation's promise holds here too: the new values end up in the arguments' storage.
  for (auto [k, p] : fallback_donate_) {
    std::size_t seen = 0;
    const Value* v = output_leaf(out, k, seen);
    if (v == nullptr || !v->is_tensor() || p >= args.size() || !args[p].is_tensor()) continue;
    const Tensor& src = v->as_tensor();
    const Tensor& dst = args[p].as_tensor();
    if (src.raw_data() != dst.raw_data() && src.nbytes() == dst.nbytes()) {
      backend_->copy(const_cast<Tensor&>(dst).raw_data(), src.raw_data(), src.nbytes());
    }
  }
  return out;
}

void Executable::run_launches(const ObserverList* observers) {
  backend::ExecutionContext& exec = backend_->context();
  ins_.clear();  // a launch that threw left its operands here
  outs_.clear();
  for (std::size_t li = 0; li < launches_.size(); ++li) {
    const Launch& l = launches_[li];
    for (std::size_t j = 0; j < l.outputs.size() && l.zero_fresh; ++j) {
      if (!l.fresh[j]) continue;
      Tensor& t = cur_[l.outputs[j]];
      backend_->fill_zero(t.raw_data(), t.nbytes());  // kernels get zeroed outputs, as in eager
    }
    for (std::size_t b : l.inputs) ins_.push_back(cur_[b]);
    for (std::size_t b : l.outputs) outs_.push_back(cur_[b]);
    backend::KernelContext ctx{*l.prim, ins_, outs_, exec, l.state.get()};
    if (l.workspace >= 0) {
      Tensor& w = cur_[static_cast<std::size_t>(l.workspace)];
      ctx.workspace = w.raw_data();
      ctx.workspace_bytes = w.nbytes();
    }
    if (observers == nullptr) {
      if (l.control) {
        run_control(l);
      } else {
        l.kernel->run(ctx);
      }
    } else {
      LaunchEvent event{li, depth_,  graph_name_, l.prim->name(), l.name, l.debug,
                        ins_, outs_, -1,          l.label,        graph_, l.prim.get()};
      notify_before(*observers, event);
      event.elapsed_ns = backend_->run_timed([&] {
        if (l.control) {
          run_control(l);
        } else {
          l.kernel->run(ctx);
        }
      });
      notify_after(*observers, event);
    }
    ins_.clear();
    outs_.clear();
  }
  for (auto [ob, p] : donation_copies_) {
    const Tensor& src = cur_[ob];
    Tensor& dst = cur_[param_buffers_[p]];
    backend_->copy(dst.raw_data(), src.raw_data(), src.nbytes());
  }
}

void Executable::replay(const std::vector<Value>& args) {
  // The recording reads the arguments from the buffers it was made with: an argument held
  // elsewhere now (a new batch) is copied in first, and copied back out after the replay where
  // the step writes it (a donated parameter).
  std::vector<char> staged(args.size(), 0);
  for (std::size_t i = 0; i < args.size(); ++i) {
    const Tensor& a = args[i].as_tensor();
    Tensor& r = recorded_args_[i];
    if (a.raw_data() == r.raw_data()) continue;
    backend_->copy(r.raw_data(), a.raw_data(), a.nbytes());
    staged[i] = 1;
  }
  recorded_->replay();
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (!staged[i] || !donated_params_[i]) continue;
    const Tensor& a = args[i].as_tensor();
    backend_->copy(const_cast<Tensor&>(a).raw_data(), recorded_args_[i].raw_data(), a.nbytes());
  }
}

Value Executable::run(std::vector<Value> args) {
  if (fallback_) return run_interpreted(args);
  if (args.size() > param_buffers_.size()) {
    throw ValueError("run: expected at most " + std::to_string(param_buffers_.size()) +
                     " arguments, got " + std::to_string(args.size()));
  }
  args.resize(param_buffers_.size());
  const Device device = backend_->device();
  for (std::size_t i = 0; i < param_buffers_.size(); ++i) {
    if (args[i].is_none()) {
      if (param_defaults_[i].is_none()) {
        throw ValueError("run: expected an argument for parameter " + std::to_string(i) + ", got none");
      }
      args[i] = Value::tensor(backend::to_device(param_defaults_[i].as_tensor(), *backend_));
    }
    const Buffer& b = buffers_[param_buffers_[i]];
    if (!args[i].is_tensor() || args[i].as_tensor().dtype() != b.dtype ||
        args[i].as_tensor().shape() != b.shape) {
      throw ValueError("run: expected argument " + std::to_string(i) + " to be a " +
                       std::string(dtype_name(b.dtype)) + " tensor of shape " +
                       shape_to_string(b.shape) + ", got another value");
    }
    if (args[i].as_tensor().device() != device) {
      throw ValueError("run: expected argument " + std::to_string(i) + " on " +
                       std::string(device_name(device)) + ", got a tensor on " +
                       std::string(device_name(args[i].as_tensor().device())));
    }
    cur_[param_buffers_[i]] = args[i].as_tensor();
  }
  if (!arena_) {
    if (shared_arena_) {
      std::shared_ptr<Storage>& shared = shared_arena_->storage;
      if (!shared || shared->device() != backend_->device() || shared->nbytes() < plan_.peak_bytes) {
        shared = backend_->allocate(plan_.peak_bytes);
      }
      arena_ = shared;
    } else {
      arena_ = backend_->allocate(plan_.peak_bytes);
    }
    for (std::size_t k = 0; k < planned_.size(); ++k) {
      const Buffer& b = buffers_[planned_[k]];
      cur_[planned_[k]] = Tensor::view(arena_, plan_.offsets[k], b.dtype, b.shape);
    }
  }
  const ObserverList* observers = observers_.get();
  if (recorded_ && observers == nullptr) {
    replay(args);
  } else if (observers == nullptr && recordable_ && ran_) {
    // The second run without observers (the first warmed the libraries up: cuBLAS and cuDNN
    // set themselves up at their first call, which a recording must not contain): recorded once
    // where the backend can (a CUDA graph), then replayed at every later run.
    recordable_ = false;
    recorded_ = backend_->record([this] { run_launches(nullptr); });
    if (recorded_) {
      recorded_->replay();
      recorded_args_.clear();
      for (const Value& a : args) recorded_args_.push_back(a.as_tensor());
    } else {
      run_launches(nullptr);
    }
  } else {
    run_launches(observers);
    ran_ = true;
  }
  Value out = build(output_);
  for (std::size_t b : param_buffers_) cur_[b] = Tensor();
  if (escapes_arena(out)) {
    // Results in the arena must survive the next run. Small ones (a training step's loss) are
    // copied out, so the arena is kept: handing it over would make the next run allocate and
    // page in a whole new arena (723 MiB for a ResNet-50 step at batch 8), and a caller keeping
    // the loss would keep the whole arena alive. Results that fill much of the arena are handed
    // over with it instead (the caller holds it now; the next run takes another). A shared arena
    // is never handed over: other plans write it too.
    if (4 * arena_bytes(out) <= plan_.peak_bytes || shared_arena_) {
      out = copy_out_of_arena(out);
    } else {
      arena_.reset();
      // The next run plans into new memory: a recording of this one would write the old.
      recorded_.reset();
      recorded_args_.clear();
      recordable_ = false;
    }
  }
  return out;
}

}  // namespace loom::runtime
