// The CPU backend: SIMD kernels picked at run time (core/cpu_features.h) and multithreaded through
// ThreadPool::Default(). Every entry is safe to call from several threads at once; scratch lives in
// thread_local buffers (scratch.h). The table starts from ref/ and every family below replaces it.
#pragma once

#include "zerorun/kernels/kernel_table.h"

namespace zerorun::kernels::cpu {

void FillGemm(KernelTable& t);         // gemm (OpenBLAS sgemm), bias_add, bias_backward
void FillElementwise(KernelTable& t);  // add, axpy, scale, fill, copy, dropout_*, sum_squares, all_finite
void FillActivation(KernelTable& t);   // gelu_*, silu_*, swiglu_*
void FillNorm(KernelTable& t);         // layernorm_*, rmsnorm_*
void FillSoftmax(KernelTable& t);      // softmax_*, cross_entropy
void FillAttention(KernelTable& t);    // attention_*
void FillEmbedding(KernelTable& t);    // embedding_*

}  // namespace zerorun::kernels::cpu
