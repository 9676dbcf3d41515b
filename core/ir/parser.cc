// The IR parser: reads the .ir text of docs/ir.md back into a Module.
//
// A hand-written recursive-descent parser over the raw bytes; tokens are scanned on demand
// because the grammar's lexical classes depend on context (%names, @graph names with UTF-8
// symbols, numbers such as -inf or 1e-08). Graphs may be referenced before they are defined
// (recursion), so a graph is created on its first mention and filled in when its definition
// arrives; node names must be defined before use, within their own graph.
//
// The parser faces untrusted input (a libFuzzer target runs it): every error is a FormatError
// "<file>:<line>:<col>: expected <what>, got <what>", recursion is bounded by kMaxDepth, numbers
// go through std::from_chars with range checks, and a tensor's storage is only allocated after
// its values were read, so memory stays proportional to the text. Work is linear in the text.
#include "core/ir/parser.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <system_error>
#include <unordered_map>
#include <vector>

#include "core/ir/abstract.h"
#include "core/ir/anf.h"
#include "core/ir/error.h"
#include "core/ir/value.h"

namespace loom::ir {
namespace {

constexpr int kMaxDepth = 256;
constexpr std::size_t kMaxShown = 32;  // bytes of an offending token quoted in a message

bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return is_alpha(c) || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c) || c == '.'; }
// Words are keywords, primitive names, attribute names and numbers ("-inf", "1e+10").
bool is_word_char(char c) { return is_name_char(c) || c == '+' || c == '-'; }
bool is_gname_char(char c) {
  return is_name_char(c) || c == '$' || c == '-' || static_cast<unsigned char>(c) >= 0x80;
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), is_digit);
}
bool is_prim_name(std::string_view s) {
  return !s.empty() && is_name_start(s[0]) &&
         std::all_of(s.begin(), s.end(), [](char c) { return is_name_char(c) && c != '.'; });
}
bool is_node_name(std::string_view s) {
  return all_digits(s) ||
         (!s.empty() && is_name_start(s[0]) && std::all_of(s.begin(), s.end(), is_name_char));
}

// A token as an error message quotes it: control bytes as \xNN, everything else raw.
std::string shown(std::string_view token) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (char ch : token) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    } else {
      out += ch;
    }
  }
  return out;
}

