// File sources of data/dataset.h: IDX (MNIST, Fashion-MNIST), CIFAR-10 binary batches, and
// finding the Debian package's Fashion-MNIST files.
//
// Files are read whole into memory (gunzipped with zlib's inflate when they start with the gzip
// magic 1f 8b, whatever their name), then every header field, count and byte size is checked
// before anything is trusted. Each error is a FormatError (a file that is wrong) or a ValueError
// (an argument that is wrong) whose message starts with the file's path.
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/ir/error.h"
#include "data/dataset.h"
#include "data/internal.h"

namespace loom::data {

namespace {

using Bytes = std::vector<std::uint8_t>;

// The decompressed size a file may reach; beyond it we stop (a corrupt or hostile stream).
constexpr std::size_t kMaxBytes = std::size_t{1} << 32;

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

Bytes read_raw(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw FormatError(path + ": cannot open: " + std::strerror(errno));
  Bytes out;
  std::uint8_t buf[1 << 16];
  for (;;) {
    const std::size_t got = std::fread(buf, 1, sizeof buf, f.get());
    out.insert(out.end(), buf, buf + got);
    if (got < sizeof buf) break;
  }
  if (std::ferror(f.get())) throw FormatError(path + ": read error");
  return out;
}

// Inflates a gzip member (or several concatenated, as gzip allows).
Bytes gunzip(const std::string& path, const Bytes& in) {
  Bytes out;
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) throw FormatError(path + ": zlib init failed");
  z.next_in = const_cast<Bytef*>(in.data());
  z.avail_in = static_cast<uInt>(in.size());
  std::size_t have = 0;
  int rc = Z_OK;
  for (;;) {
    if (out.size() - have < (1 << 16)) {
      if (out.size() >= kMaxBytes) {
        inflateEnd(&z);
        throw FormatError(path + ": gzip data decompresses to more than 4 GiB");
      }
      out.resize(std::max<std::size_t>(out.size() * 2, in.size() * 4 + (1 << 16)));
    }
    z.next_out = out.data() + have;
    z.avail_out = static_cast<uInt>(std::min<std::size_t>(out.size() - have, 1u << 30));
    const uInt before = z.avail_out;
    rc = inflate(&z, Z_NO_FLUSH);
    have += before - z.avail_out;
    if (rc == Z_STREAM_END) {
      if (z.avail_in == 0) break;
      // Another gzip member follows; anything else after the stream is an error below.
      if (inflateReset(&z) != Z_OK) break;
      continue;
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) break;
    if (rc == Z_BUF_ERROR && z.avail_in == 0) break;  // input ended mid-stream
  }
  const bool ok = rc == Z_STREAM_END;
  const std::string msg = z.msg ? z.msg : "";
  inflateEnd(&z);
  if (!ok) {
    throw FormatError(path + ": corrupt or truncated gzip data" +
                      (msg.empty() ? std::string() : " (" + msg + ")"));
  }
  out.resize(have);
  return out;
}

Bytes read_file(const std::string& path) {
  Bytes raw = read_raw(path);
  if (raw.size() >= 2 && raw[0] == 0x1f && raw[1] == 0x8b) return gunzip(path, raw);
  return raw;
}

std::uint32_t be32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// An IDX file's payload as a UInt8 tensor of its dims. `expected_magic` 0 accepts any UInt8
// IDX magic (0x000008NN); `what` names the payload in the size error ("image", "label").
Tensor parse_idx(const std::string& path, std::uint32_t expected_magic, const std::string& what) {
  const Bytes b = read_file(path);
  if (b.size() < 4) {
    throw FormatError(path + ": expected a 4-byte IDX magic, got a file of " +
                      std::to_string(b.size()) + " bytes");
  }
  const std::uint32_t magic = be32(b.data());
  if (expected_magic != 0 && magic != expected_magic) {
    throw FormatError(path + ": expected magic " + hex32(expected_magic) + ", got " +
                      hex32(magic));
  }
  if ((magic >> 8) != 0x08) {
    throw FormatError(path + ": expected an IDX magic of unsigned bytes (0x000008NN), got " +
                      hex32(magic));
  }
  const std::size_t rank = magic & 0xff;
  if (rank < 1 || rank > 4) {
    throw FormatError(path + ": expected 1 to 4 dimensions, got " + std::to_string(rank));
  }
  const std::size_t header = 4 + 4 * rank;
  if (b.size() < header) {
    throw FormatError(path + ": expected a header of " + std::to_string(header) +
                      " bytes, got " + std::to_string(b.size()));
  }
  Shape shape;
  std::uint64_t numel = 1;
  for (std::size_t k = 0; k < rank; ++k) {
    const std::uint32_t d = be32(b.data() + 4 + 4 * k);
    shape.push_back(d);
    numel *= d;  // at most 4 factors below 2^32 could overflow; checked against the size below
    if (numel > kMaxBytes) {
      throw FormatError(path + ": dimensions " + shape_to_string(shape) + " are too large");
    }
  }
  const std::size_t got = b.size() - header;
  if (got != numel) {
    throw FormatError(path + ": expected " + std::to_string(numel) + " bytes of " + what +
                      " data, got " + std::to_string(got));
  }
  Tensor t(DType::kUInt8, shape);
  if (numel > 0) std::memcpy(t.raw_data(), b.data() + header, numel);
  return t;
}

// ---- MnistDataset ---------------------------------------------------------------------------

class Mnist final : public Dataset {
 public:
  Mnist(const std::string& dir, const std::string& usage) : usage_(usage) {
    std::vector<std::string> prefixes;
    if (usage == "train") {
      prefixes = {"train"};
    } else if (usage == "test") {
      prefixes = {"t10k"};
    } else if (usage == "all") {
      prefixes = {"train", "t10k"};
    } else {
      throw ValueError("MnistDataset: expected usage \"train\", \"test\" or \"all\", got \"" +
                       usage + "\"");
    }
    std::vector<Tensor> images, labels;
    for (const std::string& prefix : prefixes) {
      const std::string ipath = find(dir, prefix + "-images-idx3-ubyte");
      const std::string lpath = find(dir, prefix + "-labels-idx1-ubyte");
      Tensor im = parse_idx(ipath, 0x00000803, "image");
      Tensor lb = parse_idx(lpath, 0x00000801, "label");
      if (im.dim(0) != lb.dim(0)) {
        throw FormatError(ipath + ": expected as many images as " + lpath + " has labels (" +
                          std::to_string(lb.dim(0)) + "), got " + std::to_string(im.dim(0)));
      }
      if (!images.empty() && (im.dim(1) != images[0].dim(1) || im.dim(2) != images[0].dim(2))) {
        throw FormatError(ipath + ": expected images of " + std::to_string(images[0].dim(1)) +
                          " x " + std::to_string(images[0].dim(2)) + " as the train set's, got " +
                          std::to_string(im.dim(1)) + " x " + std::to_string(im.dim(2)));
      }
      const std::uint8_t* l = lb.data<std::uint8_t>();
      for (std::int64_t i = 0; i < lb.numel(); ++i) {
        if (l[i] >= 10) {
          throw FormatError(lpath + ": expected labels below 10, got " + std::to_string(l[i]) +
                            " at label " + std::to_string(i));
        }
      }
      images.push_back(std::move(im));
      labels.push_back(std::move(lb));
    }
    for (std::size_t k = 0; k < images.size(); ++k) {
      offsets_.push_back(count_);
      count_ += images[k].dim(0);
    }
    images_ = std::move(images);
    labels_ = std::move(labels);
  }

