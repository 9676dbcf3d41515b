// Normalization and loss ops with MindSpore's names and semantics: BatchNorm and its gradient op
// BatchNormGrad, SoftmaxCrossEntropyWithLogits, SparseSoftmaxCrossEntropyWithLogits and L2Loss.
//
// BatchNorm{is_training, epsilon, momentum, format}(x, scale, bias, mean, variance) normalizes
// x, (N, C) or (N, C, H, W), per channel C over the other axes (M = N·H·W values each).
// MindSpore's op updates the moving-statistics Parameters `mean` and `variance` in place; the IR
// is functional, so the 5-tuple carries the new values instead:
//   training   y = (x - μ) / sqrt(σ² + ε) · scale + bias, with the batch mean μ and the biased
//              batch variance σ² = Σ(x - μ)² / M;
//              out[1] = (1 - momentum) · mean + momentum · μ           (updated moving mean)
//              out[2] = (1 - momentum) · variance + momentum · σ²·M/(M-1)
//                       (updated moving variance, from the unbiased batch variance as PyTorch
//                       and cuDNN, hence MindSpore's GPU kernel, do; MindSpore's CPU kernel
//                       uses the biased one. M must exceed 1)
//              out[3] = μ                                   (reserve_space_1, saved mean)
//              out[4] = 1 / sqrt(σ² + ε)                    (reserve_space_2, saved inverse std)
//   inference  y = (x - mean) / sqrt(variance + ε) · scale + bias; out[1] = out[3] = mean and
//              out[2] = out[4] = variance are passed through (MindSpore documents that the
//              reserve spaces equal mean and variance in inference).
// In training, y is computed from μ and 1 / sqrt(σ² + ε) as stored in out[3] and out[4] (rounded
// to x's dtype), so that BatchNormApply{act}(x, scale, bias, out[3], out[4]) = act(y) bitwise: the
// recompute pass (core/passes/recompute.cc) uses it to compute ReLU(y) again in the backward pass
// instead of keeping it from the forward pass. BatchNormApply has no gradient and no MindIR form.
// `momentum` is the weight of the new batch statistic (MindSpore's op convention, the same as
// PyTorch's; nn.BatchNorm2d's momentum 0.9 is the weight of the old value and reaches the op as
// 1 - 0.9). Only "NCHW" is accepted for `format`.
//
// BatchNorm's gradient follows MindSpore's rule: only y's gradient flows back, through
// BatchNormGrad(dy, x, scale, reserve_space_1, reserve_space_2) → (dx, dscale, dbias); mean and
// variance get none (they are statistics, not trained), and the statistics outputs carry no
// gradient. BatchNormGrad reads the reserve spaces as BatchNorm wrote them for its mode: (μ,
// inverse std) in training, (mean, variance) in inference.
//
// SoftmaxCrossEntropyWithLogits(logits, labels), both (N, C), gives (loss (N,), backprop (N, C))
// with loss_i = -Σ_j labels_ij · log_softmax(logits)_ij and backprop = softmax(logits) - labels.
// Its gradient (MindSpore's rule) reads only the loss's: dlogits = dloss[:, None] · backprop,
// which is exact when each row of labels sums to 1 (a distribution), and dlabels = -dloss[:,
// None] · log_softmax(logits). A gradient arriving at the backprop output is not propagated.
//
// SparseSoftmaxCrossEntropyWithLogits{is_grad}(logits (N, C), labels (N) Int32/Int64) gives the
// mean over rows of -log_softmax(logits)[i, labels_i] as a rank-0 tensor, or with is_grad its
// gradient (softmax(logits) - onehot(labels)) / N, which is also how the loss is differentiated.
// Labels outside [0, C) are a ValueError from the kernel, which alone sees their values.
//
// L2Loss(x) is Σ x² / 2 as a rank-0 tensor.
#include <cmath>

#include "core/ir/error.h"
#include "ops/op.h"

