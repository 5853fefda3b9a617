// The CPU backend: SIMD kernels picked at run time (core/cpu_features.h) and multithreaded through
// ThreadPool::Default(). Families not yet specialised keep the reference entries. Every entry is
// safe to call from several threads at once; scratch lives in thread_local buffers.
#pragma once

#include "zerorun/kernels/kernel_table.h"

namespace zerorun::kernels::cpu {

void FillGemm(KernelTable& t);         // gemm (OpenBLAS sgemm), bias_add, bias_backward
void FillElementwise(KernelTable& t);  // add, axpy, scale, fill, copy, dropout_*, sum_squares, all_finite
void FillActivation(KernelTable& t);   // gelu_*, silu_*, swiglu_*
void FillNorm(KernelTable& t);         // layernorm_*, rmsnorm_*
void FillSoftmax(KernelTable& t);      // softmax_*, cross_entropy

}  // namespace zerorun::kernels::cpu
