// The fused attention of one (batch, head) in bf16 with AVX512_BF16 (attention_units.h): the fp32
// units' 6-row causal tiles and row operations, but every product runs on vdpbf16ps (pairs of bf16
// multiplied and summed into fp32 lanes: twice the fp32 FMA's rate on the Zen 4 measured, 234 against
// 117 GFLOP/s at 1 thread) straight from
// the bf16 activations. Scores, the softmax, P as saved and dS stay fp32; P and dS are rounded to bf16
// (round to nearest even) only as operands of their products, as the native oneDNN form does.
//
// vdpbf16ps multiplies pairs along the reduction index, so each operand is read as 32-bit words that
// hold two consecutive reduction elements:
//  - a row-major operand whose reduction runs along its rows (q, dy, and the query tile's P and dS rows
//    rounded to bf16) is read as it is;
//  - k^T and v^T (reduction along the head dimension) are k and v with their 32-bit words transposed;
//  - v, k, dy and q as the right operand of P v, dS k, P^T dy and dS^T q (reduction along time) are
//    packed with rows 2p and 2p + 1 interleaved element by element;
//  - P^T and dS^T are P and dS rounded with their row pairs interleaved the same way, read down a
//    column (no transpose).
// Odd lengths are padded with a zero element or row.
// GCC 12's AVX-512 headers start masked intrinsics from _mm512_undefined_ps(), which -Wuninitialized
// reports once inlined (a compiler false positive); silence it for this file only.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "zerorun/kernels/cpu/attention_units.h"

#include <algorithm>
#include <cstring>

#include "zerorun/kernels/cpu/attention_rows_avx512.h"
#include "zerorun/kernels/cpu/scratch.h"

namespace zerorun::kernels::cpu::detail {
namespace {

// A 32-bit word of two bf16. Words are read from memory written as bf16 (the activations, the rounded
// rows) or by vector stores: vector loads alias anything, and the scalar reads go through memcpy.
using Word = uint32_t;

// C[i, j] = alpha * sum_{p < kp} dot(A(i, p), B[p, j]) for i < M and j < 16 (NV - 1) + popcount(last),
// where A(i, p) = a[i a_rs + p a_cs] and B[p, j] = b[p ldb + j] are 32-bit words of two bf16 each.
template <int M, int NV>
void TileBf16(int64_t kp, float alpha, const Word* a, int64_t a_rs, int64_t a_cs, const Word* b, int64_t ldb,
              float* c, int64_t ldc, __mmask16 last) {
  __m512 acc[M][NV];
  ZeroTile(acc);
  for (int64_t p = 0; p < kp; ++p) {
    const Word* bp = b + p * ldb;
    __m512bh bv[NV];
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) {
      const __m512i w = j == NV - 1 ? _mm512_maskz_loadu_epi32(last, bp + 16 * j) : _mm512_loadu_si512(bp + 16 * j);
      bv[j] = (__m512bh)w;
    }
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      int word;
      std::memcpy(&word, a + i * a_rs + p * a_cs, sizeof word);
      const __m512i ai = _mm512_set1_epi32(word);
      const __m512bh ab = (__m512bh)ai;
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], ab, bv[j]);
    }
  }
  StoreTile(acc, alpha, c, ldc, last);
}

template <int M>
constexpr TileFnOf<Word> kTileRow[kNv] = {&TileBf16<M, 1>, &TileBf16<M, 2>, &TileBf16<M, 3>, &TileBf16<M, 4>};
constexpr const TileFnOf<Word>* kTiles[kMr] = {kTileRow<1>, kTileRow<2>, kTileRow<3>, kTileRow<4>, kTileRow<5>,
                                                 kTileRow<6>};

// C (m, n) = alpha A B for m <= kMr rows (A and B as in TileBf16), in tiles of kNr columns.
template <class... Args>
void RowPanel(Args... args) {
  RowPanelOf<Word>(kTiles, args...);
}

const Word* Words(const uint16_t* p) { return reinterpret_cast<const Word*>(p); }

