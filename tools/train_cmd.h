// `loom train <model>` and `loom eval <model>`: the project's main job (LeNet-5 on
// Fashion-MNIST), run through nn::Model. Options: `loom train --help` (kTrainHelp in
// train_cmd.cc); the README's "Training" section shows the output.
#pragma once

#include <string>
#include <vector>

namespace loom::tools {

// args: what follows "train" / "eval" on the command line. Returns the exit status: 0 on success,
// 2 on a usage error (unknown flag, bad value; the message names the flag and says what was
// expected), 1 on an error while running (missing data files...: the loom::Error's message,
// prefixed "loom train: ", on stderr).
int train_command(const std::vector<std::string>& args);
int eval_command(const std::vector<std::string>& args);

}  // namespace loom::tools
