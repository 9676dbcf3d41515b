// libFuzzer target for the ONNX reader. Any input must either load or be rejected with a
// FormatError (no other exception, crash or sanitizer report); a loaded model's graph must have
// an abstract on its output (the reader's inference ran to the end).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>

#include "core/ir/anf.h"
#include "core/ir/error.h"
#include "onnx/onnx.h"
#include "tests/fuzz/fuzz_fail.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace loom;
  std::optional<mindir::GraphCell> cell;
  try {
    cell.emplace(onnx::parse_onnx(data, size, "fuzz.onnx"));
  } catch (const FormatError&) {
    return 0;
  } catch (const std::exception& e) {
    fuzz_fail("the reader threw something other than FormatError", e.what());
  }
  if (!cell->graph().output() || !cell->graph().output()->abstract()) {
    fuzz_fail("a loaded model's output has no abstract", "");
  }
  return 0;
}
