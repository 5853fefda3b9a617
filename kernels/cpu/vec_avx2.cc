// VecOps for AVX2 + FMA: 8 floats per register, polynomial exp.
#include <immintrin.h>

#include "zerorun/kernels/cpu/vec_impl.h"

namespace zerorun::kernels::cpu {
namespace {

struct Avx2V {
  using R = __m256;
  static constexpr int W = 8;
  static R Load(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, R v) { _mm256_storeu_ps(p, v); }
  static R Set1(float v) { return _mm256_set1_ps(v); }
  static R Add(R a, R b) { return _mm256_add_ps(a, b); }
  static R Sub(R a, R b) { return _mm256_sub_ps(a, b); }
  static R Mul(R a, R b) { return _mm256_mul_ps(a, b); }
  static R Div(R a, R b) { return _mm256_div_ps(a, b); }
  static R Fma(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }
  // maxps returns its second operand when either is NaN: Max(x, acc) keeps a NaN of x.
  static R Max(R a, R b) { return _mm256_max_ps(b, a); }
  static R Min(R a, R b) { return _mm256_min_ps(b, a); }  // as Max: a NaN in a survives
  static R Abs(R x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }
  static R CopySign(R mag, R sign) {
    auto m = _mm256_set1_ps(-0.0f);
    return _mm256_or_ps(_mm256_andnot_ps(m, mag), _mm256_and_ps(m, sign));
  }
  // exp(x) = 2^n * p(r), n = round(x log2 e), r = x - n ln 2 (two-part ln 2), p a degree-6 polynomial.
  // x is clamped to [-87.34, 88.38] (a NaN passes the clamps and stays NaN).
  static R Exp(R x) {
    x = _mm256_min_ps(_mm256_set1_ps(88.3762626647949f), x);
    x = _mm256_max_ps(_mm256_set1_ps(-87.3365447504f), x);
    R n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    R r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    R p = _mm256_set1_ps(1.9875691500E-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  }
  static float ReduceAdd(R v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
  static R KeepScale(R x, const uint32_t* w, uint32_t threshold, float scale) {
    __m256i hi24 = _mm256_srli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w)), 8);
    // Both sides are below 2^24, so the signed compare is exact; threshold 0 keeps everything.
    __m256i keep = _mm256_cmpgt_epi32(hi24, _mm256_set1_epi32(static_cast<int>(threshold) - 1));
    return _mm256_and_ps(_mm256_castsi256_ps(keep), _mm256_mul_ps(x, _mm256_set1_ps(scale)));
  }
  static float ReduceMax(R v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
};

}  // namespace

namespace detail {
const VecOps& VecOpsAvx2() { return VecImpl<Avx2V>::Table(); }
}  // namespace detail

}  // namespace zerorun::kernels::cpu
