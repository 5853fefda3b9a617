// The AVX-512 (F, DQ) vocabulary of vec_impl.h: 16 floats per register, exp through scalef. Include
// only from files compiled with the AVX-512 flags (*_avx512.cc, cmake/ZerorunSources.cmake); the
// anonymous namespace gives each such file its own copy.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace zerorun::kernels::cpu {
namespace {

struct Avx512V {
  using R = __m512;
  static constexpr int W = 16;
  static R Load(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(float* p, R v) { _mm512_storeu_ps(p, v); }
  static R Set1(float v) { return _mm512_set1_ps(v); }
  static R Add(R a, R b) { return _mm512_add_ps(a, b); }
  static R Sub(R a, R b) { return _mm512_sub_ps(a, b); }
  static R Mul(R a, R b) { return _mm512_mul_ps(a, b); }
  static R Div(R a, R b) { return _mm512_div_ps(a, b); }
  static R Fma(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }
  static R Max(R a, R b) { return _mm512_max_ps(b, a); }  // a NaN in a survives (second operand)
  static R Min(R a, R b) { return _mm512_min_ps(b, a); }
  static R Abs(R x) { return _mm512_abs_ps(x); }
  static R CopySign(R mag, R sign) {
    __m512i m = _mm512_set1_epi32(static_cast<int>(0x80000000u));
    __m512i r = _mm512_or_si512(_mm512_andnot_si512(m, _mm512_castps_si512(mag)),
                                _mm512_and_si512(m, _mm512_castps_si512(sign)));
    return _mm512_castsi512_ps(r);
  }
  static R Exp(R x) {  // as Avx2V::Exp, with 2^n applied by scalef
    x = _mm512_min_ps(_mm512_set1_ps(88.3762626647949f), x);
    x = _mm512_max_ps(_mm512_set1_ps(-87.3365447504f), x);
    R n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    R r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    R p = _mm512_set1_ps(1.9875691500E-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507E-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073E-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894E-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459E-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201E-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
  }
  static float ReduceAdd(R v) {  // (GCC 12's _mm512_reduce_add_ps trips -Wuninitialized in its header)
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
  static R KeepScale(R x, const uint32_t* w, uint32_t threshold, float scale) {
    __m512i hi24 = _mm512_srli_epi32(_mm512_loadu_si512(w), 8);
    __mmask16 keep = _mm512_cmpge_epu32_mask(hi24, _mm512_set1_epi32(static_cast<int>(threshold)));
    return _mm512_maskz_mul_ps(keep, x, _mm512_set1_ps(scale));
  }
  static float ReduceMax(R v) {
    __m256 h = _mm256_max_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
};

}  // namespace
}  // namespace zerorun::kernels::cpu
