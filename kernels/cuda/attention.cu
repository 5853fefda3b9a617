// CUDA causal multi-head self-attention: batched cuBLAS GEMMs over the B * NH heads with a fused
// masked softmax between them (the cuBLAS path; a fused flash-style kernel that skips the upper
// triangle and never materialises P is the planned replacement). For one head, q, k, v (T, HS):
//   forward:  S = q k^T / sqrt(HS) (into `att`, fp32),  P = softmax over s <= t (in place, 0 above),
//             out = P v
//   backward: dv = P^T dout,  dP = dout v^T,  dS = P (dP - rowsum(P dP)) / sqrt(HS),
//             dq = dS k,  dk = dS^T q
// q, k, v and dout are first permuted from (B, T, 3C) / (B, T, C) into head-major (B, NH, T, HS) in the
// storage dtype; GEMM results are fp32 and rounded once when permuted back. With 16-bit storage, P and
// dS enter their GEMMs rounded to the storage dtype (as FlashAttention and PyTorch's math attention
// do), so 16-bit results carry that rounding beyond the reference's (docs/gpu.md gives the tolerance).
#include "zerorun/kernels/cuda/common.cuh"
#include "zerorun/kernels/cuda/cuda.h"

namespace zerorun::kernels::cuda {
namespace {

// qkv (B, T, 3C) -> q, k, v (B, NH, T, HS), same dtype.
template <typename T>
__global__ void PermuteQkvKernel(const T* qkv, T* q, T* k, T* v, int64_t B, int64_t T_len, int64_t C, int64_t NH) {
  const int64_t HS = C / NH;
  ZR_GRID_STRIDE(i, B * T_len * 3 * C) {
    const int64_t bt = i / (3 * C), rem = i - bt * 3 * C;
    const int64_t which = rem / C, h = (rem - which * C) / HS, d = rem % HS;
    const int64_t b = bt / T_len, t = bt - b * T_len;
    T* dst = which == 0 ? q : (which == 1 ? k : v);
    dst[HeadOffset(b, h, t, d, T_len, NH, HS)] = qkv[i];
  }
}

// x (B, T, C) -> (B, NH, T, HS), same dtype.
template <typename T>
__global__ void PermuteKernel(const T* x, T* y, int64_t B, int64_t T_len, int64_t C, int64_t NH) {
  const int64_t HS = C / NH;
  ZR_GRID_STRIDE(i, B * T_len * C) {
    const int64_t bt = i / C, rem = i - bt * C, h = rem / HS, d = rem % HS;
    const int64_t b = bt / T_len, t = bt - b * T_len;
    y[HeadOffset(b, h, t, d, T_len, NH, HS)] = x[i];
  }
}

// fp32 (B, NH, T, HS) -> out (B, T, C), rounded once.
template <typename T>
__global__ void UnpermuteKernel(const float* x, T* out, int64_t B, int64_t T_len, int64_t C, int64_t NH) {
  const int64_t HS = C / NH;
  ZR_GRID_STRIDE(i, B * T_len * C) {
    const int64_t bt = i / C, rem = i - bt * C, h = rem / HS, d = rem % HS;
    const int64_t b = bt / T_len, t = bt - b * T_len;
    out[i] = FromF32<T>(x[HeadOffset(b, h, t, d, T_len, NH, HS)]);
  }
}

// fp32 dq, dk, dv (B, NH, T, HS) -> dqkv (B, T, 3C), rounded once.
template <typename T>
__global__ void UnpermuteQkvKernel(const float* dq, const float* dk, const float* dv, T* dqkv, int64_t B,
                                   int64_t T_len, int64_t C, int64_t NH) {
  const int64_t HS = C / NH;
  ZR_GRID_STRIDE(i, B * T_len * 3 * C) {
    const int64_t bt = i / (3 * C), rem = i - bt * 3 * C;
    const int64_t which = rem / C, h = (rem - which * C) / HS, d = rem % HS;
    const int64_t b = bt / T_len, t = bt - b * T_len;
    const float* src = which == 0 ? dq : (which == 1 ? dk : dv);
    dqkv[i] = FromF32<T>(src[HeadOffset(b, h, t, d, T_len, NH, HS)]);
  }
}

constexpr int kAttRowThreads = 128;

// One block per row (bh, t) of the (T, T) scores: softmax over s <= t in place, 0 for s > t; and the
// probabilities also rounded to T (16-bit storage) into p16 when it is not null.
template <typename T>
__global__ void CausalSoftmaxKernel(float* att, T* p16, int64_t T_len) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const int64_t t = row % T_len;
  float* a = att + row * T_len;
  float mx = -INFINITY;
  for (int64_t s = threadIdx.x; s <= t; s += blockDim.x) mx = fmaxf(mx, a[s]);
  mx = BlockMax(mx, shared);
  float sum = 0.0f;
  for (int64_t s = threadIdx.x; s <= t; s += blockDim.x) sum += expf(a[s] - mx);
  sum = BlockSum(sum, shared);
  const float inv = 1.0f / sum;
  for (int64_t s = threadIdx.x; s < T_len; s += blockDim.x) {
    const float p = s <= t ? expf(a[s] - mx) * inv : 0.0f;
    a[s] = p;
    if (p16 != nullptr) p16[row * T_len + s] = FromF32<T>(p);
  }
}

// dS = P (dP - rowsum(P dP)) * scale per row, into ds (fp32 in place over dp, or T).
template <typename T>
__global__ void SoftmaxGradKernel(const float* att, float* dp, T* ds16, int64_t T_len, float scale) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const float* p = att + row * T_len;
  float* g = dp + row * T_len;
  float dot = 0.0f;
  for (int64_t s = threadIdx.x; s < T_len; s += blockDim.x) dot += p[s] * g[s];
  dot = BlockSum(dot, shared);
  for (int64_t s = threadIdx.x; s < T_len; s += blockDim.x) {
    const float d = p[s] * (g[s] - dot) * scale;
    if (ds16 != nullptr) {
      ds16[row * T_len + s] = FromF32<T>(d);
    } else {
      g[s] = d;
    }
  }
}

