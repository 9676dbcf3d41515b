/// \file
/// Kernels, what they declare about themselves, and a backend's kernel registry keyed by
/// (op, dtype).
///
/// A kernel computes an op's outputs from its inputs. The caller has already run inference and
/// allocated every output with its final shape and dtype (so the scheduler can plan memory once);
/// the kernel only fills them. Tuple-valued inputs and outputs are passed flattened, in order.
/// A kernel may also have a prepare step, run once per graph node when the graph is compiled (and
/// once per eager call): it reads the attributes and the static shapes, chooses an algorithm,
/// returns that plan as the launch state and the bytes of scratch memory a launch needs. The
/// runtime's memory plan places that workspace like any other buffer, live for the launch only,
/// so nothing allocates inside a step.
///
///     void relu_f32(const KernelContext& k) {
///       const float* x = k.in(0).data<float>();
///       float* y = k.out(0).data<float>();
///       cpu::pool(k).parallel_for(k.in(0).numel(), 4096, [&](int64_t b, int64_t e) { ... });
///     }
///     registry.add("ReLU", DType::kFloat32, relu_f32).writes_every_output_element();
///
/// The facts a registration declares are what the runtime and the fusion kernels rely on; the
/// registry test (tests/ops/registry_test.cc) checks each one against the kernel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/ir/device.h"
#include "core/ir/tensor.h"
#include "core/ir/value.h"

namespace loom::backend {

/// Where kernels run, as a backend defines it: the CPU's is its thread pool (backends/cpu/
/// cpu_context.h); a GPU backend's holds its stream and library handles.
class ExecutionContext {
 public:
  virtual ~ExecutionContext() = default;
  /// The device its kernels run on.
  virtual Device device() const = 0;
};

/// A tensor's static type as prepare() sees it.
struct TensorType {
  DType dtype;  ///< the element type
  Shape shape;  ///< the static shape
};

/// What a kernel's prepare step (PrepareFn) sees: the primitive and the static types of its
/// inputs and outputs.
struct PrepareContext {
  const ir::Primitive& prim;           ///< attributes complete (defaults filled in)
  std::span<const TensorType> inputs;   ///< flattened, as the launch will get them
  std::span<const TensorType> outputs;  ///< flattened, as the launch will get them
  ExecutionContext& exec;               ///< where the kernel will run

  /// The attribute `name` of the primitive; throws ValueError when it has none.
  const ir::Value& attr(std::string_view name) const { return prim.attr(name); }
};

/// What prepare() hands to every launch of its node.
struct Prepared {
  std::shared_ptr<const void> state;  ///< read by the kernel as KernelContext::state<T>()
  std::size_t workspace_bytes = 0;    ///< scratch memory of one launch (64-byte aligned)
};

/// What a kernel (Kernel) gets at each launch: the primitive, its flattened input and output
/// tensors, where it runs, and its prepared state and workspace.
struct KernelContext {
  const ir::Primitive& prim;      ///< attributes complete (defaults filled in)
  std::span<const Tensor> inputs;  ///< flattened, in order
  std::span<Tensor> outputs;      ///< allocated by the caller, shapes from inference
  ExecutionContext& exec;         ///< where the kernel runs
  const void* prepared = nullptr;  ///< Prepared::state of this node (null without prepare())
  void* workspace = nullptr;       ///< Prepared::workspace_bytes of scratch on the kernel's device
  std::size_t workspace_bytes = 0;  ///< the size of `workspace` in bytes (0 without one)

