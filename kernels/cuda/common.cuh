// Shared pieces of the CUDA kernels (internal to kernels/cuda/): storage-dtype loads and stores, dtype
// dispatch, warp and block reductions, the calling thread's device and stream (KernelDeviceScope),
// stream-ordered scratch memory, launch checks, and device-side error reports for bad tokens.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "zerorun/core/cuda/cuda_check.h"
#include "zerorun/core/dtype.h"
#include "zerorun/kernels/cuda/plan.h"
#include "zerorun/kernels/ops.h"

namespace zerorun::kernels::cuda {

// ---- storage dtypes --------------------------------------------------------------------------------

// Bit-exact twins of core/dtype.h's scalar conversions (round to nearest even; NaN keeps its sign and
// truncated payload with the quiet bit set; subnormals kept), so a device cast gives the same bits as
// the CPU's for every input, NaN included. (Needs -ftz=false, nvcc's default.)
__device__ __forceinline__ uint16_t F32ToF16Bits(float f) {
  const uint32_t x = __float_as_uint(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (a >= 0x38800000u) return static_cast<uint16_t>(sign | ((a - 0x38000000u + 0xfffu + ((a >> 13) & 1u)) >> 13));
  const float t = __fadd_rn(__uint_as_float(a), 0.5f);
  return static_cast<uint16_t>(sign | (__float_as_uint(t) - 0x3f000000u));
}
__device__ __forceinline__ float F16BitsToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return __uint_as_float(sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0u));
  if (exp == 0) return __uint_as_float(sign | __float_as_uint(__fmul_rn(static_cast<float>(mant), 5.9604644775390625e-8f)));
  return __uint_as_float(sign | ((exp + 112u) << 23) | (mant << 13));
}
__device__ __forceinline__ uint16_t F32ToBF16Bits(float f) {
  const uint32_t x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
__device__ __forceinline__ float BF16BitsToF32(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }

__device__ __forceinline__ float ToF32(float v) { return v; }
__device__ __forceinline__ float ToF32(__half v) { return F16BitsToF32(__half_as_ushort(v)); }
__device__ __forceinline__ float ToF32(__nv_bfloat16 v) { return BF16BitsToF32(__bfloat16_as_ushort(v)); }

template <typename T>
__device__ __forceinline__ T FromF32(float v);
template <>
__device__ __forceinline__ float FromF32<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half FromF32<__half>(float v) { return __ushort_as_half(F32ToF16Bits(v)); }
template <>
__device__ __forceinline__ __nv_bfloat16 FromF32<__nv_bfloat16>(float v) {
  return __ushort_as_bfloat16(F32ToBF16Bits(v));
}

// Element i of a buffer whose dtype is known only at run time (parameters of mixed-dtype ops; the
// switch is uniform across a warp). fp64 is read as fp32 except by the D variants.
__device__ __forceinline__ float LoadAny(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(p)[i];
    case DType::kF16: return F16BitsToF32(static_cast<const uint16_t*>(p)[i]);
    case DType::kBF16: return BF16BitsToF32(static_cast<const uint16_t*>(p)[i]);
    case DType::kF64: return static_cast<float>(static_cast<const double*>(p)[i]);
    default: return 0.0f;
  }
}
__device__ __forceinline__ double LoadAnyD(const void* p, DType t, int64_t i) {
  if (t == DType::kF64) return static_cast<const double*>(p)[i];
  return static_cast<double>(LoadAny(p, t, i));
}
__device__ __forceinline__ void StoreAny(void* p, DType t, int64_t i, float v) {
  switch (t) {
    case DType::kF32: static_cast<float*>(p)[i] = v; break;
    case DType::kF16: static_cast<uint16_t*>(p)[i] = F32ToF16Bits(v); break;
    case DType::kBF16: static_cast<uint16_t*>(p)[i] = F32ToBF16Bits(v); break;
    case DType::kF64: static_cast<double*>(p)[i] = v; break;
    default: break;
  }
}
// As the reference's StoreD: a double goes to fp32 first, then to 16 bits.
__device__ __forceinline__ void StoreAnyD(void* p, DType t, int64_t i, double v) {
  if (t == DType::kF64) {
    static_cast<double*>(p)[i] = v;
  } else {
    StoreAny(p, t, i, static_cast<float>(v));
  }
}

