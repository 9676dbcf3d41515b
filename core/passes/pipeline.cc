// The pipelines (docs/passes.md, "Pipelines", has the measurements behind them).
#include "core/passes/pipeline.h"

#include "core/ir/error.h"

namespace loom::passes {

const std::string& pipeline(Purpose purpose) {
  // inline flattens the forward / backward graph pairs autodiff makes; simplify and dce take
  // the residual tuples apart; cse merges what the backward recomputes of the forward; fuse
  // (after everything, as fused ops have no bprop) joins bias-and-activation epilogues and
  // elementwise chains. recompute (training only, after cse, which would merge its
  // recomputations back into the forward values) frees the activations after BatchNorms;
  // combine_updates puts the small parameters' momentum updates into one launch.
  static const std::string kTrain =
      "inline,repeat(simplify,cse,dce),recompute,fuse,combine_updates,dce";
  static const std::string kEval = "inline,repeat(simplify,cse,dce),fuse,dce";
  // MindSpore must be able to read every op: no fuse.
  static const std::string kExport = "inline,repeat(simplify,dce),fold_constants,dce";
  switch (purpose) {
    case Purpose::kTrain: return kTrain;
    case Purpose::kEval: return kEval;
    case Purpose::kExport: return kExport;
  }
  return kTrain;
}

std::string_view purpose_name(Purpose purpose) {
  switch (purpose) {
    case Purpose::kTrain: return "train";
    case Purpose::kEval: return "eval";
    case Purpose::kExport: return "export";
  }
  return "train";
}

Purpose purpose_from_name(std::string_view name) {
  for (Purpose p : {Purpose::kTrain, Purpose::kEval, Purpose::kExport}) {
    if (purpose_name(p) == name) return p;
  }
  throw ValueError("pipeline: expected one of train, eval, export, got '" + std::string(name) +
                   "'");
}

}  // namespace loom::passes
