// ONNX export (onnx/onnx.h): the inference graph, op by op, into onnx.proto's messages.
#include "onnx/onnx.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/ir/anf.h"
#include "core/ir/error.h"
#include "mindir/export_graph.h"
#include "nn/cell.h"
#include "onnx/proto/onnx.pb.h"
#include "ops/conv_geometry.h"

#ifndef LOOM_ONNX_VERSION
#define LOOM_ONNX_VERSION "0.2.0"
#endif

namespace loom::onnx {

namespace {

using ir::CNode;
using ir::Node;
using ir::Value;

int elem_type(DType d) {
  switch (d) {
    case DType::kFloat32: return ::onnx::TensorProto::FLOAT;
    case DType::kFloat64: return ::onnx::TensorProto::DOUBLE;
    case DType::kInt32: return ::onnx::TensorProto::INT32;
    case DType::kInt64: return ::onnx::TensorProto::INT64;
    case DType::kUInt8: return ::onnx::TensorProto::UINT8;
    case DType::kBool: return ::onnx::TensorProto::BOOL;
    case DType::kFloat16: return ::onnx::TensorProto::FLOAT16;
    case DType::kBFloat16: return ::onnx::TensorProto::BFLOAT16;
  }
  return ::onnx::TensorProto::UNDEFINED;
}

void set_type(::onnx::ValueInfoProto* v, const ir::Abstract& a, bool symbolic_batch) {
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem_type(a.dtype()));
  auto* shape = t->mutable_shape();
  for (std::size_t d = 0; d < a.shape().size(); ++d) {
    auto* dim = shape->add_dim();
    if (d == 0 && symbolic_batch) {
      dim->set_dim_param("N");
    } else {
      dim->set_dim_value(a.shape()[d]);
    }
  }
}

void set_tensor(::onnx::TensorProto* t, const std::string& name, const Tensor& value) {
  t->set_name(name);
  t->set_data_type(elem_type(value.dtype()));
  for (std::int64_t d : value.shape()) t->add_dims(d);
  t->set_raw_data(static_cast<const char*>(value.raw_data()), value.nbytes());
}

void add_ints(::onnx::NodeProto* n, const std::string& name, const std::vector<std::int64_t>& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INTS);
  for (std::int64_t x : v) a->add_ints(x);
}

void add_int(::onnx::NodeProto* n, const std::string& name, std::int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(v);
}

void add_float(::onnx::NodeProto* n, const std::string& name, double v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::FLOAT);
  a->set_f(static_cast<float>(v));
}

std::vector<std::int64_t> ints(const Value& v) {
  if (v.is_scalar()) return {v.as_int()};
  return v.as_ints();
}

// The graph, node by node.
class Writer {
 public:
  Writer(const ir::FuncGraph& g, std::size_t num_inputs, ::onnx::GraphProto* out)
      : g_(g), num_inputs_(num_inputs), out_(out) {}

  void write() {
    const auto& params = g_.parameters();
    for (std::size_t i = 0; i < params.size(); ++i) {
      const ir::Parameter* p = params[i];
      if (i < num_inputs_) {
        const std::string name = "x" + std::to_string(i);
        names_[p] = name;
        auto* in = out_->add_input();
        in->set_name(name);
        set_type(in, *p->abstract(), true);
      } else {
        names_[p] = p->name();
        set_tensor(out_->add_initializer(), p->name(), *p->default_value());
      }
    }
    const std::vector<CNode*> order = g_.topo_order();
    for (const CNode* c : order) {
      for (std::size_t i = 0; i < c->num_args(); ++i) {
        ++users_[c->arg(i)];
        last_use_[c->arg(i)] = {c, i};
      }
    }
    ++users_[g_.output()];
    for (const CNode* c : order) node(*c);
    std::vector<const Node*> outs;
    const Node* o = g_.output();
    if (o->is_cnode() && static_cast<const CNode*>(o)->is_call_to("MakeTuple")) {
      const auto* t = static_cast<const CNode*>(o);
      for (std::size_t i = 0; i < t->num_args(); ++i) outs.push_back(t->arg(i));
    } else {
      outs.push_back(o);
    }
    for (std::size_t i = 0; i < outs.size(); ++i) {
      const std::string name = "y" + std::to_string(i);
      emit("Identity", {name_of(outs[i])}, name);
      auto* v = out_->add_output();
      v->set_name(name);
      set_type(v, *outs[i]->abstract(), true);
    }
  }

