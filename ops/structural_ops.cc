// Structural primitives (no kernels; runtimes handle them): MakeTuple, TupleGetItem, Depend,
// StopGradient; and the control-flow primitives If and While, whose graph-valued inputs are run
// by the interpreter. Their gradients: MakeTuple/TupleGetItem route adjoints through tuples;
// If/While are differentiated by core/autodiff itself (their bprops here are never called).
#include "core/ir/error.h"
#include "ops/op.h"

namespace loom::ops {

void register_structural_ops(Registry& r) {
  r.add(OpDef{
      .name = "MakeTuple",
      .num_inputs = -1,
      .min_inputs = 0,
      .trait = Trait::kStructural,
      .infer = [](const InferContext& c) {
        return ir::Abstract::tuple({c.inputs.begin(), c.inputs.end()});
      },
      .bprop = [](Emitter& e, const BpropArgs& a) -> Grads {
        Grads g;
        for (std::size_t i = 0; i < a.inputs.size(); ++i) {
          g.push_back(e.tuple_get(a.dout, static_cast<std::int64_t>(i)));
        }
        return g;
      },
      .summary = "builds a tuple of its inputs",
  });
  r.add(OpDef{
      .name = "TupleGetItem",
      .num_inputs = 2,
      .trait = Trait::kStructural,
      .infer = [](const InferContext& c) -> AbstractPtr {
        const ir::Abstract& t = *c.input(0);
        const ir::Abstract& idx = *c.input(1);
        if (!t.is_tuple()) throw TypeError(c.error("expected a tuple, got " + t.to_string()));
        if (idx.kind() != ir::Abstract::Kind::kScalar || !idx.value() ||
            is_floating(idx.dtype()) || idx.dtype() == DType::kBool) {
          throw TypeError(c.error("expected a constant integer index, got " + idx.to_string()));
        }
        std::int64_t i = idx.value()->as_int();
        const auto n = static_cast<std::int64_t>(t.elements().size());
        if (i < -n || i >= n) {
          throw ValueError(c.error("expected an index in [" + std::to_string(-n) + ", " +
                                   std::to_string(n) + "), got " + std::to_string(i)));
        }
        return t.elements()[static_cast<std::size_t>(i < 0 ? i + n : i)];
      },
      .bprop = [](Emitter& e, const BpropArgs& a) -> Grads {
        // The tuple's gradient: dout at the index, zeros elsewhere.
        ir::AbstractPtr t = e.abstract_of(a.inputs[0]);
        std::int64_t n = static_cast<std::int64_t>(t->elements().size());
        std::int64_t idx = e.abstract_of(a.inputs[1])->value()->as_int();
        if (idx < 0) idx += n;
        std::vector<Var> parts;
        for (std::int64_t i = 0; i < n; ++i) {
          parts.push_back(i == idx ? a.dout : e.zeros_like(e.tuple_get(a.inputs[0], i)));
        }
        return {e.make_tuple(parts), Var()};
      },
      .summary = "element `index` of a tuple (index is a constant input)",
  });
  r.add(OpDef{
      .name = "Depend",
      .num_inputs = 2,
      .trait = Trait::kStructural,
      .infer = [](const InferContext& c) { return c.input(0); },
      .bprop = [](Emitter& e, const BpropArgs& a) -> Grads { return {a.dout, Var()}; },
      .summary = "returns input 0 once input 1 has been computed (an ordering edge)",
  });
  r.add(OpDef{
      .name = "StopGradient",
      .num_inputs = 1,
      .trait = Trait::kStructural,
      .infer = [](const InferContext& c) { return c.input(0); },
      .not_differentiable_because = "it is the identity that blocks gradients by definition",
      .summary = "identity whose gradient is zero",
  });
  r.add(OpDef{
      .name = std::string(ir::kIfPrim),
      .num_inputs = -1,
      .min_inputs = 3,
      .trait = Trait::kControlFlow,
      .infer = [](const InferContext& c) -> AbstractPtr {
        // The result is the branches' output abstract, known only once the branch graphs are
        // inferred (core/passes); here only the predicate is checked.
        const ir::Abstract& p = *c.input(0);
        bool ok = (p.is_tensor() && p.dtype() == DType::kBool && p.has_rank() &&
                   p.shape().empty()) ||
                  (p.kind() == ir::Abstract::Kind::kScalar && p.dtype() == DType::kBool);
        if (!ok) {
          throw TypeError(c.error("expected a Bool scalar predicate, got " + p.to_string()));
        }
        return nullptr;
      },
      .not_differentiable_because =
          "core/autodiff transforms If itself: an If over the branches' transformed graphs",
      .summary = "If(pred, @then, @else, args...) calls one branch graph with args",
      .mindir = {.absent_because = "control flow: its branches would be MindIR function graphs, "
                                   "which loom neither writes nor reads"},
  });
  r.add(OpDef{
      .name = std::string(ir::kWhilePrim),
      .num_inputs = -1,
      .min_inputs = 2,
      .trait = Trait::kControlFlow,
      .infer = [](const InferContext& c) -> AbstractPtr { return nullptr; },
      .not_differentiable_because =
          "core/autodiff transforms While itself: residual stacks and a backward loop",
      .summary = "While(@cond, @body, init...) repeats body while cond holds; returns the state",
      .mindir = {.absent_because = "control flow: its body would be MindIR function graphs, "
                                   "which loom neither writes nor reads"},
  });
}

}  // namespace loom::ops
