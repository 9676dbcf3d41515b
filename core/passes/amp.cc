// Automatic mixed precision (core/passes/amp.h): MindSpore 2.10's amp levels as casts on the
// traced forward graph, and the conversion that runs low-precision ops on Float32 kernels.
#include "core/passes/amp.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>

#include "core/ir/anf.h"
#include "core/ir/error.h"
#include "core/ir/manager.h"
#include "core/passes/low_precision.h"
#include "ops/op.h"

namespace loom::passes {

namespace {

using ir::AbstractPtr;
using ir::CNode;
using ir::FuncGraph;
using ir::Node;
using ir::Value;

// The tensor dtype of a node's abstract, or nullopt (a tuple, a scalar, no abstract).
std::optional<DType> tensor_dtype(const Node* n) {
  const AbstractPtr& a = n->abstract();
  if (!a || !a->is_tensor()) return std::nullopt;
  return a->dtype();
}

// mindspore.amp's lists, by loom's primitive names (MindSpore's cells map onto them: Conv2d and
// Dense are Conv2D / MatMul and their BiasAdd, BatchNorm2d is BatchNorm).
const std::set<std::string, std::less<>> kWhiteList = {
    "Conv2D",     "Conv3D", "Conv2DTranspose", "Conv3DTranspose", "Conv2DBackpropInput",
    "MatMul",     "BatchMatMul", "PReLU",      "ReLU",            "Ger"};
const std::set<std::string, std::less<>> kBlackList = {"BatchNorm", "LayerNorm"};
const std::set<std::string, std::less<>> kAutoWhiteList = {
    "Conv2D", "Conv3D", "Conv2DTranspose", "Conv3DTranspose", "MatMul", "BatchMatMul", "PReLU",
    "Einsum", "Dense"};
const std::set<std::string, std::less<>> kAutoBlackList = {
    "Pow",         "ACos",      "Asin",        "Cosh",       "Erfinv",
    "Exp",         "Expm1",     "Log",         "Log10",      "Log1p",
    "Log2",        "Reciprocal", "Rsqrt",      "Sinh",       "Tan",
    "Softplus",    "LayerNorm", "BatchNorm",   "GroupNorm",  "Norm",
    "KLDivLoss",   "SmoothL1Loss", "BCEWithLogitsLoss", "ReduceProd", "Softmax",
    "LogSoftmax",  "CumProd",   "CumSum",      "ReduceSum",  "L2Loss",
    "NLLLoss",     "SoftmaxCrossEntropyWithLogits", "SparseSoftmaxCrossEntropyWithLogits"};
// Ops that move or select elements without computing on them: they take whatever dtype comes.
const std::set<std::string, std::less<>> kPassThrough = {
    "MakeTuple", "TupleGetItem", "Depend",  "StopGradient", "Reshape", "Flatten",
    "ExpandDims", "Squeeze",     "Transpose", "Slice",      "StridedSlice", "Tile",
    "BroadcastTo", "Split",      "Gather",  "Cast"};

enum class Want {
  kLow,       // the low dtype
  kHigh,      // Float32
  kPromote,   // the widest float dtype among the inputs
  kAsIs,      // no cast (pass-through ops)
  kOriginal,  // the inputs' original dtypes (calls of graphs, control flow)
};

std::string parent_scope(const std::string& scope) {
  const std::size_t slash = scope.rfind('/');
  return slash == std::string::npos ? std::string() : scope.substr(0, slash);
}

bool in_fp32_scope(const CNode& c, const AmpOptions& o) {
  const std::string& s = c.debug().scope;
  for (const std::string& part : o.fp32_scopes) {
    std::size_t pos = 0;
    while ((pos = s.find(part, pos)) != std::string::npos) {
      const bool starts = pos == 0 || s[pos - 1] == '/';
      const bool ends = pos + part.size() == s.size() || s[pos + part.size()] == '/';
      if (starts && ends) return true;
      pos += part.size();
    }
  }
  return false;
}

Want want_of(const CNode& c, const AmpOptions& o) {
  const ir::Primitive* prim = c.primitive();
  if (prim == nullptr || c.is_call_to("If") || c.is_call_to("While")) return Want::kOriginal;
  const std::string& op = prim->name();
  if (kPassThrough.contains(op)) return Want::kAsIs;
  if (in_fp32_scope(c, o)) return Want::kHigh;
  switch (o.level) {
    case AmpLevel::kO0: return Want::kAsIs;
    case AmpLevel::kO1: {
      if (kWhiteList.contains(op)) return Want::kLow;
      // The Dense and Conv cells run whole in the low dtype: their BiasAdd too.
      if (op == "BiasAdd" && c.num_args() > 0 && c.arg(0)->is_cnode()) {
        const auto* product = static_cast<const CNode*>(c.arg(0));
        if (product->primitive() && kWhiteList.contains(product->primitive()->name()) &&
            parent_scope(product->debug().scope) == parent_scope(c.debug().scope)) {
          return Want::kLow;
        }
      }
      return Want::kHigh;
    }
    case AmpLevel::kO2: return kBlackList.contains(op) ? Want::kHigh : Want::kLow;
    case AmpLevel::kO3: return Want::kLow;
    case AmpLevel::kAuto:
      if (kAutoWhiteList.contains(op)) return Want::kLow;
      if (kAutoBlackList.contains(op)) return Want::kHigh;
      return Want::kPromote;
  }
  return Want::kAsIs;
}

class Rewriter {
 public:
  Rewriter(FuncGraph& graph, const AmpOptions& o)
      : graph_(graph), options_(o), manager_(*graph.module()) {}