  std::int64_t size() const override { return count_; }
  Row get(std::int64_t epoch, std::int64_t i) const override {
    detail::check_row(*this, i);
    std::size_t k = offsets_.size() - 1;
    while (offsets_[k] > i) --k;
    const std::int64_t j = i - offsets_[k];
    const Tensor& im = images_[k];
    Tensor image = detail::slice_row(im, j).reshape({im.dim(1), im.dim(2), 1});
    Tensor label(DType::kInt32, {});
    label.data<std::int32_t>()[0] = labels_[k].data<std::uint8_t>()[j];
    return {image, label};
  }
  std::vector<std::string> column_names() const override { return {"image", "label"}; }
  std::string describe() const override { return "MnistDataset(" + usage_ + ")"; }

 private:
  // dir/name.gz if it exists, else dir/name; FormatError naming both when neither does.
  static std::string find(const std::string& dir, const std::string& name) {
    const std::string base = dir + "/" + name;
    if (file_exists(base + ".gz")) return base + ".gz";
    if (file_exists(base)) return base;
    throw FormatError(base + "[.gz]: no such file");
  }

  std::string usage_;
  std::vector<Tensor> images_, labels_;  // (n, H, W) UInt8 and (n) UInt8 per file pair
  std::vector<std::int64_t> offsets_;
  std::int64_t count_ = 0;
};

// ---- Cifar10Dataset -------------------------------------------------------------------------

class Cifar10 final : public Dataset {
 public:
  static constexpr std::size_t kRecord = 1 + 3 * 32 * 32;

