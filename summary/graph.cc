#include "summary/graph.h"

#include <map>
#include <string>
#include <unordered_map>

#include "core/ir/anf.h"
#include "core/ir/printer.h"
#include "runtime/executable.h"

namespace loom::summary {
namespace {

std::string sanitize(const std::string& s) {
  std::string out = s;
  for (char& ch : out) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' || ch == '-' || ch == '/';
    if (!ok) ch = '_';
  }
  return out;
}

// The scope without a trailing "/<op>" component.
std::string cell_path(const std::string& scope, const std::string& op) {
  std::string path = scope;
  const std::size_t slash = path.rfind('/');
  const std::string last = slash == std::string::npos ? path : path.substr(slash + 1);
  if (last == op) path = slash == std::string::npos ? "" : path.substr(0, slash);
  return sanitize(path);
}

class Namer {
 public:
  std::string next(const std::string& path, const std::string& op) {
    const std::string base = (path.empty() ? "" : path + "/") + sanitize(op);
    return base + "_" + std::to_string(counts_[base]++);
  }

 private:
  std::map<std::string, int> counts_;
};

void set_shape(tb::NodeDef& node, const Shape& shape) {
  tb::TensorShapeProto* s =
      (*node.mutable_attr())["_output_shapes"].mutable_list()->add_shape();
  for (std::int64_t d : shape) s->add_dim()->set_size(d);
}

void finish(tb::GraphDef& g) { g.mutable_versions()->set_producer(22); }

}  // namespace

tb::GraphDef graph_def_from(const ir::FuncGraph& graph) {
  tb::GraphDef g;
  Namer namer;
  std::unordered_map<const ir::Node*, std::string> names;
  for (const ir::Parameter* p : graph.parameters()) {
    tb::NodeDef* n = g.add_node();
    n->set_name(sanitize(p->name()));
    n->set_op("Parameter");
    if (p->has_default()) (*n->mutable_attr())["is_weight"].set_b(true);
    if (p->abstract() && p->abstract()->is_tensor()) set_shape(*n, p->abstract()->shape());
    names[p] = n->name();
  }
  for (const ir::CNode* c : graph.topo_order()) {
    std::string op;
    if (const ir::Primitive* prim = c->primitive()) {
      op = prim->name();
    } else if (const ir::FuncGraph* callee = c->called_graph()) {
      op = "Call:" + callee->name();
    } else {
      op = "Call";
    }
    const std::string path = cell_path(c->debug().scope, op);
    std::vector<std::string> inputs;
    for (std::size_t i = 0; i < c->num_args(); ++i) {
      const ir::Node* in = c->arg(i);
      auto it = names.find(in);
      if (it != names.end()) {
        inputs.push_back(it->second);
        continue;
      }
      if (in->is_value()) {
        const auto* v = static_cast<const ir::ValueNode*>(in);
        tb::NodeDef* k = g.add_node();
        k->set_name(namer.next(path, "Const"));
        k->set_op("Const");
        std::string text = ir::print_value(v->value());
        if (text.size() > 80) text = text.substr(0, 77) + "...";
        (*k->mutable_attr())["value"].set_s(text);
        if (v->abstract() && v->abstract()->is_tensor()) set_shape(*k, v->abstract()->shape());
        inputs.push_back(k->name());
      } else {
        inputs.push_back(sanitize(in->name().empty() ? "unknown" : in->name()));
      }
    }
    tb::NodeDef* n = g.add_node();
    n->set_name(namer.next(path, op));
    n->set_op(op);
    for (const std::string& s : inputs) n->add_input(s);
    if (c->abstract() && c->abstract()->is_tensor()) set_shape(*n, c->abstract()->shape());
    names[c] = n->name();
  }
  finish(g);
  return g;
}

tb::GraphDef graph_def_from(const runtime::Executable& exe) {
  using runtime::Executable;
  tb::GraphDef g;
  Namer namer;
  const auto& buffers = exe.buffers();
  std::unordered_map<std::size_t, std::string> producer;  // buffer → "name[:k]"
  for (const Executable::Launch& l : exe.launches()) {
    const std::string op = l.prim ? l.prim->name() : "Control";
    const std::string path = cell_path(l.debug.scope, op);
    std::vector<std::string> inputs;
    for (std::size_t b : l.inputs) {
      auto it = producer.find(b);
      if (it == producer.end()) {
        tb::NodeDef* src = g.add_node();
        const Executable::Buffer& buf = buffers.at(b);
        if (buf.kind == Executable::BufferKind::kParameter) {
          src->set_name("input_" + std::to_string(buf.param));
          src->set_op("Parameter");
        } else {
          src->set_name(namer.next(path, "Const"));
          src->set_op("Const");
        }
        set_shape(*src, buf.shape);
        it = producer.emplace(b, src->name()).first;
      }
      inputs.push_back(it->second);
    }
    tb::NodeDef* n = g.add_node();
    n->set_name(namer.next(path, op));
    n->set_op(op);
    for (const std::string& s : inputs) n->add_input(s);
    for (std::size_t k = 0; k < l.outputs.size(); ++k) {
      const std::size_t b = l.outputs[k];
      set_shape(*n, buffers.at(b).shape);
      producer[b] = k == 0 ? n->name() : n->name() + ":" + std::to_string(k);
    }
  }
  finish(g);
  return g;
}

}  // namespace loom::summary
