/// \file
/// Regexes that users write into loom's configuration (a dump configuration's
/// `name-regex(...)` kernels, a watchpoint's `@regex`): checked before std::regex compiles them.
/// libstdc++'s std::regex builds one automaton state per repetition, so `x{100000000}` takes
/// gigabytes and minutes to compile, and a count past 2^63 overflows inside the library
/// (json_config_fuzz found it, and the same in a back-reference's number). A count or a
/// back-reference above kMaxRegexRepeat, or counts whose product exceeds kMaxRegexStates (nested
/// or one after another: a bound, not the exact size), is refused.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace loom::debug {

inline constexpr std::uint64_t kMaxRegexRepeat = 1000;
inline constexpr std::uint64_t kMaxRegexStates = 100000;

/// Why `pattern` is refused ("the repetition count 100000000 in 'x{100000000}' is above 1000"),
/// or nothing when it may be compiled.
inline std::optional<std::string> user_regex_problem(const std::string& pattern) {
  std::uint64_t product = 1;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\') {  // an escaped character, \{ included; \N a back-reference
      std::size_t j = i + 1;
      std::uint64_t v = 0;
      while (j < pattern.size() && std::isdigit(static_cast<unsigned char>(pattern[j]))) {
        v = v > kMaxRegexStates ? v : v * 10 + static_cast<std::uint64_t>(pattern[j] - '0');
        ++j;
      }
      if (v > kMaxRegexRepeat) {
        return "the back-reference " + pattern.substr(i, std::min<std::size_t>(j - i, 24)) +
               (j - i > 24 ? "..." : "") + " is above " + std::to_string(kMaxRegexRepeat);
      }
      i = j > i + 1 ? j - 1 : i + 1;
      continue;
    }
    if (pattern[i] != '{') continue;
    // {n}, {n,} or {n,m}: each count read with a cap, so that no number overflows.
    std::size_t j = i + 1;
    std::uint64_t largest = 0;
    bool digits = false, valid = true;
    for (int part = 0; part < 2 && valid; ++part) {
      std::uint64_t v = 0;
      bool any = false;
      while (j < pattern.size() && std::isdigit(static_cast<unsigned char>(pattern[j]))) {
        v = v > kMaxRegexStates ? v : v * 10 + static_cast<std::uint64_t>(pattern[j] - '0');
        any = true;
        ++j;
      }
      digits |= any;
      if (any && v > largest) largest = v;
      if (part == 0 && j < pattern.size() && pattern[j] == ',') {
        ++j;
        continue;
      }
      break;
    }
    if (!digits || j >= pattern.size() || pattern[j] != '}') continue;  // not a quantifier
    const std::string quantifier = pattern.substr(i, j - i + 1);
    if (largest > kMaxRegexRepeat) {
      return "the repetition count in " + quantifier + " is above " +
             std::to_string(kMaxRegexRepeat);
    }
    product *= largest == 0 ? 1 : largest;
    if (product > kMaxRegexStates) {
      return "its repetition counts (up to " + quantifier + ") multiply to more than " +
             std::to_string(kMaxRegexStates) + " automaton states";
    }
    i = j;
  }
  return std::nullopt;
}

}  // namespace loom::debug
