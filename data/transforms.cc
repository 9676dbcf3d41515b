// The per-sample transforms of data/dataset.h (MindSpore's vision and type transforms).
//
// Images are HW or HWC tensors of any dtype. Transforms that keep the dtype (Pad, crops, flips,
// HWC2CHW) move bytes and never convert values; the arithmetic ones (Rescale, Normalize) compute
// in double and round once to Float32; Resize and TypeCast write through store() below, which
// saturates and rounds as the header says. No transform modifies its input.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/random/random.h"
#include "core/ir/error.h"
#include "data/dataset.h"

namespace loom::data {

namespace {

struct Image {
  std::int64_t h, w, c;
};

// The image dims of x; ShapeError naming the transform unless x is HW or HWC.
Image image_dims(const std::string& op, const Tensor& x) {
  if (!x.defined() || (x.rank() != 2 && x.rank() != 3)) {
    throw ShapeError(op + ": expected an HW or HWC image, got " +
                     (x.defined() ? x.describe() : std::string("an undefined tensor")));
  }
  return {x.dim(0), x.dim(1), x.rank() == 3 ? x.dim(2) : 1};
}

Shape image_shape(const Tensor& like, std::int64_t h, std::int64_t w) {
  if (like.rank() == 3) return {h, w, like.dim(2)};
  return {h, w};
}

// Flat element i of x as double; fast paths for the dtypes pipelines carry.
inline double load(const Tensor& x, const void* p, std::int64_t i) {
  switch (x.dtype()) {
    case DType::kUInt8: return static_cast<const std::uint8_t*>(p)[i];
    case DType::kFloat32: return static_cast<const float*>(p)[i];
    case DType::kFloat64: return static_cast<const double*>(p)[i];
    case DType::kInt32: return static_cast<const std::int32_t*>(p)[i];
    default: return x.get(i);
  }
}

template <typename T>
T saturate(double v, bool round) {
  if (std::isnan(v)) return T(0);
  if (round) v = std::round(v);
  constexpr double lo = static_cast<double>(std::numeric_limits<T>::min());
  constexpr double hi = static_cast<double>(std::numeric_limits<T>::max());
  if (v <= lo) return std::numeric_limits<T>::min();
  if (v >= hi) return std::numeric_limits<T>::max();
  return static_cast<T>(v);
}

// Writes v as element i of y: floating dtypes convert as static_cast does; integer dtypes
// saturate to their range (NaN → 0), after rounding to nearest (halves away from 0) if `round`,
// else truncating toward 0 as static_cast does; Bool is v != 0.
inline void store(Tensor& y, void* p, std::int64_t i, double v, bool round) {
  switch (y.dtype()) {
    case DType::kFloat32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DType::kFloat64: static_cast<double*>(p)[i] = v; break;
    case DType::kUInt8: static_cast<std::uint8_t*>(p)[i] = saturate<std::uint8_t>(v, round); break;
    case DType::kInt32: static_cast<std::int32_t*>(p)[i] = saturate<std::int32_t>(v, round); break;
    case DType::kInt64: static_cast<std::int64_t*>(p)[i] = saturate<std::int64_t>(v, round); break;
    case DType::kBool: static_cast<bool*>(p)[i] = v != 0; break;
    default: y.set(i, v); break;  // Float16, BFloat16: round to nearest even
  }
}

// Pad: (left, top, right, bottom) from 1, 2 or 4 values, as MindSpore's Pad reads them.
struct Padding {
  std::int64_t left = 0, top = 0, right = 0, bottom = 0;
};

Padding parse_padding(const std::string& op, const std::vector<std::int64_t>& p) {
  Padding r;
  if (p.size() == 1) {
    r = {p[0], p[0], p[0], p[0]};
  } else if (p.size() == 2) {
    r = {p[0], p[1], p[0], p[1]};
  } else if (p.size() == 4) {
    r = {p[0], p[1], p[2], p[3]};
  } else {
    throw ValueError(op + ": expected 1, 2 or 4 padding values, got " + std::to_string(p.size()));
  }
  if (r.left < 0 || r.top < 0 || r.right < 0 || r.bottom < 0) {
    throw ValueError(op + ": expected non-negative padding");
  }
  return r;
}

Tensor pad_image(const std::string& op, const Tensor& x, const Padding& p, double fill) {
  const Image im = image_dims(op, x);
  const std::int64_t oh = im.h + p.top + p.bottom, ow = im.w + p.left + p.right;
  Tensor y(x.dtype(), image_shape(x, oh, ow));
  const std::size_t es = dtype_size(x.dtype());
  const std::size_t pixel = es * static_cast<std::size_t>(im.c);
  char* out = static_cast<char*>(y.raw_data());
  if (fill != 0 && y.numel() > 0) {
    // One element of the fill value, repeated over the whole output; the image goes on top.
    Tensor f(x.dtype(), {1});
    f.set(0, fill);
    for (std::int64_t i = 0; i < y.numel(); ++i) std::memcpy(out + es * i, f.raw_data(), es);
  }
  const char* in = static_cast<const char*>(x.raw_data());
  const std::size_t in_row = pixel * static_cast<std::size_t>(im.w);
  const std::size_t out_row = pixel * static_cast<std::size_t>(ow);
  for (std::int64_t r = 0; r < im.h; ++r) {
    std::memcpy(out + out_row * (r + p.top) + pixel * p.left, in + in_row * r, in_row);
  }
  return y;
}

void need_rng(const std::string& op, random::RandomStream* rng) {
  if (!rng) throw ValueError(op + ": a random transform needs a random stream, got none");
}

// f(in) with `in` typed as x's elements for the dtypes pipelines carry (loops the compiler
// vectorizes: a per-element switch on the dtype cost Rescale and Normalize 1.3 µs a 32×32 image),
// else generic(): the loop through load().
template <typename F, typename G>
void typed(const Tensor& x, const F& f, const G& generic) {
  const void* p = x.raw_data();
  switch (x.dtype()) {
    case DType::kUInt8: return f(static_cast<const std::uint8_t*>(p));
    case DType::kFloat32: return f(static_cast<const float*>(p));
    case DType::kFloat64: return f(static_cast<const double*>(p));
    case DType::kInt32: return f(static_cast<const std::int32_t*>(p));
    default: return generic();
  }
}

// ---- the transforms -------------------------------------------------------------------------

class RescaleOp final : public Transform {
 public:
  RescaleOp(double rescale, double shift) : rescale_(rescale), shift_(shift) {}
  std::string name() const override { return "Rescale"; }
  Tensor apply(const Tensor& x, random::RandomStream*) const override {
    Tensor y(DType::kFloat32, x.shape());
    float* out = y.data<float>();
    const std::int64_t n = x.numel();
    const double r = rescale_, s = shift_;
    typed(
        x,
        [&](const auto* in) {
          for (std::int64_t i = 0; i < n; ++i) {
            out[i] = static_cast<float>(static_cast<double>(in[i]) * r + s);
          }
        },
        [&] {
          const void* in = x.raw_data();
          for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(load(x, in, i) * r + s);
        });
    return y;
  }

