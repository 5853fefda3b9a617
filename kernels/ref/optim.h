// Optimizer update rules over raw buffers: the plain-loop reference (the oracle for kernels/cpu and
// any device kernel), written straight from the formulas in docs/optim.md. Also defines the span and
// hyper-parameter structs every implementation of these rules takes.
//
// Every rule reads fp32 master weights, gradients in fp32/fp16/bf16 multiplied by `grad_scale` first
// (the combined unscale+clip factor, so no separate pass is needed), updates fp32 state in place and
// can write the updated weights as a 16-bit copy in the same pass.
#pragma once

#include <cstdint>

#include "zerorun/core/dtype.h"

namespace zerorun::kernels {

// One contiguous run of `n` parameters and their gradients.
struct OptimSpan {
  float* params = nullptr;          // (n) fp32 master weights, updated in place
  const void* grads = nullptr;      // (n) gradients, grad_dtype (fp32, fp16 or bf16)
  DType grad_dtype = DType::kF32;
  float grad_scale = 1.0f;          // every gradient is used as g * grad_scale
  void* param_copy = nullptr;       // (n) optional: the updated weights written as copy_dtype
  DType copy_dtype = DType::kBF16;  // fp16, bf16 or fp32
  int64_t n = 0;
};

// Adam / AdamW as DeepSpeed's FusedAdam and DeepSpeedCPUAdam define them. With bias correction,
// bc1 = 1 - beta1^step, bc2 = 1 - beta2^step (else both 1):
//   g <- g*grad_scale;  if !adam_w_mode: g <- g + wd*p      (L2 decay, classic Adam)
//   m <- b1*m + (1-b1)*g;  v <- b2*v + (1-b2)*g*g
//   denom <- sqrt(v) * (1/sqrt(bc2)) + eps
//   if adam_w_mode: p <- p + (-lr*wd)*p                     (decoupled decay, AdamW)
//   p <- p + (-lr/bc1) * (m/denom)
struct AdamHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  bool adam_w_mode = true;      // DeepSpeed's default, also for "type": "Adam"
  bool bias_correction = true;
  int64_t step = 1;             // 1 for the first update (REQUIRES: >= 1)
};

// Lion (Chen et al. 2023; DeepSpeed FusedLion / DeepSpeedCPULion):
//   c <- b1*m + (1-b1)*g;  p <- p*(1 - lr*wd);  p <- p - lr*sign(c);  m <- b2*m + (1-b2)*g
struct LionHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;  // DeepSpeed's code default (the Lion paper uses 0.99)
  float weight_decay = 0.0f;
  int64_t step = 1;
};

// SGD as torch.optim.SGD:
//   d <- g + wd*p
//   if momentum != 0: buf <- d on the first step, else buf <- momentum*buf + (1-dampening)*d;
//                     d <- d + momentum*buf (nesterov) or d <- buf
//   p <- p - lr*d
struct SgdHyper {
  float lr = 1e-3f;
  float momentum = 0.0f;
  float dampening = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
  int64_t step = 1;  // step 1 initialises the momentum buffer
};

// Adagrad as torch.optim.Adagrad (DeepSpeedCPUAdagrad is the lr_decay = 0 case):
//   g <- g + wd*p;  clr <- lr / (1 + (step-1)*lr_decay);  sum <- sum + g*g;  p <- p - clr*g/(sqrt(sum)+eps)
struct AdagradHyper {
  float lr = 1e-2f;
  float lr_decay = 0.0f;
  float eps = 1e-10f;
  float weight_decay = 0.0f;
  int64_t step = 1;
};

// Lamb as DeepSpeed's FusedLamb. Per tensor:
//   m <- b1*m + (1-b1)*g;  v <- b2*v + (1-b2)*g*g
//   denom <- sqrt(v + eps) if eps_inside_sqrt else sqrt(v) + eps
//   u <- m/denom + wd*p
//   trust <- ||p|| / ||u|| clamped to [min_coeff, max_coeff]; 1 if either norm is 0
//   p <- p - step_size*trust*u,  step_size = lr*sqrt(bc2)/bc1 with bias correction, else lr
// The trust ratio needs whole-tensor norms, so the rule is split in two passes: LambMoments updates
// m, v and returns this span's partial sums of p^2 and u^2 (a tensor split across spans or ranks sums
// them first), LambApply then updates p with the tensor's trust ratio.
struct LambHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  bool bias_correction = true;
  bool eps_inside_sqrt = false;
  float max_coeff = 10.0f;
  float min_coeff = 0.01f;
  int64_t step = 1;
};
struct LambNorms {
  double param_sq = 0.0;   // sum of p^2 (weights before the update)
  double update_sq = 0.0;  // sum of u^2
};
// The clamped trust ratio from a whole tensor's sums.
float LambTrustRatio(const LambHyper& h, const LambNorms& whole_tensor);
// The per-step constant lr*sqrt(bc2)/bc1 (or lr).
float LambStepSize(const LambHyper& h);

// Per-step constants shared by every implementation, so that they agree bit for bit on them.
struct AdamConstants {
  float step_size;      // -lr/bc1
  float bc2_rsqrt;      // 1/sqrt(bc2)
  float decoupled;      // -lr*wd in AdamW mode, else 0
  float l2;             // wd in Adam (L2) mode, else 0
};
AdamConstants MakeAdamConstants(const AdamHyper& h);

namespace ref {

void AdamStep(const AdamHyper& h, const OptimSpan& s, float* exp_avg, float* exp_avg_sq);  // state (n)
void LionStep(const LionHyper& h, const OptimSpan& s, float* exp_avg);                      // state (n)
// momentum_buffer (n) may be null when h.momentum == 0.
void SgdStep(const SgdHyper& h, const OptimSpan& s, float* momentum_buffer);
void AdagradStep(const AdagradHyper& h, const OptimSpan& s, float* sum);                    // state (n)
LambNorms LambMoments(const LambHyper& h, const OptimSpan& s, float* exp_avg, float* exp_avg_sq);
// Reads params, exp_avg, exp_avg_sq (not the gradients); writes params and param_copy.
void LambApply(const LambHyper& h, const OptimSpan& s, const float* exp_avg, const float* exp_avg_sq,
               float trust_ratio);
// Moments, trust ratio and apply for a span that is one whole tensor. Returns the trust ratio.
float LambStep(const LambHyper& h, const OptimSpan& s, float* exp_avg, float* exp_avg_sq);

}  // namespace ref
}  // namespace zerorun::kernels
