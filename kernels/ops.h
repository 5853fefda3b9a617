// The kernel entry points: math over raw host buffers, the layer ops a transformer needs.
//
// Every op takes raw pointers, element counts and storage dtypes (fp32, fp16, bf16), so a cuda/
// twin can implement the same table (kernels/kernel_table.h). Arithmetic is always fp32 (or wider);
// a 16-bit result is rounded once to its storage dtype. Norm statistics, softmax, attention
// probabilities and cross-entropy are fp32. Each entry validates its arguments (InvalidArgument
// naming the op and argument) and then runs the active backend: `cpu` (SIMD + the core thread pool)
// unless ZERORUN_KERNELS=ref or SetKernelBackend(kRef) selects `ref` (plain loops, the oracle).
//
// Conventions shared by every op:
//  - Tensors are row-major and contiguous unless a leading dimension is given. Shapes are in the
//    comments: B batch, T sequence, C channels, NH heads, HS = C / NH, V vocabulary, N rows.
//  - Backward ops WRITE input gradients (dx = ...) and ACCUMULATE parameter gradients (dw += ...),
//    so parameter gradients sum over micro-batches and tied uses; zero them with Fill first.
//    A null parameter-gradient pointer skips that gradient (frozen parameter).
//  - Pointers need no alignment beyond their element type. Output buffers must not overlap inputs
//    unless the op says so. Sizes of 0 are allowed (nothing happens; pointers may then be null).
//  - Thread safety: every op may be called concurrently from several threads on disjoint outputs
//    (the local comm backend runs ranks as threads). Scratch is per call or per thread.
//  - Devices: ops run on the calling thread's kernel device (KernelDeviceScope below; the CPU unless a
//    scope says otherwise). On a CUDA device every pointer is device memory, work is enqueued on the
//    scope's stream in call order and the call returns before it completes, except for ops that
//    return a value to the host (CrossEntropy, SumSquares, AllFinite) or must report bad tokens or
//    targets (EmbeddingForward/Backward, CrossEntropy): those wait for the stream.
#pragma once

#include <cstddef>
#include <cstdint>

#include "zerorun/core/device.h"
#include "zerorun/core/dtype.h"

namespace zerorun::kernels {

// ---- backend selection ---------------------------------------------------------------------------

enum class Backend : uint8_t { kRef, kCpu };
// The backend the public entries run. Initially kCpu, or kRef when ZERORUN_KERNELS=ref
// (ZERORUN_KERNELS=cpu|ref; anything else throws ConfigError on first use).
Backend ActiveBackend();
// Process-wide switch (tests, debugging). Safe to call at any time; calls in flight finish on the
// backend they started with.
void SetKernelBackend(Backend backend);
const char* BackendName(Backend backend);

// ---- device selection ------------------------------------------------------------------------------

// Makes the calling thread's kernel calls run on `device`, ordered on `stream` (nullptr: the device's
// default stream), until the scope ends; scopes nest and restore the previous device and stream. The
// CPU device runs the ActiveBackend() table; a CUDA device runs the CUDA table (kernels/cuda/), which
// exists when zerorun is built with CUDA: otherwise the first op throws InvalidArgument saying so.
// A stream of another device is refused (InvalidArgument). REQUIRES: `stream` outlives the scope.
class KernelDeviceScope {
 public:
  explicit KernelDeviceScope(Device device, Stream* stream = nullptr);
  ~KernelDeviceScope();
  KernelDeviceScope(const KernelDeviceScope&) = delete;
  KernelDeviceScope& operator=(const KernelDeviceScope&) = delete;

