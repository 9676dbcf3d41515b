/// \file
/// The operator registry: one OpDef per primitive, holding everything about it in one place —
/// MindSpore's name, the attribute schema with defaults, shape/dtype inference, traits for
/// fusion, the bprop rule (or the reason it has none), and its MindIR encoding (MindIRForm).
///
/// Adding an op touches one file of ops/ (its family: math_ops.cc, norm_loss_ops.cc, ...), one
/// kernel file per backend, and one row of the op test table (tests/ops/). A registry test fails
/// when any of these is missing.
///
///     OpDef def;
///     def.name = "ReLU";
///     def.num_inputs = 1;
///     def.trait = Trait::kElementwise;
///     def.infer = [](const InferContext& c) { return c.input(0); };
///     def.bprop = [](Emitter& e, const BpropArgs& a) -> Grads {
///       return {e.emit("ReluGrad", {a.dout, a.out})};
///     };
///     registry.add(std::move(def));
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/ir/abstract.h"
#include "core/ir/value.h"
#include "ops/emitter.h"

namespace loom::ops {

struct OpDef;

using ir::AbstractPtr;
using ir::Primitive;
using ir::PrimitivePtr;
using ir::Value;

/// The kinds an attribute may take. kInts is a tuple of integers (kernel_size, stride...); kAny
/// accepts any Value.
enum class AttrKind { kBool, kInt, kFloat, kString, kInts, kDType, kAny };

/// One attribute of an op's schema: its name, kind, default and optional extra check (make_op
/// checks a primitive's attributes against it).
struct AttrSpec {
  std::string name;  ///< the attribute's name (MindSpore's)
  AttrKind kind;     ///< the kind its value must have
  std::optional<Value> default_value;  ///< nullopt: the attribute is required
  /// Optional extra check (e.g. "pad_mode is one of valid/same/pad"); returns an error text
  /// ("expected one of valid, same, pad") or "" when the value is fine.
  std::function<std::string(const Value&)> check;
};

/// What the fusion pass and the scheduler know about an op without reading its name.
enum class Trait {
  kElementwise,  ///< out[i] = f(in0[i], in1[i], ...) with same-shape or broadcast inputs
  kReduction,    ///< reduces some axes
  kOpaque,       ///< anything else with a kernel (MatMul, Conv2D, ...)
  kStructural,   ///< MakeTuple, TupleGetItem, Depend, StopGradient: no kernel, handled by runtimes
  kControlFlow,  ///< If, While: graph-valued inputs, run by the interpreter / runtime
};

/// What an op's inference rule (InferFn) sees: the op, the primitive and its inputs' abstracts.
struct InferContext {
  const OpDef& op;                      ///< the op being inferred
  const Primitive& prim;                ///< attributes complete (defaults filled in)
  std::span<const AbstractPtr> inputs;  ///< one per argument, never null
  /// Context for messages: the Cell path / node the call comes from ("" when unknown).
  std::string_view where;

