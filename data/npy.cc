// .npy reading and writing (data/npy.h).
#include "data/npy.h"

#include <cctype>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <vector>

#include "core/ir/error.h"

namespace loom::data {

namespace {

[[noreturn]] void fail(const std::string& what, const std::string& msg) {
  throw FormatError(what + ": " + msg);
}

std::optional<DType> descr_dtype(const std::string& d) {
  if (d == "<f4") return DType::kFloat32;
  if (d == "<f8") return DType::kFloat64;
  if (d == "<f2") return DType::kFloat16;
  if (d == "<i4") return DType::kInt32;
  if (d == "<i8") return DType::kInt64;
  if (d == "|u1" || d == "<u1") return DType::kUInt8;
  if (d == "|b1" || d == "<b1") return DType::kBool;
  return std::nullopt;
}

std::string dtype_descr(DType d) {
  switch (d) {
    case DType::kFloat32:
      return "<f4";
    case DType::kFloat64:
      return "<f8";
    case DType::kFloat16:
      return "<f2";
    case DType::kInt32:
      return "<i4";
    case DType::kInt64:
      return "<i8";
    case DType::kUInt8:
      return "|u1";
    case DType::kBool:
      return "|b1";
    case DType::kBFloat16:
      break;
  }
  throw ValueError("save_npy: expected a dtype NumPy has, got " + std::string(dtype_name(d)));
}

// A tiny parser of the header's Python literal: {'key': value, ...} with string, True/False and
// tuple-of-int values.
class HeaderParser {
 public:
  HeaderParser(const std::string& s, const std::string& what) : s_(s), what_(what) {}

  struct Item {
    enum Kind { kString, kBool, kTuple } kind;
    std::string str;
    bool b = false;
    std::vector<std::int64_t> ints;
  };

  std::map<std::string, Item> parse() {
    std::map<std::string, Item> out;
    ws();
    expect('{');
    ws();
    while (peek() != '}') {
      std::string key = string();
      ws();
      expect(':');
      ws();
      Item v = value();
      if (!out.emplace(key, std::move(v)).second) fail(what_, "header repeats key '" + key + "'");
      ws();
      if (peek() == ',') {
        ++i_;
        ws();
      } else if (peek() != '}') {
        fail(what_, "expected ',' or '}' in the header dict at offset " + std::to_string(i_));
      }
    }
    ++i_;
    ws();
    if (i_ != s_.size()) fail(what_, "expected the header to end after the dict");
    return out;
  }

 private:
  char peek() const {
    if (i_ >= s_.size()) fail(what_, "expected more header text, got its end");
    return s_[i_];
  }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t')) ++i_;
  }
  void expect(char c) {
    if (peek() != c) {
      fail(what_, std::string("expected '") + c + "' in the header at offset " +
                      std::to_string(i_) + ", got '" + s_[i_] + "'");
    }
    ++i_;
  }
  std::string string() {
    const char q = peek();
    if (q != '\'' && q != '"') fail(what_, "expected a quoted key or string in the header");
    ++i_;
    std::string r;
    while (peek() != q) r += s_[i_++];
    ++i_;
    return r;
  }
  Item value() {
    Item it{};
    const char c = peek();
    if (c == '\'' || c == '"') {
      it.kind = Item::kString;
      it.str = string();
    } else if (s_.compare(i_, 4, "True") == 0) {
      it.kind = Item::kBool;
      it.b = true;
      i_ += 4;
    } else if (s_.compare(i_, 5, "False") == 0) {
      it.kind = Item::kBool;
      i_ += 5;
    } else if (c == '(') {
      it.kind = Item::kTuple;
      ++i_;
      ws();
      while (peek() != ')') {
        if (!std::isdigit(static_cast<unsigned char>(peek()))) {
          fail(what_, "expected non-negative integers in the shape tuple");
        }
        std::int64_t v = 0;
        while (std::isdigit(static_cast<unsigned char>(peek()))) {
          if (v > (std::numeric_limits<std::int64_t>::max() - 9) / 10) {
            fail(what_, "expected shape dims that fit in 64 bits");
          }
          v = v * 10 + (s_[i_++] - '0');
        }
        if (peek() == 'L') ++i_;  // Python 2 longs
        it.ints.push_back(v);
        ws();
        if (peek() == ',') {
          ++i_;
          ws();
        } else if (peek() != ')') {
          fail(what_, "expected ',' or ')' in the shape tuple");
        }
      }
      ++i_;
    } else {
      fail(what_, "expected a string, True, False or a tuple in the header at offset " +
                      std::to_string(i_));
    }
    return it;
  }

  const std::string& s_;
  const std::string& what_;
  std::size_t i_ = 0;
};

}  // namespace

