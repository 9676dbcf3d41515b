// CSV text shared by the debugger's writers (dumps' statistic.csv, loom compare, the profiler's
// tables): RFC 4180 quoting, as Python's csv module and MindSpore's tools read it.
#pragma once

#include <string>

namespace loom::debug {

// A CSV field, quoted when it holds a comma, a quote or a line break (quotes doubled).
inline std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

}  // namespace loom::debug
