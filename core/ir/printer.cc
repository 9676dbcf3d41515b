// The IR printer: turns a Module, a FuncGraph or a Value into the .ir text of docs/ir.md.
//
// The output is canonical — one spelling per construct, attributes in name order, cnodes in
// topo_order(), unnamed cnodes numbered %0, %1... per graph in print order — so that
// print → parse → print is byte-identical. The printer also serves verify(), which prints broken
// IR around the offending node, so it never throws or crashes on malformed graphs: null inputs,
// nodes of other graphs, odd callees and undefined tensors all get a readable (if unparseable)
// spelling.
#include "core/ir/printer.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/ir/abstract.h"
#include "core/ir/anf.h"
#include "core/ir/value.h"

namespace loom::ir {
namespace {

void append_value(std::string& out, const Value& value);

void append_attrs(std::string& out, const Primitive::Attrs& attrs) {
  out += '{';
  bool first = true;
  for (const auto& [key, value] : attrs) {
    if (!first) out += ", ";
    first = false;
    out += key;
    out += ": ";
    append_value(out, value);
  }
  out += '}';
}

// Elements are read from the raw bytes rather than through Tensor::get so that Int64 values
// beyond 2^53 print exactly and a bool byte other than 0/1 cannot trip the sanitizers.
void append_tensor_elements(std::string& out, const Tensor& tensor) {
  const auto* bytes = static_cast<const unsigned char*>(tensor.raw_data());
  const std::int64_t n = tensor.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    if (i > 0) out += ", ";
    const unsigned char* p = bytes + static_cast<std::size_t>(i) * dtype_size(tensor.dtype());
    switch (tensor.dtype()) {
      case DType::kFloat32: {
        float v;
        std::memcpy(&v, p, sizeof v);
        out += format_f32(v);
        break;
      }
      case DType::kFloat64: {
        double v;
        std::memcpy(&v, p, sizeof v);
        out += format_f64(v);
        break;
      }
      case DType::kFloat16:
      case DType::kBFloat16: {
        std::uint16_t bits;
        std::memcpy(&bits, p, sizeof bits);
        out += format_f32(tensor.dtype() == DType::kFloat16 ? half_to_float(bits)
                                                            : bfloat16_to_float(bits));
        break;
      }
      case DType::kInt32: {
        std::int32_t v;
        std::memcpy(&v, p, sizeof v);
        out += std::to_string(v);
        break;
      }
      case DType::kInt64: {
        std::int64_t v;
        std::memcpy(&v, p, sizeof v);
        out += std::to_string(v);
        break;
      }
      case DType::kUInt8:
        out += std::to_string(static_cast<unsigned>(*p));
        break;
      case DType::kBool:
        out += *p != 0 ? "true" : "false";
        break;
    }
  }
}

void append_tensor(std::string& out, const Tensor& tensor) {
  if (!tensor.defined()) {
    out += "Tensor(<undefined>)";
    return;
  }
  out += "Tensor(shape=[";
  for (std::size_t i = 0; i < tensor.shape().size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(tensor.shape()[i]);
  }
  out += "], dtype=";
  out += dtype_name(tensor.dtype());
  out += ", value=[";
  append_tensor_elements(out, tensor);
  out += "])";
}

void append_scalar(std::string& out, const Scalar& s) {
  switch (s.dtype()) {
    case DType::kBool:
      out += s.as_bool() ? "Bool(1)" : "Bool(0)";
      return;
    case DType::kInt32:
      out += "I32(" + std::to_string(s.as_int()) + ")";
      return;
    case DType::kInt64:
      out += "I64(" + std::to_string(s.as_int()) + ")";
      return;
    case DType::kFloat32:
      out += "F32(" + format_f32(static_cast<float>(s.as_double())) + ")";
      return;
    case DType::kFloat64:
      out += "F64(" + format_f64(s.as_double()) + ")";
      return;
    default:  // not a scalar dtype: malformed, but still shown
      out += "Scalar(" + std::string(dtype_name(s.dtype())) + ", " + format_f64(s.as_double()) +
             ")";
      return;
  }
}

void append_value(std::string& out, const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kNone:
      out += "None";
      return;
    case Value::Kind::kScalar:
      append_scalar(out, value.as_scalar());
      return;
    case Value::Kind::kString:
      out += quote_string(value.as_string());
      return;
    case Value::Kind::kDType:
      out += "DType(";
      out += dtype_name(value.as_dtype());
      out += ')';
      return;
    case Value::Kind::kTensor:
      append_tensor(out, value.as_tensor());
      return;
    case Value::Kind::kTuple: {
      const auto& elements = value.elements();
      out += '(';
      for (std::size_t i = 0; i < elements.size(); ++i) {
        if (i > 0) out += ", ";
        append_value(out, elements[i]);
      }
      if (elements.size() == 1) out += ',';
      out += ')';
      return;
    }
    case Value::Kind::kPrimitive: {
      const PrimitivePtr& prim = value.as_primitive();
      if (!prim) {
        out += "Prim(<null>)";
        return;
      }
      out += "Prim(" + prim->name();
      if (!prim->attrs().empty()) {
        out += ", ";
        append_attrs(out, prim->attrs());
      }
      out += ')';
      return;
    }
    case Value::Kind::kGraph: {
      const FuncGraph* g = value.as_graph();
      out += g ? "@" + g->name() : "@<null>";
      return;
    }
  }
}

