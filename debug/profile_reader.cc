// Reading a profile folder (debug/profile_reader.h): the folder listed once and its files grouped
// by rank, profile_info_{r}.json checked key by key, each CSV parsed (RFC 4180) and read by header
// name, then the ranks checked against each other; and the two analyses `loom profile show`
// prints, the steady-state step average and the slowest rank of each step.
//
// The reader is strict about what it reads — a profile silently half-read gives a breakdown that
// silently adds up to less — but not about what it does not: other files may sit in the folder.
#include "debug/profile_reader.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/ir/error.h"

namespace loom::debug {
namespace {

namespace fs = std::filesystem;

constexpr char kInfo[] = "profile_info";
constexpr char kOpType[] = "cpu_op_type_info";
constexpr char kOpDetail[] = "cpu_op_detail_info";
constexpr char kStepTrace[] = "step_trace";
constexpr char kMemoryPlan[] = "memory_plan";
constexpr char kCommunication[] = "communication";
constexpr char kTimeline[] = "cpu_timeline_display";

// The per-rank files: {prefix}_{r}.{extension}. The first four are required of every rank.
struct FileKind {
  const char* prefix;
  const char* extension;
};
constexpr FileKind kFileKinds[] = {{kInfo, "json"},         {kOpType, "csv"},
                                   {kOpDetail, "csv"},      {kStepTrace, "csv"},
                                   {kMemoryPlan, "csv"},    {kCommunication, "csv"},
                                   {kTimeline, "json"}};
constexpr int kRequiredKinds = 4;

// The op tables: MindSpore's CPU profiler columns (profiler/device/data_saver.h: times in ms,
// percent / total_proportion a fraction 0..1 of all ops' time), then loom's (step_percent: % of
// the profiled steps' time).
const std::vector<std::string> kOpTypeColumns = {
    "op_type", "type_occurrences", "execution_frequency(per-step)", "total_compute_time",
    "avg_time(ms)", "percent", "step_percent", "flops", "gflops_per_s", "peak_percent", "bytes",
    "gb_per_s"};
const std::vector<std::string> kOpDetailColumns = {
    "op_side", "op_type", "op_name", "full_op_name", "op_occurrences", "op_total_time(ms)",
    "op_avg_time(ms)", "total_proportion", "subgraph", "pid", "step_percent", "role", "forward",
    "cell", "file", "line", "flops", "gflops_per_s", "peak_percent", "bytes", "gb_per_s"};
const std::vector<std::string> kStepTraceColumns = {
    "step",    "start",         "interval",           "total",         "data_wait",
    "compile", "forward",       "backward",           "optimizer",     "communication",
    "communication_wait", "host_overhead", "rss_mib", "plan_peak_mib"};
const std::vector<std::string> kMemoryPlanColumns = {
    "buffer", "owner", "op_type", "bytes", "offset", "first_launch", "last_launch"};
const std::vector<std::string> kCommunicationColumns = {"step",     "id",      "bytes", "start",
                                                        "duration", "overlap"};

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw ValueError("profile " + where + ": " + what);
}

std::string in_quotes(const std::string& path) { return "'" + path + "'"; }

std::string file_name(const char* prefix, int rank, const char* extension) {
  return std::string(prefix) + "_" + std::to_string(rank) + "." + extension;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(in_quotes(path), "expected a readable file, got one that cannot be opened");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail(in_quotes(path), "expected a readable file, got a read error");
  return text;
}

// ---------------------------------------------------------------------------------------------
// CSV

struct CsvRecord {
  std::vector<std::string> fields;
  std::size_t line = 0;  // 1-based line the record starts on
};

bool at_line_end(const std::string& t, std::size_t i) {
  return t[i] == '\n' || (t[i] == '\r' && i + 1 < t.size() && t[i + 1] == '\n');
}

// RFC 4180: comma-separated fields; a field in double quotes may hold commas, line breaks and ""
// for a quote; records end at \n or \r\n; a UTF-8 byte-order mark is skipped; blank lines are
// not records. A stray quote, text after a closing quote and an unterminated quote are errors.
std::vector<CsvRecord> parse_csv(const std::string& text, const std::string& file) {
  std::vector<CsvRecord> records;
  const std::size_t n = text.size();
  std::size_t i = text.rfind("\xEF\xBB\xBF", 0) == 0 ? 3 : 0;
  std::size_t line = 1;
  auto where = [&](std::size_t l) { return "line " + std::to_string(l) + ": "; };
  while (i < n) {
    if (at_line_end(text, i)) {  // a blank line
      i += text[i] == '\r' ? 2 : 1;
      ++line;
      continue;
    }
    CsvRecord rec;
    rec.line = line;
    for (;;) {
      std::string field;
      if (text[i] == '"') {
        const std::size_t opened = line;
        for (++i;; ++i) {
          if (i >= n) {
            fail(in_quotes(file),
                 where(opened) + "expected a closing quote, got the end of the file");
          }
          if (text[i] == '"') {
            if (i + 1 < n && text[i + 1] == '"') {
              field += '"';
              ++i;
              continue;
            }
            ++i;
            break;
          }
          if (text[i] == '\n') ++line;
          field += text[i];
        }
        if (i < n && text[i] != ',' && !at_line_end(text, i)) {
          fail(in_quotes(file), where(line) + "expected a comma or the end of the line after a "
                                           "closing quote, got '" + std::string(1, text[i]) + "'");
        }
      } else {
        for (; i < n && text[i] != ',' && !at_line_end(text, i); ++i) {
          if (text[i] == '"') {
            fail(in_quotes(file), where(line) + "expected a quote only around a whole field, got "
                                             "one inside '" + field + "\"...'");
          }
          field += text[i];
        }
      }
      rec.fields.push_back(std::move(field));
      if (i < n && text[i] == ',') {
        ++i;
        if (i < n) continue;
        rec.fields.emplace_back();  // "a,b," at the end of the file: an empty last field
        break;
      }
      if (i < n) {
        i += text[i] == '\r' ? 2 : 1;
        ++line;
      }
      break;
    }
    records.push_back(std::move(rec));
  }
  return records;
}

std::string joined(const std::vector<std::string>& v, const char* sep = ",") {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

// A CSV file read by header name: the required columns must be in the header (once each), every
// record as wide as the header; fields are converted with the file and line in the message.
class CsvTable {
 public:
  CsvTable(std::string file, const std::vector<std::string>& required) : file_(std::move(file)) {
    records_ = parse_csv(read_text(file_), file_);
    if (records_.empty()) {
      fail(in_quotes(file_), "expected a header (" + joined(required) + ") and rows, got an empty "
                          "file");
    }
    const CsvRecord& header = records_[0];
    for (std::size_t c = 0; c < header.fields.size(); ++c) {
      if (!columns_.emplace(header.fields[c], c).second) {
        fail(in_quotes(file_), "line " + std::to_string(header.line) + ": expected each column "
                            "once in the header, got '" + header.fields[c] + "' twice");
      }
    }
    for (const std::string& r : required) {
      if (!columns_.count(r)) {
        fail(in_quotes(file_), "line " + std::to_string(header.line) + ": expected the column '" +
                                r + "' in the header (" + joined(required) + "), got '" +
                                joined(header.fields) + "'");
      }
    }
    for (std::size_t k = 1; k < records_.size(); ++k) {
      if (records_[k].fields.size() != header.fields.size()) {
        fail(in_quotes(file_), "line " + std::to_string(records_[k].line) + ": expected " +
                                std::to_string(header.fields.size()) +
                                " fields as in the header, got " +
                                std::to_string(records_[k].fields.size()));
      }
    }
  }

  std::size_t rows() const { return records_.size() - 1; }
  std::size_t line(std::size_t row) const { return records_[row + 1].line; }
  const std::string& file() const { return file_; }

  const std::string& text(std::size_t row, const std::string& column) const {
    return records_[row + 1].fields[columns_.at(column)];
  }

  // A finite number, non-negative unless `negative_ok`.
  double number(std::size_t row, const std::string& column, bool negative_ok = false) const {
    const std::optional<double> v = optional_number(row, column, negative_ok);
    if (!v) bad(row, column, "a number", "''");
    return *v;
  }

  // As number(), but an empty field gives nullopt.
  std::optional<double> optional_number(std::size_t row, const std::string& column,
                                        bool negative_ok = false) const {
    const std::string& s = text(row, column);
    if (s.empty()) return std::nullopt;
    double v = 0;
    const char* first = s.data();
    if (*first == '+') ++first;
    const auto [end, ec] = std::from_chars(first, s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) {
      bad(row, column, negative_ok ? "a number" : "a non-negative number", "'" + s + "'");
    }
    if (v < 0 && !negative_ok) bad(row, column, "a non-negative number", "'" + s + "'");
    return v;
  }

  // A fraction from 0 to 1 (MindSpore's proportions), µs from a time in ms.
  double fraction(std::size_t row, const std::string& column) const {
    const double v = number(row, column);
    if (v > 1) bad(row, column, "a fraction from 0 to 1", "'" + text(row, column) + "'");
    return v;
  }
  double ms_as_us(std::size_t row, const std::string& column) const {
    return number(row, column) * 1000.0;
  }

  // An empty field gives NaN ("not computed").
  double number_or_nan(std::size_t row, const std::string& column) const {
    return optional_number(row, column).value_or(std::numeric_limits<double>::quiet_NaN());
  }

  // A non-negative integer; an empty field gives `empty` when it is set.
  std::int64_t integer(std::size_t row, const std::string& column,
                       std::optional<std::int64_t> empty = std::nullopt) const {
    const std::string& s = text(row, column);
    if (s.empty() && empty) return *empty;
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < 0) {
      bad(row, column, "a non-negative integer", "'" + s + "'");
    }
    return v;
  }

  // Any integer (a launch index: -1 for a buffer live before the first launch).
  std::int64_t signed_integer(std::size_t row, const std::string& column) const {
    const std::string& s = text(row, column);
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size()) {
      bad(row, column, "an integer", "'" + s + "'");
    }
    return v;
  }