 private:
  double rescale_, shift_;
};

class NormalizeOp final : public Transform {
 public:
  NormalizeOp(std::vector<double> mean, std::vector<double> std)
      : mean_(std::move(mean)), std_(std::move(std)) {
    if (mean_.empty() || mean_.size() != std_.size()) {
      throw ValueError("Normalize: expected as many std values as mean values (at least one), "
                       "got " + std::to_string(mean_.size()) + " and " +
                       std::to_string(std_.size()));
    }
    for (double s : std_) {
      if (s == 0) throw ValueError("Normalize: expected non-zero std values, got 0");
    }
  }
  std::string name() const override { return "Normalize"; }
  Tensor apply(const Tensor& x, random::RandomStream*) const override {
    const Image im = image_dims(name(), x);
    const auto nc = static_cast<std::int64_t>(mean_.size());
    if (nc != 1 && nc != im.c) {
      throw ValueError("Normalize: expected " + std::to_string(nc) + " channels, got " +
                       x.describe());
    }
    Tensor y(DType::kFloat32, x.shape());
    float* out = y.data<float>();
    std::vector<double> inv(std_.size());
    for (std::size_t k = 0; k < std_.size(); ++k) inv[k] = 1.0 / std_[k];
    // Channels last: element i is channel i % c of its pixel; one mean for all when nc == 1.
    const std::int64_t c = nc == 1 ? 1 : im.c;
    const std::int64_t pixels = c == 0 ? 0 : x.numel() / c;
    typed(
        x,
        [&](const auto* in) {
          if (c == 1) {  // contiguous: a loop the compiler vectorizes
            const double m = mean_[0], v = inv[0];
            for (std::int64_t p = 0; p < pixels; ++p) {
              out[p] = static_cast<float>((static_cast<double>(in[p]) - m) * v);
            }
            return;
          }
          for (std::int64_t k = 0; k < c; ++k) {
            const double m = mean_[static_cast<std::size_t>(k)];
            const double v = inv[static_cast<std::size_t>(k)];
            for (std::int64_t p = 0; p < pixels; ++p) {
              out[p * c + k] = static_cast<float>((static_cast<double>(in[p * c + k]) - m) * v);
            }
          }
        },
        [&] {
          const void* in = x.raw_data();
          for (std::int64_t i = 0; i < x.numel(); ++i) {
            const std::size_t k = static_cast<std::size_t>(i % c);
            out[i] = static_cast<float>((load(x, in, i) - mean_[k]) * inv[k]);
          }
        });
    return y;
  }

