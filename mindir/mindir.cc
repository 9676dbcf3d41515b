// MindIR serialization and loading (mindir.h): everything but tracing a Cell (export.cc), so
// that this part builds without nn/ (the LOOM_FUZZ build's clang 14 has no std::source_location,
// which nn/ uses). The encodings follow docs/formats.md, "MindIR".
#include "mindir/mindir.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "backends/backend.h"
#include "core/ir/anf.h"
#include "core/ir/error.h"
#include "core/passes/infer.h"
#include "runtime/compiled_function.h"
#include "mindir/proto/mind_ir.pb.h"
#include "ops/conv_geometry.h"
#include "ops/op.h"

#ifndef LOOM_MINDIR_VERSION
#define LOOM_MINDIR_VERSION "0.1.0"
#endif

namespace loom::mindir {

namespace {

using ir::Abstract;
using ir::AbstractPtr;
using ir::Value;
using AP = mind_ir::AttributeProto;
using TP = mind_ir::TensorProto;

// ---------------------------------------------------------------------------------------------
// dtypes

int dtype_code(DType d) {
  switch (d) {
    case DType::kFloat32:
      return TP::FLOAT;
    case DType::kFloat64:
      return TP::DOUBLE;  // 11, as the exporter writes tensors
    case DType::kFloat16:
      return TP::FLOAT16;
    case DType::kBFloat16:
      return TP::BFLOAT16;
    case DType::kInt32:
      return TP::INT32;
    case DType::kInt64:
      return TP::INT64;
    case DType::kUInt8:
      return TP::UINT8;
    case DType::kBool:
      return TP::BOOL;
  }
  return TP::UNDEFINED;
}

std::optional<DType> dtype_of_code(std::int64_t code) {
  switch (code) {
    case TP::FLOAT:
      return DType::kFloat32;
    case TP::DOUBLE:
    case TP::FLOAT64:
      return DType::kFloat64;
    case TP::FLOAT16:
      return DType::kFloat16;
    case TP::BFLOAT16:
      return DType::kBFloat16;
    case TP::INT32:
      return DType::kInt32;
    case TP::INT64:
      return DType::kInt64;
    case TP::UINT8:
      return DType::kUInt8;
    case TP::BOOL:
      return DType::kBool;
    default:
      return std::nullopt;
  }
}

// The AttributeType of a scalar of dtype d.
AP::AttributeType scalar_attr_type(DType d) {
  switch (d) {
    case DType::kBool:
      return AP::BOOL;
    case DType::kInt32:
      return AP::INT32;
    case DType::kInt64:
      return AP::INT64;
    case DType::kFloat32:
      return AP::FLOAT;
    case DType::kFloat64:
      return AP::DOUBLE;
    case DType::kUInt8:
      return AP::UINT8;
    case DType::kFloat16:
      return AP::FLOAT16;
    case DType::kBFloat16:
      return AP::BFLOAT16;
  }
  return AP::UNDEFINED;
}

// ---------------------------------------------------------------------------------------------
// Per-op facts: each op's MindIR form is declared with the op (ops::OpDef::mindir, ops/op.h).

using Encoding = ops::MindIRAttrEncoding;

// MindSpore's name for loom's `format` (the op YAML's and some primitives' attribute name).
constexpr std::string_view kMindSporeDataFormat = "data_format";

// The registered op of a primitive that has a MindIR form; nullptr for any other.
const ops::OpDef* mindir_op(std::string_view op) {
  const ops::OpDef* def = ops::Registry::global().find(op);
  return def && def->mindir.supported() ? def : nullptr;
}

// ---------------------------------------------------------------------------------------------
// Writing values

void set_tensor_meta(TP* t, DType dtype, const Shape& shape) {
  for (std::int64_t d : shape) t->add_dims(d);
  t->set_data_type(dtype_code(dtype));
}

void set_raw(TP* t, const Tensor& value) {
  // Host byte order is little-endian on every platform loom builds for (checked at load). A
  // value on a device is copied to the host first.
  const Tensor host = backend::to_host(value);
  t->set_raw_data(static_cast<const char*>(host.raw_data()), host.nbytes());
}

// A value as an attribute: `in_seq` selects the repeated element slots MindSpore's loader wants
// inside tuples and lists.
void encode_value(const Value& v, AP* a, bool in_seq) {
  switch (v.kind()) {
    case Value::Kind::kNone:
      a->set_type(AP::NONE);
      return;
    case Value::Kind::kScalar: {
      const ir::Scalar& s = v.as_scalar();
      a->set_type(scalar_attr_type(s.dtype()));
      if (s.dtype() == DType::kFloat32) {
        const float f = static_cast<float>(s.as_double());
        in_seq ? a->add_floats(f) : a->set_f(f);
      } else if (s.dtype() == DType::kFloat64) {
        in_seq ? a->add_doubles(s.as_double()) : a->set_d(s.as_double());
      } else {
        in_seq ? a->add_ints(s.as_int()) : a->set_i(s.as_int());
      }
      return;
    }
    case Value::Kind::kString:
      a->set_type(AP::STRING);
      in_seq ? a->add_strings(v.as_string()) : a->set_s(v.as_string());
      return;
    case Value::Kind::kDType: {
      a->set_type(AP::TENSORS);
      a->add_tensors()->set_data_type(dtype_code(v.as_dtype()));
      return;
    }
    case Value::Kind::kTensor: {
      a->set_type(AP::TENSORS);
      TP* t = a->add_tensors();
      t->set_name("value0");
      set_tensor_meta(t, v.as_tensor().dtype(), v.as_tensor().shape());
      set_raw(t, v.as_tensor());
      return;
    }
    case Value::Kind::kTuple:
      a->set_type(AP::TUPLE);
      for (const Value& e : v.elements()) encode_value(e, a->add_values(), true);
      return;
    case Value::Kind::kPrimitive:
    case Value::Kind::kGraph:
      throw ValueError("MindIR export: expected a data value, got a " +
                       std::string(Value::kind_name(v.kind())));
  }
}

void add_attr(google::protobuf::RepeatedPtrField<AP>* attrs, const std::string& name,
              const Value& v) {
  AP* a = attrs->Add();
  a->set_name(name);
  encode_value(v, a, false);
}

Value string_list(const std::vector<std::string>& names) {
  std::vector<Value> e;
  for (const auto& n : names) e.push_back(Value::string(n));
  return Value::tuple(std::move(e));
}

void encode_abstract(const Abstract& a, AP* out) {
  switch (a.kind()) {
    case Abstract::Kind::kTensor: {
      out->set_type(AP::TENSORS);
      TP* t = out->add_tensors();
      t->set_data_type(dtype_code(a.dtype()));
      if (a.has_rank()) {
        for (std::int64_t d : a.shape()) t->add_dims(d);
      }
      return;
    }
    case Abstract::Kind::kScalar: {
      out->set_type(AP::SCALAR);
      TP* t = out->add_tensors();
      t->set_data_type(dtype_code(a.dtype()));
      t->add_dims(0);
      return;
    }
    case Abstract::Kind::kTuple:
      out->set_type(AP::TUPLE);
      for (const AbstractPtr& e : a.elements()) encode_abstract(*e, out->add_values());
      return;
    default:
      out->set_type(AP::NONE);
      return;
  }
}

std::vector<std::int64_t> four(const std::vector<std::int64_t>& hw) {
  if (hw.size() != 2) {
    throw ValueError("MindIR export: expected an (h, w) pair, got " + std::to_string(hw.size()) +
                     " values");
  }
  return {1, 1, hw[0], hw[1]};
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}
std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// An attribute value as MindSpore spells it (ops/op.h, MindIRAttrEncoding).
Value encode_attr(Encoding encoding, const Value& v) {
  switch (encoding) {
    case Encoding::kSpatialQuad:
      return Value::ints(four(v.as_ints()));
    case Encoding::kPadModeLower:
      return Value::string(lower(v.as_string()));
    case Encoding::kPadModeUpper:
      return Value::string(upper(v.as_string()));
    case Encoding::kAsIs:
    case Encoding::kSpatialPair:
    case Encoding::kPad4:
    case Encoding::kFormat:
    case Encoding::kAxisList:
    case Encoding::kIntsFromTensor:
      return v;
  }
  return v;
}

// The abstracts of a node's inputs (nullptr where one has none).
std::vector<const Abstract*> input_abstracts(const ir::CNode& node) {
  std::vector<const Abstract*> r;
  for (std::size_t i = 0; i < node.num_args(); ++i) r.push_back(node.arg(i)->abstract().get());
  return r;
}

// The values of the op's derived attributes (Conv2D's pad_list) at this node.
std::vector<Value> derived_values(const ops::OpDef& def, const ir::Primitive& p,
                                  const ir::CNode& node) {
  std::vector<Value> r;
  if (def.mindir.derived.empty()) return r;
  const std::vector<const Abstract*> inputs = input_abstracts(node);
  for (const ops::MindIRDerivedAttr& d : def.mindir.derived) r.push_back(d.value(p, inputs));
  return r;
}

// The MindSpore primitive attributes of a loom primitive (attribute form): the attributes less
// the Constant-input ones, with their second names, in name order; the derived ones; then
// input_names / output_names.
void encode_primitive(const ops::OpDef& def, const ir::Primitive& p,
                      const std::vector<Value>& derived,
                      google::protobuf::RepeatedPtrField<AP>* attrs) {
  const ops::MindIRForm& form = def.mindir;
  std::map<std::string, Value> written;
  for (const auto& [name, value] : p.attrs()) {
    if (std::find(form.const_inputs.begin(), form.const_inputs.end(), name) !=
        form.const_inputs.end()) {
      continue;
    }
    // Pooling's explicit pad (PAD mode, refused by emit_cnode) is loom's; MindSpore's MaxPool and
    // AvgPool have no such attribute.
    if (name == "pad" && std::none_of(form.attrs.begin(), form.attrs.end(),
                                      [](const ops::MindIRAttr& a) { return a.name == "pad"; })) {
      continue;
    }
    const Value v = encode_attr(form.encoding(name), value);
    for (const ops::MindIRAttr& a : form.attrs) {
      if (a.name == name && !a.also_written_as.empty()) written[a.also_written_as] = v;
    }
    written[name] = v;
  }
  for (const auto& [name, value] : written) add_attr(attrs, name, value);
  for (std::size_t i = 0; i < derived.size(); ++i) {
    add_attr(attrs, form.derived[i].name, derived[i]);
  }
  if (!form.input_names.empty() || !form.output_names.empty()) {
    AP* in = attrs->Add();
    in->set_name("input_names");
    encode_value(string_list(form.input_names), in, false);
    in->set_type(AP::LIST);
    AP* out = attrs->Add();
    out->set_name("output_names");
    encode_value(string_list(form.output_names), out, false);
    out->set_type(AP::LIST);
  }
}

class Writer {
 public:
  Writer(const ir::FuncGraph& g, std::size_t num_inputs, const ExportOptions& o)
      : g_(g), num_inputs_(num_inputs), opt_(o) {}

