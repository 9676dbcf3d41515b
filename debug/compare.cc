// Two dumps compared (debug/compare.h): matching, msprobe's and MindStudio's measures, the pass
// rule, A's execution order, the CSV.
//
// Sources of the definitions, as read in the stored public code (msprobe is MindStudio's probe,
// Ascend/mstt debug/accuracy_tools/msprobe):
//   - msprobe core/compare/npy_compare.py: handle_inf_nan (NaN/Inf at equal positions set to 0,
//     else "N/A"), GetCosineSimilarity (one-element and 0-d tensors "unsupported"; both norms
//     <= Const.FLOAT_EPSILON -> 1.0; one of them -> "Nan"), GetMaxAbsErr, get_relative_err
//     (b == 0 replaced by FLOAT_EPSILON on both sides, |(a - b) / b|), GetErrRatio (fraction of
//     relative errors < 0.001 / 0.005); core/common/const.py: FLOAT_EPSILON = np.finfo(float).eps,
//     the column names ("EucDist", "Five Thousandths Err Ratio", "Accuracy Reached or Not") and
//     the thresholds COS_THRESHOLD 0.99, MAX_ABS_ERR_THRESHOLD 0.001, COS_MAX_THRESHOLD 0.9,
//     MAX_ABS_ERR_MAX_THRESHOLD 1; check_accuracy (Unmatched for a shape mismatch, No for "N/A",
//     then the two threshold rules). The EucDist measure itself was not found in the stored
//     versions of npy_compare.py; ‖a − b‖ is the name's meaning and what the brief gives.
//   - MindStudio's operator comparison (msaccucmp, kullback_leibler_divergence.py, 2025): KL
//     divergence is not over a softmax: each tensor is min-max scaled to [0, 1] (left as is when
//     max == min), floored with np.maximum(x, float32 eps), normalized to sum 1, then
//     Σ p·log(p / q) with p from "my output" (A) and q from the ground truth (B); a result whose
//     magnitude is below an epsilon is 0 (the constant, ConstManager.FLOAT_EPSILON, was not seen;
//     float64's epsilon is used). The 2019-2021 version scaled the same way and called
//     scipy.stats.entropy(p, q), which is the same sum after normalization, without the floor.
#include "debug/compare.h"
#include "debug/csv.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/ir/error.h"

namespace loom::debug {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kEpsilon = std::numeric_limits<double>::epsilon();  // msprobe's FLOAT_EPSILON
constexpr double kFloat32Epsilon = std::numeric_limits<float>::epsilon();

bool is_param_kind(const DumpTensor& t) {
  return t.op_type == "Parameter" || t.op_type == "Gradient";
}

// min-max scaled into [0, 1] (as is when constant), floored at float32's epsilon, summing to 1.
std::vector<double> kl_distribution(const std::vector<double>& v) {
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  const double min = *lo, range = *hi - *lo;
  std::vector<double> p(v.size());
  double sum = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    p[i] = std::max(range != 0 ? (v[i] - min) / range : v[i], kFloat32Epsilon);
    sum += p[i];
  }
  for (double& x : p) x /= sum;
  return p;
}

double kl_divergence(const std::vector<double>& a, const std::vector<double>& b) {
  const std::vector<double> p = kl_distribution(a), q = kl_distribution(b);
  double kl = 0;
  for (std::size_t i = 0; i < p.size(); ++i) kl += p[i] * std::log(p[i] / q[i]);
  return std::fabs(kl) < kEpsilon ? 0.0 : kl;
}

