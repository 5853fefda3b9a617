// fp32 <-> fp16/bf16 row conversion for the kernels (internal): core's converters (dtype.h), with a
// 16-lane AVX-512 path where the CPU has it. Bit-identical to core's scalar conversions (tested).
#pragma once

#include <cstddef>
#include <cstdint>

#include "zerorun/core/dtype.h"

namespace zerorun::kernels {

// dst[0..n) = src (fp32, fp16, bf16 or fp64) as fp32.
void RowToF32(const void* src, DType t, float* dst, size_t n);
// dst (fp32, fp16, bf16 or fp64) = src rounded once. src and dst do not overlap.
void RowFromF32(const float* src, void* dst, DType t, size_t n);

namespace detail {
// Handle a prefix (a multiple of 16) and return its length.
size_t F16ToF32Avx512(const uint16_t* src, float* dst, size_t n);
size_t BF16ToF32Avx512(const uint16_t* src, float* dst, size_t n);
size_t F32ToF16Avx512(const float* src, uint16_t* dst, size_t n);
size_t F32ToBF16Avx512(const float* src, uint16_t* dst, size_t n);
}  // namespace detail

}  // namespace zerorun::kernels
