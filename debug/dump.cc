// The dump writer: MindSpore's dump configuration, and an observer writing the tensors of
// compiled runs in MindSpore's CPU/GPU layout (debug/dump.h; docs/design.md "debug/").
#include "debug/dump.h"

#include <openssl/evp.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "backends/backend.h"
#include "core/ir/error.h"
#include "core/ir/printer.h"
#include "data/npy.h"
#include "debug/csv.h"
#include "debug/tensor_stats.h"
#include "debug/user_regex.h"
#include "nn/cell.h"
#include "nn/train.h"

namespace loom::debug {

namespace fs = std::filesystem;

namespace {

// ---- Configuration ----------------------------------------------------------------------------

struct Range {
  std::int64_t first, last;
};

// "all" → empty (every iteration); "0|5-8|100-120" → its ranges. ValueError on anything else.
std::vector<Range> parse_iterations(const std::string& spec, const std::string& where) {
  std::vector<Range> out;
  if (spec == "all") return out;
  auto bad = [&](const std::string& why) {
    return ValueError(where + ": iteration: expected \"all\" or numbers and ranges separated by "
                      "'|' such as \"0|5-8|100-120\", got \"" + spec + "\" (" + why + ")");
  };
  if (spec.empty()) throw bad("empty");
  auto number = [&](std::string_view s) {
    std::int64_t v = -1;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || p != s.data() + s.size() || v < 0) {
      throw bad("'" + std::string(s) + "' is not a non-negative integer");
    }
    return v;
  };
  std::size_t start = 0;
  while (start <= spec.size()) {
    const std::size_t end = std::min(spec.find('|', start), spec.size());
    const std::string_view part(spec.data() + start, end - start);
    const std::size_t dash = part.find('-');
    Range r{};
    if (dash == std::string_view::npos) {
      r.first = r.last = number(part);
    } else {
      r.first = number(part.substr(0, dash));
      r.last = number(part.substr(dash + 1));
      if (r.last < r.first) throw bad("a range's end is before its start");
    }
    out.push_back(r);
    start = end + 1;
    if (end == spec.size()) break;
  }
  return out;
}

const std::vector<std::string>& statistic_categories() {
  static const std::vector<std::string> names = {
      "max",  "min",   "avg",           "count",      "negative zero count", "positive zero count",
      "nan count", "negative inf count", "positive inf count", "zero count", "l2norm", "md5"};
  return names;
}

// MindSpore's statistic.csv column of a category.
std::string statistic_header(const std::string& category) {
  static const std::map<std::string, std::string> headers = {
      {"max", "Max Value"},
      {"min", "Min Value"},
      {"avg", "Avg Value"},
      {"count", "Count"},
      {"negative zero count", "Negative Zero Count"},
      {"positive zero count", "Positive Zero Count"},
      {"nan count", "Nan Count"},
      {"negative inf count", "Negative Inf Count"},
      {"positive inf count", "Positive Inf Count"},
      {"zero count", "Zero Count"},
      {"l2norm", "L2Norm Value"},
      {"md5", "MD5"}};
  return headers.at(category);
}

bool is_regex_entry(const std::string& k) {
  return k.size() > 12 && k.rfind("name-regex(", 0) == 0 && k.back() == ')';
}
std::string regex_of(const std::string& k) { return k.substr(11, k.size() - 12); }


std::string lower_dtype_name(DType d) {
  std::string s(dtype_name(d));
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string shape_text(const Shape& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + ")";
}

std::string number_text(double v) {
  std::ostringstream ss;
  ss << v;  // MindSpore writes its statistics with the stream's default precision
  return ss.str();
}

std::string md5_hex(const Tensor& t) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_md5(), nullptr) != 1 ||
      EVP_DigestUpdate(ctx.get(), t.raw_data(), t.nbytes()) != 1 ||
      EVP_DigestFinal_ex(ctx.get(), digest, &len) != 1) {
    throw InternalError("dump: MD5 failed");
  }
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += hex[digest[i] >> 4];
    out += hex[digest[i] & 15];
  }
  return out;
}

// Graph names as path-safe text.
std::string sanitize(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
  }
  return out;
}

