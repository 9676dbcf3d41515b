// libFuzzer target for the MindIR reader. Any input must either load or be rejected with a
// FormatError (no other exception, crash or sanitizer report); a loaded model that loom can
// export again must serialize, and those bytes must load again with the same inputs and
// parameters.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>

#include "core/ir/error.h"
#include "mindir/mindir.h"
#include "tests/fuzz/fuzz_fail.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace loom;
  std::optional<mindir::GraphCell> cell;
  try {
    cell.emplace(mindir::parse_mindir(data, size, "fuzz.mindir"));
  } catch (const FormatError&) {
    return 0;
  } catch (const std::exception& e) {
    fuzz_fail("the reader threw something other than FormatError", e.what());
  }
  std::string bytes;
  try {
    bytes = mindir::serialize_graph(cell->graph(), cell->inputs().size());
  } catch (const Error&) {
    return 0;  // loadable but not exportable (e.g. a tuple output of a non-tensor): allowed
  } catch (const std::exception& e) {
    fuzz_fail("serialize_graph threw something other than loom::Error", e.what());
  }
  try {
    mindir::GraphCell again = mindir::parse_mindir(bytes.data(), bytes.size(), "again.mindir");
    if (again.inputs().size() != cell->inputs().size() ||
        again.parameters().size() != cell->parameters().size()) {
      fuzz_fail("a re-exported model loaded with other inputs or parameters", "");
    }
  } catch (const std::exception& e) {
    fuzz_fail("a re-exported model did not load again", e.what());
  }
  return 0;
}
