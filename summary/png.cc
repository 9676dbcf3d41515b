#include "summary/png.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>

#include "core/ir/error.h"

namespace loom::summary {
namespace {

void put_be32(std::string& out, std::uint32_t v) {
  for (int i = 3; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void put_chunk(std::string& out, const char type[4], const std::string& data) {
  put_be32(out, static_cast<std::uint32_t>(data.size()));
  const std::size_t start = out.size();
  out.append(type, 4);
  out.append(data);
  const uLong crc = ::crc32(0L, reinterpret_cast<const Bytef*>(out.data() + start),
                            static_cast<uInt>(out.size() - start));
  put_be32(out, static_cast<std::uint32_t>(crc));
}

bool is_channels(std::int64_t c) { return c == 1 || c == 3 || c == 4; }

}  // namespace

std::string encode_png(const std::uint8_t* pixels, int width, int height, int channels) {
  if (width <= 0 || height <= 0)
    throw ValueError("encode_png: expected a positive size, got " + std::to_string(width) + "x" +
                     std::to_string(height));
  static const int kColorType[5] = {-1, 0, 4, 2, 6};
  if (channels < 1 || channels > 4)
    throw ValueError("encode_png: expected 1 to 4 channels, got " + std::to_string(channels));
  const std::size_t row = static_cast<std::size_t>(width) * static_cast<std::size_t>(channels);
  std::string raw;
  raw.reserve((row + 1) * static_cast<std::size_t>(height));
  for (int y = 0; y < height; ++y) {
    raw.push_back('\0');  // filter type None
    raw.append(reinterpret_cast<const char*>(pixels) + row * static_cast<std::size_t>(y), row);
  }
  uLongf zlen = compressBound(static_cast<uLong>(raw.size()));
  std::string z(zlen, '\0');
  if (compress2(reinterpret_cast<Bytef*>(z.data()), &zlen,
                reinterpret_cast<const Bytef*>(raw.data()), static_cast<uLong>(raw.size()),
                Z_DEFAULT_COMPRESSION) != Z_OK)
    throw InternalError("encode_png: zlib compress2 failed");
  z.resize(zlen);

  std::string out("\x89PNG\r\n\x1a\n", 8);
  std::string ihdr;
  put_be32(ihdr, static_cast<std::uint32_t>(width));
  put_be32(ihdr, static_cast<std::uint32_t>(height));
  ihdr.push_back(8);                                  // bit depth
  ihdr.push_back(static_cast<char>(kColorType[channels]));
  ihdr.push_back(0);                                  // compression: deflate
  ihdr.push_back(0);                                  // filter method 0
  ihdr.push_back(0);                                  // no interlace
  put_chunk(out, "IHDR", ihdr);
  put_chunk(out, "IDAT", z);
  put_chunk(out, "IEND", "");
  return out;
}

Image8 image_from_tensor(const Tensor& t, ImageLayout layout) {
  if (!t.defined()) throw ValueError("add_image: expected a tensor, got an undefined one");
  if (t.dtype() == DType::kBool) throw TypeError("add_image: expected a numeric tensor, got Bool");
  const Shape& s = t.shape();
  std::int64_t n = 1, c = 1, h = 0, w = 0;
  bool chw = false;
  auto pick = [&](std::int64_t d0, std::int64_t d1, std::int64_t d2) {
    chw = layout == ImageLayout::kCHW ||
          (layout == ImageLayout::kAuto && is_channels(d0) && !is_channels(d2));
    if (chw) {
      c = d0, h = d1, w = d2;
    } else {
      h = d0, w = d1, c = d2;
    }
  };
  if (s.size() == 2) {
    h = s[0], w = s[1];
  } else if (s.size() == 3) {
    pick(s[0], s[1], s[2]);
  } else if (s.size() == 4) {
    n = s[0];
    pick(s[1], s[2], s[3]);
  } else {
    throw ShapeError("add_image: expected an image of rank 2 (HW), 3 (CHW / HWC) or 4 (NCHW / "
                     "NHWC), got " + shape_to_string(s));
  }
  if (!is_channels(c) || h <= 0 || w <= 0 || n <= 0)
    throw ShapeError("add_image: expected 1, 3 or 4 channels and a non-empty image, got " +
                     shape_to_string(s) + (chw ? " read as CHW" : " read as HWC"));
  const std::vector<double> v = t.to_doubles();
  bool unit = t.dtype() != DType::kUInt8;
  for (double x : v)
    if (!(x >= 0.0 && x <= 1.0)) {
      unit = false;
      break;
    }
  const double scale = unit ? 255.0 : 1.0;
  const std::int64_t cols = std::min<std::int64_t>(n, 8);
  const std::int64_t rows = (n + cols - 1) / cols;
  Image8 img;
  img.height = static_cast<int>(rows * h);
  img.width = static_cast<int>(cols * w);
  img.channels = static_cast<int>(c);
  img.pixels.assign(static_cast<std::size_t>(img.height) * img.width * img.channels, 0);
  for (std::int64_t b = 0; b < n; ++b) {
    const std::int64_t oy = (b / cols) * h, ox = (b % cols) * w;
    for (std::int64_t y = 0; y < h; ++y)
      for (std::int64_t x = 0; x < w; ++x)
        for (std::int64_t k = 0; k < c; ++k) {
          const std::int64_t src = b * c * h * w + (chw ? (k * h + y) * w + x : (y * w + x) * c + k);
          double px = v[static_cast<std::size_t>(src)] * scale;
          px = std::isnan(px) ? 0.0 : std::clamp(std::round(px), 0.0, 255.0);
          const std::size_t dst =
              (static_cast<std::size_t>(oy + y) * img.width + static_cast<std::size_t>(ox + x)) *
                  img.channels + static_cast<std::size_t>(k);
          img.pixels[dst] = static_cast<std::uint8_t>(px);
        }
  }
  return img;
}

}  // namespace loom::summary