  mind_ir::ModelProto run() {
    mind_ir::ModelProto m;
    m.set_ir_version("0.1.1");
    m.set_producer_name("loom");
    m.set_model_version(LOOM_MINDIR_VERSION);
    gp_ = m.mutable_graph();
    model_ = &m;
    name_ = opt_.graph_name.empty() ? g_.name() : opt_.graph_name;
    gp_->set_name(name_);
    const auto& params = g_.parameters();
    if (num_inputs_ > params.size()) {
      throw InternalError("MindIR export: more inputs than graph parameters");
    }
    for (std::size_t i = 0; i < params.size(); ++i) {
      const ir::Parameter* p = params[i];
      const std::string full = name_ + ":" + p->name();
      names_[p] = full;
      if (i < num_inputs_) {
        if (!p->abstract() || !p->abstract()->is_tensor() || !p->abstract()->has_rank()) {
          throw ValueError("MindIR export: expected tensor inputs of known rank, got input '" +
                           p->name() + "'");
        }
        auto* in = gp_->add_input();
        in->set_name(full);
        set_tensor_meta(in->add_tensor(), p->abstract()->dtype(), p->abstract()->shape());
      } else {
        if (!p->has_default()) {
          throw ValueError("MindIR export: expected weight '" + p->name() + "' to have a value");
        }
        const Tensor& t = *p->default_value();
        TP* tp = gp_->add_parameter();
        set_tensor_meta(tp, t.dtype(), t.shape());
        tp->set_name(full);
        set_raw(tp, t);
        tp->set_ref_key(p->name());
        tp->set_compression_type(TP::NO_COMPRESSION);
        bytes_ += t.nbytes();
        check_size();
      }
    }
    if (opt_.monads && params.size() > num_inputs_) {
      umonad_ = "ValueNode_umonad";
      auto* n = gp_->add_node();
      n->set_op_type("Constant");
      n->add_output(umonad_);
      n->set_name(umonad_);
      AP* a = n->add_attribute();
      a->set_name("value");
      a->set_type(AP::UMONAD);
    }
    for (const ir::CNode* c : g_.topo_order()) emit_cnode(*c);
    const ir::Node* out = g_.output();
    if (!out) throw ValueError("MindIR export: expected a graph with an output");
    std::string out_name = ref(out);
    if (!loads_order_.empty()) {
      // MakeTuple(loads...), UpdateState(U, tuple), Depend(output, state): MindSpore's pattern.
      std::vector<AbstractPtr> elems;
      for (const auto& [param, load] : loads_order_) elems.push_back(param->abstract());
      const std::string tup = add_node(*ir::make_primitive("MakeTuple"), nullptr, nullptr,
                                       loads_names(), Abstract::tuple(elems).get(), "MakeTuple");
      const std::string us = add_node(*ir::make_primitive("UpdateState"), nullptr, nullptr,
                                      {umonad_, tup}, nullptr, "UpdateState", true);
      Value one = Value::i64(1);
      const std::string dep =
          add_node(*ir::make_primitive("Depend", {{"side_effect_propagate", one}}), nullptr,
                   nullptr, {out_name, us}, out->abstract().get(), "Depend");
      out_name = dep;
    }
    auto* o = gp_->add_output();
    o->set_name(out_name);
    if (out->abstract() && out->abstract()->is_tensor() && out->abstract()->has_rank()) {
      set_tensor_meta(o->add_tensor(), out->abstract()->dtype(), out->abstract()->shape());
    }
    m.set_little_endian(true);
    m.set_mind_ir_version(mind_ir::IR_VERSION);
    return m;
  }

