// `loom profile show` (tools/profile_cmd.h): every section is a Table, printed aligned for a
// terminal or, with --csv, as CSV.
#include "tools/profile_cmd.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "core/ir/error.h"
#include "debug/profile_reader.h"
#include "tools/parse_count.h"

namespace loom::tools {
namespace {

constexpr char kProfileHelp[] =
    "usage: loom profile show DIR [--rank R] [--top N] [--csv]\n"
    "Reads a profile folder (`loom train --profile DIR` writes one: profile_info_{r}.json,\n"
    "cpu_op_type_info_{r}.csv, cpu_op_detail_info_{r}.csv, step_trace_{r}.csv, and with\n"
    "--profile-memory / --profile-communication memory_plan_{r}.csv, communication_{r}.csv)\n"
    "and prints, for rank R:\n"
    "  - the step breakdown: each profiled step's total, data wait, compile, forward,\n"
    "    backward, optimizer, communication, communication wait and host overhead (ms), and\n"
    "    their average over the steps after the first one that compiled, with % of the step;\n"
    "  - the op types: calls, total ms, % of step time, average us, GFLOP/s and % of the\n"
    "    machine's fp32 peak where the type counts FLOPs, else GB/s;\n"
    "  - the top N nodes by time with their role, Cell and file:line;\n"
    "and with several ranks the slowest rank of each step (the most work: interval minus\n"
    "communication wait; the others wait for it in the all-reduce) and a per-rank summary.\n"
    "The timeline, cpu_timeline_display_{r}.json, opens in https://ui.perfetto.dev.\n"
    "options:\n"
    "  --rank R   the rank whose breakdown and tables are printed (default 0)\n"
    "  --top N    how many nodes to list (default 10; 0: none)\n"
    "  --csv      print the tables as CSV, each after a \"# title\" line\n"
    "  -h, --help this text\n"
    "Exit status (as every loom command): 0; 1 on bad input (a missing folder, a missing or\n"
    "malformed file; the message names it); 2 on a usage error.\n";

constexpr std::int64_t kDefaultTop = 10;

int usage(const std::string& message) {
  std::cerr << "loom profile: " << message << "\n(see `loom profile --help`)\n";
  return 2;
}

// A number with `digits` decimals; "-" for NaN (a value the profile does not have).
std::string fixed(double v, int digits) {
  if (std::isnan(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}
std::string ms(double us) { return fixed(us / 1000.0, 3); }
std::string percent(double part, double whole) {
  return whole > 0 ? fixed(100.0 * part / whole, 1) : "-";
}

// "1-3, 5, 7-10"
std::string step_ranges(const std::vector<std::int64_t>& steps) {
  std::string s;
  for (std::size_t i = 0; i < steps.size();) {
    std::size_t j = i;
    while (j + 1 < steps.size() && steps[j + 1] == steps[j] + 1) ++j;
    s += (s.empty() ? "" : ", ") + std::to_string(steps[i]) +
         (j > i ? "-" + std::to_string(steps[j]) : "");
    i = j + 1;
  }
  return s;
}

std::string plural(std::size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

// Columns in characters as a terminal shows them (UTF-8: continuation bytes take no column).
std::size_t display_width(const std::string& s) {
  return static_cast<std::size_t>(std::count_if(
      s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

struct Table {
  std::string title;
  std::vector<std::string> header;
  std::vector<bool> right;  // right-aligned columns (numbers)
  std::vector<std::vector<std::string>> rows;

  void print(std::ostream& out, bool csv) const {
    if (csv) {
      out << "# " << title << "\n";
      for (const auto* row : all()) {
        for (std::size_t c = 0; c < row->size(); ++c) {  // "-" (no value) as an empty field
          out << (c ? "," : "") << ((*row)[c] == "-" ? "" : csv_field((*row)[c]));
        }
        out << "\n";
      }
      out << "\n";
      return;
    }
    out << title << "\n";
    std::vector<std::size_t> width(header.size(), 0);
    for (const auto* row : all()) {
      for (std::size_t c = 0; c < row->size(); ++c) {
        width[c] = std::max(width[c], display_width((*row)[c]));
      }
    }
    for (const auto* row : all()) {
      std::string line = "  ";
      for (std::size_t c = 0; c < row->size(); ++c) {
        const std::string pad(width[c] - display_width((*row)[c]), ' ');
        line += (c ? "  " : "") + (right[c] ? pad + (*row)[c] : (*row)[c] + pad);
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out << line << "\n";
    }
  }

 private:
  std::vector<const std::vector<std::string>*> all() const {
    std::vector<const std::vector<std::string>*> v = {&header};
    for (const auto& r : rows) v.push_back(&r);
    return v;
  }
};

// Lines before the tables; "# " in front of each with --csv.
void note(std::ostream& out, bool csv, const std::string& line) {
  out << (csv ? "# " : "") << line << "\n";
}

void print_header(std::ostream& out, bool csv, const debug::ProfileDir& p,
                  const debug::RankProfile& rank) {
  const debug::ProfileInfo& info = rank.info;
  std::string ranks = plural(p.ranks.size(), "rank", "ranks");
  if (p.ranks.size() > 1) ranks += " (tables below: rank " + std::to_string(info.rank) + ")";
  note(out, csv, "profile " + p.path + ": model " + info.model + ", " + ranks + ", " +
                     plural(static_cast<std::size_t>(info.threads), "thread", "threads"));
  note(out, csv, "steps profiled: " + step_ranges(info.steps) + " (" +
                     plural(info.steps.size(), "step", "steps") + "; window " +
                     std::to_string(info.start_step) + "-" + std::to_string(info.stop_step) + ")");
  if (info.device.empty()) {
    note(out, csv, "machine: " + (info.cpu.empty() ? std::string("unknown CPU") : info.cpu) +
                       ", fp32 FMA peak " + fixed(info.peak_gflops, 1) + " GFLOP/s");
  } else {
    note(out, csv, "device: " + info.device + "; fp32 peak " + fixed(info.peak_gflops, 1) +
                       " GFLOP/s (SMs x lanes x 2 x clock)");
  }
  std::string memory = "memory: not recorded (--profile-memory)";
  if (rank.memory_plan) {
    std::int64_t end = 0;
    for (const debug::MemoryPlanRow& b : *rank.memory_plan) end = std::max(end, b.offset + b.bytes);
    memory = "memory plan: " + plural(rank.memory_plan->size(), "buffer", "buffers") + " in " +
             fixed(static_cast<double>(end) / (1024.0 * 1024.0), 2) + " MiB";
  }
  std::string communication = "communication: not recorded (--profile-communication)";
  if (rank.communication) {
    double bytes = 0, duration = 0, overlap = 0;
    std::vector<std::int64_t> steps;
    for (const debug::CommunicationRow& c : *rank.communication) {
      bytes += static_cast<double>(c.bytes);
      duration += c.duration;
      overlap += c.overlap;
      if (std::find(steps.begin(), steps.end(), c.step) == steps.end()) steps.push_back(c.step);
    }
    communication = "communication: " + plural(rank.communication->size(), "bucket", "buckets");
    if (!steps.empty()) {
      communication += ", " + fixed(bytes / steps.size() / (1024.0 * 1024.0), 2) +
                       " MiB per step, " + percent(overlap, duration) +
                       "% overlapped with kernels";
    }
  }
  note(out, csv, memory + "; " + communication);
  if (!csv) out << "\n";
}

void print_steps(std::ostream& out, bool csv, const debug::RankProfile& rank) {
  Table t;
  t.title = "step breakdown, rank " + std::to_string(rank.info.rank) +
            " (ms; a step runs from its begin to its end, the data wait before it excluded)";
  t.header = {"step",    "total",     "data wait", "compile",   "forward",
              "backward", "optimizer", "comm",     "comm wait", "host overhead"};
  t.right.assign(t.header.size(), true);
  for (const debug::StepRow& s : rank.steps) {
    t.rows.push_back({std::to_string(s.step), ms(s.total), ms(s.data_wait), ms(s.compile),
                      ms(s.forward), ms(s.backward), ms(s.optimizer), ms(s.communication),
                      ms(s.communication_wait), ms(s.host_overhead)});
  }
  t.print(out, csv);
  if (!csv) out << "\n";

  const debug::StepAverage avg = debug::average_steps(rank);
  Table a;
  const std::string steps = step_ranges(avg.steps);
  const std::size_t n = avg.steps.size();
  if (!avg.compiled_step) {
    a.title = "average over " + plural(n, "step", "steps") + " (" + steps + "; none compiled)";
  } else if (!avg.steady) {
    a.title = "average over step " + steps + " alone (it compiled, and no step after it was "
              "profiled)";
  } else {
    a.title = "average over " + plural(n, "step", "steps") + " (" + steps + ", after step " +
              std::to_string(*avg.compiled_step) + ", which compiled)";
  }
  a.header = {"phase", "ms", "% of step"};
  a.right = {false, true, true};
  const debug::StepPhases& m = avg.mean;
  const std::pair<const char*, double> phases[] = {
      {"total", m.total},
      {"data wait (before the step)", m.data_wait},
      {"compile", m.compile},
      {"forward", m.forward},
      {"backward", m.backward},
      {"optimizer", m.optimizer},
      {"communication (its thread)", m.communication},
      {"communication wait", m.communication_wait},
      {"host overhead", m.host_overhead}};
  for (const auto& [name, v] : phases) a.rows.push_back({name, ms(v), percent(v, m.total)});
  a.print(out, csv);
  if (!csv) out << "\n";
}

// GFLOP/s, % of peak and GB/s of a row: what the file says, or computed from the totals where
// it leaves them empty. FLOP rates where the op counts FLOPs, else the byte rate.
struct Rates {
  std::string gflops, peak, gbs;
};
Rates rates(double flops, double gflops_per_s, double peak_percent, double bytes, double gb_per_s,
            double total_us, double peak_gflops) {
  Rates r{"-", "-", "-"};
  if (flops > 0) {
    const double g = !std::isnan(gflops_per_s) ? gflops_per_s
                     : total_us > 0            ? flops / total_us / 1e3
                                               : std::nan("");
    r.gflops = fixed(g, 1);
    r.peak = !std::isnan(peak_percent) ? fixed(peak_percent, 1)
             : peak_gflops > 0         ? fixed(100.0 * g / peak_gflops, 1)
                                       : "-";
  } else {
    r.gbs = fixed(!std::isnan(gb_per_s) ? gb_per_s
                  : total_us > 0        ? bytes / total_us / 1e3
                                        : std::nan(""),
                  2);
  }
  return r;
}

void print_op_types(std::ostream& out, bool csv, const debug::RankProfile& rank) {
  Table t;
  t.title = "op types, rank " + std::to_string(rank.info.rank) +
            " (all profiled steps; GFLOP/s and % of peak where the type counts FLOPs, else GB/s)";
  t.header = {"op type", "calls", "total ms", "% of step", "avg us", "GFLOP/s", "% peak", "GB/s"};
  t.right = {false, true, true, true, true, true, true, true};
  for (const debug::OpTypeRow& o : rank.op_types) {
    const Rates r = rates(o.flops, o.gflops_per_s, o.peak_percent, o.bytes, o.gb_per_s,
                          o.total_time, rank.info.peak_gflops);
    t.rows.push_back({o.op_type, std::to_string(o.occurrences), ms(o.total_time),
                      fixed(o.proportion, 1), fixed(o.avg_time, 1), r.gflops, r.peak, r.gbs});
  }
  t.print(out, csv);
  if (!csv) out << "\n";
}

void print_top_nodes(std::ostream& out, bool csv, const debug::RankProfile& rank,
                     std::size_t top) {
  std::vector<const debug::OpDetailRow*> nodes;
  for (const debug::OpDetailRow& d : rank.op_details) nodes.push_back(&d);
  std::stable_sort(nodes.begin(), nodes.end(), [](const auto* a, const auto* b) {
    return a->total_time > b->total_time;
  });
  if (nodes.size() > top) nodes.resize(top);
  Table t;
  t.title = "top " + std::to_string(nodes.size()) + " nodes by time, rank " +
            std::to_string(rank.info.rank) + " (of " +
            std::to_string(rank.op_details.size()) + ")";
  t.header = {"#", "node", "op type", "calls", "total ms", "% of step", "avg us",
              "role", "cell", "file:line"};
  t.right = {true, false, false, true, true, true, true, false, false, false};
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const debug::OpDetailRow& d = *nodes[i];
    const std::string role = d.forward.empty() ? d.role : d.role + " of " + d.forward;
    const std::string where =
        d.file.empty() ? "-" : d.file + (d.line > 0 ? ":" + std::to_string(d.line) : "");
    t.rows.push_back({std::to_string(i + 1), d.op_name, d.op_type, std::to_string(d.occurrences),
                      ms(d.total_time), fixed(d.proportion, 1), fixed(d.avg_time, 1),
                      role.empty() ? "-" : role, d.cell.empty() ? "-" : d.cell, where});
  }
  t.print(out, csv);
  if (!csv) out << "\n";
}

void print_ranks(std::ostream& out, bool csv, const debug::ProfileDir& p) {
  const std::vector<debug::SlowestRank> slowest = debug::slowest_ranks(p);
  Table t;
  t.title = "slowest rank per step (work = interval - communication wait: the rank with the "
            "most is the one the others wait for)";
  t.header = {"step",         "slowest rank", "slowest work ms", "fastest rank",
              "fastest work ms", "spread ms", "spread %"};
  t.right.assign(t.header.size(), true);
  for (const debug::SlowestRank& s : slowest) {
    t.rows.push_back({std::to_string(s.step), std::to_string(s.slowest_rank), ms(s.slowest_work),
                      std::to_string(s.fastest_rank), ms(s.fastest_work), ms(s.spread()),
                      percent(s.spread(), s.slowest_work)});
  }
  t.print(out, csv);
  if (!csv) out << "\n";

  Table r;
  r.title = "per-rank summary (each rank's steps after its compiling one)";
  r.header = {"rank", "steps", "step ms", "work ms", "comm ms", "comm wait ms", "slowest in"};
  r.right.assign(r.header.size(), true);
  int worst = 0, best = 0;
  std::vector<double> mean_work(p.ranks.size(), 0);
  for (std::size_t i = 0; i < p.ranks.size(); ++i) {
    const debug::RankProfile& rank = p.ranks[i];
    const debug::StepAverage avg = debug::average_steps(rank);
    for (const debug::StepRow& s : rank.steps) {
      if (std::find(avg.steps.begin(), avg.steps.end(), s.step) != avg.steps.end()) {
        mean_work[i] += debug::step_work(s) / static_cast<double>(avg.steps.size());
      }
    }
    const auto times = std::count_if(slowest.begin(), slowest.end(), [&](const auto& s) {
      return s.slowest_rank == rank.info.rank;
    });
    r.rows.push_back({std::to_string(rank.info.rank), std::to_string(avg.steps.size()),
                      ms(avg.mean.total), ms(mean_work[i]), ms(avg.mean.communication),
                      ms(avg.mean.communication_wait),
                      std::to_string(times) + " of " + std::to_string(slowest.size())});
    if (mean_work[i] > mean_work[worst]) worst = static_cast<int>(i);
    if (mean_work[i] < mean_work[best]) best = static_cast<int>(i);
  }
  r.print(out, csv);
  note(out, csv, "slowest rank overall: rank " + std::to_string(worst) + " (mean work " +
                     ms(mean_work[worst]) + " ms; fastest: rank " + std::to_string(best) + ", " +
                     ms(mean_work[best]) + " ms; spread " +
                     percent(mean_work[worst] - mean_work[best], mean_work[worst]) + "%)");
}

int run_show(const std::string& dir, int rank_index, std::size_t top, bool csv) {
  const debug::ProfileDir p = debug::open_profile(dir);
  const debug::RankProfile& rank = p.rank(rank_index);
  std::ostream& out = std::cout;
  print_header(out, csv, p, rank);
  print_steps(out, csv, rank);
  print_op_types(out, csv, rank);
  if (top > 0) print_top_nodes(out, csv, rank, top);
  if (p.ranks.size() > 1) print_ranks(out, csv, p);
  return 0;
}

}  // namespace

int profile_command(const std::vector<std::string>& args) {
  if (args.empty()) {
    std::cerr << kProfileHelp;
    return 2;
  }
  if (std::find(args.begin(), args.end(), "-h") != args.end() ||
      std::find(args.begin(), args.end(), "--help") != args.end() || args[0] == "help") {
    std::cout << kProfileHelp;
    return 0;
  }
  if (args[0] != "show") return usage("expected `loom profile show DIR`, got '" + args[0] + "'");
  std::vector<std::string> dirs;
  std::int64_t rank = 0, top = kDefaultTop;
  bool csv = false;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--csv") {
      csv = true;
    } else if (a == "--rank" || a == "--top") {
      const std::optional<std::int64_t> n =
          i + 1 < args.size() ? parse_count(args[i + 1]) : std::nullopt;
      if (!n || *n > 1000000) {
        return usage("expected a non-negative integer after " + a + ", got " +
                     (i + 1 < args.size() ? "'" + args[i + 1] + "'" : std::string("nothing")));
      }
      (a == "--rank" ? rank : top) = *n;
      ++i;
    } else if (a.size() > 1 && a[0] == '-') {
      return usage("unknown option '" + a + "'");
    } else {
      dirs.push_back(a);
    }
  }
  if (dirs.size() != 1) {
    return usage("expected one profile folder, got " + std::to_string(dirs.size()));
  }
  try {
    return run_show(dirs[0], static_cast<int>(rank), static_cast<std::size_t>(top), csv);
  } catch (const Error& e) {
    std::cout << std::flush;
    std::cerr << "loom profile: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {  // std::bad_alloc...: still a message and status 1
    std::cout << std::flush;
    std::cerr << "loom profile: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace loom::tools
