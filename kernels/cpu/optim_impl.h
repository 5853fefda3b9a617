// Private to kernels/cpu/optim*.cc: the per-block loops of the optimizer updates, included by one
// translation unit per instruction set (optim.cc portable, optim_avx2.cc, optim_avx512.cc), each
// compiled with its own flags. Everything here has internal linkage so that the ISA-specific copies
// never get merged by the linker. Loops run over a block of compile-time length (kOptimBlock) with
// restrict pointers so that the compiler vectorises them at -O2; a shorter tail block takes the same
// code with a run-time count. Expressions mirror kernels/ref/optim.cc exactly.
#pragma once

#include <cmath>
#include <cstdint>

#include "zerorun/kernels/ref/optim.h"

namespace zerorun::kernels::cpu::detail {

inline constexpr int64_t kOptimBlock = 256;

// The loops, with pointers to fp32 gradients already converted (not yet scaled).
struct OptimBlockFns {
  void (*adam)(const AdamHyper& h, const AdamConstants& c, float scale, float* p, const float* g, float* m,
               float* v, int64_t n);
  void (*lion)(const LionHyper& h, float scale, float* p, const float* g, float* m, int64_t n);
  void (*sgd)(const SgdHyper& h, float scale, float* p, const float* g, float* buf, int64_t n);
  void (*adagrad)(const AdagradHyper& h, float clr, float scale, float* p, const float* g, float* sum, int64_t n);
  // Updates m, v; writes u (n) for the caller to sum.
  void (*lamb_moments)(const LambHyper& h, float scale, const float* p, const float* g, float* m, float* v,
                       float* u, int64_t n);
  void (*lamb_apply)(const LambHyper& h, float step, float* p, const float* m, const float* v, int64_t n);
};

const OptimBlockFns& OptimBlockFnsPortable();
const OptimBlockFns& OptimBlockFnsAvx2();
const OptimBlockFns& OptimBlockFnsAvx512();

}  // namespace zerorun::kernels::cpu::detail

