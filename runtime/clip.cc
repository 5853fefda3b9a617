// Global gradient norm and the combined unscale+clip factor; see clip.h.
#include "zerorun/runtime/clip.h"

#include <cmath>

#include "zerorun/core/error.h"

namespace zerorun::runtime {

double GlobalNormFromSumSquares(double total) {
  if (!std::isfinite(total) || total < 0.0) return -1.0;
  return std::sqrt(total);
}

double GlobalNormFromSumSquares(std::span<const double> sums_sq) {
  double total = 0.0;
  for (double s : sums_sq) total += s;
  return GlobalNormFromSumSquares(total);
}

UnscaleClip ComputeUnscaleClip(double scaled_norm, double loss_scale, double max_norm) {
  if (!(loss_scale > 0.0) || !std::isfinite(loss_scale)) {
    ZR_THROW(InvalidArgument, "unscale/clip: the loss scale must be a positive number, got {}", loss_scale);
  }
  UnscaleClip r;
  const bool finite = std::isfinite(scaled_norm) && scaled_norm >= 0.0;
  r.unscaled_norm = finite ? scaled_norm / loss_scale : -1.0;
  double combined = loss_scale;
  if (max_norm > 0.0 && finite) {
    const double c = (r.unscaled_norm + 1e-6) / max_norm;
    if (c > 1.0) {
      combined = c * loss_scale;
      r.clip_coef = 1.0 / c;
      r.clipped = true;
    }
  }
  r.grad_scale = static_cast<float>(1.0 / combined);
  return r;
}

}  // namespace zerorun::runtime
