// Reader of the PyTorch reference data files (format in reference.h).
#include "tests/ops/reference.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "core/ir/error.h"

namespace loom::testing {

std::map<std::string, Tensor> read_reference(const std::string& file) {
  const std::string path =
      std::string(LOOM_SOURCE_DIR) +
      (file.rfind("tests/", 0) == 0 ? "/" + file : "/tests/ops/reference/data/" + file);
  std::ifstream in(path);
  if (!in) throw FormatError(path + ": expected a readable reference file, got none");
  std::map<std::string, Tensor> out;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream s(line);
    std::string name, dtype_text;
    std::int64_t rank = 0;
    auto fail = [&](const std::string& what) {
      return FormatError(path + ":" + std::to_string(lineno) + ": expected " + what);
    };
    if (!(s >> name >> dtype_text >> rank) || rank < 0 || rank > 8) throw fail("name dtype rank");
    auto dtype = dtype_from_name(dtype_text);
    if (!dtype) throw fail("a dtype name, got '" + dtype_text + "'");
    Shape shape(static_cast<std::size_t>(rank));
    for (auto& d : shape) {
      if (!(s >> d) || d < 0) throw fail("a dimension");
    }
    Tensor t(*dtype, shape);
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      std::string v;
      if (!(s >> v)) throw fail(std::to_string(t.numel()) + " values for " + name);
      t.set(i, std::stod(v));
    }
    std::string extra;
    if (s >> extra) throw fail("end of line after " + std::to_string(t.numel()) + " values");
    out.emplace(name, t);
  }
  return out;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) {
    throw ShapeError("max_abs_diff: expected equal shapes, got " + shape_to_string(a.shape()) +
                     " and " + shape_to_string(b.shape()));
  }
  double m = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::abs(a.get(i) - b.get(i)));
  return m;
}

}  // namespace loom::testing