  [[noreturn]] void bad(std::size_t row, const std::string& column, const std::string& expected,
                        const std::string& got) const {
    fail(in_quotes(file_), "line " + std::to_string(line(row)) + ": expected " + expected +
                            " in column '" + column + "', got " + got);
  }

 private:
  std::string file_;
  std::vector<CsvRecord> records_;
  std::map<std::string, std::size_t> columns_;
};

// ---------------------------------------------------------------------------------------------
// The files

ProfileInfo read_info(const std::string& file) {
  const std::string text = read_text(file);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // a syntax error, or a number past double
    fail(in_quotes(file), std::string("expected JSON, got a parse error: ") + e.what());
  }
  if (!j.is_object()) {
    fail(in_quotes(file), "expected a JSON object, got " + j.dump().substr(0, 60));
  }
  auto key = [&](const char* name) -> const nlohmann::json& {
    if (!j.contains(name)) fail(in_quotes(file), std::string("expected the key \"") + name + "\"");
    return j.at(name);
  };
  auto wrong = [&](const char* name, const char* expected) {
    fail(in_quotes(file), std::string("expected ") + expected + " for \"" + name + "\", got " +
                           j.at(name).dump());
  };
  auto integer = [&](const char* name, std::int64_t min) -> std::int64_t {
    const nlohmann::json& v = key(name);
    if (!v.is_number_integer() || v.get<std::int64_t>() < min) {
      wrong(name, min == 0 ? "a non-negative integer" : "a positive integer");
    }
    return v.get<std::int64_t>();
  };
  ProfileInfo info;
  info.version = static_cast<int>(integer("version", 0));
  if (info.version != 1) {
    fail(in_quotes(file), "expected \"version\": 1 (the only version loom writes), got " +
                           std::to_string(info.version));
  }
  info.rank = static_cast<int>(integer("rank", 0));
  info.ranks = static_cast<int>(integer("ranks", 1));
  info.threads = static_cast<int>(integer("threads", 1));
  info.start_step = integer("start_step", 1);
  info.stop_step = integer("stop_step", 1);
  if (!key("model").is_string()) wrong("model", "a string");
  info.model = j.at("model").get<std::string>();
  if (!key("cpu").is_string()) wrong("cpu", "a string");
  info.cpu = j.at("cpu").get<std::string>();
  if (j.contains("device")) {
    if (!key("device").is_string()) wrong("device", "a string");
    info.device = j.at("device").get<std::string>();
  }
  if (!key("peak_gflops").is_number() || j.at("peak_gflops").get<double>() < 0) {
    wrong("peak_gflops", "a non-negative number");
  }
  info.peak_gflops = j.at("peak_gflops").get<double>();
  for (const char* flag : {"memory", "communication"}) {
    if (!key(flag).is_boolean()) wrong(flag, "true or false");
  }
  info.memory = j.at("memory").get<bool>();
  info.communication = j.at("communication").get<bool>();
  const nlohmann::json& steps = key("steps");
  if (!steps.is_array()) wrong("steps", "an array of step numbers");
  for (const nlohmann::json& s : steps) {
    if (!s.is_number_integer() || s.get<std::int64_t>() < 1 ||
        (!info.steps.empty() && s.get<std::int64_t>() <= info.steps.back())) {
      wrong("steps", "increasing positive step numbers");
    }
    info.steps.push_back(s.get<std::int64_t>());
  }
  if (info.steps.empty()) wrong("steps", "at least one profiled step");
  if (info.rank >= info.ranks) {
    fail(in_quotes(file), "expected \"rank\" below \"ranks\" (" + std::to_string(info.ranks) +
                           "), got " + std::to_string(info.rank));
  }
  return info;
}

