// CUDA row softmax (forward, backward) and fused softmax cross-entropy, one block per row, fp32:
//   softmax: y = exp(x - max) / sum exp(x - max);  dx = y (dout - sum(dout y))
//   cross-entropy of a row with target k: loss = lse - x_k, lse = max + log(sum exp(x - max));
//     dlogits = (exp(x - lse) - onehot(k)) * grad_scale / count
// Row sums of exponentials are kept in double. Cross-entropy runs three kernels: count the counted rows and find bad targets (the row kernel then
// touches nothing if one was found, so an error leaves dlogits and logits as they were), the rows, and
// the total loss summed in row order in double. It returns the mean to the host, so it waits.
#include "zerorun/kernels/cuda/common.cuh"
#include "zerorun/kernels/cuda/cuda.h"

namespace zerorun::kernels::cuda {
namespace {

constexpr int kRowThreads = 512;

template <typename T>
__global__ void SoftmaxForwardKernel(T* out, const T* x, int64_t C) {
  __shared__ float shared[32];
  __shared__ double dshared[32];
  const T* xr = x + static_cast<int64_t>(blockIdx.x) * C;
  T* yr = out + static_cast<int64_t>(blockIdx.x) * C;
  float mx = -INFINITY;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) mx = fmaxf(mx, ToF32(xr[c]));
  mx = BlockMax(mx, shared);
  double sum = 0.0;  // wide rows (a vocabulary) keep fp32 accuracy
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) sum += expf(ToF32(xr[c]) - mx);
  sum = BlockSum(sum, dshared);
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) yr[c] = FromF32<T>(expf(ToF32(xr[c]) - mx) * inv);
}

template <typename T>
__global__ void SoftmaxBackwardKernel(T* dx, const T* dout, const T* y, int64_t C) {
  __shared__ float shared[32];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * C;
  float dot = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dot += ToF32(dout[base + c]) * ToF32(y[base + c]);
  dot = BlockSum(dot, shared);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    dx[base + c] = FromF32<T>(ToF32(y[base + c]) * (ToF32(dout[base + c]) - dot));
  }
}

void SoftmaxForward(void* out, const void* x, int64_t N, int64_t C, DType type) {
  const Ctx ctx = CurrentCtx();
  ZR_CUDA_DISPATCH_FLOAT(type, T,
      SoftmaxForwardKernel<T><<<N, kRowThreads, 0, ctx.stream>>>(static_cast<T*>(out), static_cast<const T*>(x), C));
  CheckLaunch("SoftmaxForward");
}

void SoftmaxBackward(void* dx, const void* dout, const void* y, int64_t N, int64_t C, DType type) {
  const Ctx ctx = CurrentCtx();
  ZR_CUDA_DISPATCH_FLOAT(type, T,
      SoftmaxBackwardKernel<T><<<N, kRowThreads, 0, ctx.stream>>>(static_cast<T*>(dx), static_cast<const T*>(dout),
                                                                  static_cast<const T*>(y), C));
  CheckLaunch("SoftmaxBackward");
}

// ---- cross-entropy -----------------------------------------------------------------------------------

__global__ void CountTargetsKernel(const int32_t* targets, int64_t N, int64_t V, int32_t ignore_index,
                                   BadIndex bad, long long* count) {
  __shared__ long long shared[32];
  long long n = 0;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
    const int32_t t = targets[i];
    if (t == ignore_index) continue;
    if (t < 0 || t >= V) bad.Report(i);
    ++n;
  }
  n = BlockSum(n, shared);
  if (threadIdx.x == 0) *count = n;
}

template <typename T>
__global__ void CrossEntropyRowKernel(T* dlogits, float* losses, float* row_loss, const T* logits,
                                      const int32_t* targets, int64_t V, int32_t ignore_index, float grad_scale,
                                      const long long* count, BadIndex bad) {
  if (*bad.slot != ~0ull) return;  // a bad target somewhere: change nothing
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const T* xr = logits + row * V;
  const int32_t target = targets[row];
  const bool ignored = target == ignore_index;
  const float x_target = ignored ? 0.0f : ToF32(xr[target]);  // read before dlogits may overwrite it
  __shared__ double dshared[32];
  float mx = -INFINITY;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, ToF32(xr[v]));
  mx = BlockMax(mx, shared);
  double sum = 0.0;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) sum += expf(ToF32(xr[v]) - mx);
  sum = BlockSum(sum, dshared);
  const float lse = static_cast<float>(static_cast<double>(mx) + log(sum));
  const float loss = ignored ? 0.0f : lse - x_target;
  if (threadIdx.x == 0) {
    row_loss[row] = loss;
    if (losses != nullptr) losses[row] = loss;
  }
  if (dlogits == nullptr) return;
  const long long n = *count;
  const float g = n > 0 ? grad_scale / static_cast<float>(n) : 0.0f;
  T* dr = dlogits + row * V;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
    const float d = ignored ? 0.0f : (expf(ToF32(xr[v]) - lse) - (v == target ? 1.0f : 0.0f)) * g;
    dr[v] = FromF32<T>(d);
  }
}

CrossEntropyResult CrossEntropy(void* dlogits, float* losses, const void* logits, const int32_t* targets, int64_t N,
                                int64_t V, DType type, int32_t ignore_index, float grad_scale) {
  const char* op = "CrossEntropy";
  const Ctx ctx = CurrentCtx();
  ScratchLayout layout;
  const size_t bad_at = layout.Add(sizeof(unsigned long long));
  const size_t count_at = layout.Add(sizeof(long long));
  const size_t total_at = layout.Add(sizeof(double));
  const size_t rows_at = layout.Add(static_cast<size_t>(N) * sizeof(float));
  Scratch s(ctx, layout.bytes());
  const BadIndex bad = MakeBadIndex(ctx, s, bad_at);
  long long* count = s.as<long long>(count_at);
  double* total = s.as<double>(total_at);
  CountTargetsKernel<<<1, 1024, 0, ctx.stream>>>(targets, N, V, ignore_index, bad, count);
  ZR_CUDA_DISPATCH_FLOAT(type, T,
      CrossEntropyRowKernel<T><<<N, kRowThreads, 0, ctx.stream>>>(
          static_cast<T*>(dlogits), losses, s.as<float>(rows_at), static_cast<const T*>(logits), targets, V,
          ignore_index, grad_scale, count, bad));
  SumInOrderKernel<<<1, 1024, 0, ctx.stream>>>(s.as<float>(rows_at), N, total);
  CheckLaunch(op);
  struct {
    long long count;
    double total;
  } host{};
  ZR_CUDA_CHECK(cudaMemcpyAsync(&host.count, count, sizeof host.count, cudaMemcpyDeviceToHost, ctx.stream));
  ZR_CUDA_CHECK(cudaMemcpyAsync(&host.total, total, sizeof host.total, cudaMemcpyDeviceToHost, ctx.stream));
  ThrowIfBad(ctx, bad, op, "targets", targets, V);  // synchronises the stream
  CrossEntropyResult r;
  r.count = host.count;
  r.loss = host.count > 0 ? static_cast<float>(host.total / static_cast<double>(host.count)) : 0.0f;
  return r;
}

}  // namespace

void FillSoftmax(KernelTable& t) {
  t.softmax_forward = &SoftmaxForward;
  t.softmax_backward = &SoftmaxBackward;
  t.cross_entropy = &CrossEntropy;
}

}  // namespace zerorun::kernels::cuda
