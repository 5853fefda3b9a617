// Causal self-attention: two Linear children around the attention core. The core is, by default,
// kernels::AttentionForward/Backward (the fused op; the CPU one skips the causal upper blocks and runs
// bf16 products natively); AttentionOptions::fused_kernel = false composes it here from the GEMM
// kernel (strided over heads, in parallel over the batch) and a private causal softmax, and the tests
// check the two agree.
//
// Per batch row b and head h, with q, k, v the (T, HS) slices of qkv (row stride 3C):
//   S = q k^T / sqrt(HS)          (T, T) fp32      A = causal_softmax(S)       y = A v   (T, HS)
// backward, from dy:
//   dA = dy v^T    dv = A^T dy    dS = A * (dA - rowsum(dA * A))    dq = dS k / sqrt(HS)    dk = dS^T q / sqrt(HS)
#include "zerorun/runtime/nn/attention.h"

#include "zerorun/runtime/nn/flops.h"

#include <cmath>
#include <limits>

#include "zerorun/core/thread_pool.h"
#include "zerorun/kernels/ops.h"

namespace zerorun::nn {

namespace {

using kernels::GemmParams;
using kernels::Trans;

// Row t of S (T columns) becomes softmax over columns [0, t], zeros after. In place, fp32.
void CausalSoftmaxRows(float* s, int64_t rows, int64_t T) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = s + r * T;
    const int64_t t = r % T, n = t + 1;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) mx = std::max(mx, row[j]);
    float sum = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
      row[j] = std::exp(row[j] - mx);
      sum += row[j];
    }
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < n; ++j) row[j] *= inv;
    for (int64_t j = n; j < T; ++j) row[j] = 0.0f;
  }
}

// dS = A * (dA - sum(dA * A)) per row, in place over dA (masked entries are 0 in A, so 0 in dS).
void CausalSoftmaxBackwardRows(float* da, const float* a, int64_t rows, int64_t T) {
  for (int64_t r = 0; r < rows; ++r) {
    float* d = da + r * T;
    const float* y = a + r * T;
    const int64_t n = r % T + 1;
    float dot = 0.0f;
    for (int64_t j = 0; j < n; ++j) dot += d[j] * y[j];
    for (int64_t j = 0; j < n; ++j) d[j] = y[j] * (d[j] - dot);
    for (int64_t j = n; j < T; ++j) d[j] = 0.0f;
  }
}

// One strided-over-heads GEMM for batch row b: C_h = alpha * op(A_h) op(B_h) (+ beta C_h), h < NH.
struct HeadGemm {
  Trans ta, tb;
  int64_t m, n, k;
  float alpha;
  const void* a; DType at; int64_t lda, sa;
  const void* b; DType bt; int64_t ldb, sb;
  void* c; DType ct; int64_t ldc, sc;
  int64_t heads;
  void Run() const {
    GemmParams p;
    p.trans_a = ta, p.trans_b = tb, p.m = m, p.n = n, p.k = k, p.alpha = alpha, p.beta = 0.0f;
    p.a = a, p.a_type = at, p.lda = lda, p.stride_a = sa;
    p.b = b, p.b_type = bt, p.ldb = ldb, p.stride_b = sb;
    p.c = c, p.c_type = ct, p.ldc = ldc, p.stride_c = sc;
    p.batch = heads;
    kernels::Gemm(p);
  }
};

const char* Ptr(const Tensor& t, int64_t elems) { return static_cast<const char*>(t.data()) + elems * DTypeSize(t.dtype()); }
char* MPtr(const Tensor& t, int64_t elems) { return static_cast<char*>(t.data()) + elems * DTypeSize(t.dtype()); }

}  // namespace

CausalSelfAttention::CausalSelfAttention(int64_t dim, int64_t n_head, AttentionOptions options)
    : Module("CausalSelfAttention"), C_(dim), NH_(n_head), dtype_(options.dtype), fused_(options.fused_kernel) {
  if (C_ <= 0 || NH_ <= 0 || C_ % NH_ != 0) {
    ZR_THROW(InvalidArgument, "CausalSelfAttention: dim {} must be a positive multiple of n_head {}", C_, NH_);
  }
  LinearOptions lo;
  lo.bias = options.bias;
  lo.dtype = dtype_;
  lo.weight_init = options.weight_init;
  qkv_ = AddModule("qkv", std::make_unique<Linear>(C_, 3 * C_, lo));
  lo.weight_init = options.proj_init;
  proj_ = AddModule("proj", std::make_unique<Linear>(C_, C_, lo));
  drop_ = AddModule("drop", std::make_unique<Dropout>(options.dropout));
}

