// `loom ckpt show` (tools/ckpt_cmd.h).
#include "tools/ckpt_cmd.h"

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "core/ir/error.h"

namespace loom::tools {
namespace {

constexpr char kCkptHelp[] =
    "usage: loom ckpt show FILE.ckpt [--json]\n"
    "Lists what a checkpoint (loom's or MindSpore's .ckpt) holds:\n"
    "  - the file's size and number of entries;\n"
    "  - every entry, tensors in file order then strings: name, dtype, shape, elements, the\n"
    "    CRC-32 of the tensor's bytes (zlib's crc32, 8 hex digits: equal values have equal\n"
    "    CRCs, so entries can be compared between files) and the value of one-element tensors\n"
    "    and strings;\n"
    "  - the training state of a `loom train --ckpt-dir` checkpoint: epoch_num, step_num,\n"
    "    global_step, seed, where a resume continues, the optimizer (loom.optimizer, else\n"
    "    inferred from its state names: moments -> Momentum, accum/stat -> SGD,\n"
    "    moment1/moment2 -> Adam, adam_m/adam_v -> AdamWeightDecay), its learning rate and\n"
    "    scalars; or that the file holds parameters only;\n"
    "  - a summary: parameters, optimizer states and scalars, other entries.\n"
    "options:\n"
    "  --json      print the same as one JSON object\n"
    "  -h, --help  this text\n"
    "Exit status 0; 1 when the file cannot be read as a checkpoint (missing, truncated, corrupt:\n"
    "the same message as `loom eval --ckpt`); 2 on a usage error.\n";

int usage(const std::string& message) {
  std::cerr << "loom ckpt: " << message << "\n(see `loom ckpt --help`)\n";
  return 2;
}

// The optimizers' per-parameter state prefixes (optim/optimizer.h) and whose they are.
struct StateKind {
  const char* prefix;
  const char* optimizer;
};
constexpr StateKind kStateKinds[] = {
    {"moments", "Momentum"},       {"accum", "SGD"},
    {"stat", "SGD"},               {"moment1", "Adam"},
    {"moment2", "Adam"},           {"adam_m", "AdamWeightDecay"},
    {"adam_v", "AdamWeightDecay"},
};

// The optimizer's own scalar entries (besides its states).
bool is_optimizer_scalar(const std::string& name) {
  return name == "global_step" || name == "learning_rate" || name == "momentum" ||
         name == "beta1_power" || name == "beta2_power" ||
         name.rfind("learning_rate_group_", 0) == 0;
}

// MindSpore's append_info and loom's resume position.
bool is_run_entry(const std::string& name) {
  return name == "epoch_num" || name == "step_num" || name.rfind("loom.", 0) == 0;
}

enum class Kind { kParameter, kState, kOptimizer, kRun, kString };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kParameter: return "parameter";
    case Kind::kState: return "optimizer_state";
    case Kind::kOptimizer: return "optimizer";
    case Kind::kRun: return "run";
    case Kind::kString: return "string";
  }
  return "";
}

std::uint32_t crc32_of(const void* data, std::size_t size) {
  uLong c = crc32(0L, Z_NULL, 0);
  const auto* p = static_cast<const Bytef*>(data);
  // zlib's crc32 takes uInt lengths: feed the bytes in pieces.
  for (std::size_t at = 0; at < size;) {
    const std::size_t n = std::min<std::size_t>(size - at, std::size_t{1} << 30);
    c = crc32(c, p + at, static_cast<uInt>(n));
    at += n;
  }
  return static_cast<std::uint32_t>(c);
}

