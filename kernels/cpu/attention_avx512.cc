// The fused fp32 attention of one (batch, head) on AVX-512 (attention_units.h). Built everywhere, run
// only where the CPU has AVX-512. The row operations use vec_avx512.h's exp and run their tails masked
// (rows are 1..T long; VecOps would take each row's last n % 16 lanes through scalar <cmath>).
// GCC 12's AVX-512 headers start masked intrinsics from _mm512_undefined_ps(), which -Wuninitialized
// reports once inlined (a compiler false positive); silence it for this file only.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "zerorun/kernels/cpu/attention_units.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "zerorun/kernels/cpu/attention_rows_avx512.h"
#include "zerorun/kernels/cpu/scratch.h"

namespace zerorun::kernels::cpu::detail {
namespace {

// C[i, j] = alpha * sum_{p < k} A(i, p) B[p, j] for i < M and j < 16 (NV - 1) + popcount(last), where
// A(i, p) = a[i a_rs + p a_cs] and B's rows are ldb apart. The M x NV accumulators stay in registers;
// each step loads one row of B and broadcasts one column of A.
template <int M, int NV>
void Tile(int64_t k, float alpha, const float* a, int64_t a_rs, int64_t a_cs, const float* b, int64_t ldb, float* c,
          int64_t ldc, __mmask16 last) {
  __m512 acc[M][NV];
  ZeroTile(acc);
  for (int64_t p = 0; p < k; ++p) {
    const float* bp = b + p * ldb;
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) {
      bv[j] = j == NV - 1 ? _mm512_maskz_loadu_ps(last, bp + 16 * j) : _mm512_loadu_ps(bp + 16 * j);
    }
    const float* ap = a + p * a_cs;
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      const __m512 ai = _mm512_set1_ps(ap[i * a_rs]);
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) acc[i][j] = _mm512_fmadd_ps(ai, bv[j], acc[i][j]);
    }
  }
  StoreTile(acc, alpha, c, ldc, last);
}

template <int M>
constexpr TileFnOf<float> kTileRow[kNv] = {&Tile<M, 1>, &Tile<M, 2>, &Tile<M, 3>, &Tile<M, 4>};
constexpr const TileFnOf<float>* kTiles[kMr] = {kTileRow<1>, kTileRow<2>, kTileRow<3>, kTileRow<4>, kTileRow<5>,
                                                 kTileRow<6>};

// C (m, n) = alpha A B for m <= kMr rows (A and B as in Tile), in tiles of kNr columns.
template <class... Args>
void RowPanel(Args... args) {
  RowPanelOf<float>(kTiles, args...);
}

}  // namespace

void AttentionUnitForwardAvx512(const AttentionUnit& u, float* out, int64_t ld_out, float* P) {
  const int64_t T = u.T, HS = u.HS;
  float* kT = Scratch(kScratchD, static_cast<size_t>(HS * T));
  Transpose(u.k, u.ld_qkv, T, HS, kT);
  for (int64_t i0 = 0; i0 < T; i0 += kMr) {
    const int64_t m = std::min<int64_t>(kMr, T - i0);
    const int64_t keys = i0 + m;  // the tile's causal reach
    RowPanel(m, keys, HS, u.scale, u.q + i0 * u.ld_qkv, u.ld_qkv, 1, kT, T, P + i0 * T, T);
    for (int64_t t = i0; t < keys; ++t) {
      float* row = P + t * T;
      SoftmaxRow(row, t + 1);
      std::memset(row + t + 1, 0, static_cast<size_t>(T - t - 1) * sizeof(float));
    }
    RowPanel(m, HS, keys, 1.0f, P + i0 * T, T, 1, u.v, u.ld_qkv, out + i0 * ld_out, ld_out);
  }
}

void AttentionUnitBackwardAvx512(const AttentionUnit& u, const float* dy, int64_t ld_dy, const float* P, float* dq,
                                 float* dk, float* dv, int64_t ld_d) {
  const int64_t T = u.T, HS = u.HS;
  float* vT = Scratch(kScratchD, static_cast<size_t>(HS * T));
  float* dS = Scratch(kScratchE, static_cast<size_t>(T * T));
  Transpose(u.v, u.ld_qkv, T, HS, vT);
  // Query tiles: dP = dy v^T turned into dS = P (dP - rowsum(P dP)) * scale over s <= t, zeros after
  // it up to the tile's reach (the key tiles below read them), then dq = dS k.
  for (int64_t i0 = 0; i0 < T; i0 += kMr) {
    const int64_t m = std::min<int64_t>(kMr, T - i0);
    const int64_t keys = i0 + m;
    RowPanel(m, keys, HS, 1.0f, dy + i0 * ld_dy, ld_dy, 1, vT, T, dS + i0 * T, T);
    for (int64_t t = i0; t < keys; ++t) {
      float* row = dS + t * T;
      SoftmaxBackwardRow(row, P + t * T, t + 1, u.scale);
      std::memset(row + t + 1, 0, static_cast<size_t>(keys - t - 1) * sizeof(float));
    }
    RowPanel(m, HS, keys, 1.0f, dS + i0 * T, T, 1, u.k, u.ld_qkv, dq + i0 * ld_d, ld_d);
  }
  // Key tiles (the same 6-row grid): only queries t >= s0 attend to keys [s0, s0 + m), so
  // dv = P^T dy and dk = dS^T q sum over those rows; A is read transposed (a_rs 1, a_cs T).
  for (int64_t s0 = 0; s0 < T; s0 += kMr) {
    const int64_t m = std::min<int64_t>(kMr, T - s0);
    RowPanel(m, HS, T - s0, 1.0f, P + s0 * T + s0, 1, T, dy + s0 * ld_dy, ld_dy, dv + s0 * ld_d, ld_d);
    RowPanel(m, HS, T - s0, 1.0f, dS + s0 * T + s0, 1, T, u.q + s0 * u.ld_qkv, u.ld_qkv, dk + s0 * ld_d, ld_d);
  }
}

}  // namespace zerorun::kernels::cpu::detail