void ensure_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw ValueError("dump: cannot create the folder " + dir + ": " + ec.message());
}

void write_text(const std::string& path, const std::string& text, bool append = false) {
  std::ofstream f(path, append ? std::ios::app | std::ios::binary : std::ios::binary);
  f << text;
  f.flush();
  if (!f) throw ValueError("dump: cannot write " + path);
}

}  // namespace

bool DumpConfig::selects_iteration(std::int64_t i) const {
  const std::vector<Range> ranges = parse_iterations(iteration, source);
  if (ranges.empty()) return true;
  return std::any_of(ranges.begin(), ranges.end(),
                     [&](const Range& r) { return i >= r.first && i <= r.last; });
}

std::int64_t DumpConfig::count_iterations(std::int64_t n) const {
  const std::vector<Range> ranges = parse_iterations(iteration, source);
  if (ranges.empty()) return n;
  std::int64_t count = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    count += std::any_of(ranges.begin(), ranges.end(),
                         [&](const Range& r) { return i >= r.first && i <= r.last; });
  }
  return count;
}

std::string DumpConfig::to_json() const {
  nlohmann::ordered_json c;
  c["op_debug_mode"] = op_debug_mode;
  c["dump_mode"] = dump_mode;
  c["path"] = path;
  c["net_name"] = net_name;
  c["iteration"] = iteration;
  c["saved_data"] = saved_data;
  c["input_output"] = input_output;
  c["kernels"] = kernels;
  c["support_device"] = std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7};
  c["statistic_category"] = statistic_category;
  nlohmann::ordered_json j;
  j["common_dump_settings"] = c;
  j["e2e_dump_settings"] = {{"enable", e2e_enable}, {"trans_flag", trans_flag}};
  return j.dump(4);
}

