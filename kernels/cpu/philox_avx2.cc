// Philox4x32-10 for 8 counters per AVX2 register: lane l holds block first + l. The 32x32->64
// products come from two _mm256_mul_epu32 (even lanes, then odd lanes shifted down).
#include <immintrin.h>

#include "zerorun/kernels/cpu/philox.h"

namespace zerorun::kernels::cpu::detail {
namespace {

inline void MulHiLo(__m256i a, __m256i m, __m256i* hi, __m256i* lo) {
  __m256i even = _mm256_mul_epu32(a, m);
  __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
  *lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
  *hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}

}  // namespace

int64_t PhiloxWordsAvx2(uint64_t seed, uint64_t stream, uint64_t first_block, int64_t nblocks, uint32_t* words) {
  const __m256i m0 = _mm256_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m256i m1 = _mm256_set1_epi32(static_cast<int>(0xCD9E8D57u));
  int64_t done = 0;
  for (; done + 8 <= nblocks; done += 8) {
    alignas(32) uint32_t lo32[8], hi32[8];
    for (int l = 0; l < 8; ++l) {
      uint64_t b = first_block + static_cast<uint64_t>(done + l);
      lo32[l] = static_cast<uint32_t>(b);
      hi32[l] = static_cast<uint32_t>(b >> 32);
    }
    __m256i c0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(lo32));
    __m256i c1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(hi32));
    __m256i c2 = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(stream)));
    __m256i c3 = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(stream >> 32)));
    uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
    for (int round = 0; round < 10; ++round) {
      __m256i hi0, lo0, hi1, lo1;
      MulHiLo(c0, m0, &hi0, &lo0);
      MulHiLo(c2, m1, &hi1, &lo1);
      __m256i n0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32(static_cast<int>(k0)));
      __m256i n2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32(static_cast<int>(k1)));
      c0 = n0;
      c1 = lo1;
      c2 = n2;
      c3 = lo0;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    // Interleave to block-major order: words[4 * l + j] = c_j[l].
    __m256i t0 = _mm256_unpacklo_epi32(c0, c1);  // l0: c0 c1, l1: c0 c1 | l4, l5
    __m256i t1 = _mm256_unpackhi_epi32(c0, c1);  // l2, l3 | l6, l7
    __m256i t2 = _mm256_unpacklo_epi32(c2, c3);
    __m256i t3 = _mm256_unpackhi_epi32(c2, c3);
    __m256i r0 = _mm256_unpacklo_epi64(t0, t2);  // l0 | l4
    __m256i r1 = _mm256_unpackhi_epi64(t0, t2);  // l1 | l5
    __m256i r2 = _mm256_unpacklo_epi64(t1, t3);  // l2 | l6
    __m256i r3 = _mm256_unpackhi_epi64(t1, t3);  // l3 | l7
    __m256i* out = reinterpret_cast<__m256i*>(words + 4 * done);
    _mm256_storeu_si256(out + 0, _mm256_permute2x128_si256(r0, r1, 0x20));  // l0 l1
    _mm256_storeu_si256(out + 1, _mm256_permute2x128_si256(r2, r3, 0x20));  // l2 l3
    _mm256_storeu_si256(out + 2, _mm256_permute2x128_si256(r0, r1, 0x31));  // l4 l5
    _mm256_storeu_si256(out + 3, _mm256_permute2x128_si256(r2, r3, 0x31));  // l6 l7
  }
  return done;
}

}  // namespace zerorun::kernels::cpu::detail
