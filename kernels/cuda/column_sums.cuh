// Deterministic column sums for parameter gradients (bias, norm weights): out[c] += sum over rows of
// f(row, c), K quantities at once (LayerNorm's dweight and dbias). Pass one: a (32 x 8) block per
// (32 columns, chunk of rows) writes its chunk's partial sums to scratch (K, chunks, C); pass two adds
// a column's partials in chunk order in double and adds the total to the gradient once. The chunking
// is plan.h's PlanColumnSums: a function of N alone, never of timing.
#pragma once

#include "zerorun/kernels/cuda/common.cuh"

namespace zerorun::kernels::cuda {

// F: __device__ void operator()(int64_t row, int64_t col, float (&v)[K]) const.
template <int K, typename F>
__global__ void ColumnPartialsKernel(F f, int64_t N, int64_t C, int64_t rows_per_chunk, float* partials) {
  __shared__ float shared[K][8][33];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < N ? r0 + rows_per_chunk : N;
  float acc[K] = {};
  if (c < C) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) {
      float v[K];
      f(r, c, v);
      for (int q = 0; q < K; ++q) acc[q] += v[q];
    }
  }
  for (int q = 0; q < K; ++q) shared[q][threadIdx.y][threadIdx.x] = acc[q];
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    const int64_t chunks = gridDim.y;
    for (int q = 0; q < K; ++q) {
      float s = 0.0f;
      for (int y = 0; y < 8; ++y) s += shared[q][y][threadIdx.x];
      partials[(q * chunks + blockIdx.y) * C + c] = s;
    }
  }
}

// out_q[c] += sum over chunks of partials[q][chunk][c]; a null out_q is skipped.
template <int K>
struct ColumnOutputs {
  void* out[K];
};
template <int K>
__global__ void ColumnFinishKernel(const float* partials, int64_t chunks, int64_t C, ColumnOutputs<K> outs,
                                   DType out_type) {
  ZR_GRID_STRIDE(c, C) {
    for (int q = 0; q < K; ++q) {
      if (outs.out[q] == nullptr) continue;
      double s = 0.0;
      for (int64_t k = 0; k < chunks; ++k) s += partials[(q * chunks + k) * C + c];
      StoreAnyD(outs.out[q], out_type, c, LoadAnyD(outs.out[q], out_type, c) + s);
    }
  }
}

template <int K, typename F>
void ColumnSums(const Ctx& ctx, F f, int64_t N, int64_t C, ColumnOutputs<K> outs, DType out_type, const char* op) {
  const ColumnSumPlan plan = PlanColumnSums(N, C);
  Scratch partials(ctx, static_cast<size_t>(K * plan.chunks * C) * sizeof(float));
  const dim3 grid(static_cast<unsigned>(plan.col_blocks), static_cast<unsigned>(plan.chunks));
  ColumnPartialsKernel<K><<<grid, dim3(32, 8), 0, ctx.stream>>>(f, N, C, plan.rows_per_chunk, partials.as<float>());
  const Launch l = ElementwiseLaunch(C);
  ColumnFinishKernel<K><<<l.blocks, l.threads, 0, ctx.stream>>>(partials.as<float>(), plan.chunks, C, outs, out_type);
  CheckLaunch(op);
}

}  // namespace zerorun::kernels::cuda
