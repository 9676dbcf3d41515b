// ONNX import (onnx/onnx.h): a ModelProto's graph, node by node, into a loom graph that a
// mindir::GraphCell runs. No nn/ here, so that the fuzz build (clang 14) compiles it.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "backends/eager.h"
#include "core/ir/anf.h"
#include "core/ir/error.h"
#include "core/passes/infer.h"
#include "onnx/onnx.h"
#include "onnx/proto/onnx.pb.h"
#include "ops/op.h"

namespace loom::onnx {
namespace {

using ir::Node;
using ir::Value;
using Ints = std::vector<std::int64_t>;
using TP = ::onnx::TensorProto;
using AP = ::onnx::AttributeProto;

[[noreturn]] void fail(const std::string& what, const std::string& msg) {
  throw FormatError("ONNX " + what + ": " + msg);
}

std::optional<DType> dtype_of(int code) {
  switch (code) {
    case TP::FLOAT: return DType::kFloat32;
    case TP::DOUBLE: return DType::kFloat64;
    case TP::INT32: return DType::kInt32;
    case TP::INT64: return DType::kInt64;
    case TP::UINT8: return DType::kUInt8;
    case TP::BOOL: return DType::kBool;
    case TP::FLOAT16: return DType::kFloat16;
    case TP::BFLOAT16: return DType::kBFloat16;
    default: return std::nullopt;
  }
}

std::string elem_type_name(int code) {
  return TP::DataType_IsValid(code) ? TP::DataType_Name(static_cast<TP::DataType>(code))
                                    : std::to_string(code);
}

// A TensorProto's value (raw_data, or the typed repeated field for its data type).
Tensor read_tensor(const TP& t, const std::string& what, const std::string& who) {
  auto dt = dtype_of(t.data_type());
  if (!dt) {
    fail(what, "expected tensor '" + who + "' of a data type loom has (FLOAT, DOUBLE, INT32, "
               "INT64, UINT8, BOOL, FLOAT16, BFLOAT16), got " + elem_type_name(t.data_type()));
  }
  if (t.data_location() == TP::EXTERNAL || t.external_data_size() > 0) {
    fail(what, "tensor '" + who + "' keeps its data in an external file; loom reads models "
               "with their weights inside the .onnx file");
  }
  Shape shape(t.dims().begin(), t.dims().end());
  std::int64_t numel = 1;
  for (std::int64_t d : shape) {
    if (d < 0) fail(what, "expected non-negative dims for '" + who + "', got " + shape_to_string(shape));
    if (d != 0 && numel > std::numeric_limits<std::int64_t>::max() / 8 / d) {
      fail(what, "expected dims of a reasonable size for '" + who + "', got " +
                     shape_to_string(shape));
    }
    numel *= d;
  }
  const auto n = static_cast<std::size_t>(numel);
  // Sizes are checked against the data present before anything is allocated.
  const std::size_t nbytes = n * dtype_size(*dt);
  if (t.has_raw_data()) {
    if (t.raw_data().size() != nbytes) {
      fail(what, "expected raw_data of " + std::to_string(nbytes) + " bytes for '" + who +
                     "' " + shape_to_string(shape) + ", got " +
                     std::to_string(t.raw_data().size()));
    }
    Tensor out(*dt, shape);
    if (n > 0) std::memcpy(out.raw_data(), t.raw_data().data(), nbytes);
    return out;
  }
  // The typed field of the data type: FLOAT, DOUBLE and INT64 their own, the rest int32_data.
  const auto [present, field] =
      *dt == DType::kFloat32   ? std::pair<std::size_t, const char*>(t.float_data_size(), "float_data")
      : *dt == DType::kFloat64 ? std::pair<std::size_t, const char*>(t.double_data_size(), "double_data")
      : *dt == DType::kInt64   ? std::pair<std::size_t, const char*>(t.int64_data_size(), "int64_data")
                               : std::pair<std::size_t, const char*>(t.int32_data_size(), "int32_data");
  if (present != n) {
    fail(what, "expected " + std::to_string(n) + " values in " + field + " of '" + who + "' " +
                   shape_to_string(shape) + ", got " + std::to_string(present));
  }
  Tensor out(*dt, shape);
  switch (*dt) {
    case DType::kFloat32:
      for (std::size_t i = 0; i < n; ++i) out.data<float>()[i] = t.float_data(static_cast<int>(i));
      break;
    case DType::kFloat64:
      for (std::size_t i = 0; i < n; ++i) out.data<double>()[i] = t.double_data(static_cast<int>(i));
      break;
    case DType::kInt64:
      for (std::size_t i = 0; i < n; ++i) {
        out.data<std::int64_t>()[i] = t.int64_data(static_cast<int>(i));
      }
      break;
    default:  // INT32, UINT8, BOOL, and FLOAT16 / BFLOAT16 bits: int32_data
      for (std::size_t i = 0; i < n; ++i) {
        const std::int32_t v = t.int32_data(static_cast<int>(i));
        if (*dt == DType::kFloat16 || *dt == DType::kBFloat16) {
          static_cast<std::uint16_t*>(out.raw_data())[i] = static_cast<std::uint16_t>(v);
        } else {
          out.set(static_cast<std::int64_t>(i), v);
        }
      }
  }
  return out;
}

// A tensor's dtype and shape from a ValueInfoProto (dim_param or a missing dim: -1).
std::pair<DType, Shape> value_info_type(const ::onnx::ValueInfoProto& v, const std::string& what) {
  if (!v.type().has_tensor_type()) {
    fail(what, "expected '" + v.name() + "' to be a tensor, got another kind of value "
               "(sequences, maps and optionals are not supported)");
  }
  const auto& t = v.type().tensor_type();
  auto dt = dtype_of(t.elem_type());
  if (!dt) {
    fail(what, "expected '" + v.name() + "' of a data type loom has, got " +
                   elem_type_name(t.elem_type()));
  }
  Shape shape;
  for (const auto& d : t.shape().dim()) {
    shape.push_back(d.has_dim_value() && d.dim_value() >= 0 ? d.dim_value() : -1);
  }
  return {*dt, shape};
}

// A value computed at import time: a shape, or part of one (ONNX's Shape → Gather → Concat →
// Reshape chains); nullopt for a dimension known only at run time (a symbolic batch).
struct ShapeValue {
  std::vector<std::optional<std::int64_t>> v;
  // Where each unknown entry comes from: (the tensor whose Shape gave it, its axis); null for a
  // known one. Reshape uses it to tell x.view(x.size(0), -1) apart from two unknowns.
  std::vector<std::pair<const ir::Node*, std::int64_t>> from;
  void push(std::optional<std::int64_t> value, std::pair<const ir::Node*, std::int64_t> src = {}) {
    v.push_back(value);
    from.push_back(src);
  }
  void append(const ShapeValue& o) {
    v.insert(v.end(), o.v.begin(), o.v.end());
    from.insert(from.end(), o.from.begin(), o.from.end());
  }
  bool scalar = false;  // rank 0
};

// The model's graph, node by node.
class Reader {
 public:
  Reader(const ::onnx::ModelProto& m, std::string what) : m_(m), what_(std::move(what)) {}