  /// The abstract of input `i`; throws InternalError when there is no input `i`.
  const AbstractPtr& input(std::size_t i) const;
  /// The input as a tensor abstract with known rank; throws TypeError naming the op otherwise.
  const ir::Abstract& tensor(std::size_t i) const;
  /// The attribute `name` of the primitive; throws ValueError when it has none.
  const Value& attr(std::string_view name) const { return prim.attr(name); }
  /// Builds `"<Op>: <message>"` with the where-context appended, for throwing.
  std::string error(std::string_view message) const;
};

/// Returns the output abstract (a tuple for several outputs). Throws ShapeError / TypeError /
/// ValueError with `"<Op>: expected <what>, got <shapes>"` messages.
using InferFn = std::function<AbstractPtr(const InferContext&)>;

/// What an op's bprop rule (BpropFn) sees: the forward call's primitive, arguments, result and
/// the gradient of that result.
struct BpropArgs {
  const Primitive& prim;    ///< the forward primitive (attributes complete)
  std::vector<Var> inputs;  ///< the forward arguments
  Var out;                  ///< the forward result (a tuple Var for multi-output ops)
  Var dout;                 ///< the gradient of the result (same structure as out)
};

/// One gradient per input, in order. A default-constructed Var means "no gradient" (an input
/// that is not differentiable, such as indices); autodiff treats it as zeros.
using Grads = std::vector<Var>;
/// An op's bprop rule: the gradients of its inputs (Grads), built by emitting ops through the
/// Emitter.
using BpropFn = std::function<Grads(Emitter&, const BpropArgs&)>;
/// Counts the floating-point operations of one launch from the primitive and its inputs' and
/// outputs' shapes (OpDef::flops).
using FlopsFn = std::function<double(const Primitive& prim, std::span<const Shape> inputs,
                                     std::span<const Shape> outputs)>;

/// flops of a product out = op(a) · op(b) (MatMul, BatchMatMul, MatMulBiasAct): 2 · |out| · K,
/// K the inner dimension of a (its last, or with transpose_a its second-to-last).
double product_flops(const Primitive& prim, std::span<const Shape> inputs,
                     std::span<const Shape> outputs);
/// flops of a convolution or one of its gradients: 2 · |the output-shaped tensor| · (C/group ·
/// kh · kw), where the output-shaped tensor is y (Conv2D, Conv2DBiasAct: the output) or dout
/// (both gradients: input 0), and C/group · kh · kw is the filter's per-output volume.
double conv_flops(const Primitive& prim, std::span<const Shape> inputs,
                  std::span<const Shape> outputs);

/// How an attribute is spelled in MindIR where MindSpore's encoding differs from loom's
/// (mindir/mindir.cc applies it on writing and on reading; docs/formats.md, "MindIR").
enum class MindIRAttrEncoding {
  kAsIs,            ///< written and read as loom holds it
  kSpatialPair,     ///< loom's (h, w), written as is; read from (h, w), MindSpore's (1, 1, h, w), a
                    /// 1-tuple (s) or a scalar s, the last two as (s, s)
  kSpatialQuad,     ///< loom's (h, w), written as MindSpore's (1, 1, h, w); read as kSpatialPair
  kPad4,            ///< loom's (top, bottom, left, right), written as is; a scalar p reads as
                    /// (p, p, p, p)
  kPadModeLower,    ///< pad_mode written lowercase ("same": Conv2D); read from a string of either
                    /// case or MindSpore's enum int (PAD 0, SAME 1, VALID 2), stored lowercase
  kPadModeUpper,    ///< as kPadModeLower, uppercase ("SAME": the pooling ops)
  kFormat,          ///< "NCHW" / "NHWC", written as is; also read from MindSpore's enum int
                    /// (NCHW 0, NHWC 1)
  kAxisList,        ///< loom's tuple of axes, written as is; a scalar or an integer tensor reads as
                    /// the tuple of its values
  kIntsFromTensor,  ///< loom's tuple of integers, written as is; an integer tensor (the
                    /// primitive-function form's Constant input) reads as the tuple of its values
};

/// One attribute's MindIR spelling (only attributes that differ from a plain kAsIs are listed).
struct MindIRAttr {
  std::string name;  ///< loom's attribute name
  MindIRAttrEncoding encoding = MindIRAttrEncoding::kAsIs;  ///< how its value is spelled
  /// Also written under this MindSpore name, with the same value (Conv2D's group as groups,
  /// MatMul's transpose_a as transpose_x1); ignored on reading.
  std::string also_written_as;
};

/// An attribute MindSpore's primitive carries that loom computes at export (Conv2D's pad_list,
/// the padding actually applied): from the primitive and its inputs' abstracts (nullptr where a
/// node has none). Ignored on reading.
struct MindIRDerivedAttr {
  std::string name;  ///< MindSpore's attribute name
  /// Computes the attribute's value from the primitive and its inputs' abstracts.
  std::function<Value(const Primitive&, std::span<const ir::Abstract* const> inputs)> value;
};

/// How the op is written to and read from MindIR (mindir/mindir.cc), as MindSpore's primitive of
/// the same name. The writer emits MindSpore's attribute form: the tensor inputs, then
/// const_inputs as Constant nodes; the primitive's attributes (less const_inputs) with their
/// also_written_as copies, in name order, then `derived`, then input_names / output_names. The
/// reader takes the attribute form and the primitive-function form (trailing Constants are
/// function_args), and undoes each attribute's encoding. MakeTuple, TupleGetItem and MindSpore's
/// monad ops (Load, UpdateState, Depend) are handled structurally by mindir/.
struct MindIRForm {
  /// Why the op is never written or read (loom's own fused ops, control flow...); empty: it is,
  /// under its name.
  std::string absent_because;
  /// Attributes MindSpore's attribute form passes as Constant inputs after the tensor inputs, in
  /// input order (Reshape: shape; ReduceSum: axis).
  std::vector<std::string> const_inputs;
  /// The primitive-function form's init arguments (MindSpore >= 2.3: trailing Constant inputs), in
  /// the order of MindSpore's op YAML (mindspore/ops/op_def/yaml), by loom's attribute names
  /// (MindSpore's data_format is loom's format).
  std::vector<std::string> function_args;
  /// input_names / output_names as MindSpore's primitive declares them, written when given;
  /// input_names covers the tensor inputs and then const_inputs.
  ///@{
  std::vector<std::string> input_names;
  std::vector<std::string> output_names;
  ///@}
  /// The attributes whose MindIR spelling differs from a plain kAsIs.
  std::vector<MindIRAttr> attrs;
  /// The attributes computed at export (MindIRDerivedAttr), written after the primitive's own.
  std::vector<MindIRDerivedAttr> derived;