// The work and rate columns both tables end with.
template <class Row>
void read_rates(const CsvTable& t, std::size_t r, Row& row) {
  row.flops = t.number(r, "flops");
  row.gflops_per_s = t.number_or_nan(r, "gflops_per_s");
  row.peak_percent = t.number_or_nan(r, "peak_percent");
  row.bytes = t.number(r, "bytes");
  row.gb_per_s = t.number_or_nan(r, "gb_per_s");
}

std::vector<OpTypeRow> read_op_types(const std::string& file) {
  const CsvTable t(file, kOpTypeColumns);
  std::vector<OpTypeRow> rows;
  for (std::size_t r = 0; r < t.rows(); ++r) {
    OpTypeRow row;
    row.op_type = t.text(r, "op_type");
    if (row.op_type.empty()) t.bad(r, "op_type", "an op type", "''");
    row.occurrences = t.integer(r, "type_occurrences");
    row.execution_frequency = t.integer(r, "execution_frequency(per-step)");
    row.total_time = t.ms_as_us(r, "total_compute_time");
    row.avg_time = t.ms_as_us(r, "avg_time(ms)");
    row.op_fraction = t.fraction(r, "percent");
    row.proportion = t.number(r, "step_percent");
    read_rates(t, r, row);
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<OpDetailRow> read_op_details(const std::string& file) {
  const CsvTable t(file, kOpDetailColumns);
  std::vector<OpDetailRow> rows;
  for (std::size_t r = 0; r < t.rows(); ++r) {
    OpDetailRow row;
    row.op_side = t.text(r, "op_side");
    row.op_type = t.text(r, "op_type");
    row.op_name = t.text(r, "op_name");
    if (row.op_name.empty()) t.bad(r, "op_name", "a node name", "''");
    row.full_op_name = t.text(r, "full_op_name");
    row.occurrences = t.integer(r, "op_occurrences");
    row.total_time = t.ms_as_us(r, "op_total_time(ms)");
    row.avg_time = t.ms_as_us(r, "op_avg_time(ms)");
    row.op_fraction = t.fraction(r, "total_proportion");
    row.subgraph = t.text(r, "subgraph");
    row.pid = t.integer(r, "pid");
    row.proportion = t.number(r, "step_percent");
    row.role = t.text(r, "role");
    row.forward = t.text(r, "forward");
    row.cell = t.text(r, "cell");
    row.file = t.text(r, "file");
    row.line = static_cast<int>(std::min<std::int64_t>(t.integer(r, "line", 0),
                                                       std::numeric_limits<int>::max()));
    read_rates(t, r, row);
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<StepRow> read_step_trace(const std::string& file) {
  const CsvTable t(file, kStepTraceColumns);
  std::vector<StepRow> rows;
  for (std::size_t r = 0; r < t.rows(); ++r) {
    StepRow row;
    row.step = t.integer(r, "step");
    if (!rows.empty() && row.step <= rows.back().step) {
      t.bad(r, "step", "steps in increasing order (after " + std::to_string(rows.back().step) +
                           ")",
            "'" + t.text(r, "step") + "'");
    }
    row.start = t.number(r, "start");
    row.interval = t.optional_number(r, "interval");  // to the next step's begin; none for the last
    row.total = t.number(r, "total");
    row.data_wait = t.number(r, "data_wait");
    row.compile = t.number(r, "compile");
    row.forward = t.number(r, "forward");
    row.backward = t.number(r, "backward");
    row.optimizer = t.number(r, "optimizer");
    row.communication = t.number(r, "communication");
    row.communication_wait = t.number(r, "communication_wait");
    // total − compile − the kernels: slightly negative when the clock's rounding says so
    row.host_overhead = t.number(r, "host_overhead", /*negative_ok=*/true);
    row.rss_mib = t.optional_number(r, "rss_mib");
    row.plan_peak_mib = t.optional_number(r, "plan_peak_mib");
    rows.push_back(row);
  }
  if (rows.empty()) fail(in_quotes(file), "expected a row per profiled step, got none");
  return rows;
}

std::vector<MemoryPlanRow> read_memory_plan(const std::string& file) {
  const CsvTable t(file, kMemoryPlanColumns);
  std::vector<MemoryPlanRow> rows;
  for (std::size_t r = 0; r < t.rows(); ++r) {
    MemoryPlanRow row;
    row.buffer = t.text(r, "buffer");
    row.owner = t.text(r, "owner");
    row.op_type = t.text(r, "op_type");
    row.bytes = t.integer(r, "bytes");
    row.offset = t.integer(r, "offset");
    row.first_launch = t.signed_integer(r, "first_launch");
    row.last_launch = t.signed_integer(r, "last_launch");
    if (row.last_launch < row.first_launch) {
      t.bad(r, "last_launch", "a launch at or after first_launch (" +
                                  std::to_string(row.first_launch) + ")",
            "'" + t.text(r, "last_launch") + "'");
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<CommunicationRow> read_communication(const std::string& file) {
  const CsvTable t(file, kCommunicationColumns);
  std::vector<CommunicationRow> rows;
  for (std::size_t r = 0; r < t.rows(); ++r) {
    CommunicationRow row;
    row.step = t.integer(r, "step");
    row.id = t.integer(r, "id");
    row.bytes = t.integer(r, "bytes");
    row.start = t.number(r, "start");
    row.duration = t.number(r, "duration");
    row.overlap = t.number(r, "overlap");
    rows.push_back(row);
  }
  return rows;
}

// "{prefix}_{r}.{extension}" → (kind index, r).
std::optional<std::pair<int, int>> parse_file_name(const std::string& name) {
  for (int k = 0; k < static_cast<int>(std::size(kFileKinds)); ++k) {
    const std::string prefix = std::string(kFileKinds[k].prefix) + "_";
    const std::string suffix = std::string(".") + kFileKinds[k].extension;
    if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    const std::string_view digits(name.data() + prefix.size(),
                                  name.size() - prefix.size() - suffix.size());
    int r = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), r);
    if (ec == std::errc() && end == digits.data() + digits.size() && r >= 0 &&
        std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return std::make_pair(k, r);
    }
  }
  return std::nullopt;
}

}  // namespace

const RankProfile& ProfileDir::rank(int r) const {
  if (r < 0 || r >= static_cast<int>(ranks.size())) {
    throw ValueError("profile " + in_quotes(path) + ": expected a rank from 0 to " +
                     std::to_string(static_cast<int>(ranks.size()) - 1) + ", got " +
                     std::to_string(r));
  }
  return ranks[static_cast<std::size_t>(r)];
}

ProfileDir open_profile(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    fail(in_quotes(path), fs::exists(path, ec) ? "expected a profile folder, got a file"
                                            : "expected a profile folder (loom train --profile "
                                              "DIR writes one), got nothing at that path");
  }
  // Per rank, which of the kinds are there.
  std::map<int, std::set<int>> present;
  fs::directory_iterator it(path, ec);
  if (ec) fail(in_quotes(path), "expected a readable folder, got: " + ec.message());
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) fail(in_quotes(path), "expected a readable folder, got: " + ec.message());
    if (const auto kr = parse_file_name(it->path().filename().string())) {
      present[kr->second].insert(kr->first);
    }
  }
  const fs::path dir(path);
  auto file = [&](const char* prefix, int r, const char* extension) {
    return (dir / file_name(prefix, r, extension)).string();
  };
  bool any_info = false;
  for (const auto& [r, kinds] : present) any_info = any_info || kinds.count(0);
  if (!any_info) {
    fail(in_quotes(path), "expected profile_info_{rank}.json and the CSV files beside it (loom "
                       "train --profile DIR writes them), got " +
                           std::string(present.empty() ? "no profile file"
                                                       : "profile files without a profile_info"));
  }
  // Every rank that has a file has the required four.
  for (const auto& [r, kinds] : present) {
    for (int k = 0; k < kRequiredKinds; ++k) {
      if (!kinds.count(k)) {
        const FileKind& have = kFileKinds[*kinds.begin()];
        fail(in_quotes(file(kFileKinds[k].prefix, r, kFileKinds[k].extension)),
             "expected this file of rank " + std::to_string(r) + " beside " +
                 file_name(have.prefix, r, have.extension) + ", got no such file");
      }
    }
  }

  ProfileDir profile;
  profile.path = path;
  for (const auto& rank_files : present) {
    const int r = rank_files.first;
    RankProfile rank;
    const std::string info_file = file(kInfo, r, "json");
    rank.info = read_info(info_file);
    if (rank.info.rank != r) {
      fail(in_quotes(info_file), "expected \"rank\": " + std::to_string(r) +
                                  " as in the file name, got " + std::to_string(rank.info.rank));
    }
    rank.op_types = read_op_types(file(kOpType, r, "csv"));
    rank.op_details = read_op_details(file(kOpDetail, r, "csv"));
    const std::string trace_file = file(kStepTrace, r, "csv");
    rank.steps = read_step_trace(trace_file);
    std::vector<std::int64_t> steps;
    for (const StepRow& s : rank.steps) steps.push_back(s.step);
    if (steps != rank.info.steps) {
      std::vector<std::string> want, got;
      for (std::int64_t s : rank.info.steps) want.push_back(std::to_string(s));
      for (std::int64_t s : steps) got.push_back(std::to_string(s));
      fail(in_quotes(trace_file), "expected a row for each step in " +
                                   file_name(kInfo, r, "json") + "'s \"steps\" (" +
                                   joined(want, ", ") + "), got steps " + joined(got, ", "));
    }
    // The optional files: read when there; required when profile_info says they were recorded.
    auto optional_file = [&](const char* prefix, bool recorded,
                             const char* key) -> std::optional<std::string> {
      const std::string f = file(prefix, r, "csv");
      if (fs::exists(f, ec)) return f;
      if (recorded) {
        fail(in_quotes(f), "expected this file, since " + file_name(kInfo, r, "json") +
                               " says \"" + key + "\": true, got no such file");
      }
      return std::nullopt;
    };
    if (const auto f = optional_file(kMemoryPlan, rank.info.memory, "memory")) {
      rank.memory_plan = read_memory_plan(*f);
    }
    if (const auto f = optional_file(kCommunication, rank.info.communication, "communication")) {
      rank.communication = read_communication(*f);
    }
    profile.ranks.push_back(std::move(rank));
  }

  // The ranks agree: 0..ranks-1, all there, the same count.
  const int ranks = profile.ranks.front().info.ranks;
  for (const RankProfile& rank : profile.ranks) {
    if (rank.info.ranks != ranks) {
      fail(in_quotes(file(kInfo, rank.info.rank, "json")),
           "expected \"ranks\": " + std::to_string(ranks) + " as in " +
               file_name(kInfo, profile.ranks.front().info.rank, "json") + ", got " +
               std::to_string(rank.info.ranks));
    }
  }
  for (int r = 0; r < ranks; ++r) {
    if (r >= static_cast<int>(profile.ranks.size()) || profile.ranks[r].info.rank != r) {
      fail(in_quotes(file(kInfo, r, "json")),
           "expected this file (\"ranks\": " + std::to_string(ranks) + " in " +
               file_name(kInfo, profile.ranks.front().info.rank, "json") +
               "), got no such file");
    }
  }
  return profile;
}

StepAverage average_steps(const RankProfile& rank) {
  StepAverage avg;
  const std::vector<StepRow>& steps = rank.steps;
  std::size_t first = 0;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].compile > 0) {
      avg.compiled_step = steps[i].step;
      first = i + 1;
      break;
    }
  }
  if (first == steps.size() && !steps.empty()) {  // the compiling step is the last one
    first = steps.size() - 1;
    avg.steady = false;
  }
  StepPhases& m = avg.mean;
  for (std::size_t i = first; i < steps.size(); ++i) {
    const StepRow& s = steps[i];
    avg.steps.push_back(s.step);
    m.total += s.total;
    m.data_wait += s.data_wait;
    m.compile += s.compile;
    m.forward += s.forward;
    m.backward += s.backward;
    m.optimizer += s.optimizer;
    m.communication += s.communication;
    m.communication_wait += s.communication_wait;
    m.host_overhead += s.host_overhead;
  }
  if (const double n = static_cast<double>(avg.steps.size()); n > 0) {
    for (double* v : {&m.total, &m.data_wait, &m.compile, &m.forward, &m.backward, &m.optimizer,
                      &m.communication, &m.communication_wait, &m.host_overhead}) {
      *v /= n;
    }
  }
  return avg;
}

