// nn/context.h: the process-wide execution mode.
#include "nn/context.h"

#include <atomic>

namespace loom::nn {
namespace {

std::atomic<ExecMode>& mode() {
  static std::atomic<ExecMode> m{ExecMode::kGraph};
  return m;
}

}  // namespace

void set_context_mode(ExecMode m) { mode().store(m); }
ExecMode context_mode() { return mode().load(); }

}  // namespace loom::nn
