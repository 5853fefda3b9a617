// The oneDNN seam of the CPU backend (internal): single-threaded matmul primitives, cached per thread
// by shape, run on the calling thread. The core pool splits a GEMM into blocks and each chunk calls
// this, as it does OpenBLAS (gemm.cc), so the process keeps one pool of threads: oneDNN's OpenMP
// runtime is held to one thread on every thread that calls it.
//
// oneDNN picks its kernels at run time (AMX, AVX512-BF16/FP16, AVX-512, AVX2); ZERORUN_ISA caps it as
// it caps zerorun's own kernels (avx2 -> oneDNN's avx2, scalar -> sse41), read once, at the first
// oneDNN call of the process (oneDNN's cap cannot change later: SetMaxIsa does not reach it), and
// ONEDNN_MAX_CPU_ISA caps it further. Built without oneDNN (ZERORUN_HAVE_ONEDNN unset), every entry
// reports it unavailable and the GEMM runs on OpenBLAS.
#pragma once

#include <string>

#include "zerorun/kernels/gemm_backend.h"
#include "zerorun/kernels/ops.h"

namespace zerorun::kernels::cpu {

// Whether zerorun was built with oneDNN.
bool OnednnBuilt();
// The ISA oneDNN dispatches to here ("avx512_core_bf16", "avx2", ...); "" when not built with it.
// Applies the ZERORUN_ISA cap first if no oneDNN call has yet.
std::string OnednnIsa();
// Whether oneDNN computes bf16 (fp16) products natively here: its ISA has AVX512-BF16 or AMX
// (AVX512-FP16 or AMX-FP16). Without it a 16-bit GEMM is computed in fp32 on widened copies.
bool OnednnNative16(DType t);

// One GEMM of GemmParams semantics (p.batch and strides ignored: one item) on the calling thread, in
// the operands' own dtypes with fp32 accumulation; bias, when given, is fp32 (n values). a_type and
// b_type must be equal. Returns false, having written nothing, when oneDNN has no implementation for
// these dtypes here (the caller then widens to fp32).
bool OnednnGemm(const GemmParams& p, const float* bias32);
// Whether oneDNN's ISA here is AVX-512 or above (false when not built with it).
bool OnednnAvx512();
// Products OnednnGemm turns down although it could run them, because OpenBLAS's sgemm runs them much
// faster here: fp32 with A transposed (weight gradients) below AVX-512 (measured: onednn.cc).
bool OnednnDefersTransposedA(const GemmParams& p);

}  // namespace zerorun::kernels::cpu