 private:
  std::vector<double> mean_, std_;
};

class PadOp final : public Transform {
 public:
  PadOp(std::vector<std::int64_t> padding, double fill)
      : padding_(parse_padding("Pad", padding)), fill_(fill) {}
  std::string name() const override { return "Pad"; }
  Tensor apply(const Tensor& x, random::RandomStream*) const override {
    return pad_image(name(), x, padding_, fill_);
  }

 private:
  Padding padding_;
  double fill_;
};

class ResizeOp final : public Transform {
 public:
  explicit ResizeOp(std::vector<std::int64_t> size) : size_(std::move(size)) {
    if (size_.empty() || size_.size() > 2 || size_[0] < 1 || size_.back() < 1) {
      throw ValueError("Resize: expected size (height, width) or (shorter side) of positive "
                       "values");
    }
  }
  std::string name() const override { return "Resize"; }
  Tensor apply(const Tensor& x, random::RandomStream*) const override {
    const Image im = image_dims(name(), x);
    if (im.h < 1 || im.w < 1) throw ShapeError("Resize: empty image " + x.describe());
    std::int64_t oh = size_[0], ow = size_.back();
    if (size_.size() == 1) {
      // MindSpore: the shorter side becomes size, the longer one keeps the aspect ratio.
      if (im.h <= im.w) {
        ow = static_cast<std::int64_t>(static_cast<double>(size_[0]) * im.w / im.h);
      } else {
        oh = static_cast<std::int64_t>(static_cast<double>(size_[0]) * im.h / im.w);
      }
    }
    // Source coordinate of output pixel d: (d + 0.5) * in / out - 0.5, clamped at 0; the two
    // neighbours are floor and floor + 1 (clamped to the last pixel).
    struct Tap {
      std::int64_t i0, i1;
      double l;
    };
    auto taps = [](std::int64_t in, std::int64_t out) {
      std::vector<Tap> t(static_cast<std::size_t>(out));
      const double scale = static_cast<double>(in) / static_cast<double>(out);
      for (std::int64_t d = 0; d < out; ++d) {
        const double src = std::max(0.0, (static_cast<double>(d) + 0.5) * scale - 0.5);
        const auto i0 = std::min(static_cast<std::int64_t>(src), in - 1);
        t[static_cast<std::size_t>(d)] = {i0, std::min(i0 + 1, in - 1),
                                          src - static_cast<double>(i0)};
      }
      return t;
    };
    const std::vector<Tap> ty = taps(im.h, oh), tx = taps(im.w, ow);
    Tensor y(x.dtype(), image_shape(x, oh, ow));
    const void* in = x.raw_data();
    void* out = y.raw_data();
    const bool round = !is_floating(x.dtype());
    for (std::int64_t r = 0; r < oh; ++r) {
      const Tap& a = ty[static_cast<std::size_t>(r)];
      for (std::int64_t q = 0; q < ow; ++q) {
        const Tap& b = tx[static_cast<std::size_t>(q)];
        for (std::int64_t ch = 0; ch < im.c; ++ch) {
          auto at = [&](std::int64_t yy, std::int64_t xx) {
            return load(x, in, (yy * im.w + xx) * im.c + ch);
          };
          const double top = (1 - b.l) * at(a.i0, b.i0) + b.l * at(a.i0, b.i1);
          const double bottom = (1 - b.l) * at(a.i1, b.i0) + b.l * at(a.i1, b.i1);
          store(y, out, (r * ow + q) * im.c + ch, (1 - a.l) * top + a.l * bottom, round);
        }
      }
    }
    return y;
  }