DumpConfig parse_dump_config(const std::string& json_text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {  // a syntax error, or a number past double
    throw ValueError(source + ": expected a JSON dump configuration, got invalid JSON (" +
                     std::string(e.what()) + ")");
  }
  if (!j.is_object()) throw ValueError(source + ": expected a JSON object, got " + j.type_name());
  DumpConfig c;
  c.source = source;
  for (const auto& [key, value] : j.items()) {
    if (key != "common_dump_settings" && key != "e2e_dump_settings") {
      throw ValueError(source + ": unknown key \"" + key +
                       "\" (expected common_dump_settings and e2e_dump_settings)");
    }
  }
  if (!j.contains("common_dump_settings") || !j["common_dump_settings"].is_object()) {
    throw ValueError(source + ": expected a \"common_dump_settings\" object");
  }
  const nlohmann::json& s = j["common_dump_settings"];
  auto where = [&](const std::string& key) { return source + ": common_dump_settings." + key; };
  auto integer = [&](const std::string& key, int lo, int hi) {
    const nlohmann::json& v = s[key];
    if (!v.is_number_integer() || v.get<long long>() < lo || v.get<long long>() > hi) {
      throw ValueError(where(key) + ": expected an integer in [" + std::to_string(lo) + ", " +
                       std::to_string(hi) + "], got " + v.dump());
    }
    return v.get<int>();
  };
  auto text = [&](const std::string& key) {
    const nlohmann::json& v = s[key];
    if (!v.is_string()) throw ValueError(where(key) + ": expected a string, got " + v.dump());
    return v.get<std::string>();
  };
  auto strings = [&](const std::string& key) {
    const nlohmann::json& v = s[key];
    if (!v.is_array()) {
      throw ValueError(where(key) + ": expected a list of strings, got " + v.dump());
    }
    std::vector<std::string> out;
    for (const auto& e : v) {
      if (!e.is_string()) throw ValueError(where(key) + ": expected strings, got " + e.dump());
      out.push_back(e.get<std::string>());
    }
    return out;
  };
  static const std::vector<std::string> known = {
      "op_debug_mode", "dump_mode",      "path",           "net_name",
      "iteration",     "saved_data",     "input_output",   "kernels",
      "support_device", "statistic_category", "file_format", "overflow_number",
      "saved_structure"};
  for (const auto& [key, value] : s.items()) {
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      throw ValueError(where(key) + ": unknown key");
    }
  }
  for (const char* required : {"dump_mode", "path", "net_name", "iteration", "input_output"}) {
    if (!s.contains(required)) throw ValueError(where(required) + ": missing (required)");
  }
  if (s.contains("op_debug_mode")) {
    c.op_debug_mode = integer("op_debug_mode", 0, 4);
    if (c.op_debug_mode != 0 && c.op_debug_mode != 3) {
      throw ValueError(where("op_debug_mode") + ": expected 0 (dump) or 3 (dump the launches "
                       "with a NaN or Inf output), got " + std::to_string(c.op_debug_mode) +
                       " (1, 2 and 4 are Ascend's overflow modes)");
    }
  }
  c.dump_mode = integer("dump_mode", 0, 2);
  if (c.dump_mode == 2) {
    throw ValueError(where("dump_mode") + ": 2 (the Cells marked with set_dump) is not supported: "
                     "loom has no set_dump; use dump_mode 1 with \"kernels\", e.g. "
                     "\"name-regex(WithLossCell/_backbone/conv1/.*)\"");
  }
  c.path = text("path");
  if (c.path.empty()) throw ValueError(where("path") + ": expected a folder, got \"\"");
  c.net_name = text("net_name");
  if (c.net_name.empty() || c.net_name.find('/') != std::string::npos) {
    throw ValueError(where("net_name") + ": expected a name without '/', got \"" + c.net_name +
                     "\"");
  }
  c.iteration = text("iteration");
  parse_iterations(c.iteration, where("iteration"));
  if (s.contains("saved_data")) {
    c.saved_data = text("saved_data");
    if (c.saved_data != "tensor" && c.saved_data != "statistic" && c.saved_data != "full") {
      throw ValueError(where("saved_data") + ": expected \"tensor\", \"statistic\" or \"full\", "
                       "got \"" + c.saved_data + "\"");
    }
  }
  c.input_output = integer("input_output", 0, 2);
  if (s.contains("kernels")) c.kernels = strings("kernels");
  for (const std::string& k : c.kernels) {
    if (!is_regex_entry(k)) continue;
    if (const auto problem = user_regex_problem(regex_of(k))) {
      throw ValueError(where("kernels") + ": \"" + k + "\": refused: " + *problem);
    }
    try {
      std::regex re(regex_of(k));
    } catch (const std::regex_error& e) {
      throw ValueError(where("kernels") + ": \"" + k + "\": invalid regular expression (" +
                       e.what() + ")");
    }
  }
  if (c.dump_mode == 1 && c.kernels.empty()) {
    throw ValueError(where("kernels") + ": dump_mode 1 dumps the kernels listed, got none");
  }
  if (s.contains("statistic_category")) {
    c.statistic_category = strings("statistic_category");
    if (c.statistic_category.empty()) {
      throw ValueError(where("statistic_category") + ": expected at least one category");
    }
    for (const std::string& cat : c.statistic_category) {
      const auto& names = statistic_categories();
      if (std::find(names.begin(), names.end(), cat) == names.end()) {
        std::string list;
        for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
        throw ValueError(where("statistic_category") + ": unknown category \"" + cat +
                         "\" (expected one of " + list + ")");
      }
    }
  }
  if (s.contains("support_device") && !s["support_device"].is_array()) {
    throw ValueError(where("support_device") + ": expected a list of device ids");
  }
  if (s.contains("file_format") && s["file_format"] != "npy") {
    throw ValueError(where("file_format") + ": expected \"npy\", got " + s["file_format"].dump());
  }
  if (j.contains("e2e_dump_settings")) {
    const nlohmann::json& e = j["e2e_dump_settings"];
    if (!e.is_object()) throw ValueError(source + ": e2e_dump_settings: expected an object");
    for (const auto& [key, value] : e.items()) {
      if (key != "enable" && key != "trans_flag" && key != "save_kernel_args") {
        throw ValueError(source + ": e2e_dump_settings." + key + ": unknown key");
      }
      if (!value.is_boolean()) {
        throw ValueError(source + ": e2e_dump_settings." + key + ": expected true or false, got " +
                         value.dump());
      }
    }
    c.e2e_enable = e.value("enable", true);
    c.trans_flag = e.value("trans_flag", true);
  }
  return c;
}