  /// True when the op is written to and read from MindIR (absent_because is empty).
  bool supported() const { return absent_because.empty(); }
  /// The encoding of attribute `attr` (kAsIs when not listed).
  MindIRAttrEncoding encoding(std::string_view attr) const {
    for (const MindIRAttr& a : attrs) {
      if (a.name == attr) return a.encoding;
    }
    return MindIRAttrEncoding::kAsIs;
  }
};

/// Everything about one op (one primitive): its schema, inference, traits, bprop rule, MindIR
/// form and flop count. Registered once in the Registry.
struct OpDef {
  std::string name;               ///< MindSpore's primitive name
  std::vector<AttrSpec> attrs;    ///< the attribute schema
  int num_inputs = 1;             ///< -1: variadic (at least min_inputs)
  int min_inputs = 0;             ///< the fewest inputs of a variadic op (num_inputs -1)
  int num_outputs = 1;            ///< >1: a tuple of that many tensors; -1: set by attributes
  Trait trait = Trait::kOpaque;   ///< what the fusion pass and the scheduler know of it
  /// Which dtype keys the op's kernels: the dtype of this input (after flattening tuples), or of
  /// the first output when -1 (for ops whose inputs are all indices or conditions).
  int kernel_dtype_from = 0;
  InferFn infer;                  ///< the shape/dtype inference rule (required)
  BpropFn bprop;                  ///< empty when not differentiable
  std::string not_differentiable_because;  ///< required when bprop is empty
  std::string summary;            ///< one line for `loom ops` and docs/ops.md
  /// An elementwise op that FusedElementwise may contain (the fuse pass groups it): each
  /// backend's kernels of it declare a block functor (backends/kernel.h, KernelDef::block).
  bool fusable = false;
  /// The kernels are registered at run time by another room (parallel::init for the
  /// communication ops), not by backends/: absent from a process that did not initialise it.
  bool runtime_kernels = false;
  /// The op's MindIR encoding (MindIRForm above).
  MindIRForm mindir;
  /// Floating-point operations of one launch, from its attributes and its inputs' and outputs'
  /// shapes (a multiply-add counts 2): the products (MatMul, convolutions and their gradients,
  /// the fused products), whose speed the profiler reports as FLOP/s and % of the machine's
  /// peak. Empty for the other ops, which it reports by bytes moved.
  FlopsFn flops;
};

/// The registry of ops: one OpDef per primitive name.
class Registry {
 public:
  /// The registry holding every built-in op (filled on first use).
  static const Registry& global();
  /// The same registry, for ops defined outside loom (a user's custom op: examples/custom_op/).
  /// Add them at start-up, before any graph uses them and before other threads look ops up (the
  /// registry takes no lock); their kernels go to each backend's kernels_mutable().
  static Registry& global_mutable();

  /// Adds an op; throws InternalError on a duplicate name, a missing infer, or a missing
  /// bprop without a reason.
  void add(OpDef def);
  /// The op named `name`, or nullptr when none is registered.
  const OpDef* find(std::string_view name) const;
  /// Throws ValueError("ops: expected a registered op, got 'Foo'") when absent.
  const OpDef& get(std::string_view name) const;
  /// Every op, sorted by name.
  std::vector<const OpDef*> all() const;

 private:
  std::vector<std::unique_ptr<OpDef>> ops_;
};

/// A primitive of a registered op with every attribute checked against the schema and the
/// defaults filled in. Throws ValueError / TypeError naming the op and the attribute.
PrimitivePtr make_op(std::string_view name, Primitive::Attrs attrs = {});

/// Checks arity and runs the op's inference. `where` is context for messages.
AbstractPtr infer(const Primitive& prim, std::span<const AbstractPtr> inputs,
                  std::string_view where = {});

/// The registered families; each lives in its own file of ops/ (called when the global registry
/// is first built) and adds its ops to `r`.
///@{
void register_structural_ops(Registry& r);
void register_math_ops(Registry& r);
void register_activation_ops(Registry& r);
void register_matmul_ops(Registry& r);
void register_conv_pool_ops(Registry& r);
void register_norm_loss_ops(Registry& r);
void register_array_ops(Registry& r);
void register_reduce_ops(Registry& r);
void register_optimizer_ops(Registry& r);
void register_fused_ops(Registry& r);
void register_comm_ops(Registry& r);
///@}

/// One step of a FusedElementwise program (ops/fused_ops.cc): `op` applied to operands, each
/// an input index (< num_inputs) or num_inputs + the index of an earlier step.
struct FusedStep {
  std::string op;                     ///< the elementwise op's name
  std::vector<std::size_t> operands;  ///< its operands, as input or step indices (FusedStep)
};

/// `def` marked fusable (OpDef::fusable), for registrations: r.add(fusable(binary(...))).
OpDef fusable(OpDef def);
/// `def` with its MindIR form, for registrations: r.add(with_mindir(binary(...), {...})).
inline OpDef with_mindir(OpDef def, MindIRForm form) {
  def.mindir = std::move(form);
  return def;
}
/// The most parameters one CombineMomentum takes (the combine_updates pass makes no larger one):
/// the CUDA kernel's argument block holds their pointers, and the kernels declare their in-place
/// pairs for this many.
inline constexpr std::size_t kMaxCombinedParameters = 64;
/// The `act` attribute of the ops with a built-in activation (MatMulBiasAct, Conv2DBiasAct,
/// BatchNormApply): one of "none" (the default), "relu", "relu6".
AttrSpec act_attr();
/// Decodes and checks a `program` attribute for `num_inputs` inputs; throws ValueError naming
/// FusedElementwise when it is malformed.
std::vector<FusedStep> fused_program(const Value& program, std::size_t num_inputs);

}  // namespace loom::ops