  Cifar10(const std::string& dir, const std::string& usage) : usage_(usage) {
    std::vector<std::string> names;
    if (usage == "train" || usage == "all") {
      for (int k = 1; k <= 5; ++k) names.push_back("data_batch_" + std::to_string(k) + ".bin");
    }
    if (usage == "test" || usage == "all") names.push_back("test_batch.bin");
    if (names.empty()) {
      throw ValueError("Cifar10Dataset: expected usage \"train\", \"test\" or \"all\", got \"" +
                       usage + "\"");
    }
    for (const std::string& name : names) {
      const std::string path = dir + "/" + name;
      if (!file_exists(path)) throw FormatError(path + ": no such file");
      const Bytes b = read_file(path);
      if (b.size() % kRecord != 0) {
        throw FormatError(path + ": expected a multiple of " + std::to_string(kRecord) +
                          " bytes (records of 1 label + 3072 pixel bytes), got " +
                          std::to_string(b.size()));
      }
      for (std::size_t r = 0; r < b.size() / kRecord; ++r) {
        const std::uint8_t label = b[r * kRecord];
        if (label >= 10) {
          throw FormatError(path + ": expected labels below 10, got " + std::to_string(label) +
                            " in record " + std::to_string(r));
        }
      }
      data_.insert(data_.end(), b.begin(), b.end());
    }
  }

  std::int64_t size() const override { return static_cast<std::int64_t>(data_.size() / kRecord); }
  Row get(std::int64_t epoch, std::int64_t i) const override {
    detail::check_row(*this, i);
    const std::uint8_t* rec = data_.data() + kRecord * static_cast<std::size_t>(i);
    Tensor image(DType::kUInt8, {32, 32, 3});
    std::uint8_t* out = image.data<std::uint8_t>();
    for (int c = 0; c < 3; ++c) {
      for (int p = 0; p < 32 * 32; ++p) out[p * 3 + c] = rec[1 + c * 1024 + p];
    }
    Tensor label(DType::kInt32, {});
    label.data<std::int32_t>()[0] = rec[0];
    return {image, label};
  }
  std::vector<std::string> column_names() const override { return {"image", "label"}; }
  std::string describe() const override { return "Cifar10Dataset(" + usage_ + ")"; }

 private:
  std::string usage_;
  Bytes data_;  // the records of every file, in order
};

bool holds_fashion_mnist(const std::string& dir) {
  for (const char* name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                           "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}) {
    const std::string base = dir + "/" + name;
    if (!file_exists(base + ".gz") && !file_exists(base)) return false;
  }
  return true;
}

}  // namespace

Tensor read_idx(const std::string& path) { return parse_idx(path, 0, "payload"); }

DatasetPtr MnistDataset(const std::string& dir, const std::string& usage) {
  return std::make_shared<Mnist>(dir, usage);
}

DatasetPtr Cifar10Dataset(const std::string& dir, const std::string& usage) {
  return std::make_shared<Cifar10>(dir, usage);
}

std::string fashion_mnist_dir(const std::string& dir) {
  if (!dir.empty()) {
    if (!holds_fashion_mnist(dir)) {
      throw ValueError("fashion_mnist_dir: " + dir + " does not hold the four Fashion-MNIST "
                       "files ({train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz])");
    }
    return dir;
  }
  // Where the Debian package put its files (dpkg -L lists them), else its usual place.
  std::string found;
  if (FILE* p = ::popen("dpkg -L dataset-fashion-mnist 2>/dev/null", "r")) {
    char line[4096];
    const std::string suffix = "/train-images-idx3-ubyte.gz";
    while (std::fgets(line, sizeof line, p)) {
      std::string s(line);
      while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
      if (found.empty() && s.size() > suffix.size() &&
          s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0) {
        found = s.substr(0, s.size() - suffix.size());
      }
    }
    ::pclose(p);
  }
  if (!found.empty() && holds_fashion_mnist(found)) return found;
  const std::string fallback = "/usr/share/datasets/fashion-mnist";
  if (holds_fashion_mnist(fallback)) return fallback;
  throw ValueError("fashion_mnist_dir: Fashion-MNIST not found; install it with "
                   "`apt-get install dataset-fashion-mnist` or pass the directory holding "
                   "{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]");
}

}  // namespace loom::data
