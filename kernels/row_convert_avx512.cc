// 16-lane AVX-512 conversions with exactly the semantics of core's (dtype.h): fp16 through the
// hardware converters (the same rounding and NaN rules as F16C), bf16 by integer round-to-nearest-even
// with NaNs quieted.
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12 AVX-512 header false positives
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "zerorun/kernels/row_convert.h"

namespace zerorun::kernels::detail {

size_t F16ToF32Avx512(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  }
  return i;
}

size_t BF16ToF32Avx512(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
  }
  return i;
}

size_t F32ToF16Avx512(const float* src, uint16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), h);
  }
  return i;
}

size_t F32ToBF16Avx512(const float* src, uint16_t* dst, size_t n) {
  const __m512i one = _mm512_set1_epi32(1), round = _mm512_set1_epi32(0x7fff);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  const __m512i quiet = _mm512_set1_epi32(0x00400000);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512i x = _mm512_castps_si512(_mm512_loadu_ps(src + i));
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), one);
    __m512i rounded = _mm512_add_epi32(x, _mm512_add_epi32(round, lsb));
    __mmask16 is_nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, abs_mask), inf);
    __m512i r = _mm512_mask_or_epi32(rounded, is_nan, x, quiet);  // NaN: x | quiet bit, not rounded
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
  }
  return i;
}

}  // namespace zerorun::kernels::detail
