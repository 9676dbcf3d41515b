// `loom train <model>` and `loom eval <model>` over the model zoo's recipes (models/zoo.h): the
// project's main job (LeNet-5 on Fashion-MNIST), run through nn::Model, with checkpoints and
// resume (checkpoint/train_state.h) and TensorBoard summaries (summary/collector.h); and
// `loom summary show DIR`. Options: `loom train --help` (kTrainHelp in train_cmd.cc); the
// README's "Training" section shows the output.
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
// args: what follows "summary": `show DIR|FILE` (summary::show's listing and exit status; 1 with
// the message when DIR does not exist), 2 on a usage error.
int summary_command(const std::vector<std::string>& args);

}  // namespace loom::tools
