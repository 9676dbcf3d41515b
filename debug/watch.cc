// Watchpoints (debug/watch.h): the condition table, the --watch parser, the statistics and their
// evaluation as MindSpore's TensorSummary does it, the online Watcher and watch_dump over a dump.
//
// Statistics: two vectorizable passes over the tensor (sums in double with eight independent
// lanes, so that the compiler keeps them in vector registers without reassociating a sum; then
// extremes and counts), then one pass per range or change condition that needs one. Float16 /
// BFloat16 values are converted in chunks to float first.
#include "debug/watch.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <set>
#include <sstream>

#include "backends/backend.h"
#include "core/ir/error.h"
#include "debug/dump.h"
#include "debug/dump_reader.h"
#include "debug/tensor_stats.h"
#include "debug/user_regex.h"
#include "nn/cell.h"
#include "nn/train.h"

namespace loom::debug {

namespace {

// ---- The condition table ([CL], [CD]) ----------------------------------------------------------

enum class Family {
  kOverflow, kInit, kTooLarge, kTooSmall, kAllZero, kNotChanged, kChangeTooLarge,
  kChangeTooSmall, kRange
};
enum class Kind { kCheck, kSupport, kSetting };
enum class Valid { kFinite, kNonNegative, kPositive, kPercent, kBool };

struct ParamDef {
  std::string_view name;
  Kind kind;
  Valid valid;
  std::optional<double> default_value;
};

struct ConditionDef {
  std::string_view name;
  std::string_view abbr;
  WatchTarget target;
  Family family;
  std::vector<ParamDef> params;
};

std::vector<ParamDef> too_large_params() {
  return {{"abs_mean_gt", Kind::kCheck, Valid::kNonNegative, {}},
          {"max_gt", Kind::kCheck, Valid::kFinite, {}},
          {"min_gt", Kind::kCheck, Valid::kFinite, {}},
          {"mean_gt", Kind::kCheck, Valid::kFinite, {}}};
}
std::vector<ParamDef> too_small_params() {
  return {{"abs_mean_lt", Kind::kCheck, Valid::kNonNegative, {}},
          {"max_lt", Kind::kCheck, Valid::kFinite, {}},
          {"min_lt", Kind::kCheck, Valid::kFinite, {}},
          {"mean_lt", Kind::kCheck, Valid::kFinite, {}}};
}
std::vector<ParamDef> range_params() {
  return {{"range_start_inclusive", Kind::kSupport, Valid::kFinite, {}},
          {"range_end_inclusive", Kind::kSupport, Valid::kFinite, {}},
          {"range_percentage_lt", Kind::kCheck, Valid::kPercent, {}},
          {"range_percentage_gt", Kind::kCheck, Valid::kPercent, {}},
          {"max_min_lt", Kind::kCheck, Valid::kPositive, {}},
          {"max_min_gt", Kind::kCheck, Valid::kNonNegative, {}}};
}

const std::vector<ConditionDef>& condition_defs() {
  using T = WatchTarget;
  static const std::vector<ConditionDef> defs = {
      {"weight_initialization", "WI", T::kWeight, Family::kInit,
       {{"zero_percentage_ge", Kind::kCheck, Valid::kPercent, 100.0},
        {"max_gt", Kind::kCheck, Valid::kFinite, {}},
        {"min_lt", Kind::kCheck, Valid::kFinite, {}}}},
      {"weight_overflow", "WO", T::kWeight, Family::kOverflow, {}},
      {"weight_too_large", "WL", T::kWeight, Family::kTooLarge, too_large_params()},
      {"weight_too_small", "WS", T::kWeight, Family::kTooSmall, too_small_params()},
      {"gradient_vanishing", "GV", T::kGradient, Family::kTooSmall, too_small_params()},
      {"gradient_too_large", "GL", T::kGradient, Family::kTooLarge, too_large_params()},
      {"gradient_exploding", "GE", T::kGradient, Family::kOverflow, {}},
      {"tensor_overflow", "TO", T::kTensor, Family::kOverflow, {}},
      {"tensor_too_large", "TL", T::kTensor, Family::kTooLarge, too_large_params()},
      {"tensor_too_small", "TS", T::kTensor, Family::kTooSmall, too_small_params()},
      {"tensor_all_zero", "TZ", T::kTensor, Family::kAllZero,
       {{"zero_percentage_ge", Kind::kCheck, Valid::kPercent, 100.0}}},
      {"weight_not_changed", "WNC", T::kWeight, Family::kNotChanged,
       {{"rtol", Kind::kSetting, Valid::kNonNegative, 1e-5},
        {"atol", Kind::kSetting, Valid::kFinite, 1e-8},
        {"equal_nan", Kind::kSetting, Valid::kBool, 0.0}}},
      {"weight_change_too_large", "WCL", T::kWeight, Family::kChangeTooLarge,
       {{"abs_mean_update_ratio_gt", Kind::kCheck, Valid::kNonNegative, 1e-1},
        {"epsilon", Kind::kSetting, Valid::kFinite, 1e-9}}},
      {"weight_change_too_small", "WCS", T::kWeight, Family::kChangeTooSmall,
       {{"abs_mean_update_ratio_lt", Kind::kCheck, Valid::kNonNegative, 1e-4},
        {"epsilon", Kind::kSetting, Valid::kFinite, 1e-9}}},
      {"activation_range", "AR", T::kActivation, Family::kRange, range_params()},
      {"tensor_range", "TR", T::kTensor, Family::kRange, range_params()},
  };
  return defs;
}

const ConditionDef* find_def(std::string_view name) {
  for (const ConditionDef& d : condition_defs()) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

const ConditionDef& def_of(const WatchCondition& c) {
  const ConditionDef* d = find_def(c.name);
  if (d == nullptr) throw ValueError("watch: expected a known condition, got '" + c.name + "'");
  return *d;
}

std::string format_number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// ---- The spec parser ------------------------------------------------------------------------

class SpecParser {
 public:
  explicit SpecParser(const std::string& spec) : spec_(spec) {}

  std::vector<WatchCondition> parse() {
    std::vector<WatchCondition> out;
    if (spec_.find_first_not_of(" \t") == std::string::npos) {
      fail(0, "at least one condition", spec_.empty() ? "an empty spec" : "only blanks");
    }
    std::size_t begin = 0;
    while (true) {
      const std::size_t semi = spec_.find(';', begin);
      const std::size_t end = semi == std::string::npos ? spec_.size() : semi;
      out.push_back(condition(begin, end));
      if (semi == std::string::npos) break;
      begin = semi + 1;
    }
    return out;
  }

 private:
  [[noreturn]] void fail(std::size_t pos, const std::string& expected, const std::string& got) {
    throw ValueError("watch spec '" + spec_ + "', column " + std::to_string(pos + 1) +
                     ": expected " + expected + ", got " + got);
  }
  std::string quoted(std::size_t a, std::size_t b) const {
    return "'" + spec_.substr(a, b - a) + "'";
  }
  std::size_t skip_blanks(std::size_t i, std::size_t end) const {
    while (i < end && (spec_[i] == ' ' || spec_[i] == '\t')) ++i;
    return i;
  }
  static bool ident_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  }
  std::size_t ident_end(std::size_t i, std::size_t end) const {
    while (i < end && ident_char(spec_[i])) ++i;
    return i;
  }

  WatchCondition condition(std::size_t begin, std::size_t end) {
    std::size_t i = skip_blanks(begin, end);
    if (i == end) fail(i, "a condition", semi_or_end(end));
    const std::size_t name_end = ident_end(i, end);
    if (name_end == i) fail(i, "a condition name", quoted(i, std::min(end, i + 1)));
    const std::string name = spec_.substr(i, name_end - i);
    const ConditionDef* def = find_def(name);
    if (def == nullptr) unknown_condition(i, name);
    WatchCondition c;
    c.name = name;
    c.target = def->target;
    std::vector<std::string> given;  // the parameters the spec sets
    std::map<std::string, double> values;
    i = skip_blanks(name_end, end);
    if (i < end && spec_[i] == '(') {
      i = params(*def, i + 1, end, &given, &values);
      i = skip_blanks(i, end);
    }
    if (i < end && spec_[i] == '@') {
      const std::size_t re_begin = skip_blanks(i + 1, end);
      std::size_t re_end = end;
      while (re_end > re_begin && (spec_[re_end - 1] == ' ' || spec_[re_end - 1] == '\t')) --re_end;
      if (re_begin == re_end) fail(i + 1, "a regex after '@'", semi_or_end(end));
      c.pattern = spec_.substr(re_begin, re_end - re_begin);
      if (const auto problem = user_regex_problem(c.pattern)) {
        fail(re_begin, "a regex (ECMAScript)", "'" + c.pattern + "': " + *problem);
      }
      try {
        c.regex = std::make_shared<const std::regex>(c.pattern, std::regex::ECMAScript);
      } catch (const std::regex_error& e) {
        fail(re_begin, "a regex (ECMAScript)", "'" + c.pattern + "' (" + e.what() + ")");
      }
      i = end;
    }
    if (i < end) fail(i, "'(', '@', ';' or the end", quoted(i, end));
    complete(*def, c, given, values, begin);
    return c;
  }

  std::string semi_or_end(std::size_t end) const {
    return end < spec_.size() ? "';'" : "the end";
  }

  [[noreturn]] void unknown_condition(std::size_t pos, const std::string& name) {
    if (name == "operator_overflow") {
      fail(pos, "a condition loom can check (operator_overflow is MindInsight's condition on "
                "Ascend's overflow status, which loom has none of: use tensor_overflow)",
           "'" + name + "'");
    }
    if (name == "tensor_initialization") {
      fail(pos, "a MindInsight condition (tensor_initialization is MindSpore's wire name of "
                "weight_initialization)",
           "'" + name + "'");
    }
    std::string all;
    for (const ConditionDef& d : condition_defs()) {
      all += (all.empty() ? "" : ", ") + std::string(d.name);
    }
    fail(pos, "a condition (" + all + ")", "'" + name + "'");
  }

  // Parses "key=value, ..." after '('; returns the position after ')'.
  std::size_t params(const ConditionDef& def, std::size_t i, std::size_t end,
                     std::vector<std::string>* given, std::map<std::string, double>* values) {
    i = skip_blanks(i, end);
    if (i < end && spec_[i] == ')') return i + 1;  // name()
    if (i == end) fail(i, "a parameter or ')' after '('", semi_or_end(end));
    while (true) {
      i = skip_blanks(i, end);
      const std::size_t key_end = ident_end(i, end);
      if (key_end == i) {
        fail(i, "a parameter name", i < end ? quoted(i, i + 1) : semi_or_end(end));
      }
      const std::string key = spec_.substr(i, key_end - i);
      const ParamDef* pd = nullptr;
      for (const ParamDef& p : def.params) {
        if (p.name == key) pd = &p;
      }
      if (pd == nullptr) {
        std::string names;
        for (const ParamDef& p : def.params) {
          names += (names.empty() ? "" : ", ") + std::string(p.name);
        }
        fail(i, def.params.empty() ? std::string(def.name) + " without parameters (it takes none)"
                                   : "a parameter of " + std::string(def.name) + " (" + names + ")",
             "'" + key + "'");
      }
      if (values->count(key)) fail(i, "each parameter once", "'" + key + "' again");
      i = skip_blanks(key_end, end);
      if (i >= end || spec_[i] != '=') {
        fail(i, "'=' after '" + key + "'", i < end ? quoted(i, i + 1) : semi_or_end(end));
      }
      i = skip_blanks(i + 1, end);
      std::size_t v_end = i;
      while (v_end < end && spec_[v_end] != ',' && spec_[v_end] != ')') ++v_end;
      std::size_t t_end = v_end;
      while (t_end > i && (spec_[t_end - 1] == ' ' || spec_[t_end - 1] == '\t')) --t_end;
      const std::string text = spec_.substr(i, t_end - i);
      (*values)[key] = value(*pd, text, i);
      given->push_back(key);
      if (v_end >= end) fail(v_end, "')' closing the parameters of " + std::string(def.name),
                             semi_or_end(end));
      if (spec_[v_end] == ')') return v_end + 1;
      i = v_end + 1;  // after ','
    }
  }

  double value(const ParamDef& p, const std::string& text, std::size_t pos) {
    const std::string name(p.name);
    if (text.empty()) fail(pos, "a value for " + name, "nothing");
    if (p.valid == Valid::kBool) {
      if (text == "true" || text == "1") return 1;
      if (text == "false" || text == "0") return 0;
      fail(pos, "true, false, 1 or 0 for " + name, "'" + text + "'");
    }
    char* stop = nullptr;
    const double v = std::strtod(text.c_str(), &stop);
    if (stop != text.c_str() + text.size() || text.find_first_of("xXpP") != std::string::npos) {
      fail(pos, "a number for " + name, "'" + text + "'");
    }
    if (!std::isfinite(v)) fail(pos, "a finite number for " + name, "'" + text + "'");
    switch (p.valid) {
      case Valid::kNonNegative:
        if (v < 0) fail(pos, name + " >= 0", "'" + text + "'");
        break;
      case Valid::kPositive:
        if (v <= 0) fail(pos, name + " > 0", "'" + text + "'");
        break;
      case Valid::kPercent:
        if (v < 0 || v > 100) fail(pos, name + " in [0, 100] (a percentage)", "'" + text + "'");
        break;
      default: break;
    }
    return v;
  }

  // Defaults, and the rules between parameters ([WH], [AC]).
  void complete(const ConditionDef& def, WatchCondition& c,
                const std::vector<std::string>& given, std::map<std::string, double>& values,
                std::size_t begin) {
    const std::size_t at = skip_blanks(begin, spec_.size());
    bool any_check = false;
    for (const std::string& key : given) {
      for (const ParamDef& p : def.params) {
        if (p.name == key && p.kind == Kind::kCheck) any_check = true;
      }
    }
    for (const ParamDef& p : def.params) {
      const bool defaulted = p.kind == Kind::kSetting || (p.kind == Kind::kCheck && !any_check);
      if (!values.count(std::string(p.name)) && defaulted && p.default_value) {
        values[std::string(p.name)] = *p.default_value;
      }
    }
    bool has_check = false;
    for (const ParamDef& p : def.params) {
      if (p.kind == Kind::kCheck && values.count(std::string(p.name))) has_check = true;
    }
    if (def.family != Family::kOverflow && def.family != Family::kNotChanged && !has_check) {
      std::string names;
      for (const ParamDef& p : def.params) {
        if (p.kind == Kind::kCheck) names += (names.empty() ? "" : ", ") + std::string(p.name);
      }
      fail(at, std::string(def.name) + " with at least one of " + names + " (it has no default)",
           "none");
    }
    if (def.family == Family::kRange) {
      const bool start = values.count("range_start_inclusive") > 0;
      const bool end = values.count("range_end_inclusive") > 0;
      const bool pct = values.count("range_percentage_lt") || values.count("range_percentage_gt");
      if (pct && !(start && end)) {
        fail(at, "both range_start_inclusive and range_end_inclusive with range_percentage_lt/gt",
             start ? "range_start_inclusive only" : end ? "range_end_inclusive only"
                                                       : "neither");
      }
      if (!pct && (start || end)) {
        fail(at, "range_start_inclusive / range_end_inclusive only with range_percentage_lt/gt",
             "a range bound without them");
      }
      if (start && end && values["range_start_inclusive"] > values["range_end_inclusive"]) {
        fail(at, "range_start_inclusive <= range_end_inclusive",
             format_number(values["range_start_inclusive"]) + " > " +
                 format_number(values["range_end_inclusive"]));
      }
    }
    for (const ParamDef& p : def.params) {
      auto it = values.find(std::string(p.name));
      if (it != values.end()) c.params.emplace_back(it->first, it->second);
    }
  }

  const std::string& spec_;
};

// ---- Statistics ([TS]) ----------------------------------------------------------------------

constexpr std::int64_t kChunk = 1024;

// Element i of a floating tensor as double (the paired passes over odd dtype mixes).
template <typename F>
void for_pairs(const Tensor& a, const Tensor& b, F&& f) {
  const std::int64_t n = a.numel();
  if (a.dtype() == DType::kFloat32 && b.dtype() == DType::kFloat32) {
    f(a.data<float>(), b.data<float>(), n);
  } else if (a.dtype() == DType::kFloat64 && b.dtype() == DType::kFloat64) {
    f(a.data<double>(), b.data<double>(), n);
  } else {
    std::array<double, kChunk> x, y;
    for (std::int64_t i = 0; i < n; i += kChunk) {
      const std::int64_t m = std::min(kChunk, n - i);
      for (std::int64_t k = 0; k < m; ++k) {
        x[k] = a.get(i + k);
        y[k] = b.get(i + k);
      }
      f(x.data(), y.data(), m);
    }
  }
}

constexpr int kLanes = 8;

// The statistics of one tensor (and its previous value), computed once and shared by the
// conditions checked on it.
class Summary {
 public:
  Summary(const Tensor& current, const Tensor* previous)
      : cur_(current), prev_(previous), stats_(tensor_stats(current)) {}
  // debug/tensor_stats.h; a tensor with NaN or Inf is not evaluated by the other conditions, so
  // its finite-only mean never reaches them.
  const TensorStats& stats() const { return stats_; }
  const Tensor& current() const { return cur_; }
  const Tensor* previous() const { return prev_; }
  double mean() const { return stats_.mean; }
  double abs_mean() const { return stats_.abs_mean; }
  double zero_percentage() const {
    return 100.0 * static_cast<double>(stats_.zero) / static_cast<double>(stats_.count);
  }

