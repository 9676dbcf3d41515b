/// \file
/// Reads the text form of the IR (grammar in docs/ir.md) into a new Module.
#pragma once

#include <memory>
#include <string_view>

namespace loom::ir {

class Module;

/// Parses `text`; the first graph in the text is the entry. Throws loom::FormatError with
/// "<filename>:<line>:<col>: expected <what>, got <what>" for malformed text — truncated input,
/// unknown names, wrong attribute types or garbage — and never crashes.
std::unique_ptr<Module> parse_module(std::string_view text,
                                     std::string_view filename = "<input>");

}  // namespace loom::ir
