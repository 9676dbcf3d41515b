// One GEMM interface for the CPU backend: MatMul, BatchMatMul and the GEMM inside convolution
// all call it. Two implementations sit behind it — OpenBLAS (cblas_sgemm/dgemm) and Eigen's
// GEMM — chosen by measurement (bench/README.md); LOOM_GEMM=openblas|eigen overrides the
// default for a run.
//
// Row-major: C[m×n] = alpha · op(A)[m×k] · op(B)[k×n] + beta · C, where op(X) is X or Xᵀ, and
// lda/ldb/ldc are the row strides of A, B and C as stored.
#pragma once

#include <cstdint>
#include <string_view>

namespace loom::backend::cpu {

enum class GemmImpl { kOpenBLAS, kEigen };

// The implementation used when none is named: LOOM_GEMM if set; else Eigen in deterministic mode
// (seed_all(seed, true), core/random/random.h: bitwise the same for any thread count); else the
// measured default.
GemmImpl default_gemm();
// The implementation for one product when none is named, from its shape only: products of at most
// kSmallGemmFlops (2·m·n·k) run with Eigen, split over loom's pool (OpenBLAS would wake its own
// threads for them, which then spin after the call and take the cores from the kernels that
// follow: LeNet's dense layers up to batch 256, whose fc1 products are 24.6 MFLOP there; with
// them on Eigen a LeNet step at batch 256 is 15% faster, its convolutions and pooling gradient
// 15-20% faster, the products themselves 30% slower); larger ones get default_gemm(). LOOM_GEMM,
// when set, decides for every size.
inline constexpr std::int64_t kSmallGemmFlops = std::int64_t{3} << 23;
GemmImpl gemm_for_shape(std::int64_t m, std::int64_t n, std::int64_t k);
std::string_view gemm_name(GemmImpl impl);

void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
          const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
          std::int64_t ldc, GemmImpl impl = default_gemm());
void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
          const double* a, std::int64_t lda, const double* b, std::int64_t ldb, double beta,
          double* c, std::int64_t ldc, GemmImpl impl = default_gemm());

}  // namespace loom::backend::cpu
