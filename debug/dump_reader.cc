// Reading a dump (debug/dump_reader.h): the folder walk, file names parsed from the right, the
// execution-order, statistic and graph files, and the tensors through data/npy.
//
// The walk is strict, because a dump that is silently half-read gives a comparison that silently
// compares less. Everything under {path}/rank_{r} must be in the layout:
//   .dump_metadata/                      not read (the configuration in force)
//   graphs/ms_output_trace_code_graph_{g}.ir   read; MindSpore's .pb graph files are not read
//   execution_order/ms_execution_order_graph_{g}.csv   read (loom's columns, or MindSpore's bare
//                                        list of full names); ms_global_execution_order_graph_*
//                                        (MindSpore's) is not read
//   {net}/{g}/{iteration}/               tensor files and statistic.csv
//   {net}/{g}/constants/                 MindSpore's constants, read as iteration -1
// Any other entry — a stray file beside the tensors (a .json kernel-args file, an editor's
// backup), a sub-folder of an iteration, a graph or iteration folder whose name is not a number,
// an iteration folder with neither tensor files nor statistic.csv — is a ValueError naming it.
#include "debug/dump_reader.h"

#include <algorithm>
#include <charconv>
#include <exception>
#include <filesystem>
#include <fstream>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>

#include "core/ir/error.h"
#include "data/npy.h"

namespace loom::debug {
namespace {

namespace fs = std::filesystem;

constexpr char kTensorLayout[] =
    "{op_type}.{op_name}.{task}.{stream}.{timestamp}.{input|output}.{slot}.{format}.npy";
constexpr char kExecutionOrderHeader[] =
    "index,op_type,op_name,full_name,scope,file,line,role,forward,depth,graph";
constexpr const char* kExecutionOrderColumns[] = {"index", "op_type", "op_name", "full_name",
                                                  "scope", "file",    "line",    "role",
                                                  "forward", "depth", "graph"};
// The statistic.csv columns a row needs to name its tensor (MindSpore's spelling).
constexpr const char* kStatisticColumns[] = {"Op Type", "Op Name", "IO", "Slot"};

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw ValueError("dump " + where + ": " + what);
}

// A non-negative decimal integer (digits only, no sign, no overflow).
std::optional<std::int64_t> parse_count(std::string_view s) {
  if (s.empty()) return std::nullopt;
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s[0] == '-' || s[0] == '+') {
    return std::nullopt;
  }
  return v;
}

// The number after `prefix` and before `suffix` in `name`, when `name` is exactly that.
std::optional<std::int64_t> number_between(const std::string& name, std::string_view prefix,
                                           std::string_view suffix) {
  if (name.size() <= prefix.size() + suffix.size()) return std::nullopt;
  if (name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  if (name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) return std::nullopt;
  return parse_count(
      std::string_view(name).substr(prefix.size(), name.size() - prefix.size() - suffix.size()));
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("'" + path + "'", "expected a readable file, got one that cannot be opened");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail("'" + path + "'", "expected a readable file, got a read error");
  return text;
}

// The entries of a folder, sorted by name, so that messages do not depend on the file system.
std::vector<fs::directory_entry> entries_of(const fs::path& dir) {
  std::vector<fs::directory_entry> out;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) fail("'" + dir.string() + "'", "expected a readable folder, got: " + ec.message());
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) fail("'" + dir.string() + "'", "expected a readable folder, got: " + ec.message());
    out.push_back(*it);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.path().filename() < b.path().filename();
  });
  return out;
}

std::string names_of(const std::vector<fs::directory_entry>& entries, std::size_t max = 8) {
  std::string s;
  for (std::size_t i = 0; i < entries.size() && i < max; ++i) {
    s += (i ? ", " : "") + entries[i].path().filename().string() +
         (entries[i].is_directory() ? "/" : "");
  }
  if (entries.size() > max) s += ", ... (" + std::to_string(entries.size() - max) + " more)";
  return s.empty() ? "nothing" : s;
}