  /// Input `i` (unchecked).
  const Tensor& in(std::size_t i) const { return inputs[i]; }
  /// Output `i` (unchecked).
  Tensor& out(std::size_t i) const { return outputs[i]; }
  /// The attribute `name` of the primitive; throws ValueError when it has none.
  const ir::Value& attr(std::string_view name) const { return prim.attr(name); }
  /// The state prepare() made (a kernel registered with a prepare step only).
  template <class State>
  const State& state() const { return *static_cast<const State*>(prepared); }
};

/// A kernel: fills the outputs of one launch from its inputs.
using Kernel = void (*)(const KernelContext&);
/// A kernel's prepare step: run once per graph node at compile time (and once per eager call),
/// it returns the launch state and the workspace size.
using PrepareFn = Prepared (*)(const PrepareContext&);
/// The elementwise arithmetic of an op over n contiguous elements of one dtype: out[i] =
/// f(in[0][i], in[1][i], ...). FusedElementwise composes these; the op's own kernel uses the same
/// function, so fused and unfused results agree.
using BlockFn = void (*)(const void* const* inputs, void* out, std::int64_t n);

/// One kernel and the facts it declares.
struct KernelDef {
  std::string op;        ///< the op's name (its OpDef::name)
  DType dtype;           ///< the dtype of the op's OpDef::kernel_dtype_from input (or output)
  Kernel run = nullptr;  ///< the kernel
  PrepareFn prepare = nullptr;  ///< its prepare step (null: none)
  /// Writes every element of every output whatever the inputs: the runtime then hands it its
  /// fresh outputs as they are instead of zero-filling them (tested against NaN-filled outputs).
  bool writes_every_output = false;
  /// (input, output) pairs where output j may be the same buffer as input i: the kernel reads
  /// element k of the input before it writes element k of the output. Single-output elementwise
  /// kernels declare elementwise_in_place instead (any same-shape input).
  std::vector<std::pair<std::size_t, std::size_t>> in_place;
  /// An elementwise kernel: when it has a single output, that output may be the same buffer as
  /// any same-shape input.
  bool elementwise_in_place = false;
  BlockFn block = nullptr;  ///< the op's block function (ops that FusedElementwise may contain)
  /// False for a kernel that waits for the device or works on the host between its launches (a
  /// host-staged all-reduce): a plan holding it is never recorded (Backend::record) and runs
  /// launch by launch.
  bool recordable = true;
  /// Where the runtime's list scheduling puts the launch (runtime/executable.cc): by the memory
  /// it frees (the default), as soon as its inputs are ready (kEarly: a collective's start, so
  /// the communication overlaps the most compute), or only when nothing else can run (kLate:
  /// its wait).
  enum class Order { kByMemory, kEarly, kLate };
  Order order = Order::kByMemory;  ///< where the launch is scheduled (Order)

  // Chained setters for registrations; each returns this KernelDef.

  /// Sets prepare.
  KernelDef& with_prepare(PrepareFn f) { prepare = f; return *this; }
  /// Sets writes_every_output.
  KernelDef& writes_every_output_element() { writes_every_output = true; return *this; }
  /// Adds (input, output) to in_place.
  KernelDef& may_overwrite(std::size_t input, std::size_t output) {
    in_place.emplace_back(input, output);
    return *this;
  }
  /// Sets order.
  KernelDef& scheduled(Order o) {
    order = o;
    return *this;
  }
  /// Clears recordable.
  KernelDef& not_recordable() {
    recordable = false;
    return *this;
  }
  /// Sets elementwise_in_place and the block function `f` (null for an op that is not fusable).
  KernelDef& elementwise(BlockFn f = nullptr) {
    elementwise_in_place = true;
    block = f;
    return *this;
  }
};

/// A backend's kernels, one per (op, dtype).
class KernelRegistry {
 public:
  /// Registers `kernel` for (op, dtype) and returns its KernelDef; throws InternalError on a
  /// duplicate (op, dtype) or a null kernel. The reference stays valid (entries are
  /// never moved) for chaining the setters above.
  KernelDef& add(std::string_view op, DType dtype, Kernel kernel);
  const KernelDef* find(std::string_view op, DType dtype) const;  ///< null when absent
  /// The dtypes that have a kernel for op.
  std::vector<DType> dtypes(std::string_view op) const;
  /// Every kernel, in registration order.
  std::vector<const KernelDef*> all() const;

 private:
  std::vector<std::unique_ptr<KernelDef>> entries_;
};

}  // namespace loom::backend
