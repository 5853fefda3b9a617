// Numerics statistics of gradients (runtime's `numerics` section, docs/monitoring.md): per parameter
// group, the largest magnitude, the sum of squares, and how many elements are exactly zero, not
// finite, or outside fp16's range. Counted over the values as they are stored (at fp16: multiplied by
// the loss scale), so the fp16 counts say what the current scale does to the gradients. Partial
// statistics of disjoint partitions combine with Add (and across ranks by a sum and a max).
#pragma once

#include <cstdint>

#include "zerorun/core/dtype.h"

namespace zerorun::zero {

// fp16's range: the smallest subnormal (2^-24) and the largest finite value.
inline constexpr double kFp16MinSubnormal = 5.9604644775390625e-08;
inline constexpr double kFp16Max = 65504.0;

struct GradStats {
  int64_t numel = 0;           // elements counted (layout padding is never counted)
  int64_t zeros = 0;           // exactly +-0
  int64_t nonfinite = 0;       // NaN or +-Inf
  int64_t fp16_underflow = 0;  // finite, nonzero, |v| < 2^-24: below fp16's smallest subnormal
  int64_t fp16_overflow = 0;   // |v| > 65504 or not finite: beyond fp16's largest finite value
  double max_abs = 0;          // largest |v| over the finite elements
  double sum_squares = 0;      // sum of v^2 over the finite elements (fp64)

  void Add(const GradStats& o);
  double Fraction(int64_t count) const { return numel > 0 ? static_cast<double>(count) / static_cast<double>(numel) : 0.0; }
};

// Adds the n values at x (host memory; fp32, fp16, bf16 or fp64) to *s.
void AccumulateGradStats(const void* x, int64_t n, DType dtype, GradStats* s);

}  // namespace zerorun::zero
