// Gradient clipping math (reference §4): the global L2 norm from per-partition sums of squares, and
// the one factor that unscales (removes the fp16 loss scale) and clips in the same multiply, so the
// optimizer kernels apply it inside their single pass (kernels::OptimSpan::grad_scale).
//
// The caller computes each partition's sum of squares of its (averaged, still loss-scaled) gradients
// and agrees the total across ranks (all-reduce SUM) before calling these. An overflowed step never
// gets here: overflow wins, no norm, no clipping, no update.
#pragma once

#include <span>

namespace zerorun::runtime {

// sqrt of the sum of `sums_sq` (each a partition's, or a parameter group's, sum of squares). A
// non-finite result is reported as -1, as DeepSpeed does, which disables clipping.
double GlobalNormFromSumSquares(std::span<const double> sums_sq);
double GlobalNormFromSumSquares(double total_sum_sq);

struct UnscaleClip {
  double unscaled_norm = 0.0;  // scaled_norm / loss_scale (-1 if the norm was not finite)
  double clip_coef = 1.0;      // in (0, 1]: the clipping part alone
  bool clipped = false;        // clip_coef < 1
  float grad_scale = 1.0f;     // multiply every gradient by this: clip_coef / loss_scale
};

// `scaled_norm` is the global norm of the loss-scaled gradients, `loss_scale` the scale used in the
// backward that produced them, `max_norm` the gradient_clipping value (<= 0: no clipping).
// DeepSpeed's form: c = max(1, (scaled_norm/loss_scale + 1e-6) / max_norm), grads *= 1/(c*loss_scale);
// clipping therefore happens only when the unscaled norm exceeds max_norm (minus 1e-6).
UnscaleClip ComputeUnscaleClip(double scaled_norm, double loss_scale, double max_norm);

}  // namespace zerorun::runtime
