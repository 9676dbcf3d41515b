// The CUDA backend's entry for code built without CUDA headers (backends/backend.cc, `loom info`):
// the backend of this process's GPU, or why there is none.
#pragma once

#include <string>

namespace loom::backend {

class Backend;

// The CUDA backend of this process (under mpirun device LOCAL_RANK % count, else device 0, or
// LOOM_CUDA_DEVICE), created at the first call and registered; null when this build has no CUDA
// backend or the machine no usable GPU, with the reason in cuda_unavailable_reason().
Backend* cuda_backend_or_null();
// "this build of loom has no CUDA backend (LOOM_CUDA=OFF or no toolkit at build time)", "no
// CUDA device (cudaGetDeviceCount: ...)"; empty when the backend is there.
std::string cuda_unavailable_reason();

}  // namespace loom::backend
