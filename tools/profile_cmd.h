// `loom profile show DIR [--rank R] [--top N] [--csv]`: a profile folder (`loom train --profile
// DIR` writes one; debug/profile_reader.h reads it) as tables for a terminal. Prints:
//   - a header: the folder, model, ranks, threads, the steps profiled, the machine's fp32 peak
//     GFLOP/s and CPU, and what else was recorded (memory plan, communication buckets);
//   - the step breakdown of rank R (default 0): one row per profiled step (total, data wait,
//     compile, forward, backward, optimizer, communication, communication wait, host overhead, in
//     ms), then their average over the steps after the first one that compiled, each phase with
//     its % of the step;
//   - the op-type table: calls, total ms, % of step time, average µs, and GFLOP/s with % of peak
//     where the type counts FLOPs, else GB/s;
//   - the top N (default 10) nodes by time with their role ("backward of <forward node>"), Cell
//     and file:line;
//   - with several ranks: for each step the slowest rank — the one with the most work (interval
//     minus communication wait), which the others wait for — its work and the spread to the
//     fastest; a per-rank summary; and last the slowest rank overall.
// --csv prints the same tables as CSV (each after a "# title" line) for scripts.
// Exit status: 0; 2 on a usage error or bad input (a missing folder, a missing or malformed
// file), with the message naming the file on stderr.
#pragma once

#include <string>
#include <vector>

namespace loom::tools {

// args: what follows "profile" on the command line.
int profile_command(const std::vector<std::string>& args);

}  // namespace loom::tools
