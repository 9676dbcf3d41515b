// Cells from Python: loom.nn.Cell subclasses with a construct written in Python (a trampoline
// nn::Cell whose construct calls the Python method, so graph mode traces Python code into the same
// IR as a C++ construct), their parameters and child Cells registered by attribute
// (python/loom/nn.py), and the built-in layers of nn/layers.h. The context (mode, device) and
// seed_all live here too.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/ir/error.h"
#include "core/random/random.h"
#include "core/trace/tracer.h"
#include "nn/cell.h"
#include "nn/context.h"
#include "nn/initializer.h"
#include "nn/layers.h"
#include "python/src/bindings.h"
#include "runtime/compiled_function.h"

namespace loom::python {

namespace {

// An nn::Cell whose construct is the Python subclass's construct method.
class PyCell : public nn::Cell {
 public:
  PyCell(std::string cls_name, bool auto_prefix) : nn::Cell(std::move(cls_name), auto_prefix) {}

  ops::Var construct(const std::vector<ops::Var>& inputs) override {
    py::gil_scoped_acquire gil;
    py::function f = py::get_override(static_cast<const nn::Cell*>(this), "construct");
    if (!f) throw TypeError(cls_name() + ": expected a construct method");
    py::tuple args(inputs.size());
    for (std::size_t i = 0; i < inputs.size(); ++i) args[i] = from_var(inputs[i]);
    try {
      return to_var(f(*args));
    } catch (py::error_already_set& e) {
      // A loom error raised through Python code keeps its kind and message.
      if (e.matches(py::module_::import("loom._loom").attr("LoomShapeError"))) {
        throw ShapeError(py::str(e.value()));
      }
      if (e.matches(PyExc_ValueError)) throw ValueError(py::str(e.value()));
      if (e.matches(PyExc_TypeError)) throw TypeError(py::str(e.value()));
      throw;
    }
  }
};

std::optional<trace::Site> site_of(const py::object& site) {
  if (site.is_none()) return std::nullopt;
  auto [file, line] = site.cast<std::pair<std::string, int>>();
  return trace::Site{file, line};
}

nn::ExecMode mode_of(int mode) {
  if (mode == 0) return nn::ExecMode::kGraph;
  if (mode == 1) return nn::ExecMode::kPyNative;
  throw ValueError("set_context: expected mode GRAPH_MODE (0) or PYNATIVE_MODE (1), got " +
                   std::to_string(mode));
}

}  // namespace

ops::Var param_var(ParamRef& ref) { return ref.owner->param(*ref.param); }

void init_cells(py::module_& m) {
  py::class_<ParamRef>(m, "Parameter",
                       "A Cell's parameter: its full name (\"fc1.weight\"), value and whether it "
                       "is trained")
      .def_property_readonly("name", [](const ParamRef& r) { return r.param->name; })
      .def_property(
          "value", [](const ParamRef& r) { return r.param->value; },
          [](ParamRef& r, const Tensor& t) {
            if (t.dtype() != r.param->value.dtype() || t.shape() != r.param->value.shape()) {
              throw ValueError("Parameter.value: expected a " + r.param->value.describe() +
                               " for '" + r.param->name + "', got " + t.describe());
            }
            r.param->value = t;
          })
      .def_property(
          "requires_grad", [](const ParamRef& r) { return r.param->requires_grad; },
          [](ParamRef& r, bool v) { r.param->requires_grad = v; })
      .def_property_readonly("shape",
                             [](const ParamRef& r) -> py::object {
                               return py::cast(r.param->value).attr("shape");
                             })
      .def_property_readonly("dtype", [](const ParamRef& r) { return r.param->value.dtype(); })
      .def("asnumpy",
           [](const ParamRef& r) -> py::object {
             return py::cast(r.param->value).attr("asnumpy")();
           })
      .def("__repr__", [](const ParamRef& r) {
        return "Parameter(name=" + r.param->name + ", " + r.param->value.describe() +
               (r.param->requires_grad ? "" : ", requires_grad=False") + ")";
      });

  py::class_<nn::Cell, PyCell, std::shared_ptr<nn::Cell>>(m, "_Cell")
      .def(py::init<std::string, bool>(), py::arg("cls_name"), py::arg("auto_prefix") = true)
      .def(
          "_call",
          [](nn::Cell& c, const py::list& inputs, const py::object& site) {
            std::vector<ops::Var> vars;
            for (const py::handle& x : inputs) vars.push_back(to_var(x));
            const std::optional<trace::Site> s = site_of(site);
            ops::Var out;
            {
              py::gil_scoped_release release;  // a compiled call runs without the GIL
              out = c.call_at(std::move(vars), s ? &*s : nullptr);
            }
            return from_var(out);
          },
          py::arg("inputs"), py::arg("site") = py::none())
      .def(
          "_register_cell",
          [](nn::Cell& c, const std::string& name, std::shared_ptr<nn::Cell> child) {
            c.register_cell(name, std::move(child));
          })
      .def(
          "_register_parameter",
          [](std::shared_ptr<nn::Cell> c, const std::string& name, const Tensor& value,
             bool requires_grad) {
            nn::Parameter& p = c->register_parameter(name, value);
            p.requires_grad = requires_grad;
            return ParamRef{c, &p};
          })
      .def(
          "_register_parameter_init",
          [](std::shared_ptr<nn::Cell> c, const std::string& name, const Shape& shape,
             DType dtype, std::shared_ptr<nn::Initializer> init, bool requires_grad) {
            nn::Parameter& p = c->register_parameter(name, shape, dtype, std::move(init));
            p.requires_grad = requires_grad;
            return ParamRef{c, &p};
          })
      .def("parameters_and_names",
           [](std::shared_ptr<nn::Cell> c) {
             std::vector<std::pair<std::string, ParamRef>> out;
             for (auto& [name, p] : c->parameters_and_names()) out.push_back({name, ParamRef{c, p}});
             return out;
           })
      .def("trainable_params",
           [](std::shared_ptr<nn::Cell> c) {
             std::vector<ParamRef> out;
             for (auto& [name, p] : c->parameters_and_names()) {
               if (p->requires_grad) out.push_back(ParamRef{c, p});
             }
             return out;
           })
      .def("set_train", [](nn::Cell& c, bool mode) { c.set_train(mode); return &c; },
           py::arg("mode") = true, py::return_value_policy::reference)
      .def("_set_save_graphs_dir",
           [](nn::Cell& c, const std::string& dir) {
             c.compiled_function().set_save_graphs_dir(dir);
           })
      .def_property_readonly("training", &nn::Cell::training)
      .def_property_readonly("cls_name", &nn::Cell::cls_name)
      .def_property_readonly("num_compilations", &nn::Cell::num_compilations);

  // Built-in layers (nn/layers.h) with MindSpore's arguments and defaults.
  py::class_<nn::Dense, nn::Cell, std::shared_ptr<nn::Dense>>(m, "Dense")
      .def(py::init<std::int64_t, std::int64_t, bool>(), py::arg("in_channels"),
           py::arg("out_channels"), py::arg("has_bias") = true);
  py::class_<nn::Conv2d, nn::Cell, std::shared_ptr<nn::Conv2d>>(m, "Conv2d")
      .def(py::init([](std::int64_t in, std::int64_t out, std::int64_t k, std::int64_t stride,
                       std::string pad_mode, std::int64_t padding, bool has_bias) {
             return std::make_shared<nn::Conv2d>(nn::Conv2dOptions(in, out, k)
                                                     .stride(stride)
                                                     .pad_mode(std::move(pad_mode))
                                                     .padding(padding)
                                                     .has_bias(has_bias));
           }),
           py::arg("in_channels"), py::arg("out_channels"), py::arg("kernel_size"),
           py::arg("stride") = 1, py::arg("pad_mode") = "same", py::arg("padding") = 0,
           py::arg("has_bias") = false);
  py::class_<nn::ReLU, nn::Cell, std::shared_ptr<nn::ReLU>>(m, "ReLU").def(py::init<>());
  py::class_<nn::ReLU6, nn::Cell, std::shared_ptr<nn::ReLU6>>(m, "ReLU6").def(py::init<>());
  py::class_<nn::Flatten, nn::Cell, std::shared_ptr<nn::Flatten>>(m, "Flatten").def(py::init<>());
  py::class_<nn::Sigmoid, nn::Cell, std::shared_ptr<nn::Sigmoid>>(m, "Sigmoid").def(py::init<>());
  py::class_<nn::Identity, nn::Cell, std::shared_ptr<nn::Identity>>(m, "Identity")
      .def(py::init<>());
  // MindSpore's CellList: registered as "0", "1"...; its cells are called one by one. The
  // Python object keeps the cells it was given (CellList holds them too).
  py::class_<nn::CellList, nn::Cell, std::shared_ptr<nn::CellList>>(m, "CellList")
      .def(py::init([](const std::vector<std::shared_ptr<nn::Cell>>& cells) {
             auto l = std::make_shared<nn::CellList>();
             for (const auto& c : cells) l->append(c);
             return l;
           }),
           py::arg("cells") = std::vector<std::shared_ptr<nn::Cell>>{},
           py::keep_alive<1, 2>())
      .def("append", [](nn::CellList& l, std::shared_ptr<nn::Cell> c) { l.append(c); },
           py::keep_alive<1, 2>())
      .def("__len__", &nn::CellList::size)
      .def(
          "__getitem__",
          [](nn::CellList& l, std::size_t i) -> nn::Cell& {
            if (i >= l.size()) throw py::index_error("CellList index " + std::to_string(i));
            return l[i];
          },
          py::return_value_policy::reference_internal);
  py::class_<nn::Tanh, nn::Cell, std::shared_ptr<nn::Tanh>>(m, "Tanh").def(py::init<>());
  py::class_<nn::GELU, nn::Cell, std::shared_ptr<nn::GELU>>(m, "GELU").def(py::init<>());
  py::class_<nn::Softmax, nn::Cell, std::shared_ptr<nn::Softmax>>(m, "Softmax")
      .def(py::init<std::int64_t>(), py::arg("axis") = -1);
  py::class_<nn::MaxPool2d, nn::Cell, std::shared_ptr<nn::MaxPool2d>>(m, "MaxPool2d")
      .def(py::init<std::int64_t, std::int64_t, std::string>(), py::arg("kernel_size") = 1,
           py::arg("stride") = 1, py::arg("pad_mode") = "valid");
  py::class_<nn::AvgPool2d, nn::Cell, std::shared_ptr<nn::AvgPool2d>>(m, "AvgPool2d")
      .def(py::init<std::int64_t, std::int64_t, std::string>(), py::arg("kernel_size") = 1,
           py::arg("stride") = 1, py::arg("pad_mode") = "valid");
  py::class_<nn::Dropout, nn::Cell, std::shared_ptr<nn::Dropout>>(m, "Dropout")
      .def(py::init<double>(), py::arg("p") = 0.5);
  py::class_<nn::BatchNorm2d, nn::Cell, std::shared_ptr<nn::BatchNorm2d>>(m, "BatchNorm2d")
      .def(py::init<std::int64_t, double, double, bool, const std::string&, const std::string&,
                    const std::string&, const std::string&, std::optional<bool>>(),
           py::arg("num_features"), py::arg("eps") = 1e-5, py::arg("momentum") = 0.9,
           py::arg("affine") = true, py::arg("gamma_init") = "ones",
           py::arg("beta_init") = "zeros", py::arg("moving_mean_init") = "zeros",
           py::arg("moving_var_init") = "ones", py::arg("use_batch_statistics") = py::none());
  py::class_<nn::SequentialCell, nn::Cell, std::shared_ptr<nn::SequentialCell>>(m,
                                                                                "SequentialCell")
      .def(py::init([](const std::vector<std::shared_ptr<nn::Cell>>& cells) {
             auto s = std::make_shared<nn::SequentialCell>();
             for (const auto& c : cells) s->append(c);
             return s;
           }),
           py::arg("cells") = std::vector<std::shared_ptr<nn::Cell>>{})
      .def("append", [](nn::SequentialCell& s, std::shared_ptr<nn::Cell> c) { s.append(c); });

  // Initializers (nn/initializer.h, MindSpore's mindspore.common.initializer).
  py::class_<nn::Initializer, std::shared_ptr<nn::Initializer>>(m, "Initializer")
      .def_property_readonly("name", &nn::Initializer::name)
      .def("__repr__", [](const nn::Initializer& i) { return "Initializer(" + i.name() + ")"; });
  py::class_<nn::Normal, nn::Initializer, std::shared_ptr<nn::Normal>>(m, "Normal")
      .def(py::init<double, double>(), py::arg("sigma") = 0.01, py::arg("mean") = 0.0);
  py::class_<nn::TruncatedNormal, nn::Initializer, std::shared_ptr<nn::TruncatedNormal>>(
      m, "TruncatedNormal")
      .def(py::init<double, double, double, double>(), py::arg("sigma") = 0.01,
           py::arg("mean") = 0.0, py::arg("a") = -2.0, py::arg("b") = 2.0);
  py::class_<nn::Uniform, nn::Initializer, std::shared_ptr<nn::Uniform>>(m, "Uniform")
      .def(py::init<double>(), py::arg("scale") = 0.07);
  py::class_<nn::HeUniform, nn::Initializer, std::shared_ptr<nn::HeUniform>>(m, "HeUniform")
      .def(py::init<double, std::string, std::string>(), py::arg("negative_slope") = 0.0,
           py::arg("mode") = "fan_in", py::arg("nonlinearity") = "leaky_relu");
  py::class_<nn::HeNormal, nn::Initializer, std::shared_ptr<nn::HeNormal>>(m, "HeNormal")
      .def(py::init<double, std::string, std::string>(), py::arg("negative_slope") = 0.0,
           py::arg("mode") = "fan_in", py::arg("nonlinearity") = "leaky_relu");
  py::class_<nn::XavierUniform, nn::Initializer, std::shared_ptr<nn::XavierUniform>>(
      m, "XavierUniform")
      .def(py::init<double>(), py::arg("gain") = 1.0);
  py::class_<nn::Constant, nn::Initializer, std::shared_ptr<nn::Constant>>(m, "Constant")
      .def(py::init<double>(), py::arg("value"));
  py::class_<nn::Zero, nn::Constant, std::shared_ptr<nn::Zero>>(m, "Zero").def(py::init<>());
  py::class_<nn::One, nn::Constant, std::shared_ptr<nn::One>>(m, "One").def(py::init<>());
  m.def(
      "make_initializer",
      [](const std::string& spec) -> std::shared_ptr<nn::Initializer> {
        return nn::make_initializer(spec);
      },
      py::arg("name_or_value"));
  m.def(
      "draw_initializer",
      [](const nn::Initializer& init, const Shape& shape, DType dtype, const std::string& stream) {
        random::RandomStream s(stream);
        return nn::initializer(init, shape, dtype, s);
      },
      py::arg("init"), py::arg("shape"), py::arg("dtype"), py::arg("stream"));

  m.def(
      "set_context",
      [](std::optional<int> mode, std::optional<std::string> device_target) {
        if (mode) nn::set_context_mode(mode_of(*mode));
        if (device_target) nn::set_context_device(nn::device_from_target(device_target->c_str()));
      },
      py::arg("mode") = py::none(), py::arg("device_target") = py::none());
  m.def("get_context_mode",
        [] { return nn::context_mode() == nn::ExecMode::kGraph ? 0 : 1; });
  m.def("get_context_device",
        [] { return std::string(device_name(nn::context_device())); });
  m.def("seed_all", &random::seed_all, py::arg("seed"), py::arg("deterministic") = false);
}

}  // namespace loom::python
