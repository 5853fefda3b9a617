// Philox4x32-10 for 16 counters per AVX-512 register (as philox_avx2.cc, twice as wide).
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12 AVX-512 header false positives
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "zerorun/kernels/cpu/philox.h"

namespace zerorun::kernels::cpu::detail {
namespace {

inline void MulHiLo(__m512i a, __m512i m, __m512i* hi, __m512i* lo) {
  __m512i even = _mm512_mul_epu32(a, m);
  __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
  *lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
  *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
}

}  // namespace

int64_t PhiloxWordsAvx512(uint64_t seed, uint64_t stream, uint64_t first_block, int64_t nblocks, uint32_t* words) {
  const __m512i m0 = _mm512_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m512i m1 = _mm512_set1_epi32(static_cast<int>(0xCD9E8D57u));
  int64_t done = 0;
  for (; done + 16 <= nblocks; done += 16) {
    alignas(64) uint32_t lo32[16], hi32[16];
    for (int l = 0; l < 16; ++l) {
      uint64_t b = first_block + static_cast<uint64_t>(done + l);
      lo32[l] = static_cast<uint32_t>(b);
      hi32[l] = static_cast<uint32_t>(b >> 32);
    }
    __m512i c0 = _mm512_load_si512(lo32);
    __m512i c1 = _mm512_load_si512(hi32);
    __m512i c2 = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(stream)));
    __m512i c3 = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(stream >> 32)));
    uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
    for (int round = 0; round < 10; ++round) {
      __m512i hi0, lo0, hi1, lo1;
      MulHiLo(c0, m0, &hi0, &lo0);
      MulHiLo(c2, m1, &hi1, &lo1);
      __m512i n0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32(static_cast<int>(k0)));
      __m512i n2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32(static_cast<int>(k1)));
      c0 = n0;
      c1 = lo1;
      c2 = n2;
      c3 = lo0;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    // Block-major order through a small transpose in memory (16 x 4 words).
    alignas(64) uint32_t w[4][16];
    _mm512_store_si512(w[0], c0);
    _mm512_store_si512(w[1], c1);
    _mm512_store_si512(w[2], c2);
    _mm512_store_si512(w[3], c3);
    uint32_t* out = words + 4 * done;
    for (int l = 0; l < 16; ++l) {
      for (int j = 0; j < 4; ++j) out[4 * l + j] = w[j][l];
    }
  }
  return done;
}

}  // namespace zerorun::kernels::cpu::detail