std::string count_text(std::int64_t n, const std::string& word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

// Shortest round-trip text of a double; "N/A" (a measure) or "nan" (a statistic) for NaN.
std::string number(double v, const char* nan_text = "N/A") {
  if (std::isnan(v)) return nan_text;
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}


// msprobe's shape text: "[2, 3]".
std::string list_shape(const Shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// "12 tensors in graphs 0, 1, iterations 0..3, e.g. Conv2D-op0.output.0, ..."
std::string describe_side(const std::vector<const DumpTensor*>& ts) {
  if (ts.empty()) return "no tensors";
  std::set<std::int64_t> graphs, iterations;
  for (const DumpTensor* t : ts) {
    graphs.insert(t->graph);
    iterations.insert(t->iteration);
  }
  std::string s = count_text(static_cast<std::int64_t>(ts.size()), "tensor") +
                  (graphs.size() == 1 ? " in graph " : " in graphs ");
  std::size_t k = 0;
  for (std::int64_t g : graphs) s += (k++ ? ", " : "") + std::to_string(g);
  s += iterations.size() == 1 ? ", iteration " + std::to_string(*iterations.begin())
                              : ", iterations " + std::to_string(*iterations.begin()) + ".." +
                                    std::to_string(*iterations.rbegin());
  s += ", e.g. ";
  for (std::size_t i = 0; i < ts.size() && i < 3; ++i) s += (i ? ", " : "") + ts[i]->key();
  return s;
}

std::string role_text(const ExecutionOrderRow& n) {
  if (n.role == "backward" && !n.forward.empty()) return "backward of " + n.forward;
  return n.role;
}

using MatchKey = std::tuple<std::int64_t, std::int64_t, std::string, std::int64_t>;

}  // namespace

TensorMetrics compare_values(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) {
    throw ValueError("compare_values: expected as many values on both sides, got " +
                     std::to_string(a.size()) + " and " + std::to_string(b.size()));
  }
  TensorMetrics m;
  const std::size_t n = a.size();
  if (n == 0) {
    m.cosine = m.one_thousandth_err_ratio = m.five_thousandths_err_ratio = kNaN;
    m.kl_divergence = kNaN;
    m.message = "empty tensors: nothing to compare";
    return m;
  }
  // NaN and Inf: equal at equal places -> compared as 0; anywhere else -> N/A.
  std::vector<double> x = a, y = b;
  std::int64_t nan_a = 0, inf_a = 0, nan_b = 0, inf_b = 0;
  bool mismatch = false;
  for (std::size_t i = 0; i < n; ++i) {
    const bool fa = !std::isfinite(a[i]), fb = !std::isfinite(b[i]);
    if (!fa && !fb) continue;
    nan_a += std::isnan(a[i]);
    inf_a += std::isinf(a[i]);
    nan_b += std::isnan(b[i]);
    inf_b += std::isinf(b[i]);
    if (fa && fb && ((std::isnan(a[i]) && std::isnan(b[i])) || a[i] == b[i])) {
      x[i] = y[i] = 0;
      ++m.nonfinite;
    } else {
      mismatch = true;
    }
  }
  if (mismatch) {
    m = TensorMetrics{};
    m.cosine = m.euc_dist = m.max_abs_err = m.max_relative_err = kNaN;
    m.one_thousandth_err_ratio = m.five_thousandths_err_ratio = kNaN;
    m.mean_abs_err = m.rmse = m.relative_euc_dist = m.kl_divergence = kNaN;
    m.nonfinite_mismatch = true;
    m.message = "NaN/Inf at different positions (A: " + std::to_string(nan_a) + " NaN, " +
                std::to_string(inf_a) + " Inf; B: " + std::to_string(nan_b) + " NaN, " +
                std::to_string(inf_b) + " Inf)";
    return m;
  }
  if (m.nonfinite > 0) {
    m.message = count_text(m.nonfinite, "NaN/Inf value") +
                " at the same positions on both sides, compared as 0";
  }

  double dot = 0, na2 = 0, nb2 = 0, d2 = 0, sum_abs = 0, max_abs = 0, max_rel = 0;
  std::int64_t below1 = 0, below5 = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double d = x[i] - y[i];
    dot += x[i] * y[i];
    na2 += x[i] * x[i];
    nb2 += y[i] * y[i];
    d2 += d * d;
    sum_abs += std::fabs(d);
    max_abs = std::max(max_abs, std::fabs(d));
    const double rel = y[i] == 0 ? std::fabs(((x[i] + kEpsilon) - kEpsilon) / kEpsilon)
                                 : std::fabs(d / y[i]);
    max_rel = std::max(max_rel, rel);
    below1 += rel < 0.001;
    below5 += rel < 0.005;
  }
  const double dn = static_cast<double>(n);
  m.euc_dist = std::sqrt(d2);
  m.max_abs_err = max_abs;
  m.max_relative_err = max_rel;
  m.one_thousandth_err_ratio = static_cast<double>(below1) / dn;
  m.five_thousandths_err_ratio = static_cast<double>(below5) / dn;
  m.mean_abs_err = sum_abs / dn;
  m.rmse = std::sqrt(d2 / dn);
  const double na = std::sqrt(na2), nb = std::sqrt(nb2);
  m.relative_euc_dist = nb != 0 ? m.euc_dist / nb : (m.euc_dist == 0 ? 0.0 : HUGE_VAL);
  auto note = [&](const std::string& s) { m.message += (m.message.empty() ? "" : "; ") + s; };
  if (n == 1) {
    m.cosine = kNaN;
    note("one element: no cosine");
  } else if (na <= kEpsilon && nb <= kEpsilon) {
    m.cosine = 1.0;
  } else if (na <= kEpsilon || nb <= kEpsilon) {
    m.cosine = kNaN;
    note(std::string("all the data is zero in ") + (na <= kEpsilon ? "A" : "B") +
         ": no cosine");
  } else {
    // sqrt(na2 * nb2) rather than na * nb: for a == b it is na2 exactly, so the cosine is 1.
    const double prod = na2 * nb2;
    const double denom = std::isfinite(prod) && prod > 0 ? std::sqrt(prod) : na * nb;
    m.cosine = std::clamp(dot / denom, -1.0, 1.0);
    if (std::isnan(m.cosine)) note("the cosine overflows");
  }
  m.kl_divergence = kl_divergence(x, y);
  return m;
}

