// A fuzz target's failed check: the target (its source file's name), the stage that failed and
// the details go to stderr, then a trap, which libFuzzer reports as a crash and saves the input.
#pragma once

#include <cstdio>
#include <cstring>
#include <string>

[[noreturn]] inline void fuzz_fail(const char* stage, const std::string& detail,
                                   const char* file = __builtin_FILE()) {
  const char* slash = std::strrchr(file, '/');
  const std::string target(slash ? slash + 1 : file);
  std::fprintf(stderr, "%s: %s\n%s\n", target.substr(0, target.rfind(".cc")).c_str(), stage,
               detail.c_str());
  __builtin_trap();
}