  double range_percentage(double lo, double hi) const {
    std::int64_t count = 0;
    for_float_values(cur_, [&](const auto* p, std::int64_t n) {
      std::int64_t c[kLanes] = {};
      std::int64_t i = 0;
      for (; i + kLanes <= n; i += kLanes) {
        for (int k = 0; k < kLanes; ++k) {
          const double v = static_cast<double>(p[i + k]);
          c[k] += (v >= lo) & (v <= hi);
        }
      }
      for (; i < n; ++i) c[0] += (p[i] >= lo) & (p[i] <= hi);
      for (int k = 0; k < kLanes; ++k) count += c[k];
    });
    return 100.0 * static_cast<double>(count) / static_cast<double>(stats_.count);
  }

  // mean|cur - prev| / (mean|prev| + epsilon).
  double update_ratio(double epsilon) const {
    double diff = 0, prev = 0;
    for_pairs(cur_, *prev_, [&](const auto* c, const auto* q, std::int64_t n) {
      double d[kLanes] = {}, a[kLanes] = {};
      std::int64_t i = 0;
      for (; i + kLanes <= n; i += kLanes) {
        for (int k = 0; k < kLanes; ++k) {
          const double x = static_cast<double>(c[i + k]), y = static_cast<double>(q[i + k]);
          d[k] += std::fabs(x - y);
          a[k] += std::fabs(y);
        }
      }
      for (; i < n; ++i) {
        d[0] += std::fabs(static_cast<double>(c[i]) - static_cast<double>(q[i]));
        a[0] += std::fabs(static_cast<double>(q[i]));
      }
      for (int k = 0; k < kLanes; ++k) {
        diff += d[k];
        prev += a[k];
      }
    });
    const double n = static_cast<double>(stats_.count);
    return (diff / n) / (prev / n + epsilon);
  }