// Calls body with `using T = <storage type of dtype>` for fp32, fp16 and bf16.
#define ZR_CUDA_DISPATCH_FLOAT(dtype, T, ...)                      \
  switch (dtype) {                                                 \
    case ::zerorun::DType::kF32: {                                 \
      using T = float;                                             \
      __VA_ARGS__;                                                 \
      break;                                                       \
    }                                                              \
    case ::zerorun::DType::kF16: {                                 \
      using T = __half;                                            \
      __VA_ARGS__;                                                 \
      break;                                                       \
    }                                                              \
    case ::zerorun::DType::kBF16: {                                \
      using T = __nv_bfloat16;                                     \
      __VA_ARGS__;                                                 \
      break;                                                       \
    }                                                              \
    default:                                                       \
      ZR_THROW(InvalidArgument, "cuda kernels: dtype {} is not fp32, fp16 or bf16", DTypeName(dtype)); \
  }

// Grid-stride loop over [0, n) with a 64-bit index.
#define ZR_GRID_STRIDE(i, n)                                                                  \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);     \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// ---- reductions --------------------------------------------------------------------------------------

template <typename V>
__device__ __forceinline__ V WarpSum(V v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024), in a fixed order; every thread gets
// the total. `shared` holds 32 values. Ends with a barrier, so `shared` may be reused right after.
template <typename V>
__device__ V BlockSum(V v, V* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = WarpSum(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  V total = lane < warps ? shared[lane] : V(0);
  total = WarpSum(total);
  __syncthreads();
  return total;
}
__device__ inline float BlockMax(float v, float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = WarpMax(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float m = lane < warps ? shared[lane] : -INFINITY;
  m = WarpMax(m);
  __syncthreads();
  return m;
}

// *out = sum of x[0, n) in double, added in a fixed order (one block; launch with 1024 threads).
template <typename V>
__global__ void SumInOrderKernel(const V* x, int64_t n, double* out) {
  __shared__ double shared[32];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += static_cast<double>(x[i]);
  acc = BlockSum(acc, shared);
  if (threadIdx.x == 0) *out = acc;
}

// ---- host side: device, stream, scratch, checks ---------------------------------------------------

// The calling thread's kernel device (KernelDeviceScope) made current, and its stream.
struct Ctx {
  int device = 0;
  cudaStream_t stream = nullptr;
};
Ctx CurrentCtx();

// Throws Error naming the op when the last launch failed.
void CheckLaunch(const char* op);
// Waits for the stream; a device fault surfaces as an Error naming the op.
void SyncStream(const Ctx& ctx, const char* op);

// Stream-ordered device memory (cudaMallocAsync on the device's pool, kept cached between calls):
// valid for work enqueued on ctx.stream until the Scratch is destroyed, which frees it in stream order.
class Scratch {
 public:
  Scratch(const Ctx& ctx, size_t bytes);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* get() const { return ptr_; }
  template <typename T>
  T* as(size_t byte_offset = 0) const {
    return reinterpret_cast<T*>(static_cast<char*>(ptr_) + byte_offset);
  }

 private:
  cudaStream_t stream_;
  void* ptr_ = nullptr;
};

// First invalid token of an op, found on the device: the smallest bad index (or INT64_MAX).
// Kernels call Report(); the host then calls ThrowIfBad after the stream is synchronised.
struct BadIndex {
  unsigned long long* slot = nullptr;  // device
  __device__ void Report(int64_t i) const { atomicMin(slot, static_cast<unsigned long long>(i)); }
};
// Allocates and initialises the slot in `scratch` (8 bytes at `offset`).
BadIndex MakeBadIndex(const Ctx& ctx, const Scratch& scratch, size_t offset);
// Copies the slot back (synchronising the stream); when an index was reported, reads the offending
// value and throws InvalidArgument "<op>: <arg>[i] = v is outside [0, V)" as the host check would.
void ThrowIfBad(const Ctx& ctx, BadIndex bad, const char* op, const char* arg, const int32_t* values, int64_t V);

}  // namespace zerorun::kernels::cuda