 private:
  void check_size() const {
    if (bytes_ > opt_.max_bytes) {
      throw ValueError("MindIR export: expected a model under " + std::to_string(opt_.max_bytes) +
                       " bytes, got at least " + std::to_string(bytes_) +
                       " bytes of weights, over protobuf's 2 GB message limit (MindSpore's "
                       "split weights layout is not written by loom)");
    }
  }

  std::vector<std::string> loads_names() const {
    std::vector<std::string> r;
    for (const auto& [param, load] : loads_order_) r.push_back(load);
    return r;
  }

  // The name standing for node n as an input (emits Constants and Loads on first use).
  std::string ref(const ir::Node* n) {
    if (n->is_value()) {
      const Value& v = static_cast<const ir::ValueNode*>(n)->value();
      return constant(v);
    }
    auto it = names_.find(n);
    if (it == names_.end()) throw InternalError("MindIR export: node used before definition");
    if (n->is_parameter() && static_cast<const ir::Parameter*>(n)->has_default() && opt_.monads) {
      auto l = load_of_.find(n);
      if (l != load_of_.end()) return l->second;
      const std::string load = add_node(*ir::make_primitive("Load"), nullptr, nullptr,
                                        {it->second, umonad_}, n->abstract().get(), "Load");
      load_of_[n] = load;
      loads_order_.emplace_back(static_cast<const ir::Parameter*>(n), load);
      return load;
    }
    return it->second;
  }

  std::string constant(const Value& v) {
    auto n = gp_->add_node();
    const std::string name = "ValueNode_" + std::to_string(counter_++);
    n->set_op_type("Constant");
    n->add_output(name);
    n->set_name(name);
    AP* a = n->add_attribute();
    a->set_name("value");
    encode_value(v, a, false);
    if (v.is_tensor()) bytes_ += v.as_tensor().nbytes(), check_size();
    return name;
  }

  // One PrimitiveProto per distinct primitive (and values of its derived attributes). `def` is
  // the op of a graph node; nullptr for the monad bookkeeping the writer adds, whose attributes
  // are written as they are.
  std::string primitive(const ir::Primitive& p, const ops::OpDef* def, const ir::CNode* node) {
    const std::vector<Value> derived =
        def && node ? derived_values(*def, p, *node) : std::vector<Value>{};
    for (const auto& e : prims_) {
      if (e.derived == derived && e.prim == p) return e.name;
    }
    const std::string name = p.name() + ":" + std::to_string(counter_++);
    auto* pp = model_->add_primitives();
    pp->set_name(name);
    pp->set_op_type(p.name());
    pp->set_prim_type(mind_ir::PrimitiveProto::PRIMITIVE);
    if (def) {
      encode_primitive(*def, p, derived, pp->mutable_attribute());
    } else {
      for (const auto& [k, v] : p.attrs()) add_attr(pp->mutable_attribute(), k, v);
    }
    prims_.push_back({p, derived, name});
    return name;
  }

  std::string add_node(const ir::Primitive& p, const ops::OpDef* def, const ir::CNode* node,
                       const std::vector<std::string>& inputs, const Abstract* abs,
                       const std::string& debug, bool umonad_out = false) {
    const std::string prim = primitive(p, def, node);
    auto* n = gp_->add_node();
    const std::string name = name_ + ":" + debug + ":" + std::to_string(counter_++);
    n->set_op_type("REF::" + prim);
    for (const auto& i : inputs) n->add_input(i);
    n->add_output(name);
    n->set_name(name);
    AP* shape = n->add_attribute();
    shape->set_name("shape");
    if (umonad_out) {
      shape->set_type(AP::UMONAD);
    } else if (abs) {
      encode_abstract(*abs, shape);
    } else {
      shape->set_type(AP::NONE);
    }
    if (node && !node->debug().scope.empty()) n->set_domain(node->debug().scope);
    return name;
  }

  void emit_cnode(const ir::CNode& c) {
    const ir::Primitive* p = c.primitive();
    if (!p) {
      throw ValueError(
          "MindIR export: expected a first-order graph of primitive calls, got a "
          "call of a graph (inline it first)");
    }
    const std::string& op = p->name();
    const ops::OpDef* def = mindir_op(op);
    if (!def) {
      throw ValueError("MindIR export: no MindIR encoding for op '" + op + "' (node " +
                       (c.name().empty() ? std::to_string(c.id()) : c.name()) + ")");
    }
    if (op.find("Pool") != std::string::npos && p->has_attr("pad_mode") &&
        ops::pad_mode_of(*p) == ops::PadMode::kPad) {
      throw ValueError("MindIR export: " + op + " with pad_mode PAD (explicit padding, node " +
                       (c.name().empty() ? std::to_string(c.id()) : c.name()) +
                       ") has no MindIR form: MindSpore's pooling takes VALID or SAME");
    }
    std::vector<std::string> inputs;
    for (std::size_t i = 0; i < c.num_args(); ++i) inputs.push_back(ref(c.arg(i)));
    for (const auto& a : def->mindir.const_inputs) {
      if (p->has_attr(a)) inputs.push_back(constant(p->attr(a)));
    }
    std::string debug = c.name().empty() ? op : c.name();
    names_[&c] = add_node(*p, def, &c, inputs, c.abstract().get(), debug);
  }

