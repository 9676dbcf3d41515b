/// \file
/// Automatic mixed precision, as MindSpore 2.10's amp levels (mindspore.amp.auto_mixed_precision
/// and build_train_network), on a traced forward graph before autodiff:
///
/// ```
/// passes::auto_mixed_precision(*forward, {.level = AmpLevel::kO2, .dtype = DType::kBFloat16});
/// ```
///
/// Each op gets a compute dtype: the low one (Float16 or BFloat16) or Float32. Its Float32 and
/// low-precision tensor inputs are cast to that dtype where they differ (one Cast per value and
/// dtype, shared by its users), and its result takes the dtype inference gives it, so a chain of
/// low-precision ops passes low-precision tensors between them with no cast. Weights stay Float32
/// Parameters (the master weights the optimizer updates): the graph casts them where a
/// low-precision op reads them, and autodiff turns each Cast into a Cast of the gradient back to
/// Float32. The graph's outputs keep their dtypes (the loss and the new values of assigned
/// parameters, such as BatchNorm's moving statistics, are cast back). Float64 and integer tensors
/// are left alone.
///
/// - O0: no change.
/// - O1: MindSpore's white list (Conv2D, Conv3D, Conv2DTranspose, Conv3DTranspose,
///   Conv2DBackpropInput, MatMul, BatchMatMul, PReLU, ReLU, Ger; the Dense and Conv cells whole,
///   so a BiasAdd of the same Cell as the product it adds to) in the low dtype, the rest Float32.
/// - O2: everything in the low dtype except BatchNorm and LayerNorm (MindSpore's black list of
///   cells) and the loss.
/// - O3: everything in the low dtype except the loss.
/// - auto: MindSpore's auto white list (the products and convolutions) in the low dtype, its auto
///   black list (exp/log family, Pow, Rsqrt, norms, softmaxes, sums, losses) in Float32, the rest
///   in the widest float dtype of its inputs.
///
/// "The loss" is what build_train_network's WithLossCell computes from the network's output,
/// which MindSpore casts to Float32 first: the ops whose scope has a component of
/// AmpOptions::fp32_scopes (WithLossCell's "_loss_fn").
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/ir/dtype.h"

namespace loom::ir {
class FuncGraph;
class Module;
}  // namespace loom::ir

namespace loom::passes {

/// MindSpore's amp levels (above).
enum class AmpLevel {
  kO0,   ///< no change
  kO1,   ///< the white list in the low dtype
  kO2,   ///< all but BatchNorm, LayerNorm and the loss in the low dtype
  kO3,   ///< all but the loss in the low dtype
  kAuto  ///< the auto white list low, the auto black list Float32, the rest promoted
};

/// "O0", "O1", "O2", "O3", "auto".
std::string_view amp_level_name(AmpLevel level);
/// The level named `name`; ValueError("expected an amp level of O0, O1, O2, O3, auto, got ...").
AmpLevel amp_level_from_name(std::string_view name);
/// "float16" / "bfloat16" (MindSpore's spelling) to the dtype; ValueError otherwise.
DType amp_dtype_from_name(std::string_view name);

/// What auto_mixed_precision does.
struct AmpOptions {
  AmpLevel level = AmpLevel::kO0;  ///< the level
  DType dtype = DType::kFloat16;  ///< the low precision: kFloat16 or kBFloat16
  /// Scope components whose ops compute in Float32 at every level: the loss.
  std::vector<std::string> fp32_scopes = {"_loss_fn"};
};

/// Rewrites `graph` (a first-order forward graph, inferred) for `options`; calls of other graphs
/// and control flow receive their arguments in their original dtypes. Returns the number of
/// Casts added. ValueError for a dtype that is not Float16 or BFloat16.
int auto_mixed_precision(ir::FuncGraph& graph, const AmpOptions& options);

/// For a backend without low-precision kernels: every call of an op that has no kernel for its
/// Float16 / BFloat16 key dtype but has one for Float32 computes in Float32 on its inputs cast
/// up (exactly), and its Float16 / BFloat16 results are rounded back down. The values passed
/// between ops, and so the numerics, are those of the low dtype with Float32 accumulation (what
/// oneDNN's and cuDNN's bf16 kernels do); only the speed is not. `has_kernel(op, dtype)` asks the
/// backend. Returns the converted ops' names, sorted, without repeats (empty: nothing changed).
std::vector<std::string> compute_low_precision_in_float32(
    ir::Module& module, const std::function<bool(std::string_view, DType)>& has_kernel);

}  // namespace loom::passes
