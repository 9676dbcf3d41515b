// checkpoint/checkpoint.h: MindSpore's .ckpt layout, atomic saves and checked loads (the file
// side; checkpoint/net.cc joins checkpoints and Cells).
#include "checkpoint/checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include "checkpoint/proto/checkpoint.pb.h"
#include "core/ir/error.h"

namespace loom::checkpoint {

namespace pb = loom::checkpoint::proto;

namespace {

constexpr char kCrcMagic[] = "crc_num";  // 7 bytes, then a 10-byte big-endian CRC
constexpr std::size_t kCrcTrailer = 17;

struct TypeInfo {
  const char* name;
  DType dtype;
};
constexpr TypeInfo kTypes[] = {
    {"Float32", DType::kFloat32}, {"Float64", DType::kFloat64}, {"Float16", DType::kFloat16},
    {"BFloat16", DType::kBFloat16}, {"Int32", DType::kInt32},   {"Int64", DType::kInt64},
    {"UInt8", DType::kUInt8},     {"Bool", DType::kBool},
};
// MindSpore types loom has no dtype for: named in the error rather than called unknown.
constexpr const char* kUnsupportedTypes[] = {"Int8",   "Int16",  "UInt16", "UInt32",
                                             "UInt64", "Int4",   "random_op", "Complex64",
                                             "Complex128"};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string errno_text() { return std::strerror(errno); }

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", v);
  return buf;
}

// UTF-8 ↔ UTF-32LE (MindSpore's `str` content is numpy's unicode bytes).
std::string utf8_to_utf32le(const std::string& s, const std::string& tag) {
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::uint32_t cp = 0;
    int extra = 0;
    if (c < 0x80) {
      cp = c;
    } else if ((c >> 5) == 0x6) {
      cp = c & 0x1F, extra = 1;
    } else if ((c >> 4) == 0xE) {
      cp = c & 0x0F, extra = 2;
    } else if ((c >> 3) == 0x1E) {
      cp = c & 0x07, extra = 3;
    } else {
      throw ValueError("save_checkpoint: string value '" + tag + "' is not valid UTF-8");
    }
    if (extra > 0 && i + extra >= s.size()) {
      throw ValueError("save_checkpoint: string value '" + tag + "' is not valid UTF-8");
    }
    for (int k = 1; k <= extra; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc >> 6) != 0x2) {
        throw ValueError("save_checkpoint: string value '" + tag + "' is not valid UTF-8");
      }
      cp = (cp << 6) | (cc & 0x3F);
    }
    i += 1 + extra;
    for (int b = 0; b < 4; ++b) out.push_back(static_cast<char>((cp >> (8 * b)) & 0xFF));
  }
  return out;
}

std::string utf32le_to_utf8(const std::string& s, const std::string& what, const std::string& tag) {
  std::string out;
  for (std::size_t i = 0; i + 4 <= s.size(); i += 4) {
    std::uint32_t cp = 0;
    for (int b = 0; b < 4; ++b) cp |= std::uint32_t{static_cast<unsigned char>(s[i + b])} << (8 * b);
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) {
      throw FormatError(what + ": '" + tag + "': " + hex32(cp) +
                        " at character " + std::to_string(i / 4) + " is not a Unicode code point");
    }
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  return out;
}

// Appends one serialized Checkpoint{value: [v]}.
void append_value(std::string& out, const pb::Checkpoint::Value& v) {
  pb::Checkpoint one;
  *one.add_value() = v;
  if (!one.AppendToString(&out)) {
    throw InternalError("save_checkpoint: protobuf could not serialize '" + v.tag() + "'");
  }
}

}  // namespace