  const ir::FuncGraph& g_;
  std::size_t num_inputs_;
  ExportOptions opt_;
  mind_ir::ModelProto* model_ = nullptr;
  mind_ir::GraphProto* gp_ = nullptr;
  std::string name_, umonad_;
  std::unordered_map<const ir::Node*, std::string> names_;
  std::unordered_map<const ir::Node*, std::string> load_of_;
  std::vector<std::pair<const ir::Parameter*, std::string>> loads_order_;
  struct PrimEntry {
    ir::Primitive prim;
    std::vector<Value> derived;
    std::string name;
  };
  std::vector<PrimEntry> prims_;
  std::uint64_t bytes_ = 0;
  std::uint64_t counter_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Reading

[[noreturn]] void fail(const std::string& what, const std::string& msg) {
  throw FormatError("MindIR " + what + ": " + msg);
}

Tensor read_tensor(const TP& t, const std::string& what, const std::string& who, bool need_data) {
  auto dt = dtype_of_code(t.data_type());
  if (!dt) {
    fail(what,
         "expected a supported data_type for '" + who + "', got " + std::to_string(t.data_type()));
  }
  Shape shape(t.dims().begin(), t.dims().end());
  std::int64_t numel = 1;
  for (std::int64_t d : shape) {
    if (d < 0)
      fail(what, "expected non-negative dims for '" + who + "', got " + shape_to_string(shape));
    if (d != 0 && numel > std::numeric_limits<std::int64_t>::max() / 8 / d) {
      fail(what,
           "expected dims of a reasonable size for '" + who + "', got " + shape_to_string(shape));
    }
    numel *= d;
  }
  const std::uint64_t want = static_cast<std::uint64_t>(numel) * dtype_size(*dt);
  if (t.has_external_data()) {
    fail(what, "'" + who + "' keeps its data in an external file (" + t.external_data().location() +
                   "); split MindIR models are not supported");
  }
  if (!need_data && !t.has_raw_data()) return Tensor();
  if (t.raw_data().size() != want) {
    fail(what, "expected raw_data of " + std::to_string(want) + " bytes for '" + who + "' (" +
                   std::string(dtype_name(*dt)) + " " + shape_to_string(shape) + "), got " +
                   std::to_string(t.raw_data().size()));
  }
  Tensor out(*dt, shape);
  if (want) std::memcpy(out.raw_data(), t.raw_data().data(), want);
  return out;
}

// A decoded attribute or Constant: a value, or a monad.
struct Decoded {
  Value value;
  bool monad = false;
};

Decoded decode(const AP& a, const std::string& what, const std::string& who, int depth = 0) {
  if (depth > 64) fail(what, "expected attribute '" + who + "' nested at most 64 deep");
  auto int_value = [&]() -> std::int64_t { return a.ints_size() ? a.ints(0) : a.i(); };
  switch (a.type()) {
    case AP::BOOL:
      return {Value::boolean(int_value() != 0)};
    case AP::INT8:
    case AP::INT16:
    case AP::INT32:
    case AP::INT64:
    case AP::UINT8:
    case AP::UINT16:
    case AP::UINT32:
    case AP::UINT64:
      return {Value::i64(int_value())};
    case AP::FLOAT:
      return {Value::f32(a.floats_size() ? a.floats(0) : a.f())};
    case AP::DOUBLE:
      return {Value::f64(a.doubles_size() ? a.doubles(0) : a.d())};
    case AP::STRING:
      return {Value::string(a.strings_size() ? a.strings(0) : a.s())};
    case AP::TUPLE:
    case AP::LIST: {
      std::vector<Value> e;
      for (const AP& v : a.values()) {
        Decoded d = decode(v, what, who, depth + 1);
        if (d.monad) fail(what, "expected data in tuple '" + who + "', got a monad");
        e.push_back(std::move(d.value));
      }
      return {Value::tuple(std::move(e))};
    }
    case AP::TENSORS:
    case AP::TENSOR: {
      const TP* t = a.tensors_size() ? &a.tensors(0) : (a.has_t() ? &a.t() : nullptr);
      if (!t) fail(what, "expected a tensor in attribute '" + who + "', got none");
      if (!t->has_raw_data()) {
        auto dt = dtype_of_code(t->data_type());
        if (!dt)
          fail(what, "expected a supported data_type for '" + who + "', got " +
                         std::to_string(t->data_type()));
        return {Value::dtype(*dt)};
      }
      return {Value::tensor(read_tensor(*t, what, who, true))};
    }
    case AP::NONE:
      return {Value::none()};
    case AP::UMONAD:
    case AP::IOMONAD:
      return {Value::none(), true};
    default:
      fail(what, "expected a supported attribute type for '" + who + "', got " +
                     AP::AttributeType_Name(a.type()) + " (" + std::to_string(a.type()) + ")");
  }
}

// The integers of an integer tensor (a Constant input of the primitive-function form).
Value ints_of_tensor(const Tensor& t) {
  std::vector<std::int64_t> r;
  for (double d : t.to_doubles()) r.push_back(static_cast<std::int64_t>(d));
  return Value::ints(r);
}

// MindSpore's spelling of an attribute turned into loom's (ops/op.h, MindIRAttrEncoding):
// (1, 1, h, w) -> (h, w), enum ints of pad_mode / format -> strings, scalars and tensors ->
// tuples where loom wants a tuple.
Value convert_attr(Encoding encoding, const Value& v) {
  switch (encoding) {
    case Encoding::kAsIs:
      return v;
    case Encoding::kFormat:
      if (v.is_scalar()) return Value::string(v.as_int() == 1 ? "NHWC" : "NCHW");
      return v;
    case Encoding::kPadModeLower:
    case Encoding::kPadModeUpper: {
      std::string s;
      if (v.is_scalar()) {
        const std::int64_t m = v.as_int();
        s = m == 0 ? "pad" : m == 1 ? "same" : "valid";
      } else {
        s = v.as_string();
      }
      return Value::string(encoding == Encoding::kPadModeLower ? lower(s) : upper(s));
    }
    case Encoding::kSpatialPair:
    case Encoding::kSpatialQuad: {
      if (v.is_scalar()) return Value::ints({v.as_int(), v.as_int()});
      const auto ints = v.as_ints();
      if (ints.size() == 4) return Value::ints({ints[2], ints[3]});
      if (ints.size() == 1) return Value::ints({ints[0], ints[0]});
      return Value::ints(ints);
    }
    case Encoding::kPad4:
      if (v.is_scalar()) return Value::ints({v.as_int(), v.as_int(), v.as_int(), v.as_int()});
      return v;
    case Encoding::kAxisList:
      if (v.is_scalar()) return Value::ints({v.as_int()});
      if (v.is_tensor()) return ints_of_tensor(v.as_tensor());
      return v;
    case Encoding::kIntsFromTensor:
      if (v.is_tensor()) return ints_of_tensor(v.as_tensor());
      return v;
  }
  return v;
}

class Reader {
 public:
  Reader(const mind_ir::ModelProto& m, std::string what) : m_(m), what_(std::move(what)) {}

