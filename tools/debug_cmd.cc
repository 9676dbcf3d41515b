// `loom debug` (tools/debug_cmd.h): watch conditions over a dump.
#include "tools/debug_cmd.h"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/ir/error.h"
#include "debug/dump_reader.h"
#include "debug/watch.h"

namespace loom::tools {
namespace {

constexpr char kDebugHelp[] =
    "usage: loom debug DUMP_DIR --watch SPEC [--watch SPEC...] [--rank R]\n"
    "Checks MindInsight's watch conditions on a dump (loom train --dump DIR, MindSpore's\n"
    "layout) and lists the hits, in the dump's order (graph, iteration, execution order).\n"
    "SPEC: conditions separated by ';', each NAME, NAME(PARAM=VALUE, ...), optionally followed\n"
    "by @REGEX choosing the targets (regex_search on a launch's full name, e.g.\n"
    "WithLossCell/_backbone/conv1/Conv2D-op3, or on a parameter's name, e.g. conv1.weight):\n"
    "  weight_initialization(zero_percentage_ge=100 | max_gt | min_lt)   iteration 0 only\n"
    "  weight_overflow  gradient_exploding  tensor_overflow              any NaN or Inf\n"
    "  weight_too_large  gradient_too_large  tensor_too_large  (abs_mean_gt | max_gt | min_gt |\n"
    "                                                            mean_gt)\n"
    "  weight_too_small  gradient_vanishing  tensor_too_small  (abs_mean_lt | max_lt | min_lt |\n"
    "                                                            mean_lt)\n"
    "  tensor_all_zero(zero_percentage_ge=100)\n"
    "  weight_not_changed(rtol=1e-5, atol=1e-8, equal_nan=false)   against the previous iteration\n"
    "  weight_change_too_large(abs_mean_update_ratio_gt=0.1, epsilon=1e-9)\n"
    "  weight_change_too_small(abs_mean_update_ratio_lt=1e-4, epsilon=1e-9)\n"
    "  activation_range  tensor_range  (range_start_inclusive and range_end_inclusive with\n"
    "                                   range_percentage_lt | range_percentage_gt; max_min_lt |\n"
    "                                   max_min_gt)\n"
    "A condition hits when any of its check parameters holds (debug/watch.h has the formulas).\n"
    "Weights: the Parameter files of the network's parameters (not the step's inputs or the\n"
    "optimizer's states); gradients: the Gradient files; tensors: the launches' outputs;\n"
    "activations: those of forward launches.\n"
    "options:\n"
    "  --watch SPEC  the conditions (repeatable: the specs are joined)\n"
    "  --rank R      the rank_R folder when the dump holds several\n"
    "  -h, --help    this text\n"
    "Exit status (as every loom command): 0 checked, no hit; 3 hits found; 1 bad input (a\n"
    "missing or malformed dump, an unreadable .npy); 2 usage error (a malformed spec, an unknown\n"
    "option).\n";

int usage(const std::string& message) {
  std::cerr << "loom debug: " << message << "\n(see `loom debug --help`)\n";
  return 2;
}

std::optional<int> parse_rank(const std::string& s) {
  if (s.empty() || s.size() > 6 || !std::all_of(s.begin(), s.end(), ::isdigit)) return {};
  return std::stoi(s);
}

std::string iteration_span(const std::set<std::int64_t>& its) {
  if (its.empty()) return "none";
  if (its.size() == 1) return std::to_string(*its.begin());
  return std::to_string(*its.begin()) + "-" + std::to_string(*its.rbegin()) + " (" +
         std::to_string(its.size()) + ")";
}

int watch(const std::string& dir, std::optional<int> rank,
          const std::vector<debug::WatchCondition>& conditions) {
  const debug::DumpDir dump = debug::open_dump(dir, rank);

  std::map<std::int64_t, std::set<std::int64_t>> iterations;
  for (const debug::DumpTensor& t : dump.tensors) {
    if (t.iteration >= 0) iterations[t.graph].insert(t.iteration);
  }
  std::cout << "loom debug: " << dump.path << " (rank " << dump.rank << "): "
            << dump.tensors.size() << " files";
  for (const auto& [g, its] : iterations) {
    std::cout << "; graph " << g << " iterations " << iteration_span(its);
  }
  std::cout << "\nconditions: ";
  for (std::size_t i = 0; i < conditions.size(); ++i) {
    std::cout << (i ? "; " : "") << conditions[i].to_string();
  }
  std::cout << "\n";

  const debug::WatchDumpResult r = debug::watch_dump(
      dump, conditions,
      {.on_hit = [](const debug::WatchHit& h) {
        std::cout << debug::format_watch_hit(h) << "\n";
      }});
  for (const std::string& note : r.notes) std::cout << "note: " << note << "\n";

  std::map<std::string, std::int64_t> by_condition;
  for (const debug::WatchHit& h : r.hits) ++by_condition[h.condition];
  std::cout << r.hits.size() << (r.hits.size() == 1 ? " hit" : " hits");
  if (!by_condition.empty()) {
    std::cout << " (";
    bool first = true;
    for (const auto& [c, n] : by_condition) {
      std::cout << (first ? "" : ", ") << c << " " << n;
      first = false;
    }
    std::cout << ")";
  }
  std::cout << " in " << r.tensors << " files read, " << r.checks << " checks; not checked: "
            << r.not_checked_non_finite << " with NaN/Inf, " << r.not_checked_no_previous
            << " without a previous iteration\n";
  return r.hits.empty() ? 0 : 3;
}

}  // namespace

int debug_command(const std::vector<std::string>& args) {
  if (args.empty()) {
    std::cerr << kDebugHelp;
    return 2;
  }
  if (std::find(args.begin(), args.end(), "-h") != args.end() ||
      std::find(args.begin(), args.end(), "--help") != args.end() || args[0] == "help") {
    std::cout << kDebugHelp;
    return 0;
  }
  std::vector<std::string> dirs;
  std::string spec;
  bool watch_given = false;
  std::optional<int> rank;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--watch" || a == "--rank") {
      if (i + 1 >= args.size()) return usage("expected a value after " + a);
      const std::string& v = args[++i];
      if (a == "--watch") {
        spec += (watch_given ? ";" : "") + v;
        watch_given = true;
      } else {
        rank = parse_rank(v);
        if (!rank) return usage("expected a rank (a non-negative integer) after --rank, got '" +
                                v + "'");
      }
    } else if (a.size() > 1 && a[0] == '-') {
      return usage("unknown option '" + a + "'");
    } else {
      dirs.push_back(a);
    }
  }
  if (dirs.size() != 1) {
    return usage(dirs.empty() ? "expected a dump folder"
                              : "expected one dump folder, got " + std::to_string(dirs.size()));
  }
  if (!watch_given) return usage("expected --watch SPEC (the conditions to check)");
  std::vector<debug::WatchCondition> conditions;
  try {
    conditions = debug::parse_watch_spec(spec);  // a malformed spec is a usage error
  } catch (const Error& e) {
    std::cerr << "loom debug: " << e.what() << "\n";
    return 2;
  }
  try {
    return watch(dirs[0], rank, conditions);
  } catch (const Error& e) {
    std::cout << std::flush;
    std::cerr << "loom debug: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {  // std::bad_alloc...: still a message and status 1
    std::cout << std::flush;
    std::cerr << "loom debug: " << dirs[0] << ": " << e.what() << "\n";
    return 1;
  }
}

}  // namespace loom::tools
