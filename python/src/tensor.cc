// loom.Tensor and its exchange with NumPy and DLPack, without copies where the layouts allow.
//
//   NumPy → loom: Tensor.from_numpy(a) wraps a C-contiguous, writeable array of a loom dtype
//   (Storage::wrap, the array kept alive as the owner); other arrays are copied first.
//   loom → NumPy: the buffer protocol (memoryview, np.asarray, __array__, asnumpy) exposes the
//   tensor's own memory, and the exported buffer keeps the tensor alive.
//   DLPack (0.6, Debian's dlpack.h): __dlpack__ hands a DLManagedTensor whose manager holds a
//   loom::Tensor (the storage stays alive until the consumer calls the deleter); from_dlpack
//   wraps the producer's memory, its deleter called when the loom storage goes.
#include <dlpack/dlpack.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/ir/error.h"
#include "python/src/bindings.h"

namespace loom::python {

namespace {

struct Format {
  DType dtype;
  const char* numpy;    // NumPy's dtype string
  const char* buffer;   // the buffer protocol's format character
};

// The dtypes NumPy and the buffer protocol share with loom (BFloat16 has no NumPy dtype).
constexpr Format kFormats[] = {
    {DType::kFloat32, "float32", "f"}, {DType::kFloat64, "float64", "d"},
    {DType::kFloat16, "float16", "e"}, {DType::kInt32, "int32", "i"},
    {DType::kInt64, "int64", "q"},     {DType::kUInt8, "uint8", "B"},
    {DType::kBool, "bool", "?"},
};

const Format* format_of(DType d) {
  for (const Format& f : kFormats) {
    if (f.dtype == d) return &f;
  }
  return nullptr;
}

const Format& checked_format(DType d, const char* what) {
  const Format* f = format_of(d);
  if (!f) {
    throw TypeError(std::string(what) + ": expected a dtype NumPy has, got " +
                    std::string(dtype_name(d)));
  }
  return *f;
}

Shape shape_of(const py::array& a) {
  Shape s;
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s.push_back(a.shape(i));
  return s;
}

// A host tensor over the array's memory (no copy) when it is C-contiguous and writeable, else
// over a contiguous copy of it.
Tensor from_numpy(py::array a) {
  const DType dtype = dtype_of_numpy(a.dtype());
  if (!(a.flags() & py::array::c_style) || !a.writeable()) {
    a = py::module_::import("numpy").attr("array")(a, py::arg("copy") = true,
                                                   py::arg("order") = "C");
  }
  const Shape shape = shape_of(a);
  const std::size_t nbytes = static_cast<std::size_t>(a.nbytes());
  void* data = a.mutable_data();
  auto storage = Storage::wrap(data, nbytes, Device::kCPU, python_owner(a));
  return Tensor::view(std::move(storage), 0, dtype, shape);
}

// Tensor(data, dtype): a loom.Tensor as it is; a NumPy array shared (from_numpy); anything else
// through numpy.asarray (Python floats become Float32 and ints Int64, as MindSpore's Tensor makes
// them from lists).
Tensor tensor_from_object(const py::object& obj, std::optional<DType> dtype) {
  if (py::isinstance<Tensor>(obj)) {
    Tensor t = obj.cast<Tensor>();
    if (dtype && *dtype != t.dtype()) {
      throw TypeError("Tensor: expected data of the dtype asked for, got a " +
                      std::string(dtype_name(t.dtype())) + " tensor for " +
                      std::string(dtype_name(*dtype)) + " (use ops.Cast)");
    }
    return t;
  }
  py::module_ np = py::module_::import("numpy");
  py::object arr;
  if (dtype) {
    arr = np.attr("asarray")(obj, numpy_dtype(*dtype));
  } else {
    arr = np.attr("asarray")(obj);
    const std::string kind = py::str(arr.attr("dtype").attr("kind"));
    if (!py::isinstance<py::array>(obj) && kind == "f") arr = arr.attr("astype")("float32");
  }
  return from_numpy(py::reinterpret_borrow<py::array>(arr));
}

// ---- DLPack ----

DLDataType dl_dtype(DType d) {
  switch (d) {
    case DType::kFloat32: return {kDLFloat, 32, 1};
    case DType::kFloat64: return {kDLFloat, 64, 1};
    case DType::kFloat16: return {kDLFloat, 16, 1};
    case DType::kBFloat16: return {kDLBfloat, 16, 1};
    case DType::kInt32: return {kDLInt, 32, 1};
    case DType::kInt64: return {kDLInt, 64, 1};
    case DType::kUInt8: return {kDLUInt, 8, 1};
    case DType::kBool: return {kDLUInt, 8, 1};
  }
  throw InternalError("DLPack: a dtype without a DLPack code");
}

DType dtype_of_dl(const DLDataType& t) {
  if (t.lanes == 1) {
    if (t.code == kDLFloat && t.bits == 32) return DType::kFloat32;
    if (t.code == kDLFloat && t.bits == 64) return DType::kFloat64;
    if (t.code == kDLFloat && t.bits == 16) return DType::kFloat16;
    if (t.code == kDLBfloat && t.bits == 16) return DType::kBFloat16;
    if (t.code == kDLInt && t.bits == 32) return DType::kInt32;
    if (t.code == kDLInt && t.bits == 64) return DType::kInt64;
    if (t.code == kDLUInt && t.bits == 8) return DType::kUInt8;
  }
  throw TypeError("from_dlpack: expected a tensor of a loom dtype, got DLPack type code " +
                  std::to_string(t.code) + " with " + std::to_string(t.bits) + " bits and " +
                  std::to_string(t.lanes) + " lanes");
}

struct Exported {
  Tensor tensor;
  std::vector<std::int64_t> shape;
  DLManagedTensor managed{};
};

void delete_exported(DLManagedTensor* self) { delete static_cast<Exported*>(self->manager_ctx); }

void capsule_destructor(PyObject* capsule) {
  // A capsule nobody consumed still owns its tensor.
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    if (m && m->deleter) m->deleter(m);
  }
}

py::capsule to_dlpack(const Tensor& t) {
  auto* e = new Exported{t, t.shape(), {}};
  DLTensor& d = e->managed.dl_tensor;
  d.data = const_cast<void*>(e->tensor.raw_data());
  d.device = t.is_host() ? DLDevice{kDLCPU, 0} : DLDevice{kDLCUDA, 0};
  d.ndim = static_cast<int>(t.rank());
  d.dtype = dl_dtype(t.dtype());
  d.shape = e->shape.data();
  d.strides = nullptr;  // compact row-major
  d.byte_offset = 0;
  e->managed.manager_ctx = e;
  e->managed.deleter = delete_exported;
  return py::capsule(&e->managed, "dltensor", capsule_destructor);
}

Tensor from_dlpack(const py::object& obj) {
  py::object capsule = obj;
  if (py::hasattr(obj, "__dlpack__")) capsule = obj.attr("__dlpack__")();
  PyObject* c = capsule.ptr();
  if (!PyCapsule_IsValid(c, "dltensor")) {
    throw TypeError("from_dlpack: expected an object with __dlpack__ or an unused DLPack "
                    "capsule, got " + std::string(py::str(py::type::of(obj).attr("__name__"))));
  }
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(c, "dltensor"));
  const DLTensor& d = m->dl_tensor;
  const DType dtype = dtype_of_dl(d.dtype);
  Device device;
  if (d.device.device_type == kDLCPU || d.device.device_type == kDLCUDAHost) {
    device = Device::kCPU;
  } else if (d.device.device_type == kDLCUDA) {
    device = Device::kCUDA;
  } else {
    throw TypeError("from_dlpack: expected a CPU or CUDA tensor, got DLPack device type " +
                    std::to_string(d.device.device_type));
  }
  Shape shape(d.shape, d.shape + d.ndim);
  // Compact row-major strides only (a view with other strides is refused, not copied: its
  // memory belongs to the producer).
  if (d.strides) {
    std::int64_t expect = 1;
    for (int i = d.ndim - 1; i >= 0; --i) {
      if (shape[i] != 1 && d.strides[i] != expect) {
        throw ValueError("from_dlpack: expected a contiguous (row-major) tensor, got strides " +
                         [&] {
                           std::string s;
                           for (int k = 0; k < d.ndim; ++k) {
                             s += (k ? ", " : "(") + std::to_string(d.strides[k]);
                           }
                           return s + ")";
                         }() + "; call .contiguous() on it first");
      }
      expect *= shape[i];
    }
  }
  const std::size_t nbytes = static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype);
  void* data = static_cast<char*>(d.data) + d.byte_offset;
  // Consumed: the capsule is renamed, and the producer's deleter runs when loom lets go.
  PyCapsule_SetName(c, "used_dltensor");
  std::shared_ptr<const void> owner(m, [](const void* p) {
    auto* mt = static_cast<DLManagedTensor*>(const_cast<void*>(p));
    if (mt->deleter && Py_IsInitialized()) {
      py::gil_scoped_acquire gil;  // producers written in Python need it
      mt->deleter(mt);
    }
  });
  return Tensor::view(Storage::wrap(data, nbytes, device, std::move(owner)), 0, dtype, shape);
}