  // Every |cur - prev| <= atol + rtol * |prev| ([TS] AllCloseCalculator); with equal_nan,
  // NumPy's isclose (NaN == NaN, equal infinities close). Also the largest |cur - prev|.
  bool all_close(double rtol, double atol, bool equal_nan, double* max_diff) const {
    std::int64_t far = 0;
    double worst = 0;
    for_pairs(cur_, *prev_, [&](const auto* c, const auto* q, std::int64_t n) {
      for (std::int64_t i = 0; i < n; ++i) {
        const double x = static_cast<double>(c[i]), y = static_cast<double>(q[i]);
        const double d = std::fabs(x - y);
        far += !(d <= atol + rtol * std::fabs(y));
        worst = d > worst ? d : worst;
      }
    });
    if (far > 0 && equal_nan) {  // count again, NaN == NaN and equal infinities close
      far = 0;
      for_pairs(cur_, *prev_, [&](const auto* c, const auto* q, std::int64_t n) {
        for (std::int64_t i = 0; i < n; ++i) {
          const double x = static_cast<double>(c[i]), y = static_cast<double>(q[i]);
          const bool close = std::fabs(x - y) <= atol + rtol * std::fabs(y) || x == y ||
                             (std::isnan(x) && std::isnan(y));
          far += !close;
        }
      });
    }
    *max_diff = worst;
    return far == 0;
  }