 private:
  [[noreturn]] void refuse(const CNode& c, const std::string& why) const {
    throw ValueError("ONNX export: " + std::string(c.primitive()->name()) + " at node %" +
                     c.name() + ": " + why);
  }

  std::string name_of(const Node* n) {
    if (auto it = names_.find(n); it != names_.end()) return it->second;
    if (n->is_value()) {
      const Value& v = static_cast<const ir::ValueNode*>(n)->value();
      Tensor t;
      if (v.is_tensor()) {
        t = v.as_tensor();
      } else if (v.is_scalar()) {
        t = Tensor::scalar(v.as_scalar().dtype(), v.as_double());
      } else {
        throw ValueError("ONNX export: expected tensor or scalar constants, got " +
                         std::string(Value::kind_name(v.kind())));
      }
      const std::string name = "const" + std::to_string(counter_++);
      set_tensor(out_->add_initializer(), name, t);
      names_[n] = name;
      return name;
    }
    throw InternalError("ONNX export: node used before it is written");
  }

  ::onnx::NodeProto* emit(const std::string& op, const std::vector<std::string>& inputs,
                          const std::string& output) {
    auto* n = out_->add_node();
    n->set_op_type(op);
    n->set_name(output);
    for (const std::string& i : inputs) n->add_input(i);
    n->add_output(output);
    return n;
  }

  std::string fresh(const CNode& c) {
    std::string base = c.name().empty() ? "t" + std::to_string(counter_++) : c.name();
    while (used_.count(base)) base += "_";
    used_.insert(base);
    return base;
  }

  // The single user of `n`, when it is a call of `op` taking n as input 0; else null.
  const CNode* only_user_call(const Node* n, const char* op) const {
    auto count = users_.find(n);
    if (count == users_.end() || count->second != 1) return nullptr;
    auto use = last_use_.find(n);  // none when the only use is the graph's output
    if (use == last_use_.end()) return nullptr;
    const auto [user, index] = use->second;
    return user->is_call_to(op) && index == 0 ? user : nullptr;
  }

  // A window op's kernel_shape, strides and pads (ONNX order: top, left, bottom, right).
  void window(const CNode& c, const Shape& x, const std::vector<std::int64_t>& kernel,
              const std::vector<std::int64_t>& stride, const std::vector<std::int64_t>& dilation,
              ::onnx::NodeProto* n) {
    const ir::Primitive& p = *c.primitive();
    if (p.has_attr("format") && p.attr("format").as_string() != "NCHW") {
      refuse(c, "expected format NCHW, got " + p.attr("format").as_string());
    }
    const ops::PadMode mode = ops::pad_mode_of(p);
    std::vector<std::int64_t> pad = {0, 0, 0, 0};
    if (mode == ops::PadMode::kPad && p.has_attr("pad")) pad = ints(p.attr("pad"));
    if (pad.size() == 1) pad = {pad[0], pad[0], pad[0], pad[0]};
    std::int64_t before[2], after[2];
    for (int a = 0; a < 2; ++a) {
      const ops::WindowAxis w = ops::window_axis(x[2 + a], kernel[a], stride[a], dilation[a], mode,
                                                 pad[2 * a], pad[2 * a + 1]);
      before[a] = w.pad_before;
      after[a] = w.pad_after;
    }
    add_ints(n, "kernel_shape", kernel);
    add_ints(n, "strides", stride);
    add_ints(n, "pads", {before[0], before[1], after[0], after[1]});
  }

  static std::vector<std::int64_t> pair(const Value& v) {
    std::vector<std::int64_t> r = ints(v);
    if (r.size() == 1) return {r[0], r[0]};
    if (r.size() == 4) return {r[2], r[3]};
    return r;
  }