  void build(mindir::GraphCell::Parts& parts) {
    if (!m_.has_graph()) fail(what_, "expected a graph (ModelProto field 7), got none");
    for (const auto& o : m_.opset_import()) {
      if (o.domain().empty() || o.domain() == "ai.onnx") opset_ = o.version();
    }
    if (opset_ <= 0) {
      fail(what_, "expected an opset_import of the default ONNX domain, got none");
    }
    if (opset_ < 7 || opset_ > 22) {
      fail(what_, "expected ONNX opset 7 to 22, got " + std::to_string(opset_));
    }
    const ::onnx::GraphProto& g = m_.graph();
    graph_ = parts.module->add_graph("onnx");
    parts.module->set_entry(graph_);
    parts.graph = graph_;
    for (const TP& t : g.initializer()) {
      if (t.name().empty()) fail(what_, "expected every initializer to have a name");
      if (!initializers_.emplace(t.name(), &t).second) {
        fail(what_, "expected unique initializer names, got '" + t.name() + "' twice");
      }
    }
    for (const auto& in : g.input()) {
      if (initializers_.count(in.name())) continue;  // older exporters list weights as inputs
      auto [dt, shape] = value_info_type(in, what_);
      ir::Parameter* p = graph_->add_parameter(unique_name(in.name()), ir::Abstract::tensor(dt, shape));
      define(in.name(), p);
      parts.inputs.push_back({in.name(), dt, shape});
    }
    for (const auto& n : g.node()) {
      for (const auto& i : n.input()) used_names_.insert(i);
    }
    for (const auto& o : g.output()) used_names_.insert(o.name());
    for (const auto& n : g.node()) {
      const std::string op = n.op_type();
      ++parts.op_counts[op];
      node(n);
    }
    if (g.output_size() == 0) fail(what_, "expected at least one graph output, got none");
    std::vector<Node*> outs;
    for (const auto& o : g.output()) {
      outs.push_back(tensor(o.name(), "the graph output"));
      mindir::TensorInfo info{o.name(), DType::kFloat32, {}};
      if (o.type().has_tensor_type()) {
        auto [dt, shape] = value_info_type(o, what_);
        info.dtype = dt;
        info.shape = shape;
      }
      parts.outputs.push_back(info);
    }
    graph_->set_output(outs.size() == 1 ? outs[0] : graph_->add_call(ops::make_op("MakeTuple"), outs));
    parts.params = std::move(params_);
    parts.producer = m_.producer_name();
    parts.model_version = m_.producer_version();
  }

 private:
  struct Def {
    Node* node = nullptr;                // the tensor (null: only a shape value so far)
    std::optional<ShapeValue> shape;     // the value, when known at import time
  };

  std::string unique_name(std::string n) {
    for (char& ch : n) {
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_' && ch != '.') ch = '_';
    }
    while (!n.empty() && n.front() == '_') n.erase(n.begin());
    if (n.empty() || std::isdigit(static_cast<unsigned char>(n[0]))) n = "n" + n;
    std::string base = n;
    for (int i = 1; !used_.insert(n).second; ++i) n = base + "_" + std::to_string(i);
    return n;
  }

  void define(const std::string& name, Node* node, std::optional<ShapeValue> shape = {}) {
    if (name.empty()) return;  // an output nobody reads
    if (!defs_.emplace(name, Def{node, std::move(shape)}).second) {
      fail(what_, "expected every value to be defined once (SSA), got '" + name + "' twice");
    }
  }

  const Def& def(const std::string& name, const std::string& user) {
    auto it = defs_.find(name);
    if (it != defs_.end()) return it->second;
    auto init = initializers_.find(name);
    if (init == initializers_.end()) {
      fail(what_, "input '" + name + "' of " + user + " is not defined before it (nodes must be "
                  "in topological order)");
    }
    // An initializer, on first use: a floating one is a weight (a graph parameter with its value),
    // any other a constant.
    Tensor value = read_tensor(*init->second, what_, name);
    Node* n;
    if (is_floating(value.dtype())) {
      ir::Parameter* p = graph_->add_parameter(unique_name(name),
                                               ir::Abstract::tensor(value.dtype(), value.shape()));
      p->set_default(value);
      params_.emplace_back(name, value);
      n = p;
    } else {
      n = graph_->add_value(Value::tensor(value));
    }
    return defs_.emplace(name, Def{n, shape_value_of(value)}).first->second;
  }

  static std::optional<ShapeValue> shape_value_of(const Tensor& t) {
    if ((t.dtype() != DType::kInt64 && t.dtype() != DType::kInt32) || t.shape().size() > 1 ||
        t.numel() > 64) {
      return std::nullopt;
    }
    ShapeValue s;
    s.scalar = t.shape().empty();
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      s.push(t.dtype() == DType::kInt64 ? t.data<std::int64_t>()[i] : t.data<std::int32_t>()[i]);
    }
    return s;
  }

  // The tensor named `name` (a shape value becomes a constant when it is fully known).
  Node* tensor(const std::string& name, const std::string& user) {
    const Def& d = def(name, user);
    if (d.node) return d.node;
    Tensor t(DType::kInt64, d.shape->scalar ? Shape{} : Shape{static_cast<std::int64_t>(d.shape->v.size())});
    for (std::size_t i = 0; i < d.shape->v.size(); ++i) {
      if (!d.shape->v[i]) {
        fail(what_, "'" + name + "' (input of " + user + ") holds a dimension known only at run "
                    "time (a symbolic batch size); loom folds such shapes only into Reshape");
      }
      t.data<std::int64_t>()[i] = *d.shape->v[i];
    }
    Node* n = graph_->add_value(Value::tensor(t));
    defs_[name].node = n;
    return n;
  }

  // The tensor value of a constant or initializer input, for operands loom keeps as attributes.
  std::optional<Tensor> constant_of(const std::string& name, const std::string& user) {
    const Def& d = def(name, user);
    if (d.node && d.node->is_value()) {
      const Value& v = static_cast<const ir::ValueNode*>(d.node)->value();
      if (v.is_tensor()) return v.as_tensor();
    }
    if (d.node && d.node->is_parameter()) {
      const auto* p = static_cast<const ir::Parameter*>(d.node);
      if (p->has_default()) return *p->default_value();
    }
    if (!d.node && d.shape) return static_cast<const ir::ValueNode*>(tensor(name, user))->value().as_tensor();
    return std::nullopt;
  }

  static ir::AbstractPtr abstract_of(Node* n) { return passes::infer_node(n); }

  std::string types(const std::vector<Node*>& args) {
    std::string s = "(";
    for (std::size_t i = 0; i < args.size(); ++i) {
      if (i) s += ", ";
      ir::AbstractPtr a = args[i] ? abstract_of(args[i]) : nullptr;
      s += a ? a->to_string() : "unknown";
    }
    return s + ")";
  }