const char* accuracy_name(Accuracy a) {
  switch (a) {
    case Accuracy::kYes: return "Yes";
    case Accuracy::kNo: return "No";
    case Accuracy::kUnmatched: return "Unmatched";
  }
  return "";
}

Accuracy accuracy_of(const TensorMetrics& m, std::int64_t numel) {
  if (numel == 0) return Accuracy::kYes;
  if (m.nonfinite_mismatch || std::isnan(m.max_abs_err)) return Accuracy::kNo;
  const double cos = m.cosine, err = m.max_abs_err;
  if (std::isnan(cos)) return err > 0.001 ? Accuracy::kNo : Accuracy::kYes;
  if ((cos < 0.99 && err > 0.001) || cos < 0.9 || err > 1) return Accuracy::kNo;
  return Accuracy::kYes;
}

SideStats side_stats(const std::vector<double>& v) {
  SideStats s;
  if (v.empty() || std::any_of(v.begin(), v.end(), [](double x) { return std::isnan(x); })) {
    s.max = s.min = s.mean = s.l2norm = kNaN;
    return s;
  }
  s.max = *std::max_element(v.begin(), v.end());
  s.min = *std::min_element(v.begin(), v.end());
  double sum = 0, sq = 0;
  for (double x : v) {
    sum += x;
    sq += x * x;
  }
  s.mean = sum / static_cast<double>(v.size());
  s.l2norm = std::sqrt(sq);
  return s;
}

std::string CompareRow::a_name() const {
  return a.key() + (occurrence ? "#" + std::to_string(occurrence + 1) : "");
}

std::string CompareRow::b_name() const {
  return b.key() + (occurrence ? "#" + std::to_string(occurrence + 1) : "");
}

std::int64_t CompareResult::passed() const {
  return std::count_if(rows.begin(), rows.end(), [](const CompareRow& r) { return r.passed(); });
}

std::int64_t CompareResult::failed() const {
  return static_cast<std::int64_t>(rows.size()) - passed();
}

const CompareRow* CompareResult::first_failure() const {
  for (const CompareRow& r : rows) {
    if (!r.passed()) return &r;
  }
  return nullptr;
}