 private:
  const Tensor& cur_;
  const Tensor* prev_;
  TensorStats stats_;
};

const char* comparison(std::string_view param) {
  if (param.ends_with("_gt")) return ">";
  if (param.ends_with("_lt")) return "<";
  if (param.ends_with("_ge")) return ">=";
  return "<=";
}

bool compare(double actual, std::string_view param, double threshold) {
  if (std::isnan(actual)) return false;  // [DS] parameter_t::Evaluate
  if (param.ends_with("_gt")) return actual > threshold;
  if (param.ends_with("_lt")) return actual < threshold;
  if (param.ends_with("_ge")) return actual >= threshold;
  return actual <= threshold;
}

WatchCheck evaluate(const WatchCondition& c, const Summary& s) {
  const ConditionDef& def = def_of(c);
  WatchCheck r;
  const TensorStats& b = s.stats();
  if (def.family == Family::kOverflow) {
    if (b.non_finite() == 0) return r;
    r.outcome = WatchCheck::Outcome::kHit;
    r.detail = std::to_string(b.nan) + " NaN, " + std::to_string(b.neg_inf + b.pos_inf) +
               " Inf among " + std::to_string(b.count) + (b.count == 1 ? " value" : " values");
    return r;
  }
  const bool change = def.family == Family::kNotChanged ||
                      def.family == Family::kChangeTooLarge ||
                      def.family == Family::kChangeTooSmall;
  const bool equal_nan = c.param("equal_nan").value_or(0) != 0;
  if (b.non_finite() > 0 && !(def.family == Family::kNotChanged && equal_nan)) {
    r.outcome = WatchCheck::Outcome::kNonFinite;
    return r;
  }
  if (change) {
    const Tensor* prev = s.previous();
    if (prev == nullptr || prev->numel() != s.current().numel() || !is_floating(prev->dtype())) {
      r.outcome = WatchCheck::Outcome::kNoPrevious;
      return r;
    }
  }
  if (def.family == Family::kNotChanged) {
    const double rtol = *c.param("rtol"), atol = *c.param("atol");
    double max_diff = 0;
    if (s.all_close(rtol, atol, equal_nan, &max_diff)) {
      r.outcome = WatchCheck::Outcome::kHit;
      r.detail = "every |cur - prev| <= " + format_number(atol) + " + " + format_number(rtol) +
                 " * |prev| (max |cur - prev| " + format_number(max_diff) + ")";
    }
    return r;
  }
  std::string detail;
  for (const auto& [key, threshold] : c.params) {
    const ParamDef* pd = nullptr;
    for (const ParamDef& p : def.params) {
      if (p.name == key) pd = &p;
    }
    if (pd == nullptr || pd->kind != Kind::kCheck) continue;
    const std::string stat = key.substr(0, key.rfind('_'));
    double actual = std::numeric_limits<double>::quiet_NaN();
    std::string extra;
    if (stat == "abs_mean") actual = s.abs_mean();
    else if (stat == "mean") actual = s.mean();
    else if (stat == "max") actual = b.max;
    else if (stat == "min") actual = b.min;
    else if (stat == "max_min") actual = b.max - b.min;
    else if (stat == "zero_percentage") actual = s.zero_percentage();
    else if (stat == "abs_mean_update_ratio") actual = s.update_ratio(*c.param("epsilon"));
    else if (stat == "range_percentage") {
      const double lo = *c.param("range_start_inclusive"), hi = *c.param("range_end_inclusive");
      actual = s.range_percentage(lo, hi);
      extra = " in [" + format_number(lo) + ", " + format_number(hi) + "]";
    }
    if (compare(actual, key, threshold)) {
      detail += (detail.empty() ? "" : ", ") + stat + " " + format_number(actual) + " " +
                comparison(key) + " " + format_number(threshold) + extra;
      r.values.push_back({key, threshold, actual});
    }
  }
  if (!detail.empty()) {
    r.outcome = WatchCheck::Outcome::kHit;
    r.detail = std::move(detail);
  }
  return r;
}

// Not checked at all: integer / Bool tensors, empty ones ([DS]).
std::optional<WatchCheck::Outcome> unchecked(const Tensor& t) {
  if (!is_floating(t.dtype())) return WatchCheck::Outcome::kNotFloat;
  if (t.numel() == 0) return WatchCheck::Outcome::kEmpty;
  return std::nullopt;
}


}  // namespace

// ---- WatchCondition --------------------------------------------------------------------------

std::string_view watch_target_name(WatchTarget target) {
  switch (target) {
    case WatchTarget::kWeight: return "weight";
    case WatchTarget::kGradient: return "gradient";
    case WatchTarget::kTensor: return "tensor";
    case WatchTarget::kActivation: return "activation";
  }
  return "?";
}

std::optional<double> WatchCondition::param(std::string_view key) const {
  for (const auto& [k, v] : params) {
    if (k == key) return v;
  }
  return std::nullopt;
}

bool WatchCondition::matches(const std::string& target_name) const {
  return !regex || std::regex_search(target_name, *regex);
}

bool WatchCondition::is_change() const {
  return name == "weight_not_changed" || name == "weight_change_too_large" ||
         name == "weight_change_too_small";
}

bool WatchCondition::is_initialization() const { return name == "weight_initialization"; }

std::string WatchCondition::to_string() const {
  std::string s = name;
  if (!params.empty()) {
    s += "(";
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (i) s += ", ";
      s += params[i].first + "=";
      s += params[i].first == "equal_nan" ? (params[i].second != 0 ? "true" : "false")
                                          : format_number(params[i].second);
    }
    s += ")";
  }
  if (!pattern.empty()) s += "@" + pattern;
  return s;
}

