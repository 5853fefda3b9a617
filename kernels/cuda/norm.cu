// CUDA LayerNorm and RMSNorm, one warp per row (8 rows per block), fp32 statistics:
//   LayerNorm: mean, var = mean((x - mean)^2) (two passes over the row), rstd = 1/sqrt(var + eps)
//   RMSNorm:   rstd = 1/sqrt(mean(x^2) + eps)
// Backward, with xhat = (x - mean) rstd (mean 0 for RMSNorm) and g = dout * weight:
//   dx = rstd (g - mean(g) - xhat mean(g xhat))   (RMSNorm: no mean(g) term)
//   dweight += sum over rows of dout xhat, dbias += sum of dout: deterministic column sums.
#include "zerorun/kernels/cuda/column_sums.cuh"
#include "zerorun/kernels/cuda/common.cuh"
#include "zerorun/kernels/cuda/cuda.h"

namespace zerorun::kernels::cuda {
namespace {

constexpr int kRowsPerBlock = 8;

__device__ __forceinline__ float Weight(const void* w, DType t, int64_t c) { return w ? LoadAny(w, t, c) : 1.0f; }

// mean == nullptr: RMSNorm.
template <typename T>
__global__ void NormForwardKernel(T* out, float* mean, float* rstd, const T* x, const void* weight, const void* bias,
                                  int64_t N, int64_t C, float eps, DType param_type) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= N) return;
  const T* xr = x + row * C;
  float m = 0.0f, var = 0.0f;
  if (mean != nullptr) {
    float sum = 0.0f;
    for (int64_t c = lane; c < C; c += 32) sum += ToF32(xr[c]);
    m = WarpSum(sum) / static_cast<float>(C);
  }
  for (int64_t c = lane; c < C; c += 32) {
    const float d = ToF32(xr[c]) - m;
    var += d * d;
  }
  var = WarpSum(var) / static_cast<float>(C);
  const float r = 1.0f / sqrtf(var + eps);
  T* yr = out + row * C;
  for (int64_t c = lane; c < C; c += 32) {
    float v = (ToF32(xr[c]) - m) * r * Weight(weight, param_type, c);
    if (bias != nullptr) v += LoadAny(bias, param_type, c);
    yr[c] = FromF32<T>(v);
  }
  if (lane == 0) {
    if (mean != nullptr) mean[row] = m;
    rstd[row] = r;
  }
}

template <typename T>
__global__ void NormBackwardDxKernel(T* dx, const T* dout, const T* x, const void* weight, const float* mean,
                                     const float* rstd, int64_t N, int64_t C, DType param_type) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= N) return;
  const T* xr = x + row * C;
  const T* dyr = dout + row * C;
  const float m = mean != nullptr ? mean[row] : 0.0f, r = rstd[row];
  float g_sum = 0.0f, gx_sum = 0.0f;
  for (int64_t c = lane; c < C; c += 32) {
    const float g = ToF32(dyr[c]) * Weight(weight, param_type, c);
    g_sum += g;
    gx_sum += g * (ToF32(xr[c]) - m) * r;
  }
  const float g_mean = mean != nullptr ? WarpSum(g_sum) / static_cast<float>(C) : 0.0f;
  const float gx_mean = WarpSum(gx_sum) / static_cast<float>(C);
  T* dxr = dx + row * C;
  for (int64_t c = lane; c < C; c += 32) {
    const float xhat = (ToF32(xr[c]) - m) * r;
    const float g = ToF32(dyr[c]) * Weight(weight, param_type, c);
    dxr[c] = FromF32<T>(r * (g - g_mean - xhat * gx_mean));
  }
}

// (dout * xhat, dout) at (row, col), for the weight and bias gradients.
template <typename T>
struct NormGradTerms {
  const T* dout;
  const T* x;
  const float* mean;  // null: RMSNorm
  const float* rstd;
  int64_t C;
  __device__ void operator()(int64_t r, int64_t c, float (&v)[2]) const {
    const float dy = ToF32(dout[r * C + c]);
    const float xhat = (ToF32(x[r * C + c]) - (mean != nullptr ? mean[r] : 0.0f)) * rstd[r];
    v[0] = dy * xhat;
    v[1] = dy;
  }
};

void NormForward(const char* op, void* out, float* mean, float* rstd, const void* x, const void* weight,
                 const void* bias, int64_t N, int64_t C, float eps, DType act_type, DType param_type) {
  const Ctx ctx = CurrentCtx();
  const Launch l = WarpPerRowLaunch(N, kRowsPerBlock);
  ZR_CUDA_DISPATCH_FLOAT(act_type, T,
      NormForwardKernel<T><<<l.blocks, l.threads, 0, ctx.stream>>>(static_cast<T*>(out), mean, rstd,
                                                                   static_cast<const T*>(x), weight, bias, N, C, eps,
                                                                   param_type));
  CheckLaunch(op);
}

void NormBackward(const char* op, void* dx, void* dweight, void* dbias, const void* dout, const void* x,
                  const void* weight, const float* mean, const float* rstd, int64_t N, int64_t C, DType act_type,
                  DType param_type, DType grad_type) {
  const Ctx ctx = CurrentCtx();
  ZR_CUDA_DISPATCH_FLOAT(act_type, T, {
    if (dx != nullptr) {
      const Launch l = WarpPerRowLaunch(N, kRowsPerBlock);
      NormBackwardDxKernel<T><<<l.blocks, l.threads, 0, ctx.stream>>>(
          static_cast<T*>(dx), static_cast<const T*>(dout), static_cast<const T*>(x), weight, mean, rstd, N, C,
          param_type);
      CheckLaunch(op);
    }
    if (dweight != nullptr || dbias != nullptr) {
      NormGradTerms<T> f{static_cast<const T*>(dout), static_cast<const T*>(x), mean, rstd, C};
      ColumnSums<2>(ctx, f, N, C, ColumnOutputs<2>{{dweight, dbias}}, grad_type, op);
    }
  });
}

void LayerNormForward(void* out, float* mean, float* rstd, const void* x, const void* weight, const void* bias,
                      int64_t N, int64_t C, float eps, DType act_type, DType param_type) {
  NormForward("LayerNormForward", out, mean, rstd, x, weight, bias, N, C, eps, act_type, param_type);
}

void LayerNormBackward(void* dx, void* dweight, void* dbias, const void* dout, const void* x, const void* weight,
                       const float* mean, const float* rstd, int64_t N, int64_t C, DType act_type,
                       DType param_type, DType grad_type) {
  NormBackward("LayerNormBackward", dx, dweight, dbias, dout, x, weight, mean, rstd, N, C, act_type, param_type,
               grad_type);
}

void RMSNormForward(void* out, float* rstd, const void* x, const void* weight, int64_t N, int64_t C, float eps,
                    DType act_type, DType param_type) {
  NormForward("RMSNormForward", out, nullptr, rstd, x, weight, nullptr, N, C, eps, act_type, param_type);
}

void RMSNormBackward(void* dx, void* dweight, const void* dout, const void* x, const void* weight, const float* rstd,
                     int64_t N, int64_t C, DType act_type, DType param_type, DType grad_type) {
  NormBackward("RMSNormBackward", dx, dweight, nullptr, dout, x, weight, nullptr, rstd, N, C, act_type, param_type,
               grad_type);
}

}  // namespace

void FillNorm(KernelTable& t) {
  t.layernorm_forward = &LayerNormForward;
  t.layernorm_backward = &LayerNormBackward;
  t.rmsnorm_forward = &RMSNormForward;
  t.rmsnorm_backward = &RMSNormBackward;
}

}  // namespace zerorun::kernels::cuda
