// The pieces of loom._loom (python/src/*.cc), each adding its classes and functions to the
// module: module.cc calls them in this order.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <string>

#include "core/ir/dtype.h"
#include "core/ir/tensor.h"
#include "core/ir/value.h"
#include "ops/emitter.h"

namespace loom::nn {
class Cell;
struct Parameter;
}  // namespace loom::nn

namespace loom::python {

namespace py = pybind11;

// A parameter of a Cell as Python sees it: the Cell (kept alive) and its Parameter.
struct ParamRef {
  std::shared_ptr<nn::Cell> owner;
  nn::Parameter* param;
};
// The Var standing for the parameter in the Cell's construct (Cell::param: the value in PyNative
// mode, the graph weight while tracing).
ops::Var param_var(ParamRef& ref);

void init_errors(py::module_& m);    // module.cc: loom's exceptions as Python's
void init_tensor(py::module_& m);    // tensor.cc: DType, Tensor, NumPy and DLPack
void init_ops(py::module_& m);       // ops.cc: the op registry, eager calls, Var
void init_autodiff(py::module_& m);  // autodiff.cc: tracing Python functions, grad
void init_cells(py::module_& m);     // cell.cc: Cells in Python, layers, context, seed
void init_train(py::module_& m);     // train.cc: losses, optimizers, training, datasets
void init_io(py::module_& m);        // io.cc: checkpoints, MindIR, the model zoo
void init_parallel(py::module_& m);  // parallel.cc: data parallelism under mpirun

// A Python value as an op's tensor argument: a loom.Tensor, a NumPy array, a Python number (a
// rank-0 tensor of `like`'s dtype when given, else Float32 / Int64 / Bool), or a Var.
ops::Var to_var(const py::handle& obj, std::optional<DType> like = std::nullopt);
// A Value (a tensor, a tuple of them, a scalar) as Python objects: loom.Tensor, tuple, number.
py::object from_value(const ir::Value& v);
// A Var as Python: from_value for a concrete value, a loom.Var for a graph node.
py::object from_var(const ops::Var& v);

// The loom dtype of a NumPy dtype (TypeError naming it when loom has none) and back.
DType dtype_of_numpy(const py::dtype& dt);
py::dtype numpy_dtype(DType dtype);

// The Python object that owns outside memory a loom Storage wraps: released under the GIL when
// the storage goes.
std::shared_ptr<const void> python_owner(py::object obj);

}  // namespace loom::python