std::vector<WatchCondition> parse_watch_spec(const std::string& spec) {
  return SpecParser(spec).parse();
}

std::vector<std::string> watch_condition_names() {
  std::vector<std::string> out;
  for (const ConditionDef& d : condition_defs()) out.emplace_back(d.name);
  return out;
}

WatchCheck check_watch_condition(const WatchCondition& c, const Tensor& current,
                                 const Tensor* previous) {
  if (auto skip = unchecked(current)) return {*skip, ""};
  const Summary s(current, previous);
  return evaluate(c, s);
}

std::string format_watch_hit(const WatchHit& hit) {
  std::string where = hit.graph >= 0 ? "graph " + std::to_string(hit.graph) + " iteration " +
                                           std::to_string(hit.step)
                                     : "step " + std::to_string(hit.step);
  return "watch: " + where + ": " + hit.condition + " on " + hit.name + ": " + hit.detail;
}

// ---- Watcher ---------------------------------------------------------------------------------

Watcher::Watcher(std::vector<WatchCondition> conditions, WatchOptions options)
    : conditions_(std::move(conditions)), options_(std::move(options)) {
  if (options_.every < 1) {
    throw ValueError("Watcher: expected every >= 1 (--watch-every), got " +
                     std::to_string(options_.every));
  }
  if (conditions_.empty()) throw ValueError("Watcher: expected at least one condition, got none");
  for (const WatchCondition& c : conditions_) (void)def_of(c);
}

