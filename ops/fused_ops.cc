// The fused ops the `fuse` pass (core/passes/fuse.cc) builds after autodiff: MatMulBiasAct,
// Conv2DBiasAct and FusedElementwise. None is differentiable — gradients are taken on the
// unfused graph — and each one's inference is its components' inference run in order
// (ops::infer on the component primitives), so a fused node always agrees with the nodes it
// replaced.
//
// `act` is one of none / relu / relu6, applied after the bias.
//
// FusedElementwise's `program` attribute is a chain of elementwise steps over its inputs: a
// tuple of steps, each a tuple (op name, operand index, ...). Operand index i < num_inputs names
// input i; num_inputs + j names the result of step j (j earlier than the current step). The op's
// result is the last step's. Broadcasting is that of the component ops.
//
//   FusedElementwise(%x, %y, %b) {program: (("Mul", 0, 1), ("Add", 3, 2), ("ReLU", 4))}
//     = ReLU(Add(Mul(x, y), b))
#include <algorithm>

#include "core/ir/error.h"
#include "core/ir/printer.h"
#include "ops/op.h"

namespace loom::ops {

namespace {

constexpr const char* kNotDifferentiable = "made by the fuse pass after autodiff";
// Fused ops are loom's own; the export pipeline does not fuse.
constexpr const char* kNotInMindIR = "loom's own fused op (MindSpore has no primitive of that "
                                     "name); the export pipeline does not run the fuse pass";

}  // namespace

AttrSpec act_attr() {
  return AttrSpec{
      .name = "act",
      .kind = AttrKind::kString,
      .default_value = Value::string("none"),
      .check = [](const Value& v) -> std::string {
        const std::string& s = v.as_string();
        return s == "none" || s == "relu" || s == "relu6"
                   ? ""
                   : "expected one of none, relu, relu6, got '" + s + "'";
      },
  };
}

namespace {

// The component primitive's name for an `act` value ("" for none).
std::string act_op(const std::string& act) {
  if (act == "relu") return "ReLU";
  if (act == "relu6") return "ReLU6";
  return "";
}

// Runs inference of `op` (attributes `attrs`) on `inputs`, naming the fused op in messages.
AbstractPtr infer_component(const InferContext& c, std::string_view op, Primitive::Attrs attrs,
                            std::vector<AbstractPtr> inputs) {
  const PrimitivePtr prim = make_op(op, std::move(attrs));
  std::string where = c.op.name;
  if (!c.where.empty()) where += " at " + std::string(c.where);
  return infer(*prim, inputs, where);
}

// prod(x, w) + b, then the activation.
AbstractPtr infer_bias_act(const InferContext& c, std::string_view product,
                           Primitive::Attrs product_attrs) {
  AbstractPtr y =
      infer_component(c, product, std::move(product_attrs), {c.input(0), c.input(1)});
  y = infer_component(c, "BiasAdd", {}, {y, c.input(2)});
  const std::string act = act_op(c.attr("act").as_string());
  if (!act.empty()) y = infer_component(c, act, {}, {y});
  return y;
}

AbstractPtr infer_matmul_bias_act(const InferContext& c) {
  return infer_bias_act(c, "MatMul",
                        {{"transpose_a", c.attr("transpose_a")},
                         {"transpose_b", c.attr("transpose_b")}});
}

AbstractPtr infer_conv2d_bias_act(const InferContext& c) {
  Primitive::Attrs conv = c.prim.attrs();
  conv.erase("act");
  return infer_bias_act(c, "Conv2D", std::move(conv));
}

AbstractPtr infer_fused_elementwise(const InferContext& c) {
  const std::vector<FusedStep> steps = fused_program(c.attr("program"), c.inputs.size());
  std::vector<AbstractPtr> values(c.inputs.begin(), c.inputs.end());
  for (const FusedStep& step : steps) {
    std::vector<AbstractPtr> args;
    for (std::size_t i : step.operands) args.push_back(values[i]);
    values.push_back(infer_component(c, step.op, {}, std::move(args)));
  }
  return values.back();
}

}  // namespace

OpDef fusable(OpDef def) {
  def.fusable = true;
  return def;
}

std::vector<FusedStep> fused_program(const Value& program, std::size_t num_inputs) {
  auto fail = [](const std::string& what) -> ValueError {
    return ValueError("FusedElementwise: expected program " + what);
  };
  if (!program.is_tuple() || program.elements().empty()) {
    throw fail("to be a non-empty tuple of steps, got " + ir::print_value(program));
  }
  std::vector<FusedStep> steps;
  for (const Value& s : program.elements()) {
    if (!s.is_tuple() || s.elements().empty() || !s.elements()[0].is_string()) {
      throw fail("steps of the form (op name, operand index, ...), got " + ir::print_value(s));
    }
    FusedStep step{.op = s.elements()[0].as_string(), .operands = {}};
    const OpDef* def = Registry::global().find(step.op);
    if (def == nullptr || !def->fusable) {
      throw fail("steps of a fusable elementwise op, got '" + step.op + "'");
    }
    const std::size_t available = num_inputs + steps.size();
    for (std::size_t i = 1; i < s.elements().size(); ++i) {
      const Value& index = s.elements()[i];
      if (!index.is_scalar() || !is_integral(index.as_scalar().dtype()) || index.as_int() < 0 ||
          static_cast<std::size_t>(index.as_int()) >= available) {
        throw fail("operand indices below " + std::to_string(available) + " (inputs, then " +
                   "earlier steps), got " + ir::print_value(s));
      }
      step.operands.push_back(static_cast<std::size_t>(index.as_int()));
    }
    const std::size_t arity = Registry::global().get(step.op).num_inputs;
    if (step.operands.size() != arity) {
      throw fail("a '" + step.op + "' step to take " + std::to_string(arity) +
                 " operands, got " + ir::print_value(s));
    }
    steps.push_back(std::move(step));
  }
  return steps;
}

void register_fused_ops(Registry& r) {
  r.add(OpDef{
      .name = "MatMulBiasAct",
      .attrs = {{"transpose_a", AttrKind::kBool, Value::boolean(false), {}},
                {"transpose_b", AttrKind::kBool, Value::boolean(false), {}},
                act_attr()},
      .num_inputs = 3,
      .trait = Trait::kOpaque,
      .infer = infer_matmul_bias_act,
      .not_differentiable_because = kNotDifferentiable,
      .summary = "act(MatMul(x, w) + b) with act none, relu or relu6 (made by the fuse pass)",
      .mindir = {.absent_because = kNotInMindIR},
      .flops = product_flops,
  });
  std::vector<AttrSpec> conv_attrs = r.get("Conv2D").attrs;
  conv_attrs.push_back(act_attr());
  r.add(OpDef{
      .name = "Conv2DBiasAct",
      .attrs = std::move(conv_attrs),
      .num_inputs = 3,
      .trait = Trait::kOpaque,
      .infer = infer_conv2d_bias_act,
      .not_differentiable_because = kNotDifferentiable,
      .summary = "act(BiasAdd(Conv2D(x, w), b)) with Conv2D's attributes and act none, relu or "
                 "relu6 (made by the fuse pass)",
      .mindir = {.absent_because = kNotInMindIR},
      .flops = conv_flops,
  });
  r.add(OpDef{
      .name = "FusedElementwise",
      .attrs = {{"program", AttrKind::kAny, std::nullopt, {}}},
      .num_inputs = -1,
      .min_inputs = 1,
      .trait = Trait::kElementwise,
      .infer = infer_fused_elementwise,
      .not_differentiable_because = kNotDifferentiable,
      .summary = "a chain of elementwise steps over the inputs, evaluated block by block; "
                 "program = ((op, operand index, ...), ...), indices naming inputs then earlier "
                 "steps (made by the fuse pass)",
      .mindir = {.absent_because = kNotInMindIR},
  });
}

}  // namespace loom::ops
