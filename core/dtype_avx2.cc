// AVX2 + F16C bulk conversions, bit-identical to the scalar functions in dtype.h. Compiled with
// -mavx2 -mf16c; called only when the CPU has both (see dtype.cc).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace zerorun::detail {

size_t ConvertF32ToF16Avx2(const float* src, uint16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  return i;
}

size_t ConvertF16ToF32Avx2(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  return i;
}

size_t ConvertF32ToBF16Avx2(const float* src, uint16_t* dst, size_t n) {
  const __m256i kOne = _mm256_set1_epi32(1);
  const __m256i kRound = _mm256_set1_epi32(0x7fff);
  const __m256i kAbs = _mm256_set1_epi32(0x7fffffff);
  const __m256i kInf = _mm256_set1_epi32(0x7f800000);
  const __m256i kQuiet = _mm256_set1_epi32(0x00400000);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i x = _mm256_castps_si256(_mm256_loadu_ps(src + i));
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), kOne);
    __m256i rounded = _mm256_add_epi32(x, _mm256_add_epi32(kRound, lsb));
    __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, kAbs), kInf);
    __m256i nan = _mm256_or_si256(x, kQuiet);
    __m256i r = _mm256_srli_epi32(_mm256_blendv_epi8(rounded, nan, is_nan), 16);
    // packus works per 128-bit lane: [r0..3, r0..3, r4..7, r4..7]; gather lanes 0 and 2.
    __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_castsi256_si128(packed));
  }
  return i;
}

size_t ConvertBF16ToF32Avx2(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
  }
  return i;
}

}  // namespace zerorun::detail
