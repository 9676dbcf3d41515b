/// \file
/// Reverse-mode automatic differentiation by source transformation (design: docs/autodiff.md).
///
/// grad(f, options) returns a NEW FuncGraph in f's module that computes gradients of f, built
/// from ordinary ops with the ops' registered bprop rules — no tape, no op names in this room.
/// Options follow MindSpore's GradOperation:
///
/// - get_all=false, no weights → d f / d(first input)
/// - get_all=true → tuple of d f / d(each non-weight input)
/// - weights (get_by_list) → tuple of d f / d(each listed weight parameter)
/// - both → (inputs tuple, weights tuple)
/// - sens_param → the grad graph takes one more parameter: the output gradient
///   (else ones_like(output), which requires a tensor output)
/// - return_value → (forward output, the gradients above)
///
/// Weights are parameters of f that carry a default value; the grad graph has the same
/// parameters as f (weights keep their defaults), plus the sensitivity when sens_param.
///
/// f must be inferred because bprop rules need static shapes: when a node lacks an abstract,
/// grad() runs passes::infer_graph(f) first. See docs/autodiff.md for the transform.
///
/// Limits of the transform:
///   - graphs may appear only as callees, If branches and While cond/body (a graph passed as a
///     value or stored in a tuple is refused with a ValueError);
///   - ops without a bprop rule (comparisons, ArgMax, OneHot, Fill, the optimizer updates,
///     BatchNormGrad...) give zero gradients to their inputs, as StopGradient does by definition;
///     integer and Bool values never receive gradients (their gradient slots are zeros);
///   - While: the backward loop needs the forward residual stack, so memory grows with the trip
///     count; the loop's residuals (and those of recursive graphs) have no static abstract, so
///     grad-of-grad through While or recursion is not supported;
///   - the sensitivity parameter (sens_param) comes after all of f's parameters, so a caller
///     passing it also passes the weights;
///   - higher-order gradients work where the bprop rules use differentiable ops (docs/ops.md).
#pragma once

#include <vector>

namespace loom::ir {
class FuncGraph;
class Parameter;
}  // namespace loom::ir

namespace loom::autodiff {

/// What grad() differentiates and returns; the fields follow MindSpore's GradOperation.
struct GradOptions {
  bool get_all = false;  ///< Gradients w.r.t. every non-weight input (a tuple), not just the first.
  std::vector<ir::Parameter*> weights;  ///< get_by_list: gradients w.r.t. these weights
  bool get_by_list = false;             ///< with an empty `weights`: every weight of f
  bool sens_param = false;  ///< The output gradient is a last, extra parameter (else ones_like).
  bool return_value = false;  ///< Return (forward output, gradients) instead of the gradients.
};

/// A new graph in f's module computing the gradients of `f` that `options` select (as listed in
/// the description of grad.h); f is inferred first when a node lacks an abstract. Throws
/// ValueError for a null f, an output that is not a tensor without sens_param, weights that are
/// not parameters of f, a request for the first input's gradient when f has only weights, or a
/// graph used in a way the transform does not support.
ir::FuncGraph* grad(ir::FuncGraph* f, const GradOptions& options = {});

}  // namespace loom::autodiff