  // ---- one node ---------------------------------------------------------------------------

  const ::onnx::NodeProto* n_ = nullptr;
  std::string where_;
  std::vector<Node*> args_;  // the node's tensor inputs (null for an omitted optional one)

  [[noreturn]] void unsupported(const std::string& why) {
    fail(what_, "unsupported form of " + n_->op_type() + " at " + where_ + " with inputs " +
                    types(args_) + ": " + why);
  }

  const AP* attr(const std::string& name) const {
    for (const AP& a : n_->attribute()) {
      if (a.name() == name) return &a;
    }
    return nullptr;
  }
  std::int64_t attr_int(const std::string& name, std::int64_t dflt) const {
    const AP* a = attr(name);
    return a ? a->i() : dflt;
  }
  double attr_float(const std::string& name, double dflt) const {
    const AP* a = attr(name);
    return a ? a->f() : dflt;
  }
  std::string attr_string(const std::string& name, const std::string& dflt) const {
    const AP* a = attr(name);
    return a ? a->s() : dflt;
  }
  std::optional<Ints> attr_ints(const std::string& name) const {
    const AP* a = attr(name);
    if (!a) return std::nullopt;
    return Ints(a->ints().begin(), a->ints().end());
  }

  // Input k's name ("" when omitted).
  std::string in_name(int k) const { return k < n_->input_size() ? n_->input(k) : std::string(); }
  bool has_input(int k) const { return !in_name(k).empty(); }
  // Input k's value as integers (a constant input: axes, shape, pads...).
  std::optional<Ints> const_ints(int k) {
    if (!has_input(k)) return std::nullopt;
    const Def& d = def(in_name(k), where_);
    if (d.shape) {
      Ints out;
      for (const auto& e : d.shape->v) {
        if (!e) unsupported("input " + std::to_string(k) + " depends on the input's run-time shape");
        out.push_back(*e);
      }
      return out;
    }
    std::optional<Tensor> t = constant_of(in_name(k), where_);
    if (!t || is_floating(t->dtype())) unsupported("expected input " + std::to_string(k) + " to be an integer constant");
    Ints out;
    for (std::int64_t i = 0; i < t->numel(); ++i) {
      out.push_back(t->dtype() == DType::kInt64 ? t->data<std::int64_t>()[i]
                                                : static_cast<std::int64_t>(t->get(i)));
    }
    return out;
  }
  std::optional<double> const_scalar(int k) {
    if (!has_input(k)) return std::nullopt;
    std::optional<Tensor> t = constant_of(in_name(k), where_);
    if (!t || t->numel() != 1) unsupported("expected input " + std::to_string(k) + " to be a one-element constant");
    return t->get(0);
  }

  const Shape& shape(int k) {
    ir::AbstractPtr a = abstract_of(arg(k));
    if (!a || !a->is_tensor() || !a->has_rank()) unsupported("expected input " + std::to_string(k) + " of known rank");
    return a->shape();
  }
  DType dtype(int k) {
    ir::AbstractPtr a = abstract_of(arg(k));
    if (!a || !a->is_tensor()) unsupported("expected input " + std::to_string(k) + " to be a tensor");
    return a->dtype();
  }

  // A call of `op`; one whose inputs are all constants (not weights) is computed now by the CPU
  // kernels and becomes a constant (PyTorch writes F.pad's pads as ConstantOfShape, Concat,
  // Reshape, Slice, Transpose, Cast of constants), when its result is at most kMaxFold elements.
  static constexpr std::int64_t kMaxFold = 1 << 16;
  Node* emit(const std::string& op, ir::Primitive::Attrs attrs, const std::vector<Node*>& args) {
    ir::PrimitivePtr prim;
    try {
      prim = ops::make_op(op, std::move(attrs));
    } catch (const Error& e) {
      fail(what_, std::string(e.what()) + " (at " + where_ + ")");
    }
    ir::CNode* c = graph_->add_call(prim, args);
    c->set_name(unique_name(n_->name().empty() ? n_->output(0) : n_->name()));
    ir::AbstractPtr a = abstract_of(c);
    const bool constant = std::all_of(args.begin(), args.end(), [](Node* x) { return x->is_value(); });
    if (constant && a && a->is_tensor() && a->shape_known()) {
      std::int64_t numel = 1;
      for (std::int64_t d : a->shape()) numel = d > kMaxFold ? kMaxFold + 1 : std::min(numel * d, kMaxFold + 1);
      if (numel <= kMaxFold) {
        std::vector<Value> values;
        for (Node* x : args) values.push_back(static_cast<ir::ValueNode*>(x)->value());
        try {
          return graph_->add_value(backend::run_op(*prim, values));
        } catch (const Error&) {
          // not computable now (no kernel for the dtype...): left to run time
        }
      }
    }
    return c;
  }
  Node* scalar_like(int k, double v) {
    return graph_->add_value(Value::tensor(Tensor::scalar(dtype(k), v)));
  }
  Node* item(Node* tuple, std::int64_t i) {
    ir::CNode* c = graph_->add_call(ops::make_op("TupleGetItem"), {tuple, graph_->add_value(Value::i64(i))});
    abstract_of(c);
    return c;
  }

  void out(Node* node, std::optional<ShapeValue> s = {}) { define(n_->output(0), node, std::move(s)); }
  void out_shape(ShapeValue s) { define(n_->output(0), nullptr, std::move(s)); }

  // Outputs past the first must be unused (Dropout's mask, MaxPool's indices...).
  void only_first_output() {
    for (int i = 1; i < n_->output_size(); ++i) {
      if (!n_->output(i).empty() && used_names_.count(n_->output(i))) {
        unsupported("output " + std::to_string(i) + " ('" + n_->output(i) + "') is used; loom "
                    "reads only the first output of this op");
      }
    }
  }

  // Axes normalized to [0, rank).
  Ints normalize(Ints axes, std::int64_t rank) {
    for (auto& a : axes) {
      if (a < -rank || a >= rank) unsupported("axis " + std::to_string(a) + " is out of range for rank " + std::to_string(rank));
      if (a < 0) a += rank;
    }
    return axes;
  }

  // The window of Conv and the pools: (pad_mode, pad (top, bottom, left, right)).
  std::pair<std::string, Ints> window_pads() {
    const std::string auto_pad = attr_string("auto_pad", "NOTSET");
    if (auto_pad == "SAME_UPPER") return {"same", {0, 0, 0, 0}};
    if (auto_pad == "VALID") return {"valid", {0, 0, 0, 0}};
    if (auto_pad != "NOTSET") {
      unsupported("auto_pad " + auto_pad + " (loom reads NOTSET with pads, SAME_UPPER and VALID)");
    }
    Ints p = attr_ints("pads").value_or(Ints{0, 0, 0, 0});
    if (p.size() != 4) unsupported("expected 4 pads (2-D), got " + std::to_string(p.size()));
    const Ints pad = {p[0], p[2], p[1], p[3]};  // ONNX: (top, left, bottom, right)
    const bool zero = std::all_of(pad.begin(), pad.end(), [](std::int64_t v) { return v == 0; });
    return {zero ? "valid" : "pad", pad};
  }

