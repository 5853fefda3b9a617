// The reference backend: plain loops, double accumulation, one rounding per stored value. It is the
// oracle every other backend is tested against, so it favours obviousness over speed.
#pragma once

#include "zerorun/kernels/kernel_table.h"

namespace zerorun::kernels::ref {

// Each family file sets its entries of the table.
void FillGemm(KernelTable& t);         // gemm, bias_add, bias_backward
void FillEmbedding(KernelTable& t);    // embedding_forward/backward
void FillNorm(KernelTable& t);         // layernorm_*, rmsnorm_*
void FillActivation(KernelTable& t);   // gelu_*, silu_*, swiglu_*
void FillElementwise(KernelTable& t);  // add, axpy, scale, fill, copy, dropout_*, sum_squares, all_finite
void FillSoftmax(KernelTable& t);      // softmax_*, cross_entropy
void FillAttention(KernelTable& t);    // attention_*

}  // namespace zerorun::kernels::ref
