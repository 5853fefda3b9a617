// ZR_CUDA_CHECK(call): throws zerorun::Error naming the call, file:line and CUDA's message.
// Internal to CUDA sources (not installed).
#pragma once

#include <cuda_runtime.h>

#include "zerorun/core/error.h"

#define ZR_CUDA_CHECK(call)                                                                       \
  do {                                                                                            \
    cudaError_t zr_err_ = (call);                                                                 \
    if (zr_err_ != cudaSuccess) {                                                                 \
      throw ::zerorun::Error(::zerorun::Format("CUDA error at {}:{}: {} failed: {}", __FILE__,    \
                                               __LINE__, #call, cudaGetErrorString(zr_err_)));    \
    }                                                                                             \
  } while (0)
