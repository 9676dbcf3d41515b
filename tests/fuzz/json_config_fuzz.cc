// libFuzzer target for the readers of configuration text that a user hands to loom: MindSpore's
// dump configuration (debug::parse_dump_config: data_dump.json, `--dump-config`,
// $MINDSPORE_DUMP_CONFIG), msprobe's name-mapping file (debug::parse_mapping: `loom compare
// --mapping`) and the watchpoint spec (debug::parse_watch_spec: `loom debug --watch`). Each input
// goes to all three. Each must either accept it or throw a loom::Error naming what is wrong (any
// other exception, crash or sanitizer report is a bug); an accepted dump configuration is
// written back (DumpConfig::to_json), and that text must parse to the same configuration.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>

#include "core/ir/error.h"
#include "debug/compare.h"
#include "debug/dump.h"
#include "debug/watch.h"
#include "tests/fuzz/fuzz_fail.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace loom;
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const debug::DumpConfig c = debug::parse_dump_config(text, "fuzz.json");
    const std::string json = c.to_json();
    debug::DumpConfig again;
    try {
      again = debug::parse_dump_config(json, "again.json");
    } catch (const std::exception& e) {
      fuzz_fail("an accepted dump configuration, written back, did not parse",
                json + "\n" + e.what());
    }
    if (again.to_json() != json) {
      fuzz_fail("an accepted dump configuration changed in the round trip",
                json + "\n" + again.to_json());
    }
  } catch (const Error&) {
  } catch (const std::exception& e) {
    fuzz_fail("parse_dump_config threw something other than a loom::Error", e.what());
  }
  try {
    debug::parse_mapping(text, "mapping.json");
  } catch (const Error&) {
  } catch (const std::exception& e) {
    fuzz_fail("parse_mapping threw something other than a loom::Error", e.what());
  }
  try {
    debug::parse_watch_spec(text);
  } catch (const Error&) {
  } catch (const std::exception& e) {
    fuzz_fail("parse_watch_spec threw something other than a loom::Error", e.what());
  }
  return 0;
}
