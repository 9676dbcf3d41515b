// A count on the `loom` command line ("--top 5", "--repeat 1000"): the text as a whole is a
// non-negative decimal integer, else nullopt (the caller says which flag and what it expects).
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <system_error>

namespace loom::tools {

inline std::optional<std::int64_t> parse_count(const std::string& s) {
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

}  // namespace loom::tools
