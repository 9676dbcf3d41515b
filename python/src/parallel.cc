// Data parallelism from Python (being written).
#include "python/src/bindings.h"

namespace loom::python {

void init_parallel(py::module_& m) {}

}  // namespace loom::python