namespace loom::ops {

namespace {

std::string dtype_text(DType d) { return std::string(dtype_name(d)); }

bool known(std::int64_t d) { return d != ir::kUnknownDim; }

// Equal where both dims are known.
bool shapes_agree(const Shape& a, const Shape& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (known(a[i]) && known(b[i]) && a[i] != b[i]) return false;
  }
  return true;
}

const ir::Abstract& floating_input(const InferContext& c, std::size_t i, std::string_view name) {
  const ir::Abstract& t = c.tensor(i);
  if (!is_floating(t.dtype())) {
    throw TypeError(c.error("expected a floating " + std::string(name) + ", got " +
                            dtype_text(t.dtype())));
  }
  return t;
}

void check_same_dtype(const InferContext& c, const ir::Abstract& reference,
                      std::string_view reference_name, const ir::Abstract& t,
                      std::string_view name) {
  if (t.dtype() != reference.dtype()) {
    throw TypeError(c.error("expected " + std::string(name) + " of dtype " +
                            dtype_text(reference.dtype()) + " (as " +
                            std::string(reference_name) + "), got " + dtype_text(t.dtype())));
  }
}

void check_shape(const InferContext& c, const ir::Abstract& t, std::string_view name,
                 const Shape& expected) {
  if (!shapes_agree(t.shape(), expected)) {
    throw ShapeError(c.error("expected " + std::string(name) + " of shape " +
                             shape_to_string(expected) + ", got " + shape_to_string(t.shape())));
  }
}

// ---------------------------------------------------------------------------------------------
// BatchNorm

AttrSpec is_training_attr() {
  return {.name = "is_training", .kind = AttrKind::kBool, .default_value = Value::boolean(false),
          .check = {}};
}

AttrSpec epsilon_attr() {
  return {.name = "epsilon",
          .kind = AttrKind::kFloat,
          .default_value = Value::f32(1e-5f),
          .check = [](const Value& v) -> std::string {
            const double eps = v.as_double();
            return eps > 0 && eps <= 1 ? "" : "expected a value in (0, 1], got " +
                                                  ir::format_f64(eps);
          }};
}

AttrSpec momentum_attr() {
  return {.name = "momentum",
          .kind = AttrKind::kFloat,
          .default_value = Value::f32(0.1f),
          .check = [](const Value& v) -> std::string {
            const double m = v.as_double();
            return m >= 0 && m <= 1 ? "" : "expected a value in [0, 1], got " +
                                               ir::format_f64(m);
          }};
}

AttrSpec format_attr() {
  return {.name = "format",
          .kind = AttrKind::kString,
          .default_value = Value::string("NCHW"),
          .check = [](const Value& v) -> std::string {
            return v.as_string() == "NCHW" ? "" : "expected 'NCHW', got '" + v.as_string() + "'";
          }};
}

// The format attribute in MindIR: MindSpore's primitive-function form gives it as an enum int
// (NCHW 0, NHWC 1).
MindIRAttr format_mindir() {
  return {.name = "format", .encoding = MindIRAttrEncoding::kFormat, .also_written_as = {}};
}

// x of rank 2 (N, C) or 4 (N, C, H, W), floating.
const ir::Abstract& batch_norm_x(const InferContext& c, std::size_t i, std::string_view name) {
  const ir::Abstract& x = floating_input(c, i, name);
  if (x.shape().size() != 2 && x.shape().size() != 4) {
    throw ShapeError(c.error("expected " + std::string(name) +
                             " of rank 2 (N, C) or 4 (N, C, H, W), got " +
                             shape_to_string(x.shape())));
  }
  return x;
}

// Checks the per-channel inputs `names` (at indices first, first + 1, ...) against x's channel
// count and dtype; returns the channel count (taken from them when x's is unknown).
std::int64_t check_channel_inputs(const InferContext& c, const ir::Abstract& x,
                                  std::string_view x_name, std::size_t first,
                                  std::initializer_list<std::string_view> names) {
  std::int64_t channels = x.shape()[1];
  std::size_t i = first;
  for (std::string_view name : names) {
    const ir::Abstract& t = c.tensor(i++);
    check_same_dtype(c, x, x_name, t, name);
    check_shape(c, t, name, {channels});
    if (!known(channels)) channels = t.shape()[0];
  }
  return channels;
}

AbstractPtr infer_batch_norm(const InferContext& c) {
  const ir::Abstract& x = batch_norm_x(c, 0, "x");
  const std::int64_t channels =
      check_channel_inputs(c, x, "x", 1, {"scale", "bias", "mean", "variance"});
  if (c.attr("is_training").as_bool()) {
    // The unbiased variance of the moving-variance update needs two values per channel.
    std::int64_t per_channel = 1;
    bool all_known = true;
    for (std::size_t d = 0; d < x.shape().size(); ++d) {
      if (d == 1) continue;
      all_known = all_known && known(x.shape()[d]);
      per_channel *= x.shape()[d];
    }
    if (all_known && per_channel < 2) {
      throw ValueError(c.error("expected more than one value per channel in training, got x " +
                               shape_to_string(x.shape())));
    }
  }
  const AbstractPtr stat = ir::Abstract::tensor(x.dtype(), {channels});
  return ir::Abstract::tuple({c.input(0), stat, stat, stat, stat});
}

AbstractPtr infer_batch_norm_apply(const InferContext& c) {
  const ir::Abstract& x = batch_norm_x(c, 0, "x");
  check_channel_inputs(c, x, "x", 1, {"scale", "bias", "mean", "inv_std"});
  return c.input(0);
}

AbstractPtr infer_batch_norm_grad(const InferContext& c) {
  const ir::Abstract& dy = batch_norm_x(c, 0, "dy");
  const ir::Abstract& x = batch_norm_x(c, 1, "x");
  check_same_dtype(c, dy, "dy", x, "x");
  if (!shapes_agree(dy.shape(), x.shape())) {
    throw ShapeError(c.error("expected dy and x of the same shape, got " +
                             shape_to_string(dy.shape()) + " and " +
                             shape_to_string(x.shape())));
  }
  Shape shape = dy.shape();
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (!known(shape[d])) shape[d] = x.shape()[d];
  }
  const std::int64_t channels = check_channel_inputs(
      c, dy, "dy", 2, {"scale", "reserve_space_1", "reserve_space_2"});
  const AbstractPtr stat = ir::Abstract::tensor(dy.dtype(), {channels});
  return ir::Abstract::tuple({ir::Abstract::tensor(dy.dtype(), shape), stat, stat});
}

