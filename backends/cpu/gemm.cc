// The two GEMMs behind backends/cpu/gemm.h and the choice between them.
//
// OpenBLAS: cblas_sgemm/dgemm, given the project pool's thread count. Debian's DYNAMIC_ARCH
// OpenBLAS 0.3.21 does not know this machine's CPU model and falls back to its Prescott (SSE3)
// kernels, about a quarter of the SkylakeX (AVX-512) kernels' speed. OPENBLAS_CORETYPE is read
// only when the library loads, so setting it from here is too late; instead, on first use, when
// the detected core is Prescott on a CPU with AVX-512 and the user has not named a core, the
// library's own exported re-initialisation (gotoblas_dynamic_quit/init, looked up with dlsym so
// that a non-dynamic OpenBLAS simply skips this) selects SkylakeX. Setting OPENBLAS_CORETYPE
// explicitly (even to Prescott) turns this off.
//
// Eigen: its GEMM on row-major maps, with Eigen's own threading unused (no OpenMP). Large
// products are cut into column (or row) blocks of C run on the project ThreadPool. Block
// boundaries depend only on the shape, so results are bitwise the same for any thread count.
//
// The default is measured (bench/README.md): OpenBLAS with its SkylakeX kernels beats Eigen by
// 10-35% on most large convolution GEMMs on 2 cores and is level on the small dense layers.
// Where OpenBLAS is still on its Prescott kernels on a CPU with AVX2 (the switch above was
// impossible or the user pinned Prescott), Eigen is the default instead, being 1.6-5x faster
// than those kernels.
#include "backends/cpu/gemm.h"

#include <cblas.h>
#include <dlfcn.h>

// GCC 12 warns (-Wmaybe-uninitialized) inside its own AVX-512 intrinsics wherever Eigen's GEMM
// kernels are instantiated under -march=native; the warnings are false positives.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "core/random/random.h"
#include "backends/thread_pool.h"
#include "core/ir/error.h"

namespace loom::backend::cpu {

namespace {

bool openblas_on_prescott() {
  const char* core = openblas_get_corename();
  return core != nullptr && std::strcmp(core, "Prescott") == 0;
}

void switch_openblas_core_if_misdetected() {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr || !openblas_on_prescott()) return;
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512dq") || !__builtin_cpu_supports("avx512vl")) {
    return;
  }
  using Fn = void (*)();
  auto quit = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_quit"));
  auto init = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_init"));
  if (quit == nullptr || init == nullptr) return;
  // The re-initialisation reads the variable; it is removed again so that the process
  // environment (and what child processes inherit) stays as the user left it.
  setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
  quit();
  init();
  unsetenv("OPENBLAS_CORETYPE");
}

void prepare_openblas() {
  static std::once_flag once;
  std::call_once(once, [] {
    switch_openblas_core_if_misdetected();
    openblas_set_num_threads(ThreadPool::global().num_threads());
  });
}

GemmImpl choose_default() {
  // Preparing here as well means anything that asks for the default (e.g. `loom info`) sees the
  // kernel OpenBLAS will really use.
  prepare_openblas();
  const char* s = std::getenv("LOOM_GEMM");
  if (s == nullptr || *s == '\0') {
    __builtin_cpu_init();
    const bool slow_blas = openblas_on_prescott() && __builtin_cpu_supports("avx2");
    return slow_blas ? GemmImpl::kEigen : GemmImpl::kOpenBLAS;
  }
  const std::string name(s);
  if (name == "openblas") return GemmImpl::kOpenBLAS;
  if (name == "eigen") return GemmImpl::kEigen;
  throw ValueError("LOOM_GEMM: expected openblas or eigen, got '" + name + "'");
}

bool fits_blas_int(std::int64_t v) { return v <= INT_MAX; }

void openblas_gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                   const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
                   float* c, std::int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

void openblas_gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
                   const double* a, std::int64_t lda, const double* b, std::int64_t ldb,
                   double beta, double* c, std::int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

template <typename T>
using RowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using ConstMap = Eigen::Map<const RowMajor<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <typename T>
using MutMap = Eigen::Map<RowMajor<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

// C[r0:r1, c0:c1] = alpha · op(A)[r0:r1, :] · op(B)[:, c0:c1] + beta · C[r0:r1, c0:c1].
template <typename T, bool kTransA, bool kTransB>
void eigen_block(std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
                 std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc,
                 std::int64_t r0, std::int64_t r1, std::int64_t c0, std::int64_t c1) {
  const ConstMap<T> A(a, kTransA ? k : m, kTransA ? m : k, Eigen::OuterStride<>(lda));
  const ConstMap<T> B(b, kTransB ? n : k, kTransB ? k : n, Eigen::OuterStride<>(ldb));
  MutMap<T> C(c + r0 * ldc + c0, r1 - r0, c1 - c0, Eigen::OuterStride<>(ldc));
  auto op_a = [&] {
    if constexpr (kTransA) {
      return A.middleCols(r0, r1 - r0).transpose();
    } else {
      return A.middleRows(r0, r1 - r0);
    }
  }();
  auto op_b = [&] {
    if constexpr (kTransB) {
      return B.middleRows(c0, c1 - c0).transpose();
    } else {
      return B.middleCols(c0, c1 - c0);
    }
  }();
  if (beta == T(0)) {
    C.noalias() = alpha * op_a * op_b;
  } else {
    if (beta != T(1)) C *= beta;
    C.noalias() += alpha * op_a * op_b;
  }
}

