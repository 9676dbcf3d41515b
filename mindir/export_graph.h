/// \file
/// What a model export writes: a Cell's inference graph, traced in inference mode on example
/// inputs and run through the export pipeline (core/passes/pipeline.h: inline, simplify, dce,
/// fold_constants with the CPU kernels; no fusion), inferred. MindIR export (mindir.h) and ONNX
/// export (onnx/onnx.h) write it.
#pragma once

#include <string>
#include <vector>

#include "core/ir/abstract.h"
#include "nn/cell.h"

namespace loom::mindir {

/// The inference graph of `net` on `example_inputs` (the graph's first parameters; its weights
/// follow). The Cell's training flag is put back. Throws ValueError naming `who` ("MindIR
/// export") when the inference graph assigns state. With `save_graphs_dir`, every stage goes to
/// `DIR/export/NN_<stage>.ir` and `.dot`.
nn::Traced inference_graph(nn::Cell& net, const std::vector<ir::AbstractPtr>& example_inputs,
                           const std::string& who, const std::string& save_graphs_dir = "");

/// Writes `bytes` to `path` atomically (a temporary file in the same directory, fsync'ed, renamed;
/// mode 0644). FormatError naming `who` and the path when it cannot.
void write_file_atomically(const std::string& path, const std::string& bytes,
                           const std::string& who);

}  // namespace loom::mindir
