// The VecOps primitives written once over a SIMD vocabulary `V` (a struct of static functions over a
// register type R of W floats): vec.cc instantiates it with ScalarV (W = 1, <cmath>), vec_avx2.cc and
// vec_avx512.cc with their own V. Lanes past the last multiple of W run through ScalarV.
// Everything here has internal linkage (anonymous namespace): each ISA's translation unit keeps its
// own copy, so code built with -mavx2 can never be picked for the portable path by the linker.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "zerorun/kernels/cpu/vec.h"

namespace zerorun::kernels::cpu {
namespace {

struct ScalarV {
  using R = float;
  static constexpr int W = 1;
  static R Load(const float* p) { return *p; }
  static void Store(float* p, R v) { *p = v; }
  static R Set1(float v) { return v; }
  static R Add(R a, R b) { return a + b; }
  static R Sub(R a, R b) { return a - b; }
  static R Mul(R a, R b) { return a * b; }
  static R Div(R a, R b) { return a / b; }
  static R Fma(R a, R b, R c) { return a * b + c; }
  static R Max(R a, R b) { return a > b || std::isnan(a) ? a : b; }
  static R Min(R a, R b) { return a < b || std::isnan(a) ? a : b; }
  static R Exp(R x) { return std::exp(x); }
  static R Tanh(R x) { return std::tanh(x); }
  static R Erf(R x) { return std::erf(x); }
  static float ReduceAdd(R v) { return v; }
  static float ReduceMax(R v) { return v; }
  static R KeepScale(R x, const uint32_t* w, uint32_t threshold, float scale) {
    return (*w >> 8) >= threshold ? x * scale : 0.0f;
  }
};

// tanh and erf from Exp for the SIMD vocabularies (ScalarV has its own).
template <class U>
typename U::R SimdTanh(typename U::R x) {  // 1 - 2 / (exp(2x) + 1)
  auto one = U::Set1(1.0f);
  auto e = U::Exp(U::Add(x, x));
  return U::Sub(one, U::Div(U::Set1(2.0f), U::Add(e, one)));
}

template <class U>
typename U::R SimdErf(typename U::R x) {  // Abramowitz-Stegun 7.1.26 on |x|, sign restored
  auto a = U::Abs(x);
  auto t = U::Div(U::Set1(1.0f), U::Fma(U::Set1(0.3275911f), a, U::Set1(1.0f)));
  auto p = U::Fma(U::Set1(1.061405429f), t, U::Set1(-1.453152027f));
  p = U::Fma(p, t, U::Set1(1.421413741f));
  p = U::Fma(p, t, U::Set1(-0.284496736f));
  p = U::Fma(p, t, U::Set1(0.254829592f));
  p = U::Mul(p, t);
  auto e = U::Exp(U::Sub(U::Set1(0.0f), U::Mul(a, a)));
  auto y = U::Sub(U::Set1(1.0f), U::Mul(p, e));
  return U::CopySign(y, x);
}

template <class U>
typename U::R Sigmoid(typename U::R x) {
  auto one = U::Set1(1.0f);
  return U::Div(one, U::Add(one, U::Exp(U::Sub(U::Set1(0.0f), x))));
}

// f(U{}, i) over lanes [i, i + U::W): full vectors first, then the scalar tail.
template <class V, class F>
void ForEachLane(int64_t n, F&& f) {
  int64_t i = 0;
  if constexpr (V::W > 1) {
    for (; i + V::W <= n; i += V::W) f(V{}, i);
  }
  for (; i < n; ++i) f(ScalarV{}, i);
}

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

template <class V>
struct VecImpl {
  // Reductions accumulate each chunk of kChunk elements in fp32 lanes and add the chunk totals in
  // double: long rows (a 50k vocabulary) keep ~fp32 accuracy instead of an error growing with n.
  static constexpr int64_t kChunk = 512;

  template <class F>
  static float Chunked(int64_t n, F&& chunk) {
    if (n <= kChunk) return chunk(0, n);
    double total = 0.0;
    for (int64_t i = 0; i < n; i += kChunk) total += chunk(i, std::min(kChunk, n - i));
    return static_cast<float>(total);
  }