Watcher::~Watcher() = default;

nn::Cell* Watcher::network_of(nn::RunContext& rc) const {
  if (rc.network != nullptr) return rc.network;
  return rc.train_network != nullptr ? &rc.train_network->network() : nullptr;
}

void Watcher::record(const WatchCondition& c, const WatchCheck& r, const std::string& name) {
  if (r.outcome == WatchCheck::Outcome::kNotFloat || r.outcome == WatchCheck::Outcome::kEmpty) {
    return;
  }
  ++checks_;
  if (r.outcome == WatchCheck::Outcome::kNonFinite) ++not_checked_non_finite_;
  if (!r.hit()) return;
  hits_.push_back({step_, -1, c.name, c.target, name, r.detail, r.values});
  if (options_.on_hit) options_.on_hit(hits_.back());
  if (options_.stop_on_hit && !stopped_) {
    stopped_ = true;
    stop_pending_ = true;
  }
}

void Watcher::on_train_begin(nn::RunContext& rc) {
  step_ = rc.cur_step_num;
  bool gradients = false, weights = false;
  for (const WatchCondition& c : conditions_) {
    gradients |= c.target == WatchTarget::kGradient;
    weights |= c.target == WatchTarget::kWeight;
  }
  if (gradients) {
    if (rc.train_network == nullptr) {
      throw ValueError("Watcher: expected the training step (RunContext::train_network) for the "
                       "gradient conditions, got none");
    }
    rc.train_network->set_return_gradients(true);
  }
  if (weights && network_of(rc) == nullptr) {
    throw ValueError("Watcher: expected the network (RunContext::network) for the weight "
                     "conditions, got none");
  }
  check_weights(rc, /*initialization=*/true);
  if (stop_pending_) {
    rc.request_stop();
    stop_pending_ = false;
  }
}

void Watcher::on_train_step_begin(nn::RunContext& rc) {
  step_ = rc.cur_step_num;
  in_checked_step_ = step_ % options_.every == 0;
  previous_.clear();
  if (!in_checked_step_) return;
  std::vector<const WatchCondition*> change;
  for (const WatchCondition& c : conditions_) {
    if (c.is_change()) change.push_back(&c);
  }
  if (change.empty()) return;
  nn::Cell* net = network_of(rc);
  if (net == nullptr) return;
  for (auto& [name, p] : net->parameters_and_names()) {
    for (const WatchCondition* c : change) {
      if (c->matches(name)) {
        const Tensor host = backend::to_host(p->value);
        previous_[name] = host.shares_storage_with(p->value) ? host.clone() : host;
        break;
      }
    }
  }
}

void Watcher::check_weights(nn::RunContext& rc, bool initialization) {
  std::vector<const WatchCondition*> conds;
  for (const WatchCondition& c : conditions_) {
    if (c.target == WatchTarget::kWeight && c.is_initialization() == initialization) {
      conds.push_back(&c);
    }
  }
  nn::Cell* net = network_of(rc);
  if (conds.empty() || net == nullptr) return;
  for (auto& [name, p] : net->parameters_and_names()) {
    std::vector<const WatchCondition*> matched;
    for (const WatchCondition* c : conds) {
      if (c->matches(name)) matched.push_back(c);
    }
    if (matched.empty()) continue;
    const Tensor host = backend::to_host(p->value);
    if (auto skip = unchecked(host)) {
      for (const WatchCondition* c : matched) record(*c, {*skip, ""}, name);
      continue;
    }
    const auto prev = previous_.find(name);
    const Summary s(host, prev == previous_.end() ? nullptr : &prev->second);
    for (const WatchCondition* c : matched) record(*c, evaluate(*c, s), name);
  }
}