Grads batch_norm_bprop(Emitter& e, const BpropArgs& a) {
  const ir::Primitive::Attrs attrs = {{"is_training", a.prim.attr("is_training")},
                                      {"epsilon", a.prim.attr("epsilon")},
                                      {"format", a.prim.attr("format")}};
  const Var grads =
      e.emit("BatchNormGrad",
             {e.tuple_get(a.dout, 0), a.inputs[0], a.inputs[1], e.tuple_get(a.out, 3),
              e.tuple_get(a.out, 4)},
             attrs);
  return {e.tuple_get(grads, 0), e.tuple_get(grads, 1), e.tuple_get(grads, 2), Var(), Var()};
}

// ---------------------------------------------------------------------------------------------
// Cross entropy

// logits (N, C), floating.
const ir::Abstract& logits_input(const InferContext& c) {
  const ir::Abstract& logits = floating_input(c, 0, "logits");
  if (logits.shape().size() != 2) {
    throw ShapeError(c.error("expected logits of rank 2 (N, C), got " +
                             shape_to_string(logits.shape())));
  }
  return logits;
}

AbstractPtr infer_softmax_cross_entropy(const InferContext& c) {
  const ir::Abstract& logits = logits_input(c);
  const ir::Abstract& labels = c.tensor(1);
  check_same_dtype(c, logits, "logits", labels, "labels");
  check_shape(c, labels, "labels", logits.shape());
  Shape shape = logits.shape();
  for (std::size_t d = 0; d < 2; ++d) {
    if (!known(shape[d])) shape[d] = labels.shape()[d];
  }
  return ir::Abstract::tuple({ir::Abstract::tensor(logits.dtype(), {shape[0]}),
                              ir::Abstract::tensor(logits.dtype(), shape)});
}

Grads softmax_cross_entropy_bprop(Emitter& e, const BpropArgs& a) {
  const Var& logits = a.inputs[0];
  const Shape shape = e.shape_of(logits);
  const Var dloss = e.reshape(e.tuple_get(a.dout, 0), {shape[0], 1});
  const Var log_softmax = e.emit("LogSoftmax", {logits}, {{"axis", Value::i64(-1)}});
  return {e.mul(e.tuple_get(a.out, 1), dloss), e.mul(log_softmax, e.neg(dloss))};
}

AbstractPtr infer_sparse_softmax_cross_entropy(const InferContext& c) {
  const ir::Abstract& logits = logits_input(c);
  const ir::Abstract& labels = c.tensor(1);
  if (labels.dtype() != DType::kInt32 && labels.dtype() != DType::kInt64) {
    throw TypeError(c.error("expected labels of dtype Int32 or Int64, got " +
                            dtype_text(labels.dtype())));
  }
  check_shape(c, labels, "labels", {logits.shape()[0]});
  if (c.attr("is_grad").as_bool()) {
    Shape shape = logits.shape();
    if (!known(shape[0])) shape[0] = labels.shape()[0];
    return ir::Abstract::tensor(logits.dtype(), shape);
  }
  return ir::Abstract::tensor(logits.dtype(), {});
}

Var sparse_cross_entropy_grad(Emitter& e, const Var& logits, const Var& labels) {
  return e.emit("SparseSoftmaxCrossEntropyWithLogits", {logits, labels},
                {{"is_grad", Value::boolean(true)}});
}

