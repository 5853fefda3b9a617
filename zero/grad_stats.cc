// GradStats: one pass over host values, each widened to fp64 (a monitoring path that runs every
// `numerics.interval` steps, not on every step).
#include "zerorun/zero/grad_stats.h"

#include <algorithm>
#include <cmath>

#include "zerorun/core/error.h"

namespace zerorun::zero {

void GradStats::Add(const GradStats& o) {
  numel += o.numel;
  zeros += o.zeros;
  nonfinite += o.nonfinite;
  fp16_underflow += o.fp16_underflow;
  fp16_overflow += o.fp16_overflow;
  max_abs = std::max(max_abs, o.max_abs);
  sum_squares += o.sum_squares;
}

namespace {
inline double Widen(double v) { return v; }
template <typename T>
inline double Widen(T v) {
  return static_cast<double>(ToFloat(v));
}

template <typename T>
void Accumulate(const T* x, int64_t n, GradStats* s) {
  GradStats t;
  t.numel = n;
  for (int64_t i = 0; i < n; ++i) {
    const double v = Widen(x[i]);
    const double a = std::fabs(v);
    if (!std::isfinite(v)) {
      ++t.nonfinite;
      ++t.fp16_overflow;
    } else if (a == 0.0) {
      ++t.zeros;
    } else {
      if (a < kFp16MinSubnormal) ++t.fp16_underflow;
      if (a > kFp16Max) ++t.fp16_overflow;
      t.max_abs = std::max(t.max_abs, a);
      t.sum_squares += v * v;
    }
  }
  s->Add(t);
}
}  // namespace

void AccumulateGradStats(const void* x, int64_t n, DType dtype, GradStats* s) {
  if (n <= 0) return;
  switch (dtype) {
    case DType::kF32: return Accumulate(static_cast<const float*>(x), n, s);
    case DType::kF16: return Accumulate(static_cast<const Half*>(x), n, s);
    case DType::kBF16: return Accumulate(static_cast<const BFloat16*>(x), n, s);
    case DType::kF64: return Accumulate(static_cast<const double*>(x), n, s);
    default: ZR_THROW(InvalidArgument, "gradient statistics: unsupported dtype {}", DTypeName(dtype));
  }
}

}  // namespace zerorun::zero
