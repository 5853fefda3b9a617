// Device-side bulk dtype conversion (fp32 <-> fp16/bf16), asynchronous on a cudaStream_t.
// Internal to CUDA builds (not installed).
#pragma once

#include <cstddef>

#include "zerorun/core/dtype.h"

namespace zerorun::cuda {
// `src` and `dst` are device pointers; `stream` is a cudaStream_t (nullptr: default stream).
void Convert(const void* src, DType src_type, void* dst, DType dst_type, size_t n, void* stream);
}  // namespace zerorun::cuda