std::string hex8(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

// The one value of a one-element tensor, as text (integers exactly; floats with 6 significant
// digits) and as JSON.
std::string scalar_text(const Tensor& t) {
  switch (t.dtype()) {
    case DType::kInt64: return std::to_string(t.data<std::int64_t>()[0]);
    case DType::kInt32: return std::to_string(t.data<std::int32_t>()[0]);
    case DType::kUInt8: return std::to_string(t.data<std::uint8_t>()[0]);
    case DType::kBool: return t.get(0) != 0 ? "true" : "false";
    default: {
      std::ostringstream s;
      s << t.get(0);
      return s.str();
    }
  }
}

nlohmann::ordered_json scalar_json(const Tensor& t) {
  switch (t.dtype()) {
    case DType::kInt64: return t.data<std::int64_t>()[0];
    case DType::kInt32: return t.data<std::int32_t>()[0];
    case DType::kUInt8: return t.data<std::uint8_t>()[0];
    case DType::kBool: return t.get(0) != 0;
    default: return t.get(0);
  }
}

std::int64_t int_value(const Tensor& t) {
  if (t.dtype() == DType::kInt64) return t.data<std::int64_t>()[0];
  return static_cast<std::int64_t>(t.get(0));
}

struct Entry {
  std::string name;
  Kind kind = Kind::kParameter;
  const Tensor* tensor = nullptr;  // null for a string
  std::string text;                // a string's value
  std::string dtype;               // MindSpore's name ("Float32"), "str" for a string
  std::string crc;                 // tensors only
};

// Rows of columns, padded to the widest cell; `right` columns are right-aligned. No trailing
// spaces.
void print_table(std::ostream& out, const std::vector<std::vector<std::string>>& rows,
                 const std::vector<bool>& right, const std::string& indent) {
  std::vector<std::size_t> width;
  for (const auto& row : rows) {
    for (std::size_t c = 0; c < row.size(); ++c) {
      if (width.size() <= c) width.push_back(0);
      width[c] = std::max(width[c], row[c].size());
    }
  }
  for (const auto& row : rows) {
    std::string line = indent;
    for (std::size_t c = 0; c < row.size(); ++c) {
      if (c) line += "  ";
      const std::string pad(width[c] - row[c].size(), ' ');
      line += (c < right.size() && right[c]) ? pad + row[c] : row[c] + pad;
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
}

std::string plural(std::int64_t n, const std::string& word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

std::string joined(const std::vector<std::string>& names, std::size_t max = 6) {
  std::string s;
  for (std::size_t i = 0; i < names.size() && i < max; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > max) s += ", ... (" + std::to_string(names.size() - max) + " more)";
  return s;
}

int show(const std::string& path, bool json) {
  const checkpoint::Checkpoint ck = checkpoint::load_checkpoint(path);
  std::error_code ec;
  const std::uintmax_t bytes = std::filesystem::file_size(path, ec);

  // Classify: a state is "<prefix>.<param>" with a known prefix and <param> in the file.
  std::set<std::string> names;
  for (const auto& [name, t] : ck.tensors) names.insert(name);
  std::vector<Entry> entries;
  std::vector<std::string> prefixes;  // state prefixes seen, in order
  std::string inferred;               // the optimizer those prefixes belong to
  for (const auto& [name, t] : ck.tensors) {
    Entry e;
    e.name = name;
    e.tensor = &t;
    e.dtype = checkpoint::tensor_type_name(t.dtype());
    e.crc = hex8(crc32_of(t.raw_data(), t.nbytes()));
    if (is_optimizer_scalar(name)) {
      e.kind = Kind::kOptimizer;
    } else if (is_run_entry(name)) {
      e.kind = Kind::kRun;
    } else {
      for (const StateKind& s : kStateKinds) {
        const std::string prefix = std::string(s.prefix) + ".";
        if (name.rfind(prefix, 0) == 0 && names.count(name.substr(prefix.size()))) {
          e.kind = Kind::kState;
          if (std::find(prefixes.begin(), prefixes.end(), s.prefix) == prefixes.end()) {
            prefixes.push_back(s.prefix);
          }
          if (inferred.empty()) inferred = s.optimizer;
          break;
        }
      }
    }
    entries.push_back(e);
  }
  for (const auto& [name, value] : ck.strings) {
    Entry e;
    e.name = name;
    e.kind = Kind::kString;
    e.text = value;
    e.dtype = "str";
    entries.push_back(e);
  }

  // The training state.
  std::optional<std::string> optimizer;
  std::string optimizer_source;
  for (const auto& [name, value] : ck.strings) {
    if (name == "loom.optimizer") {
      optimizer = value;
      optimizer_source = "loom.optimizer";
    }
  }
  if (!optimizer && !inferred.empty()) {
    optimizer = inferred;
    optimizer_source = "inferred from its states";
  }
  auto one = [&](const char* name) -> const Tensor* {
    const Tensor* t = ck.find(name);
    return t && t->numel() == 1 ? t : nullptr;
  };
  const Tensor* epoch_num = one("epoch_num");
  const Tensor* step_num = one("step_num");
  const Tensor* global_step = one("global_step");
  const Tensor* seed = one("loom.seed");
  const Tensor* data_epoch = one("loom.data_epoch");
  const Tensor* data_index = one("loom.data_index");
  const bool has_state = epoch_num || step_num || global_step || seed || optimizer ||
                         std::any_of(entries.begin(), entries.end(), [](const Entry& e) {
                           return e.kind == Kind::kOptimizer || e.kind == Kind::kState;
                         });

  // Totals per kind.
  struct Total {
    std::int64_t entries = 0, values = 0;
    std::vector<std::string> names;
  };
  std::map<Kind, Total> totals;
  for (const Entry& e : entries) {
    Total& t = totals[e.kind];
    ++t.entries;
    if (e.tensor) t.values += e.tensor->numel();
    t.names.push_back(e.name);
  }

  // The learning rate(s) and the optimizer's scalars, as (label, text, json).
  std::vector<std::pair<std::string, std::string>> optim_lines;
  nlohmann::ordered_json optim_json = nlohmann::ordered_json::object();
  for (const Entry& e : entries) {
    if (e.kind != Kind::kOptimizer || e.name == "global_step") continue;
    const Tensor& t = *e.tensor;
    if (t.numel() == 1) {
      optim_lines.emplace_back(e.name, scalar_text(t));
      optim_json[e.name] = scalar_json(t);
    } else if (t.numel() > 1) {
      std::ostringstream s;
      s << t.numel() << " values, one per step (first " << t.get(0) << ", last "
        << t.get(t.numel() - 1) << ")";
      optim_lines.emplace_back(e.name, s.str());
      optim_json[e.name] = t.to_doubles();
    }
  }
  const bool lr_stored = ck.find("learning_rate") != nullptr;

  if (json) {
    nlohmann::ordered_json j;
    j["file"] = path;
    j["bytes"] = bytes;
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const Entry& e : entries) {
      nlohmann::ordered_json x;
      x["name"] = e.name;
      x["kind"] = kind_name(e.kind);
      x["dtype"] = e.dtype;
      if (e.tensor) {
        x["shape"] = e.tensor->shape();
        x["elements"] = e.tensor->numel();
        x["crc32"] = e.crc;
        if (e.tensor->numel() == 1) x["value"] = scalar_json(*e.tensor);
      } else {
        x["value"] = e.text;
      }
      list.push_back(std::move(x));
    }
    j["entries"] = std::move(list);
    if (has_state) {
      nlohmann::ordered_json s = nlohmann::ordered_json::object();
      if (epoch_num) s["epoch_num"] = int_value(*epoch_num);
      if (step_num) s["step_num"] = int_value(*step_num);
      if (global_step) s["global_step"] = int_value(*global_step);
      if (seed) s["seed"] = static_cast<std::uint64_t>(int_value(*seed));
      if (data_epoch) s["data_epoch"] = int_value(*data_epoch);
      if (data_index) s["data_index"] = int_value(*data_index);
      if (optimizer) {
        s["optimizer"] = *optimizer;
        s["optimizer_source"] = optimizer_source;
      }
      s["state_prefixes"] = prefixes;
      for (auto& [k, v] : optim_json.items()) s[k] = v;
      j["training_state"] = std::move(s);
    } else {
      j["training_state"] = nullptr;
    }
    nlohmann::ordered_json sum;
    auto total = [&](Kind k) {
      const Total& t = totals[k];
      return nlohmann::ordered_json{{"entries", t.entries}, {"values", t.values}};
    };
    sum["parameters"] = total(Kind::kParameter);
    sum["optimizer_states"] = total(Kind::kState);
    sum["optimizer_scalars"] = total(Kind::kOptimizer);
    sum["run"] = total(Kind::kRun);
    sum["strings"] = totals[Kind::kString].entries;
    j["summary"] = std::move(sum);
    std::cout << j.dump() << "\n";
    return 0;
  }

  const std::size_t count = ck.tensors.size() + ck.strings.size();
  std::cout << path << ": " << bytes << " bytes, " << count << (count == 1 ? " entry" : " entries")
            << " (" << plural(static_cast<std::int64_t>(ck.tensors.size()), "tensor") << ", "
            << plural(static_cast<std::int64_t>(ck.strings.size()), "string") << ")\n";
  std::vector<std::vector<std::string>> rows = {
      {"name", "dtype", "shape", "elements", "crc32", "value"}};
  for (const Entry& e : entries) {
    if (e.tensor) {
      rows.push_back({e.name, e.dtype, shape_to_string(e.tensor->shape()),
                      std::to_string(e.tensor->numel()), e.crc,
                      e.tensor->numel() == 1 ? scalar_text(*e.tensor) : ""});
    } else {
      rows.push_back({e.name, e.dtype, "-", "-", "-", nlohmann::ordered_json(e.text).dump()});
    }
  }
  if (std::all_of(rows.begin() + 1, rows.end(), [](const auto& r) { return r.back().empty(); })) {
    for (auto& r : rows) r.pop_back();  // no values: no value column
  }
  print_table(std::cout, rows, {false, false, false, true, false, false}, "  ");

  if (!has_state) {
    std::cout << "training state: none (parameters only, e.g. a network's weights; no "
                 "optimizer, step or epoch entries)\n";
  } else {
    std::cout << "training state:\n";
    std::vector<std::vector<std::string>> s;
    if (epoch_num) s.push_back({"epoch", scalar_text(*epoch_num) + " (epoch_num)"});
    if (step_num) s.push_back({"step", scalar_text(*step_num) + " (step_num)"});
    if (global_step) s.push_back({"global_step", scalar_text(*global_step)});
    if (seed) {
      s.push_back({"seed", std::to_string(static_cast<std::uint64_t>(int_value(*seed))) +
                               " (loom.seed)"});
    }
    if (data_epoch && data_index) {
      s.push_back({"resumes at", "epoch " + std::to_string(int_value(*data_epoch) + 1) +
                                     ", batch " + std::to_string(int_value(*data_index)) +
                                     " of it (loom.data_epoch " + scalar_text(*data_epoch) +
                                     ", loom.data_index " + scalar_text(*data_index) + ")"});
    }
    if (!seed) s.push_back({"seed", "not recorded (not a loom training checkpoint)"});
    if (optimizer) {
      const std::string states = prefixes.empty() ? std::string("no states")
                                                   : "states: " + joined(prefixes);
      s.push_back({"optimizer", *optimizer + " (" + optimizer_source + "; " + states + ")"});
    } else {
      s.push_back({"optimizer", "unknown (no loom.optimizer and no optimizer states)"});
    }
    for (const auto& [label, text] : optim_lines) s.push_back({label, text});
    if (!lr_stored && optimizer) {
      s.push_back({"learning_rate", "not stored (a schedule: computed from the step)"});
    }
    print_table(std::cout, s, {}, "  ");
  }

  std::cout << "summary:\n";
  std::vector<std::vector<std::string>> sum;
  auto add = [&](Kind k, const std::string& label, bool list_names) {
    const Total& t = totals[k];
    if (t.entries == 0 && k != Kind::kParameter) return;
    std::vector<std::string> row = {label, plural(t.entries, "tensor"),
                                    plural(t.values, "value")};
    if (k == Kind::kString) row = {label, plural(t.entries, "string"), "-"};
    if (k == Kind::kState && !prefixes.empty()) row.push_back(joined(prefixes));
    if (list_names) row.push_back(joined(t.names));
    sum.push_back(std::move(row));
  };
  add(Kind::kParameter, "parameters", false);
  add(Kind::kState, "optimizer states", false);
  add(Kind::kOptimizer, "optimizer scalars", true);
  add(Kind::kRun, "run position", true);
  add(Kind::kString, "strings", true);
  print_table(std::cout, sum, {false, true, true}, "  ");
  return 0;
}

}  // namespace

int ckpt_command(const std::vector<std::string>& args) {
  if (args.empty()) {
    std::cerr << kCkptHelp;
    return 2;
  }
  if (std::find(args.begin(), args.end(), "-h") != args.end() ||
      std::find(args.begin(), args.end(), "--help") != args.end() || args[0] == "help") {
    std::cout << kCkptHelp;
    return 0;
  }
  if (args[0] != "show") {
    return usage("expected the subcommand `show FILE.ckpt`, got '" + args[0] + "'");
  }
  bool json = false;
  std::vector<std::string> files;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--json") {
      json = true;
    } else if (a.size() > 1 && a[0] == '-') {
      return usage("unknown option '" + a + "'");
    } else {
      files.push_back(a);
    }
  }
  if (files.size() != 1) {
    return usage(files.empty() ? "expected a checkpoint file after `show`"
                               : "expected one checkpoint file, got " +
                                     std::to_string(files.size()));
  }
  try {
    return show(files[0], json);
  } catch (const Error& e) {
    std::cout << std::flush;
    std::cerr << "loom ckpt: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {  // std::bad_alloc...: still a message and status 1
    std::cout << std::flush;
    std::cerr << "loom ckpt: " << files[0] << ": " << e.what() << "\n";
    return 1;
  }
}

}  // namespace loom::tools