  static float SumChunk(const float* x, int64_t n) {
    int64_t i = 0;
    float s = 0.0f;
    if constexpr (V::W > 1) {
      auto a0 = V::Set1(0.0f), a1 = V::Set1(0.0f);
      for (; i + 2 * V::W <= n; i += 2 * V::W) {
        a0 = V::Add(a0, V::Load(x + i));
        a1 = V::Add(a1, V::Load(x + i + V::W));
      }
      for (; i + V::W <= n; i += V::W) a0 = V::Add(a0, V::Load(x + i));
      s = V::ReduceAdd(V::Add(a0, a1));
    }
    for (; i < n; ++i) s += x[i];
    return s;
  }
  static float Sum(const float* x, int64_t n) {
    return Chunked(n, [&](int64_t i, int64_t len) { return SumChunk(x + i, len); });
  }

  // NaN inputs: the result is unspecified (every caller also sums exp(x - max) or x, which carries
  // the NaN to its output).
  static float Max(const float* x, int64_t n) {
    int64_t i = 0;
    float m = -std::numeric_limits<float>::infinity();
    if constexpr (V::W > 1) {
      auto a0 = V::Set1(m), a1 = V::Set1(m);  // two chains: max has a 4-cycle latency
      for (; i + 2 * V::W <= n; i += 2 * V::W) {
        a0 = V::Max(V::Load(x + i), a0);
        a1 = V::Max(V::Load(x + i + V::W), a1);
      }
      for (; i + V::W <= n; i += V::W) a0 = V::Max(V::Load(x + i), a0);
      m = V::ReduceMax(V::Max(a0, a1));
    }
    for (; i < n; ++i) m = x[i] > m ? x[i] : m;
    return m;
  }

  static float DotChunk(const float* a, const float* b, int64_t n) {
    int64_t i = 0;
    float s = 0.0f;
    if constexpr (V::W > 1) {
      auto a0 = V::Set1(0.0f), a1 = V::Set1(0.0f);
      for (; i + 2 * V::W <= n; i += 2 * V::W) {
        a0 = V::Fma(V::Load(a + i), V::Load(b + i), a0);
        a1 = V::Fma(V::Load(a + i + V::W), V::Load(b + i + V::W), a1);
      }
      for (; i + V::W <= n; i += V::W) a0 = V::Fma(V::Load(a + i), V::Load(b + i), a0);
      s = V::ReduceAdd(V::Add(a0, a1));
    }
    for (; i < n; ++i) s += a[i] * b[i];
    return s;
  }
  static float Dot(const float* a, const float* b, int64_t n) {
    return Chunked(n, [&](int64_t i, int64_t len) { return DotChunk(a + i, b + i, len); });
  }

  static float SumSqCenteredChunk(const float* x, int64_t n, float mean) {
    int64_t i = 0;
    float s = 0.0f;
    if constexpr (V::W > 1) {
      auto m = V::Set1(mean), acc = V::Set1(0.0f);
      for (; i + V::W <= n; i += V::W) {
        auto d = V::Sub(V::Load(x + i), m);
        acc = V::Fma(d, d, acc);
      }
      s = V::ReduceAdd(acc);
    }
    for (; i < n; ++i) s += (x[i] - mean) * (x[i] - mean);
    return s;
  }
  static float SumSqCentered(const float* x, int64_t n, float mean) {
    return Chunked(n, [&](int64_t i, int64_t len) { return SumSqCenteredChunk(x + i, len, mean); });
  }

  static float ExpShiftSumChunk(float* y, const float* x, int64_t n, float shift) {
    int64_t i = 0;
    float s = 0.0f;
    if constexpr (V::W > 1) {
      auto sh = V::Set1(shift), acc = V::Set1(0.0f);
      for (; i + V::W <= n; i += V::W) {
        auto e = V::Exp(V::Sub(V::Load(x + i), sh));
        V::Store(y + i, e);
        acc = V::Add(acc, e);
      }
      s = V::ReduceAdd(acc);
    }
    for (; i < n; ++i) {
      y[i] = std::exp(x[i] - shift);
      s += y[i];
    }
    return s;
  }
  static float ExpShiftSum(float* y, const float* x, int64_t n, float shift) {
    return Chunked(n, [&](int64_t i, int64_t len) { return ExpShiftSumChunk(y + i, x + i, len, shift); });
  }

