// GPU twins of the bulk dtype conversions in core/dtype.h (round to nearest even, IEEE NaN/Inf/
// subnormal handling via the CUDA intrinsics, which match the host's scalar functions).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "zerorun/core/cuda/convert.h"
#include "zerorun/core/cuda/cuda_check.h"

namespace zerorun::cuda {
namespace {

__global__ void F32ToF16Kernel(const float* src, __half* dst, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    dst[i] = __float2half_rn(src[i]);
  }
}
__global__ void F16ToF32Kernel(const __half* src, float* dst, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    dst[i] = __half2float(src[i]);
  }
}
__global__ void F32ToBF16Kernel(const float* src, __nv_bfloat16* dst, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    dst[i] = __float2bfloat16_rn(src[i]);
  }
}
__global__ void BF16ToF32Kernel(const __nv_bfloat16* src, float* dst, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    dst[i] = __bfloat162float(src[i]);
  }
}

unsigned Blocks(size_t n) {
  size_t b = (n + 255) / 256;
  return static_cast<unsigned>(b > 65535 ? 65535 : (b == 0 ? 1 : b));
}

}  // namespace

void Convert(const void* src, DType st, void* dst, DType dt, size_t n, void* stream) {
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  if (st == dt) {
    ZR_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * DTypeSize(st), cudaMemcpyDeviceToDevice, s));
    return;
  }
  if (st == DType::kF32 && dt == DType::kF16) {
    F32ToF16Kernel<<<Blocks(n), 256, 0, s>>>(static_cast<const float*>(src), static_cast<__half*>(dst), n);
  } else if (st == DType::kF16 && dt == DType::kF32) {
    F16ToF32Kernel<<<Blocks(n), 256, 0, s>>>(static_cast<const __half*>(src), static_cast<float*>(dst), n);
  } else if (st == DType::kF32 && dt == DType::kBF16) {
    F32ToBF16Kernel<<<Blocks(n), 256, 0, s>>>(static_cast<const float*>(src), static_cast<__nv_bfloat16*>(dst), n);
  } else if (st == DType::kBF16 && dt == DType::kF32) {
    BF16ToF32Kernel<<<Blocks(n), 256, 0, s>>>(static_cast<const __nv_bfloat16*>(src), static_cast<float*>(dst), n);
  } else {
    ZR_THROW(InvalidArgument, "cuda::Convert: {} -> {} is not supported", DTypeName(st), DTypeName(dt));
  }
  ZR_CUDA_CHECK(cudaGetLastError());
}

}  // namespace zerorun::cuda
