// Reference data written by a script from PyTorch (tests/ops/reference/*.py) and read by the
// C++ tests, which need no Python. The format is text, one tensor per line:
//
//   <name> <dtype> <rank> <dim0> ... <dim_{rank-1}> <value0> <value1> ...
//
// with MindSpore dtype names (Float32, Int64...) and floats written with enough digits to read
// back exactly ("%.9g" for Float32, "%.17g" for Float64).
#pragma once

#include <map>
#include <string>

#include "core/ir/tensor.h"

namespace loom::testing {

// Reads tests/ops/reference/data/<file> (or <file> from the source root when it starts with
// "tests/"); throws FormatError naming the file and line on any malformed line.
std::map<std::string, Tensor> read_reference(const std::string& file);

// Max |a - b| over all elements (shapes must agree; FAIL otherwise via a ShapeError).
double max_abs_diff(const Tensor& a, const Tensor& b);

}  // namespace loom::testing
