/// \file
/// verify(): checks the IR's numbered invariants (docs/ir.md "Invariants"). Runs after every pass
/// in debug and test builds. A failure throws VerifyError naming the invariant, the graph and the
/// node, with the printed IR around the offending node.
#pragma once

#include "core/ir/error.h"

namespace loom::ir {

class Module;
class FuncGraph;

struct VerifyOptions {
  /// After inference every node must carry an abstract, and abstracts must agree across calls.
  bool require_abstracts = false;
};

class VerifyError : public InternalError {
 public:
  VerifyError(int invariant, const std::string& message)
      : InternalError(message), invariant_(invariant) {}
  int invariant() const { return invariant_; }  // the number in docs/ir.md

 private:
  int invariant_;
};

/// The entry graph and every graph reachable from it.
void verify(const Module& module, const VerifyOptions& options = {});
void verify(const FuncGraph& graph, const VerifyOptions& options = {});

}  // namespace loom::ir