  void build(ir::Module& module, ir::FuncGraph*& graph, std::vector<TensorInfo>& inputs,
             std::vector<TensorInfo>& outputs, std::vector<std::pair<std::string, Tensor>>& params,
             std::map<std::string, std::size_t>& op_counts) {
    if (!m_.has_graph()) fail(what_, "expected a graph (ModelProto field 7), got none");
    if (m_.has_little_endian() && !m_.little_endian()) {
      fail(what_, "expected little-endian data (little_endian true), got big-endian");
    }
    // Every 2.x exporter (and loom) writes mind_ir_version last; 1.x files (ir_version 0.1.0)
    // have none. Its absence in a newer file means the file was cut.
    if (!m_.has_mind_ir_version() && m_.ir_version() != "0.1.0") {
      fail(what_, "expected mind_ir_version (ModelProto field 13), got none (truncated file?)");
    }
    if (m_.mind_ir_version() < 0 || m_.mind_ir_version() > 3) {
      fail(what_, "expected mind_ir_version 0 to 3, got " + std::to_string(m_.mind_ir_version()));
    }
    if (m_.functions_size() > 0) {
      fail(what_, "expected a single graph, got " + std::to_string(m_.functions_size()) +
                      " function graphs (control flow and sub-graphs are not supported)");
    }
    for (const auto& p : m_.primitives()) {
      if (!prims_.emplace(p.name(), &p).second) {
        fail(what_, "expected unique primitive names, got '" + p.name() + "' twice");
      }
    }
    const mind_ir::GraphProto& g = m_.graph();
    graph = module.add_graph(g.name().empty() ? "mindir" : g.name());
    module.set_entry(graph);
    g_ = graph;
    for (const auto& in : g.input()) {
      if (in.tensor_size() != 1) {
        fail(what_, "expected input '" + in.name() + "' to be one tensor, got " +
                        std::to_string(in.tensor_size()) + " tensor entries");
      }
      const TP& t = in.tensor(0);
      auto dt = dtype_of_code(t.data_type());
      if (!dt)
        fail(what_, "expected a supported data_type for input '" + in.name() + "', got " +
                        std::to_string(t.data_type()));
      Shape shape(t.dims().begin(), t.dims().end());
      for (auto d : shape) {
        if (d < -1) fail(what_, "expected dims >= -1 for input '" + in.name() + "'");
      }
      const std::string user = user_name(in.name());
      ir::Parameter* p =
          graph->add_parameter(unique_param_name(user), Abstract::tensor(*dt, shape));
      define(in.name(), p);
      inputs.push_back({user, *dt, shape});
    }
    for (const TP& t : g.parameter()) {
      if (t.name().empty()) fail(what_, "expected every weight to have a name, got an empty one");
      const std::string user = t.ref_key().empty() ? user_name(t.name()) : t.ref_key();
      Tensor value = read_tensor(t, what_, t.name(), true);
      ir::Parameter* p = graph->add_parameter(unique_param_name(user),
                                              Abstract::tensor(value.dtype(), value.shape()));
      p->set_default(value);
      define(t.name(), p);
      params.emplace_back(user, value);
    }
    for (const auto& n : g.node()) node(n, op_counts);
    if (g.output_size() == 0) fail(what_, "expected at least one graph output, got none");
    std::vector<ir::Node*> outs;
    for (const auto& o : g.output()) {
      outs.push_back(lookup(o.name(), "the graph output"));
      TensorInfo info{o.name(), DType::kFloat32, {}};
      if (o.tensor_size() > 0) {
        if (auto dt = dtype_of_code(o.tensor(0).data_type())) info.dtype = *dt;
        info.shape.assign(o.tensor(0).dims().begin(), o.tensor(0).dims().end());
      }
      outputs.push_back(info);
    }
    for (ir::Node* o : outs) {
      if (o == nullptr) fail(what_, "expected the graph output to be a value, got a monad");
    }
    ir::Node* out = outs.size() == 1 ? outs[0] : graph->add_call(ops::make_op("MakeTuple"), outs);
    graph->set_output(out);
  }

 private:
  std::string user_name(const std::string& full) const {
    auto pos = full.find(':');
    return pos == std::string::npos ? full : full.substr(pos + 1);
  }

  std::string unique_param_name(std::string n) {
    if (n.empty()) n = "p";
    std::string base = n;
    for (int i = 1; !used_params_.insert(n).second; ++i) n = base + "_" + std::to_string(i);
    return n;
  }

  void define(const std::string& name, ir::Node* node, bool monad = false) {
    if (name.empty()) fail(what_, "expected every node to have a name, got an empty one");
    if (!defs_.emplace(name, Def{node, monad}).second) {
      fail(what_, "expected unique node names, got '" + name + "' twice");
    }
  }

  struct Def {
    ir::Node* node;
    bool monad;
  };

  // nullptr for a monad.
  ir::Node* lookup(const std::string& name, const std::string& user) {
    auto it = defs_.find(name);
    if (it == defs_.end()) {
      fail(what_, "input '" + name + "' of " + user +
                      " is not defined before it (nodes must be "
                      "in topological order)");
    }
    return it->second.monad ? nullptr : it->second.node;
  }
  bool is_monad(const std::string& name) {
    auto it = defs_.find(name);
    return it != defs_.end() && it->second.monad;
  }