CompareResult compare_dumps(const DumpDir& a, const DumpDir& b, const CompareOptions& options) {
  auto selected = [&](const DumpDir& d) {
    std::vector<const DumpTensor*> out;
    for (const DumpTensor& t : d.tensors) {
      if (options.graph && t.graph != *options.graph) continue;
      if (options.iteration && t.iteration != *options.iteration) continue;
      out.push_back(&t);
    }
    return out;
  };
  const std::vector<const DumpTensor*> as = selected(a), bs = selected(b);
  // The occurrence of each tensor's key within its iteration (tensors are in timestamp order).
  auto occurrences = [](const std::vector<const DumpTensor*>& ts) {
    std::map<std::tuple<std::int64_t, std::int64_t, std::string>, std::int64_t> seen;
    std::vector<std::int64_t> occ;
    for (const DumpTensor* t : ts) occ.push_back(seen[{t->graph, t->iteration, t->key()}]++);
    return occ;
  };
  const std::vector<std::int64_t> a_occ = occurrences(as), b_occ = occurrences(bs);
  std::map<MatchKey, std::size_t> a_index;
  for (std::size_t i = 0; i < as.size(); ++i) {
    a_index[{as[i]->graph, as[i]->iteration, as[i]->key(), a_occ[i]}] = i;
  }

  CompareResult r;
  r.a_path = a.path;
  r.b_path = b.path;
  std::vector<std::pair<std::size_t, std::size_t>> pairs;  // (A index, B index)
  std::vector<bool> a_used(as.size(), false);
  std::set<std::string> mapping_used;
  for (std::size_t j = 0; j < bs.size(); ++j) {
    std::string key = bs[j]->key();
    if (!options.mapping.empty()) {
      const auto m = options.mapping.find(key);
      if (m == options.mapping.end()) {
        r.not_mapped.push_back(*bs[j]);
        continue;
      }
      mapping_used.insert(key);
      key = m->second;
    }
    const auto it = a_index.find({bs[j]->graph, bs[j]->iteration, key, b_occ[j]});
    if (it == a_index.end()) {
      r.only_in_b.push_back(*bs[j]);
      continue;
    }
    a_used[it->second] = true;
    pairs.emplace_back(it->second, j);
  }
  for (std::size_t i = 0; i < as.size(); ++i) {
    if (!a_used[i]) r.only_in_a.push_back(*as[i]);
  }
  for (const auto& [from, to] : options.mapping) {
    if (!mapping_used.count(from)) r.unused_mappings.push_back(from);
  }
  if (pairs.empty()) {
    std::string m = "compare: expected tensors in common between A '" + a.path + "' (" +
                    describe_side(as) + ") and B '" + b.path + "' (" + describe_side(bs) +
                    "), got none";
    if (!options.mapping.empty()) {
      const auto& [from, to] = *options.mapping.begin();
      m += "; matched through the mapping (" + count_text(options.mapping.size(), "entry") +
           ", e.g. B's '" + from + "' as A's '" + to + "')";
    } else {
      m += " (tensors match by graph, iteration and name; a reference with other names needs a "
           "mapping file)";
    }
    if (options.graph || options.iteration) m += "; only --graph/--iteration selected tensors";
    throw ValueError(m);
  }

  // A's execution order: each launch's row index; a file with no row (Parameter, Gradient, a
  // launch the file lacks) takes the largest index of the launches written before it in its
  // iteration (-1 before the first), so that it keeps its place among them.
  std::map<std::int64_t, std::unordered_map<std::string, std::int64_t>> node_index;
  for (const auto& [graph, rows] : a.execution_order) {
    auto& idx = node_index[graph];
    for (const ExecutionOrderRow& row : rows) idx.emplace(row.op_name, row.index);
  }
  std::vector<std::int64_t> order(as.size(), -1);
  std::int64_t seen = -1;  // the largest index so far in the current iteration
  for (std::size_t i = 0; i < as.size(); ++i) {
    if (i == 0 || as[i - 1]->graph != as[i]->graph || as[i - 1]->iteration != as[i]->iteration) {
      seen = -1;
    }
    order[i] = seen;
    if (is_param_kind(*as[i])) continue;
    const auto g = node_index.find(as[i]->graph);
    if (g == node_index.end()) continue;
    const auto n = g->second.find(as[i]->op_name);
    if (n == g->second.end()) continue;
    order[i] = n->second;
    seen = std::max(seen, n->second);
  }
  std::sort(pairs.begin(), pairs.end(), [&](const auto& p, const auto& q) {
    const DumpTensor& x = *as[p.first];
    const DumpTensor& y = *as[q.first];
    return std::make_tuple(x.graph, x.iteration, order[p.first], x.timestamp, x.io != "input",
                           x.slot) < std::make_tuple(y.graph, y.iteration, order[q.first],
                                                     y.timestamp, y.io != "input", y.slot);
  });

  for (const auto& [i, j] : pairs) {
    CompareRow row;
    row.a = *as[i];
    row.b = *bs[j];
    row.occurrence = a_occ[i];
    if (!is_param_kind(row.a)) {
      if (const ExecutionOrderRow* n = a.find_node(row.a.graph, row.a.op_name)) row.node = *n;
    }
    const Tensor ta = load(row.a), tb = load(row.b);
    row.a_dtype = std::string(dtype_name(ta.dtype()));
    row.b_dtype = std::string(dtype_name(tb.dtype()));
    row.a_shape = ta.shape();
    row.b_shape = tb.shape();
    const std::vector<double> va = ta.to_doubles(), vb = tb.to_doubles();
    row.a_stats = side_stats(va);
    row.b_stats = side_stats(vb);
    if (row.a_shape != row.b_shape) {
      row.accuracy = Accuracy::kUnmatched;
      row.message = "shape " + shape_to_string(row.a_shape) + " vs " +
                    shape_to_string(row.b_shape);
    } else {
      row.metrics = compare_values(va, vb);
      row.accuracy = accuracy_of(row.metrics, ta.numel());
      row.message = row.metrics.message;
    }
    if (row.a_dtype != row.b_dtype) {
      row.message += (row.message.empty() ? "" : "; ") + std::string("dtype ") + row.a_dtype +
                     " vs " + row.b_dtype;
    }
    r.rows.push_back(std::move(row));
  }
  return r;
}

