#include "summary/reader.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <ostream>
#include <sstream>

#include <google/protobuf/stubs/logging.h>

#include "core/ir/error.h"
#include "summary/crc32c.h"
#include "summary/proto/hparams.pb.h"

namespace loom::summary {
namespace {

std::uint64_t get_le(const std::string& s, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i)
    v = (v << 8) | static_cast<unsigned char>(s[at + static_cast<std::size_t>(i)]);
  return v;
}

// Natural order: digit runs compare as numbers, so "...42.10" sorts after "...42.9".
bool natural_less(const std::string& a, const std::string& b) {
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const bool da = std::isdigit(static_cast<unsigned char>(a[i]));
    const bool db = std::isdigit(static_cast<unsigned char>(b[j]));
    if (da && db) {
      std::size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      std::string na = a.substr(i, ie - i), nb = b.substr(j, je - j);
      na.erase(0, std::min(na.find_first_not_of('0'), na.size()));
      nb.erase(0, std::min(nb.find_first_not_of('0'), nb.size()));
      if (na.size() != nb.size()) return na.size() < nb.size();
      if (na != nb) return na < nb;
      i = ie, j = je;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i, ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

std::string hex(std::uint32_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << std::setw(8) << std::setfill('0') << v;
  return os.str();
}

std::string num(double v) {
  std::ostringstream os;
  os << std::setprecision(6) << v;
  return os.str();
}

std::string quoted(const std::string& s, std::size_t limit = 60) {
  std::string t = s.size() > limit ? s.substr(0, limit) + "..." : s;
  for (char& c : t)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  return "\"" + t + "\"";
}

std::string pvalue(const google::protobuf::Value& v) {
  switch (v.kind_case()) {
    case google::protobuf::Value::kNumberValue: return num(v.number_value());
    case google::protobuf::Value::kStringValue: return quoted(v.string_value(), 40);
    case google::protobuf::Value::kBoolValue: return v.bool_value() ? "true" : "false";
    default: return "?";
  }
}

struct TagInfo {
  std::string kind, value;
  std::int64_t step = 0;
};

void describe_value(const tb::Summary::Value& v, TagInfo& info) {
  const std::string plugin =
      v.has_metadata() ? v.metadata().plugin_data().plugin_name() : std::string();
  switch (v.value_case()) {
    case tb::Summary::Value::kSimpleValue:
      info.kind = "scalar";
      info.value = num(v.simple_value());
      return;
    case tb::Summary::Value::kHisto: {
      const tb::HistogramProto& h = v.histo();
      info.kind = "histogram";
      info.value = "num " + num(h.num()) + " min " + num(h.min()) + " max " + num(h.max()) +
                   " mean " + num(h.num() > 0 ? h.sum() / h.num() : 0.0);
      return;
    }
    case tb::Summary::Value::kImage: {
      const tb::Summary::Image& im = v.image();
      info.kind = "image";
      info.value = std::to_string(im.height()) + "x" + std::to_string(im.width()) + "x" +
                   std::to_string(im.colorspace()) + " PNG " +
                   std::to_string(im.encoded_image_string().size()) + " bytes";
      return;
    }
    case tb::Summary::Value::kTensor: {
      const tb::TensorProto& t = v.tensor();
      if (plugin == "hparams") {
        info.kind = "hparams";
        hparams::HParamsPluginData d;
        if (!d.ParseFromString(v.metadata().plugin_data().content())) {
          info.value = "(unparsable plugin content)";
        } else if (d.has_session_start_info()) {
          std::map<std::string, std::string> sorted;
          for (const auto& [k, pv] : d.session_start_info().hparams()) sorted[k] = pvalue(pv);
          for (const auto& [k, s] : sorted) info.value += (info.value.empty() ? "" : " ") + k + "=" + s;
        } else if (d.has_session_end_info()) {
          info.value = "status " + hparams::Status_Name(d.session_end_info().status());
        } else if (d.has_experiment()) {
          info.value = std::to_string(d.experiment().hparam_infos_size()) + " hparams, metrics";
          for (const auto& m : d.experiment().metric_infos()) info.value += " " + m.name().tag();
        }
        return;
      }
      if (t.dtype() == tb::DT_STRING) {
        info.kind = plugin == "text" ? "text" : "tensor";
        info.value = t.string_val_size() > 0 ? quoted(t.string_val(0)) : "\"\"";
        return;
      }
      info.kind = plugin.empty() ? "tensor" : plugin;
      if (t.float_val_size() > 0) info.value = num(t.float_val(0));
      else if (t.double_val_size() > 0) info.value = num(t.double_val(0));
      else info.value = tb::DataType_Name(t.dtype());
      return;
    }
    default:
      info.kind = "other";
      info.value = "";
  }
}

}  // namespace

EventFileContents read_event_file_checked(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FormatError("summary: cannot open event file '" + path + "'");
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_event_file(data, path);
}

EventFileContents parse_event_file(const std::string& data, const std::string& path) {
  // A payload that is not an Event is reported below, in one line naming its offset; protobuf's
  // own log lines about it (a string field with invalid UTF-8) would only repeat that.
  const google::protobuf::LogSilencer quiet;
  EventFileContents out;
  std::size_t pos = 0;
  auto fail = [&](std::size_t rec, const std::string& what) {
    out.error = path + ": record at offset " + std::to_string(rec) + ": " + what;
  };
  while (pos < data.size()) {
    const std::size_t rec = pos;
    if (data.size() - pos < 12) {
      fail(rec, "truncated header: " + std::to_string(data.size() - pos) +
                    " bytes where 12 are needed (file ends at offset " +
                    std::to_string(data.size()) + ")");
      break;
    }
    const std::uint64_t len = get_le(data, pos, 8);
    const auto stored_len_crc = static_cast<std::uint32_t>(get_le(data, pos + 8, 4));
    const std::uint32_t len_crc = masked_crc32c(data.data() + pos, 8);
    if (stored_len_crc != len_crc) {
      fail(rec, "length CRC mismatch at offset " + std::to_string(pos + 8) + " (stored " +
                    hex(stored_len_crc) + ", computed " + hex(len_crc) + " over bytes " +
                    std::to_string(pos) + ".." + std::to_string(pos + 7) + ")");
      break;
    }
    const std::size_t body = pos + 12;
    if (len > data.size() - body || data.size() - body - len < 4) {
      fail(rec, "truncated record: length " + std::to_string(len) + " needs bytes up to offset " +
                    std::to_string(body + len + 4) + ", file ends at offset " +
                    std::to_string(data.size()));
      break;
    }
    const auto n = static_cast<std::size_t>(len);
    const auto stored_crc = static_cast<std::uint32_t>(get_le(data, body + n, 4));
    const std::uint32_t crc = masked_crc32c(data.data() + body, n);
    if (stored_crc != crc) {
      fail(rec, "data CRC mismatch over bytes " + std::to_string(body) + ".." +
                    std::to_string(body + n - 1) + " (stored " + hex(stored_crc) +
                    ", computed " + hex(crc) + ")");
      break;
    }
    EventRecord r;
    r.offset = rec;
    if (!r.event.ParseFromArray(data.data() + body, static_cast<int>(n))) {
      fail(rec, "payload at offset " + std::to_string(body) + " is not an Event");
      break;
    }
    out.records.push_back(std::move(r));
    pos = body + n + 4;
  }
  return out;
}

std::vector<EventRecord> read_event_file(const std::string& path) {
  EventFileContents c = read_event_file_checked(path);
  if (c.error) throw FormatError("summary: " + *c.error);
  return std::move(c.records);
}

std::vector<std::string> list_event_files(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(dir, ec)) return {dir};
  if (!fs::is_directory(dir, ec))
    throw FormatError("summary: expected a directory of event files, got '" + dir +
                      "' (no such directory)");
  std::vector<std::string> files;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && name.find("tfevents") != std::string::npos)
      files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end(), natural_less);
  return files;
}

