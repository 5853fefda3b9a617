// The CUDA kernel table's families (internal to kernels/cuda/). Each .cu fills its entries of the
// table with functions of kernel_table.h's signatures; table.cc assembles and registers the table for
// DeviceType::kCUDA. Every entry runs on the calling thread's KernelDeviceScope device and stream.
#pragma once

#include "zerorun/kernels/kernel_table.h"

namespace zerorun::kernels::cuda {

void FillGemm(KernelTable& t);          // gemm (cuBLAS), bias_add, bias_backward
void FillEmbedding(KernelTable& t);     // embedding_forward/backward
void FillNorm(KernelTable& t);          // layernorm_*, rmsnorm_*
void FillActivation(KernelTable& t);    // gelu_*, silu_*, swiglu_*
void FillElementwise(KernelTable& t);   // add, axpy, scale, fill, copy, dropout_*
void FillReduce(KernelTable& t);        // sum_squares, all_finite
void FillSoftmax(KernelTable& t);       // softmax_*, cross_entropy
void FillAttention(KernelTable& t);     // attention_*

// The assembled table (name "cuda").
const KernelTable& CudaKernelTable();

}  // namespace zerorun::kernels::cuda