  void node(const CNode& c) {
    if (skip_.count(&c)) return;
    const ir::Primitive& p = *c.primitive();
    const std::string& op = p.name();
    auto in = [&](std::size_t i) { return name_of(c.arg(i)); };
    if (op == "TupleGetItem") {
      const auto* src = c.arg(0);
      const std::int64_t k = static_cast<const ir::ValueNode*>(c.arg(1))->value().as_int();
      auto it = tuple_parts_.find(src);
      if (it == tuple_parts_.end() || k < 0 || k >= static_cast<std::int64_t>(it->second.size()) ||
          it->second[static_cast<std::size_t>(k)].empty()) {
        refuse(c, "expected element 0 of a BatchNorm in inference mode");
      }
      names_[&c] = it->second[static_cast<std::size_t>(k)];
      return;
    }
    if (op == "MakeTuple") return;  // the graph's outputs (write())
    const std::string out = fresh(c);
    names_[&c] = out;
    const Shape* x = c.num_args() > 0 && c.arg(0)->abstract() && c.arg(0)->abstract()->is_tensor()
                         ? &c.arg(0)->abstract()->shape()
                         : nullptr;
    if (op == "Conv2D") {
      const std::vector<std::int64_t> kernel = pair(p.attr("kernel_size"));
      const std::vector<std::int64_t> stride = pair(p.attr("stride"));
      const std::vector<std::int64_t> dilation = pair(p.attr("dilation"));
      std::vector<std::string> args = {in(0), in(1)};
      const CNode* bias = only_user_call(&c, "BiasAdd");
      if (bias != nullptr) {
        args.push_back(name_of(bias->arg(1)));
        skip_.insert(bias);
        names_[bias] = out;
      }
      auto* n = emit("Conv", args, out);
      window(c, *x, kernel, stride, dilation, n);
      add_ints(n, "dilations", dilation);
      add_int(n, "group", p.attr("group").as_int());
      return;
    }
    if (op == "MatMul") {
      std::vector<std::string> args = {in(0), in(1)};
      const CNode* bias = only_user_call(&c, "BiasAdd");
      if (bias == nullptr) {
        const CNode* add = only_user_call(&c, "Add");
        const auto& b = add ? add->arg(1)->abstract() : nullptr;
        if (b && b->is_tensor() && b->shape().size() == 1) bias = add;
      }
      if (bias != nullptr) {
        args.push_back(name_of(bias->arg(1)));
        skip_.insert(bias);
        names_[bias] = out;
      }
      auto* n = emit("Gemm", args, out);
      add_int(n, "transA", p.attr("transpose_a").as_bool() ? 1 : 0);
      add_int(n, "transB", p.attr("transpose_b").as_bool() ? 1 : 0);
      return;
    }
    if (op == "BiasAdd") {
      if (!x || x->size() != 2) refuse(c, "expected a BiasAdd after a Conv2D or on (N, C)");
      emit("Add", {in(0), in(1)}, out);
      return;
    }
    if (op == "BatchNorm") {
      if (p.attr("is_training").as_bool()) refuse(c, "expected inference mode");
      auto* n = emit("BatchNormalization", {in(0), in(1), in(2), in(3), in(4)}, out);
      add_float(n, "epsilon", p.attr("epsilon").as_double());
      tuple_parts_[&c] = {out, "", "", "", ""};
      return;
    }
    if (op == "ReLU") {
      emit("Relu", {in(0)}, out);
      return;
    }
    if (op == "ReLU6") {
      const DType dt = c.abstract()->dtype();
      const std::string zero = constant(Tensor::scalar(dt, 0.0));
      const std::string six = constant(Tensor::scalar(dt, 6.0));
      emit("Clip", {in(0), zero, six}, out);
      return;
    }
    if (op == "MaxPool" || op == "AvgPool") {
      const std::vector<std::int64_t> kernel = pair(p.attr("kernel_size"));
      const std::vector<std::int64_t> stride = pair(p.attr("strides"));
      auto* n = emit(op == "MaxPool" ? "MaxPool" : "AveragePool", {in(0)}, out);
      window(c, *x, kernel, stride, {1, 1}, n);
      if (op == "AvgPool") add_int(n, "count_include_pad", 0);
      return;
    }
    if (op == "Flatten") {
      auto* n = emit("Flatten", {in(0)}, out);
      add_int(n, "axis", 1);
      return;
    }
    if (op == "Reshape") {
      std::vector<std::int64_t> shape = c.abstract()->shape();
      if (!shape.empty()) shape[0] = 0;  // the batch dimension copied from the input
      Tensor t(DType::kInt64, {static_cast<std::int64_t>(shape.size())});
      for (std::size_t i = 0; i < shape.size(); ++i) t.data<std::int64_t>()[i] = shape[i];
      emit("Reshape", {in(0), constant(t)}, out);
      return;
    }
    if (op == "ReduceMean") {
      auto* n = emit("ReduceMean", {in(0)}, out);
      std::vector<std::int64_t> axes = ints(p.attr("axis"));
      if (axes.empty()) {
        for (std::size_t d = 0; d < x->size(); ++d) axes.push_back(static_cast<std::int64_t>(d));
      }
      add_ints(n, "axes", axes);
      add_int(n, "keepdims", p.attr("keep_dims").as_bool() ? 1 : 0);
      return;
    }
    if (op == "Softmax") {
      auto* n = emit("Softmax", {in(0)}, out);
      const std::vector<std::int64_t> axis = ints(p.attr("axis"));
      if (axis.size() != 1) refuse(c, "expected one axis");
      add_int(n, "axis", axis[0]);
      return;
    }
    static const std::map<std::string, std::string> kElementwise = {
        {"Add", "Add"}, {"Sub", "Sub"}, {"Mul", "Mul"}, {"RealDiv", "Div"},
        {"Sigmoid", "Sigmoid"}, {"Tanh", "Tanh"}};
    if (auto it = kElementwise.find(op); it != kElementwise.end()) {
      std::vector<std::string> args;
      for (std::size_t i = 0; i < c.num_args(); ++i) args.push_back(in(i));
      emit(it->second, args, out);
      return;
    }
    refuse(c, "loom writes Conv2D, BiasAdd, MatMul, BatchNorm (inference), ReLU, ReLU6, MaxPool, "
              "AvgPool, Flatten, Reshape, ReduceMean, Softmax, Add, Sub, Mul, RealDiv, Sigmoid "
              "and Tanh to ONNX");
  }