// One CSV record: its fields and the line it starts on (1-based).
struct CsvRecord {
  std::vector<std::string> fields;
  std::size_t line = 0;
};

// RFC 4180 CSV: comma-separated fields, a field in double quotes may hold commas, line breaks
// and "" for a quote; records end at \n or \r\n. A UTF-8 byte-order mark is skipped and blank
// lines are not records. A quote inside an unquoted field, text after a closing quote and an
// unterminated quote are errors naming the file and line.
std::vector<CsvRecord> parse_csv(const std::string& text, const std::string& file) {
  std::vector<CsvRecord> records;
  std::size_t i = text.rfind("\xEF\xBB\xBF", 0) == 0 ? 3 : 0;
  std::size_t line = 1;
  const std::size_t n = text.size();
  while (i < n) {
    if (text[i] == '\n' || (text[i] == '\r' && i + 1 < n && text[i + 1] == '\n')) {
      i += text[i] == '\r' ? 2 : 1;  // a blank line
      ++line;
      continue;
    }
    CsvRecord rec;
    rec.line = line;
    for (;;) {  // one field per iteration
      std::string field;
      if (i < n && text[i] == '"') {
        const std::size_t start_line = line;
        ++i;
        for (;;) {
          if (i >= n) {
            fail("'" + file + "'", "line " + std::to_string(start_line) +
                                       ": expected a closing quote, got the end of the file");
          }
          if (text[i] == '"') {
            if (i + 1 < n && text[i + 1] == '"') {
              field += '"';
              i += 2;
              continue;
            }
            ++i;
            break;
          }
          if (text[i] == '\n') ++line;
          field += text[i++];
        }
        if (i < n && text[i] != ',' && text[i] != '\n' &&
            !(text[i] == '\r' && i + 1 < n && text[i + 1] == '\n')) {
          fail("'" + file + "'", "line " + std::to_string(line) +
                                     ": expected a comma or the end of the line after a closing "
                                     "quote, got '" + std::string(1, text[i]) + "'");
        }
      } else {
        while (i < n && text[i] != ',' && text[i] != '\n' &&
               !(text[i] == '\r' && i + 1 < n && text[i + 1] == '\n')) {
          if (text[i] == '"') {
            fail("'" + file + "'", "line " + std::to_string(line) +
                                       ": expected a quote only around a whole field, got one "
                                       "inside the unquoted field '" + field + "\"...'");
          }
          field += text[i++];
        }
      }
      rec.fields.push_back(std::move(field));
      if (i < n && text[i] == ',') {
        ++i;
        continue;
      }
      if (i < n) {  // end of the record
        i += text[i] == '\r' ? 2 : 1;
        ++line;
      }
      break;
    }
    records.push_back(std::move(rec));
  }
  return records;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + v[i];
  return s;
}

// The columns of a header row by name; a duplicated or missing required column is an error.
std::map<std::string, std::size_t> header_columns(const CsvRecord& header,
                                                  const std::vector<std::string>& required,
                                                  const std::string& file,
                                                  const std::string& expected) {
  std::map<std::string, std::size_t> cols;
  for (std::size_t c = 0; c < header.fields.size(); ++c) {
    if (!cols.emplace(header.fields[c], c).second) {
      fail("'" + file + "'", "line " + std::to_string(header.line) +
                                 ": expected each column once in the header, got '" +
                                 header.fields[c] + "' twice");
    }
  }
  for (const std::string& r : required) {
    if (!cols.count(r)) {
      fail("'" + file + "'", "line " + std::to_string(header.line) +
                                 ": expected a header with the column '" + r + "' (" + expected +
                                 "), got '" + joined(header.fields) + "'");
    }
  }
  return cols;
}