std::map<std::string, std::string> parse_mapping(const std::string& json_text,
                                                 const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {  // a syntax error, or a number past double
    throw ValueError(source + ": expected a JSON object {\"<B key>\": \"<A key>\", ...}, got "
                              "invalid JSON (" + std::string(e.what()) + ")");
  }
  if (!j.is_object()) {
    throw ValueError(source + ": expected a JSON object {\"<B key>\": \"<A key>\", ...}, got " +
                     std::string(j.type_name()));
  }
  if (j.empty()) {
    throw ValueError(source + ": expected at least one entry {\"<B key>\": \"<A key>\"}, got an "
                              "empty object");
  }
  std::map<std::string, std::string> out;
  std::map<std::string, std::string> by_target;
  for (const auto& [from, to] : j.items()) {
    if (!to.is_string()) {
      throw ValueError(source + ": \"" + from + "\": expected an A key (a string such as "
                                "\"Conv2D-op0.output.0\"), got " + std::string(to.type_name()) +
                       " " + to.dump());
    }
    const std::string target = to.get<std::string>();
    if (from.empty() || target.empty()) {
      throw ValueError(source + ": expected non-empty keys, got \"" + from + "\": \"" + target +
                       "\"");
    }
    if (const auto it = by_target.find(target); it != by_target.end()) {
      throw ValueError(source + ": expected each A key once, got \"" + it->second + "\" and \"" +
                       from + "\" both mapped to \"" + target + "\"");
    }
    by_target.emplace(target, from);
    out.emplace(from, target);
  }
  return out;
}

std::map<std::string, std::string> load_mapping(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ValueError(file + ": expected a readable mapping file, got none");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_mapping(text, file);
}

const std::vector<std::string>& compare_csv_columns() {
  static const std::vector<std::string> columns = {
      "NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape",
      "Bench Tensor Shape", "Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr",
      "One Thousandth Err Ratio", "Five Thousandths Err Ratio", "NPU max", "NPU min", "NPU mean",
      "NPU l2norm", "Bench max", "Bench min", "Bench mean", "Bench l2norm",
      "Accuracy Reached or Not", "Err_message",
      // loom's
      "MeanAbsErr", "RMSE", "RelativeEucDist", "KLDivergence", "Op Type", "Cell", "File", "Line",
      "Role", "Forward", "Full Name", "Graph", "Iteration", "NPU File", "Bench File"};
  return columns;
}