// dst (HS/2, T) 32-bit words = the words of src (T rows ld apart, HS bf16 each) transposed: word (d, s)
// holds src[s][2d], src[s][2d + 1]. HS even.
void TransposeWords(const uint16_t* src, int64_t ld, int64_t T, int64_t HS, Word* dst) {
  Transpose(Words(src), ld / 2, T, HS / 2, dst);
}

// dst (ceil(T/2), cols) words: word (p, j) holds row 2p's element j (low half) and row 2p + 1's (high
// half), the missing row of an odd T as zeros. load(r, j, mask) gives 16 elements of row r from column
// j as bf16 bits in the low halves of 32-bit lanes (zero where the mask is clear).
template <class Load>
void InterleaveWith(int64_t T, int64_t cols, Word* dst, const Load& load) {
  for (int64_t p = 0; 2 * p < T; ++p) {
    Word* out = dst + p * cols;
    for (int64_t j = 0; j < cols; j += 16) {
      const __mmask16 k = LaneMask(cols - j);
      const __m512i lo = load(2 * p, j, k);
      const __m512i hi = 2 * p + 1 < T ? load(2 * p + 1, j, k) : _mm512_setzero_si512();
      _mm512_mask_storeu_epi32(out + j, k, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
  }
}

// bf16 rows (ld apart) with row pairs interleaved.
void InterleaveRows(const uint16_t* src, int64_t ld, int64_t T, int64_t cols, Word* dst) {
  InterleaveWith(T, cols, dst, [&](int64_t r, int64_t j, __mmask16 k) {
    return _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, src + r * ld + j));
  });
}

// fp32 rows (ld apart) rounded to bf16 (nearest even) with row pairs interleaved. Read with a_rs 1
// it is src^T as the left operand.
void InterleaveRowsF32(const float* src, int64_t ld, int64_t T, int64_t cols, Word* dst) {
  InterleaveWith(T, cols, dst, [&](int64_t r, int64_t j, __mmask16 k) {
    return _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(k, src + r * ld + j)));
  });
}

// dst[0, n) = src[0, n) rounded to bf16 (nearest even), then zeros up to n_even.
void RoundRow(const float* src, int64_t n, int64_t n_even, uint16_t* dst) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = LaneMask(n - i);
    const __m256bh r = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(k, src + i));
    _mm256_mask_storeu_epi16(dst + i, k, (__m256i)r);
  }
  for (int64_t i = n; i < n_even; ++i) dst[i] = 0;
}

int64_t Even(int64_t n) { return n + (n & 1); }

}  // namespace

void AttentionUnitForwardBf16(const AttentionUnitBf16& u, float* out, int64_t ld_out, float* P) {
  const int64_t T = u.T, HS = u.HS, T2 = Even(T);
  // kT: k^T as words (HS/2, T); vp: v with row pairs interleaved (T2/2, HS); pb: the tile's P in bf16.
  float* scratch = Scratch(kScratchD, static_cast<size_t>(HS / 2 * T + T2 / 2 * HS + kMr * T2 / 2));
  Word* kT = reinterpret_cast<Word*>(scratch);
  Word* vp = kT + HS / 2 * T;
  uint16_t* pb = reinterpret_cast<uint16_t*>(vp + T2 / 2 * HS);
  TransposeWords(u.k, u.ld_qkv, T, HS, kT);
  InterleaveRows(u.v, u.ld_qkv, T, HS, vp);
  for (int64_t i0 = 0; i0 < T; i0 += kMr) {
    const int64_t m = std::min<int64_t>(kMr, T - i0);
    const int64_t keys = i0 + m;  // the tile's causal reach
    RowPanel(m, keys, HS / 2, u.scale, Words(u.q + i0 * u.ld_qkv), u.ld_qkv / 2, 1, kT, T, P + i0 * T, T);
    for (int64_t t = i0; t < keys; ++t) {
      float* row = P + t * T;
      SoftmaxRow(row, t + 1);
      std::memset(row + t + 1, 0, static_cast<size_t>(T - t - 1) * sizeof(float));
      RoundRow(row, keys, Even(keys), pb + (t - i0) * T2);
    }
    RowPanel(m, HS, Even(keys) / 2, 1.0f, Words(pb), T2 / 2, 1, vp, HS, out + i0 * ld_out, ld_out);
  }
}

