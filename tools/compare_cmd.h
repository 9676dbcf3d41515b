// `loom compare A B [--mapping FILE] [--csv OUT.csv] [--graph G] [--iteration I] [--rank R]
// [--all]`: two dumps (debug/dump_reader.h; `loom train --dump DIR` writes one) compared tensor by
// tensor with msprobe's measures and pass rule (debug/compare.h). Prints:
//   - one line per side: its folder, rank and number of tensors;
//   - a table in A's execution order, one line per compared tensor (graph, iteration, name,
//     dtype, shape, Cosine, MaxAbsErr, MaxRelativeErr, the one-thousandth error ratio, the result
//     and a note): every row with --all, else the first 20 rows and the failing rows after them
//     (up to 20 more), the rows left out counted in their place;
//   - the tensors only in A / only in B (counted, the first few named; not failures);
//   - the first failing node in A's execution order: op type, op name, full name (Cell path),
//     file:line, role ("backward of <forward scope>"), and its tensor's measures;
//   - with --csv, the CSV's path (msprobe's column names, then loom's; debug/compare.h);
//   - last, the summary: "compared 84 tensors: 84 passed, 0 failed; 3 only in A, 0 only in B".
// Exit status: 0 when every compared tensor passes; 1 when one fails; 2 on a usage error or bad
// input (a missing or malformed dump, a truncated .npy, a bad mapping file, no tensor in common),
// with the message on stderr.
#pragma once

#include <string>
#include <vector>

namespace loom::tools {

// args: what follows "compare" on the command line.
int compare_command(const std::vector<std::string>& args);

}  // namespace loom::tools