std::string repr(const Tensor& t) {
  std::string s = "Tensor(shape=" + shape_to_string(t.shape()) +
                  ", dtype=" + std::string(dtype_name(t.dtype()));
  if (!t.is_host()) return s + ", device=" + std::string(device_name(t.device())) + ")";
  if (format_of(t.dtype())) {
    py::object arr = py::module_::import("numpy").attr("asarray")(py::cast(t));
    s += ", value=\n" + std::string(py::str(arr));
  }
  return s + ")";
}

}  // namespace

DType dtype_of_numpy(const py::dtype& dt) {
  const std::string name = py::str(dt.attr("name"));
  for (const Format& f : kFormats) {
    if (name == f.numpy) return f.dtype;
  }
  throw TypeError("Tensor: expected a NumPy dtype loom has (float32, float64, float16, int32, "
                  "int64, uint8, bool), got " + name);
}

py::dtype numpy_dtype(DType dtype) { return py::dtype(checked_format(dtype, "asnumpy").numpy); }

std::shared_ptr<const void> python_owner(py::object obj) {
  auto* held = new py::object(std::move(obj));
  return std::shared_ptr<const void>(held, [](const void* p) {
    if (!Py_IsInitialized()) return;  // at exit, after Python's finalization: nothing to free
    py::gil_scoped_acquire gil;
    delete static_cast<const py::object*>(p);
  });
}

