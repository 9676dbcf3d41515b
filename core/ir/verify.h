/// \file
/// verify(): checks the IR's numbered invariants (docs/ir.md "Invariants"). Runs after every pass
/// in debug and test builds. A failure throws VerifyError naming the invariant, the graph and the
/// node, with the printed IR around the offending node.
#pragma once

#include "core/ir/error.h"

namespace loom::ir {

class Module;
class FuncGraph;

/// What verify() checks beyond the structural invariants.
struct VerifyOptions {
  /// After inference every node must carry an abstract, and abstracts must agree across calls.
  bool require_abstracts = false;
};

/// What verify() throws: an InternalError naming the violated invariant, the graph and the
/// node, with the printed IR around the offending node.
class VerifyError : public InternalError {
 public:
  /// A violation of invariant number `invariant`, described by `message`.
  VerifyError(int invariant, const std::string& message)
      : InternalError(message), invariant_(invariant) {}
  int invariant() const { return invariant_; }  ///< The invariant's number in docs/ir.md.

 private:
  int invariant_;
};

/// Checks the entry graph and every graph reachable from it (nothing when there is no entry);
/// throws VerifyError for the first violation.
void verify(const Module& module, const VerifyOptions& options = {});
/// Checks `graph` and every graph reachable from it; throws VerifyError for the first violation.
void verify(const FuncGraph& graph, const VerifyOptions& options = {});

}  // namespace loom::ir