int hex_value(char c) {
  if (is_digit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// What a tensor's value list holds before the tensor is allocated: exact integers for integral
// and bool dtypes, doubles (exact for every float dtype) otherwise.
struct Elements {
  std::vector<std::int64_t> ints;
  std::vector<double> floats;
  std::size_t size() const { return ints.size() + floats.size(); }
};

class Parser {
 public:
  Parser(std::string_view text, std::string_view filename)
      : text_(text), filename_(filename), module_(std::make_unique<Module>()) {}

  std::unique_ptr<Module> parse() {
    try {
      parse_module();
    } catch (const FormatError&) {
      throw;
    } catch (const Error& e) {
      // A check of the IR library (shape_numel, Abstract::tensor...) refused something the
      // grammar let through; report it where the parser stood.
      throw FormatError(location(token_) + ": " + e.what());
    }
    return std::move(module_);
  }

 private:
  struct GraphInfo {
    FuncGraph* graph;
    std::size_t first_use;
    std::optional<std::size_t> defined_at;
  };

  class DepthGuard {
   public:
    explicit DepthGuard(Parser& p) : DepthGuard(p, p.token_) {}
    DepthGuard(Parser& p, std::size_t pos) : p_(p) {
      if (++p_.depth_ > kMaxDepth) p_.fail_at(pos, "nesting deeper than 256");
    }
    ~DepthGuard() { --p_.depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;

   private:
    Parser& p_;
  };

  // ---- positions and errors ----

  std::string location(std::size_t pos) const {
    pos = std::min(pos, text_.size());
    std::size_t line = 1, line_start = 0;
    for (std::size_t i = 0; i < pos; ++i) {
      if (text_[i] == '\n') {
        ++line;
        line_start = i + 1;
      }
    }
    return filename_ + ":" + std::to_string(line) + ":" + std::to_string(pos - line_start + 1);
  }

  // Line:col without the file name, for "(defined at 3:5)".
  std::string short_location(std::size_t pos) const {
    std::string loc = location(pos);
    return loc.substr(filename_.size() + 1);
  }

  // The token at pos as an error message shows it: 'foo', ')', '"abc"' or end of input.
  std::string describe(std::size_t pos) const {
    if (pos >= text_.size()) return "end of input";
    std::size_t end = pos + 1;
    char c = text_[pos];
    if (is_word_char(c) || c == '$' || static_cast<unsigned char>(c) >= 0x80) {
      while (end < text_.size() && (is_word_char(text_[end]) || is_gname_char(text_[end]))) ++end;
    } else if (c == '%' || c == '@') {
      while (end < text_.size() && is_gname_char(text_[end])) ++end;
    } else if (c == '"') {
      while (end < text_.size() && text_[end] != '"' && text_[end] != '\n' &&
             end - pos < kMaxShown) {
        end += text_[end] == '\\' && end + 1 < text_.size() ? 2 : 1;
      }
      if (end < text_.size() && text_[end] == '"') ++end;
    }
    return "'" + shown(text_.substr(pos, std::min(end - pos, kMaxShown))) +
           (end - pos > kMaxShown ? "...'" : "'");
  }

  [[noreturn]] void fail_at(std::size_t pos, const std::string& message) const {
    throw FormatError(location(pos) + ": " + message);
  }
  // "expected <what>, got <the current token>".
  [[noreturn]] void expected(const std::string& what) {
    skip_space();
    fail_at(pos_, "expected " + what + ", got " + describe(pos_));
  }

  // ---- scanning ----

  // Skips whitespace and '#' comments; leaves token_ at the next token.
  void skip_space() {
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        std::size_t nl = text_.find('\n', pos_);
        pos_ = nl == std::string_view::npos ? text_.size() : nl + 1;
      } else {
        break;
      }
    }
    token_ = pos_;
  }

  char peek() {
    skip_space();
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }

  bool try_char(char c) {
    if (peek() != c || pos_ >= text_.size()) return false;
    ++pos_;
    return true;
  }

  void expect_char(char c) {
    if (!try_char(c)) expected(std::string("'") + c + "'");
  }

  std::string_view peek_word() {
    skip_space();
    std::size_t end = pos_;
    while (end < text_.size() && is_word_char(text_[end])) ++end;
    return text_.substr(pos_, end - pos_);
  }

  std::string_view take_word() {
    std::string_view w = peek_word();
    pos_ += w.size();
    return w;
  }

  bool try_keyword(std::string_view keyword) {
    if (peek_word() != keyword) return false;
    pos_ += keyword.size();
    return true;
  }

  void expect_keyword(std::string_view keyword) {
    if (!try_keyword(keyword)) expected("'" + std::string(keyword) + "'");
  }

  // '%' NAME, the '%' already consumed.
  std::string_view take_node_name() {
    std::size_t end = pos_;
    if (end < text_.size() && is_digit(text_[end])) {
      while (end < text_.size() && is_digit(text_[end])) ++end;
    } else if (end < text_.size() && is_name_start(text_[end])) {
      while (end < text_.size() && is_name_char(text_[end])) ++end;
    } else {
      fail_at(pos_, "expected a name after '%', got " + describe(pos_));
    }
    std::string_view name = text_.substr(pos_, end - pos_);
    pos_ = end;
    return name;
  }

  // '@' GNAME, the '@' already consumed.
  std::string_view take_graph_name() {
    std::size_t end = pos_;
    while (end < text_.size() && is_gname_char(text_[end])) ++end;
    if (end == pos_) fail_at(pos_, "expected a graph name after '@', got " + describe(pos_));
    std::string_view name = text_.substr(pos_, end - pos_);
    pos_ = end;
    return name;
  }

  std::string take_string() {
    if (peek() != '"') expected("a string");
    const std::size_t start = pos_++;
    std::string out;
    while (true) {
      if (pos_ >= text_.size() || text_[pos_] == '\n') {
        fail_at(start, "expected a closing '\"' for this string, got " +
                           std::string(pos_ >= text_.size() ? "end of input" : "end of line"));
      }
      char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      const std::size_t escape = pos_;
      char e = pos_ + 1 < text_.size() ? text_[pos_ + 1] : '\0';
      pos_ += 2;
      if (e == '"' || e == '\\') {
        out += e;
      } else if (e == 'n') {
        out += '\n';
      } else if (e == 't') {
        out += '\t';
      } else if (e == 'x' && pos_ + 1 < text_.size() && hex_value(text_[pos_]) >= 0 &&
                 hex_value(text_[pos_ + 1]) >= 0) {
        out += static_cast<char>(hex_value(text_[pos_]) * 16 + hex_value(text_[pos_ + 1]));
        pos_ += 2;
      } else {
        fail_at(escape, "expected an escape \\\" \\\\ \\n \\t or \\xNN, got '" +
                            shown(text_.substr(escape, 4)) + "'");
      }
    }
  }

  // An integer word in [lo, hi]; anything else fails with "expected <what>, got <word>".
  std::int64_t take_int(const std::string& what, std::int64_t lo, std::int64_t hi) {
    std::string_view w = peek_word();
    std::int64_t v = 0;
    auto [ptr, ec] = std::from_chars(w.data(), w.data() + w.size(), v);
    if (w.empty() || ec != std::errc() || ptr != w.data() + w.size() || v < lo || v > hi) {
      expected(what);
    }
    pos_ += w.size();
    return v;
  }

  template <typename F>
  F take_float(const std::string& what) {
    std::string_view w = peek_word();
    F v = 0;
    auto [ptr, ec] = std::from_chars(w.data(), w.data() + w.size(), v);
    if (w.empty() || ec != std::errc() || ptr != w.data() + w.size()) expected(what);
    pos_ += w.size();
    return v;
  }

  DType take_dtype() {
    std::string_view w = peek_word();
    std::optional<DType> d = dtype_from_name(w);
    if (!d) {
      expected(
          "a dtype name (Float32, Float64, Float16, BFloat16, Int32, Int64, UInt8 or Bool)");
    }
    pos_ += w.size();
    return *d;
  }

  // ---- module and graphs ----

  void parse_module() {
    skip_space();
    if (pos_ >= text_.size() || peek_word() != "subgraph") expected("'subgraph'");
    while (true) {
      parse_graph();
      skip_space();
      if (pos_ >= text_.size()) break;
      if (peek_word() != "subgraph") expected("'subgraph' or end of input");
    }
    const GraphInfo* missing = nullptr;
    for (const auto& [name, info] : graphs_) {
      if (!info.defined_at && (!missing || info.first_use < missing->first_use)) missing = &info;
    }
    if (missing) {
      fail_at(missing->first_use,
              "graph @" + missing->graph->name() + " is used but never defined");
    }
  }

  FuncGraph* graph_named(std::string_view name, std::size_t pos) {
    if (auto it = graphs_.find(name); it != graphs_.end()) return it->second.graph;
    FuncGraph* g = module_->add_graph(std::string(name));
    graphs_.emplace(std::string(name), GraphInfo{g, pos, std::nullopt});
    return g;
  }

  void parse_graph() {
    expect_keyword("subgraph");
    skip_space();
    const std::size_t name_pos = pos_;
    expect_char('@');
    std::string_view name = take_graph_name();
    FuncGraph* g = graph_named(name, name_pos);
    GraphInfo& info = graphs_.find(name)->second;
    if (info.defined_at) {
      fail_at(name_pos, "expected a new graph name, got '@" + std::string(name) +
                            "' (defined at " + short_location(*info.defined_at) + ")");
    }
    info.defined_at = name_pos;
    if (!module_->entry()) module_->set_entry(g);
    graph_ = g;
    nodes_.clear();

    expect_char('(');
    if (!try_char(')')) {
      do {
        parse_parameter();
      } while (try_char(','));
      if (!try_char(')')) expected("',' or ')'");
    }
    expect_char('{');
    while (true) {
      char c = peek();
      if (c == '%') {
        parse_statement();
      } else if (peek_word() == "Return") {
        break;
      } else {
        expected("'Return(...)' before '}'");
      }
    }
    expect_keyword("Return");
    expect_char('(');
    graph_->set_output(parse_operand());
    expect_char(')');
    expect_char('}');
  }

  // Records a node name, failing when the graph already has it.
  void check_new_name(std::string_view name, std::size_t pos) {
    if (auto it = nodes_.find(std::string(name)); it != nodes_.end()) {
      fail_at(pos, "expected a new node name, got '%" + std::string(name) + "' (defined at " +
                       short_location(it->second.second) + ")");
    }
  }

  void parse_parameter() {
    skip_space();
    const std::size_t pos = pos_;
    if (!try_char('%')) expected("a parameter '%name'");
    std::string name(take_node_name());
    if (all_digits(name)) {
      fail_at(pos, "expected a parameter name starting with a letter or '_', got '%" + name + "'");
    }
    check_new_name(name, pos);
    AbstractPtr abstract;
    if (try_char(':')) abstract = parse_abstract();
    Parameter* p = graph_->add_parameter(name, std::move(abstract));
    if (try_char('=')) p->set_default(parse_tensor());
    nodes_.emplace(std::move(name), std::make_pair(p, pos));
  }

  void parse_statement() {
    const std::size_t pos = pos_;
    expect_char('%');
    std::string name(take_node_name());
    check_new_name(name, pos);
    expect_char('=');

    std::vector<Node*> inputs;
    std::string prim_name;
    skip_space();
    if (try_char('@')) {
      const std::size_t gpos = pos_ - 1;
      inputs.push_back(graph_->add_value(Value::graph(graph_named(take_graph_name(), gpos))));
    } else if (is_prim_name(peek_word())) {
      prim_name = take_word();
      inputs.push_back(nullptr);  // the primitive, once its attributes are read
    } else {
      expected("a primitive name or '@graph'");
    }
    expect_char('(');
    if (!try_char(')')) {
      do {
        inputs.push_back(parse_operand());
      } while (try_char(','));
      if (!try_char(')')) expected("',' or ')'");
    }
    if (!prim_name.empty()) {
      Primitive::Attrs attrs;
      if (peek() == '{') attrs = parse_attrs();
      inputs[0] = graph_->add_value(Value::primitive(make_primitive(prim_name, std::move(attrs))));
    } else if (peek() == '{') {
      expected("no attributes on a graph call");
    }

    AbstractPtr abstract;
    if (try_char(':')) abstract = parse_abstract();
    DebugInfo debug;
    if (try_keyword("scope")) {
      expect_char('(');
      debug.scope = take_string();
      expect_char(')');
    }
    if (try_keyword("loc")) {
      expect_char('(');
      debug.file = take_string();
      expect_char(':');
      debug.line = static_cast<int>(take_int("a line number", std::numeric_limits<int>::min(),
                                             std::numeric_limits<int>::max()));
      expect_char(')');
    }
    if (try_keyword("role")) {
      expect_char('(');
      const std::size_t pos = pos_;
      const std::string role(take_word());
      if (role == "backward") {
        debug.role = Role::kBackward;
      } else if (role == "optimizer") {
        debug.role = Role::kOptimizer;
      } else if (role != "forward") {
        fail_at(pos, "expected a role of forward, backward, optimizer, got '" + role + "'");
      }
      expect_char(')');
    }
    if (try_keyword("of")) {
      expect_char('(');
      debug.forward = take_string();
      expect_char(')');
    }
    CNode* c = graph_->add_cnode(std::move(inputs), std::move(debug));
    if (!all_digits(name)) c->set_name(name);
    c->set_abstract(std::move(abstract));
    nodes_.emplace(std::move(name), std::make_pair(c, pos));
  }

  Node* parse_operand() {
    if (peek() == '%') {
      const std::size_t pos = pos_++;
      std::string name(take_node_name());
      auto it = nodes_.find(name);
      if (it == nodes_.end()) {
        fail_at(pos, "expected a node defined earlier in @" + graph_->name() + ", got '%" + name +
                         "'");
      }
      return it->second.first;
    }
    return graph_->add_value(parse_value("an operand ('%name' or a value)"));
  }

  // ---- values ----

  Primitive::Attrs parse_attrs() {
    expect_char('{');
    Primitive::Attrs attrs;
    if (try_char('}')) return attrs;
    do {
      std::string_view key = peek_word();
      if (!is_node_name(key)) expected("an attribute name");
      const std::size_t pos = pos_;
      pos_ += key.size();
      if (attrs.count(key)) {
        fail_at(pos, "expected a new attribute name, got '" + std::string(key) + "' (given twice)");
      }
      expect_char(':');
      attrs.emplace(std::string(key), parse_value("a value"));
    } while (try_char(','));
    if (!try_char('}')) expected("',' or '}'");
    return attrs;
  }

  Value parse_value(const std::string& what) {
    char c = peek();
    if (c == '"') return Value::string(take_string());
    if (c == '(') return parse_tuple();
    if (c == '@') {
      const std::size_t pos = pos_++;
      return Value::graph(graph_named(take_graph_name(), pos));
    }
    std::string_view w = peek_word();
    if (w == "None") {
      pos_ += w.size();
      return Value::none();
    }
    if (w == "Tensor") return Value::tensor(parse_tensor());
    if (w != "Bool" && w != "I32" && w != "I64" && w != "F32" && w != "F64" && w != "DType" &&
        w != "Prim") {
      expected(what);
    }
    const std::size_t start = pos_;
    pos_ += w.size();
    expect_char('(');
    Value v;
    if (w == "Bool") {
      v = Value::boolean(take_int("0 or 1", 0, 1) != 0);
    } else if (w == "I32") {
      v = Value::i32(static_cast<std::int32_t>(
          take_int("an Int32 in [-2147483648, 2147483647]", std::numeric_limits<std::int32_t>::min(),
                   std::numeric_limits<std::int32_t>::max())));
    } else if (w == "I64") {
      v = Value::i64(take_int("an Int64", std::numeric_limits<std::int64_t>::min(),
                              std::numeric_limits<std::int64_t>::max()));
    } else if (w == "F32") {
      v = Value::f32(take_float<float>("a Float32"));
    } else if (w == "F64") {
      v = Value::f64(take_float<double>("a Float64"));
    } else if (w == "DType") {
      v = Value::dtype(take_dtype());
    } else {  // Prim
      DepthGuard guard(*this, start);
      std::string_view name = peek_word();
      if (!is_prim_name(name)) expected("a primitive name");
      pos_ += name.size();
      Primitive::Attrs attrs;
      if (try_char(',')) attrs = parse_attrs();
      v = Value::primitive(make_primitive(std::string(name), std::move(attrs)));
    }
    expect_char(')');
    return v;
  }

  // '()' | '(' value ',)' | '(' value (',' value)+ ')'
  Value parse_tuple() {
    skip_space();
    DepthGuard guard(*this);
    expect_char('(');
    std::vector<Value> elements;
    if (try_char(')')) return Value::tuple({});
    elements.push_back(parse_value("a value"));
    if (!try_char(',')) expected("',' after the first element of a tuple");
    if (!try_char(')')) {
      do {
        elements.push_back(parse_value("a value"));
      } while (try_char(','));
      if (!try_char(')')) expected("',' or ')'");
    }
    return Value::tuple(std::move(elements));
  }

  Tensor parse_tensor() {
    skip_space();
    const std::size_t start = pos_;
    expect_keyword("Tensor");
    expect_char('(');
    expect_keyword("shape");
    expect_char('=');
    expect_char('[');
    Shape shape;
    if (!try_char(']')) {
      do {
        shape.push_back(take_int("a dim >= 0", 0, std::numeric_limits<std::int64_t>::max()));
      } while (try_char(','));
      if (!try_char(']')) expected("',' or ']'");
    }
    expect_char(',');
    expect_keyword("dtype");
    expect_char('=');
    const DType dtype = take_dtype();
    expect_char(',');
    expect_keyword("value");
    expect_char('=');
    skip_space();
    const std::size_t values_pos = pos_;
    expect_char('[');
    Elements elements;
    if (!try_char(']')) {
      do {
        take_element(dtype, elements);
      } while (try_char(','));
      if (!try_char(']')) expected("',' or ']'");
    }
    expect_char(')');

    std::int64_t numel = 0;
    try {
      numel = shape_numel(shape);
    } catch (const Error& e) {
      fail_at(start, e.what());
    }
    if (static_cast<std::uint64_t>(numel) != elements.size()) {
      fail_at(values_pos, "expected " + std::to_string(numel) + " values for shape " +
                              shape_to_string(shape) + ", got " +
                              std::to_string(elements.size()));
    }
    Tensor t(dtype, shape);
    // Typed writes keep Int64 values above 2^53 exact (Tensor::set goes through double).
    void* data = t.raw_data();
    for (std::size_t i = 0; i < elements.size(); ++i) {
      switch (dtype) {
        case DType::kFloat32:
          static_cast<float*>(data)[i] = static_cast<float>(elements.floats[i]);
          break;
        case DType::kFloat64: static_cast<double*>(data)[i] = elements.floats[i]; break;
        case DType::kFloat16:
          static_cast<std::uint16_t*>(data)[i] =
              float_to_half(static_cast<float>(elements.floats[i]));
          break;
        case DType::kBFloat16:
          static_cast<std::uint16_t*>(data)[i] =
              float_to_bfloat16(static_cast<float>(elements.floats[i]));
          break;
        case DType::kInt32:
          static_cast<std::int32_t*>(data)[i] = static_cast<std::int32_t>(elements.ints[i]);
          break;
        case DType::kInt64: static_cast<std::int64_t*>(data)[i] = elements.ints[i]; break;
        case DType::kUInt8:
        case DType::kBool:
          static_cast<std::uint8_t*>(data)[i] = static_cast<std::uint8_t>(elements.ints[i]);
          break;
      }
    }
    return t;
  }

  void take_element(DType dtype, Elements& out) {
    switch (dtype) {
      case DType::kFloat32:
      case DType::kFloat16:
      case DType::kBFloat16:
        out.floats.push_back(take_float<float>("a " + std::string(dtype_name(dtype))));
        return;
      case DType::kFloat64:
        out.floats.push_back(take_float<double>("a Float64"));
        return;
      case DType::kInt32:
        out.ints.push_back(take_int("an Int32 in [-2147483648, 2147483647]",
                                    std::numeric_limits<std::int32_t>::min(),
                                    std::numeric_limits<std::int32_t>::max()));
        return;
      case DType::kInt64:
        out.ints.push_back(take_int("an Int64", std::numeric_limits<std::int64_t>::min(),
                                    std::numeric_limits<std::int64_t>::max()));
        return;
      case DType::kUInt8:
        out.ints.push_back(take_int("a UInt8 in [0, 255]", 0, 255));
        return;
      case DType::kBool:
        if (try_keyword("true")) {
          out.ints.push_back(1);
        } else if (try_keyword("false")) {
          out.ints.push_back(0);
        } else {
          expected("true or false");
        }
        return;
    }
  }

  // ---- abstracts (the text of Abstract::to_string) ----

  AbstractPtr parse_abstract() {
    skip_space();
    const std::size_t start = pos_;
    if (!try_char('<')) expected("an abstract such as <Tensor[Float32], (2, 3)>");
    std::string_view kind = peek_word();
    AbstractPtr result;
    if (kind == "Tensor") {
      pos_ += kind.size();
      expect_char('[');
      const DType dtype = take_dtype();
      expect_char(']');
      if (try_char(',')) {
        expect_char('(');
        Shape shape;
        if (!try_char(')')) {
          do {
            shape.push_back(
                take_int("a dim >= -1", kUnknownDim, std::numeric_limits<std::int64_t>::max()));
          } while (try_char(','));
          if (!try_char(')')) expected("',' or ')'");
        }
        result = Abstract::tensor(dtype, std::move(shape));
      } else {
        result = Abstract::tensor_unranked(dtype);
      }
    } else if (kind == "Tuple") {
      DepthGuard guard(*this, start);
      pos_ += kind.size();
      expect_char('[');
      std::vector<AbstractPtr> elements;
      if (!try_char(']')) {
        do {
          elements.push_back(parse_abstract());
        } while (try_char(','));
        if (!try_char(']')) expected("',' or ']'");
      }
      result = Abstract::tuple(std::move(elements));
    } else if (kind == "String") {
      pos_ += kind.size();
      std::optional<std::string> value;
      if (try_char(',')) {
        expect_keyword("value");
        expect_char('=');
        value = take_string();
      }
      result = Abstract::string(std::move(value));
    } else if (kind == "Type" || kind == "Func" || kind == "None") {
      pos_ += kind.size();
      result = kind == "Type" ? Abstract::type() : kind == "Func" ? Abstract::func()
                                                                   : Abstract::none();
    } else if (kind == "Bool" || kind == "Int32" || kind == "Int64" || kind == "Float32" ||
               kind == "Float64") {
      pos_ += kind.size();
      const DType dtype = *dtype_from_name(kind);
      std::optional<Value> value;
      if (try_char(',')) {
        expect_keyword("value");
        expect_char('=');
        value = take_scalar_text(dtype);
      }
      result = Abstract::scalar(dtype, std::move(value));
    } else {
      expected("an abstract kind (Tensor, Tuple, String, Type, Func, None, Bool, Int32, Int64, "
               "Float32 or Float64)");
    }
    expect_char('>');
    return result;
  }

  Value take_scalar_text(DType dtype) {
    switch (dtype) {
      case DType::kBool:
        if (try_keyword("true")) return Value::boolean(true);
        if (try_keyword("false")) return Value::boolean(false);
        expected("true or false");
      case DType::kInt32:
        return Value::i32(static_cast<std::int32_t>(
            take_int("an Int32 in [-2147483648, 2147483647]",
                     std::numeric_limits<std::int32_t>::min(),
                     std::numeric_limits<std::int32_t>::max())));
      case DType::kInt64:
        return Value::i64(take_int("an Int64", std::numeric_limits<std::int64_t>::min(),
                                   std::numeric_limits<std::int64_t>::max()));
      case DType::kFloat32: return Value::f32(take_float<float>("a Float32"));
      default: return Value::f64(take_float<double>("a Float64"));
    }
  }

  std::string_view text_;
  std::string filename_;
  std::size_t pos_ = 0;
  std::size_t token_ = 0;  // start of the token being read, for errors raised by the IR library
  int depth_ = 0;
  std::unique_ptr<Module> module_;
  std::map<std::string, GraphInfo, std::less<>> graphs_;
  FuncGraph* graph_ = nullptr;
  std::unordered_map<std::string, std::pair<Node*, std::size_t>> nodes_;  // node, where defined
};

}  // namespace

std::unique_ptr<Module> parse_module(std::string_view text, std::string_view filename) {
  return Parser(text, filename).parse();
}

}  // namespace loom::ir
