// Reference optimizer updates: one element at a time, straight from the formulas in optim.h.
#include "zerorun/kernels/ref/optim.h"

#include <cmath>

#include "zerorun/core/error.h"

namespace zerorun::kernels {

namespace {

float LoadGrad(const OptimSpan& s, int64_t i) {
  float g;
  switch (s.grad_dtype) {
    case DType::kF32: g = static_cast<const float*>(s.grads)[i]; break;
    case DType::kF16: g = HalfBitsToFloat(static_cast<const uint16_t*>(s.grads)[i]); break;
    case DType::kBF16: g = BF16BitsToFloat(static_cast<const uint16_t*>(s.grads)[i]); break;
    default: ZR_CHECK(false, "optimizer gradients must be fp32, fp16 or bf16, got {}", DTypeName(s.grad_dtype));
  }
  return g * s.grad_scale;
}

void StoreCopy(const OptimSpan& s, int64_t i, float p) {
  if (s.param_copy == nullptr) return;
  switch (s.copy_dtype) {
    case DType::kF32: static_cast<float*>(s.param_copy)[i] = p; break;
    case DType::kF16: static_cast<uint16_t*>(s.param_copy)[i] = FloatToHalfBits(p); break;
    case DType::kBF16: static_cast<uint16_t*>(s.param_copy)[i] = FloatToBF16Bits(p); break;
    default: ZR_CHECK(false, "optimizer param copy must be fp32, fp16 or bf16, got {}", DTypeName(s.copy_dtype));
  }
}

void CheckSpan(const OptimSpan& s) {
  ZR_CHECK(s.n >= 0, "optimizer span of negative size {}", s.n);
  ZR_CHECK(s.n == 0 || (s.params != nullptr && s.grads != nullptr), "optimizer span without params or grads");
}

}  // namespace

AdamConstants MakeAdamConstants(const AdamHyper& h) {
  ZR_CHECK(h.step >= 1, "Adam step must be >= 1, got {}", h.step);
  double bc1 = 1.0, bc2 = 1.0;
  if (h.bias_correction) {
    bc1 = 1.0 - std::pow(static_cast<double>(h.beta1), static_cast<double>(h.step));
    bc2 = 1.0 - std::pow(static_cast<double>(h.beta2), static_cast<double>(h.step));
  }
  AdamConstants c;
  c.step_size = static_cast<float>(-static_cast<double>(h.lr) / bc1);
  c.bc2_rsqrt = static_cast<float>(1.0 / std::sqrt(bc2));
  c.decoupled = h.adam_w_mode ? -h.lr * h.weight_decay : 0.0f;
  c.l2 = h.adam_w_mode ? 0.0f : h.weight_decay;
  return c;
}

float LambStepSize(const LambHyper& h) {
  ZR_CHECK(h.step >= 1, "Lamb step must be >= 1, got {}", h.step);
  if (!h.bias_correction) return h.lr;
  double bc1 = 1.0 - std::pow(static_cast<double>(h.beta1), static_cast<double>(h.step));
  double bc2 = 1.0 - std::pow(static_cast<double>(h.beta2), static_cast<double>(h.step));
  return static_cast<float>(h.lr * std::sqrt(bc2) / bc1);
}

float LambTrustRatio(const LambHyper& h, const LambNorms& t) {
  double w = std::sqrt(t.param_sq), u = std::sqrt(t.update_sq);
  if (w == 0.0 || u == 0.0) return 1.0f;
  double r = w / u;
  if (r > h.max_coeff) r = h.max_coeff;
  if (r < h.min_coeff) r = h.min_coeff;
  return static_cast<float>(r);
}

namespace ref {

void AdamStep(const AdamHyper& h, const OptimSpan& s, float* m, float* v) {
  CheckSpan(s);
  const AdamConstants c = MakeAdamConstants(h);
  for (int64_t i = 0; i < s.n; ++i) {
    float p = s.params[i];
    float g = LoadGrad(s, i);
    if (!h.adam_w_mode && h.weight_decay > 0.0f) g = g + c.l2 * p;
    m[i] = h.beta1 * m[i] + (1.0f - h.beta1) * g;
    v[i] = h.beta2 * v[i] + (1.0f - h.beta2) * (g * g);
    float denom = std::sqrt(v[i]) * c.bc2_rsqrt + h.eps;
    if (h.adam_w_mode && h.weight_decay > 0.0f) p = p + c.decoupled * p;
    p = p + c.step_size * (m[i] / denom);
    s.params[i] = p;
    StoreCopy(s, i, p);
  }
}

void LionStep(const LionHyper& h, const OptimSpan& s, float* m) {
  CheckSpan(s);
  const float decay = 1.0f - h.lr * h.weight_decay;
  for (int64_t i = 0; i < s.n; ++i) {
    float g = LoadGrad(s, i);
    float c = h.beta1 * m[i] + (1.0f - h.beta1) * g;
    float p = s.params[i];
    if (h.weight_decay != 0.0f) p = p * decay;
    float sign = c > 0.0f ? 1.0f : (c < 0.0f ? -1.0f : 0.0f);
    p = p - h.lr * sign;
    m[i] = h.beta2 * m[i] + (1.0f - h.beta2) * g;
    s.params[i] = p;
    StoreCopy(s, i, p);
  }
}

void SgdStep(const SgdHyper& h, const OptimSpan& s, float* buf) {
  CheckSpan(s);
  ZR_CHECK(h.momentum == 0.0f || buf != nullptr || s.n == 0, "SGD with momentum needs a momentum buffer");
  for (int64_t i = 0; i < s.n; ++i) {
    float p = s.params[i];
    float d = LoadGrad(s, i);
    if (h.weight_decay != 0.0f) d = d + h.weight_decay * p;
    if (h.momentum != 0.0f) {
      if (h.step <= 1) {
        buf[i] = d;
      } else {
        buf[i] = h.momentum * buf[i] + (1.0f - h.dampening) * d;
      }
      d = h.nesterov ? d + h.momentum * buf[i] : buf[i];
    }
    p = p - h.lr * d;
    s.params[i] = p;
    StoreCopy(s, i, p);
  }
}

void AdagradStep(const AdagradHyper& h, const OptimSpan& s, float* sum) {
  CheckSpan(s);
  const float clr = h.lr / (1.0f + static_cast<float>(h.step - 1) * h.lr_decay);
  for (int64_t i = 0; i < s.n; ++i) {
    float p = s.params[i];
    float g = LoadGrad(s, i);
    if (h.weight_decay != 0.0f) g = g + h.weight_decay * p;
    sum[i] = sum[i] + g * g;
    p = p - clr * (g / (std::sqrt(sum[i]) + h.eps));
    s.params[i] = p;
    StoreCopy(s, i, p);
  }
}

namespace {
float LambDenom(const LambHyper& h, float v) { return h.eps_inside_sqrt ? std::sqrt(v + h.eps) : std::sqrt(v) + h.eps; }
}  // namespace

LambNorms LambMoments(const LambHyper& h, const OptimSpan& s, float* m, float* v) {
  CheckSpan(s);
  LambNorms norms;
  for (int64_t i = 0; i < s.n; ++i) {
    float p = s.params[i];
    float g = LoadGrad(s, i);
    m[i] = h.beta1 * m[i] + (1.0f - h.beta1) * g;
    v[i] = h.beta2 * v[i] + (1.0f - h.beta2) * (g * g);
    float u = m[i] / LambDenom(h, v[i]) + h.weight_decay * p;
    norms.param_sq += static_cast<double>(p) * p;
    norms.update_sq += static_cast<double>(u) * u;
  }
  return norms;
}

void LambApply(const LambHyper& h, const OptimSpan& s, const float* m, const float* v, float trust_ratio) {
  ZR_CHECK(s.n == 0 || s.params != nullptr, "Lamb apply without params");
  const float scale = LambStepSize(h) * trust_ratio;
  for (int64_t i = 0; i < s.n; ++i) {
    float p = s.params[i];
    float u = m[i] / LambDenom(h, v[i]) + h.weight_decay * p;
    p = p - scale * u;
    s.params[i] = p;
    StoreCopy(s, i, p);
  }
}

float LambStep(const LambHyper& h, const OptimSpan& s, float* m, float* v) {
  float trust = LambTrustRatio(h, LambMoments(h, s, m, v));
  LambApply(h, s, m, v, trust);
  return trust;
}

}  // namespace ref
}  // namespace zerorun::kernels