  void node(const mind_ir::NodeProto& n, std::map<std::string, std::size_t>& op_counts) {
    const std::string name = n.output_size() > 0 ? n.output(0) : n.name();
    const std::string where = "node '" + name + "'";
    if (n.op_type() == "Constant") {
      const AP* value = nullptr;
      for (const AP& a : n.attribute()) {
        if (a.name() == "value") value = &a;
      }
      if (!value && n.attribute_size() > 0) value = &n.attribute(0);
      if (!value) fail(what_, "expected a 'value' attribute on Constant " + where);
      Decoded d = decode(*value, what_, name);
      if (d.monad) {
        define(name, nullptr, true);
      } else {
        define(name, g_->add_value(d.value));
      }
      return;
    }
    // Resolve the primitive: "REF::<primitive>" (2.x) or a bare op name with the attributes on
    // the node (1.x).
    std::string op;
    std::vector<const AP*> attrs;
    bool prim_function = false;
    const std::string& t = n.op_type();
    if (t.rfind("REF::", 0) == 0) {
      const std::string key = t.substr(5);
      auto it = prims_.find(key);
      if (it == prims_.end()) {
        if (defs_.count(key)) {
          fail(what_, "calls of graphs or nodes (" + t + ") are not supported, at " + where);
        }
        fail(what_, "expected primitive '" + key + "' of " + where +
                        " in ModelProto.primitives, "
                        "got none");
      }
      op = it->second->op_type();
      prim_function = it->second->prim_type() == mind_ir::PrimitiveProto::PRIMITIVE_FUNCTION;
      for (const AP& a : it->second->attribute()) attrs.push_back(&a);
    } else {
      op = t;
      for (const AP& a : n.attribute()) {
        if (a.name() != "shape") attrs.push_back(&a);
      }
    }
    if (op.empty()) fail(what_, "expected an op_type on " + where + ", got none");
    ++op_counts[op];
    std::vector<std::string> in_names(n.input().begin(), n.input().end());
    // Side-effect bookkeeping: loom's IR is pure.
    if (op == "Load") {
      if (in_names.empty()) fail(what_, "expected Load " + where + " to have an input");
      define(name, lookup(in_names[0], where), is_monad(in_names[0]));
      return;
    }
    if (op == "UpdateState") {
      for (const auto& i : in_names) lookup(i, where);
      define(name, nullptr, true);
      return;
    }
    if (op == "Depend") {
      if (in_names.empty()) fail(what_, "expected Depend " + where + " to have inputs");
      for (const auto& i : in_names) lookup(i, where);
      define(name, lookup(in_names[0], where), is_monad(in_names[0]));
      return;
    }
    std::vector<ir::Node*> args;
    for (const auto& i : in_names) {
      ir::Node* a = lookup(i, where);
      if (!a) {
        continue;  // a monad input (side-effect ordering) carries no data
      }
      args.push_back(a);
    }
    if (op == "MakeTuple") {
      define(name, g_->add_call(ops::make_op("MakeTuple"), args));
      return;
    }
    if (op == "TupleGetItem") {
      if (args.size() != 2 || !args[1]->is_value()) {
        fail(what_, "expected TupleGetItem " + where + " to take a tuple and a constant index");
      }
      const Value& idx = static_cast<ir::ValueNode*>(args[1])->value();
      if (!idx.is_scalar()) fail(what_, "expected an integer index for TupleGetItem " + where);
      ir::Node* index = g_->add_value(Value::i64(idx.as_int()));
      define(name, g_->add_call(ops::make_op("TupleGetItem"), {args[0], index}));
      return;
    }
    if (lower_composite(op, attrs, args, name, where)) return;
    const ops::OpDef* def = mindir_op(op);
    if (!def) {
      fail(what_, "unknown op '" + op + "' at " + where + " with inputs " + input_types(args) +
                      " (loom has no op of that name; docs/ops.md lists the ops loom reads, and "
                      "docs/formats.md the MindSpore 2.x forms it maps to them)");
    }
    // Attributes: the ones loom's schema knows; the rest (input_names, pad_list, groups...) are
    // MindSpore's bookkeeping.
    std::set<std::string> known;
    for (const auto& s : def->attrs) known.insert(s.name);
    ir::Primitive::Attrs pattrs;
    auto put = [&](std::string attr, const Value& v) {
      if (attr == kMindSporeDataFormat) attr = "format";
      if (!known.count(attr)) return;
      pattrs[attr] = convert_attr(def->mindir.encoding(attr), v);
    };
    for (const AP* a : attrs) {
      if (!known.count(a->name()) && a->name() != kMindSporeDataFormat) continue;
      Decoded d = decode(*a, what_, op + "." + a->name());
      if (d.monad) continue;
      put(a->name(), d.value);
    }
    // Trailing inputs beyond the op's tensor inputs are constants: attribute-form operands
    // (Reshape's shape...) then primitive-function init arguments.
    if (def->num_inputs >= 0 && static_cast<int>(args.size()) > def->num_inputs) {
      std::vector<std::string> extra;
      const auto& ci = def->mindir.const_inputs;
      const auto& pf = def->mindir.function_args;
      if (prim_function || m_.mind_ir_version() >= 2) {
        extra = pf;
      } else {
        extra = ci;
        if (extra.empty()) extra = pf;
      }
      const std::size_t n_extra = args.size() - def->num_inputs;
      if (n_extra > extra.size()) {
        fail(what_, "expected at most " + std::to_string(def->num_inputs + extra.size()) +
                        " inputs for " + op + " at " + where + ", got " +
                        std::to_string(args.size()));
      }
      for (std::size_t k = 0; k < n_extra; ++k) {
        ir::Node* a = args[def->num_inputs + k];
        if (!a->is_value()) {
          fail(what_, "expected input " + std::to_string(def->num_inputs + k) + " (" + extra[k] +
                          ") of " + op + " at " + where + " to be a Constant");
        }
        const Value& v = static_cast<ir::ValueNode*>(a)->value();
        if (v.is_none()) continue;  // None: the default
        put(extra[k], v);
      }
      args.resize(def->num_inputs);
    }
    ir::PrimitivePtr prim;
    try {
      prim = ops::make_op(op, std::move(pattrs));
    } catch (const Error& e) {
      fail(what_, std::string(e.what()) + " (at " + where + ")");
    }
    ir::CNode* c = g_->add_call(prim, args);
    c->set_name(node_name(name));
    if (!n.domain().empty()) c->set_debug({n.domain(), "", 0});
    define(name, c);
  }

  // ---- MindSpore 2.x ops that loom reads as a composition of its own ops ----------------------

  // The node's abstract, inferred on the spot (null when unknown: the graph's inference reports
  // it).
  static ir::AbstractPtr abstract_of(ir::Node* n) { return passes::infer_node(n); }

  // "(Float32 (2, 8), Float32 (8, 4))": the inputs' types where known, for messages.
  std::string input_types(const std::vector<ir::Node*>& args) {
    std::string s = "(";
    for (std::size_t i = 0; i < args.size(); ++i) {
      if (i) s += ", ";
      ir::AbstractPtr a = abstract_of(args[i]);
      s += a ? a->to_string() : "unknown";
    }
    return s + ")";
  }

  // A known rank-r tensor shape of `n` (dims may be -1), or null.
  const Shape* shape_of(ir::Node* n) {
    ir::AbstractPtr a = abstract_of(n);
    return a && a->is_tensor() && a->shape_known() ? &a->shape() : nullptr;
  }

  [[noreturn]] void unsupported(const std::string& op, const std::string& where,
                                const std::vector<ir::Node*>& args, const std::string& why) {
    fail(what_, "unsupported form of " + op + " at " + where + " with inputs " +
                    input_types(args) + ": " + why);
  }

  ir::CNode* emit(const std::string& op, ir::Primitive::Attrs attrs,
                  const std::vector<ir::Node*>& args, const std::string& where) {
    ir::PrimitivePtr prim;
    try {
      prim = ops::make_op(op, std::move(attrs));
    } catch (const Error& e) {
      fail(what_, std::string(e.what()) + " (at " + where + ")");
    }
    ir::CNode* c = g_->add_call(prim, args);
    abstract_of(c);
    return c;
  }

  // An attribute (1.x form) or a trailing Constant input (2.x primitive-function form).
  std::optional<Value> operand(const std::vector<const AP*>& attrs,
                               const std::vector<ir::Node*>& args, const std::string& key,
                               std::size_t input, const std::string& op) {
    if (input < args.size() && args[input]->is_value()) {
      const Value& v = static_cast<ir::ValueNode*>(args[input])->value();
      if (!v.is_none()) return v;
    }
    for (const AP* a : attrs) {
      if (a->name() != key) continue;
      Decoded d = decode(*a, what_, op + "." + key);
      if (!d.monad && !d.value.is_none()) return d.value;
    }
    return std::nullopt;
  }

  static std::int64_t scalar_int(const Value& v) {
    return v.is_tensor() ? static_cast<std::int64_t>(v.as_tensor().get(0)) : v.as_int();
  }
  static double scalar_double(const Value& v) {
    return v.is_tensor() ? v.as_tensor().get(0) : v.as_double();
  }