std::string serialize_checkpoint(const Checkpoint& ck, const SaveOptions& options) {
  if (options.chunk_bytes <= 0) {
    throw ValueError("save_checkpoint: expected chunk_bytes > 0, got " +
                     std::to_string(options.chunk_bytes));
  }
  std::set<std::string> seen;
  auto check_name = [&](const std::string& name) {
    if (name.empty()) throw ValueError("save_checkpoint: expected a non-empty name, got \"\"");
    if (!seen.insert(name).second) {
      throw ValueError("save_checkpoint: the name '" + name + "' appears twice");
    }
  };
  std::string out;
  for (const auto& [name, t] : ck.tensors) {
    check_name(name);
    if (!t.defined()) throw ValueError("save_checkpoint: tensor '" + name + "' is undefined");
    if (!t.is_host()) {
      throw ValueError("save_checkpoint: expected tensor '" + name + "' in host memory, got one "
                       "on " + std::string(device_name(t.device())) +
                       " (copy it with backend::to_host; save_checkpoint(Cell) does)");
    }
    pb::Checkpoint::Value v;
    v.set_tag(name);
    pb::TensorProto* tp = v.mutable_tensor();
    if (t.rank() == 0) {
      tp->add_dims(0);  // read as 0-d by every MindSpore 2.x
    } else {
      for (std::int64_t d : t.shape()) tp->add_dims(d);
    }
    tp->set_tensor_type(tensor_type_name(t.dtype()));
    const auto* bytes = static_cast<const char*>(t.raw_data());
    const std::size_t total = t.nbytes();
    const auto chunk = static_cast<std::size_t>(options.chunk_bytes);
    if (total <= chunk) {
      tp->set_tensor_content(bytes, total);
      append_value(out, v);
      continue;
    }
    for (std::size_t at = 0; at < total; at += chunk) {
      tp->set_tensor_content(bytes + at, std::min(chunk, total - at));
      append_value(out, v);
    }
  }
  for (const auto& [name, text] : ck.strings) {
    check_name(name);
    pb::Checkpoint::Value v;
    v.set_tag(name);
    pb::TensorProto* tp = v.mutable_tensor();
    tp->add_dims(0);
    tp->set_tensor_type("str");
    // numpy's unicode dtype is at least one code unit wide: MindSpore writes "" as one U+0000
    // (4 zero bytes), and its reader fails on empty content ("itemsize cannot be zero in type").
    tp->set_tensor_content(text.empty() ? std::string(4, '\0') : utf8_to_utf32le(text, name));
    append_value(out, v);
  }
  if (options.crc) {
    // zlib's crc32 takes uInt lengths: feed the buffer in pieces.
    uLong c = crc32(0L, Z_NULL, 0);
    for (std::size_t at = 0; at < out.size(); at += (1u << 30)) {
      const std::size_t n = std::min<std::size_t>(1u << 30, out.size() - at);
      c = crc32(c, reinterpret_cast<const Bytef*>(out.data() + at), static_cast<uInt>(n));
    }
    out.append(kCrcMagic, 7);
    for (int b = 9; b >= 0; --b) {
      out.push_back(b < 4 ? static_cast<char>((c >> (8 * b)) & 0xFF) : '\0');
    }
  }
  return out;
}

namespace {

// The directory of `path` ("." for a bare file name).
std::string directory_of(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

// True when `fd` is the file `path` names now (the same inode on the same device).
bool same_file(int fd, const std::string& path) {
  struct stat a{}, b{};
  return ::fstat(fd, &a) == 0 && ::stat(path.c_str(), &b) == 0 && a.st_dev == b.st_dev &&
         a.st_ino == b.st_ino;
}

// A temporary file next to `path`, created and locked (flock, held until it is closed), so that
// remove_orphaned_temporaries can tell it from one a killed process left. If a cleaner removed
// the name between the creation and the lock, a new one is made.
int create_locked_temporary(const std::string& path, std::string& tmp) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    std::string name = path + ".XXXXXX.tmp";
    std::vector<char> templ(name.begin(), name.end());
    templ.push_back('\0');
    const int fd = mkstemps(templ.data(), 4);
    if (fd < 0) {
      throw FormatError("save_checkpoint: cannot create a temporary file next to '" + path +
                        "': " + errno_text());
    }
    tmp = templ.data();
    if (::flock(fd, LOCK_EX) == 0 && same_file(fd, tmp)) return fd;
    ::close(fd);
  }
  throw FormatError("save_checkpoint: cannot keep a temporary file next to '" + path +
                    "' (removed while being locked, 8 times)");
}