int show(const std::string& dir, std::ostream& out) {
  const std::vector<std::string> files = list_event_files(dir);
  if (files.empty()) {
    out << "no event files (names containing \"tfevents\") in " << dir << "\n";
    return 1;
  }
  std::vector<std::string> errors;
  for (const std::string& path : files) {
    const EventFileContents c = read_event_file_checked(path);
    describe(std::filesystem::path(path).filename().string(), c, out);
    if (c.error) errors.push_back(*c.error);
  }
  for (const std::string& e : errors) out << "error: " << e << "\n";
  return errors.empty() ? 0 : 1;
}

void describe(const std::string& name, const EventFileContents& c, std::ostream& out) {
  const google::protobuf::LogSilencer quiet;  // an unparsable graph or plugin payload is shown
  std::int64_t lo = 0, hi = 0;
  bool any = false;
  std::vector<std::string> order;
  std::map<std::string, TagInfo> tags;
  auto note = [&](const std::string& key, TagInfo info) {
    if (!tags.count(key)) order.push_back(key);
    tags[key] = std::move(info);
  };
  for (const EventRecord& r : c.records) {
    const tb::Event& e = r.event;
    if (e.what_case() == tb::Event::kFileVersion) continue;
    lo = any ? std::min(lo, e.step()) : e.step();
    hi = any ? std::max(hi, e.step()) : e.step();
    any = true;
    if (e.what_case() == tb::Event::kGraphDef) {
      tb::GraphDef g;
      TagInfo info{"graph", "", e.step()};
      info.value = g.ParseFromString(e.graph_def())
                       ? std::to_string(g.node_size()) + " nodes"
                       : "(unparsable GraphDef)";
      note("(graph_def)", info);
    } else if (e.what_case() == tb::Event::kSummary) {
      for (const tb::Summary::Value& v : e.summary().value()) {
        TagInfo info;
        info.step = e.step();
        describe_value(v, info);
        note(v.tag(), info);
      }
    }
  }
  out << name << ": " << c.records.size() << " records";
  if (any) out << ", steps " << lo << ".." << hi;
  out << "\n";
  std::size_t width = 0;
  for (const std::string& k : order) width = std::max(width, k.size());
  for (const std::string& k : order) {
    const TagInfo& t = tags[k];
    out << "  " << std::left << std::setw(10) << t.kind << " " << std::setw(static_cast<int>(width))
        << k << "  step " << t.step << "  " << t.value << "\n";
  }
}

}  // namespace loom::summary