  std::string constant(const Tensor& t) {
    const std::string name = "const" + std::to_string(counter_++);
    set_tensor(out_->add_initializer(), name, t);
    return name;
  }

  const ir::FuncGraph& g_;
  std::size_t num_inputs_;
  ::onnx::GraphProto* out_;
  std::map<const Node*, std::string> names_;
  std::map<const Node*, int> users_;  // uses by cnodes (and the graph's output)
  std::map<const Node*, std::pair<const CNode*, std::size_t>> last_use_;  // (user, input index)
  std::map<const Node*, std::vector<std::string>> tuple_parts_;
  std::set<const CNode*> skip_;
  std::set<std::string> used_;
  int counter_ = 0;
};

}  // namespace

void export_onnx(nn::Cell& net, const std::vector<ir::AbstractPtr>& example_inputs,
                 const std::string& path) {
  nn::Traced traced = mindir::inference_graph(net, example_inputs, "ONNX export");
  ::onnx::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name("loom");
  model.set_producer_version(LOOM_ONNX_VERSION);
  auto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOpset);
  auto* graph = model.mutable_graph();
  graph->set_name(net.cls_name());
  Writer(*traced.graph, example_inputs.size(), graph).write();
  std::string bytes;
  if (!model.SerializeToString(&bytes)) {
    throw ValueError("ONNX export: the model does not serialize (over protobuf's 2 GB limit?)");
  }
  mindir::write_file_atomically(path, bytes, "ONNX export");
}

void export_onnx(nn::Cell& net, const std::vector<Tensor>& example_inputs,
                 const std::string& path) {
  std::vector<ir::AbstractPtr> a;
  for (const Tensor& t : example_inputs) a.push_back(ir::Abstract::tensor(t.dtype(), t.shape()));
  export_onnx(net, a, path);
}

}  // namespace loom::onnx
