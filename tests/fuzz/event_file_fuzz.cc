// libFuzzer target for the event-file reader (summary::parse_event_file, and describe(), which
// `loom summary show` prints from). An input's first byte picks how the rest is read:
//   even: as the file's bytes, unchanged (framing, lengths and CRCs as the fuzzer made them);
//   odd:  as payloads, each a 2-byte little-endian length and that many bytes, framed here with
//         correct CRCs (summary::frame_record), so that the mutations reach the Event parser and
//         describe() instead of stopping at the first CRC.
// Either way the reader must return (never throw): the records before the first bad one, and an
// error for a bad one; a framed file of n payloads gives n records or an error naming the first
// that is not an Event. describe() must not throw on what was read.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <sstream>
#include <string>

#include "summary/event_writer.h"
#include "summary/reader.h"
#include "tests/fuzz/fuzz_fail.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace loom::summary;
  if (size == 0) return 0;
  const bool framed = (data[0] & 1) != 0;
  std::string file;
  std::size_t payloads = 0;
  if (!framed) {
    file.assign(reinterpret_cast<const char*>(data) + 1, size - 1);
  } else {
    std::size_t pos = 1;
    while (pos + 2 <= size) {
      std::size_t n = data[pos] | (static_cast<std::size_t>(data[pos + 1]) << 8);
      pos += 2;
      if (n > size - pos) n = size - pos;
      file += frame_record(std::string_view(reinterpret_cast<const char*>(data) + pos, n));
      pos += n;
      ++payloads;
    }
  }
  EventFileContents c;
  try {
    c = parse_event_file(file, "fuzz.tfevents");
  } catch (const std::exception& e) {
    fuzz_fail("the reader threw", e.what());
  }
  if (framed && c.records.size() != payloads &&
      (!c.error || c.error->find("is not an Event") == std::string::npos)) {
    fuzz_fail("a correctly framed file lost records without saying a payload is not an Event",
         c.error.value_or("(no error)"));
  }
  try {
    std::ostringstream out;
    describe("fuzz.tfevents", c, out);
  } catch (const std::exception& e) {
    fuzz_fail("describe threw", e.what());
  }
  return 0;
}