  // MindSpore 2.x ops with no loom op of their own, read as loom ops (docs/formats.md):
  //   Muls(x, s)                   Mul(x, s as a rank-0 tensor of x's dtype)   (tensor * 2.0)
  //   Div(a, b)                    RealDiv (floating a and b)
  //   MatMulExt(a, b)              MatMul (both rank 2) or BatchMatMul (a rank >= 3)  (ops.matmul)
  //   AdaptiveAvgPool2D{size}      ReduceMean over H, W (size 1x1) or AvgPool (H, W multiples)
  //   Pad{paddings}                StridedSliceGrad: x written into zeros of the padded shape
  //   LayerNorm(x, gamma, beta, begin_norm_axis, begin_params_axis, epsilon)
  //                                (y, mean, rstd) from ReduceMean, Sub, Mul, Add, Rsqrt
  // True when `op` was one of them (its result defined as `name`).
  bool lower_composite(const std::string& op, const std::vector<const AP*>& attrs,
                       const std::vector<ir::Node*>& args, const std::string& name,
                       const std::string& where) {
    if (op == "Muls") {
      if (args.size() != 2) unsupported(op, where, args, "expected 2 inputs (x, scalar)");
      ir::AbstractPtr x = abstract_of(args[0]);
      ir::Node* s = args[1];
      if (s->is_value() && x && x->is_tensor()) {
        const Value& v = static_cast<ir::ValueNode*>(s)->value();
        if (v.is_scalar()) s = g_->add_value(Value::tensor(Tensor::scalar(x->dtype(), v.as_double())));
      }
      define(name, emit("Mul", {}, {args[0], s}, where));
      return true;
    }
    if (op == "Div") {
      ir::AbstractPtr a = args.size() == 2 ? abstract_of(args[0]) : nullptr;
      ir::AbstractPtr b = args.size() == 2 ? abstract_of(args[1]) : nullptr;
      if (!a || !b || !a->is_tensor() || !b->is_tensor() || !is_floating(a->dtype()) ||
          !is_floating(b->dtype())) {
        unsupported(op, where, args, "loom reads Div of floating tensors (as RealDiv)");
      }
      define(name, emit("RealDiv", {}, args, where));
      return true;
    }
    if (op == "MatMulExt") {
      if (args.size() != 2) unsupported(op, where, args, "expected 2 inputs");
      const Shape* a = shape_of(args[0]);
      const Shape* b = shape_of(args[1]);
      if (!a || !b) unsupported(op, where, args, "expected inputs of known rank");
      if (a->size() == 2 && b->size() == 2) {
        define(name, emit("MatMul", {}, args, where));
      } else if (a->size() >= 3 && b->size() >= 2) {
        define(name, emit("BatchMatMul", {}, args, where));
      } else {
        unsupported(op, where, args,
                    "loom reads ops.matmul of two matrices or of a batch (rank >= 3) and a "
                    "matrix or batch; rank-1 operands and a matrix times a batch are not "
                    "supported");
      }
      return true;
    }
    if (op == "AdaptiveAvgPool2D") {
      const Shape* x = args.size() == 1 ? shape_of(args[0]) : nullptr;
      std::optional<Value> size = operand(attrs, args, "output_size", 1, op);
      if (!x || x->size() != 4 || !size) {
        unsupported(op, where, args, "expected an input of rank 4 (N, C, H, W) and output_size");
      }
      std::vector<std::int64_t> out;
      if (size->is_tuple()) {
        for (const Value& e : size->elements()) out.push_back(e.is_none() ? -1 : e.as_int());
      } else {
        out = {scalar_int(*size), scalar_int(*size)};
      }
      if (out.size() != 2) unsupported(op, where, args, "expected output_size of 2 values");
      const std::int64_t h = (*x)[2], w = (*x)[3];
      const std::int64_t oh = out[0] < 0 ? h : out[0], ow = out[1] < 0 ? w : out[1];
      if (oh == 1 && ow == 1) {
        define(name, emit("ReduceMean",
                          {{"axis", Value::ints({2, 3})}, {"keep_dims", Value::boolean(true)}},
                          {args[0]}, where));
        return true;
      }
      if (h <= 0 || w <= 0 || oh <= 0 || ow <= 0 || h % oh != 0 || w % ow != 0) {
        unsupported(op, where, args,
                    "loom reads an output_size of (1, 1) or one that divides the input's H and "
                    "W, got (" + std::to_string(oh) + ", " + std::to_string(ow) + ")");
      }
      define(name, emit("AvgPool",
                        {{"kernel_size", Value::ints({h / oh, w / ow})},
                         {"strides", Value::ints({h / oh, w / ow})},
                         {"pad_mode", Value::string("VALID")}},
                        {args[0]}, where));
      return true;
    }
    if (op == "Pad") {
      const Shape* x = args.size() == 1 ? shape_of(args[0]) : nullptr;
      std::optional<Value> paddings = operand(attrs, args, "paddings", 1, op);
      if (!x || !paddings || !paddings->is_tuple() || paddings->elements().size() != x->size()) {
        unsupported(op, where, args, "expected an input of known rank and one (before, after) "
                                     "pair of paddings per axis");
      }
      std::vector<std::int64_t> begin, end, strides, padded;
      bool any = false;
      for (std::size_t d = 0; d < x->size(); ++d) {
        const Value& pair = paddings->elements()[d];
        if (!pair.is_tuple() || pair.elements().size() != 2) {
          unsupported(op, where, args, "expected a (before, after) pair for axis " +
                                           std::to_string(d));
        }
        const std::int64_t lo = pair.elements()[0].as_int(), hi = pair.elements()[1].as_int();
        if (lo < 0 || hi < 0) unsupported(op, where, args, "negative paddings are not supported");
        if ((*x)[d] < 0) {
          unsupported(op, where, args, "expected a fully known input shape (export with a "
                                       "fixed batch size)");
        }
        any = any || lo > 0 || hi > 0;
        begin.push_back(lo);
        end.push_back(lo + (*x)[d]);
        strides.push_back(1);
        padded.push_back(lo + (*x)[d] + hi);
      }
      if (!any) {
        define(name, args[0]);
        return true;
      }
      define(name, emit("StridedSliceGrad",
                        {{"begin", Value::ints(begin)}, {"end", Value::ints(end)},
                         {"strides", Value::ints(strides)}, {"shapex", Value::ints(padded)}},
                        {args[0]}, where));
      return true;
    }
    if (op == "LayerNorm") {
      if (args.size() < 3) unsupported(op, where, args, "expected inputs (x, gamma, beta)");
      const Shape* x = shape_of(args[0]);
      ir::AbstractPtr xa = abstract_of(args[0]);
      if (!x || !xa) unsupported(op, where, args, "expected an input of known rank");
      const auto rank = static_cast<std::int64_t>(x->size());
      std::int64_t axis = scalar_int(operand(attrs, args, "begin_norm_axis", 3, op)
                                         .value_or(Value::i64(-1)));
      std::int64_t params_axis = scalar_int(operand(attrs, args, "begin_params_axis", 4, op)
                                                .value_or(Value::i64(-1)));
      const double eps = scalar_double(operand(attrs, args, "epsilon", 5, op)
                                           .value_or(Value::f64(1e-7)));
      if (axis < 0) axis += rank;
      if (params_axis < 0) params_axis += rank;
      if (axis < 0 || axis >= rank || params_axis != axis) {
        unsupported(op, where, args, "loom reads begin_norm_axis == begin_params_axis (the "
                                     "gamma and beta of the normalized axes)");
      }
      std::vector<std::int64_t> axes;
      for (std::int64_t d = axis; d < rank; ++d) axes.push_back(d);
      const ir::Primitive::Attrs mean_attrs = {{"axis", Value::ints(axes)},
                                               {"keep_dims", Value::boolean(true)}};
      ir::Node* mean = emit("ReduceMean", mean_attrs, {args[0]}, where);
      ir::Node* d = emit("Sub", {}, {args[0], mean}, where);
      ir::Node* var = emit("ReduceMean", mean_attrs, {emit("Mul", {}, {d, d}, where)}, where);
      ir::Node* e = g_->add_value(Value::tensor(Tensor::scalar(xa->dtype(), eps)));
      ir::Node* rstd = emit("Rsqrt", {}, {emit("Add", {}, {var, e}, where)}, where);
      ir::Node* y = emit("Add", {},
                         {emit("Mul", {}, {emit("Mul", {}, {d, rstd}, where), args[1]}, where),
                          args[2]},
                         where);
      define(name, emit("MakeTuple", {}, {y, mean, rstd}, where));
      return true;
    }
    return false;
  }

