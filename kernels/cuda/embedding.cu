// CUDA token + position embedding.
//   forward: out[b, t] = wte[tokens[b, t]] + wpe[t], one thread per output element.
//   backward: dwte[v] += sum of dout rows whose token is v; dwpe[t] += sum over b of dout[b, t].
// The token gradient is deterministic: positions are stably sorted by token (CUB radix sort), and the
// first position of each run of equal tokens sums the run's rows in position order and adds the total
// to the gradient once, as the reference does. Tokens are range-checked on the device; a bad one
// throws the host check's message after the stream is synchronised (the forward and backward wait).
#include <cub/device/device_radix_sort.cuh>

#include "zerorun/kernels/cuda/common.cuh"
#include "zerorun/kernels/cuda/cuda.h"

namespace zerorun::kernels::cuda {
namespace {

__global__ void CheckTokensKernel(const int32_t* tokens, int64_t n, int64_t V, BadIndex bad) {
  ZR_GRID_STRIDE(i, n) {
    if (tokens[i] < 0 || tokens[i] >= V) bad.Report(i);
  }
}

template <typename T>
__global__ void EmbeddingForwardKernel(T* out, const int32_t* tokens, const void* wte, const void* wpe,
                                       DType param_type, int64_t T_len, int64_t C, int64_t rows, BadIndex bad) {
  if (*bad.slot != ~0ull) return;
  ZR_GRID_STRIDE(i, rows * C) {
    const int64_t row = i / C, c = i - row * C;
    float v = LoadAny(wte, param_type, static_cast<int64_t>(tokens[row]) * C + c);
    if (wpe != nullptr) v += LoadAny(wpe, param_type, (row % T_len) * C + c);
    out[i] = FromF32<T>(v);
  }
}

__global__ void IotaKernel(int32_t* v, int64_t n) {
  ZR_GRID_STRIDE(i, n) v[i] = static_cast<int32_t>(i);
}

// Grid (rows, column blocks): the thread at the start of a run of equal sorted tokens sums the run.
__global__ void TokenGradKernel(void* dwte, DType grad_type, const void* dout, DType dout_type,
                                const int32_t* sorted_tokens, const int32_t* sorted_rows, int64_t rows, int64_t C) {
  const int64_t i = blockIdx.x;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int32_t tok = sorted_tokens[i];
  if (i > 0 && sorted_tokens[i - 1] == tok) return;
  double acc = 0.0;
  for (int64_t j = i; j < rows && sorted_tokens[j] == tok; ++j) {
    acc += LoadAny(dout, dout_type, static_cast<int64_t>(sorted_rows[j]) * C + c);
  }
  const int64_t at = static_cast<int64_t>(tok) * C + c;
  StoreAnyD(dwte, grad_type, at, LoadAnyD(dwte, grad_type, at) + acc);
}

__global__ void PositionGradKernel(void* dwpe, DType grad_type, const void* dout, DType dout_type, int64_t B,
                                   int64_t T_len, int64_t C) {
  ZR_GRID_STRIDE(i, T_len * C) {
    double acc = 0.0;
    for (int64_t b = 0; b < B; ++b) acc += LoadAny(dout, dout_type, b * T_len * C + i);
    StoreAnyD(dwpe, grad_type, i, LoadAnyD(dwpe, grad_type, i) + acc);
  }
}

int EndBit(int64_t V) {
  int bits = 1;
  while (bits < 31 && (int64_t{1} << bits) < V) ++bits;
  return bits;
}

void EmbeddingForward(void* out, DType out_type, const int32_t* tokens, const void* wte, const void* wpe,
                      DType param_type, int64_t B, int64_t T, int64_t C, int64_t V) {
  const char* op = "EmbeddingForward";
  const Ctx ctx = CurrentCtx();
  const int64_t rows = B * T;
  Scratch s(ctx, sizeof(unsigned long long));
  const BadIndex bad = MakeBadIndex(ctx, s, 0);
  CheckTokensKernel<<<ElementwiseLaunch(rows).blocks, kThreads, 0, ctx.stream>>>(tokens, rows, V, bad);
  const Launch l = ElementwiseLaunch(rows * C);
  ZR_CUDA_DISPATCH_FLOAT(out_type, T_,
      EmbeddingForwardKernel<T_><<<l.blocks, l.threads, 0, ctx.stream>>>(static_cast<T_*>(out), tokens, wte, wpe,
                                                                         param_type, T, C, rows, bad));
  CheckLaunch(op);
  ThrowIfBad(ctx, bad, op, "tokens", tokens, V);
}

void EmbeddingBackward(void* dwte, void* dwpe, DType grad_type, const void* dout, DType dout_type,
                       const int32_t* tokens, int64_t B, int64_t T, int64_t C, int64_t V) {
  const char* op = "EmbeddingBackward";
  const Ctx ctx = CurrentCtx();
  const int64_t rows = B * T;
  if (dwte == nullptr) {
    const Launch l = ElementwiseLaunch(T * C);
    PositionGradKernel<<<l.blocks, l.threads, 0, ctx.stream>>>(dwpe, grad_type, dout, dout_type, B, T, C);
    CheckLaunch(op);
    return;
  }
  ZR_CHECK(rows <= INT32_MAX, "{}: {} positions exceed the sort's 32-bit indexes", op, rows);
  const int n = static_cast<int>(rows);
  size_t sort_bytes = 0;
  ZR_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, static_cast<const int32_t*>(nullptr),
                                                static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                                static_cast<int32_t*>(nullptr), n, 0, EndBit(V), ctx.stream));
  ScratchLayout layout;
  const size_t bad_at = layout.Add(sizeof(unsigned long long));
  const size_t rows_at = layout.Add(static_cast<size_t>(rows) * sizeof(int32_t));
  const size_t sorted_tok_at = layout.Add(static_cast<size_t>(rows) * sizeof(int32_t));
  const size_t sorted_rows_at = layout.Add(static_cast<size_t>(rows) * sizeof(int32_t));
  const size_t sort_at = layout.Add(sort_bytes);
  Scratch s(ctx, layout.bytes());
  const BadIndex bad = MakeBadIndex(ctx, s, bad_at);
  CheckTokensKernel<<<ElementwiseLaunch(rows).blocks, kThreads, 0, ctx.stream>>>(tokens, rows, V, bad);
  ThrowIfBad(ctx, bad, op, "tokens", tokens, V);  // before any gradient changes
  if (dwpe != nullptr) {
    const Launch l = ElementwiseLaunch(T * C);
    PositionGradKernel<<<l.blocks, l.threads, 0, ctx.stream>>>(dwpe, grad_type, dout, dout_type, B, T, C);
  }
  IotaKernel<<<ElementwiseLaunch(rows).blocks, kThreads, 0, ctx.stream>>>(s.as<int32_t>(rows_at), rows);
  ZR_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(s.as<void>(sort_at), sort_bytes, tokens, s.as<int32_t>(sorted_tok_at),
                                                s.as<int32_t>(rows_at), s.as<int32_t>(sorted_rows_at), n, 0,
                                                EndBit(V), ctx.stream));
  const unsigned col_blocks = static_cast<unsigned>(CeilDiv(C, kThreads));
  TokenGradKernel<<<dim3(static_cast<unsigned>(rows), col_blocks), kThreads, 0, ctx.stream>>>(
      dwte, grad_type, dout, dout_type, s.as<int32_t>(sorted_tok_at), s.as<int32_t>(sorted_rows_at), rows, C);
  CheckLaunch(op);
}

}  // namespace

void FillEmbedding(KernelTable& t) {
  t.embedding_forward = &EmbeddingForward;
  t.embedding_backward = &EmbeddingBackward;
}

}  // namespace zerorun::kernels::cuda