DumpConfig load_dump_config(const std::string& file) {
  std::ifstream f(file, std::ios::binary);
  if (!f) throw ValueError(file + ": cannot open the dump configuration");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_dump_config(ss.str(), file);
}

DumpConfig dump_config_for_dir(const std::string& dir, const std::string& net) {
  DumpConfig c;
  c.path = dir;
  c.net_name = net.empty() ? "Net" : net;
  c.saved_data = "full";
  c.source = "--dump";
  return c;
}

std::uint64_t parse_byte_count(const std::string& text, const std::string& what) {
  std::uint64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, v);
  std::uint64_t unit = 1;
  const std::string suffix(p, end);
  if (suffix == "K" || suffix == "KiB") unit = 1ull << 10;
  else if (suffix == "M" || suffix == "MiB") unit = 1ull << 20;
  else if (suffix == "G" || suffix == "GiB") unit = 1ull << 30;
  else if (!suffix.empty()) unit = 0;
  if (text.empty() || ec != std::errc() || p == text.data() || unit == 0 || v == 0 ||
      v > (std::uint64_t{1} << 50) / unit) {
    throw ValueError(what + ": expected a positive byte count such as 500000000, 500M or 2G, " +
                     "got '" + text + "'");
  }
  return v * unit;
}

std::string dump_file_name(const std::string& op_type, const std::string& op_name,
                           std::int64_t timestamp, const std::string& io, std::int64_t slot) {
  return op_type + "." + op_name + ".0.0." + std::to_string(timestamp) + "." + io + "." +
         std::to_string(slot) + ".DefaultFormat.npy";
}

std::int64_t next_dump_timestamp(std::int64_t& last) {
  const std::int64_t now = std::chrono::duration_cast<std::chrono::microseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
  last = std::max(now, last + 1);
  return last;
}

namespace {

// The tensor as a dump holds it: on the host, BFloat16 widened (NumPy has no bfloat16).
Tensor dumpable(const Tensor& given) {
  Tensor t = backend::to_host(given);
  if (t.dtype() == DType::kBFloat16) {
    t = Tensor::from_doubles(DType::kFloat32, t.shape(), t.to_doubles());
  }
  return t;
}

}  // namespace

std::string write_dump_npy(const std::string& dir, const std::string& op_type,
                           const std::string& op_name, const std::string& io, std::int64_t slot,
                           const Tensor& t, std::int64_t& last_timestamp) {
  ensure_dir(dir);
  const std::string path =
      dir + "/" + dump_file_name(op_type, op_name, next_dump_timestamp(last_timestamp), io, slot);
  write_text(path, data::serialize_npy(dumpable(t)));
  return path;
}

std::string dump_op_name(const runtime::LaunchEvent& e) {
  std::string name = e.name.empty() ? std::string(e.op) + "-op" + std::string(e.label)
                                    : std::string(e.name);
  if (e.depth > 0) name += "-" + sanitize(e.graph);
  return name;
}

std::string dump_full_name(const runtime::LaunchEvent& e, const std::string& op_name) {
  const std::string& scope = e.debug.scope;
  const std::size_t slash = scope.rfind('/');
  if (slash == std::string::npos) return op_name;
  return scope.substr(0, slash + 1) + op_name;
}

// ---- Dumper -------------------------------------------------------------------------------------

struct Dumper::Program {
  std::int64_t id = 0;
  std::string function;
  std::int64_t runs = 0;
  bool graph_written = false;
  bool order_written = false;
  bool collecting = false;  // this run's launches go into the execution order
  std::string order;        // the execution-order CSV being collected
  std::int64_t order_rows = 0;
};

Dumper::Dumper(DumpConfig config, std::function<void(const std::string&)> note)
    : config_(std::move(config)), note_(std::move(note)) {
  parse_iterations(config_.iteration, config_.source);
  for (const std::string& k : config_.kernels) {
    if (is_regex_entry(k)) regexes_.emplace_back(regex_of(k));
  }
}

Dumper::~Dumper() = default;

void Dumper::note(const std::string& text) const {
  if (note_) {
    note_(text);
  } else {
    std::cerr << text << "\n";
  }
}

