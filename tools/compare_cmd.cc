// `loom compare` (tools/compare_cmd.h).
#include "tools/compare_cmd.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "core/ir/error.h"
#include "debug/compare.h"
#include "debug/dump_reader.h"
#include "tools/parse_count.h"

namespace loom::tools {
namespace {

constexpr char kCompareHelp[] =
    "usage: loom compare A B [--mapping FILE] [--csv OUT.csv] [--graph G] [--iteration I]\n"
    "                        [--rank R] [--all]\n"
    "Compares two dumps in MindSpore's layout (`loom train --dump DIR` writes one; A is the run\n"
    "under test, B the reference) tensor by tensor, matching graph id, iteration and name\n"
    "(Conv2D-op3.output.0, Parameter.fc1.weight.output.0), with msprobe's measures: Cosine,\n"
    "EucDist, MaxAbsErr, MaxRelativeErr, the one- and five-thousandths error ratios; and\n"
    "MindStudio's: mean absolute error, RMSE, relative Euclidean distance, KL divergence.\n"
    "A tensor fails (msprobe's rule) when Cosine < 0.99 and MaxAbsErr > 0.001, or Cosine < 0.9,\n"
    "or MaxAbsErr > 1, or NaN/Inf sit at different places, or the shapes differ; with no cosine\n"
    "(one element, one side all zeros) when MaxAbsErr > 0.001. The first failing node in A's\n"
    "execution order is named with its op, Cell path, source line and role.\n"
    "A and B: a dump folder holding one rank_{r} folder, or a rank_{r} folder.\n"
    "options:\n"
    "  --mapping FILE   compare B's tensors under A's names: a JSON object\n"
    "                   {\"<B key>\": \"<A key>\", ...}; B tensors it does not name are skipped\n"
    "  --csv OUT.csv    write every compared tensor with msprobe's column names (NPU = A,\n"
    "                   Bench = B), then loom's (MeanAbsErr, RMSE, RelativeEucDist,\n"
    "                   KLDivergence, Op Type, Cell, File, Line, Role, Forward, ...)\n"
    "  --graph G        only graph id G (0: the training step, then the evaluation graphs)\n"
    "  --iteration I    only iteration I (a training step's is its global step - 1)\n"
    "  --rank R         the rank_R folder when a dump holds several\n"
    "  --all            print every row (default: the first 20 and the failing rows)\n"
    "  -h, --help       this text\n"
    "Exit status (as every loom command): 0 every compared tensor passes; 3 some tensor fails;\n"
    "1 bad input (missing or malformed dump, truncated .npy, bad mapping, no tensor in common);\n"
    "2 usage error (an unknown option, a bad value, a missing argument).\n";

constexpr std::size_t kHeadRows = 20;     // rows shown from the start
constexpr std::size_t kMoreFailing = 20;  // failing rows shown after those
constexpr std::size_t kNamesListed = 5;   // names listed for "only in A/B"

int usage(const std::string& message) {
  std::cerr << "loom compare: " << message << "\n(see `loom compare --help`)\n";
  return 2;
}

std::string num(double v) {
  if (std::isnan(v)) return "N/A";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// Rows padded to the widest cell; `right` columns right-aligned; no trailing spaces.
void print_table(std::ostream& out, const std::vector<std::vector<std::string>>& rows,
                 const std::vector<bool>& right) {
  std::vector<std::size_t> width;
  for (const auto& row : rows) {
    if (row.size() == 1) continue;  // a full-width line ("... 12 rows not shown")
    for (std::size_t c = 0; c < row.size(); ++c) {
      if (width.size() <= c) width.push_back(0);
      width[c] = std::max(width[c], row[c].size());
    }
  }
  for (const auto& row : rows) {
    std::string line = "  ";
    if (row.size() == 1) {
      line += row[0];
    } else {
      for (std::size_t c = 0; c < row.size(); ++c) {
        if (c) line += "  ";
        const std::string pad(width[c] - row[c].size(), ' ');
        line += (c < right.size() && right[c]) ? pad + row[c] : row[c] + pad;
      }
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
}

std::string tensor_list(const std::vector<debug::DumpTensor>& ts) {
  std::string s;
  for (std::size_t i = 0; i < ts.size() && i < kNamesListed; ++i) {
    s += (i ? ", " : "") + ts[i].key() + " (graph " + std::to_string(ts[i].graph) +
         ", iteration " + std::to_string(ts[i].iteration) + ")";
  }
  if (ts.size() > kNamesListed) {
    s += ", ... (" + std::to_string(ts.size() - kNamesListed) + " more)";
  }
  return s;
}

std::vector<std::string> table_row(std::size_t index, const debug::CompareRow& r, bool mapped) {
  const debug::TensorMetrics& m = r.metrics;
  const bool unmatched = r.accuracy == debug::Accuracy::kUnmatched;
  auto measure = [&](double v) { return unmatched ? std::string("-") : num(v); };
  std::vector<std::string> row = {std::to_string(index + 1), std::to_string(r.a.graph),
                                  std::to_string(r.a.iteration), r.a_name()};
  if (mapped) row.push_back(r.b_name());
  row.push_back(r.a_dtype == r.b_dtype ? r.a_dtype : r.a_dtype + "/" + r.b_dtype);
  row.push_back(shape_to_string(r.a_shape));
  row.push_back(measure(m.cosine));
  row.push_back(measure(m.max_abs_err));
  row.push_back(measure(m.max_relative_err));
  row.push_back(measure(m.one_thousandth_err_ratio));
  row.push_back(r.passed() ? "pass" : std::string("FAIL (") + debug::accuracy_name(r.accuracy) +
                                          ")");
  row.push_back(r.message);
  return row;
}

int run_compare(const std::string& a_path, const std::string& b_path,
                const std::optional<std::string>& mapping, const std::optional<std::string>& csv,
                const debug::CompareOptions& base, std::optional<int> rank, bool all) {
  debug::CompareOptions options = base;
  if (mapping) options.mapping = debug::load_mapping(*mapping);
  const debug::DumpDir a = debug::open_dump(a_path, rank);
  const debug::DumpDir b = debug::open_dump(b_path, rank);
  const debug::CompareResult r = debug::compare_dumps(a, b, options);
  if (csv) debug::write_compare_csv(r, *csv);

  std::cout << "A: " << a.path << " (rank " << a.rank << ", " << a.tensors.size()
            << " tensors)\nB: " << b.path << " (rank " << b.rank << ", " << b.tensors.size()
            << " tensors)";
  if (mapping) {
    std::cout << "\nmapping: " << *mapping << " (" << options.mapping.size()
              << " entries; B's names shown in the bench column)";
  }
  std::cout << "\n";

  const bool mapped = !options.mapping.empty();
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header = {"#", "graph", "iter", "tensor"};
  if (mapped) header.push_back("bench");
  for (const char* h : {"dtype", "shape", "Cosine", "MaxAbsErr", "MaxRelErr", "ratio<0.001",
                        "result", "note"}) {
    header.push_back(h);
  }
  rows.push_back(header);
  std::size_t skipped = 0, failing_shown = 0, shown = 0;
  auto flush_skipped = [&] {
    if (skipped) {
      rows.push_back({"... " + std::to_string(skipped) + (skipped == 1 ? " row" : " rows") +
                      " not shown"});
    }
    skipped = 0;
  };
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    const debug::CompareRow& row = r.rows[i];
    bool show = all || i < kHeadRows;
    if (!show && !row.passed() && failing_shown < kMoreFailing) {
      show = true;
      ++failing_shown;
    }
    if (!show) {
      ++skipped;
      continue;
    }
    flush_skipped();
    rows.push_back(table_row(i, row, mapped));
    ++shown;
  }
  flush_skipped();
  std::vector<bool> right = {true, true, true, false};
  if (mapped) right.push_back(false);
  for (bool b : {false, false, true, true, true, true, false, false}) right.push_back(b);
  print_table(std::cout, rows, right);
  if (shown < r.rows.size()) {
    std::cout << "  (--all prints every row" << (csv ? "" : "; --csv FILE writes them") << ")\n";
  }

  if (!r.only_in_a.empty()) {
    std::cout << "only in A (not compared): " << r.only_in_a.size() << ": "
              << tensor_list(r.only_in_a) << "\n";
  }
  if (!r.only_in_b.empty()) {
    std::cout << "only in B (not compared): " << r.only_in_b.size() << ": "
              << tensor_list(r.only_in_b) << "\n";
  }
  if (!r.not_mapped.empty()) {
    std::cout << "not in the mapping (B, not compared): " << r.not_mapped.size() << ": "
              << tensor_list(r.not_mapped) << "\n";
  }
  if (!r.unused_mappings.empty()) {
    std::cout << "mapping entries naming no tensor of B: " << r.unused_mappings.size() << "\n";
  }
  if (const debug::CompareRow* f = r.first_failure()) {
    const debug::TensorMetrics& m = f->metrics;
    std::cout << "first failing node (A's execution order): " << debug::describe_node(*f) << "\n"
              << "  tensor " << f->a_name() << " (graph " << f->a.graph << ", iteration "
              << f->a.iteration << "): " << debug::accuracy_name(f->accuracy);
    if (f->accuracy != debug::Accuracy::kUnmatched) {
      std::cout << ", Cosine " << num(m.cosine) << ", MaxAbsErr " << num(m.max_abs_err)
                << ", MaxRelativeErr " << num(m.max_relative_err) << ", RMSE " << num(m.rmse);
    }
    if (!f->message.empty()) std::cout << "; " << f->message;
    std::cout << "\n  A: " << f->a.path << "\n  B: " << f->b.path << "\n";
  }
  if (csv) std::cout << "csv: " << *csv << " (" << r.rows.size() << " rows)\n";
  std::cout << debug::summary_line(r) << "\n";
  return r.failed() > 0 ? 3 : 0;
}

}  // namespace

int compare_command(const std::vector<std::string>& args) {
  if (args.empty()) {
    std::cerr << kCompareHelp;
    return 2;
  }
  if (std::find(args.begin(), args.end(), "-h") != args.end() ||
      std::find(args.begin(), args.end(), "--help") != args.end() || args[0] == "help") {
    std::cout << kCompareHelp;
    return 0;
  }
  std::vector<std::string> dirs;
  std::optional<std::string> mapping, csv;
  std::optional<int> rank;
  debug::CompareOptions options;
  bool all = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::optional<std::string> {
      if (i + 1 >= args.size()) return std::nullopt;
      return args[++i];
    };
    if (a == "--all") {
      all = true;
    } else if (a == "--mapping" || a == "--csv") {
      const std::optional<std::string> v = value();
      if (!v || v->empty()) return usage("expected a file after " + a);
      (a == "--mapping" ? mapping : csv) = *v;
    } else if (a == "--graph" || a == "--iteration" || a == "--rank") {
      const std::optional<std::string> v = value();
      const std::optional<std::int64_t> n = v ? parse_count(*v) : std::nullopt;
      if (!n || (a == "--rank" && *n > 1000000)) {
        return usage("expected a non-negative integer after " + a + ", got " +
                     (v ? "'" + *v + "'" : std::string("nothing")));
      }
      if (a == "--graph") options.graph = *n;
      if (a == "--iteration") options.iteration = *n;
      if (a == "--rank") rank = static_cast<int>(*n);
    } else if (a.size() > 1 && a[0] == '-') {
      return usage("unknown option '" + a + "'");
    } else {
      dirs.push_back(a);
    }
  }
  if (dirs.size() != 2) {
    return usage("expected two dump folders A and B, got " + std::to_string(dirs.size()) +
                 (dirs.empty() ? "" : " ('" + dirs[0] + (dirs.size() > 1 ? "', ...)" : "')")));
  }
  try {
    return run_compare(dirs[0], dirs[1], mapping, csv, options, rank, all);
  } catch (const Error& e) {
    std::cout << std::flush;
    std::cerr << "loom compare: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {  // std::bad_alloc...: still a message and status 1
    std::cout << std::flush;
    std::cerr << "loom compare: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace loom::tools