void append_debug(std::string& out, const DebugInfo& debug) {
  if (!debug.scope.empty()) out += " scope(" + quote_string(debug.scope) + ")";
  if (!debug.file.empty()) {
    out += " loc(" + quote_string(debug.file) + ":" + std::to_string(debug.line) + ")";
  }
  if (debug.role != Role::kForward) out += " role(" + std::string(role_name(debug.role)) + ")";
  if (!debug.forward.empty()) out += " of(" + quote_string(debug.forward) + ")";
}

class GraphPrinter {
 public:
  GraphPrinter(const FuncGraph& graph, const PrintOptions& options)
      : graph_(graph), highlight_(options.highlight), order_(graph.topo_order()) {
    for (const Parameter* p : graph.parameters()) {
      if (p) labels_.emplace(p, "%" + p->name());
    }
    for (auto& [c, label] : cnode_labels(graph)) labels_.emplace(c, "%" + label);
  }

  void print(std::string& out) const {
    out += "subgraph @" + graph_.name() + "(";
    const auto& params = graph_.parameters();
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (i > 0) out += ", ";
      append_parameter(out, params[i]);
    }
    out += ") {\n";
    for (const Parameter* p : params) {
      if (p && p == highlight_) out += ">> %" + p->name() + " is a parameter\n";
    }
    for (const CNode* c : order_) append_cnode(out, c);
    const Node* output = graph_.output();
    bool mark_return = output && output == highlight_ && !output->is_cnode();
    out += mark_return ? ">> " : "  ";
    out += "Return(" + operand(output) + ")\n}\n";
  }

 private:
  void append_parameter(std::string& out, const Parameter* p) const {
    if (!p) {
      out += "<null>";
      return;
    }
    out += "%" + p->name();
    if (p->abstract()) out += ": " + p->abstract()->to_string();
    if (p->has_default()) {
      out += " = ";
      append_tensor(out, *p->default_value());
    }
  }

  void append_cnode(std::string& out, const CNode* c) const {
    const auto& inputs = c->inputs();
    bool mark = c == highlight_;
    if (highlight_ && highlight_->is_value()) {
      for (const Node* in : inputs) mark = mark || in == highlight_;
    }
    out += mark ? ">> " : "  ";
    out += labels_.at(c) + " = ";
    const Primitive* prim = nullptr;
    if (inputs.empty()) {
      out += "<no callee>";
    } else if (const auto* v = dynamic_cast<const ValueNode*>(inputs[0]);
               v && v->value().is_primitive() && v->value().as_primitive()) {
      prim = v->value().as_primitive().get();
      out += prim->name();
    } else if (v && v->value().is_graph() && v->value().as_graph()) {
      out += "@" + v->value().as_graph()->name();
    } else {
      out += operand(inputs[0]);
    }
    out += '(';
    for (std::size_t i = 1; i < inputs.size(); ++i) {
      if (i > 1) out += ", ";
      out += operand(inputs[i]);
    }
    out += ')';
    if (prim && !prim->attrs().empty()) {
      out += ' ';
      append_attrs(out, prim->attrs());
    }
    if (c->abstract()) out += " : " + c->abstract()->to_string();
    append_debug(out, c->debug());
    out += '\n';
  }

  // A node this graph does not define (another graph's node, or a cnode left out of the topo
  // order by a cycle) is shown MindSpore-style as $(@graph:%name), or #id when unnamed.
  std::string operand(const Node* node) const {
    if (!node) return "<null>";
    if (auto it = labels_.find(node); it != labels_.end()) return it->second;
    if (const auto* v = dynamic_cast<const ValueNode*>(node)) return print_value(v->value());
    std::string out = "$(@";
    out += node->graph() ? node->graph()->name() : "<null>";
    out += ":%";
    if (node->name().empty()) {
      out += '#';
      out += std::to_string(node->id());
    } else {
      out += node->name();
    }
    return out + ")";
  }

  const FuncGraph& graph_;
  const Node* highlight_;
  std::vector<CNode*> order_;
  std::unordered_map<const Node*, std::string> labels_;
};

}  // namespace

std::string print_value(const Value& value) {
  std::string out;
  append_value(out, value);
  return out;
}

std::string print_graph(const FuncGraph& graph, const PrintOptions& options) {
  std::string out;
  GraphPrinter(graph, options).print(out);
  return out;
}

std::string print_module(const Module& module, const PrintOptions& options) {
  if (!module.entry()) return "# IR entry: <none>\n# Total subgraphs: 0\n";
  std::vector<FuncGraph*> graphs = module.reachable_graphs();
  std::string out = "# IR entry: @" + module.entry()->name() + "\n# Total subgraphs: " +
                    std::to_string(graphs.size()) + "\n";
  for (const FuncGraph* g : graphs) {
    out += '\n';
    GraphPrinter(*g, options).print(out);
  }
  return out;
}

std::unordered_map<const CNode*, std::string> cnode_labels(const FuncGraph& graph) {
  std::unordered_map<const CNode*, std::string> labels;
  int unnamed = 0;
  for (const CNode* c : graph.topo_order()) {
    labels.emplace(c, c->name().empty() ? std::to_string(unnamed++) : c->name());
  }
  return labels;
}

}  // namespace loom::ir