Tensor parse_npy(const void* data, std::size_t size, const std::string& what) {
  const auto* b = static_cast<const unsigned char*>(data);
  if (size < 10 || std::memcmp(b, "\x93NUMPY", 6) != 0) {
    fail(what, "expected the .npy magic \\x93NUMPY, got " +
                   (size < 6 ? std::string("a file of ") + std::to_string(size) + " bytes"
                             : std::string("other bytes")));
  }
  const int major = b[6], minor = b[7];
  if (minor != 0 || major < 1 || major > 3) {
    fail(what, "expected .npy version 1.0, 2.0 or 3.0, got " + std::to_string(major) + "." +
                   std::to_string(minor));
  }
  std::size_t header_len = 0, pos = 0;
  if (major == 1) {
    header_len = b[8] | (b[9] << 8);
    pos = 10;
  } else {
    if (size < 12)
      fail(what,
           "expected a 4-byte header length, got a file of " + std::to_string(size) + " bytes");
    header_len = static_cast<std::size_t>(b[8]) | (static_cast<std::size_t>(b[9]) << 8) |
                 (static_cast<std::size_t>(b[10]) << 16) | (static_cast<std::size_t>(b[11]) << 24);
    pos = 12;
  }
  if (header_len > size - pos) {
    fail(what, "expected a header of " + std::to_string(header_len) + " bytes, got a file of " +
                   std::to_string(size) + " bytes (truncated)");
  }
  std::string header(reinterpret_cast<const char*>(b + pos), header_len);
  for (unsigned char c : header) {
    if (c >= 0x80 && major < 3) fail(what, "expected an ASCII header (UTF-8 needs version 3.0)");
  }
  auto dict = HeaderParser(header, what).parse();
  if (dict.size() != 3 || !dict.count("descr") || !dict.count("fortran_order") ||
      !dict.count("shape")) {
    fail(what, "expected the header keys descr, fortran_order and shape, got " +
                   std::to_string(dict.size()) + " keys");
  }
  const auto& descr = dict["descr"];
  if (descr.kind != HeaderParser::Item::kString) fail(what, "expected descr to be a string");
  auto dtype = descr_dtype(descr.str);
  if (!dtype) {
    fail(what, "expected descr <f4, <f8, <f2, <i4, <i8, |u1 or |b1 (little-endian), got '" +
                   descr.str + "'");
  }
  const auto& fo = dict["fortran_order"];
  if (fo.kind != HeaderParser::Item::kBool) fail(what, "expected fortran_order True or False");
  if (fo.b) fail(what, "expected fortran_order False (C order), got True");
  const auto& sh = dict["shape"];
  if (sh.kind != HeaderParser::Item::kTuple) fail(what, "expected shape to be a tuple");
  Shape shape(sh.ints.begin(), sh.ints.end());
  std::uint64_t numel = 1;
  for (std::int64_t d : shape) {
    if (d != 0 && numel > (std::uint64_t{1} << 62) / static_cast<std::uint64_t>(d)) {
      fail(what, "expected a shape of a reasonable size, got " + shape_to_string(shape));
    }
    numel *= static_cast<std::uint64_t>(d);
  }
  const std::uint64_t nbytes = numel * dtype_size(*dtype);
  const std::size_t data_at = pos + header_len;
  if (size - data_at != nbytes) {
    fail(what, "expected " + std::to_string(nbytes) + " bytes of data for " +
                   std::string(dtype_name(*dtype)) + " " + shape_to_string(shape) + ", got " +
                   std::to_string(size - data_at));
  }
  Tensor t(*dtype, shape);
  if (nbytes) std::memcpy(t.raw_data(), b + data_at, nbytes);
  if (*dtype == DType::kBool) {
    auto* p = static_cast<unsigned char*>(t.raw_data());
    for (std::uint64_t i = 0; i < numel; ++i) {
      if (p[i] > 1) fail(what, "expected bool bytes 0 or 1, got " + std::to_string(p[i]));
    }
  }
  return t;
}

Tensor load_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FormatError(path + ": expected a readable .npy file, got none");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_npy(bytes.data(), bytes.size(), path);
}

std::string serialize_npy(const Tensor& t) {
  std::string dict =
      "{'descr': '" + dtype_descr(t.dtype()) + "', 'fortran_order': False, 'shape': (";
  for (std::size_t i = 0; i < t.shape().size(); ++i) {
    dict += std::to_string(t.shape()[i]);
    if (t.shape().size() == 1 || i + 1 < t.shape().size()) dict += ",";
    if (i + 1 < t.shape().size()) dict += " ";
  }
  dict += "), }";
  // Pad so that magic + version + length + header is a multiple of 64, ending in '\n'.
  std::size_t prefix = 10;
  std::size_t total = prefix + dict.size() + 1;
  bool v2 = false;
  if (((total + 63) / 64) * 64 - prefix > 65535) {
    v2 = true;
    prefix = 12;
    total = prefix + dict.size() + 1;
  }
  const std::size_t padded = (total + 63) / 64 * 64;
  std::string header = dict + std::string(padded - total, ' ') + "\n";
  std::string out = "\x93NUMPY";
  out += static_cast<char>(v2 ? 2 : 1);
  out += '\0';
  const std::size_t hl = header.size();
  out += static_cast<char>(hl & 0xff);
  out += static_cast<char>((hl >> 8) & 0xff);
  if (v2) {
    out += static_cast<char>((hl >> 16) & 0xff);
    out += static_cast<char>((hl >> 24) & 0xff);
  }
  out += header;
  out.append(static_cast<const char*>(t.raw_data()), t.nbytes());
  return out;
}

void save_npy(const std::string& path, const Tensor& tensor) {
  const std::string bytes = serialize_npy(tensor);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw FormatError(path + ": cannot open for writing");
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) throw FormatError(path + ": write failed");
}

}  // namespace loom::data
