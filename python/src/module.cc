// loom._loom: the extension module under the `loom` Python package (python/loom/). Its pieces
// live in tensor.cc, ops.cc and autodiff.cc; this file makes the module and maps loom's errors
// to Python exceptions.
#include <pybind11/pybind11.h>

#include "core/ir/error.h"
#include "python/src/bindings.h"

namespace loom::python {

// loom's errors arrive as Python exceptions: LoomError (a RuntimeError) is the base of them all,
// and each kind is also the built-in exception a Python user catches (LoomValueError is a
// ValueError, LoomTypeError a TypeError...), with loom's message unchanged.
namespace {

PyObject* new_error(py::module_& m, const char* name, PyObject* base, PyObject* builtin) {
  const std::string qualified = std::string("loom._loom.") + name;
  py::tuple bases = builtin ? py::tuple(py::make_tuple(py::handle(base), py::handle(builtin)))
                            : py::tuple(py::make_tuple(py::handle(base)));
  PyObject* cls = PyErr_NewException(qualified.c_str(), bases.ptr(), nullptr);
  if (!cls) throw py::error_already_set();
  m.add_object(name, py::handle(cls));  // the module keeps a reference
  return cls;
}

}  // namespace

void init_errors(py::module_& m) {
  static PyObject* error = new_error(m, "LoomError", PyExc_RuntimeError, nullptr);
  static PyObject* value_error = new_error(m, "LoomValueError", error, PyExc_ValueError);
  static PyObject* shape_error = new_error(m, "LoomShapeError", value_error, nullptr);
  static PyObject* type_error = new_error(m, "LoomTypeError", error, PyExc_TypeError);
  static PyObject* format_error = new_error(m, "LoomFormatError", value_error, nullptr);
  static PyObject* internal_error = new_error(m, "LoomInternalError", error, nullptr);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ShapeError& e) {
      PyErr_SetString(shape_error, e.what());
    } catch (const ValueError& e) {
      PyErr_SetString(value_error, e.what());
    } catch (const TypeError& e) {
      PyErr_SetString(type_error, e.what());
    } catch (const FormatError& e) {
      PyErr_SetString(format_error, e.what());
    } catch (const InternalError& e) {
      PyErr_SetString(internal_error, e.what());
    } catch (const Error& e) {
      PyErr_SetString(error, e.what());
    }
  });
}

}  // namespace loom::python

PYBIND11_MODULE(_loom, m) {
  m.doc() = "loom's C++ core (the loom package wraps it; import loom instead)";
  loom::python::init_errors(m);
  loom::python::init_tensor(m);
  loom::python::init_ops(m);
  loom::python::init_autodiff(m);
  loom::python::init_cells(m);
  loom::python::init_train(m);
  loom::python::init_io(m);
  loom::python::init_parallel(m);
}