void AttentionUnitBackwardBf16(const AttentionUnitBf16& u, const uint16_t* dy, int64_t ld_dy, const float* P,
                               float* dq, float* dk, float* dv, int64_t ld_d) {
  const int64_t T = u.T, HS = u.HS, T2 = Even(T);
  // vT: v^T as words (HS/2, T); kp, qp, dyp: k, q, dy with row pairs interleaved (T2/2, HS); pp, dsp:
  // P and dS with row pairs interleaved and rounded (T2/2, T), read as P^T and dS^T; dsb: the query
  // tile's dS rows in bf16.
  const size_t words = static_cast<size_t>(HS / 2 * T + 3 * (T2 / 2) * HS + 2 * (T2 / 2) * T + kMr * T2 / 2);
  float* scratch = Scratch(kScratchD, words);
  Word* vT = reinterpret_cast<Word*>(scratch);
  Word* kp = vT + HS / 2 * T;
  Word* qp = kp + T2 / 2 * HS;
  Word* dyp = qp + T2 / 2 * HS;
  Word* pp = dyp + T2 / 2 * HS;
  Word* dsp = pp + T2 / 2 * T;
  uint16_t* dsb = reinterpret_cast<uint16_t*>(dsp + T2 / 2 * T);
  float* dS = Scratch(kScratchE, static_cast<size_t>(T * T));
  TransposeWords(u.v, u.ld_qkv, T, HS, vT);
  InterleaveRows(u.k, u.ld_qkv, T, HS, kp);
  InterleaveRows(u.q, u.ld_qkv, T, HS, qp);
  InterleaveRows(dy, ld_dy, T, HS, dyp);
  InterleaveRowsF32(P, T, T, T, pp);
  // Query tiles: dP = dy v^T turned into dS = P (dP - rowsum(P dP)) * scale over s <= t, zeros after
  // it, then dq = dS k.
  for (int64_t i0 = 0; i0 < T; i0 += kMr) {
    const int64_t m = std::min<int64_t>(kMr, T - i0);
    const int64_t keys = i0 + m;
    RowPanel(m, keys, HS / 2, 1.0f, Words(dy + i0 * ld_dy), ld_dy / 2, 1, vT, T, dS + i0 * T, T);
    for (int64_t t = i0; t < keys; ++t) {
      float* row = dS + t * T;
      SoftmaxBackwardRow(row, P + t * T, t + 1, u.scale);
      std::memset(row + t + 1, 0, static_cast<size_t>(T - t - 1) * sizeof(float));
      RoundRow(row, keys, Even(keys), dsb + (t - i0) * T2);
    }
    RowPanel(m, HS, Even(keys) / 2, 1.0f, Words(dsb), T2 / 2, 1, kp, HS, dq + i0 * ld_d, ld_d);
  }
  InterleaveRowsF32(dS, T, T, T, dsp);
  // Key tiles: dv = P^T dy and dk = dS^T q over the queries t >= s0 that attend to keys [s0, s0 + m)
  // (s0 even, so the pairs (t, t + 1) start at row pair s0 / 2; P and dS are zero above the diagonal).
  for (int64_t s0 = 0; s0 < T; s0 += kMr) {
    const int64_t m = std::min<int64_t>(kMr, T - s0);
    const int64_t pairs = (T2 - s0) / 2;
    RowPanel(m, HS, pairs, 1.0f, pp + s0 / 2 * T + s0, 1, T, dyp + s0 / 2 * HS, HS, dv + s0 * ld_d, ld_d);
    RowPanel(m, HS, pairs, 1.0f, dsp + s0 / 2 * T + s0, 1, T, qp + s0 / 2 * HS, HS, dk + s0 * ld_d, ld_d);
  }
}

}  // namespace zerorun::kernels::cpu::detail