Tensor CausalSelfAttention::OnForward(const Tensor& x) {
  CheckInput(*this, x, dtype_, C_);
  if (x.ndim() != 3) ZR_THROW(InvalidArgument, "{}: expected (B, T, C), got {}", Describe(), ShapeToString(x.shape()));
  const int64_t B = x.size(0), T = x.size(1), C = C_, HS = C_ / NH_, NH = NH_;
  Tensor qkv = qkv_->Forward(x);  // (B, T, 3C)
  Tensor y = NewActivation({B, T, C}, dtype_);
  Tensor att = NewActivation({B, NH, T, T}, DType::kF32);
  // The composed path loops over host memory; device tensors take the kernel op (the device's table).
  const bool x_is_host = x.device().is_cpu();
  if (fused_ || !x_is_host) {
    kernels::AttentionForward(y.data(), att.data_as<float>(), qkv.data(), B, T, C, NH, dtype_);
  } else {
    const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
    ParallelFor(0, B, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t q0 = b * T * 3 * C;  // element offset of (b, 0, q) in qkv
        float* a = att.data_as<float>() + b * NH * T * T;
        HeadGemm{Trans::kN, Trans::kT, T, T, HS, scale, Ptr(qkv, q0), dtype_, 3 * C, HS, Ptr(qkv, q0 + C), dtype_,
                 3 * C, HS, a, DType::kF32, T, T * T, NH}.Run();
        CausalSoftmaxRows(a, NH * T, T);
        HeadGemm{Trans::kN, Trans::kN, T, HS, T, 1.0f, a, DType::kF32, T, T * T, Ptr(qkv, q0 + 2 * C), dtype_, 3 * C,
                 HS, MPtr(y, b * T * C), dtype_, C, HS, NH}.Run();
      }
    });
  }
  CountForwardMacs(2 * B * T * T * C);  // Q·Kᵀ and A·V, every head (HS·NH = C), the full T×T
  if (training()) qkv_out_ = qkv, att_ = att;
  return drop_->Forward(proj_->Forward(y));
}

Tensor CausalSelfAttention::OnBackward(const Tensor& dy) {
  ZR_CHECK(qkv_out_.defined(), "{}: backward without saved activations", Describe());
  const int64_t B = qkv_out_.size(0), T = qkv_out_.size(1), C = C_, HS = C_ / NH_, NH = NH_;
  Tensor dattn = proj_->Backward(drop_->Backward(dy));  // (B, T, C)
  Tensor dqkv = NewActivation({B, T, 3 * C}, dtype_);
  const bool x_is_host = dqkv.device().is_cpu();
  if (fused_ || !x_is_host) {
    kernels::AttentionBackward(dqkv.data(), dattn.data(), qkv_out_.data(), att_.data_as<float>(), B, T, C, NH, dtype_);
  } else {
    const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
    Tensor dA = NewActivation({B, NH, T, T}, DType::kF32);
    const Tensor& qkv = qkv_out_;
    ParallelFor(0, B, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t q0 = b * T * 3 * C;
        const float* a = att_.data_as<float>() + b * NH * T * T;
        float* da = dA.data_as<float>() + b * NH * T * T;
        const char* dyb = Ptr(dattn, b * T * C);
        // dA = dy v^T; dv = A^T dy
        HeadGemm{Trans::kN, Trans::kT, T, T, HS, 1.0f, dyb, dtype_, C, HS, Ptr(qkv, q0 + 2 * C), dtype_, 3 * C, HS, da,
                 DType::kF32, T, T * T, NH}.Run();
        HeadGemm{Trans::kT, Trans::kN, T, HS, T, 1.0f, a, DType::kF32, T, T * T, dyb, dtype_, C, HS,
                 MPtr(dqkv, q0 + 2 * C), dtype_, 3 * C, HS, NH}.Run();
        CausalSoftmaxBackwardRows(da, a, NH * T, T);
        // dq = dS k * scale; dk = dS^T q * scale
        HeadGemm{Trans::kN, Trans::kN, T, HS, T, scale, da, DType::kF32, T, T * T, Ptr(qkv, q0 + C), dtype_, 3 * C, HS,
                 MPtr(dqkv, q0), dtype_, 3 * C, HS, NH}.Run();
        HeadGemm{Trans::kT, Trans::kN, T, HS, T, scale, da, DType::kF32, T, T * T, Ptr(qkv, q0), dtype_, 3 * C, HS,
                 MPtr(dqkv, q0 + C), dtype_, 3 * C, HS, NH}.Run();
      }
    });
  }
  OnReleaseActivations();
  return qkv_->Backward(dqkv);
}

}  // namespace zerorun::nn