  Ints pair_attr(const std::string& name, Ints dflt) {
    Ints v = attr_ints(name).value_or(dflt);
    if (v.size() != 2) unsupported("expected 2-D " + name + ", got " + std::to_string(v.size()) + " values");
    return v;
  }

  void node(const ::onnx::NodeProto& n) {
    n_ = &n;
    const std::string& op = n.op_type();
    where_ = "node '" + (n.name().empty() ? (n.output_size() ? n.output(0) : op) : n.name()) + "'";
    if (!n.domain().empty() && n.domain() != "ai.onnx") {
      fail(what_, "op " + op + " of domain '" + n.domain() + "' at " + where_ +
                      " is not supported (loom reads the default ONNX domain)");
    }
    if (n.output_size() == 0) fail(what_, "expected " + op + " at " + where_ + " to have an output");
    for (const AP& a : n.attribute()) {
      if (a.has_g() || a.graphs_size() > 0) {
        fail(what_, op + " at " + where_ + " has a sub-graph (control flow is not supported)");
      }
    }
    args_.clear();
    const bool folds = op == "Shape" || op == "Constant";
    if (!folds) {
      for (int k = 0; k < n.input_size(); ++k) {
        if (n.input(k).empty()) {
          args_.push_back(nullptr);
          continue;
        }
        const Def& d = def(n.input(k), where_);
        args_.push_back(d.node);  // null for a shape value not yet a tensor
      }
    }
    lower(op);
  }

  // Whether every input is known at import time as a shape value (a shape, part of one, or an
  // integer constant): the op then folds.
  bool shape_args() {
    for (int k = 0; k < n_->input_size(); ++k) {
      if (!n_->input(k).empty() && !def(n_->input(k), where_).shape) return false;
    }
    return n_->input_size() > 0;
  }
  ShapeValue shape_in(int k) {
    const Def& d = def(in_name(k), where_);
    if (d.shape) return *d.shape;
    unsupported("expected input " + std::to_string(k) + " to be a shape computed at import time");
  }
  // Tensor input k (a shape value made a constant).
  Node* arg(int k) {
    if (k >= static_cast<int>(args_.size()) || in_name(k).empty()) {
      unsupported("expected input " + std::to_string(k));
    }
    if (!args_[k]) args_[k] = tensor(in_name(k), where_);
    return args_[k];
  }

  void lower(const std::string& op) {
    static const std::map<std::string, std::string> kUnary = {
        {"Relu", "ReLU"}, {"Sigmoid", "Sigmoid"}, {"Tanh", "Tanh"}, {"Exp", "Exp"},
        {"Log", "Log"},   {"Sqrt", "Sqrt"},       {"Neg", "Neg"},   {"Abs", "Abs"}};
    static const std::map<std::string, std::string> kBinary = {
        {"Add", "Add"}, {"Sub", "Sub"}, {"Mul", "Mul"}, {"Pow", "Pow"}};
    static const std::map<std::string, std::string> kVariadic = {
        {"Max", "Maximum"}, {"Min", "Minimum"}, {"Sum", "Add"}};
    if (op == "Constant") return constant();
    if (op == "Shape") return shape_op();
    if (op == "Identity") return identity();
    // Integer arithmetic on shapes, folded at import time.
    if (shape_args() && (op == "Gather" || op == "Unsqueeze" || op == "Squeeze" ||
                         op == "Concat" || op == "Cast" || op == "Slice")) {
      return fold_shape(op);
    }
    if (auto it = kUnary.find(op); it != kUnary.end()) return out(emit(it->second, {}, {arg(0)}));
    if (auto it = kBinary.find(op); it != kBinary.end()) {
      return out(emit(it->second, {}, {arg(0), arg(1)}));
    }
    if (auto it = kVariadic.find(op); it != kVariadic.end()) {
      Node* acc = arg(0);
      for (int k = 1; k < n_->input_size(); ++k) acc = emit(it->second, {}, {acc, arg(k)});
      return out(acc);
    }
    if (op == "Div") {
      if (!is_floating(dtype(0))) unsupported("loom reads Div of floating tensors (as RealDiv)");
      return out(emit("RealDiv", {}, {arg(0), arg(1)}));
    }
    if (op == "Reciprocal") return out(emit("RealDiv", {}, {scalar_like(0, 1.0), arg(0)}));
    if (op == "Conv") return conv();
    if (op == "Gemm") return gemm();
    if (op == "MatMul") return matmul();
    if (op == "MaxPool" || op == "AveragePool") return pool(op == "MaxPool");
    if (op == "GlobalAveragePool" || op == "GlobalMaxPool") {
      if (shape(0).size() != 4) unsupported("expected an input of rank 4 (N, C, H, W)");
      return out(emit(op == "GlobalAveragePool" ? "ReduceMean" : "ReduceMax",
                      {{"axis", Value::ints({2, 3})}, {"keep_dims", Value::boolean(true)}},
                      {arg(0)}));
    }
    if (op == "BatchNormalization") return batch_norm();
    if (op == "Dropout") {
      only_first_output();
      return out(arg(0));
    }
    if (op == "Flatten") return flatten();
    if (op == "Reshape") return reshape();
    if (op == "Transpose") {
      const auto rank = static_cast<std::int64_t>(shape(0).size());
      Ints perm = attr_ints("perm").value_or(Ints{});
      if (perm.empty()) {
        for (std::int64_t d = rank - 1; d >= 0; --d) perm.push_back(d);
      }
      return out(emit("Transpose", {{"perm", Value::ints(normalize(perm, rank))}}, {arg(0)}));
    }
    if (op == "Softmax" || op == "LogSoftmax") {
      const auto rank = static_cast<std::int64_t>(shape(0).size());
      std::int64_t axis = attr_int("axis", opset_ >= 13 ? -1 : 1);
      axis = normalize({axis}, rank)[0];
      if (opset_ < 13 && axis != rank - 1) {
        unsupported("before opset 13 " + op + " flattens the axes from `axis` on; loom reads it "
                    "for the last axis only");
      }
      if (op == "Softmax") return out(emit("Softmax", {{"axis", Value::ints({axis})}}, {arg(0)}));
      return out(emit("LogSoftmax", {{"axis", Value::i64(axis)}}, {arg(0)}));
    }
    if (op == "Clip") return clip();
    if (op == "ConstantOfShape") return constant_of_shape();
    if (op == "Slice") return slice();
    if (op == "Pad") return pad();
    if (op == "LeakyRelu") {
      const double alpha = attr_float("alpha", 0.01);
      if (alpha < 0 || alpha > 1) unsupported("expected alpha in [0, 1]");
      return out(emit("Maximum", {}, {arg(0), emit("Mul", {}, {arg(0), scalar_like(0, alpha)})}));
    }
    if (op == "Gelu") {
      if (attr_string("approximate", "none") != "tanh") {
        unsupported("loom's GeLU is the tanh approximation (approximate \"tanh\"); the erf form "
                    "is not supported");
      }
      return out(emit("GeLU", {}, {arg(0)}));
    }
    if (op == "Concat") {
      std::vector<Node*> xs;
      for (int k = 0; k < n_->input_size(); ++k) xs.push_back(arg(k));
      const auto rank = static_cast<std::int64_t>(shape(0).size());
      return out(emit("Concat", {{"axis", Value::i64(normalize({attr_int("axis", 0)}, rank)[0])}}, xs));
    }
    if (op == "Unsqueeze" || op == "Squeeze") {
      std::optional<Ints> axes = opset_ >= 13 ? const_ints(1) : attr_ints("axes");
      const auto rank = static_cast<std::int64_t>(shape(0).size());
      if (op == "Squeeze") {
        const Ints a = axes ? normalize(*axes, rank) : Ints{};
        return out(emit("Squeeze", {{"axis", Value::ints(a)}}, {arg(0)}));
      }
      if (!axes) unsupported("expected axes");
      Ints a = normalize(*axes, rank + static_cast<std::int64_t>(axes->size()));
      std::sort(a.begin(), a.end());
      Node* x = arg(0);
      for (std::int64_t d : a) x = emit("ExpandDims", {{"axis", Value::i64(d)}}, {x});
      return out(x);
    }
    if (op == "ReduceMean" || op == "ReduceSum" || op == "ReduceMax" || op == "ReduceMin") {
      const bool axes_input = op == "ReduceSum" ? opset_ >= 13 : opset_ >= 18;
      std::optional<Ints> axes = axes_input ? const_ints(1) : attr_ints("axes");
      if ((!axes || axes->empty()) && attr_int("noop_with_empty_axes", 0) != 0) return out(arg(0));
      const auto rank = static_cast<std::int64_t>(shape(0).size());
      return out(emit(op, {{"axis", Value::ints(axes ? normalize(*axes, rank) : Ints{})},
                           {"keep_dims", Value::boolean(attr_int("keepdims", 1) != 0)}},
                      {arg(0)}));
    }
    if (op == "Cast") {
      auto dt = dtype_of(static_cast<int>(attr_int("to", 0)));
      if (!dt) unsupported("expected `to` a data type loom has");
      return out(emit("Cast", {{"dst_type", Value::dtype(*dt)}}, {arg(0)}));
    }
    if (op == "Gather") {
      if (!constant_of(in_name(1), where_)) unsupported("expected constant indices");
      const auto rank = static_cast<std::int64_t>(shape(0).size());
      return out(emit("Gather", {{"axis", Value::i64(normalize({attr_int("axis", 0)}, rank)[0])}},
                      {arg(0), arg(1)}));
    }
    fail(what_, "unknown op '" + op + "' at " + where_ + " with inputs " + types(args_) +
                    " (docs/formats.md, \"ONNX import\", lists the ONNX ops loom reads)");
  }