// The loss's gradient is the same op with is_grad; that one's, g ↦ softmax·(g - Σ_j g·softmax)
// / N (the softmax Jacobian; the one-hot part is constant in the logits).
Grads sparse_softmax_cross_entropy_bprop(Emitter& e, const BpropArgs& a) {
  const Var& logits = a.inputs[0];
  if (!a.prim.attr("is_grad").as_bool()) {
    return {e.mul(sparse_cross_entropy_grad(e, logits, a.inputs[1]), a.dout), Var()};
  }
  const std::int64_t rows = e.shape_of(logits)[0];
  const Var softmax = e.emit("Softmax", {logits}, {{"axis", Value::ints({-1})}});
  const Var dot = e.reduce_sum(e.mul(a.dout, softmax), {-1}, /*keep_dims=*/true);
  const Var jacobian_product = e.mul(softmax, e.sub(a.dout, dot));
  const double inv_rows = rows > 0 ? 1.0 / static_cast<double>(rows) : 0.0;
  return {e.mul(jacobian_product, e.scalar_like(logits, inv_rows)), Var()};
}

}  // namespace

void register_norm_loss_ops(Registry& r) {
  r.add(OpDef{
      .name = "BatchNorm",
      .attrs = {is_training_attr(), epsilon_attr(), momentum_attr(), format_attr()},
      .num_inputs = 5,
      .num_outputs = 5,
      .trait = Trait::kOpaque,
      .infer = infer_batch_norm,
      .bprop = batch_norm_bprop,
      .summary = "per-channel normalization of x (N, C[, H, W]) → (y, moving mean, moving "
                 "variance, saved mean, saved inverse std); batch statistics when is_training",
      .mindir = {.function_args = {"is_training", "epsilon", "momentum", "format"},
                 .input_names = {"x", "scale", "offset", "mean", "variance"},
                 .output_names = {"y", "batch_mean", "batch_variance", "reserve_space_1",
                                  "reserve_space_2"},
                 .attrs = {format_mindir()}},
  });
  r.add(OpDef{
      .name = "BatchNormApply",
      .attrs = {act_attr()},
      .num_inputs = 5,
      .trait = Trait::kOpaque,
      .infer = infer_batch_norm_apply,
      .not_differentiable_because = "made by the recompute pass after autodiff",
      .summary = "act((x - mean) · scale · inv_std + bias) from training BatchNorm's saved mean "
                 "and inverse std (its outputs 3 and 4): its y again, bitwise (made by the "
                 "recompute pass)",
      .mindir = {.absent_because = "loom's own op (MindSpore has no primitive of that name); "
                                   "the export pipeline does not run the recompute pass"},
  });
  r.add(OpDef{
      .name = "BatchNormGrad",
      .attrs = {is_training_attr(), epsilon_attr(), format_attr()},
      .num_inputs = 5,
      .num_outputs = 3,
      .trait = Trait::kOpaque,
      .infer = infer_batch_norm_grad,
      .not_differentiable_because = "gradient op; second-order gradients of BatchNorm are not "
                                    "supported",
      .summary = "gradient of BatchNorm's y from (dy, x, scale, reserve_space_1, "
                 "reserve_space_2) → (dx, dscale, dbias)",
      .mindir = {.attrs = {format_mindir()}},
  });
  r.add(OpDef{
      .name = "SoftmaxCrossEntropyWithLogits",
      .num_inputs = 2,
      .num_outputs = 2,
      .trait = Trait::kOpaque,
      .infer = infer_softmax_cross_entropy,
      .bprop = softmax_cross_entropy_bprop,
      .summary = "(loss (N,), softmax - labels) from logits and dense labels (N, C); loss = "
                 "-Σ labels · log_softmax(logits) per row",
  });
  r.add(OpDef{
      .name = "SparseSoftmaxCrossEntropyWithLogits",
      .attrs = {{.name = "is_grad", .kind = AttrKind::kBool, .default_value = Value::boolean(false),
                 .check = {}}},
      .num_inputs = 2,
      .trait = Trait::kOpaque,
      .infer = infer_sparse_softmax_cross_entropy,
      .bprop = sparse_softmax_cross_entropy_bprop,
      .summary = "mean cross entropy of logits (N, C) against class indices (N); with is_grad "
                 "its gradient (softmax - onehot) / N",
  });
  r.add(OpDef{
      .name = "L2Loss",
      .num_inputs = 1,
      .trait = Trait::kReduction,
      .infer = [](const InferContext& c) -> AbstractPtr {
        const ir::Abstract& x = *c.input(0);
        if (!x.is_tensor() || !is_floating(x.dtype())) {
          throw TypeError(c.error("expected a floating tensor x, got " + x.to_string()));
        }
        return ir::Abstract::tensor(x.dtype(), {});
      },
      .bprop = [](Emitter& e, const BpropArgs& a) -> Grads {
        return {e.mul(a.inputs[0], a.dout)};
      },
      .summary = "Σ x² / 2 as a rank-0 tensor",
  });
}

}  // namespace loom::ops
