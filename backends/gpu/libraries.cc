// Loading cuBLAS, cuBLASLt and cuDNN at their first use (libraries.h).
#include "backends/gpu/libraries.h"

#include <dlfcn.h>

#include <cstring>
#include <mutex>
#include <string>

#include "core/ir/error.h"

// The directories of the libraries loom was linked against at build time (CMake passes them), tried
// after the loader's own search (LD_LIBRARY_PATH, the loader's cache).
#ifndef LOOM_CUDA_LIBRARY_DIRS
#define LOOM_CUDA_LIBRARY_DIRS ""
#endif

namespace loom::backend::cuda {
namespace {

#define LOOM_SONAME_(prefix, major) prefix #major
#define LOOM_SONAME(prefix, major) LOOM_SONAME_(prefix, major)
constexpr const char* kSonames[] = {LOOM_SONAME("libcublas.so.", CUBLAS_VER_MAJOR),
                                    LOOM_SONAME("libcublasLt.so.", CUBLAS_VER_MAJOR),
                                    LOOM_SONAME("libcudnn.so.", CUDNN_MAJOR)};
#undef LOOM_SONAME
#undef LOOM_SONAME_

struct Loaded {
  std::once_flag once;
  void* handle = nullptr;
  std::string error;  // why it could not be loaded
};

Loaded& loaded(Library library) {
  static Loaded all[3];
  return all[static_cast<int>(library)];
}

void* open_library(Library library, std::string& error) {
  // cuBLAS needs cuBLASLt: loaded first, it is the copy cuBLAS binds to, wherever it was found.
  if (library == Library::kCublas) library_symbol(Library::kCublasLt, "cublasLtGetVersion");
  const char* soname = library_soname(library);
  if (void* h = dlopen(soname, RTLD_NOW | RTLD_LOCAL)) return h;
  error = dlerror();
  const std::string dirs = LOOM_CUDA_LIBRARY_DIRS;
  std::size_t start = 0;
  while (start < dirs.size()) {
    std::size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const std::string path = dirs.substr(start, end - start) + "/" + soname;
    if (void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    start = end + 1;
  }
  return nullptr;
}

}  // namespace

const char* library_soname(Library library) { return kSonames[static_cast<int>(library)]; }

void* library_symbol(Library library, const char* symbol) {
  Loaded& l = loaded(library);
  std::call_once(l.once, [&] { l.handle = open_library(library, l.error); });
  if (l.handle == nullptr) {
    throw InternalError(std::string("CUDA: cannot load ") + library_soname(library) + " (" +
                        l.error + "; it is looked up on LD_LIBRARY_PATH, in the loader's cache" +
                        (std::strlen(LOOM_CUDA_LIBRARY_DIRS) ? " and in " LOOM_CUDA_LIBRARY_DIRS
                                                             : "") +
                        ")");
  }
  dlerror();
  void* f = dlsym(l.handle, symbol);
  if (f == nullptr) {
    const char* why = dlerror();
    throw InternalError(std::string("CUDA: ") + library_soname(library) + " has no function " +
                        symbol + " (" + (why ? why : "null symbol") +
                        "): a version older than the headers loom was built with?");
  }
  return f;
}

}  // namespace loom::backend::cuda
