// Optimizer updates with MindSpore's names and formulas, written functionally: ApplyMomentum and
// ApplyAdam return the new parameter and slot values as a tuple instead of writing their inputs
// (the scheduler may later donate the input buffers to the outputs). Hyper-parameters (learning
// rate, momentum, beta powers...) are scalar tensors of the parameter's dtype, shape () or (1)
// as MindSpore accepts both. The updates are not differentiable: they run after the gradients.
#include "core/ir/error.h"
#include "ops/op.h"

namespace loom::ops {

namespace {

constexpr const char* kNotDifferentiable = "optimizer update; applied after gradients";

// Checks every named input: one floating dtype, the tensors of `like`'s shape, the scalars of
// shape () or (1). Returns the shape of input 0 with unknown dims filled in from the others.
Shape check_inputs(const InferContext& c, const std::vector<std::string>& names,
                   const std::vector<bool>& is_scalar) {
  const ir::Abstract& first = c.tensor(0);
  const DType dt = first.dtype();
  if (!is_floating(dt)) {
    throw TypeError(c.error("expected " + names[0] + " to have a floating dtype, got " +
                            std::string(dtype_name(dt))));
  }
  Shape shape = first.shape();
  for (std::size_t i = 1; i < names.size(); ++i) {
    const ir::Abstract& a = c.tensor(i);
    if (a.dtype() != dt) {
      throw TypeError(c.error("expected " + names[i] + " to be " + std::string(dtype_name(dt)) +
                              " like " + names[0] + ", got " + std::string(dtype_name(a.dtype()))));
    }
    const Shape& s = a.shape();
    if (is_scalar[i]) {
      const bool ok = s.empty() || (s.size() == 1 && (s[0] == 1 || s[0] == ir::kUnknownDim));
      if (!ok) {
        throw ShapeError(c.error("expected " + names[i] +
                                 " to be a scalar of shape () or (1), got " + shape_to_string(s)));
      }
      continue;
    }
    bool ok = s.size() == shape.size();
    for (std::size_t d = 0; ok && d < s.size(); ++d) {
      if (shape[d] == ir::kUnknownDim) shape[d] = s[d];
      ok = s[d] == ir::kUnknownDim || s[d] == shape[d];
    }
    if (!ok) {
      throw ShapeError(c.error("expected " + names[i] + " of shape " +
                               shape_to_string(first.shape()) + " like " + names[0] + ", got " +
                               shape_to_string(s)));
    }
  }
  return shape;
}

AttrSpec bool_attr(std::string name) {
  return {.name = std::move(name),
          .kind = AttrKind::kBool,
          .default_value = Value::boolean(false),
          .check = {}};
}

}  // namespace

void register_optimizer_ops(Registry& r) {
  OpDef momentum;
  momentum.name = "ApplyMomentum";
  momentum.attrs = {bool_attr("use_nesterov"),
                    bool_attr("use_locking"),
                    {.name = "gradient_scale",
                     .kind = AttrKind::kFloat,
                     .default_value = Value::f32(1.0f),
                     .check = {}}};
  momentum.num_inputs = 5;
  momentum.num_outputs = 2;
  momentum.infer = [](const InferContext& c) -> AbstractPtr {
    const Shape shape =
        check_inputs(c, {"variable", "accumulation", "learning_rate", "gradient", "momentum"},
                     {false, false, true, false, true});
    const DType dt = c.input(0)->dtype();
    return ir::Abstract::tuple({ir::Abstract::tensor(dt, shape), ir::Abstract::tensor(dt, shape)});
  };
  momentum.not_differentiable_because = kNotDifferentiable;
  momentum.summary =
      "(variable', accumulation'): accumulation' = momentum * accumulation + gradient_scale * "
      "gradient, variable' = variable - learning_rate * accumulation' (nesterov: - learning_rate "
      "* (gradient + momentum * accumulation'))";
  r.add(std::move(momentum));

  // ApplyMomentum over several parameters in one launch (made by the combine_updates pass).
  OpDef combined;
  combined.name = "CombineMomentum";
  combined.attrs = {bool_attr("use_nesterov"),
                    {.name = "gradient_scale",
                     .kind = AttrKind::kFloat,
                     .default_value = Value::f32(1.0f),
                     .check = {}}};
  combined.num_inputs = -1;
  combined.min_inputs = 5;
  combined.num_outputs = -1;
  combined.infer = [](const InferContext& c) -> AbstractPtr {
    if ((c.inputs.size() - 2) % 3 != 0) {
      throw ValueError(c.error("expected learning_rate, momentum, then (variable, accumulation, "
                               "gradient) triples, got " + std::to_string(c.inputs.size()) +
                               " inputs"));
    }
    const ir::Abstract& lr = c.tensor(0);
    const DType dt = lr.dtype();
    if (!is_floating(dt)) {
      throw TypeError(c.error("expected a floating learning_rate, got " +
                              std::string(dtype_name(dt))));
    }
    auto scalar = [&](std::size_t i, const char* name) {
      const ir::Abstract& a = c.tensor(i);
      const Shape& s = a.shape();
      if (a.dtype() != dt) {
        throw TypeError(c.error(std::string("expected ") + name + " to be " +
                                std::string(dtype_name(dt)) + ", got " +
                                std::string(dtype_name(a.dtype()))));
      }
      if (!(s.empty() || (s.size() == 1 && (s[0] == 1 || s[0] == ir::kUnknownDim)))) {
        throw ShapeError(c.error(std::string("expected ") + name +
                                 " to be a scalar of shape () or (1), got " + shape_to_string(s)));
      }
    };
    scalar(0, "learning_rate");
    scalar(1, "momentum");
    std::vector<AbstractPtr> outs;
    for (std::size_t i = 2; i < c.inputs.size(); i += 3) {
      const std::string k = std::to_string((i - 2) / 3);
      const ir::Abstract& var = c.tensor(i);
      for (std::size_t j = 1; j < 3; ++j) {
        const ir::Abstract& a = c.tensor(i + j);
        const char* name = j == 1 ? "accumulation " : "gradient ";
        if (a.dtype() != dt || var.dtype() != dt) {
          throw TypeError(c.error("expected variable " + k + " and its " + name + "to be " +
                                  std::string(dtype_name(dt)) + ", got " +
                                  std::string(dtype_name(var.dtype())) + " and " +
                                  std::string(dtype_name(a.dtype()))));
        }
        if (a.shape() != var.shape()) {
          throw ShapeError(c.error("expected " + std::string(name) + k + " of shape " +
                                   shape_to_string(var.shape()) + " like variable " + k +
                                   ", got " + shape_to_string(a.shape())));
        }
      }
      outs.push_back(ir::Abstract::tensor(dt, var.shape()));
      outs.push_back(ir::Abstract::tensor(dt, var.shape()));
    }
    return ir::Abstract::tuple(std::move(outs));
  };
  combined.not_differentiable_because = kNotDifferentiable;
  combined.summary =
      "ApplyMomentum of every (variable, accumulation, gradient) triple with one learning_rate "
      "and momentum, in one launch: (variable'_0, accumulation'_0, variable'_1, ...) (made by the "
      "combine_updates pass)";
  combined.mindir = {.absent_because = "loom's own op, made by the combine_updates pass in "
                                       "training; the export pipeline does not run it"};
  r.add(std::move(combined));

  OpDef adam;
  adam.name = "ApplyAdam";
  adam.attrs = {bool_attr("use_locking"), bool_attr("use_nesterov")};
  adam.num_inputs = 10;
  adam.num_outputs = 3;
  adam.infer = [](const InferContext& c) -> AbstractPtr {
    const Shape shape = check_inputs(
        c,
        {"var", "m", "v", "beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon", "grad"},
        {false, false, false, true, true, true, true, true, true, false});
    const DType dt = c.input(0)->dtype();
    return ir::Abstract::tuple({ir::Abstract::tensor(dt, shape), ir::Abstract::tensor(dt, shape),
                                ir::Abstract::tensor(dt, shape)});
  };
  adam.not_differentiable_because = kNotDifferentiable;
  adam.summary =
      "(var', m', v'): Adam with lr_t = lr * sqrt(1 - beta2_power) / (1 - beta1_power), "
      "var' = var - lr_t * m' / (sqrt(v') + epsilon) (nesterov: m' -> beta1 * m' + (1 - beta1) "
      "* grad)";
  r.add(std::move(adam));
}

}  // namespace loom::ops
