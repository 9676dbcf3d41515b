// `loom debug DUMP_DIR --watch SPEC [--watch SPEC...] [--rank R]`: MindInsight's watch
// conditions (debug/watch.h) over a dump (`loom train --dump DIR` writes one; MindSpore's
// layout), as MindInsight's offline debugger checks a dump. Prints:
//   - a header: the dump folder, its rank, graphs, iterations and files, and the conditions in
//     force (their canonical text, defaults filled in);
//   - one line per hit, in the dump's order (graph, iteration, execution order):
//     "watch: graph 0 iteration 3: gradient_vanishing on conv1.weight: abs_mean 3.2e-10 < 1e-09";
//   - the notes (what could not be checked, and why);
//   - last, the summary: hits by condition, files read, checks made, and the checks not made
//     (a tensor with NaN/Inf under a non-overflow condition; a change condition without a
//     previous iteration).
// Exit status (for scripts): 0 when the conditions were checked and none hit; 1 when there are
// hits; 2 on a usage error or bad input (a malformed --watch spec, a missing or malformed dump, an
// unreadable .npy), with the message on stderr. MindInsight's offline debugger only lists hits.
#pragma once

#include <string>
#include <vector>

namespace loom::tools {

// args: what follows "debug" on the command line.
int debug_command(const std::vector<std::string>& args);

}  // namespace loom::tools
