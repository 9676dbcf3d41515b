// Convolution and pooling window geometry (conv_geometry.h).
#include "ops/conv_geometry.h"

#include <algorithm>
#include <cctype>
#include <string>

#include "core/ir/abstract.h"
#include "core/ir/error.h"

namespace loom::ops {

std::optional<PadMode> parse_pad_mode(std::string_view text) {
  std::string lower(text);
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (lower == "valid") return PadMode::kValid;
  if (lower == "same") return PadMode::kSame;
  if (lower == "pad") return PadMode::kPad;
  return std::nullopt;
}

PadMode pad_mode_of(const ir::Primitive& prim) {
  const std::string& text = prim.attr("pad_mode").as_string();
  if (auto mode = parse_pad_mode(text)) return *mode;
  throw ValueError(prim.name() + ": expected pad_mode one of valid, same, pad, got '" + text +
                   "'");
}

WindowAxis window_axis(std::int64_t in, std::int64_t kernel, std::int64_t stride,
                       std::int64_t dilation, PadMode mode, std::int64_t pad_before,
                       std::int64_t pad_after) {
  if (in == ir::kUnknownDim) return {ir::kUnknownDim, 0, 0};
  const std::int64_t span = dilation * (kernel - 1) + 1;
  switch (mode) {
    case PadMode::kSame: {
      const std::int64_t out = (in + stride - 1) / stride;
      const std::int64_t total = std::max<std::int64_t>((out - 1) * stride + span - in, 0);
      return {out, total / 2, total - total / 2};
    }
    case PadMode::kValid:
      return {in < span ? 0 : (in - span) / stride + 1, 0, 0};
    case PadMode::kPad: {
      const std::int64_t padded = in + pad_before + pad_after;
      return {padded < span ? 0 : (padded - span) / stride + 1, pad_before, pad_after};
    }
  }
  return {ir::kUnknownDim, 0, 0};
}

}  // namespace loom::ops