  int run() {
    const std::vector<CNode*> order = graph_.topo_order();
    for (CNode* c : order) original_[c] = c->abstract();
    const AbstractPtr original_out = graph_.output()->abstract();
    for (CNode* c : order) rewrite(c);
    Node* out = restore(graph_.output(), original_out, nullptr);
    if (out != graph_.output()) manager_.set_output(&graph_, out);
    return casts_;
  }

 private:
  void rewrite(CNode* c) {
    const Want want = want_of(*c, options_);
    if (want == Want::kAsIs) {
      reinfer(c);
      return;
    }
    if (want == Want::kOriginal) {
      for (std::size_t i = 0; i < c->num_args(); ++i) {
        Node* a = c->arg(i);
        auto it = original_.find(a);
        if (it == original_.end()) continue;  // a parameter or a constant: unchanged
        Node* r = restore(a, it->second, c);
        if (r != a) manager_.set_input(c, i + 1, r);
      }
      return;
    }
    DType target = want == Want::kLow ? options_.dtype : DType::kFloat32;
    if (want == Want::kPromote) {
      bool any_float32 = false, any_low = false;
      for (std::size_t i = 0; i < c->num_args(); ++i) {
        const std::optional<DType> d = tensor_dtype(c->arg(i));
        any_float32 |= d == DType::kFloat32;
        any_low |= d && is_half_float(*d);
      }
      if (!any_low) {
        reinfer(c);
        return;
      }
      target = any_float32 ? DType::kFloat32 : options_.dtype;
    }
    for (std::size_t i = 0; i < c->num_args(); ++i) {
      Node* a = c->arg(i);
      const std::optional<DType> d = tensor_dtype(a);
      if (!d || *d == target || (*d != DType::kFloat32 && !is_half_float(*d))) continue;
      manager_.set_input(c, i + 1, cast(a, target, c->debug()));
    }
    reinfer(c);
  }

  // The node's abstract from its (possibly cast) inputs'.
  void reinfer(CNode* c) {
    const ir::Primitive* prim = c->primitive();
    if (prim == nullptr) return;
    std::vector<AbstractPtr> in;
    for (std::size_t i = 0; i < c->num_args(); ++i) {
      if (!c->arg(i)->abstract()) return;
      in.push_back(c->arg(i)->abstract());
    }
    // make_op fills the defaults of attributes a parsed graph may leave out.
    c->set_abstract(ops::infer(*ops::make_op(prim->name(), prim->attrs()), in, c->debug().scope));
  }

  // One Cast per (value, dtype), made for its first user.
  Node* cast(Node* x, DType to, const ir::DebugInfo& debug) {
    const auto key = std::make_pair(x, to);
    auto it = casts_of_.find(key);
    if (it != casts_of_.end()) return it->second;
    // Casting a cast back to its input's dtype: the input itself where the first cast widened
    // (exactly), so no value takes two roundings.
    if (x->is_cnode()) {
      const auto* inner = static_cast<const CNode*>(x);
      if (inner->is_call_to("Cast") && is_half_float(to) && tensor_dtype(inner->arg(0)) == to &&
          tensor_dtype(inner) == DType::kFloat32) {
        return inner->arg(0);
      }
    }
    ir::DebugInfo d = debug;
    d.scope = parent_scope(debug.scope);
    d.scope += d.scope.empty() ? "Cast" : "/Cast";
    CNode* c = graph_.add_call(ops::make_op("Cast", {{"dst_type", Value::dtype(to)}}), {x}, d);
    reinfer(c);
    ++casts_;
    casts_of_.emplace(key, c);
    return c;
  }