// Writes `bytes` to `path` atomically (see the header).
void write_atomically(const std::string& path, const std::string& bytes) {
  const std::string dir = directory_of(path);
  remove_orphaned_temporaries(dir);
  std::string tmp;
  const int fd = create_locked_temporary(path, tmp);
  auto fail = [&](const std::string& what) {
    const std::string err = errno_text();
    ::close(fd);
    ::unlink(tmp.c_str());
    throw FormatError("save_checkpoint: " + what + " '" + tmp + "': " + err);
  };
  std::size_t at = 0;
  while (at < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + at, std::min<std::size_t>(bytes.size() - at, 1u << 30));
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("cannot write");
    }
    at += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) fail("cannot fsync");
  if (::fchmod(fd, 0400) != 0) fail("cannot chmod");
  // Renamed while the lock is held: until then a cleaner sees a save in progress.
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = errno_text();
    ::close(fd);
    ::unlink(tmp.c_str());
    throw FormatError("save_checkpoint: cannot rename '" + tmp + "' to '" + path + "': " + err);
  }
  if (::close(fd) != 0) {
    // The data was fsync'ed before the rename: the file at `path` is complete.
    throw FormatError("save_checkpoint: cannot close '" + path + "': " + errno_text());
  }
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);  // makes the rename durable; a failure here loses nothing already written
    ::close(dfd);
  }
}

// Reads a varint at data[at..end); returns false when it runs past end or over 10 bytes.
bool read_varint(const unsigned char* data, std::size_t end, std::size_t& at, std::uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64 && at < end; shift += 7) {
    const unsigned char b = data[at++];
    v |= std::uint64_t{b & 0x7Fu} << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

// One tag's tensor being assembled from its chunks.
struct Pending {
  std::string tag;
  std::vector<std::int64_t> dims;
  std::string type;
  std::string content;
  std::size_t first_offset = 0;
  int first_index = 0;
};

}  // namespace

const Tensor* Checkpoint::find(const std::string& name) const {
  for (const auto& [n, t] : tensors) {
    if (n == name) return &t;
  }
  return nullptr;
}

std::string tensor_type_name(DType dtype) {
  for (const TypeInfo& t : kTypes) {
    if (t.dtype == dtype) return t.name;
  }
  throw InternalError("tensor_type_name: no MindSpore name for dtype " +
                      std::string(dtype_name(dtype)));
}

std::vector<std::string> remove_orphaned_temporaries(const std::string& directory) {
  std::vector<std::string> removed;
  DIR* d = ::opendir(directory.c_str());
  if (d == nullptr) return removed;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    // "<file>.ckpt.XXXXXX.tmp": six characters of mkstemps between ".ckpt." and ".tmp".
    const std::size_t n = name.size();
    if (n < 16 || name.compare(n - 4, 4, ".tmp") != 0 || name.compare(n - 16, 6, ".ckpt.") != 0) {
      continue;
    }
    const std::string path = (directory == "/" ? "" : directory) + "/" + name;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    // A save in progress holds its lock; a killed process's lock went with it.
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0 && same_file(fd, path) && ::unlink(path.c_str()) == 0) {
      removed.push_back(path);
    }
    ::close(fd);
  }
  ::closedir(d);
  return removed;
}

std::string save_checkpoint(const Checkpoint& ck, const std::string& path,
                            const SaveOptions& options) {
  if (path.empty()) throw ValueError("save_checkpoint: expected a file name, got \"\"");
  const std::string target = ends_with(path, ".ckpt") ? path : path + ".ckpt";
  write_atomically(target, serialize_checkpoint(ck, options));
  return target;
}

std::string save_checkpoint(const NamedTensors& tensors, const std::string& path,
                            const SaveOptions& options) {
  return save_checkpoint(Checkpoint{tensors, {}}, path, options);
}


