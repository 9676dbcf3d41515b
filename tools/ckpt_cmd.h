// `loom ckpt show FILE.ckpt [--json]`: what a checkpoint (checkpoint/checkpoint.h) holds.
//   - a header: the file, its size in bytes, its entries (tensors, strings);
//   - one line per entry: the tensors in file order (chunks of one tensor as one entry), then the
//     string entries: name, MindSpore dtype, shape, elements, the CRC-32 (zlib's crc32) of the
//     tensor's bytes as 8 hex digits (compare them between files), and the value of one-element
//     tensors and of strings;
//   - the training state of a training checkpoint (checkpoint/train_state.h): epoch_num,
//     step_num, global_step, loom.seed, the resume position, the optimizer (loom.optimizer, or
//     inferred from the state prefixes of optim/optimizer.h), its learning rate and scalars; or a
//     line saying the file holds parameters only;
//   - a summary: parameters, optimizer states and scalars, other entries (counts and values).
// --json prints the same as one JSON object. Exit status: 0; 1 for a file that cannot be read
// (missing, not a checkpoint, truncated, corrupt: load_checkpoint's message, prefixed
// "loom ckpt: ", on stderr); 2 on a usage error.
#pragma once

#include <string>
#include <vector>

namespace loom::tools {

// args: what follows "ckpt" on the command line.
int ckpt_command(const std::vector<std::string>& args);

}  // namespace loom::tools