void check_width(const CsvRecord& rec, const CsvRecord& header, const std::string& file) {
  if (rec.fields.size() != header.fields.size()) {
    fail("'" + file + "'", "line " + std::to_string(rec.line) + ": expected " +
                               std::to_string(header.fields.size()) +
                               " fields as in the header, got " +
                               std::to_string(rec.fields.size()));
  }
}

// MindSpore's own execution-order file: one full name per line
// ("Default/network-WithLossCell/_backbone-LeNet5/conv1-Conv2d/Conv2D-op5").
std::vector<ExecutionOrderRow> bare_execution_order(const std::vector<CsvRecord>& records) {
  std::vector<ExecutionOrderRow> rows;
  for (const CsvRecord& r : records) {
    ExecutionOrderRow row;
    row.index = static_cast<std::int64_t>(rows.size());
    row.full_name = r.fields[0];
    const std::size_t slash = row.full_name.rfind('/');
    row.op_name = slash == std::string::npos ? row.full_name : row.full_name.substr(slash + 1);
    row.scope = slash == std::string::npos ? "" : row.full_name.substr(0, slash);
    const std::size_t op = row.op_name.rfind("-op");
    row.op_type = op == std::string::npos ? row.op_name : row.op_name.substr(0, op);
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<ExecutionOrderRow> read_execution_order(const std::string& file) {
  const std::vector<CsvRecord> records = parse_csv(read_text(file), file);
  if (records.empty()) {
    fail("'" + file + "'", std::string("expected the header ") + kExecutionOrderHeader +
                               " and a row per launch, got an empty file");
  }
  const bool bare = records[0].fields.size() == 1 && records[0].fields[0] != "index" &&
                    std::all_of(records.begin(), records.end(),
                                [](const CsvRecord& r) { return r.fields.size() == 1; });
  if (bare) return bare_execution_order(records);
  const CsvRecord& header = records[0];
  const auto cols = header_columns(
      header, std::vector<std::string>(std::begin(kExecutionOrderColumns),
                                       std::end(kExecutionOrderColumns)),
      file, std::string("loom's execution order: ") + kExecutionOrderHeader);
  std::vector<ExecutionOrderRow> rows;
  for (std::size_t k = 1; k < records.size(); ++k) {
    const CsvRecord& r = records[k];
    check_width(r, header, file);
    auto get = [&](const char* name) -> const std::string& { return r.fields[cols.at(name)]; };
    auto integer = [&](const char* name, bool empty_is_zero) -> std::int64_t {
      const std::string& s = get(name);
      if (s.empty() && empty_is_zero) return 0;
      const std::optional<std::int64_t> v = parse_count(s);
      if (!v) {
        fail("'" + file + "'", "line " + std::to_string(r.line) + ": expected a non-negative " +
                                   "integer in column '" + name + "', got '" + s + "'");
      }
      return *v;
    };
    ExecutionOrderRow row;
    row.index = integer("index", false);
    row.op_type = get("op_type");
    row.op_name = get("op_name");
    row.full_name = get("full_name");
    row.scope = get("scope");
    row.file = get("file");
    row.line = static_cast<int>(integer("line", true));
    row.role = get("role");
    row.forward = get("forward");
    row.depth = static_cast<int>(integer("depth", false));
    row.graph = get("graph");
    if (row.op_name.empty()) {
      fail("'" + file + "'", "line " + std::to_string(r.line) +
                                 ": expected an op name in column 'op_name', got ''");
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<StatisticRow> read_statistics(const std::string& file) {
  const std::vector<CsvRecord> records = parse_csv(read_text(file), file);
  if (records.empty()) {
    fail("'" + file + "'", "expected a header (Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,"
                           "Slot,...) and a row per tensor, got an empty file");
  }
  const CsvRecord& header = records[0];
  header_columns(header,
                 std::vector<std::string>(std::begin(kStatisticColumns),
                                          std::end(kStatisticColumns)),
                 file, "MindSpore's statistic.csv columns");
  std::vector<StatisticRow> rows;
  for (std::size_t k = 1; k < records.size(); ++k) {
    check_width(records[k], header, file);
    StatisticRow row;
    for (std::size_t c = 0; c < header.fields.size(); ++c) {
      row.columns[header.fields[c]] = records[k].fields[c];
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

// One iteration folder (or MindSpore's constants folder, iteration -1).
void read_iteration(DumpDir& d, const fs::path& dir, const std::string& net, std::int64_t graph,
                    std::int64_t iteration) {
  const std::vector<fs::directory_entry> entries = entries_of(dir);
  if (entries.empty()) {
    fail("'" + dir.string() + "'",
         "expected tensor files or a statistic.csv in an iteration folder, got an empty folder "
         "(a dump cut short, or a run that wrote nothing?)");
  }
  for (const fs::directory_entry& e : entries) {
    const std::string name = e.path().filename().string();
    if (e.is_directory()) {
      fail("'" + e.path().string() + "'",
           "expected only tensor files and statistic.csv in an iteration folder, got a folder");
    }
    if (name == "statistic.csv") {
      d.statistics[{graph, iteration}] = read_statistics(e.path().string());
      continue;
    }
    std::optional<DumpTensor> t = parse_dump_file_name(name);
    if (!t) {
      fail("'" + e.path().string() + "'",
           std::string("expected a tensor file named ") + kTensorLayout +
               " or statistic.csv, got '" + name + "'");
    }
    t->rank = d.rank;
    t->net = net;
    t->graph = graph;
    t->iteration = iteration;
    t->path = e.path().string();
    d.tensors.push_back(std::move(*t));
  }
}

void read_net(DumpDir& d, const fs::path& dir) {
  const std::string net = dir.filename().string();
  const std::vector<fs::directory_entry> graphs = entries_of(dir);
  if (graphs.empty()) {
    fail("'" + dir.string() + "'", "expected graph folders {graph_id}/ in the net folder '" + net +
                                       "', got an empty folder");
  }
  for (const fs::directory_entry& g : graphs) {
    const std::string gname = g.path().filename().string();
    const std::optional<std::int64_t> graph = parse_count(gname);
    if (!g.is_directory() || !graph) {
      fail("'" + g.path().string() + "'",
           "expected a graph folder {graph_id}/ (a number) in the net folder '" + net + "', got " +
               (g.is_directory() ? "the folder '" + gname + "'" : "the file '" + gname + "'"));
    }
    const std::vector<fs::directory_entry> iterations = entries_of(g.path());
    if (iterations.empty()) {
      fail("'" + g.path().string() + "'",
           "expected iteration folders {iteration}/ in a graph folder, got an empty folder");
    }
    for (const fs::directory_entry& it : iterations) {
      const std::string iname = it.path().filename().string();
      const std::optional<std::int64_t> iteration = parse_count(iname);
      if (it.is_directory() && iname == "constants") {
        read_iteration(d, it.path(), net, *graph, -1);
        continue;
      }
      if (!it.is_directory() || !iteration) {
        fail("'" + it.path().string() + "'",
             "expected an iteration folder {iteration}/ (a number) or constants/ in a graph "
             "folder, got " +
                 (it.is_directory() ? "the folder '" + iname + "'" : "the file '" + iname + "'"));
      }
      read_iteration(d, it.path(), net, *graph, *iteration);
    }
  }
}

void read_graphs(DumpDir& d, const fs::path& dir) {
  for (const fs::directory_entry& e : entries_of(dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file()) {
      if (const auto g = number_between(name, "ms_output_trace_code_graph_", ".ir")) {
        d.graph_ir[*g] = read_text(e.path().string());
        continue;
      }
      if (number_between(name, "ms_output_trace_code_graph_", ".pb")) continue;  // MindSpore's
    }
    fail("'" + e.path().string() + "'",
         "expected graph files named ms_output_trace_code_graph_{graph_id}.ir in graphs/, got '" +
             name + "'");
  }
}

void read_execution_orders(DumpDir& d, const fs::path& dir) {
  for (const fs::directory_entry& e : entries_of(dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file()) {
      if (const auto g = number_between(name, "ms_execution_order_graph_", ".csv")) {
        d.execution_order[*g] = read_execution_order(e.path().string());
        continue;
      }
      if (number_between(name, "ms_global_execution_order_graph_", ".csv")) continue;
    }
    fail("'" + e.path().string() + "'",
         "expected execution-order files named ms_execution_order_graph_{graph_id}.csv in "
         "execution_order/, got '" + name + "'");
  }
}

// Execution order of tensors within a dump: graph, iteration, timestamp; ties (MindSpore writes
// a launch's inputs and outputs with one timestamp) by input before output, slot, then names.
bool dump_order(const DumpTensor& a, const DumpTensor& b) {
  return std::make_tuple(a.graph, a.iteration, a.timestamp, a.io != "input", a.slot, a.op_type,
                         a.op_name, a.path) <
         std::make_tuple(b.graph, b.iteration, b.timestamp, b.io != "input", b.slot, b.op_type,
                         b.op_name, b.path);
}

}  // namespace

std::string DumpTensor::key() const {
  const std::string tail = "." + io + "." + std::to_string(slot);
  if (op_type == "Parameter" || op_type == "Gradient") return op_type + "." + op_name + tail;
  return op_name + tail;
}

const ExecutionOrderRow* DumpDir::find_node(std::int64_t graph, const std::string& op_name) const {
  const auto it = execution_order.find(graph);
  if (it == execution_order.end()) return nullptr;
  for (const ExecutionOrderRow& r : it->second) {
    if (r.op_name == op_name) return &r;
  }
  return nullptr;
}

std::optional<DumpTensor> parse_dump_file_name(const std::string& file_name) {
  constexpr std::string_view kSuffix = ".npy";
  if (file_name.size() <= kSuffix.size() ||
      file_name.compare(file_name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0) {
    return std::nullopt;
  }
  std::string_view rest(file_name.data(), file_name.size() - kSuffix.size());
  // Six fields from the right: format, slot, io, timestamp, stream, task.
  std::string_view right[6];
  for (std::string_view& field : right) {
    const std::size_t dot = rest.rfind('.');
    if (dot == std::string_view::npos) return std::nullopt;
    field = rest.substr(dot + 1);
    rest = rest.substr(0, dot);
  }
  // What is left is {op_type}.{op_name}: the type has no dot, the name may have some.
  const std::size_t dot = rest.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot + 1 == rest.size()) return std::nullopt;
  DumpTensor t;
  t.op_type = std::string(rest.substr(0, dot));
  t.op_name = std::string(rest.substr(dot + 1));
  t.format = std::string(right[0]);
  const auto slot = parse_count(right[1]);
  t.io = std::string(right[2]);
  const auto timestamp = parse_count(right[3]);
  const auto stream = parse_count(right[4]);
  const auto task = parse_count(right[5]);
  if (t.format.empty() || !slot || (t.io != "input" && t.io != "output") || !timestamp ||
      !stream || !task) {
    return std::nullopt;
  }
  t.slot = *slot;
  t.timestamp = *timestamp;
  t.stream = *stream;
  t.task = *task;
  return t;
}

namespace {

DumpDir open_dump_unchecked(const std::string& path, std::optional<int> rank) {
  std::error_code ec;
  const fs::path given(path);
  if (path.empty()) throw ValueError("open_dump: expected a dump folder, got ''");
  const fs::file_status st = fs::status(given, ec);
  if (ec || !fs::exists(st)) {
    throw ValueError("open_dump: expected a dump folder, got '" + path +
                     "' (no such file or folder)");
  }
  if (!fs::is_directory(st)) {
    throw ValueError("open_dump: expected a dump folder, got the file '" + path + "'");
  }
  fs::path rank_dir = given.lexically_normal();  // file paths without "./" or "//"
  int rank_id = 0;
  fs::path normal = fs::absolute(given, ec).lexically_normal();  // "." inside rank_0 too
  if (normal.filename().empty()) normal = normal.parent_path();  // "dump/rank_0/"
  const std::string leaf = normal.filename().string();
  if (const auto r = number_between(leaf, "rank_", "")) {  // {path}/rank_{r} itself
    rank_id = static_cast<int>(*r);
    if (rank && *rank != rank_id) {
      throw ValueError("open_dump: expected rank_" + std::to_string(*rank) + ", got the folder '" +
                       path + "' of rank " + std::to_string(rank_id));
    }
  } else {
    const std::vector<fs::directory_entry> entries = entries_of(given);
    std::vector<int> ranks;
    for (const fs::directory_entry& e : entries) {
      const std::string name = e.path().filename().string();
      if (const auto r = number_between(name, "rank_", ""); r && e.is_directory()) {
        ranks.push_back(static_cast<int>(*r));
      }
    }
    std::sort(ranks.begin(), ranks.end());
    auto rank_list = [&] {
      std::string s;
      for (int r : ranks) s += (s.empty() ? "rank_" : ", rank_") + std::to_string(r);
      return s;
    };
    if (ranks.empty()) {
      throw ValueError("open_dump: expected a rank_{r} folder in '" + path +
                       "' (MindSpore's dump layout {path}/rank_{r}/{net}/{graph}/{iteration}/), "
                       "got " + (entries.empty() ? std::string("an empty folder")
                                                 : "none (it holds " + names_of(entries) + ")"));
    }
    if (rank) {
      if (std::find(ranks.begin(), ranks.end(), *rank) == ranks.end()) {
        throw ValueError("open_dump: expected a folder rank_" + std::to_string(*rank) + " in '" +
                         path + "', got " + rank_list());
      }
      rank_id = *rank;
    } else if (ranks.size() > 1) {
      throw ValueError("open_dump: expected one rank_{r} folder in '" + path + "', got " +
                       rank_list() + "; choose one (loom compare --rank R)");
    } else {
      rank_id = ranks[0];
    }
    rank_dir /= "rank_" + std::to_string(rank_id);
  }

  DumpDir d;
  d.path = path;
  d.rank = rank_id;
  for (const fs::directory_entry& e : entries_of(rank_dir)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory()) {
      fail("'" + e.path().string() + "'",
           "expected only folders in a rank folder (.dump_metadata, graphs, execution_order, "
           "{net_name}), got the file '" + name + "'");
    }
    if (name == ".dump_metadata") continue;  // the configuration in force; not needed to read
    if (name == "graphs") {
      read_graphs(d, e.path());
    } else if (name == "execution_order") {
      read_execution_orders(d, e.path());
    } else {
      read_net(d, e.path());
    }
  }
  std::sort(d.tensors.begin(), d.tensors.end(), dump_order);
  return d;
}

}  // namespace

DumpDir open_dump(const std::string& path, std::optional<int> rank) {
  try {
    return open_dump_unchecked(path, rank);
  } catch (const fs::filesystem_error& e) {  // a folder that vanishes or cannot be read
    throw ValueError("dump '" + path + "': expected a readable dump, got: " + e.what());
  }
}

Tensor load(const DumpTensor& t) {
  try {
    return data::load_npy(t.path);
  } catch (const Error& e) {
    const std::string m = e.what();
    throw ValueError(m.find(t.path) == std::string::npos ? t.path + ": " + m : m);
  } catch (const std::exception& e) {  // std::bad_alloc for an absurd shape, ...
    throw ValueError(t.path + ": expected a readable .npy file, got: " + e.what());
  }
}

}  // namespace loom::debug