  void constant() {
    const AP* a = n_->attribute_size() == 1 ? &n_->attribute(0) : nullptr;
    if (!a) unsupported("expected one attribute (value, value_float, value_floats, value_int, value_ints)");
    Tensor t;
    if (a->name() == "value") {
      t = read_tensor(a->t(), what_, n_->output(0));
    } else if (a->name() == "value_float") {
      t = Tensor::scalar(DType::kFloat32, a->f());
    } else if (a->name() == "value_int") {
      t = Tensor::scalar(DType::kInt64, static_cast<double>(a->i()));
    } else if (a->name() == "value_floats") {
      t = Tensor(DType::kFloat32, {a->floats_size()});
      for (int i = 0; i < a->floats_size(); ++i) t.data<float>()[i] = a->floats(i);
    } else if (a->name() == "value_ints") {
      t = Tensor(DType::kInt64, {a->ints_size()});
      for (int i = 0; i < a->ints_size(); ++i) t.data<std::int64_t>()[i] = a->ints(i);
    } else {
      unsupported("attribute " + a->name() + " is not supported");
    }
    out(graph_->add_value(Value::tensor(t)), shape_value_of(t));
  }

  void shape_op() {
    Node* x = def(in_name(0), where_).node;
    ir::AbstractPtr a = x ? abstract_of(x) : nullptr;
    if (!a || !a->is_tensor() || !a->has_rank()) unsupported("expected an input of known rank");
    const auto rank = static_cast<std::int64_t>(a->shape().size());
    std::int64_t start = attr_int("start", 0), end = attr_int("end", rank);
    start = std::clamp(start < 0 ? start + rank : start, std::int64_t{0}, rank);
    end = std::clamp(end < 0 ? end + rank : end, std::int64_t{0}, rank);
    ShapeValue s;
    for (std::int64_t d = start; d < end; ++d) {
      const std::int64_t v = a->shape()[static_cast<std::size_t>(d)];
      if (v >= 0) {
        s.push(v);
      } else {
        s.push(std::nullopt, {x, d});
      }
    }
    out_shape(std::move(s));
  }

  void identity() {
    const std::string& name = in_name(0);
    const Def& d = def(name, where_);
    if (!d.node) return out_shape(*d.shape);
    // Identity of a weight: a weight of its own under the output's name (PyTorch's exporter
    // writes a BatchNorm's running statistics so when their values equal another weight's).
    if (d.node->is_parameter() && static_cast<const ir::Parameter*>(d.node)->has_default() &&
        initializers_.count(name)) {
      const Tensor value = static_cast<const ir::Parameter*>(d.node)->default_value()->clone();
      ir::Parameter* p = graph_->add_parameter(unique_name(n_->output(0)),
                                               ir::Abstract::tensor(value.dtype(), value.shape()));
      p->set_default(value);
      params_.emplace_back(n_->output(0), value);
      return out(p);
    }
    out(d.node, d.shape);
  }