 private:
  Device previous_device_;
  Stream* previous_stream_;
};
// The calling thread's kernel device and stream (Device::CPU() and nullptr outside any scope).
Device KernelDevice();
Stream* KernelStream();

// ---- GEMM ----------------------------------------------------------------------------------------

enum class Trans : uint8_t { kN, kT };

// Row-major: C (m, n) = alpha * op(A) (m, k) * op(B) (k, n) + beta * C (+ bias (n) on every row).
// op(A) = A (m, k) with row stride lda >= k when trans_a == kN, or A^T where A is (k, m), lda >= m.
// Likewise B: (k, n), ldb >= n for kN; (n, k), ldb >= k for kT. C: (m, n), ldc >= n.
// Strided batch: for i in [0, batch): A + i*stride_a, B + i*stride_b, C + i*stride_c (elements).
// beta == 0 ignores C's previous contents (NaN in C does not leak). Mixed dtypes are allowed
// (e.g. fp32 grads of bf16 weights): every operand is read as fp32, accumulated in fp32, and C is
// rounded once. C must not overlap A, B or bias.
struct GemmParams {
  Trans trans_a = Trans::kN;
  Trans trans_b = Trans::kN;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f;
  float beta = 0.0f;
  const void* a = nullptr;
  DType a_type = DType::kF32;
  int64_t lda = 0;
  const void* b = nullptr;
  DType b_type = DType::kF32;
  int64_t ldb = 0;
  void* c = nullptr;
  DType c_type = DType::kF32;
  int64_t ldc = 0;
  const void* bias = nullptr;  // (n) or null
  DType bias_type = DType::kF32;
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};
void Gemm(const GemmParams& p);
// Single GEMM, BLAS order.
void Gemm(Trans trans_a, Trans trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void* a, DType a_type,
          int64_t lda, const void* b, DType b_type, int64_t ldb, float beta, void* c, DType c_type, int64_t ldc);

// ---- bias -----------------------------------------------------------------------------------------

// out (N, C) += bias (C) on every row.
void BiasAdd(void* out, DType out_type, const void* bias, DType bias_type, int64_t N, int64_t C);
// dbias (C) += sum over rows of dout (N, C).
void BiasBackward(void* dbias, DType dbias_type, const void* dout, DType dout_type, int64_t N, int64_t C);

// ---- embedding -------------------------------------------------------------------------------------

// out (B, T, C) = wte[tokens[b, t]] (V, C) + wpe[t] (maxT >= T, C); wpe may be null (no positions).
// tokens (B, T) must lie in [0, V) (checked: InvalidArgument names the position).
void EmbeddingForward(void* out, DType out_type, const int32_t* tokens, const void* wte, const void* wpe,
                      DType param_type, int64_t B, int64_t T, int64_t C, int64_t V);
// dwte (V, C) += scatter of dout (B, T, C) by tokens; dwpe (T, C) += sum over b of dout. Either
// gradient may be null. Deterministic (the sum order does not depend on the thread count).
void EmbeddingBackward(void* dwte, void* dwpe, DType grad_type, const void* dout, DType dout_type,
                       const int32_t* tokens, int64_t B, int64_t T, int64_t C, int64_t V);

// ---- normalisation ---------------------------------------------------------------------------------

// LayerNorm over the last dim: out (N, C) = (x - mean) * rstd * weight + bias, with the row
// statistics mean (N), rstd (N) = 1/sqrt(var + eps) written in fp32 (backward needs them).
// weight/bias (C) may be null (1 and 0). x, out: act_type; weight, bias: param_type.
void LayerNormForward(void* out, float* mean, float* rstd, const void* x, const void* weight, const void* bias,
                      int64_t N, int64_t C, float eps, DType act_type, DType param_type);
// dx (N, C) = d/dx; dweight (C) += sum dout * xhat; dbias (C) += sum dout. dx may be null (first layer)
// and dweight/dbias null (frozen). dout, x, dx: act_type; weight: param_type; dweight/dbias: grad_type.
void LayerNormBackward(void* dx, void* dweight, void* dbias, const void* dout, const void* x, const void* weight,
                       const float* mean, const float* rstd, int64_t N, int64_t C, DType act_type,
                       DType param_type, DType grad_type);

// RMSNorm: out (N, C) = x * rstd * weight, rstd (N) = 1/sqrt(mean(x^2) + eps) in fp32. weight may be null.
void RMSNormForward(void* out, float* rstd, const void* x, const void* weight, int64_t N, int64_t C, float eps,
                    DType act_type, DType param_type);
void RMSNormBackward(void* dx, void* dweight, const void* dout, const void* x, const void* weight, const float* rstd,
                     int64_t N, int64_t C, DType act_type, DType param_type, DType grad_type);

// ---- activations (elementwise over n values, one dtype; out may alias x, dx may alias dout) -------

enum class GeluApprox : uint8_t { kTanh, kNone };  // kNone: exact, x * Phi(x) with erf
void GeluForward(void* out, const void* x, int64_t n, DType type, GeluApprox approx);
// dx = dout * gelu'(x)
void GeluBackward(void* dx, const void* dout, const void* x, int64_t n, DType type, GeluApprox approx);
// silu(x) = x * sigmoid(x)
void SiluForward(void* out, const void* x, int64_t n, DType type);
void SiluBackward(void* dx, const void* dout, const void* x, int64_t n, DType type);
// SwiGLU over a fused projection: in (N, 2H) holds [gate | up] per row; out (N, H) = silu(gate) * up.
void SwiGluForward(void* out, const void* in, int64_t N, int64_t H, DType type);
// din (N, 2H) = [dgate | dup] from dout (N, H) and in (N, 2H). din must not alias in.
void SwiGluBackward(void* din, const void* dout, const void* in, int64_t N, int64_t H, DType type);

// ---- elementwise ---------------------------------------------------------------------------------------

// out = a + b (n values, one dtype; out may alias a or b): residual connections.
void Add(void* out, const void* a, const void* b, int64_t n, DType type);
// y += alpha * x, y and x of any floating dtypes (grad accumulation, e.g. fp32 grad += bf16 x).
void Axpy(void* y, DType y_type, const void* x, DType x_type, float alpha, int64_t n);
// out = alpha * x (out may alias x).
void Scale(void* out, const void* x, float alpha, int64_t n, DType type);
// out[i] = value (rounded to the dtype).
void Fill(void* out, float value, int64_t n, DType type);
// dst = src converted (fp32/fp16/bf16/fp64 in any pair; same dtype copies). No overlap.
void Copy(void* dst, DType dst_type, const void* src, DType src_type, int64_t n);

// ---- dropout ----------------------------------------------------------------------------------------

// Element i is kept when U32ToUniform(philox word (offset + i) of (seed, stream)) >= p, and then
// scaled by 1/(1-p): the mask is a pure function of (seed, stream, offset + i), so backward and
// activation-checkpoint replays regenerate it; nothing is stored. p in [0, 1); p == 0 copies.
// The caller advances `offset` by n per call to get fresh masks. out may alias x.
void DropoutForward(void* out, const void* x, int64_t n, DType type, float p, uint64_t seed, uint64_t stream,
                    uint64_t offset);
// dx = dout * mask / (1-p) with the same coordinates as the forward. dx may alias dout.
void DropoutBackward(void* dx, const void* dout, int64_t n, DType type, float p, uint64_t seed, uint64_t stream,
                     uint64_t offset);

// ---- softmax -----------------------------------------------------------------------------------------

// out (N, C) = softmax of each row of x, computed in fp32 (max-subtracted). out may alias x.
void SoftmaxForward(void* out, const void* x, int64_t N, int64_t C, DType type);
// dx (N, C) = y * (dout - sum(dout * y)) per row, y = the forward output. dx may alias dout.
void SoftmaxBackward(void* dx, const void* dout, const void* y, int64_t N, int64_t C, DType type);

// ---- causal multi-head self-attention -------------------------------------------------------------

// qkv (B, T, 3C): per position [q | k | v], each (NH, HS) with HS = C / NH. out (B, T, C) per position
// (NH, HS). att (B, NH, T, T) fp32 receives the softmax probabilities of q.k / sqrt(HS) with the
// causal mask (entries s > t are 0); AttentionBackward needs it. C must be divisible by NH.
void AttentionForward(void* out, float* att, const void* qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                      DType type);
// dqkv (B, T, 3C) = gradients of q, k, v from dout (B, T, C), qkv and att from the forward.
void AttentionBackward(void* dqkv, const void* dout, const void* qkv, const float* att, int64_t B, int64_t T,
                       int64_t C, int64_t NH, DType type);
// Elements of `att` for these dims (B * NH * T * T).
inline int64_t AttentionSavedElems(int64_t B, int64_t T, int64_t NH) { return B * NH * T * T; }

// ---- cross-entropy --------------------------------------------------------------------------------

struct CrossEntropyResult {
  float loss = 0.0f;   // mean over counted rows (0 when count == 0)
  int64_t count = 0;   // rows whose target != ignore_index
};
// Softmax cross-entropy of logits (N, V) against targets (N), fp32 and max-subtracted. Rows whose
// target equals ignore_index do not count. losses (N) fp32, if not null, gets each row's loss (0 for
// ignored rows). When dlogits (N, V) is not null it gets (softmax - onehot) * grad_scale / count
// (0 for ignored rows; all 0 when count == 0): the gradient of grad_scale * mean loss.
// dlogits may alias logits (same dtype). Targets outside [0, V) other than ignore_index throw.
CrossEntropyResult CrossEntropy(void* dlogits, float* losses, const void* logits, const int32_t* targets, int64_t N,
                                int64_t V, DType type, int32_t ignore_index, float grad_scale);

// ---- reductions over a buffer (engine: clipping and overflow checks) -------------------------------

// Sum of x^2 in double (fp32/fp16/bf16/fp64). NaN/Inf propagate.
double SumSquares(const void* x, int64_t n, DType type);
// True when no element is NaN or +-Inf.
bool AllFinite(const void* x, int64_t n, DType type);

}  // namespace zerorun::kernels
