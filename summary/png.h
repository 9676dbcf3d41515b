/// \file
/// PNG encoding with zlib (8-bit, no interlace, filter type 0 on every row) and the conversion of
/// a Tensor into an 8-bit image.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/ir/tensor.h"

namespace loom::summary {

/// Pixels HWC, row-major, 8 bits per sample; channels 1 (gray), 2 (gray+alpha), 3 (RGB) or 4
/// (RGBA). Throws ValueError on a bad size or channel count.
std::string encode_png(const std::uint8_t* pixels, int width, int height, int channels);

/// How a rank-3 image tensor is laid out. kAuto: CHW when the first dim is 1, 3 or 4 and the last
/// is not, else HWC.
enum class ImageLayout { kAuto, kCHW, kHWC };

/// An 8-bit image, as image_from_tensor makes it.
struct Image8 {
  /// The rows, the columns and the samples per pixel (1 gray, 3 RGB, 4 RGBA).
  ///@{
  int height = 0, width = 0, channels = 0;
  ///@}
  std::vector<std::uint8_t> pixels;  ///< HWC
};

/// rank 2: HW (gray); rank 3: CHW or HWC (layout); rank 4: a batch NCHW / NHWC (layout applies to
/// each image), tiled as MindSpore does: up to 8 images per row, rows filled left to right, the
/// rest of the canvas black. Channels must be 1, 3 or 4. UInt8 values are used as they are; other
/// dtypes are scaled by 255 when every value lies in [0, 1], then rounded and clamped to 0..255.
/// Throws ShapeError / TypeError when the tensor is not an image.
Image8 image_from_tensor(const Tensor& t, ImageLayout layout = ImageLayout::kAuto);

}  // namespace loom::summary
