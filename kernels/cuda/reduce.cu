// CUDA buffer reductions for clipping and overflow checks: sum of squares in double and the finite
// check. Two passes over a grid fixed by n alone (plan.h: ReduceBlocks), partials added in block
// order, so the sum is the same on every run. Both return a host value and so wait for the stream.
#include "zerorun/kernels/cuda/common.cuh"
#include "zerorun/kernels/cuda/cuda.h"

namespace zerorun::kernels::cuda {
namespace {

__global__ void SumSquaresPartials(const void* x, DType type, int64_t n, double* partials) {
  __shared__ double shared[32];
  double acc = 0.0;
  ZR_GRID_STRIDE(i, n) {
    const double v = LoadAnyD(x, type, i);
    acc += v * v;
  }
  acc = BlockSum(acc, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// bad is 0 on entry; a warp that sees a NaN or Inf sets it.
__global__ void AllFiniteKernel(const void* x, DType type, int64_t n, int* bad) {
  bool ok = true;
  ZR_GRID_STRIDE(i, n) ok &= isfinite(LoadAnyD(x, type, i));
  if (!__all_sync(0xffffffffu, ok) && (threadIdx.x & 31) == 0) *bad = 1;
}

double SumSquares(const void* x, int64_t n, DType type) {
  const Ctx ctx = CurrentCtx();
  const int64_t blocks = ReduceBlocks(n);
  Scratch s(ctx, static_cast<size_t>(blocks + 1) * sizeof(double));
  double* partials = s.as<double>();
  SumSquaresPartials<<<blocks, kThreads, 0, ctx.stream>>>(x, type, n, partials);
  SumInOrderKernel<<<1, 1024, 0, ctx.stream>>>(partials, blocks, partials + blocks);
  CheckLaunch("SumSquares");
  double total = 0.0;
  ZR_CUDA_CHECK(cudaMemcpyAsync(&total, partials + blocks, sizeof total, cudaMemcpyDeviceToHost, ctx.stream));
  SyncStream(ctx, "SumSquares");
  return total;
}

bool AllFinite(const void* x, int64_t n, DType type) {
  const Ctx ctx = CurrentCtx();
  Scratch s(ctx, sizeof(int));
  int* bad = s.as<int>();
  ZR_CUDA_CHECK(cudaMemsetAsync(bad, 0, sizeof(int), ctx.stream));
  AllFiniteKernel<<<ReduceBlocks(n), kThreads, 0, ctx.stream>>>(x, type, n, bad);
  CheckLaunch("AllFinite");
  int result = 1;
  ZR_CUDA_CHECK(cudaMemcpyAsync(&result, bad, sizeof result, cudaMemcpyDeviceToHost, ctx.stream));
  SyncStream(ctx, "AllFinite");
  return result == 0;
}

}  // namespace

void FillReduce(KernelTable& t) {
  t.sum_squares = &SumSquares;
  t.all_finite = &AllFinite;
}

}  // namespace zerorun::kernels::cuda