std::string Dumper::rank_dir() const {
  return config_.path + "/rank_" + std::to_string(rank_);
}

bool Dumper::selected_name(const std::string& kind, const std::string& name) const {
  if (config_.dump_mode == 0) return true;
  const std::string qualified = kind + "." + name;
  for (const std::string& k : config_.kernels) {
    if (k == name || k == qualified) return true;
  }
  for (const std::regex& re : regexes_) {
    if (std::regex_search(qualified, re)) return true;
  }
  return false;
}

bool Dumper::selected(const runtime::LaunchEvent& e, const std::string& op_name,
                      const std::string& full_name) const {
  if (config_.dump_mode == 0) return true;
  for (const std::string& k : config_.kernels) {
    if (k == full_name || k == op_name || k == e.op) return true;
  }
  for (const std::regex& re : regexes_) {
    if (std::regex_search(full_name, re)) return true;
  }
  return false;
}

void Dumper::run_begin(const runtime::RunEvent& e) {
  auto& slot = programs_[&e.graph];
  if (!slot) {
    slot = std::make_unique<Program>();
    slot->id = static_cast<std::int64_t>(programs_.size()) - 1;
    slot->function = std::string(e.function);
  }
  current_ = slot.get();
  const std::int64_t iteration = step_ ? *step_ : current_->runs;
  ++current_->runs;
  dumping_ = !stopped_ && config_.e2e_enable && config_.selects_iteration(iteration);
  if (!dumping_) return;
  current_iteration_ = iteration;
  run_start_bytes_ = bytes_written_;
  run_start_files_ = files_written_;
  if (!metadata_written_) {
    ensure_dir(rank_dir() + "/.dump_metadata");
    write_text(rank_dir() + "/.dump_metadata/data_dump.json", config_.to_json() + "\n");
    metadata_written_ = true;
  }
  if (!current_->graph_written) {
    ensure_dir(rank_dir() + "/graphs");
    const ir::Module* m = e.graph.module();
    const std::string text = m && m->entry() == &e.graph ? ir::print_module(*m)
                                                          : ir::print_graph(e.graph);
    write_text(rank_dir() + "/graphs/ms_output_trace_code_graph_" + std::to_string(current_->id) +
                   ".ir",
               text);
    current_->graph_written = true;
  }
  current_->collecting = !current_->order_written;
  if (current_->collecting) {
    current_->order = "index,op_type,op_name,full_name,scope,file,line,role,forward,depth,graph\n";
    current_->order_rows = 0;
  }
  // Created by the first file written into it: a run that selects nothing leaves no folder.
  iteration_dir_ = rank_dir() + "/" + config_.net_name + "/" + std::to_string(current_->id) + "/" +
                   std::to_string(iteration);
  iteration_dir_made_ = false;
  statistic_rows_.clear();
  // The graph's parameters as the run receives them: weights and states before the update.
  const auto& params = e.graph.parameters();
  for (std::size_t i = 0; i < params.size() && !stopped_; ++i) {
    const std::string& name = params[i]->name();
    if (!selected_name("Parameter", name)) continue;
    Tensor value;
    if (i < e.args.size() && e.args[i].is_tensor()) {
      value = e.args[i].as_tensor();
    } else if (i >= e.args.size() && params[i]->has_default()) {
      value = *params[i]->default_value();
    }
    if (value.defined()) write("Parameter", name, "output", 0, value);
  }
}

