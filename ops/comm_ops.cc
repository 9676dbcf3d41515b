// Collective communication (data parallelism, parallel/). The ops are registered here like every
// other family, but their CPU kernels live in parallel/ and are added to the kernel registry by
// parallel::init() (OpDef::runtime_kernels): backends/ does not depend on MPI, and a graph using
// them compiles only in a process that called parallel::init().
//
// The gradient all-reduce is split in two so that communication overlaps the backward pass
// (parallel/parallel.h, make_gradient_reducer):
//   token_k = AllReduceStart([token_{k-1},] g_1, ..., g_m)    copies the bucket's gradients into a
//             staging buffer owned by the communicator and issues the reduction (returns at once);
//             the optional first input chains the starts so that every rank issues them in the
//             same order and all are issued before the first wait (the scheduler's depth-first
//             order then places each start right after its bucket's last gradient).
//   (r_1, ..., r_m) = AllReduceWait(token_k, g_1, ..., g_m)   waits for that reduction and writes
//             the reduced values (the g_i only give the shapes, and keep the order honest).
// The token is an Int64 scalar naming the in-flight operation. Because the start copies its
// inputs, no runtime buffer is read by communication after the start's launch returns: the
// in-place rewrite, the memory plan and donation may reuse any buffer by their usual rules.
#include "core/ir/error.h"
#include "ops/op.h"

namespace loom::ops {

namespace {

std::string check_reduce_op(const Value& v) {
  const std::string& s = v.as_string();
  return s == "sum" || s == "mean" ? "" : "expected one of sum, mean";
}

void check_float(const InferContext& c, std::size_t i, DType& dt) {
  const ir::Abstract& a = c.tensor(i);
  if (!is_floating(a.dtype())) {
    throw TypeError(c.error("expected floating tensors, got " + a.to_string()));
  }
  if (dt == DType::kBool) dt = a.dtype();
  if (a.dtype() != dt) {
    throw TypeError(c.error("expected one dtype per bucket, got " + std::string(dtype_name(dt)) +
                            " and " + std::string(dtype_name(a.dtype()))));
  }
}

void check_token(const InferContext& c, std::size_t i) {
  const ir::Abstract& t = c.tensor(i);
  if (t.dtype() != DType::kInt64 || !t.shape().empty()) {
    throw TypeError(c.error("expected an Int64 scalar token, got " + t.to_string()));
  }
}

}  // namespace

void register_comm_ops(Registry& r) {
  // The bucketed all-reduce is loom's own pair of ops, made by parallel/ for training graphs.
  constexpr const char* kNotInMindIR =
      "loom's own op (MindSpore has no primitive of that name), made for training graphs";
  const std::vector<AttrSpec> common = {
      {"op", AttrKind::kString, Value::string("mean"), check_reduce_op},
      {"deterministic", AttrKind::kBool, Value::boolean(false), {}},
  };
  r.add(OpDef{
      .name = "AllReduce",
      .attrs = common,
      .num_inputs = 1,
      .trait = Trait::kOpaque,
      .infer = [](const InferContext& c) {
        DType dt = DType::kBool;
        check_float(c, 0, dt);
        return c.input(0);
      },
      // y = Σ_r x_r (or the mean): dL/dx_r = Σ_r' dL/dy_r' (or the mean), the same all-reduce.
      .bprop = [](Emitter& e, const BpropArgs& a) -> Grads {
        return {e.emit("AllReduce", {a.dout}, a.prim.attrs())};
      },
      .summary = "blocking sum / mean of a tensor over the ranks (kernel: parallel/)",
      .runtime_kernels = true,
  });
  r.add(OpDef{
      .name = "AllReduceStart",
      .attrs = [&] {
        auto a = common;
        a.push_back({"chained", AttrKind::kBool, Value::boolean(false), {}});
        return a;
      }(),
      .num_inputs = -1,
      .min_inputs = 1,
      .trait = Trait::kOpaque,
      .kernel_dtype_from = -1,
      .infer = [](const InferContext& c) {
        const bool chained = c.attr("chained").as_bool();
        if (chained) check_token(c, 0);
        if (c.inputs.size() < (chained ? 2u : 1u)) {
          throw ValueError(c.error("expected at least one tensor to reduce, got none"));
        }
        DType dt = DType::kBool;
        for (std::size_t i = chained ? 1 : 0; i < c.inputs.size(); ++i) check_float(c, i, dt);
        return ir::Abstract::tensor(DType::kInt64, {});
      },
      .not_differentiable_because =
          "it issues communication (a side effect) and runs after autodiff on the gradients",
      .summary = "copies a bucket of tensors and starts their non-blocking all-reduce; returns "
                 "a token (kernel: parallel/)",
      .runtime_kernels = true,
      .mindir = {.absent_because = kNotInMindIR},
  });
  r.add(OpDef{
      .name = "AllReduceWait",
      .attrs = {},
      .num_inputs = -1,
      .min_inputs = 2,
      .num_outputs = -1,
      .trait = Trait::kOpaque,
      .kernel_dtype_from = 0,
      .infer = [](const InferContext& c) {
        check_token(c, 0);
        DType dt = DType::kBool;
        std::vector<AbstractPtr> outs;
        for (std::size_t i = 1; i < c.inputs.size(); ++i) {
          check_float(c, i, dt);
          outs.push_back(c.input(i));
        }
        return ir::Abstract::tuple(std::move(outs));
      },
      .not_differentiable_because =
          "it completes communication started by AllReduceStart (a side effect), after autodiff",
      .summary = "waits for the all-reduce named by the token; returns the reduced tensors "
                 "(kernel: parallel/)",
      .runtime_kernels = true,
      .mindir = {.absent_because = kNotInMindIR},
  });
}

}  // namespace loom::ops
