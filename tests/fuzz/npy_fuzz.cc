// libFuzzer target for the .npy reader (data::parse_npy, what `loom run` and `loom compare` read).
// Any input must either load or be rejected with a FormatError (no other exception, crash or
// sanitizer report); a loaded array must serialize (serialize_npy) and those bytes load again to
// the same dtype, shape and bits.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>

#include "core/ir/error.h"
#include "data/npy.h"
#include "tests/fuzz/fuzz_fail.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace loom;
  Tensor t;
  try {
    t = data::parse_npy(data, size, "fuzz.npy");
  } catch (const FormatError&) {
    return 0;
  } catch (const std::exception& e) {
    fuzz_fail("the reader threw something other than FormatError", e.what());
  }
  Tensor again;
  try {
    const std::string bytes = data::serialize_npy(t);
    again = data::parse_npy(bytes.data(), bytes.size(), "again.npy");
  } catch (const std::exception& e) {
    fuzz_fail("a loaded array did not serialize and load again", e.what());
  }
  if (again.dtype() != t.dtype() || again.shape() != t.shape() || !again.bitwise_equal(t)) {
    fuzz_fail("the round trip changed the array", "");
  }
  return 0;
}
