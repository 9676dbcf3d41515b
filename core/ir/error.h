/// \file
/// loom's one error model. Every user-facing failure is a loom::Error (or a subclass) whose
/// message carries the context a user needs: the op or place, what was expected, what was found,
/// and where (Cell path, node, file and offset). The library never aborts on bad input.
///
/// Message shape: "<op or place>: expected <what>, got <actual>" followed by context lines.
///
/// ```
/// throw ShapeError("MatMul: expected inner dims to agree, got (2, 3) and (4, 5)");
/// ```
#pragma once

#include <stdexcept>
#include <string>

namespace loom {

/// Base of every error loom throws on purpose.
class Error : public std::runtime_error {
 public:
  /// An error whose what() is `message`.
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

/// A tensor or abstract value has the wrong shape for an operation.
class ShapeError : public Error {
 public:
  using Error::Error;
};

/// A value has the wrong dtype or kind (tensor where a scalar belongs, Float16 where Int32...).
class TypeError : public Error {
 public:
  using Error::Error;
};

/// A value is of the right type but not acceptable (negative size, unknown name, out of range).
class ValueError : public Error {
 public:
  using Error::Error;
};

/// A file or text cannot be read: malformed IR text, truncated checkpoint, missing file.
class FormatError : public Error {
 public:
  using Error::Error;
};

/// loom broke one of its own invariants (a verifier failure, a pass producing bad IR). Not the
/// user's fault; the message says which invariant.
class InternalError : public Error {
 public:
  using Error::Error;
};

/// Throws a copy of `e` — the same class among the ones above (a subclass defined elsewhere,
/// such as ir::VerifyError, becomes its base here) — with `context` appended to its message
/// (" (in LeNet5/conv1)"). For adding where-information while an error passes up.
[[noreturn]] inline void rethrow_with_context(const Error& e, const std::string& context) {
  const std::string m = e.what() + context;
  if (dynamic_cast<const ShapeError*>(&e)) throw ShapeError(m);
  if (dynamic_cast<const TypeError*>(&e)) throw TypeError(m);
  if (dynamic_cast<const ValueError*>(&e)) throw ValueError(m);
  if (dynamic_cast<const FormatError*>(&e)) throw FormatError(m);
  if (dynamic_cast<const InternalError*>(&e)) throw InternalError(m);
  throw Error(m);
}

}  // namespace loom