// Inputs are written before the launch (a kernel may write its output over an input: an
// optimizer update's parameter, an in-place elementwise op), outputs after it.
void Dumper::before_launch(const runtime::LaunchEvent& e) {
  if (!current_) return;
  const std::string op_name = dump_op_name(e);
  const std::string full_name = dump_full_name(e, op_name);
  if (current_->collecting) {
    const ir::DebugInfo& d = e.debug;
    current_->order += std::to_string(current_->order_rows++) + "," +
                       csv_field(std::string(e.op)) + "," + csv_field(op_name) + "," +
                       csv_field(full_name) + "," + csv_field(d.scope) + "," + csv_field(d.file) +
                       "," + std::to_string(d.line) + "," + std::string(ir::role_name(d.role)) +
                       "," + csv_field(d.forward) + "," + std::to_string(e.depth) + "," +
                       csv_field(std::string(e.graph)) + "\n";
  }
  pending_inputs_.clear();
  if (!dumping_ || stopped_ || config_.input_output == 2) return;
  if (e.op == ir::kIfPrim || e.op == ir::kWhilePrim) return;  // their launches are dumped
  if (!selected(e, op_name, full_name)) return;
  if (config_.op_debug_mode == 3) {  // known after the launch: keep copies until then
    for (const Tensor& t : e.inputs) pending_inputs_.push_back(backend::to_host(t).clone());
    return;
  }
  for (std::size_t i = 0; i < e.inputs.size(); ++i) {
    write(std::string(e.op), op_name, "input", static_cast<std::int64_t>(i), e.inputs[i]);
  }
}

void Dumper::after_launch(const runtime::LaunchEvent& e) {
  if (!current_ || !dumping_ || stopped_) return;
  if (e.op == ir::kIfPrim || e.op == ir::kWhilePrim) return;
  const std::string op_name = dump_op_name(e);
  if (!selected(e, op_name, dump_full_name(e, op_name))) return;
  const std::string op_type(e.op);
  if (config_.op_debug_mode == 3) {
    bool bad = false;
    for (const Tensor& t : e.outputs) bad = bad || count_non_finite(backend::to_host(t)) > 0;
    if (!bad) return;
    for (std::size_t i = 0; i < pending_inputs_.size(); ++i) {
      write(op_type, op_name, "input", static_cast<std::int64_t>(i), pending_inputs_[i]);
    }
    pending_inputs_.clear();
  }
  if (config_.input_output != 1) {
    for (std::size_t i = 0; i < e.outputs.size(); ++i) {
      write(op_type, op_name, "output", static_cast<std::int64_t>(i), e.outputs[i]);
    }
  }
}

void Dumper::run_end(const runtime::RunEvent& e) {
  if (!current_) return;
  if (current_->collecting) {
    ensure_dir(rank_dir() + "/execution_order");
    write_text(rank_dir() + "/execution_order/ms_execution_order_graph_" +
                   std::to_string(current_->id) + ".csv",
               current_->order);
    current_->order.clear();
    current_->collecting = false;
    current_->order_written = true;
  }
  if (dumping_) {
    flush_statistics();
    last_dumped_ = current_;
    if (!estimated_ && !stopped_) {
      estimated_ = true;
      const std::uint64_t bytes = bytes_written_ - run_start_bytes_;
      std::string text = "dump: iteration " + std::to_string(current_iteration_) + " of graph " +
                         std::to_string(current_->id) + " (" + current_->function + ") wrote " +
                         format_bytes(bytes) + " in " +
                         std::to_string(files_written_ - run_start_files_) + " files to " +
                         iteration_dir_;
      if (total_iterations_ > 0 && current_->function == "train_step") {
        const std::int64_t n = config_.count_iterations(total_iterations_);
        text += "; " + std::to_string(n) + " of " + std::to_string(total_iterations_) +
                " training iterations selected: about " +
                format_bytes(bytes * static_cast<std::uint64_t>(n)) + " (plus evaluation)";
        if (bytes > 0 && bytes * static_cast<std::uint64_t>(n) > config_.max_bytes) {
          text += "; the limit of " + format_bytes(config_.max_bytes) +
                  " (--dump-max-bytes) stops the dump after about " +
                  std::to_string(config_.max_bytes / bytes) + " iterations";
        }
      }
      note(text);
    }
  } else {
    last_dumped_ = nullptr;
  }
  current_ = nullptr;
  dumping_ = false;
  (void)e;
}

bool Dumper::wants_gradients() const {
  return config_.dump_mode == 0 || !regexes_.empty() ||
         std::any_of(config_.kernels.begin(), config_.kernels.end(),
                     [](const std::string& k) { return k.rfind("Gradient.", 0) == 0; });
}

void Dumper::on_train_begin(nn::RunContext& rc) {
  if (wants_gradients() && rc.train_network && !rc.train_network->return_gradients()) {
    rc.train_network->set_return_gradients(true);
  }
}

