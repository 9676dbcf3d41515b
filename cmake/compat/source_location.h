// std::source_location for clang before 15 with libstdc++ (Debian 12's clang 14 and GCC 12's
// library): libstdc++ defines it only where the compiler has __builtin_source_location, which
// clang gained in 15. The fuzz build (LOOM_FUZZ, clang 14) force-includes this header
// (CMakeLists.txt) so that nn/cell.h's call-site arguments compile there; every other build uses
// the library's own type and never sees this file.
#pragma once

#include <source_location>

#if !defined(__cpp_lib_source_location)
#include <cstdint>

namespace std {  // NOLINT: standing in for the missing standard type

struct source_location {
  static constexpr source_location current(const char* file = __builtin_FILE(),
                                           const char* function = __builtin_FUNCTION(),
                                           unsigned line = __builtin_LINE(),
                                           unsigned column = __builtin_COLUMN()) noexcept {
    source_location s;
    s.file_ = file;
    s.function_ = function;
    s.line_ = line;
    s.column_ = column;
    return s;
  }
  constexpr source_location() noexcept = default;
  constexpr std::uint_least32_t line() const noexcept { return line_; }
  constexpr std::uint_least32_t column() const noexcept { return column_; }
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr const char* function_name() const noexcept { return function_; }

 private:
  const char* file_ = "";
  const char* function_ = "";
  std::uint_least32_t line_ = 0;
  std::uint_least32_t column_ = 0;
};

}  // namespace std
#endif