  std::string node_name(const std::string& full) {
    // Readable, unique per graph: "<debug name>_<k>".
    std::string s = user_name(full);
    for (char& ch : s) {
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_' && ch != '.') ch = '_';
    }
    if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) s = "n" + s;
    std::string base = s;
    for (int i = 1; !used_params_.insert(s).second; ++i) s = base + "_" + std::to_string(i);
    return s;
  }

  const mind_ir::ModelProto& m_;
  std::string what_;
  ir::FuncGraph* g_ = nullptr;
  std::unordered_map<std::string, const mind_ir::PrimitiveProto*> prims_;
  std::unordered_map<std::string, Def> defs_;
  std::set<std::string> used_params_;
};

}  // namespace

// ---------------------------------------------------------------------------------------------

std::string serialize_graph(const ir::FuncGraph& graph, std::size_t num_inputs,
                            const ExportOptions& options) {
  Writer w(graph, num_inputs, options);
  mind_ir::ModelProto m = w.run();
  const std::size_t size = m.ByteSizeLong();
  if (size > options.max_bytes ||
      size > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    throw ValueError("MindIR export: expected a model under " + std::to_string(options.max_bytes) +
                     " bytes, got " + std::to_string(size) +
                     " bytes, over protobuf's 2 GB message limit (MindSpore's split weights "
                     "layout is not written by loom)");
  }
  std::string out;
  if (!m.SerializeToString(&out))
    throw InternalError("MindIR export: protobuf serialization failed");
  return out;
}

GraphCell::GraphCell() = default;
GraphCell::GraphCell(GraphCell&&) noexcept = default;
GraphCell& GraphCell::operator=(GraphCell&&) noexcept = default;
GraphCell::~GraphCell() = default;

GraphCell GraphCell::from_parts(Parts parts) {
  if (!parts.module || !parts.graph) {
    throw InternalError("GraphCell::from_parts: expected a module and its graph");
  }
  GraphCell cell;
  cell.module_ = std::move(parts.module);
  cell.graph_ = parts.graph;
  cell.inputs_ = std::move(parts.inputs);
  cell.outputs_ = std::move(parts.outputs);
  cell.params_ = std::move(parts.params);
  cell.op_counts_ = std::move(parts.op_counts);
  cell.producer_ = std::move(parts.producer);
  cell.model_version_ = std::move(parts.model_version);
  return cell;
}

ir::Value GraphCell::run_value(const std::vector<Tensor>& inputs) {
  if (inputs.size() != inputs_.size()) {
    throw ValueError("GraphCell: expected " + std::to_string(inputs_.size()) + " inputs, got " +
                     std::to_string(inputs.size()));
  }
  backend::Backend& b = device_backend();
  std::vector<Value> args;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || inputs[i].dtype() != inputs_[i].dtype) {
      throw ValueError("GraphCell: expected input " + std::to_string(i) + " ('" + inputs_[i].name +
                       "') of dtype " + std::string(dtype_name(inputs_[i].dtype)) + ", got " +
                       (inputs[i].defined() ? inputs[i].describe() : std::string("undefined")));
    }
    args.push_back(Value::tensor(backend::to_device(inputs[i], b)));
  }
  // On a device the weights are passed, copied there once (on the CPU they are the graph
  // parameters' defaults).
  for (const Tensor& w : device_weights_) args.push_back(Value::tensor(w));
  return compiled_function()(std::move(args));
}

backend::Backend& GraphCell::device_backend() const {
  return backend_ ? *backend_ : backend::cpu_backend();
}

void GraphCell::to_device(backend::Backend& b) {
  if (&b == &device_backend()) return;
  backend_ = &b;
  device_weights_.clear();
  if (b.device() != Device::kCPU) {
    const auto& params = graph_->parameters();
    for (std::size_t i = inputs_.size(); i < params.size(); ++i) {
      if (!params[i]->has_default()) break;  // trailing weights only
      device_weights_.push_back(backend::to_device(*params[i]->default_value(), b));
    }
  }
  if (fn_) {  // compiled for the old backend: a new function, with the observers
    std::unique_ptr<runtime::CompiledFunction> old = std::move(fn_);
    for (const auto& o : old->observers()) compiled_function().add_observer(o);
  }
}

runtime::CompiledFunction& GraphCell::compiled_function() {
  if (!fn_) {
    fn_ = runtime::CompiledFunction::of_graph(graph_, {.name = "graph_cell", .backend = backend_});
  }
  return *fn_;
}

Tensor GraphCell::run(const std::vector<Tensor>& inputs) {
  Value v = run_value(inputs);
  while (v.is_tuple()) {
    if (v.elements().empty()) throw ValueError("GraphCell: the model returned an empty tuple");
    v = v.elements()[0];
  }
  return v.as_tensor();
}

GraphCell parse_mindir(const void* data, std::size_t size, const std::string& what) {
  if (size > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    fail(what,
         "expected a file under 2 GB (protobuf's limit), got " + std::to_string(size) + " bytes");
  }
  mind_ir::ModelProto m;
  if (size == 0 || !m.ParseFromArray(data, static_cast<int>(size))) {
    fail(what, "expected a MindIR ModelProto, got " + std::to_string(size) +
                   " bytes protobuf cannot parse (truncated or not a MindIR file)");
  }
  GraphCell cell;
  cell.module_ = std::make_unique<ir::Module>();
  cell.producer_ = m.producer_name();
  cell.model_version_ = m.model_version();
  cell.mind_ir_version_ = m.mind_ir_version();
  Reader r(m, what);
  try {
    r.build(*cell.module_, cell.graph_, cell.inputs_, cell.outputs_, cell.params_, cell.op_counts_);
    passes::infer_graph(cell.graph_, {});
  } catch (const FormatError&) {
    throw;
  } catch (const Error& e) {
    fail(what, e.what());
  }
  return cell;
}

GraphCell load_mindir(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FormatError("MindIR " + path + ": expected a readable file, got none");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_mindir(bytes.data(), bytes.size(), path);
}

}  // namespace loom::mindir
