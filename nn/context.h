/// \file
/// The global execution mode, as MindSpore's set_context(mode=GRAPH_MODE | PYNATIVE_MODE).
///
/// kGraph (the default: loom is a graph-mode framework): calling a root Cell (one not called from
/// another Cell's construct) with concrete tensors traces its construct once per input signature
/// and training flag, compiles the graph (runtime::compile) and runs it; later calls with the same
/// signature reuse the compiled graph. TrainOneStepCell builds and compiles one step graph.
/// kPyNative: construct runs op by op on tensors (backends/eager.h) — the debugging mode; results
/// equal graph mode's.
///
/// The device (MindSpore's set_context(device_target=...)): where Cells' graphs compile and run
/// and where their parameters are expected; "CPU" by default. Setting a device this build or
/// machine has no backend for is a ValueError naming it.
#pragma once

#include "core/ir/device.h"
#include "core/ir/tensor.h"

namespace loom::backend {
class Backend;
}  // namespace loom::backend

namespace loom::nn {

/// The execution mode (MindSpore's GRAPH_MODE and PYNATIVE_MODE): kGraph (the default), root
/// Cell calls on concrete tensors are compiled and run as graphs; kPyNative, construct runs op by
/// op on tensors.
enum class ExecMode { kGraph, kPyNative };

/// Sets the process-wide execution mode (all threads), as set_context(mode=...).
void set_context_mode(ExecMode mode);
/// The process-wide execution mode: ExecMode::kGraph unless set.
ExecMode context_mode();

/// Sets the process-wide device, as set_context(device_target=...). Throws ValueError naming the
/// device when this build or machine has no backend for it.
void set_context_device(Device device);
/// The process-wide device: Device::kCPU unless set.
Device context_device();
/// The backend of context_device().
backend::Backend& context_backend();
/// The device of a MindSpore device_target name: "CPU", or "GPU" (also "CUDA"), in upper or
/// lower case; ValueError otherwise.
Device device_from_target(const char* target);

/// Copies src's bytes into dst's storage in place (the same dtype and shape), whichever devices
/// they live on: memcpy between host tensors, the backends' copies otherwise. Nothing when they
/// are the same memory. ValueError on a dtype or shape mismatch.
void copy_into(Tensor& dst, const Tensor& src);

/// Sets the mode for the lifetime of the scope, restoring the previous one.
class ModeScope {
 public:
  /// Sets `mode`; the destructor restores the mode in force before.
  explicit ModeScope(ExecMode mode) : saved_(context_mode()) { set_context_mode(mode); }
  ~ModeScope() { set_context_mode(saved_); }
  ModeScope(const ModeScope&) = delete;
  ModeScope& operator=(const ModeScope&) = delete;

 private:
  ExecMode saved_;
};

}  // namespace loom::nn
