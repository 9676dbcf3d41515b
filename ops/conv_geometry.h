// The window geometry of convolution and pooling, MindSpore's rule in one place: per spatial
// axis, the output extent and the padding applied before and after, from the input extent,
// kernel, stride, dilation, pad_mode and explicit pads. Used by inference
// (ops/conv_pool_ops.cc), the CPU kernels (backends/cpu/conv_kernels.cc, pool_kernels.cc) and
// Conv2D's MindIR pad_list.
//
// With span = (kernel - 1)·dilation + 1:
//   valid  no padding; out = (in - span) / stride + 1, 0 when in < span
//   same   out = ceil(in / stride); total padding max((out - 1)·stride + span - in, 0), split
//          floor(total / 2) before and the rest after (MindSpore's and TensorFlow's SAME)
//   pad    the explicit pads (Conv2D's pad: top, bottom, left, right);
//          out = (in + before + after - span) / stride + 1, 0 when that sum is below span
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/ir/value.h"

namespace loom::ops {

enum class PadMode { kValid, kSame, kPad };

// "valid", "same" or "pad" in either case; nullopt for anything else.
std::optional<PadMode> parse_pad_mode(std::string_view text);

// The pad_mode attribute of a convolution or pooling primitive (its schema accepts either
// case). Throws ValueError naming the op when the text is none of the three.
PadMode pad_mode_of(const ir::Primitive& prim);

// One spatial axis.
struct WindowAxis {
  std::int64_t out;         // output extent; ir::kUnknownDim when the input's is unknown, 0 when
                            // the (dilated) kernel does not fit (valid, pad)
  std::int64_t pad_before;  // padding applied before the first element (0 when out is unknown)
  std::int64_t pad_after;   // ... after the last
};

// The geometry of one axis. `stride` must be positive; pad_before / pad_after are used by
// PadMode::kPad only.
WindowAxis window_axis(std::int64_t in, std::int64_t kernel, std::int64_t stride,
                       std::int64_t dilation, PadMode mode, std::int64_t pad_before = 0,
                       std::int64_t pad_after = 0);

}  // namespace loom::ops
