// Row operations and transposes shared by the fused attention units (attention_avx512.cc in fp32,
// attention_bf16_avx512bf16.cc in bf16). Include only from files compiled with the AVX-512 flags
// (cmake/ZerorunSources.cmake); the anonymous namespace gives each such file its own copy. Rows are
// 1..T long, so their tails run masked.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "zerorun/kernels/cpu/vec_avx512.h"

namespace zerorun::kernels::cpu::detail {
namespace {

__mmask16 TailMask(int64_t n) {
  const int64_t r = n % 16;
  return r == 0 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << r) - 1);
}

// The products' register tiles: kMr rows of C by up to kNv registers (kNr columns).
constexpr int kMr = 6;
constexpr int kNv = 4;
constexpr int64_t kNr = 16 * kNv;

// A tile kernel over elements E: (k, alpha, a, a_rs, a_cs, b, ldb, c, ldc, last) computes C = alpha A B
// for its M rows and NV registers (the last one under `last`), A(i, p) = a[i a_rs + p a_cs], B's rows
// ldb apart.
template <class E>
using TileFnOf = void (*)(int64_t, float, const E*, int64_t, int64_t, const E*, int64_t, float*, int64_t, __mmask16);

// C (m, n) = alpha A B for m <= kMr rows, in tiles of kNr columns; tiles[M - 1][NV - 1] is the kernel
// of M rows and NV registers.
template <class E>
void RowPanelOf(const TileFnOf<E>* const* tiles, int64_t m, int64_t n, int64_t k, float alpha, const E* a,
                int64_t a_rs, int64_t a_cs, const E* b, int64_t ldb, float* c, int64_t ldc) {
  const TileFnOf<E>* row = tiles[m - 1];
  for (int64_t j0 = 0; j0 < n; j0 += kNr) {
    const int64_t nj = std::min(kNr, n - j0);
    row[(nj + 15) / 16 - 1](k, alpha, a, a_rs, a_cs, b + j0, ldb, c + j0, ldc, TailMask(nj));
  }
}

// An M x NV tile of accumulators (NV registers of 16 columns per row) zeroed.
template <int M, int NV>
void ZeroTile(__m512 (&acc)[M][NV]) {
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) acc[i][j] = _mm512_setzero_ps();
  }
}

// C (rows ldc apart) = alpha * the tile; each row's last register is stored under `last`.
template <int M, int NV>
void StoreTile(const __m512 (&acc)[M][NV], float alpha, float* c, int64_t ldc, __mmask16 last) {
  const __m512 al = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) {
      const __m512 r = _mm512_mul_ps(acc[i][j], al);
      if (j == NV - 1) {
        _mm512_mask_storeu_ps(c + i * ldc + 16 * j, last, r);
      } else {
        _mm512_storeu_ps(c + i * ldc + 16 * j, r);
      }
    }
  }
}

__mmask16 LaneMask(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
}

// x[0, n) = softmax(x[0, n)) in place: exp(x - max) scaled by 1 / sum. A NaN carries to every output.
void SoftmaxRow(float* x, int64_t n) {
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 mx = ninf;
  for (int64_t i = 0; i < n; i += 16) mx = Avx512V::Max(_mm512_mask_loadu_ps(ninf, LaneMask(n - i), x + i), mx);
  const __m512 shift = _mm512_set1_ps(Avx512V::ReduceMax(mx));
  __m512 sum = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = LaneMask(n - i);
    const __m512 e = Avx512V::Exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), shift));
    sum = _mm512_mask_add_ps(sum, k, sum, e);
    _mm512_mask_storeu_ps(x + i, k, e);
  }
  const __m512 inv = _mm512_set1_ps(1.0f / Avx512V::ReduceAdd(sum));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = LaneMask(n - i);
    _mm512_mask_storeu_ps(x + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), inv));
  }
}

// d[0, n) = p (d - sum p d) * scale in place: the softmax backward from dP to the scaled dS.
void SoftmaxBackwardRow(float* d, const float* p, int64_t n, float scale) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = LaneMask(n - i);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, p + i), _mm512_maskz_loadu_ps(k, d + i), acc);
  }
  const __m512 dot = _mm512_set1_ps(Avx512V::ReduceAdd(acc)), sc = _mm512_set1_ps(scale);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = LaneMask(n - i);
    const __m512 g = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, p + i), _mm512_sub_ps(_mm512_maskz_loadu_ps(k, d + i), dot));
    _mm512_mask_storeu_ps(d + i, k, _mm512_mul_ps(g, sc));
  }
}

// dst (16, 16) rows ldd apart = src (16, 16)^T, src rows ld apart: in registers, in three rounds of
// shuffles (pairs of elements, then of pairs, then of 128-bit lanes twice).
void Transpose16(const float* src, int64_t ld, float* dst, int64_t ldd) {
  __m512 r[16], t[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * ld);
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  // r[4 g + c], lane L: column 4 L + c of rows 4 g .. 4 g + 3.
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    r[4 * g + 0] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    t[c] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88);
    t[4 + c] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xdd);
    t[8 + c] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88);
    t[12 + c] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xdd);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    _mm512_storeu_ps(dst + c * ldd, _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88));
    _mm512_storeu_ps(dst + (8 + c) * ldd, _mm512_shuffle_f32x4(t[c], t[8 + c], 0xdd));
    _mm512_storeu_ps(dst + (4 + c) * ldd, _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0x88));
    _mm512_storeu_ps(dst + (12 + c) * ldd, _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0xdd));
  }
}

// dst (cols, rows) = src (rows, cols)^T, src rows ld apart, of any 32-bit element E (float, or a word
// of two bf16): whole 16 x 16 blocks in registers (vector loads and stores move bits and alias
// anything), the edges element by element through memcpy (so E may be read from memory of another
// type).
template <class E>
void Transpose(const E* src, int64_t ld, int64_t rows, int64_t cols, E* dst) {
  static_assert(sizeof(E) == sizeof(float));
  const int64_t rows16 = rows - rows % 16, cols16 = cols - cols % 16;
  for (int64_t r0 = 0; r0 < rows16; r0 += 16) {
    for (int64_t c0 = 0; c0 < cols16; c0 += 16) {
      Transpose16(reinterpret_cast<const float*>(src + r0 * ld + c0), ld, reinterpret_cast<float*>(dst + c0 * rows + r0),
                  rows);
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t c_from = r < rows16 ? cols16 : 0;
    for (int64_t c = c_from; c < cols; ++c) std::memcpy(dst + c * rows + r, src + r * ld + c, sizeof(E));
  }
}

}  // namespace
}  // namespace zerorun::kernels::cpu::detail