  // `n` with the dtypes of `original` (an abstract it had before the rewrite): cast where a
  // tensor's dtype changed, tuples rebuilt element by element. `user` gives the casts' debug info
  // (null: the graph's output).
  Node* restore(Node* n, const AbstractPtr& original, const CNode* user) {
    if (!original || !n->abstract()) return n;
    if (original->is_tensor()) {
      const std::optional<DType> d = tensor_dtype(n);
      if (!d || *d == original->dtype()) return n;
      // The cast's scope: its user's, else (the graph's output) the producer's, through a
      // TupleGetItem to the op whose result it takes apart.
      const Node* producer = n;
      while (producer->is_cnode() && static_cast<const CNode*>(producer)->is_call_to("TupleGetItem")) {
        producer = static_cast<const CNode*>(producer)->arg(0);
      }
      const ir::DebugInfo debug =
          user ? user->debug()
               : (producer->is_cnode() ? static_cast<const CNode*>(producer)->debug()
                                       : ir::DebugInfo{});
      return cast(n, original->dtype(), debug);
    }
    if (!original->is_tuple() || !n->abstract()->is_tuple() ||
        original->elements().size() != n->abstract()->elements().size()) {
      return n;
    }
    if (n->is_cnode() && static_cast<CNode*>(n)->is_call_to("MakeTuple")) {
      auto* tuple = static_cast<CNode*>(n);
      bool changed = false;
      for (std::size_t i = 0; i < tuple->num_args(); ++i) {
        Node* r = restore(tuple->arg(i), original->elements()[i], user);
        if (r != tuple->arg(i)) {
          manager_.set_input(tuple, i + 1, r);
          changed = true;
        }
      }
      if (changed) reinfer(tuple);
      return n;
    }
    if (n->abstract()->equals(*original)) return n;
    std::vector<Node*> parts;
    const ir::DebugInfo debug = user ? user->debug() : ir::DebugInfo{};
    for (std::size_t i = 0; i < original->elements().size(); ++i) {
      CNode* get = graph_.add_call(ops::make_op("TupleGetItem"),
                                   {n, graph_.add_value(Value::i64(static_cast<std::int64_t>(i)))},
                                   debug);
      reinfer(get);
      parts.push_back(restore(get, original->elements()[i], user));
    }
    CNode* tuple = graph_.add_call(ops::make_op("MakeTuple"), parts, debug);
    reinfer(tuple);
    return tuple;
  }