  static void Scale(float* y, const float* x, float a, int64_t n) {
    ForEachLane<V>(n, [&](auto u, int64_t i) {
      using U = decltype(u);
      U::Store(y + i, U::Mul(U::Load(x + i), U::Set1(a)));
    });
  }

  static void Divide(float* y, const float* x, float a, int64_t n) {
    ForEachLane<V>(n, [&](auto u, int64_t i) {
      using U = decltype(u);
      U::Store(y + i, U::Div(U::Load(x + i), U::Set1(a)));
    });
  }

  static void Add(float* y, const float* a, const float* b, int64_t n) {
    ForEachLane<V>(n, [&](auto u, int64_t i) {
      using U = decltype(u);
      U::Store(y + i, U::Add(U::Load(a + i), U::Load(b + i)));
    });
  }

  static void Axpy(float* y, const float* x, float a, int64_t n) {
    ForEachLane<V>(n, [&](auto u, int64_t i) {
      using U = decltype(u);
      U::Store(y + i, U::Fma(U::Set1(a), U::Load(x + i), U::Load(y + i)));
    });
  }

  template <class U>
  static typename U::R TanhOf(typename U::R x) {
    if constexpr (U::W == 1) {
      return std::tanh(x);
    } else {
      return SimdTanh<U>(x);
    }
  }
  template <class U>
  static typename U::R ErfOf(typename U::R x) {
    if constexpr (U::W == 1) {
      return std::erf(x);
    } else {
      return SimdErf<U>(x);
    }
  }
  template <class U>
  static typename U::R SigmoidOf(typename U::R x) {
    if constexpr (U::W == 1) {
      return 1.0f / (1.0f + std::exp(-x));
    } else {
      return Sigmoid<U>(x);
    }
  }

  // tanh form through the identity 0.5 (1 + tanh(u)) = sigmoid(2u): no cancellation for x << 0.
  static void Gelu(float* y, const float* x, int64_t n, GeluApprox approx) {
    if (approx == GeluApprox::kTanh) {
      ForEachLane<V>(n, [&](auto u, int64_t i) {
        using U = decltype(u);
        auto v = U::Load(x + i);
        auto inner = U::Mul(U::Set1(2.0f * kSqrt2OverPi), U::Fma(U::Mul(U::Set1(kGeluCubic), v), U::Mul(v, v), v));
        U::Store(y + i, U::Mul(v, SigmoidOf<U>(inner)));
      });
    } else {
      ForEachLane<V>(n, [&](auto u, int64_t i) {
        using U = decltype(u);
        auto v = U::Load(x + i);
        auto e = ErfOf<U>(U::Mul(v, U::Set1(kInvSqrt2)));
        U::Store(y + i, U::Mul(U::Mul(U::Set1(0.5f), v), U::Add(U::Set1(1.0f), e)));
      });
    }
  }

  static void GeluGrad(float* dx, const float* dy, const float* x, int64_t n, GeluApprox approx) {
    if (approx == GeluApprox::kTanh) {
      // With s = sigmoid(2u): 1 + tanh(u) = 2s and 1 - tanh(u)^2 = 4 s (1 - s), so
      // gelu'(x) = s (1 + 2 x (1 - s) u'(x)),  u'(x) = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
      ForEachLane<V>(n, [&](auto u, int64_t i) {
        using U = decltype(u);
        // x is clamped to [-10, 10], where this gelu' is 1 and -2.8e-36: beyond, its value moves by
        // less than 3e-36. Unclamped, 2u passed exp's range below x = -10.05 (std::exp, the scalar
        // lanes: e = inf, e s = inf * 0 = NaN) and x^2 overflowed from |x| ~ 1.8e19 (u'(x) = inf,
        // (1 - s) u'(x) = 0 * inf = NaN). A NaN x stays NaN (Min and Max keep a NaN first operand).
        auto v = U::Max(U::Min(U::Load(x + i), U::Set1(10.0f)), U::Set1(-10.0f));
        auto v2 = U::Mul(v, v);
        auto one = U::Set1(1.0f);
        // s = 1 / (1 + e) and 1 - s = e / (1 + e) = e s with e = exp(-2u): both without cancellation,
        // one division (Exp's clamped input keeps e finite and nonzero, so e s never meets inf * 0).
        auto z = U::Mul(U::Set1(-2.0f * kSqrt2OverPi), U::Fma(U::Mul(U::Set1(kGeluCubic), v), v2, v));
        auto e = U::Exp(z);
        auto s = U::Div(one, U::Add(one, e));
        auto oms = U::Mul(e, s);
        auto du = U::Mul(U::Set1(kSqrt2OverPi), U::Fma(U::Set1(3.0f * kGeluCubic), v2, one));
        auto g = U::Mul(s, U::Fma(U::Mul(U::Add(v, v), oms), du, one));
        U::Store(dx + i, U::Mul(U::Load(dy + i), g));
      });
    } else {
      ForEachLane<V>(n, [&](auto u, int64_t i) {
        using U = decltype(u);
        // Clamped as above (gelu' is 1 and -7.6e-22 at x = 10 and -10): beyond, x^2 overflowed and
        // the SIMD exp's clamped input left pdf at 1e-38, so |x pdf| reached 1.4 at |x| = 3e38.
        auto v = U::Max(U::Min(U::Load(x + i), U::Set1(10.0f)), U::Set1(-10.0f));
        auto cdf = U::Mul(U::Set1(0.5f), U::Add(U::Set1(1.0f), ErfOf<U>(U::Mul(v, U::Set1(kInvSqrt2)))));
        auto pdf = U::Mul(U::Set1(kInvSqrt2Pi), U::Exp(U::Mul(U::Set1(-0.5f), U::Mul(v, v))));
        U::Store(dx + i, U::Mul(U::Load(dy + i), U::Fma(v, pdf, cdf)));
      });
    }
  }