  void fold_shape(const std::string& op) {
    if (op == "Cast") {
      auto dt = dtype_of(static_cast<int>(attr_int("to", 0)));
      if (dt != DType::kInt64 && dt != DType::kInt32) unsupported("expected a cast of a shape to an integer type");
      return out_shape(shape_in(0));
    }
    if (op == "Gather") {
      const ShapeValue s = shape_in(0);
      const Def& id = def(in_name(1), where_);
      std::optional<Tensor> idx = constant_of(in_name(1), where_);
      std::optional<ShapeValue> indices = id.shape;
      if (!indices && idx) indices = shape_value_of(*idx);
      if (!indices) unsupported("expected constant integer indices of rank 0 or 1");
      const ShapeValue is = *indices;
      ShapeValue r;
      r.scalar = is.scalar;
      for (const auto& i : is.v) {
        if (!i) unsupported("expected known indices");
        std::int64_t k = *i < 0 ? *i + static_cast<std::int64_t>(s.v.size()) : *i;
        if (k < 0 || k >= static_cast<std::int64_t>(s.v.size())) unsupported("index out of range");
        r.push(s.v[static_cast<std::size_t>(k)], s.from[static_cast<std::size_t>(k)]);
      }
      return out_shape(std::move(r));
    }
    if (op == "Unsqueeze" || op == "Squeeze") {
      ShapeValue s = shape_in(0);
      s.scalar = op == "Squeeze";
      if (s.scalar && s.v.size() != 1) unsupported("expected a one-element shape to squeeze");
      return out_shape(std::move(s));
    }
    if (op == "Concat") {
      ShapeValue r;
      for (int k = 0; k < n_->input_size(); ++k) {
        const ShapeValue s = shape_in(k);
        r.append(s);
      }
      return out_shape(std::move(r));
    }
    // Slice (opset 10+: starts, ends, axes, steps as inputs) of a rank-1 shape, step 1.
    const ShapeValue s = shape_in(0);
    const Ints starts = const_ints(1).value_or(Ints{0});
    const Ints ends = const_ints(2).value_or(Ints{});
    const Ints steps = const_ints(4).value_or(Ints{1});
    if (starts.size() != 1 || ends.size() != 1 || steps != Ints{1}) return slice();  // as a tensor
    const auto len = static_cast<std::int64_t>(s.v.size());
    auto clampi = [&](std::int64_t v) { return std::clamp(v < 0 ? v + len : v, std::int64_t{0}, len); };
    ShapeValue r;
    for (std::int64_t i = clampi(starts[0]); i < clampi(ends[0]); ++i) {
      r.push(s.v[static_cast<std::size_t>(i)], s.from[static_cast<std::size_t>(i)]);
    }
    out_shape(std::move(r));
  }

  void conv() {
    const Shape& w = shape(1);
    if (w.size() != 4 || shape(0).size() != 4) unsupported("loom reads 2-D convolutions (x and w of rank 4)");
    const Ints kernel = pair_attr("kernel_shape", {w[2], w[3]});
    if (kernel != Ints{w[2], w[3]}) unsupported("kernel_shape differs from the weight's");
    auto [mode, pad] = window_pads();
    Node* x = arg(0);
    if (const Padded* p = mode != "same" ? padded(x, 0.0) : nullptr) {
      x = p->source;  // the zeros go into the convolution's own padding
      for (std::size_t i = 0; i < 4; ++i) pad[i] += p->pad[i];
      mode = "pad";
    }
    Node* y = emit("Conv2D",
                   {{"out_channel", Value::i64(w[0])}, {"kernel_size", Value::ints(kernel)},
                    {"pad_mode", Value::string(mode)}, {"pad", Value::ints(pad)},
                    {"stride", Value::ints(pair_attr("strides", {1, 1}))},
                    {"dilation", Value::ints(pair_attr("dilations", {1, 1}))},
                    {"group", Value::i64(attr_int("group", 1))}},
                   {x, arg(1)});
    if (has_input(2)) y = emit("BiasAdd", {}, {y, arg(2)});
    out(y);
  }

  void gemm() {
    if (shape(0).size() != 2 || shape(1).size() != 2) unsupported("expected A and B of rank 2");
    Node* y = emit("MatMul", {{"transpose_a", Value::boolean(attr_int("transA", 0) != 0)},
                              {"transpose_b", Value::boolean(attr_int("transB", 0) != 0)}},
                   {arg(0), arg(1)});
    const double alpha = attr_float("alpha", 1.0), beta = attr_float("beta", 1.0);
    if (alpha != 1.0) y = emit("Mul", {}, {y, scalar_like(0, alpha)});
    if (has_input(2) && beta != 0.0) {
      Node* c = arg(2);
      if (beta != 1.0) c = emit("Mul", {}, {c, scalar_like(0, beta)});
      const Shape& cs = shape(2);
      y = cs.size() == 1 ? emit("BiasAdd", {}, {y, c}) : emit("Add", {}, {y, c});
    }
    out(y);
  }

  void matmul() {
    const Shape& a = shape(0);
    const Shape& b = shape(1);
    if (a.size() == 2 && b.size() == 2) return out(emit("MatMul", {}, {arg(0), arg(1)}));
    if (a.size() >= 3 && b.size() >= 2) return out(emit("BatchMatMul", {}, {arg(0), arg(1)}));
    unsupported("loom reads MatMul of two matrices or of a batch (rank >= 3) and a matrix or "
                "batch; rank-1 operands and a matrix times a batch are not supported");
  }

  void pool(bool max) {
    if (shape(0).size() != 4) unsupported("loom reads 2-D pooling (x of rank 4)");
    only_first_output();
    if (attr_int("ceil_mode", 0) != 0) unsupported("ceil_mode 1 (loom rounds the output size down)");
    if (pair_attr("dilations", {1, 1}) != Ints{1, 1}) unsupported("dilations other than 1");
    auto [mode, pad] = window_pads();
    if (!max && mode == "pad" && attr_int("count_include_pad", 0) != 0) {
      unsupported("count_include_pad 1 with pads (loom averages only the elements inside x)");
    }
    const Ints kernel = pair_attr("kernel_shape", {});
    Node* x = arg(0);
    // -inf padding before a max pooling is the pooling's own PAD window, while each pad stays
    // below the kernel (a window always holds an element of x).
    if (const Padded* p = max && mode != "same" && kernel.size() == 2
                              ? padded(x, -std::numeric_limits<double>::infinity())
                              : nullptr) {
      Ints sum = pad;
      for (std::size_t i = 0; i < 4; ++i) sum[i] += p->pad[i];
      if (sum[0] < kernel[0] && sum[1] < kernel[0] && sum[2] < kernel[1] && sum[3] < kernel[1]) {
        x = p->source;
        pad = sum;
        mode = "pad";
      }
    }
    out(emit(max ? "MaxPool" : "AvgPool",
             {{"kernel_size", Value::ints(kernel)},
              {"strides", Value::ints(pair_attr("strides", {1, 1}))},
              {"pad_mode", Value::string(mode == "pad" ? "PAD" : mode == "same" ? "SAME" : "VALID")},
              {"pad", Value::ints(pad)}},
             {x}));
  }

  void batch_norm() {
    if (attr_int("training_mode", 0) != 0) {
      unsupported("training_mode 1 (export the model in inference mode: model.eval())");
    }
    only_first_output();
    const std::size_t rank = shape(0).size();
    if (rank != 2 && rank != 4) unsupported("expected an input (N, C) or (N, C, H, W)");
    Node* bn = emit("BatchNorm", {{"is_training", Value::boolean(false)},
                                  {"epsilon", Value::f32(static_cast<float>(attr_float("epsilon", 1e-5)))}},
                    {arg(0), arg(1), arg(2), arg(3), arg(4)});
    out(item(bn, 0));
  }