 private:
  std::vector<std::int64_t> size_;
};

class RandomCropOp final : public Transform {
 public:
  RandomCropOp(std::vector<std::int64_t> size, std::vector<std::int64_t> padding)
      : padded_(!padding.empty()) {
    if (size.empty() || size.size() > 2 || size[0] < 1 || size.back() < 1) {
      throw ValueError("RandomCrop: expected size (height, width) or (side) of positive values");
    }
    h_ = size[0];
    w_ = size.back();
    if (padded_) padding_ = parse_padding("RandomCrop", padding);
  }
  std::string name() const override { return "RandomCrop"; }
  int random_words() const override { return 2; }
  // Word 0 picks the top offset, word 1 the left one: offset = (word * (range + 1)) >> 32.
  Tensor apply(const Tensor& x, random::RandomStream* rng) const override {
    need_rng(name(), rng);
    const Tensor p = padded_ ? pad_image(name(), x, padding_, 0) : x;
    const Image im = image_dims(name(), p);
    if (h_ > im.h || w_ > im.w) {
      throw ValueError("RandomCrop: expected an image (after padding) of at least (" +
                       std::to_string(h_) + ", " + std::to_string(w_) + "), got " +
                       p.describe());
    }
    const std::vector<std::uint32_t> w = rng->words(2);
    const auto top = static_cast<std::int64_t>(
        (static_cast<std::uint64_t>(w[0]) * static_cast<std::uint64_t>(im.h - h_ + 1)) >> 32);
    const auto left = static_cast<std::int64_t>(
        (static_cast<std::uint64_t>(w[1]) * static_cast<std::uint64_t>(im.w - w_ + 1)) >> 32);
    Tensor y(p.dtype(), image_shape(p, h_, w_));
    const std::size_t pixel = dtype_size(p.dtype()) * static_cast<std::size_t>(im.c);
    const char* in = static_cast<const char*>(p.raw_data());
    char* out = static_cast<char*>(y.raw_data());
    for (std::int64_t r = 0; r < h_; ++r) {
      std::memcpy(out + pixel * w_ * r, in + pixel * ((top + r) * im.w + left), pixel * w_);
    }
    return y;
  }