// The device steps of plan.h's RunAttentionForward/Backward.
template <typename T>
class CudaAttentionOps {
 public:
  CudaAttentionOps(const Ctx& ctx, const AttentionDims& d, const char* op) : ctx_(ctx), d_(d), op_(op) {}
  void PermuteQkv(const void* qkv, void* q, void* k, void* v) {
    PermuteQkvKernel<T><<<Blocks(3 * d_.C), kThreads, 0, ctx_.stream>>>(
        static_cast<const T*>(qkv), static_cast<T*>(q), static_cast<T*>(k), static_cast<T*>(v), d_.B, d_.T, d_.C,
        d_.NH);
    CheckLaunch(op_);
  }
  void Permute(const void* x, void* y) {
    PermuteKernel<T><<<Blocks(d_.C), kThreads, 0, ctx_.stream>>>(static_cast<const T*>(x), static_cast<T*>(y), d_.B,
                                                                 d_.T, d_.C, d_.NH);
    CheckLaunch(op_);
  }
  void Unpermute(const float* x, void* out) {
    UnpermuteKernel<T><<<Blocks(d_.C), kThreads, 0, ctx_.stream>>>(x, static_cast<T*>(out), d_.B, d_.T, d_.C, d_.NH);
    CheckLaunch(op_);
  }
  void UnpermuteQkv(const float* dq, const float* dk, const float* dv, void* dqkv) {
    UnpermuteQkvKernel<T><<<Blocks(3 * d_.C), kThreads, 0, ctx_.stream>>>(dq, dk, dv, static_cast<T*>(dqkv), d_.B,
                                                                          d_.T, d_.C, d_.NH);
    CheckLaunch(op_);
  }
  void CausalSoftmax(float* att, void* p16) {
    CausalSoftmaxKernel<T><<<d_.heads() * d_.T, kAttRowThreads, 0, ctx_.stream>>>(att, static_cast<T*>(p16), d_.T);
    CheckLaunch(op_);
  }
  void SoftmaxGrad(const float* att, float* dp, void* ds16, float scale) {
    SoftmaxGradKernel<T><<<d_.heads() * d_.T, kAttRowThreads, 0, ctx_.stream>>>(att, dp, static_cast<T*>(ds16),
                                                                                 d_.T, scale);
    CheckLaunch(op_);
  }
  void Round(const float* src, void* dst, int64_t n) { CudaKernelTable().copy(dst, d_.type, src, DType::kF32, n); }
  void Gemm(const GemmParams& p) { CudaKernelTable().gemm(p); }

 private:
  // Blocks for B * T rows of `row_elems` elements.
  int64_t Blocks(int64_t row_elems) const { return ElementwiseLaunch(d_.B * d_.T * row_elems).blocks; }
  Ctx ctx_;
  AttentionDims d_;
  const char* op_;
};

void AttentionForward(void* out, float* att, const void* qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                      DType type) {
  const Ctx ctx = CurrentCtx();
  const AttentionDims d{B, T, C, NH, type};
  Scratch s(ctx, PlanAttentionScratch(B, T, C, NH, type, /*backward=*/false).bytes);
  ZR_CUDA_DISPATCH_FLOAT(type, T_, {
    CudaAttentionOps<T_> ops(ctx, d, "AttentionForward");
    RunAttentionForward(ops, d, out, att, qkv, s.as<char>());
  });
}

void AttentionBackward(void* dqkv, const void* dout, const void* qkv, const float* att, int64_t B, int64_t T,
                       int64_t C, int64_t NH, DType type) {
  const Ctx ctx = CurrentCtx();
  const AttentionDims d{B, T, C, NH, type};
  Scratch s(ctx, PlanAttentionScratch(B, T, C, NH, type, /*backward=*/true).bytes);
  ZR_CUDA_DISPATCH_FLOAT(type, T_, {
    CudaAttentionOps<T_> ops(ctx, d, "AttentionBackward");
    RunAttentionBackward(ops, d, dqkv, dout, qkv, att, s.as<char>());
  });
}

}  // namespace

void FillAttention(KernelTable& t) {
  t.attention_forward = &AttentionForward;
  t.attention_backward = &AttentionBackward;
}

}  // namespace zerorun::kernels::cuda