Checkpoint parse_checkpoint(const void* data_ptr, std::size_t size, const std::string& what,
                            const LoadOptions& options) {
  const auto* data = static_cast<const unsigned char*>(data_ptr);
  auto error = [&](const std::string& msg) -> FormatError {
    return FormatError(what + ": " + msg);
  };
  if (size >= 4) {
    const std::uint32_t magic = std::uint32_t{data[0]} | std::uint32_t{data[1]} << 8 |
                                std::uint32_t{data[2]} << 16 | std::uint32_t{data[3]} << 24;
    const char* mode = magic == 0x7F3A5ED8u   ? "AES-GCM"
                       : magic == 0x7F3A5ED9u ? "AES-CBC"
                       : magic == 0x7F3A5EDAu ? "SM4-CBC"
                                              : nullptr;
    if (mode) {
      throw error(std::string("the checkpoint is encrypted (") + mode + ", magic " +
                  hex32(magic) + "); loom reads only plain checkpoints");
    }
  }
  std::size_t end = size;
  if (size >= kCrcTrailer &&
      std::memcmp(data + size - kCrcTrailer, kCrcMagic, 7) == 0) {
    end = size - kCrcTrailer;
    if (options.crc_check) {
      std::uint64_t stored = 0;
      for (int b = 0; b < 10; ++b) stored = (stored << 8) | data[end + 7 + b];
      uLong c = crc32(0L, Z_NULL, 0);
      for (std::size_t at = 0; at < end; at += (1u << 30)) {
        const std::size_t n = std::min<std::size_t>(1u << 30, end - at);
        c = crc32(c, data + at, static_cast<uInt>(n));
      }
      if (stored != c) {
        throw error("CRC-32 mismatch: the trailer says " + hex32(static_cast<std::uint32_t>(stored)) +
                    ", the content gives " + hex32(static_cast<std::uint32_t>(c)));
      }
    }
  } else if (options.crc_check) {
    throw error("crc_check was asked for but the file has no CRC trailer");
  }

  Checkpoint ck;
  std::set<std::string> done;
  Pending pending;
  bool have_pending = false;

  auto finish = [&]() {
    if (!have_pending) return;
    have_pending = false;
    const std::string place = "entry #" + std::to_string(pending.first_index) + " at byte " +
                              std::to_string(pending.first_offset) + " ('" + pending.tag + "')";
    if (!done.insert(pending.tag).second) {
      throw error(place + ": the tag appears again after other entries (chunks of one tensor "
                          "must be adjacent)");
    }
    if (pending.type == "str") {
      if (pending.content.size() % 4 != 0) {
        throw error(place + ": a str value must hold UTF-32 code units (a multiple of 4 bytes), "
                            "got " + std::to_string(pending.content.size()) + " bytes");
      }
      // numpy's unicode strings (which MindSpore reads these as) end at trailing U+0000s: "" is
      // written as one U+0000. U+0000 is the only code point with a 0x00 byte in UTF-8.
      std::string text = utf32le_to_utf8(pending.content, what, pending.tag);
      while (!text.empty() && text.back() == '\0') text.pop_back();
      ck.strings.emplace_back(pending.tag, std::move(text));
      return;
    }
    const TypeInfo* info = nullptr;
    for (const TypeInfo& t : kTypes) {
      if (pending.type == t.name) info = &t;
    }
    if (!info) {
      for (const char* u : kUnsupportedTypes) {
        if (pending.type == u) {
          throw error(place + ": tensor_type " + pending.type +
                      " is a MindSpore type loom does not support");
        }
      }
      throw error(place + ": unknown tensor_type \"" + pending.type + "\"");
    }
    Shape shape;
    // dims [0] and [] both mean 0-d (MindSpore 2.0-2.2 wrote [0] for scalars).
    if (!(pending.dims.size() == 1 && pending.dims[0] == 0)) {
      if (pending.dims.size() > 64) {
        throw error(place + ": expected at most 64 dims, got " +
                    std::to_string(pending.dims.size()));
      }
      std::uint64_t count = 1;
      for (std::int64_t d : pending.dims) {
        if (d < 0) throw error(place + ": negative dimension " + std::to_string(d));
        if (d != 0 && count > (std::uint64_t{1} << 56) / static_cast<std::uint64_t>(d)) {
          throw error(place + ": the dims give more than 2^56 elements");
        }
        count *= static_cast<std::uint64_t>(d);
        shape.push_back(d);
      }
    }
    std::uint64_t numel = 1;
    for (std::int64_t d : shape) numel *= static_cast<std::uint64_t>(d);
    const std::uint64_t expected = numel * dtype_size(info->dtype);
    if (pending.content.size() != expected) {
      throw error(place + ": expected " + std::to_string(expected) + " bytes of " + pending.type +
                  " data for shape " + shape_to_string(shape) + ", got " +
                  std::to_string(pending.content.size()));
    }
    Tensor t(info->dtype, shape);
    if (expected > 0) std::memcpy(t.raw_data(), pending.content.data(), expected);
    ck.tensors.emplace_back(pending.tag, std::move(t));
  };

  std::size_t at = 0;
  int index = 0;
  while (at < end) {
    const std::size_t offset = at;
    const std::string place = "entry #" + std::to_string(index) + " at byte " + std::to_string(offset);
    std::uint64_t key = 0;
    if (!read_varint(data, end, at, key)) throw error(place + ": truncated field key");
    if (key != 0x0A) {
      throw error(place + ": expected field 1 of type bytes (key 0x0A), got key " +
                  std::to_string(key) + " (field " + std::to_string(key >> 3) + ", wire type " +
                  std::to_string(key & 7) + "): not a MindSpore checkpoint");
    }
    std::uint64_t len = 0;
    if (!read_varint(data, end, at, len)) throw error(place + ": truncated length");
    if (len > end - at) {
      throw error(place + ": the entry needs " + std::to_string(len) + " bytes, only " +
                  std::to_string(end - at) + " remain (truncated file?)");
    }
    if (len > static_cast<std::uint64_t>(std::numeric_limits<int>::max())) {
      throw error(place + ": an entry of " + std::to_string(len) + " bytes exceeds 2 GiB");
    }
    pb::Checkpoint::Value v;
    // Partial parse, then our own check of the required fields (ParseFromArray would log them).
    if (!v.ParsePartialFromArray(data + at, static_cast<int>(len))) {
      throw error(place + ": not a valid Checkpoint.Value (malformed protobuf)");
    }
    if (!v.IsInitialized()) {
      throw error(place + ": not a valid Checkpoint.Value (missing " +
                  v.InitializationErrorString() + ")");
    }
    at += len;
    const std::string vplace = place + " ('" + v.tag() + "')";
    // A parameter needs a name (save_checkpoint refuses an empty one; found by checkpoint_fuzz).
    if (v.tag().empty()) throw error(place + ": expected the entry to have a name, got an empty tag");
    if (v.has_maptensor()) {
      throw error(vplace + ": map tensors (MapParameter) are not supported");
    }
    if (!v.has_tensor()) throw error(vplace + ": the entry holds no tensor");
    const pb::TensorProto& tp = v.tensor();
    std::vector<std::int64_t> dims(tp.dims().begin(), tp.dims().end());
    if (have_pending && pending.tag == v.tag()) {
      if (dims != pending.dims || tp.tensor_type() != pending.type) {
        throw error(vplace + ": a chunk of '" + v.tag() +
                    "' has other dims or tensor_type than its first chunk");
      }
      pending.content += tp.tensor_content();
    } else {
      finish();
      pending = Pending{v.tag(), std::move(dims), tp.tensor_type(), tp.tensor_content(), offset,
                        index};
      have_pending = true;
    }
    ++index;
  }
  finish();
  if (ck.tensors.empty() && ck.strings.empty()) throw error("the checkpoint holds no parameters");
  return ck;
}

Checkpoint load_checkpoint(const std::string& path, const LoadOptions& options) {
  if (!ends_with(path, ".ckpt")) {
    throw ValueError("load_checkpoint: expected a file name ending in .ckpt, got '" + path + "'");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ValueError("load_checkpoint: cannot open '" + path + "': " + errno_text());
  in.seekg(0, std::ios::end);
  const std::streamoff n = in.tellg();
  if (n < 0) throw FormatError("load_checkpoint: cannot read '" + path + "'");
  in.seekg(0);
  std::string bytes(static_cast<std::size_t>(n), '\0');
  if (n > 0 && !in.read(bytes.data(), n)) {
    throw FormatError("load_checkpoint: cannot read '" + path + "': " + errno_text());
  }
  return parse_checkpoint(bytes.data(), bytes.size(), path, options);
}

}  // namespace loom::checkpoint