const std::vector<std::size_t>& Watcher::launch_conditions(const runtime::LaunchEvent& e,
                                                            std::string* full_name) {
  const std::string full = dump_full_name(e, dump_op_name(e));  // the dump's names
  const bool forward = e.debug.role == ir::Role::kForward;
  std::string key = (forward ? "f:" : "o:") + full;
  auto it = launch_cache_.find(key);
  if (it == launch_cache_.end()) {
    LaunchEntry entry{full, {}};
    for (std::size_t i = 0; i < conditions_.size(); ++i) {
      const WatchCondition& c = conditions_[i];
      const bool applies = c.target == WatchTarget::kTensor ||
                           (c.target == WatchTarget::kActivation && forward);
      if (applies && c.matches(full)) entry.conditions.push_back(i);
    }
    it = launch_cache_.emplace(std::move(key), std::move(entry)).first;
  }
  *full_name = it->second.full_name;
  return it->second.conditions;
}

void Watcher::after_launch(const runtime::LaunchEvent& e) {
  if (!in_checked_step_) return;
  std::string full;
  const std::vector<std::size_t>& conds = launch_conditions(e, &full);
  if (conds.empty()) return;
  for (std::size_t slot = 0; slot < e.outputs.size(); ++slot) {
    const Tensor& out = e.outputs[slot];
    if (!out.defined() || unchecked(out)) continue;
    const Tensor host = backend::to_host(out);
    const Summary s(host, nullptr);
    const std::string name = full + ":" + std::to_string(slot);
    for (std::size_t i : conds) record(conditions_[i], evaluate(conditions_[i], s), name);
  }
}

void Watcher::on_train_step_end(nn::RunContext& rc) {
  if (in_checked_step_) {
    std::vector<const WatchCondition*> grads;
    for (const WatchCondition& c : conditions_) {
      if (c.target == WatchTarget::kGradient) grads.push_back(&c);
    }
    if (!grads.empty()) {
      if (rc.train_network == nullptr || rc.train_network->gradients().empty()) {
        throw ValueError("Watcher: expected the step's gradients for the gradient conditions, "
                         "got none (was set_return_gradients turned off?)");
      }
      for (const auto& [name, g] : rc.train_network->gradients()) {
        std::vector<const WatchCondition*> matched;
        for (const WatchCondition* c : grads) {
          if (c->matches(name)) matched.push_back(c);
        }
        if (matched.empty()) continue;
        const Tensor host = backend::to_host(g);
        if (auto skip = unchecked(host)) {
          for (const WatchCondition* c : matched) record(*c, {*skip, ""}, name);
          continue;
        }
        const Summary s(host, nullptr);
        for (const WatchCondition* c : matched) record(*c, evaluate(*c, s), name);
      }
    }
    check_weights(rc, /*initialization=*/false);
  }
  in_checked_step_ = false;
  previous_.clear();
  if (stop_pending_) {
    rc.request_stop();
    stop_pending_ = false;
  }
}

// ---- watch_dump ------------------------------------------------------------------------------

