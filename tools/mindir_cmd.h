// MindIR commands of the `loom` tool (mindir/mindir.h):
//   loom export <model> [--ckpt PATH] --output FILE.mindir [--dataset NAME] [--batch N]
//       builds the model zoo's network (models/zoo.h), loads the checkpoint's weights into it
//       (strict: every parameter must be in the file) and exports it in inference mode with an
//       input of (batch, the recipe's input shape for the dataset).
//   loom run MODEL.mindir --input X.npy [--output Y.npy]
//       runs the model (mindir::GraphCell) on the array; prints the output's shape and the
//       first values, or writes the output as .npy.
//   loom mindir show FILE
//       the file's producer and versions, inputs, outputs, ops with counts, parameters with
//       shapes.
// Exit status: 0 on success, 2 on a usage error, 1 on an error while running (the loom::Error's
// message on stderr).
#pragma once

#include <string>
#include <vector>

namespace loom::tools {

// args: what follows "export" / "run" / "mindir" on the command line.
int export_command(const std::vector<std::string>& args);
int run_mindir_command(const std::vector<std::string>& args);
int mindir_command(const std::vector<std::string>& args);

}  // namespace loom::tools