 private:
  std::int64_t h_ = 0, w_ = 0;
  bool padded_;
  Padding padding_;
};

class RandomHorizontalFlipOp final : public Transform {
 public:
  explicit RandomHorizontalFlipOp(double prob) : prob_(prob) {
    if (!(prob >= 0 && prob <= 1)) {
      throw ValueError("RandomHorizontalFlip: expected prob in [0, 1], got " +
                       std::to_string(prob));
    }
  }
  std::string name() const override { return "RandomHorizontalFlip"; }
  int random_words() const override { return 1; }
  // Flips when the row's uniform (RandomStream::uniform, one word) is below prob.
  Tensor apply(const Tensor& x, random::RandomStream* rng) const override {
    need_rng(name(), rng);
    const Image im = image_dims(name(), x);
    if (!(rng->uniform(1)[0] < prob_)) return x;
    Tensor y(x.dtype(), x.shape());
    const std::size_t pixel = dtype_size(x.dtype()) * static_cast<std::size_t>(im.c);
    const char* in = static_cast<const char*>(x.raw_data());
    char* out = static_cast<char*>(y.raw_data());
    for (std::int64_t r = 0; r < im.h; ++r) {
      for (std::int64_t q = 0; q < im.w; ++q) {
        std::memcpy(out + pixel * (r * im.w + q), in + pixel * (r * im.w + im.w - 1 - q), pixel);
      }
    }
    return y;
  }

 private:
  double prob_;
};

template <typename T>
void transpose_hwc(const T* in, T* out, std::int64_t h, std::int64_t w, std::int64_t c) {
  for (std::int64_t ch = 0; ch < c; ++ch) {
    for (std::int64_t i = 0; i < h * w; ++i) out[ch * h * w + i] = in[i * c + ch];
  }
}

class HWC2CHWOp final : public Transform {
 public:
  std::string name() const override { return "HWC2CHW"; }
  Tensor apply(const Tensor& x, random::RandomStream*) const override {
    const Image im = image_dims(name(), x);
    if (x.rank() == 2 || im.c == 1) return x.reshape({im.c, im.h, im.w});
    Tensor y(x.dtype(), {im.c, im.h, im.w});
    const void* in = x.raw_data();
    void* out = y.raw_data();
    switch (dtype_size(x.dtype())) {
      case 1: transpose_hwc(static_cast<const std::uint8_t*>(in), static_cast<std::uint8_t*>(out),
                            im.h, im.w, im.c); break;
      case 2: transpose_hwc(static_cast<const std::uint16_t*>(in),
                            static_cast<std::uint16_t*>(out), im.h, im.w, im.c); break;
      case 4: transpose_hwc(static_cast<const std::uint32_t*>(in),
                            static_cast<std::uint32_t*>(out), im.h, im.w, im.c); break;
      default: transpose_hwc(static_cast<const std::uint64_t*>(in),
                             static_cast<std::uint64_t*>(out), im.h, im.w, im.c); break;
    }
    return y;
  }
};

class TypeCastOp final : public Transform {
 public:
  explicit TypeCastOp(DType dtype) : dtype_(dtype) {}
  std::string name() const override { return "TypeCast"; }
  Tensor apply(const Tensor& x, random::RandomStream*) const override {
    if (x.dtype() == dtype_) return x;
    Tensor y(dtype_, x.shape());
    const void* in = x.raw_data();
    void* out = y.raw_data();
    for (std::int64_t i = 0; i < x.numel(); ++i) store(y, out, i, load(x, in, i), false);
    return y;
  }

 private:
  DType dtype_;
};

}  // namespace

TransformPtr Rescale(double rescale, double shift) {
  return std::make_shared<RescaleOp>(rescale, shift);
}
TransformPtr Normalize(std::vector<double> mean, std::vector<double> std) {
  return std::make_shared<NormalizeOp>(std::move(mean), std::move(std));
}
TransformPtr Pad(std::vector<std::int64_t> padding, double fill_value) {
  return std::make_shared<PadOp>(std::move(padding), fill_value);
}
TransformPtr Resize(std::vector<std::int64_t> size) {
  return std::make_shared<ResizeOp>(std::move(size));
}
TransformPtr RandomCrop(std::vector<std::int64_t> size, std::vector<std::int64_t> padding) {
  return std::make_shared<RandomCropOp>(std::move(size), std::move(padding));
}
TransformPtr RandomHorizontalFlip(double prob) {
  return std::make_shared<RandomHorizontalFlipOp>(prob);
}
TransformPtr HWC2CHW() { return std::make_shared<HWC2CHWOp>(); }
TransformPtr TypeCast(DType dtype) { return std::make_shared<TypeCastOp>(dtype); }

}  // namespace loom::data
