// CUDA activations, one grid-stride thread per element, in fp32 with CUDA's accurate expf/erfcf:
//   gelu_tanh(x) = x s,  s = sigmoid(2u),  u = sqrt(2/pi) (x + 0.044715 x^3)   [0.5 (1 + tanh u) = s]
//     d/dx = s + 2 x s (1 - s) sqrt(2/pi) (1 + 3 * 0.044715 x^2)                [1 - tanh^2 u = 4 s (1 - s)]
//   gelu(x) = 0.5 x erfc(-x / sqrt 2),  d/dx = 0.5 erfc(-x / sqrt 2) + x phi(x)   [erfc: no cancellation]
//   silu(x) = x s(x),  d/dx = s (1 + x (1 - s));  swiglu(g, u) = silu(g) u
// (1 - s) is computed as 1 / (1 + e^{z}) rather than by subtraction, as the CPU backend does.
#include "zerorun/kernels/cuda/common.cuh"
#include "zerorun/kernels/cuda/cuda.h"

namespace zerorun::kernels::cuda {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;
constexpr float kGeluCubic = 0.044715f;

__device__ __forceinline__ float Sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }
__device__ __forceinline__ float OneMinusSigmoid(float z) { return 1.0f / (1.0f + expf(z)); }

__device__ __forceinline__ float Gelu(float x, GeluApprox a) {
  if (a == GeluApprox::kTanh) return x * Sigmoid(2.0f * kSqrt2OverPi * (x + kGeluCubic * x * x * x));
  return 0.5f * x * erfcf(-x * kInvSqrt2);
}

__device__ __forceinline__ float GeluGrad(float x, GeluApprox a) {
  if (a == GeluApprox::kTanh) {
    // As the CPU kernels: clamped to [-10, 10] (gelu' is 1 and ~0 there), so x^2 cannot overflow into
    // 0 * inf = NaN from |x| ~ 1.8e19 on; a NaN stays NaN (fmaxf would return the other operand).
    if (!isnan(x)) x = fminf(fmaxf(x, -10.0f), 10.0f);
    const float z = 2.0f * kSqrt2OverPi * (x + kGeluCubic * x * x * x);
    const float s = Sigmoid(z), one_minus_s = OneMinusSigmoid(z);
    return s + 2.0f * x * s * one_minus_s * kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
  }
  return 0.5f * erfcf(-x * kInvSqrt2) + x * kInvSqrt2Pi * expf(-0.5f * x * x);
}

template <typename T>
__global__ void GeluForwardKernel(T* out, const T* x, int64_t n, GeluApprox a) {
  ZR_GRID_STRIDE(i, n) out[i] = FromF32<T>(Gelu(ToF32(x[i]), a));
}
template <typename T>
__global__ void GeluBackwardKernel(T* dx, const T* dout, const T* x, int64_t n, GeluApprox a) {
  ZR_GRID_STRIDE(i, n) dx[i] = FromF32<T>(ToF32(dout[i]) * GeluGrad(ToF32(x[i]), a));
}
template <typename T>
__global__ void SiluForwardKernel(T* out, const T* x, int64_t n) {
  ZR_GRID_STRIDE(i, n) {
    const float v = ToF32(x[i]);
    out[i] = FromF32<T>(v * Sigmoid(v));
  }
}
template <typename T>
__global__ void SiluBackwardKernel(T* dx, const T* dout, const T* x, int64_t n) {
  ZR_GRID_STRIDE(i, n) {
    const float v = ToF32(x[i]), s = Sigmoid(v);
    dx[i] = FromF32<T>(ToF32(dout[i]) * s * (1.0f + v * OneMinusSigmoid(v)));
  }
}
// in (N, 2H) = [gate | up] per row; out (N, H).
template <typename T>
__global__ void SwiGluForwardKernel(T* out, const T* in, int64_t N, int64_t H) {
  ZR_GRID_STRIDE(i, N * H) {
    const int64_t r = i / H, j = i - r * H;
    const float g = ToF32(in[r * 2 * H + j]), u = ToF32(in[r * 2 * H + H + j]);
    out[i] = FromF32<T>(g * Sigmoid(g) * u);
  }
}
template <typename T>
__global__ void SwiGluBackwardKernel(T* din, const T* dout, const T* in, int64_t N, int64_t H) {
  ZR_GRID_STRIDE(i, N * H) {
    const int64_t r = i / H, j = i - r * H;
    const float g = ToF32(in[r * 2 * H + j]), u = ToF32(in[r * 2 * H + H + j]);
    const float dy = ToF32(dout[i]), s = Sigmoid(g);
    din[r * 2 * H + j] = FromF32<T>(dy * u * s * (1.0f + g * OneMinusSigmoid(g)));
    din[r * 2 * H + H + j] = FromF32<T>(dy * g * s);
  }
}

