// The op registry in Python: every registered op callable by name (loom.ops builds a function
// per op from op_names() / op_info()), eagerly on tensors or, inside a traced function, as a node
// of the graph (loom.Var). Values cross as loom.Tensor, tuples and numbers.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "backends/eager.h"
#include "core/ir/error.h"
#include "core/ir/printer.h"
#include "core/trace/tracer.h"
#include "nn/cell.h"
#include "ops/op.h"
#include "python/src/bindings.h"

namespace loom::python {

namespace {

std::string kind_name(ops::AttrKind k) {
  switch (k) {
    case ops::AttrKind::kBool: return "bool";
    case ops::AttrKind::kInt: return "int";
    case ops::AttrKind::kFloat: return "float";
    case ops::AttrKind::kString: return "str";
    case ops::AttrKind::kInts: return "tuple of int";
    case ops::AttrKind::kDType: return "loom dtype";
    case ops::AttrKind::kAny: return "any";
  }
  return "?";
}

// A Python value as an attribute Value; the op's schema decides ints, floats and tuples.
ir::Value attr_value(const py::handle& v, const ops::AttrSpec* spec) {
  const ops::AttrKind kind = spec ? spec->kind : ops::AttrKind::kAny;
  if (py::isinstance<py::bool_>(v)) return ir::Value::boolean(v.cast<bool>());
  if (py::isinstance<DType>(v)) return ir::Value::dtype(v.cast<DType>());
  if (py::isinstance<py::str>(v)) return ir::Value::string(v.cast<std::string>());
  if (py::isinstance<py::int_>(v)) {
    if (kind == ops::AttrKind::kInts) return ir::Value::ints({v.cast<std::int64_t>()});
    if (kind == ops::AttrKind::kFloat) return ir::Value::f32(v.cast<float>());
    return ir::Value::i64(v.cast<std::int64_t>());
  }
  if (py::isinstance<py::float_>(v)) return ir::Value::f32(v.cast<float>());
  if (py::isinstance<py::tuple>(v) || py::isinstance<py::list>(v)) {
    std::vector<ir::Value> elements;
    for (const py::handle& e : v) elements.push_back(attr_value(e, nullptr));
    return ir::Value::tuple(std::move(elements));
  }
  if (py::isinstance<Tensor>(v)) return ir::Value::tensor(v.cast<Tensor>());
  throw TypeError("ops: expected an attribute value (bool, int, float, str, tuple, dtype or "
                  "Tensor), got " + std::string(py::str(py::type::of(v).attr("__name__"))));
}

ir::Primitive::Attrs attrs_of(const ops::OpDef& def, const py::dict& kwargs) {
  ir::Primitive::Attrs attrs;
  for (const auto& [k, v] : kwargs) {
    const std::string name = k.cast<std::string>();
    const ops::AttrSpec* spec = nullptr;
    for (const ops::AttrSpec& a : def.attrs) {
      if (a.name == name) spec = &a;
    }
    attrs[name] = attr_value(v, spec);
  }
  return attrs;
}

// The dtype the op's Python numbers take: that of its first tensor argument.
std::optional<DType> first_dtype(const py::list& args) {
  for (const py::handle& a : args) {
    if (py::isinstance<Tensor>(a)) return a.cast<Tensor>().dtype();
    if (py::isinstance<ParamRef>(a)) return a.cast<ParamRef&>().param->value.dtype();
    if (py::isinstance<ops::Var>(a)) {
      const ir::AbstractPtr ab = nn::current_emitter().abstract_of(a.cast<ops::Var>());
      if (ab && ab->is_tensor()) return ab->dtype();
    }
  }
  return std::nullopt;
}

py::object call_op(const std::string& name, const py::list& args, const py::dict& kwargs,
                   const py::object& site) {
  const ops::OpDef& def = ops::Registry::global().get(name);
  ir::Primitive::Attrs attrs = attrs_of(def, kwargs);
  const std::optional<DType> like = first_dtype(args);
  if (trace::current() != nullptr) {
    // Tracing: a node of the graph, at the Python caller's file and line.
    trace::Site s;
    if (!site.is_none()) {
      auto [file, line] = site.cast<std::pair<std::string, int>>();
      s = {file, line};
    }
    trace::OpSiteGuard guard(site.is_none() ? nullptr : &s);
    std::vector<ops::Var> vars;
    for (const py::handle& a : args) vars.push_back(to_var(a, like));
    return from_var(nn::current_emitter().emit(name, vars, std::move(attrs)));
  }
  std::vector<ir::Value> values;
  for (const py::handle& a : args) {
    if (py::isinstance<ops::Var>(a)) {
      throw ValueError(name + ": expected tensors, got a graph value (loom.Var) outside the "
                       "trace that made it");
    }
    values.push_back(to_var(a, like).value());
  }
  ir::Value out;
  {
    py::gil_scoped_release release;
    out = backend::run_op(name, values, std::move(attrs));
  }
  return from_value(out);
}

py::dict op_info(const std::string& name) {
  const ops::OpDef& def = ops::Registry::global().get(name);
  py::dict d;
  d["name"] = def.name;
  d["summary"] = def.summary;
  d["num_inputs"] = def.num_inputs;
  d["min_inputs"] = def.min_inputs;
  d["num_outputs"] = def.num_outputs;
  d["differentiable"] = static_cast<bool>(def.bprop);
  d["not_differentiable_because"] = def.not_differentiable_because;
  py::list attrs;
  for (const ops::AttrSpec& a : def.attrs) {
    // The default as the Python value a caller would pass (a required attribute: no entry).
    py::object def_value = py::none();
    bool has_default = false;
    if (a.default_value) {
      has_default = true;
      try {
        def_value = from_value(*a.default_value);
      } catch (const TypeError&) {
        def_value = py::str(ir::print_value(*a.default_value));
      }
    }
    attrs.append(py::make_tuple(a.name, kind_name(a.kind), has_default, def_value));
  }
  d["attrs"] = attrs;
  return d;
}

}  // namespace

ops::Var to_var(const py::handle& obj, std::optional<DType> like) {
  if (py::isinstance<ops::Var>(obj)) return obj.cast<ops::Var>();
  if (py::isinstance<ParamRef>(obj)) {
    ParamRef& ref = obj.cast<ParamRef&>();
    return param_var(ref);
  }
  if (py::isinstance<Tensor>(obj)) return ops::Var(ir::Value::tensor(obj.cast<Tensor>()));
  if (py::isinstance<py::bool_>(obj) || py::isinstance<py::int_>(obj) ||
      py::isinstance<py::float_>(obj)) {
    const DType d = like ? *like
                    : py::isinstance<py::bool_>(obj) ? DType::kBool
                    : py::isinstance<py::int_>(obj)  ? DType::kInt64
                                                     : DType::kFloat32;
    return ops::Var(ir::Value::tensor(Tensor::scalar(d, obj.cast<double>())));
  }
  if (py::isinstance<py::tuple>(obj) || py::isinstance<py::list>(obj)) {
    std::vector<ops::Var> elements;
    bool all_values = true;
    for (const py::handle& e : obj) {
      elements.push_back(to_var(e, like));
      all_values &= elements.back().is_value();
    }
    if (all_values) {
      std::vector<ir::Value> values;
      for (const ops::Var& e : elements) values.push_back(e.value());
      return ops::Var(ir::Value::tuple(std::move(values)));
    }
    return nn::current_emitter().make_tuple(elements);
  }
  // A NumPy array (or anything numpy.asarray takes) as a tensor.
  return ops::Var(ir::Value::tensor(py::module_::import("loom._loom").attr("Tensor")(obj)
                                        .cast<Tensor>()));
}

py::object from_value(const ir::Value& v) {
  if (v.is_tensor()) return py::cast(v.as_tensor());
  if (v.is_tuple()) {
    py::tuple t(v.elements().size());
    for (std::size_t i = 0; i < v.elements().size(); ++i) t[i] = from_value(v.elements()[i]);
    return t;
  }
  if (v.is_none()) return py::none();
  if (v.is_scalar()) {
    const ir::Scalar& s = v.as_scalar();
    if (s.dtype() == DType::kBool) return py::bool_(v.as_bool());
    if (s.dtype() == DType::kInt32 || s.dtype() == DType::kInt64) {
      return py::int_(v.as_int());
    }
    return py::float_(v.as_double());
  }
  if (v.is_dtype()) return py::cast(v.as_dtype());
  if (v.is_string()) return py::str(v.as_string());
  throw TypeError("loom: a value Python cannot hold: " + ir::print_value(v));
}

py::object from_var(const ops::Var& v) {
  if (v.is_value()) return from_value(v.value());
  if (!v.defined()) return py::none();
  // A tuple-valued node comes back as a tuple of its elements, as eager calls return tuples.
  const ir::AbstractPtr a = nn::current_emitter().abstract_of(v);
  if (a && a->is_tuple()) {
    const std::size_t n = a->elements().size();
    py::tuple t(n);
    for (std::size_t i = 0; i < n; ++i) {
      t[i] = from_var(nn::current_emitter().tuple_get(v, static_cast<std::int64_t>(i)));
    }
    return t;
  }
  return py::cast(v);
}

void init_ops(py::module_& m) {
  py::class_<ops::Var>(m, "Var",
                       "A value of a function being traced (a graph node): what loom.ops return "
                       "while loom.grad or a graph-mode Cell traces Python code")
      .def_property_readonly("shape",
                             [](const ops::Var& v) {
                               const ir::AbstractPtr a = nn::current_emitter().abstract_of(v);
                               if (!a || !a->is_tensor()) {
                                 throw TypeError("Var.shape: expected a tensor, got " +
                                                 (a ? a->to_string() : std::string("nothing")));
                               }
                               py::tuple s(a->shape().size());
                               for (std::size_t i = 0; i < a->shape().size(); ++i) {
                                 s[i] = a->shape()[i];
                               }
                               return s;
                             })
      .def_property_readonly("dtype",
                             [](const ops::Var& v) {
                               const ir::AbstractPtr a = nn::current_emitter().abstract_of(v);
                               if (!a || !a->is_tensor()) {
                                 throw TypeError("Var.dtype: expected a tensor");
                               }
                               return a->dtype();
                             })
      .def("__repr__", [](const ops::Var& v) {
        const ir::AbstractPtr a = trace::current() ? nn::current_emitter().abstract_of(v) : nullptr;
        return "Var(" + (a ? a->to_string() : std::string("a traced value")) + ")";
      });
  m.def("op_names", [] {
    std::vector<std::string> names;
    for (const ops::OpDef* d : ops::Registry::global().all()) names.push_back(d->name);
    return names;
  });
  m.def("op_info", &op_info, py::arg("name"));
  m.def("call_op", &call_op, py::arg("name"), py::arg("args"), py::arg("attrs"),
        py::arg("site") = py::none(),
        "Runs op `name` on `args` (eagerly, or as a node while tracing) with attributes");
  m.def("tracing", [] { return trace::current() != nullptr; });
}

}  // namespace loom::python