// Products below this many flops (about 20 µs of work) run as one call: a pool hand-off costs a
// few microseconds. Blocks carry about as much work each (measured: cutting LeNet conv2's
// 15 MFLOP product into 7 blocks is 40% faster on 2 cores than one call), and never fewer than
// kMinBlock rows or columns, so repacking the shared operand per block stays a small fraction
// of the block's work.
constexpr std::int64_t kSplitFlops = std::int64_t{1} << 21;
constexpr std::int64_t kBlockFlops = std::int64_t{1} << 21;
constexpr std::int64_t kMinBlock = 64;
constexpr std::int64_t kMaxBlocks = 16;
// Products of 1 to 4 MFLOP (LeNet's dense layers at batch 32: 3 MFLOP, 38-40 µs on one core)
// are cut in two halves of at least kMinHalf rows or columns: 23 µs on 2 cores (bench/README.md).
constexpr std::int64_t kHalvesFlops = std::int64_t{1} << 20;
constexpr std::int64_t kMinHalf = 32;

template <typename T, bool kTransA, bool kTransB>
void eigen_gemm_t(std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
                  std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c,
                  std::int64_t ldc) {
  const std::int64_t flops = 2 * m * n * k;
  const bool split_cols = n >= m;
  const std::int64_t dim = split_cols ? n : m;
  std::int64_t blocks = std::clamp<std::int64_t>(flops / kBlockFlops, 1, kMaxBlocks);
  blocks = std::min(blocks, std::max<std::int64_t>(1, dim / kMinBlock));
  if (flops >= kHalvesFlops && flops < 2 * kSplitFlops && dim >= 2 * kMinHalf) {
    blocks = 2;
  } else if (flops < kSplitFlops) {
    blocks = 1;
  }
  if (blocks == 1) {
    eigen_block<T, kTransA, kTransB>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, 0, m, 0, n);
    return;
  }
  // Multiples of 16 keep block edges on AVX-512 vector boundaries.
  const std::int64_t grain = ((dim + blocks - 1) / blocks + 15) & ~std::int64_t{15};
  ThreadPool::global().parallel_for(dim, grain, [&](std::int64_t lo, std::int64_t hi) {
    if (split_cols) {
      eigen_block<T, kTransA, kTransB>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, 0, m, lo,
                                       hi);
    } else {
      eigen_block<T, kTransA, kTransB>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, lo, hi, 0,
                                       n);
    }
  });
}

template <typename T>
void eigen_gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
                const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c,
                std::int64_t ldc) {
  if (ta && tb) {
    eigen_gemm_t<T, true, true>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  } else if (ta) {
    eigen_gemm_t<T, true, false>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  } else if (tb) {
    eigen_gemm_t<T, false, true>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  } else {
    eigen_gemm_t<T, false, false>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
}

// C = beta · C for the products with nothing to sum (k == 0); BLAS leaves C unread when beta is 0.
template <typename T>
void scale_only(std::int64_t m, std::int64_t n, T beta, T* c, std::int64_t ldc) {
  for (std::int64_t i = 0; i < m; ++i) {
    T* row = c + i * ldc;
    if (beta == T(0)) {
      std::fill(row, row + n, T(0));
    } else {
      for (std::int64_t j = 0; j < n; ++j) row[j] *= beta;
    }
  }
}

template <typename T>
void gemm_impl(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
               const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c,
               std::int64_t ldc, GemmImpl impl) {
  if (m < 0 || n < 0 || k < 0) {
    throw InternalError("gemm: expected non-negative sizes, got m=" + std::to_string(m) +
                        ", n=" + std::to_string(n) + ", k=" + std::to_string(k));
  }
  if (m == 0 || n == 0) return;
  if (k == 0) {
    scale_only(m, n, beta, c, ldc);
    return;
  }
  // cblas takes 32-bit sizes; anything larger goes to Eigen, which indexes with ptrdiff_t.
  const bool blas_ok = fits_blas_int(m) && fits_blas_int(n) && fits_blas_int(k) &&
                       fits_blas_int(lda) && fits_blas_int(ldb) && fits_blas_int(ldc);
  if (impl == GemmImpl::kOpenBLAS && blas_ok) {
    prepare_openblas();
    openblas_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  } else {
    eigen_gemm<T>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
}

}  // namespace

GemmImpl default_gemm() {
  static const GemmImpl impl = choose_default();
  // Deterministic mode (seed_all(seed, true)) wants results independent of the thread count,
  // which Eigen's blocking gives and OpenBLAS does not; a LOOM_GEMM the user set still wins.
  static const bool named = [] {
    const char* s = std::getenv("LOOM_GEMM");
    return s != nullptr && *s != '\0';
  }();
  if (!named && random::deterministic_mode()) return GemmImpl::kEigen;
  return impl;
}

GemmImpl gemm_for_shape(std::int64_t m, std::int64_t n, std::int64_t k) {
  static const bool named = [] {
    const char* s = std::getenv("LOOM_GEMM");
    return s != nullptr && *s != '\0';
  }();
  if (!named && 2 * m * n * k <= kSmallGemmFlops) return GemmImpl::kEigen;
  return default_gemm();
}

std::string_view gemm_name(GemmImpl impl) {
  switch (impl) {
    case GemmImpl::kOpenBLAS: return "openblas";
    case GemmImpl::kEigen: return "eigen";
  }
  return "?";
}

void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
          const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
          std::int64_t ldc, GemmImpl impl) {
  gemm_impl<float>(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, impl);
}

void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
          const double* a, std::int64_t lda, const double* b, std::int64_t ldb, double beta,
          double* c, std::int64_t ldc, GemmImpl impl) {
  gemm_impl<double>(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, impl);
}

}  // namespace loom::backend::cpu