void Dumper::on_train_step_begin(nn::RunContext& rc) { step_ = rc.cur_step_num - 1; }

void Dumper::on_train_step_end(nn::RunContext& rc) {
  step_.reset();
  if (!last_dumped_ || !rc.train_network || stopped_) return;
  for (const auto& [name, grad] : rc.train_network->gradients()) {
    if (selected_name("Gradient", name)) write("Gradient", name, "output", 0, grad);
  }
  flush_statistics();
  last_dumped_ = nullptr;
}

std::string Dumper::format_bytes(std::uint64_t bytes) {
  char buf[64];
  if (bytes >= (1ull << 30)) {
    std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1ull << 30));
  } else if (bytes >= (1ull << 20)) {
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1ull << 20));
  } else if (bytes >= (1ull << 10)) {
    std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(bytes) / (1ull << 10));
  } else {
    std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(bytes));
  }
  return buf;
}

void Dumper::flush_statistics() {
  if (statistic_rows_.empty()) return;
  const std::string path = iteration_dir_ + "/statistic.csv";
  std::string text;
  if (!fs::exists(path)) {
    text = "Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape";
    for (const std::string& c : config_.statistic_category) text += "," + statistic_header(c);
    text += "\n";
  }
  for (const std::string& row : statistic_rows_) text += row;
  write_text(path, text, /*append=*/true);
  statistic_rows_.clear();
}

bool Dumper::write(const std::string& op_type, const std::string& op_name, const std::string& io,
                   std::int64_t slot, const Tensor& given) {
  if (stopped_ || iteration_dir_.empty()) return false;
  const Tensor t = dumpable(given);
  const bool tensors = config_.saved_data != "statistic";
  const bool statistics = config_.saved_data != "tensor";
  std::string npy;
  if (tensors) npy = data::serialize_npy(t);
  const std::uint64_t size = tensors ? npy.size() : 0;
  if (bytes_written_ + size > config_.max_bytes) {
    stopped_ = true;
    flush_statistics();
    note("dump: stopped: the next file would pass the limit of " + format_bytes(config_.max_bytes) +
         " (--dump-max-bytes; " + format_bytes(bytes_written_) + " in " +
         std::to_string(files_written_) + " files written to " + config_.path + "); iteration " +
         std::to_string(current_iteration_) + " in " + iteration_dir_ +
         " is partial; training goes on without dumping");
    return false;
  }
  if (!iteration_dir_made_) {
    ensure_dir(iteration_dir_);
    iteration_dir_made_ = true;
  }
  const std::int64_t timestamp = next_dump_timestamp(last_timestamp_);
  const std::string ts = std::to_string(timestamp);
  if (tensors) {
    write_text(iteration_dir_ + "/" + dump_file_name(op_type, op_name, timestamp, io, slot), npy);
    bytes_written_ += size;
    ++files_written_;
  }
  if (statistics) {
    std::string row = csv_field(op_type) + "," + csv_field(op_name) + ",0,0," + ts + "," + io +
                      "," + std::to_string(slot) + "," + std::to_string(t.nbytes()) + "," +
                      lower_dtype_name(t.dtype()) + "," + csv_field(shape_text(t.shape()));
    const TensorStats s = tensor_stats(t);
    for (const std::string& c : config_.statistic_category) {
      row += ",";
      if (c == "max") row += number_text(s.max);
      else if (c == "min") row += number_text(s.min);
      else if (c == "avg") row += number_text(s.mean);
      else if (c == "count") row += std::to_string(s.count);
      else if (c == "negative zero count") row += std::to_string(s.negative);
      else if (c == "positive zero count") row += std::to_string(s.positive);
      else if (c == "nan count") row += std::to_string(s.nan);
      else if (c == "negative inf count") row += std::to_string(s.neg_inf);
      else if (c == "positive inf count") row += std::to_string(s.pos_inf);
      else if (c == "zero count") row += std::to_string(s.zero);
      else if (c == "l2norm") row += number_text(s.l2norm);
      else if (c == "md5") row += md5_hex(t);
    }
    statistic_rows_.push_back(row + "\n");
  }
  return true;
}

}  // namespace loom::debug