namespace {

// The inputs of a training step (nn/train.cc: data, label, the optimizer's inputs) and of a
// Cell's compiled function (nn/cell.cc: x0, x1, ...; the evaluation graph's).
bool is_step_input(const std::string& name) {
  if (name.size() > 1 && name[0] == 'x' &&
      std::all_of(name.begin() + 1, name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return true;
  }
  return name == "data" || name == "label" || name == "learning_rate" ||
         name == "beta1_power" || name == "beta2_power" ||
         name.rfind("learning_rate_group_", 0) == 0;
}

constexpr std::string_view kStatePrefixes[] = {"moments", "accum",  "stat",  "moment1",
                                               "moment2", "adam_m", "adam_v"};

bool is_optimizer_state(const std::string& name, const std::set<std::string>& parameters) {
  for (std::string_view prefix : kStatePrefixes) {
    if (name.size() > prefix.size() + 1 && name.compare(0, prefix.size(), prefix) == 0 &&
        name[prefix.size()] == '.' && parameters.count(name.substr(prefix.size() + 1))) {
      return true;
    }
  }
  return false;
}

}  // namespace

WatchDumpResult watch_dump(const DumpDir& dump, const std::vector<WatchCondition>& conditions,
                           const WatchDumpOptions& options) {
  for (const WatchCondition& c : conditions) (void)def_of(c);
  WatchDumpResult result;
  std::set<std::int64_t> training;  // graphs with Gradient files: training steps
  for (const DumpTensor& t : dump.tensors) {
    if (t.op_type == "Gradient") training.insert(t.graph);
  }
  bool wants_init = false, wants_activation = false;
  for (const WatchCondition& c : conditions) {
    wants_init |= c.is_initialization();
    wants_activation |= c.target == WatchTarget::kActivation;
  }
  if (wants_init && training.empty()) {
    result.notes.push_back("weight_initialization: the dump has no training step (no Gradient "
                           "files), so no initial weights: not checked");
  }
  bool init_seen = false;
  std::set<std::int64_t> no_order_noted;
  // Per graph: op name -> its execution-order row (DumpDir::find_node searches linearly).
  std::map<std::int64_t, std::map<std::string, const ExecutionOrderRow*>> rows;
  for (const auto& [graph, order] : dump.execution_order) {
    for (const ExecutionOrderRow& r : order) rows[graph].emplace(r.op_name, &r);
  }

  auto record = [&](const WatchCondition& c, const WatchCheck& r, const DumpTensor& t,
                    const std::string& name) {
    if (r.outcome == WatchCheck::Outcome::kNotFloat || r.outcome == WatchCheck::Outcome::kEmpty) {
      return;
    }
    ++result.checks;
    if (r.outcome == WatchCheck::Outcome::kNonFinite) ++result.not_checked_non_finite;
    if (r.outcome == WatchCheck::Outcome::kNoPrevious) ++result.not_checked_no_previous;
    if (!r.hit()) return;
    result.hits.push_back({t.iteration, t.graph, c.name, c.target, name, r.detail, r.values});
    if (options.on_hit) options.on_hit(result.hits.back());
  };

  // Per graph: the weights a change condition read in the previous dumped iteration, and in
  // the current one.
  using Weights = std::map<std::string, Tensor>;
  std::map<std::int64_t, Weights> previous, current;

  std::size_t i = 0;
  while (i < dump.tensors.size()) {
    // One (graph, iteration) group.
    const std::int64_t graph = dump.tensors[i].graph, iteration = dump.tensors[i].iteration;
    std::size_t end = i;
    std::set<std::string> parameters;
    while (end < dump.tensors.size() && dump.tensors[end].graph == graph &&
           dump.tensors[end].iteration == iteration) {
      if (dump.tensors[end].op_type == "Parameter") parameters.insert(dump.tensors[end].op_name);
      ++end;
    }
    if (iteration < 0) {  // constants/: not a run's tensors
      i = end;
      continue;
    }
    if (current.count(graph)) previous[graph] = std::move(current[graph]);
    current[graph] = Weights{};
    const Weights* prev = previous.count(graph) ? &previous[graph] : nullptr;
    const bool weights_here = training.empty() || training.count(graph) > 0;
    const bool init_here = training.count(graph) > 0 && iteration == 0;
    init_seen |= init_here;
    const bool has_order = rows.count(graph) > 0;
    if (wants_activation && !has_order && !no_order_noted.count(graph)) {
      no_order_noted.insert(graph);
      result.notes.push_back("graph " + std::to_string(graph) +
                             ": no execution-order file, so no roles: activation conditions "
                             "skip its launches");
    }

    for (; i < end; ++i) {
      const DumpTensor& t = dump.tensors[i];
      std::vector<const WatchCondition*> conds;
      std::string name;
      bool weight = false;
      if (t.op_type == "Parameter") {
        if (!weights_here || is_step_input(t.op_name) ||
            is_optimizer_state(t.op_name, parameters)) {
          continue;
        }
        weight = true;
        name = t.op_name;
        for (const WatchCondition& c : conditions) {
          if (c.target != WatchTarget::kWeight || !c.matches(name)) continue;
          if (c.is_initialization() && !init_here) continue;
          conds.push_back(&c);
        }
      } else if (t.op_type == "Gradient") {
        name = t.op_name;
        for (const WatchCondition& c : conditions) {
          if (c.target == WatchTarget::kGradient && c.matches(name)) conds.push_back(&c);
        }
      } else if (t.io == "output") {
        const ExecutionOrderRow* row = nullptr;
        if (auto g = rows.find(graph); g != rows.end()) {
          if (auto r = g->second.find(t.op_name); r != g->second.end()) row = r->second;
        }
        const std::string full = row != nullptr && !row->full_name.empty() ? row->full_name
                                                                           : t.op_name;
        name = full + ":" + std::to_string(t.slot);
        const bool forward = row != nullptr && row->role == "forward";
        for (const WatchCondition& c : conditions) {
          const bool applies = c.target == WatchTarget::kTensor ||
                               (c.target == WatchTarget::kActivation && forward);
          if (applies && c.matches(full)) conds.push_back(&c);
        }
      }
      if (conds.empty()) continue;
      const Tensor value = load(t);
      ++result.tensors;
      bool keep = false;
      const Tensor* before = nullptr;
      if (weight && prev != nullptr) {
        auto it = prev->find(t.op_name);
        if (it != prev->end()) before = &it->second;
      }
      if (auto skip = unchecked(value)) {
        for (const WatchCondition* c : conds) record(*c, {*skip, ""}, t, name);
        continue;
      }
      const Summary s(value, before);
      for (const WatchCondition* c : conds) {
        record(*c, evaluate(*c, s), t, name);
        keep |= c->is_change();
      }
      if (keep) current[graph][t.op_name] = value;
    }
  }
  if (wants_init && !training.empty() && !init_seen) {
    result.notes.push_back("weight_initialization: iteration 0 of the training step is not in "
                           "the dump: not checked");
  }
  return result;
}

}  // namespace loom::debug
