// libFuzzer target for the checkpoint reader. Any input must either load or be rejected with a
// FormatError (no other exception, crash or sanitizer report); a loaded checkpoint must
// serialize, and the bytes must load again to the same tags, dtypes, shapes and bits.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>

#include "checkpoint/checkpoint.h"
#include "core/ir/error.h"
#include "tests/fuzz/fuzz_fail.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace loom::checkpoint;
  Checkpoint ck;
  try {
    ck = parse_checkpoint(data, size, "fuzz.ckpt", {.crc_check = size % 2 == 1});
  } catch (const loom::FormatError&) {
    return 0;
  } catch (const std::exception& e) {
    fuzz_fail("the reader threw something other than FormatError", e.what());
  }
  std::string bytes;
  Checkpoint again;
  try {
    bytes = serialize_checkpoint(ck, {.chunk_bytes = 7});
    again = parse_checkpoint(bytes.data(), bytes.size(), "again.ckpt");
  } catch (const std::exception& e) {
    fuzz_fail("a loaded checkpoint did not serialize and load again", e.what());
  }
  if (again.tensors.size() != ck.tensors.size() || again.strings != ck.strings) {
    fuzz_fail("the round trip changed the entries", "");
  }
  for (std::size_t i = 0; i < ck.tensors.size(); ++i) {
    if (again.tensors[i].first != ck.tensors[i].first ||
        !again.tensors[i].second.bitwise_equal(ck.tensors[i].second) ||
        again.tensors[i].second.shape() != ck.tensors[i].second.shape()) {
      fuzz_fail("the round trip changed a tensor", ck.tensors[i].first);
    }
  }
  return 0;
}
