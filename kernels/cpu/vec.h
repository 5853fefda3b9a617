// fp32 row primitives for the CPU layer kernels, compiled once per ISA (vec.cc: portable C++,
// vec_avx2.cc, vec_avx512.cc) from the templates in vec_impl.h and picked per call by ActiveIsa().
// The layer kernels convert 16-bit rows to fp32 scratch, run these, and round once on the way out.
//
// Accuracy: the portable path uses <cmath>; the SIMD paths use polynomial exp (Cephes-style, about
// 2 ulp), tanh and sigmoid through exp, and erf by Abramowitz-Stegun 7.1.26 (absolute error below
// 1.5e-7); NaN inputs propagate. The kernel tests bound the resulting error against ref/.
#pragma once

#include <cstdint>

#include "zerorun/kernels/ops.h"

namespace zerorun::kernels::cpu {

struct VecOps {
  float (*sum)(const float* x, int64_t n) = nullptr;
  float (*max)(const float* x, int64_t n) = nullptr;
  float (*dot)(const float* a, const float* b, int64_t n) = nullptr;
  // sum of (x - mean)^2
  float (*sum_sq_centered)(const float* x, int64_t n, float mean) = nullptr;
  // y = exp(x - shift); returns sum y. y may alias x.
  float (*exp_shift_sum)(float* y, const float* x, int64_t n, float shift) = nullptr;
  // y = a * x; y = a + b; y += a * x. Outputs may alias inputs.
  void (*scale)(float* y, const float* x, float a, int64_t n) = nullptr;
  void (*add)(float* y, const float* a, const float* b, int64_t n) = nullptr;
  // y = x / a, an IEEE division per element (scale by 1/a rounds differently). y may alias x.
  void (*divide)(float* y, const float* x, float a, int64_t n) = nullptr;
  void (*axpy)(float* y, const float* x, float a, int64_t n) = nullptr;
  void (*gelu)(float* y, const float* x, int64_t n, GeluApprox approx) = nullptr;
  // dx = dy * gelu'(x)
  void (*gelu_grad)(float* dx, const float* dy, const float* x, int64_t n, GeluApprox approx) = nullptr;
  void (*silu)(float* y, const float* x, int64_t n) = nullptr;
  void (*silu_grad)(float* dx, const float* dy, const float* x, int64_t n) = nullptr;
  // y = silu(g) * u;  dg = dy * u * silu'(g), du = dy * silu(g)
  void (*swiglu)(float* y, const float* g, const float* u, int64_t n) = nullptr;
  void (*swiglu_grad)(float* dg, float* du, const float* dy, const float* g, const float* u, int64_t n) = nullptr;
  // y = (x - mean) * rstd * w + b (w, b may be null: 1, 0)
  void (*norm_apply)(float* y, const float* x, int64_t n, float mean, float rstd, const float* w,
                     const float* b) = nullptr;
  // With xhat = (x - mean) * rstd and g = dy * w: returns sum g and sum g * xhat in *sg, *sgx, and
  // accumulates dw += dy * xhat, db += dy (either may be null).
  void (*norm_backward_stats)(const float* x, const float* dy, const float* w, int64_t n, float mean, float rstd,
                              float* dw, float* db, float* sg, float* sgx) = nullptr;
  // dx = rstd * (g - c1 - xhat * c2)
  void (*norm_backward_dx)(float* dx, const float* x, const float* dy, const float* w, int64_t n, float mean,
                           float rstd, float c1, float c2) = nullptr;
  // dx = y * (dy - dot)
  void (*softmax_backward)(float* dx, const float* dy, const float* y, float dot, int64_t n) = nullptr;
  // y = (words >> 8) >= threshold ? x * scale : 0 (the dropout mask, dropout_mask.h). y may alias x.
  void (*dropout_apply)(float* y, const float* x, const uint32_t* words, int64_t n, uint32_t threshold,
                        float scale) = nullptr;
};

// The primitives for ActiveIsa() (re-read every call, so SetMaxIsa takes effect at once).
const VecOps& Vec();

namespace detail {
const VecOps& VecOpsScalar();
const VecOps& VecOpsAvx2();
const VecOps& VecOpsAvx512();
}  // namespace detail

}  // namespace zerorun::kernels::cpu
