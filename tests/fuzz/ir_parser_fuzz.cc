// libFuzzer target for the IR text reader. Any input must either parse or be rejected with a
// loom::Error; a parsed module must print, the printed text must parse again and print to the
// same text, and the module must export to .dot. Anything else — another exception, a crash, a
// sanitizer report, a round trip that changes the text — stops the fuzzer with the input saved.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <string_view>

#include "core/ir/anf.h"
#include "core/ir/dot.h"
#include "core/ir/error.h"
#include "core/ir/parser.h"
#include "core/ir/printer.h"
#include "tests/fuzz/fuzz_fail.h"

namespace {

void check_parsed(const loom::ir::Module& module) {
  const std::string first = loom::ir::print_module(module);
  std::unique_ptr<loom::ir::Module> again;
  try {
    again = loom::ir::parse_module(first, "<printed>");
  } catch (const loom::Error& e) {
    fuzz_fail("printed text does not parse back",
              std::string(e.what()) + "\n--- printed ---\n" + first);
  }
  const std::string second = loom::ir::print_module(*again);
  if (first != second) {
    fuzz_fail("print -> parse -> print changed the text",
         "--- first ---\n" + first + "--- second ---\n" + second);
  }
  (void)loom::ir::to_dot(module);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::unique_ptr<loom::ir::Module> module;
  try {
    module = loom::ir::parse_module(text, "<fuzz>");
  } catch (const loom::Error&) {
    return 0;  // rejected with a proper diagnostic: the expected outcome for most inputs
  } catch (const std::exception& e) {
    fuzz_fail("parse_module threw a non-loom exception", e.what());
  }
  try {
    check_parsed(*module);
  } catch (const std::exception& e) {
    fuzz_fail("printing, re-parsing or .dot export of a parsed module threw", e.what());
  }
  return 0;
}
