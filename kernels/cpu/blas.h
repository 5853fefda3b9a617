// The fp32 GEMM seam of the CPU backend (internal): single-threaded fp32 products issued from the core
// pool's chunks, run by the active GEMM backend (ops.h ActiveGemmBackend: oneDNN or OpenBLAS). See
// gemm.cc for why the libraries' own threading is switched off.
#pragma once

#include <cstdint>

namespace zerorun::kernels::cpu {

// Sets OpenBLAS to one thread, once per process; every sgemm caller runs this first.
void EnsureBlasSingleThreaded();

// Row-major C (m, n) = alpha * op(A) * op(B) + beta * C, fp32, on the calling thread, by the active
// GEMM backend.
void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace zerorun::kernels::cpu
