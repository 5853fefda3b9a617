// CUDA elementwise ops: add, axpy, scale, fill, copy (any floating pair, fp64 included) and dropout.
// One grid-stride thread per element. Arithmetic is fp32 as on the CPU; copies and casts round exactly
// as core/dtype.h does (common.cuh), and dropout draws its mask from the same Philox words as the
// CPU (kernels/dropout_mask.h), computing x * (1/(1-p)) in fp32 like the reference, so masks and
// outputs equal the CPU's bit for bit.
#include "zerorun/kernels/cuda/common.cuh"
#include "zerorun/kernels/cuda/cuda.h"
#include "zerorun/kernels/dropout_mask.h"

namespace zerorun::kernels::cuda {
namespace {

template <typename T>
__global__ void AddKernel(T* out, const T* a, const T* b, int64_t n) {
  ZR_GRID_STRIDE(i, n) out[i] = FromF32<T>(ToF32(a[i]) + ToF32(b[i]));
}

__global__ void AxpyKernel(void* y, DType yt, const void* x, DType xt, float alpha, int64_t n) {
  ZR_GRID_STRIDE(i, n) StoreAny(y, yt, i, fmaf(alpha, LoadAny(x, xt, i), LoadAny(y, yt, i)));
}

template <typename T>
__global__ void ScaleKernel(T* out, const T* x, float alpha, int64_t n) {
  ZR_GRID_STRIDE(i, n) out[i] = FromF32<T>(alpha * ToF32(x[i]));
}

template <typename T>
__global__ void FillKernel(T* out, float value, int64_t n) {
  const T v = FromF32<T>(value);
  ZR_GRID_STRIDE(i, n) out[i] = v;
}

// Through fp32 unless fp64 is involved (so NaN payloads survive exactly as on the CPU), else through
// double as the reference does.
__global__ void CopyKernel(void* dst, DType dt, const void* src, DType st, int64_t n) {
  if (dt != DType::kF64 && st != DType::kF64) {
    ZR_GRID_STRIDE(i, n) StoreAny(dst, dt, i, LoadAny(src, st, i));
  } else {
    ZR_GRID_STRIDE(i, n) StoreAnyD(dst, dt, i, LoadAnyD(src, st, i));
  }
}

template <typename T>
__global__ void DropoutKernel(T* out, const T* x, int64_t n, uint32_t threshold, float scale, uint64_t seed,
                              uint64_t stream, uint64_t offset) {
  ZR_GRID_STRIDE(i, n) {
    const bool keep = DropoutKeep(seed, stream, offset + static_cast<uint64_t>(i), threshold);
    out[i] = FromF32<T>(keep ? ToF32(x[i]) * scale : 0.0f);
  }
}

void Add(void* out, const void* a, const void* b, int64_t n, DType type) {
  const Ctx ctx = CurrentCtx();
  const Launch l = ElementwiseLaunch(n);
  ZR_CUDA_DISPATCH_FLOAT(type, T,
      AddKernel<T><<<l.blocks, l.threads, 0, ctx.stream>>>(static_cast<T*>(out), static_cast<const T*>(a),
                                                           static_cast<const T*>(b), n));
  CheckLaunch("Add");
}

void Axpy(void* y, DType y_type, const void* x, DType x_type, float alpha, int64_t n) {
  const Ctx ctx = CurrentCtx();
  const Launch l = ElementwiseLaunch(n);
  AxpyKernel<<<l.blocks, l.threads, 0, ctx.stream>>>(y, y_type, x, x_type, alpha, n);
  CheckLaunch("Axpy");
}

void Scale(void* out, const void* x, float alpha, int64_t n, DType type) {
  const Ctx ctx = CurrentCtx();
  const Launch l = ElementwiseLaunch(n);
  ZR_CUDA_DISPATCH_FLOAT(type, T,
      ScaleKernel<T><<<l.blocks, l.threads, 0, ctx.stream>>>(static_cast<T*>(out), static_cast<const T*>(x), alpha,
                                                             n));
  CheckLaunch("Scale");
}

void Fill(void* out, float value, int64_t n, DType type) {
  const Ctx ctx = CurrentCtx();
  const Launch l = ElementwiseLaunch(n);
  ZR_CUDA_DISPATCH_FLOAT(type, T,
      FillKernel<T><<<l.blocks, l.threads, 0, ctx.stream>>>(static_cast<T*>(out), value, n));
  CheckLaunch("Fill");
}

void Copy(void* dst, DType dst_type, const void* src, DType src_type, int64_t n) {
  const Ctx ctx = CurrentCtx();
  if (dst_type == src_type) {
    ZR_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * DTypeSize(src_type), cudaMemcpyDeviceToDevice,
                                  ctx.stream));
    return;
  }
  const Launch l = ElementwiseLaunch(n);
  CopyKernel<<<l.blocks, l.threads, 0, ctx.stream>>>(dst, dst_type, src, src_type, n);
  CheckLaunch("Copy");
}

void Dropout(const char* op, void* out, const void* x, int64_t n, DType type, float p, uint64_t seed,
             uint64_t stream, uint64_t offset) {
  const Ctx ctx = CurrentCtx();
  if (p == 0.0f) {
    if (out != x) ZR_CUDA_CHECK(cudaMemcpyAsync(out, x, static_cast<size_t>(n) * DTypeSize(type),
                                                cudaMemcpyDeviceToDevice, ctx.stream));
    return;
  }
  const uint32_t threshold = DropoutThreshold(p);
  const float scale = 1.0f / (1.0f - p);
  const Launch l = ElementwiseLaunch(n);
  ZR_CUDA_DISPATCH_FLOAT(type, T,
      DropoutKernel<T><<<l.blocks, l.threads, 0, ctx.stream>>>(static_cast<T*>(out), static_cast<const T*>(x), n,
                                                               threshold, scale, seed, stream, offset));
  CheckLaunch(op);
}

void DropoutForward(void* out, const void* x, int64_t n, DType type, float p, uint64_t seed, uint64_t stream,
                    uint64_t offset) {
  Dropout("DropoutForward", out, x, n, type, p, seed, stream, offset);
}

void DropoutBackward(void* dx, const void* dout, int64_t n, DType type, float p, uint64_t seed, uint64_t stream,
                     uint64_t offset) {
  Dropout("DropoutBackward", dx, dout, n, type, p, seed, stream, offset);
}

}  // namespace

void FillElementwise(KernelTable& t) {
  t.add = &Add;
  t.axpy = &Axpy;
  t.scale = &Scale;
  t.fill = &Fill;
  t.copy = &Copy;
  t.dropout_forward = &DropoutForward;
  t.dropout_backward = &DropoutBackward;
}

}  // namespace zerorun::kernels::cuda