  static void Silu(float* y, const float* x, int64_t n) {
    ForEachLane<V>(n, [&](auto u, int64_t i) {
      using U = decltype(u);
      auto v = U::Load(x + i);
      U::Store(y + i, U::Mul(v, SigmoidOf<U>(v)));
    });
  }

  static void SiluGrad(float* dx, const float* dy, const float* x, int64_t n) {
    ForEachLane<V>(n, [&](auto u, int64_t i) {
      using U = decltype(u);
      auto v = U::Load(x + i);
      auto s = SigmoidOf<U>(v);
      auto one = U::Set1(1.0f);
      auto g = U::Mul(s, U::Fma(v, U::Sub(one, s), one));  // s (1 + x (1 - s))
      U::Store(dx + i, U::Mul(U::Load(dy + i), g));
    });
  }

  static void SwiGlu(float* y, const float* g, const float* up, int64_t n) {
    ForEachLane<V>(n, [&](auto u, int64_t i) {
      using U = decltype(u);
      auto v = U::Load(g + i);
      U::Store(y + i, U::Mul(U::Mul(v, SigmoidOf<U>(v)), U::Load(up + i)));
    });
  }

  static void SwiGluGrad(float* dg, float* du, const float* dy, const float* g, const float* up, int64_t n) {
    ForEachLane<V>(n, [&](auto u, int64_t i) {
      using U = decltype(u);
      auto v = U::Load(g + i);
      auto s = SigmoidOf<U>(v);
      auto one = U::Set1(1.0f);
      auto d = U::Load(dy + i);
      auto ds = U::Mul(s, U::Fma(v, U::Sub(one, s), one));
      U::Store(dg + i, U::Mul(U::Mul(d, U::Load(up + i)), ds));
      U::Store(du + i, U::Mul(d, U::Mul(v, s)));
    });
  }

  static void NormApply(float* y, const float* x, int64_t n, float mean, float rstd, const float* w, const float* b) {
    ForEachLane<V>(n, [&](auto u, int64_t i) {
      using U = decltype(u);
      auto xhat = U::Mul(U::Sub(U::Load(x + i), U::Set1(mean)), U::Set1(rstd));
      auto v = w != nullptr ? U::Mul(xhat, U::Load(w + i)) : xhat;
      if (b != nullptr) v = U::Add(v, U::Load(b + i));
      U::Store(y + i, v);
    });
  }