double step_work(const StepRow& step) {
  // The interval runs from this step's begin to the next profiled step's begin. The last step has
  // none: its data wait plus its total stand in (the next step's data wait is not known).
  const double interval = step.interval ? *step.interval : step.data_wait + step.total;
  return interval - step.communication_wait;
}

std::vector<SlowestRank> slowest_ranks(const ProfileDir& profile) {
  std::vector<SlowestRank> out;
  if (profile.ranks.empty()) return out;
  for (const StepRow& first : profile.ranks.front().steps) {
    // Each rank's work on this step; a step some rank did not profile is left out.
    std::vector<std::pair<int, double>> work;
    for (const RankProfile& rank : profile.ranks) {
      const auto it = std::find_if(rank.steps.begin(), rank.steps.end(),
                                   [&](const StepRow& r) { return r.step == first.step; });
      if (it == rank.steps.end()) break;
      work.emplace_back(rank.info.rank, step_work(*it));
    }
    if (work.size() != profile.ranks.size()) continue;
    SlowestRank s;
    s.step = first.step;
    std::tie(s.slowest_rank, s.slowest_work) = work.front();
    std::tie(s.fastest_rank, s.fastest_work) = work.front();
    for (const auto& [r, w] : work) {  // ties go to the lower rank
      if (w > s.slowest_work) s.slowest_rank = r, s.slowest_work = w;
      if (w < s.fastest_work) s.fastest_rank = r, s.fastest_work = w;
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace loom::debug