void GeluForward(void* out, const void* x, int64_t n, DType type, GeluApprox approx) {
  const Ctx ctx = CurrentCtx();
  const Launch l = ElementwiseLaunch(n);
  ZR_CUDA_DISPATCH_FLOAT(type, T,
      GeluForwardKernel<T><<<l.blocks, l.threads, 0, ctx.stream>>>(static_cast<T*>(out), static_cast<const T*>(x), n,
                                                                   approx));
  CheckLaunch("GeluForward");
}

void GeluBackward(void* dx, const void* dout, const void* x, int64_t n, DType type, GeluApprox approx) {
  const Ctx ctx = CurrentCtx();
  const Launch l = ElementwiseLaunch(n);
  ZR_CUDA_DISPATCH_FLOAT(type, T,
      GeluBackwardKernel<T><<<l.blocks, l.threads, 0, ctx.stream>>>(
          static_cast<T*>(dx), static_cast<const T*>(dout), static_cast<const T*>(x), n, approx));
  CheckLaunch("GeluBackward");
}

void SiluForward(void* out, const void* x, int64_t n, DType type) {
  const Ctx ctx = CurrentCtx();
  const Launch l = ElementwiseLaunch(n);
  ZR_CUDA_DISPATCH_FLOAT(type, T,
      SiluForwardKernel<T><<<l.blocks, l.threads, 0, ctx.stream>>>(static_cast<T*>(out), static_cast<const T*>(x), n));
  CheckLaunch("SiluForward");
}

void SiluBackward(void* dx, const void* dout, const void* x, int64_t n, DType type) {
  const Ctx ctx = CurrentCtx();
  const Launch l = ElementwiseLaunch(n);
  ZR_CUDA_DISPATCH_FLOAT(type, T,
      SiluBackwardKernel<T><<<l.blocks, l.threads, 0, ctx.stream>>>(static_cast<T*>(dx), static_cast<const T*>(dout),
                                                                    static_cast<const T*>(x), n));
  CheckLaunch("SiluBackward");
}

void SwiGluForward(void* out, const void* in, int64_t N, int64_t H, DType type) {
  const Ctx ctx = CurrentCtx();
  const Launch l = ElementwiseLaunch(N * H);
  ZR_CUDA_DISPATCH_FLOAT(type, T,
      SwiGluForwardKernel<T><<<l.blocks, l.threads, 0, ctx.stream>>>(static_cast<T*>(out), static_cast<const T*>(in),
                                                                     N, H));
  CheckLaunch("SwiGluForward");
}

void SwiGluBackward(void* din, const void* dout, const void* in, int64_t N, int64_t H, DType type) {
  const Ctx ctx = CurrentCtx();
  const Launch l = ElementwiseLaunch(N * H);
  ZR_CUDA_DISPATCH_FLOAT(type, T,
      SwiGluBackwardKernel<T><<<l.blocks, l.threads, 0, ctx.stream>>>(
          static_cast<T*>(din), static_cast<const T*>(dout), static_cast<const T*>(in), N, H));
  CheckLaunch("SwiGluBackward");
}

}  // namespace

void FillActivation(KernelTable& t) {
  t.gelu_forward = &GeluForward;
  t.gelu_backward = &GeluBackward;
  t.silu_forward = &SiluForward;
  t.silu_backward = &SiluBackward;
  t.swiglu_forward = &SwiGluForward;
  t.swiglu_backward = &SwiGluBackward;
}

}  // namespace zerorun::kernels::cuda