// The loop bodies, instantiated by each ISA translation unit that defines ZR_OPTIM_DEFINE_LOOPS.
#ifdef ZR_OPTIM_DEFINE_LOOPS
// With FMA available GCC contracts a*b+c into one rounding (C++ default -ffp-contract=fast), so the
// AVX2/AVX-512 paths differ from the reference in the last bit; the portable path equals it exactly.
// (Turning contraction off with `#pragma GCC optimize` cost a third of the throughput.)
namespace zerorun::kernels::cpu::detail {
namespace {

#define ZR_R __restrict__

template <bool kFixed, bool kL2, bool kDecoupled>
void AdamLoop(const AdamHyper& h, const AdamConstants& c, float scale, float* ZR_R p, const float* ZR_R g,
              float* ZR_R m, float* ZR_R v, int64_t n_rt) {
  const int64_t n = kFixed ? kOptimBlock : n_rt;
  const float b1 = h.beta1, b2 = h.beta2, omb1 = 1.0f - h.beta1, omb2 = 1.0f - h.beta2, eps = h.eps;
  const float l2 = c.l2, dec = c.decoupled, step = c.step_size, bc2 = c.bc2_rsqrt;
  for (int64_t i = 0; i < n; ++i) {
    float pi = p[i];
    float gi = g[i] * scale;
    if constexpr (kL2) gi = gi + l2 * pi;
    float mi = b1 * m[i] + omb1 * gi;
    float vi = b2 * v[i] + omb2 * (gi * gi);
    float denom = __builtin_sqrtf(vi) * bc2 + eps;
    if constexpr (kDecoupled) pi = pi + dec * pi;
    pi = pi + step * (mi / denom);
    m[i] = mi;
    v[i] = vi;
    p[i] = pi;
  }
}

void AdamFn(const AdamHyper& h, const AdamConstants& c, float scale, float* p, const float* g, float* m, float* v,
            int64_t n) {
  const bool l2 = !h.adam_w_mode && h.weight_decay > 0.0f;
  const bool dec = h.adam_w_mode && h.weight_decay > 0.0f;
  const bool fixed = n == kOptimBlock;
#define ZR_ADAM(F, L, D) AdamLoop<F, L, D>(h, c, scale, p, g, m, v, n)
  if (fixed) {
    if (l2) ZR_ADAM(true, true, false); else if (dec) ZR_ADAM(true, false, true); else ZR_ADAM(true, false, false);
  } else {
    if (l2) ZR_ADAM(false, true, false); else if (dec) ZR_ADAM(false, false, true); else ZR_ADAM(false, false, false);
  }
#undef ZR_ADAM
}

template <bool kFixed, bool kDecay>
void LionLoop(const LionHyper& h, float scale, float* ZR_R p, const float* ZR_R g, float* ZR_R m, int64_t n_rt) {
  const int64_t n = kFixed ? kOptimBlock : n_rt;
  const float b1 = h.beta1, b2 = h.beta2, omb1 = 1.0f - h.beta1, omb2 = 1.0f - h.beta2, lr = h.lr;
  const float decay = 1.0f - h.lr * h.weight_decay;
  for (int64_t i = 0; i < n; ++i) {
    float gi = g[i] * scale;
    float mi = m[i];
    float ci = b1 * mi + omb1 * gi;
    float pi = p[i];
    if constexpr (kDecay) pi = pi * decay;
    float sign = ci > 0.0f ? 1.0f : (ci < 0.0f ? -1.0f : 0.0f);
    pi = pi - lr * sign;
    m[i] = b2 * mi + omb2 * gi;
    p[i] = pi;
  }
}

void LionFn(const LionHyper& h, float scale, float* p, const float* g, float* m, int64_t n) {
  const bool decay = h.weight_decay != 0.0f;
  if (n == kOptimBlock) {
    if (decay) LionLoop<true, true>(h, scale, p, g, m, n); else LionLoop<true, false>(h, scale, p, g, m, n);
  } else {
    if (decay) LionLoop<false, true>(h, scale, p, g, m, n); else LionLoop<false, false>(h, scale, p, g, m, n);
  }
}

template <bool kFixed, bool kDecay, bool kMomentum, bool kFirst, bool kNesterov>
void SgdLoop(const SgdHyper& h, float scale, float* ZR_R p, const float* ZR_R g, float* ZR_R buf, int64_t n_rt) {
  const int64_t n = kFixed ? kOptimBlock : n_rt;
  const float wd = h.weight_decay, mom = h.momentum, omd = 1.0f - h.dampening, lr = h.lr;
  for (int64_t i = 0; i < n; ++i) {
    float pi = p[i];
    float d = g[i] * scale;
    if constexpr (kDecay) d = d + wd * pi;
    if constexpr (kMomentum) {
      float b;
      if constexpr (kFirst) b = d; else b = mom * buf[i] + omd * d;
      buf[i] = b;
      if constexpr (kNesterov) d = d + mom * b; else d = b;
    }
    p[i] = pi - lr * d;
  }
}

template <bool kFixed>
void SgdDispatch(const SgdHyper& h, float scale, float* p, const float* g, float* buf, int64_t n) {
  const bool decay = h.weight_decay != 0.0f;
  if (h.momentum == 0.0f) {
    if (decay) SgdLoop<kFixed, true, false, false, false>(h, scale, p, g, buf, n);
    else SgdLoop<kFixed, false, false, false, false>(h, scale, p, g, buf, n);
    return;
  }
  const bool first = h.step <= 1;
#define ZR_SGD(D, F, N) SgdLoop<kFixed, D, true, F, N>(h, scale, p, g, buf, n)
  if (decay) {
    if (first) { if (h.nesterov) ZR_SGD(true, true, true); else ZR_SGD(true, true, false); }
    else { if (h.nesterov) ZR_SGD(true, false, true); else ZR_SGD(true, false, false); }
  } else {
    if (first) { if (h.nesterov) ZR_SGD(false, true, true); else ZR_SGD(false, true, false); }
    else { if (h.nesterov) ZR_SGD(false, false, true); else ZR_SGD(false, false, false); }
  }
#undef ZR_SGD
}

void SgdFn(const SgdHyper& h, float scale, float* p, const float* g, float* buf, int64_t n) {
  if (n == kOptimBlock) SgdDispatch<true>(h, scale, p, g, buf, n); else SgdDispatch<false>(h, scale, p, g, buf, n);
}

template <bool kFixed, bool kDecay>
void AdagradLoop(const AdagradHyper& h, float clr, float scale, float* ZR_R p, const float* ZR_R g, float* ZR_R sum,
                 int64_t n_rt) {
  const int64_t n = kFixed ? kOptimBlock : n_rt;
  const float wd = h.weight_decay, eps = h.eps;
  for (int64_t i = 0; i < n; ++i) {
    float pi = p[i];
    float gi = g[i] * scale;
    if constexpr (kDecay) gi = gi + wd * pi;
    float si = sum[i] + gi * gi;
    sum[i] = si;
    p[i] = pi - clr * (gi / (__builtin_sqrtf(si) + eps));
  }
}

void AdagradFn(const AdagradHyper& h, float clr, float scale, float* p, const float* g, float* sum, int64_t n) {
  const bool decay = h.weight_decay != 0.0f;
  if (n == kOptimBlock) {
    if (decay) AdagradLoop<true, true>(h, clr, scale, p, g, sum, n); else AdagradLoop<true, false>(h, clr, scale, p, g, sum, n);
  } else {
    if (decay) AdagradLoop<false, true>(h, clr, scale, p, g, sum, n); else AdagradLoop<false, false>(h, clr, scale, p, g, sum, n);
  }
}

template <bool kFixed, bool kInside>
void LambMomentsLoop(const LambHyper& h, float scale, const float* ZR_R p, const float* ZR_R g, float* ZR_R m,
                     float* ZR_R v, float* ZR_R u, int64_t n_rt) {
  const int64_t n = kFixed ? kOptimBlock : n_rt;
  const float b1 = h.beta1, b2 = h.beta2, omb1 = 1.0f - h.beta1, omb2 = 1.0f - h.beta2, eps = h.eps;
  const float wd = h.weight_decay;
  for (int64_t i = 0; i < n; ++i) {
    float gi = g[i] * scale;
    float mi = b1 * m[i] + omb1 * gi;
    float vi = b2 * v[i] + omb2 * (gi * gi);
    float denom;
    if constexpr (kInside) denom = __builtin_sqrtf(vi + eps); else denom = __builtin_sqrtf(vi) + eps;
    m[i] = mi;
    v[i] = vi;
    u[i] = mi / denom + wd * p[i];
  }
}

void LambMomentsFn(const LambHyper& h, float scale, const float* p, const float* g, float* m, float* v, float* u,
                   int64_t n) {
  if (n == kOptimBlock) {
    if (h.eps_inside_sqrt) LambMomentsLoop<true, true>(h, scale, p, g, m, v, u, n);
    else LambMomentsLoop<true, false>(h, scale, p, g, m, v, u, n);
  } else {
    if (h.eps_inside_sqrt) LambMomentsLoop<false, true>(h, scale, p, g, m, v, u, n);
    else LambMomentsLoop<false, false>(h, scale, p, g, m, v, u, n);
  }
}

template <bool kFixed, bool kInside>
void LambApplyLoop(const LambHyper& h, float step, float* ZR_R p, const float* ZR_R m, const float* ZR_R v,
                   int64_t n_rt) {
  const int64_t n = kFixed ? kOptimBlock : n_rt;
  const float eps = h.eps, wd = h.weight_decay;
  for (int64_t i = 0; i < n; ++i) {
    float pi = p[i];
    float denom;
    if constexpr (kInside) denom = __builtin_sqrtf(v[i] + eps); else denom = __builtin_sqrtf(v[i]) + eps;
    float ui = m[i] / denom + wd * pi;
    p[i] = pi - step * ui;
  }
}

void LambApplyFn(const LambHyper& h, float step, float* p, const float* m, const float* v, int64_t n) {
  if (n == kOptimBlock) {
    if (h.eps_inside_sqrt) LambApplyLoop<true, true>(h, step, p, m, v, n); else LambApplyLoop<true, false>(h, step, p, m, v, n);
  } else {
    if (h.eps_inside_sqrt) LambApplyLoop<false, true>(h, step, p, m, v, n); else LambApplyLoop<false, false>(h, step, p, m, v, n);
  }
}

#undef ZR_R

constexpr OptimBlockFns kOptimBlockFns = {AdamFn, LionFn, SgdFn, AdagradFn, LambMomentsFn, LambApplyFn};

}  // namespace
}  // namespace zerorun::kernels::cpu::detail
#endif  // ZR_OPTIM_DEFINE_LOOPS