  FuncGraph& graph_;
  const AmpOptions& options_;
  ir::Manager manager_;
  std::unordered_map<const Node*, AbstractPtr> original_;
  std::map<std::pair<Node*, DType>, Node*> casts_of_;
  int casts_ = 0;
};

// The dtype a call's kernel is looked up by (runtime/executable.cc: OpDef::kernel_dtype_from).
std::optional<DType> kernel_key(const CNode& c, const ops::OpDef& def) {
  const int from = def.kernel_dtype_from;
  if (from >= 0 && static_cast<std::size_t>(from) < c.num_args()) {
    return tensor_dtype(c.arg(static_cast<std::size_t>(from)));
  }
  const AbstractPtr& a = c.abstract();
  if (!a) return std::nullopt;
  if (a->is_tensor()) return a->dtype();
  if (a->is_tuple() && !a->elements().empty() && a->elements()[0]->is_tensor()) {
    return a->elements()[0]->dtype();
  }
  return std::nullopt;
}

}  // namespace

std::string_view amp_level_name(AmpLevel level) {
  switch (level) {
    case AmpLevel::kO0: return "O0";
    case AmpLevel::kO1: return "O1";
    case AmpLevel::kO2: return "O2";
    case AmpLevel::kO3: return "O3";
    case AmpLevel::kAuto: return "auto";
  }
  return "O0";
}

AmpLevel amp_level_from_name(std::string_view name) {
  for (AmpLevel l : {AmpLevel::kO0, AmpLevel::kO1, AmpLevel::kO2, AmpLevel::kO3, AmpLevel::kAuto}) {
    if (amp_level_name(l) == name) return l;
  }
  throw ValueError("amp: expected a level of O0, O1, O2, O3, auto, got '" + std::string(name) +
                   "'");
}

DType amp_dtype_from_name(std::string_view name) {
  if (name == "float16") return DType::kFloat16;
  if (name == "bfloat16") return DType::kBFloat16;
  throw ValueError("amp: expected a dtype of float16, bfloat16, got '" + std::string(name) + "'");
}

int auto_mixed_precision(ir::FuncGraph& graph, const AmpOptions& options) {
  if (!is_half_float(options.dtype)) {
    throw ValueError("amp: expected the low precision dtype Float16 or BFloat16, got " +
                     std::string(dtype_name(options.dtype)));
  }
  if (options.level == AmpLevel::kO0) return 0;
  return Rewriter(graph, options).run();
}

std::vector<std::string> compute_low_precision_in_float32(
    ir::Module& module, const std::function<bool(std::string_view, DType)>& has_kernel) {
  std::set<std::string> converted;
  ir::Manager manager(module);
  for (FuncGraph* graph : module.graphs()) {
    for (CNode* c : graph->topo_order()) {
      const ir::Primitive* prim = c->primitive();
      if (prim == nullptr) continue;
      const ops::OpDef* def = ops::Registry::global().find(prim->name());
      if (def == nullptr) continue;
      const std::optional<DType> key = kernel_key(*c, *def);
      if (!key || !is_half_float(*key) || has_kernel(prim->name(), *key) ||
          !has_kernel(prim->name(), DType::kFloat32)) {
        continue;
      }
      // The op on Float32 inputs: its result must have the structure of the original's (else
      // nothing is changed, and compile reports the missing kernel).
      const ir::PrimitivePtr wide_op = ops::make_op(prim->name(), prim->attrs());
      std::vector<AbstractPtr> in;
      for (std::size_t i = 0; i < c->num_args(); ++i) {
        const AbstractPtr& a = c->arg(i)->abstract();
        const std::optional<DType> d = tensor_dtype(c->arg(i));
        in.push_back(d && is_half_float(*d) ? ir::Abstract::tensor(DType::kFloat32, a->shape())
                                            : a);
      }
      AbstractPtr out;
      try {
        out = ops::infer(*wide_op, in, c->debug().scope);
      } catch (const Error&) {
        continue;
      }
      const AbstractPtr& want = c->abstract();
      const bool tensor = want->is_tensor() && out->is_tensor();
      const bool tuple = want->is_tuple() && out->is_tuple() &&
                         want->elements().size() == out->elements().size();
      if (!tensor && !tuple) continue;
      std::vector<Node*> args;
      for (std::size_t i = 0; i < c->num_args(); ++i) {
        Node* a = c->arg(i);
        if (in[i] != a->abstract()) {
          // The copy is made after the op's other inputs (Depend: an ordering edge), so that a
          // value kept from the forward pass is widened when its backward user runs, not as
          // soon as the scheduler's depth-first order first reaches it, which would hold the
          // Float32 copy through the computation of the other inputs.
          Node* ordered = a;
          for (std::size_t j = 0; j < c->num_args(); ++j) {
            Node* other = c->arg(j);
            if (j == i || other == a || other->is_value() || !other->abstract() ||
                !other->abstract()->is_tensor()) {
              continue;
            }
            CNode* dep = graph->add_call(ops::make_op("Depend"), {ordered, other}, c->debug());
            dep->set_abstract(a->abstract());
            ordered = dep;
          }
          CNode* up = graph->add_call(
              ops::make_op("Cast", {{"dst_type", Value::dtype(DType::kFloat32)}}), {ordered},
              c->debug());
          up->set_abstract(in[i]);
          a = up;
        }
        args.push_back(a);
      }
      CNode* wide = graph->add_call(wide_op, args, c->debug());
      wide->set_abstract(out);
      if (!c->name().empty()) wide->set_name(c->name());
      // Its results rounded back to the dtypes the users expect.
      auto down = [&](Node* x, const AbstractPtr& w) -> Node* {
        if (!w->is_tensor() || x->abstract()->dtype() == w->dtype()) return x;
        CNode* d = graph->add_call(ops::make_op("Cast", {{"dst_type", Value::dtype(w->dtype())}}),
                                   {x}, c->debug());
        d->set_abstract(w);
        return d;
      };
      Node* result = nullptr;
      if (tensor) {
        result = down(wide, want);
      } else {
        std::vector<Node*> parts;
        for (std::size_t i = 0; i < want->elements().size(); ++i) {
          CNode* get = graph->add_call(
              ops::make_op("TupleGetItem"),
              {wide, graph->add_value(Value::i64(static_cast<std::int64_t>(i)))}, c->debug());
          get->set_abstract(out->elements()[i]);
          parts.push_back(down(get, want->elements()[i]));
        }
        CNode* made = graph->add_call(ops::make_op("MakeTuple"), parts, c->debug());
        made->set_abstract(want);
        result = made;
      }
      manager.replace(c, result);
      converted.insert(prim->name());
    }
  }
  return {converted.begin(), converted.end()};
}

}  // namespace loom::passes