  // a · b for sizes, refused when it overflows.
  std::int64_t product(std::int64_t a, std::int64_t b) {
    std::int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) unsupported("sizes whose product overflows 64 bits");
    return r;
  }

  void flatten() {
    const Shape& x = shape(0);
    const auto rank = static_cast<std::int64_t>(x.size());
    std::int64_t axis = attr_int("axis", 1);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis > rank) unsupported("axis out of range");
    if (axis == 1 && rank >= 2) return out(emit("Flatten", {}, {arg(0)}));
    Ints target;
    std::int64_t lead = 1, rest = 1;
    bool lead_known = true, rest_known = true;
    for (std::int64_t d = 0; d < rank; ++d) {
      const std::int64_t v = x[static_cast<std::size_t>(d)];
      (d < axis ? lead_known : rest_known) &= v >= 0;
      if (v >= 0) (d < axis ? lead : rest) = product(d < axis ? lead : rest, v);
    }
    if (!lead_known && !rest_known) unsupported("more than one unknown dimension");
    target = {lead_known ? lead : -1, rest_known ? rest : -1};
    out(emit("Reshape", {{"shape", Value::ints(target)}}, {arg(0)}));
  }

  void reshape() {
    const Shape& x = shape(0);
    const Def& sd = def(in_name(1), where_);
    std::optional<ShapeValue> s = sd.shape;
    if (!s) {
      std::optional<Tensor> t = constant_of(in_name(1), where_);
      if (t) s = shape_value_of(*t);
    }
    if (!s) unsupported("expected the shape (input 1) to be a constant or computed from shapes");
    if (attr_int("allowzero", 0) != 0) unsupported("allowzero 1");
    // Each entry: a known size, a copy of one of x's unknown dims (its axis), or -1 (inferred).
    Ints target;
    std::vector<int> kind;  // 0 known, 1 a dim of x, 2 inferred or unknown
    Node* x_node = arg(0);
    for (std::size_t i = 0; i < s->v.size(); ++i) {
      std::optional<std::int64_t> v = s->v[i];
      std::pair<const ir::Node*, std::int64_t> src = s->from[i];
      if (v && *v == 0) {  // copy the input's dimension
        if (i >= x.size()) unsupported("a 0 in the shape past the input's rank");
        v = x[i] >= 0 ? std::optional<std::int64_t>(x[i]) : std::nullopt;
        src = {x_node, static_cast<std::int64_t>(i)};
      }
      if (v && *v != -1) {
        target.push_back(*v);
        kind.push_back(0);
      } else {
        target.push_back(-1);
        kind.push_back(!v && src.first == x_node ? 1 : 2);
      }
    }
    const auto count = [&](int k) { return std::count(kind.begin(), kind.end(), k); };
    std::int64_t x_unknown = 0;
    for (std::int64_t d : x) x_unknown += d < 0;
    // x.view(x.size(0), -1): the copied dim is x's only unknown one, so the inferred one is
    // known now (x's other dims over the target's known ones).
    if (count(1) == 1 && count(2) == 1 && x_unknown == 1) {
      std::int64_t known = 1, x_known = 1;
      for (std::size_t i = 0; i < target.size(); ++i) known = product(known, kind[i] == 0 ? target[i] : 1);
      for (std::int64_t d : x) x_known = product(x_known, d < 0 ? 1 : d);
      if (known <= 0 || x_known % known != 0) unsupported("the shape does not divide x's size");
      for (std::size_t i = 0; i < target.size(); ++i) {
        if (kind[i] == 2) target[i] = x_known / known;
      }
    } else if (count(1) + count(2) > 1) {
      unsupported("the shape has " + std::to_string(count(1) + count(2)) + " dimensions known "
                  "only at run time; loom's Reshape infers one (-1)");
    }
    out(emit("Reshape", {{"shape", Value::ints(target)}}, {arg(0)}));
  }

  // Pad in constant mode: a block of the value before and after x along each padded axis,
  // joined by Concat (shaped from a Slice of x, so any batch size works).
  void pad() {
    if (attr_string("mode", "constant") != "constant") {
      unsupported("mode " + attr_string("mode", "") + " (loom reads constant padding)");
    }
    const auto rank = static_cast<std::int64_t>(shape(0).size());
    Ints pads;
    double value = 0;
    Ints axes;
    if (opset_ >= 11) {
      pads = const_ints(1).value_or(Ints{});
      value = const_scalar(2).value_or(0.0);
      if (has_input(3)) axes = normalize(*const_ints(3), rank);
    } else {
      pads = attr_ints("pads").value_or(Ints{});
      value = attr_float("value", 0.0);
    }
    if (axes.empty()) {
      for (std::int64_t d = 0; d < rank; ++d) axes.push_back(d);
    }
    if (pads.size() != 2 * axes.size()) {
      unsupported("expected " + std::to_string(2 * axes.size()) + " pads, got " +
                  std::to_string(pads.size()));
    }
    Node* x = arg(0);
    const std::size_t n = axes.size();
    // H and W padding of (N, C, H, W): remembered, so that a Conv (zeros) or MaxPool (-inf) that
    // reads the result takes the pads into its own window instead (PyTorch's F.pad before a conv).
    Ints hw = {0, 0, 0, 0};  // top, bottom, left, right
    bool spatial_only = rank == 4;
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t d = axes[i], lo = pads[i], hi = pads[n + i];
      if (d < 2 && (lo != 0 || hi != 0)) spatial_only = false;
      if (d >= 2 && rank == 4) {
        hw[static_cast<std::size_t>(2 * (d - 2))] = lo;
        hw[static_cast<std::size_t>(2 * (d - 2) + 1)] = hi;
      }
    }
    Node* source = x;
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t d = axes[i], lo = pads[i], hi = pads[n + i];
      if (lo < 0 || hi < 0) unsupported("negative pads (cropping) are not supported");
      if (lo == 0 && hi == 0) continue;
      auto block = [&](std::int64_t extent) {
        Ints size(static_cast<std::size_t>(rank), -1);
        size[static_cast<std::size_t>(d)] = 1;
        Node* b = emit("ZerosLike", {}, {emit("Slice", {{"begin", Value::ints(Ints(size.size(), 0))},
                                                         {"size", Value::ints(size)}},
                                              {x})});
        if (value != 0) b = emit("Add", {}, {b, scalar_like(0, value)});
        if (extent == 1) return b;
        Ints multiples(static_cast<std::size_t>(rank), 1);
        multiples[static_cast<std::size_t>(d)] = extent;
        return emit("Tile", {{"multiples", Value::ints(multiples)}}, {b});
      };
      std::vector<Node*> parts;
      if (lo > 0) parts.push_back(block(lo));
      parts.push_back(x);
      if (hi > 0) parts.push_back(block(hi));
      x = emit("Concat", {{"axis", Value::i64(d)}}, parts);
    }
    if (spatial_only && x != source) padded_[x] = Padded{source, hw, value};
    out(x);
  }

  // A Pad's source and H, W pads when `x` is such a Pad's result with the given value, else null.
  struct Padded {
    Node* source;
    Ints pad;  // top, bottom, left, right
    double value;
  };
  std::unordered_map<const Node*, Padded> padded_;
  const Padded* padded(Node* x, double value) const {
    auto it = padded_.find(x);
    return it != padded_.end() && it->second.value == value ? &it->second : nullptr;
  }

  // ConstantOfShape(shape) with `value` (a one-element tensor; Float32 0 by default): Fill.
  void constant_of_shape() {
    std::optional<Ints> dims = const_ints(0);
    if (!dims) unsupported("expected a constant shape");
    for (std::int64_t d : *dims) {
      if (d < 0) unsupported("expected non-negative dims");
    }
    DType dt = DType::kFloat32;
    double value = 0;
    if (const AP* v = attr("value")) {
      const Tensor t = read_tensor(v->t(), what_, n_->output(0));
      if (t.numel() != 1) unsupported("expected a one-element value");
      dt = t.dtype();
      value = t.get(0);
    }
    out(emit("Fill", {{"dtype", Value::dtype(dt)}, {"shape", Value::ints(*dims)},
                      {"value", Value::f64(value)}},
             {}));
  }

  // Slice(data, starts, ends[, axes[, steps]]) of a tensor (opset 10+; attributes before):
  // StridedSlice with ONNX's clamping, the end of a backwards slice past the first element as an
  // end_mask bit.
  void slice() {
    const Shape& x = shape(0);
    const auto rank = static_cast<std::int64_t>(x.size());
    if (rank > 62) unsupported("a rank above 62 (StridedSlice's masks are 64-bit)");
    std::optional<Ints> starts, ends, axes, steps;
    if (opset_ >= 10) {
      starts = const_ints(1);
      ends = const_ints(2);
      axes = const_ints(3);
      steps = const_ints(4);
    } else {
      starts = attr_ints("starts");
      ends = attr_ints("ends");
      axes = attr_ints("axes");
    }
    if (!starts || !ends || starts->size() != ends->size()) {
      unsupported("expected constant starts and ends of one length");
    }
    if (!axes) {
      axes = Ints();
      for (std::size_t i = 0; i < starts->size(); ++i) axes->push_back(static_cast<std::int64_t>(i));
    }
    if (!steps) steps = Ints(starts->size(), 1);
    if (axes->size() != starts->size() || steps->size() != starts->size()) {
      unsupported("expected starts, ends, axes and steps of one length");
    }
    Ints begin(static_cast<std::size_t>(rank), 0), end(static_cast<std::size_t>(rank), 0),
        stride(static_cast<std::size_t>(rank), 1);
    std::int64_t begin_mask = 0, end_mask = 0;
    for (std::int64_t d = 0; d < rank; ++d) {  // untouched axes: whole
      begin_mask |= std::int64_t{1} << d;
      end_mask |= std::int64_t{1} << d;
    }
    const Ints ax = normalize(*axes, rank);
    for (std::size_t i = 0; i < ax.size(); ++i) {
      const std::int64_t d = ax[i], dim = x[static_cast<std::size_t>(d)], step = (*steps)[i];
      if (step == 0) unsupported("a step of 0");
      if (dim < 0) unsupported("slicing an axis of unknown size");
      // A negative index counts from the end; one before the first element is -1.
      auto wrap = [&](std::int64_t v) { return v >= 0 ? v : v < -dim ? -1 : v + dim; };
      const std::int64_t b = wrap((*starts)[i]), e = wrap((*ends)[i]);
      const auto u = static_cast<std::size_t>(d);
      begin_mask &= ~(std::int64_t{1} << d);
      end_mask &= ~(std::int64_t{1} << d);
      if (step > 0) {
        begin[u] = std::clamp<std::int64_t>(b, 0, dim);
        end[u] = std::clamp<std::int64_t>(e, 0, dim);
      } else {
        begin[u] = std::clamp<std::int64_t>(b, 0, dim - 1);
        end[u] = std::clamp<std::int64_t>(e, -1, dim - 1);
        if (end[u] < 0) {  // through element 0
          end_mask |= std::int64_t{1} << d;
          end[u] = 0;
        }
      }
      stride[u] = step;
    }
    out(emit("StridedSlice", {{"begin", Value::ints(begin)}, {"end", Value::ints(end)},
                              {"strides", Value::ints(stride)},
                              {"begin_mask", Value::i64(begin_mask)},
                              {"end_mask", Value::i64(end_mask)}},
             {arg(0)}));
  }

  void clip() {
    std::optional<double> lo, hi;
    if (opset_ >= 11) {
      lo = const_scalar(1);
      hi = const_scalar(2);
    } else {
      if (attr("min")) lo = attr_float("min", 0);
      if (attr("max")) hi = attr_float("max", 0);
    }
    if (lo && *lo == 0 && hi && *hi == 6) return out(emit("ReLU6", {}, {arg(0)}));
    if (lo && *lo == 0 && !hi) return out(emit("ReLU", {}, {arg(0)}));
    Node* y = arg(0);
    if (lo) y = emit("Maximum", {}, {y, scalar_like(0, *lo)});
    if (hi) y = emit("Minimum", {}, {y, scalar_like(0, *hi)});
    out(y);
  }

  const ::onnx::ModelProto& m_;
  std::string what_;
  std::int64_t opset_ = 0;
  ir::FuncGraph* graph_ = nullptr;
  std::unordered_map<std::string, const TP*> initializers_;
  std::unordered_map<std::string, Def> defs_;
  std::set<std::string> used_;        // graph node and parameter names
  std::set<std::string> used_names_;  // value names some node or the graph output reads
  std::vector<std::pair<std::string, Tensor>> params_;
};

}  // namespace

mindir::GraphCell parse_onnx(const void* data, std::size_t size, const std::string& what) {
  if (size > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    fail(what, "expected a file under 2 GB (protobuf's limit), got " + std::to_string(size) +
                   " bytes");
  }
  ::onnx::ModelProto m;
  if (size == 0 || !m.ParseFromArray(data, static_cast<int>(size))) {
    fail(what, "expected an ONNX ModelProto, got " + std::to_string(size) +
                   " bytes protobuf cannot parse (truncated or not an ONNX file)");
  }
  mindir::GraphCell::Parts parts;
  parts.module = std::make_unique<ir::Module>();
  Reader r(m, what);
  try {
    r.build(parts);
    passes::infer_graph(parts.graph, {});
  } catch (const FormatError&) {
    throw;
  } catch (const Error& e) {
    fail(what, e.what());
  }
  return mindir::GraphCell::from_parts(std::move(parts));
}

mindir::GraphCell load_onnx(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FormatError("ONNX " + path + ": expected a readable file, got none");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_onnx(bytes.data(), bytes.size(), path);
}

}  // namespace loom::onnx
