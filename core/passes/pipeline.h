/// \file
/// The pass pipelines loom runs, defined once: the training step, evaluation and prediction, and
/// MindIR export each take theirs from here, and `ir-opt --pipeline=NAME` runs the same text
/// (docs/passes.md says why each pass is in or out).
///
/// ```
/// PassManager pm = PassManager::parse(passes::pipeline(Purpose::kTrain));
/// ```
///
/// A caller may replace a pipeline for an experiment (`loom train --passes LIST`, checked like
/// any pipeline text).
#pragma once

#include <string>
#include <string_view>

namespace loom::passes {

/// What a pipeline is for.
enum class Purpose {
  kTrain,   ///< the training step: forward, gradient and update in one graph
  kEval,    ///< evaluation and prediction graphs
  kExport,  ///< MindIR export: MindSpore's ops only (no fused ops), constants folded
};

/// The pipeline text of a purpose, in PassManager::parse's syntax.
const std::string& pipeline(Purpose purpose);
/// "train", "eval", "export".
std::string_view purpose_name(Purpose purpose);
/// The purpose named `name`; ValueError listing the names otherwise.
Purpose purpose_from_name(std::string_view name);

}  // namespace loom::passes