std::string compare_csv(const CompareResult& r) {
  std::string out;
  const auto& columns = compare_csv_columns();
  for (std::size_t c = 0; c < columns.size(); ++c) out += (c ? "," : "") + csv_field(columns[c]);
  out += "\r\n";  // RFC 4180 line ends: what Python's csv module and spreadsheets write
  for (const CompareRow& row : r.rows) {
    const TensorMetrics& m = row.metrics;
    const bool shapes = row.accuracy != Accuracy::kUnmatched;
    auto measure = [&](double v) { return shapes ? number(v) : std::string("shape unmatched"); };
    const std::optional<ExecutionOrderRow>& n = row.node;
    const std::vector<std::string> fields = {
        row.a_name(), row.b_name(), row.a_dtype, row.b_dtype, list_shape(row.a_shape),
        list_shape(row.b_shape), measure(m.cosine), measure(m.euc_dist), measure(m.max_abs_err),
        measure(m.max_relative_err), measure(m.one_thousandth_err_ratio),
        measure(m.five_thousandths_err_ratio), number(row.a_stats.max, "nan"),
        number(row.a_stats.min, "nan"), number(row.a_stats.mean, "nan"),
        number(row.a_stats.l2norm, "nan"), number(row.b_stats.max, "nan"),
        number(row.b_stats.min, "nan"), number(row.b_stats.mean, "nan"),
        number(row.b_stats.l2norm, "nan"), accuracy_name(row.accuracy), row.message,
        measure(m.mean_abs_err), measure(m.rmse), measure(m.relative_euc_dist),
        measure(m.kl_divergence), row.a.op_type, n ? n->scope : "", n ? n->file : "",
        n && n->line > 0 ? std::to_string(n->line) : "", n ? n->role : "", n ? n->forward : "",
        n ? n->full_name : "", std::to_string(row.a.graph), std::to_string(row.a.iteration),
        row.a.path, row.b.path};
    for (std::size_t c = 0; c < fields.size(); ++c) out += (c ? "," : "") + csv_field(fields[c]);
    out += "\r\n";
  }
  return out;
}

void write_compare_csv(const CompareResult& r, const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    throw ValueError(path + ": expected a writable CSV file, got one that cannot be opened");
  }
  out << compare_csv(r);
  out.close();
  if (!out) throw ValueError(path + ": expected a writable CSV file, got a write error");
}

std::string describe_node(const CompareRow& row) {
  const DumpTensor& t = row.a;
  if (t.op_type == "Parameter") {
    return "Parameter " + t.op_name + " (the graph parameter as the run received it)";
  }
  if (t.op_type == "Gradient") {
    return "Gradient " + t.op_name + " (the step's gradient of parameter " + t.op_name + ")";
  }
  if (!row.node) {
    return t.op_type + " " + t.op_name + " (no row for it in A's execution order of graph " +
           std::to_string(t.graph) + ")";
  }
  const ExecutionOrderRow& n = *row.node;
  std::string s = n.op_type + " " + n.op_name;
  if (!n.full_name.empty()) s += ", full name " + n.full_name;
  if (!n.file.empty()) s += ", " + n.file + (n.line > 0 ? ":" + std::to_string(n.line) : "");
  if (!n.role.empty()) s += ", " + role_text(n);
  if (n.depth > 0 && !n.graph.empty()) s += ", inside the branch graph " + n.graph;
  return s;
}

std::string summary_line(const CompareResult& r) {
  std::string s = "compared " + count_text(static_cast<std::int64_t>(r.rows.size()), "tensor") +
                  ": " + std::to_string(r.passed()) + " passed, " + std::to_string(r.failed()) +
                  " failed; " + std::to_string(r.only_in_a.size()) + " only in A, " +
                  std::to_string(r.only_in_b.size()) + " only in B";
  if (!r.not_mapped.empty()) s += ", " + std::to_string(r.not_mapped.size()) + " of B not mapped";
  return s;
}

}  // namespace loom::debug