void init_tensor(py::module_& m) {
  py::enum_<DType>(m, "DType", "loom's element types (MindSpore's names)")
      .value("float32", DType::kFloat32)
      .value("float64", DType::kFloat64)
      .value("float16", DType::kFloat16)
      .value("bfloat16", DType::kBFloat16)
      .value("int32", DType::kInt32)
      .value("int64", DType::kInt64)
      .value("uint8", DType::kUInt8)
      .value("bool_", DType::kBool)
      .def("__str__", [](DType d) { return std::string(dtype_name(d)); })
      .def_property_readonly("itemsize", [](DType d) { return dtype_size(d); });

  py::class_<Tensor>(m, "Tensor", py::buffer_protocol(), R"(A loom tensor: dtype, shape and memory on a device.

Tensor(data, dtype=None) makes one from a NumPy array (shared, no copy, when it is C-contiguous and
writeable), a nested list or a number; Tensor.from_numpy(a) shares or copies the same way.
asnumpy(), numpy.asarray(t) and memoryview(t) see the tensor's own memory (host tensors).)")
      .def(py::init([](const py::object& data, std::optional<DType> dtype) {
             return tensor_from_object(data, dtype);
           }),
           py::arg("data"), py::arg("dtype") = py::none())
      .def_static("from_numpy", [](py::array a) { return from_numpy(std::move(a)); },
                  py::arg("array"),
                  "The array's memory as a tensor (kept alive by it), or a copy of a "
                  "non-contiguous or read-only array")
      .def_buffer([](Tensor& t) {
        if (!t.is_host()) {
          throw TypeError("Tensor: expected a host tensor for NumPy, got one on " +
                          std::string(device_name(t.device())) + " (call .to_host() first)");
        }
        const Format& f = checked_format(t.dtype(), "asnumpy");
        std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
        std::vector<py::ssize_t> strides(shape.size());
        py::ssize_t stride = static_cast<py::ssize_t>(dtype_size(t.dtype()));
        for (std::size_t i = shape.size(); i-- > 0;) {
          strides[i] = stride;
          stride *= shape[i];
        }
        return py::buffer_info(t.raw_data(), static_cast<py::ssize_t>(dtype_size(t.dtype())),
                               f.buffer, static_cast<py::ssize_t>(shape.size()), shape, strides);
      })
      .def("asnumpy",
           [](py::object self) { return py::module_::import("numpy").attr("asarray")(self); },
           "A NumPy array over the tensor's memory (no copy)")
      .def(
          "__array__",
          [](py::object self, py::object dtype) {
            py::object a = py::module_::import("numpy").attr("asarray")(py::memoryview(self));
            return dtype.is_none() ? a : a.attr("astype")(dtype);
          },
          py::arg("dtype") = py::none())
      .def("__dlpack__", [](const Tensor& t, py::object stream) { return to_dlpack(t); },
           py::arg("stream") = py::none())
      .def("__dlpack_device__",
           [](const Tensor& t) {
             return py::make_tuple(t.is_host() ? int{kDLCPU} : int{kDLCUDA}, 0);
           })
      .def_property_readonly("dtype", &Tensor::dtype)
      .def_property_readonly("shape",
                             [](const Tensor& t) {
                               py::tuple s(t.shape().size());
                               for (std::size_t i = 0; i < t.shape().size(); ++i) {
                                 s[i] = t.shape()[i];
                               }
                               return s;
                             })
      .def_property_readonly("ndim", &Tensor::rank)
      .def_property_readonly("size", &Tensor::numel)
      .def_property_readonly("nbytes", &Tensor::nbytes)
      .def_property_readonly("device",
                             [](const Tensor& t) { return std::string(device_name(t.device())); })
      .def("data_ptr", [](Tensor& t) { return reinterpret_cast<std::uintptr_t>(t.raw_data()); })
      .def("to_host", [](const Tensor& t) { return backend::to_host(t); })
      .def("to_device",
           [](const Tensor& t, const std::string& device) {
             const Device d = device == "GPU" || device == "CUDA" ? Device::kCUDA : Device::kCPU;
             if (device != "GPU" && device != "CUDA" && device != "CPU") {
               throw ValueError("Tensor.to_device: expected 'CPU' or 'GPU', got '" + device + "'");
             }
             return backend::to_device(t, backend::get_backend(d));
           })
      .def("copy", [](const Tensor& t) { return backend::clone_on_device(t); })
      .def("__len__",
           [](const Tensor& t) {
             if (t.rank() == 0) throw TypeError("len() of a rank-0 tensor");
             return t.shape()[0];
           })
      .def("__repr__", &repr)
      .def("__str__", &repr);

  m.def("from_dlpack", &from_dlpack, py::arg("x"),
        "A loom tensor over another framework's tensor (DLPack), without a copy");
}

}  // namespace loom::python