  static void NormBackwardStatsChunk(const float* x, const float* dy, const float* w, int64_t n, float mean,
                                     float rstd, float* dw, float* db, float* sg, float* sgx) {
    int64_t i = 0;
    float s_g = 0.0f, s_gx = 0.0f;
    if constexpr (V::W > 1) {
      auto m = V::Set1(mean), r = V::Set1(rstd), ag = V::Set1(0.0f), agx = V::Set1(0.0f);
      for (; i + V::W <= n; i += V::W) {
        auto xhat = V::Mul(V::Sub(V::Load(x + i), m), r);
        auto d = V::Load(dy + i);
        auto g = w != nullptr ? V::Mul(d, V::Load(w + i)) : d;
        ag = V::Add(ag, g);
        agx = V::Fma(g, xhat, agx);
        if (dw != nullptr) V::Store(dw + i, V::Fma(d, xhat, V::Load(dw + i)));
        if (db != nullptr) V::Store(db + i, V::Add(V::Load(db + i), d));
      }
      s_g = V::ReduceAdd(ag);
      s_gx = V::ReduceAdd(agx);
    }
    for (; i < n; ++i) {
      float xhat = (x[i] - mean) * rstd;
      float g = w != nullptr ? dy[i] * w[i] : dy[i];
      s_g += g;
      s_gx += g * xhat;
      if (dw != nullptr) dw[i] += dy[i] * xhat;
      if (db != nullptr) db[i] += dy[i];
    }
    *sg = s_g;
    *sgx = s_gx;
  }

  static void NormBackwardStats(const float* x, const float* dy, const float* w, int64_t n, float mean, float rstd,
                                float* dw, float* db, float* sg, float* sgx) {
    double t_g = 0.0, t_gx = 0.0;
    for (int64_t i = 0; i < n; i += kChunk) {
      float a, b;
      NormBackwardStatsChunk(x + i, dy + i, w != nullptr ? w + i : nullptr, std::min(kChunk, n - i), mean, rstd,
                             dw != nullptr ? dw + i : nullptr, db != nullptr ? db + i : nullptr, &a, &b);
      t_g += a;
      t_gx += b;
    }
    *sg = static_cast<float>(t_g);
    *sgx = static_cast<float>(t_gx);
  }

  static void NormBackwardDx(float* dx, const float* x, const float* dy, const float* w, int64_t n, float mean,
                             float rstd, float c1, float c2) {
    ForEachLane<V>(n, [&](auto u, int64_t i) {
      using U = decltype(u);
      auto xhat = U::Mul(U::Sub(U::Load(x + i), U::Set1(mean)), U::Set1(rstd));
      auto d = U::Load(dy + i);
      auto g = w != nullptr ? U::Mul(d, U::Load(w + i)) : d;
      auto v = U::Sub(U::Sub(g, U::Set1(c1)), U::Mul(xhat, U::Set1(c2)));
      U::Store(dx + i, U::Mul(v, U::Set1(rstd)));
    });
  }

  static void SoftmaxBackward(float* dx, const float* dy, const float* y, float dot, int64_t n) {
    ForEachLane<V>(n, [&](auto u, int64_t i) {
      using U = decltype(u);
      U::Store(dx + i, U::Mul(U::Load(y + i), U::Sub(U::Load(dy + i), U::Set1(dot))));
    });
  }

  static void DropoutApply(float* y, const float* x, const uint32_t* words, int64_t n, uint32_t threshold,
                           float scale) {
    ForEachLane<V>(n, [&](auto u, int64_t i) {
      using U = decltype(u);
      U::Store(y + i, U::KeepScale(U::Load(x + i), words + i, threshold, scale));
    });
  }

  static const VecOps& Table() {
    static const VecOps ops = [] {
      VecOps o;
      o.sum = &Sum;
      o.max = &Max;
      o.dot = &Dot;
      o.sum_sq_centered = &SumSqCentered;
      o.exp_shift_sum = &ExpShiftSum;
      o.scale = &Scale;
      o.add = &Add;
      o.divide = &Divide;
      o.axpy = &Axpy;
      o.gelu = &Gelu;
      o.gelu_grad = &GeluGrad;
      o.silu = &Silu;
      o.silu_grad = &SiluGrad;
      o.swiglu = &SwiGlu;
      o.swiglu_grad = &SwiGluGrad;
      o.norm_apply = &NormApply;
      o.norm_backward_stats = &NormBackwardStats;
      o.norm_backward_dx = &NormBackwardDx;
      o.softmax_backward = &SoftmaxBackward;
      o.dropout_apply = &DropoutApply;
      return o;
    }();
    return ops;
  }
};

}  // namespace
}  // namespace zerorun::kernels::cpu
