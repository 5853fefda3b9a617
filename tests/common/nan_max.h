// MaxKeepNan(worst, e): the larger of the two, or NaN once either is NaN. An error maximum kept with
// std::max(worst, e) passes over a NaN e (NaN compares false) and lets the check after it pass.
#pragma once

#include <cmath>

namespace zrtest {

inline double MaxKeepNan(double worst, double e) {
  if (std::isnan(worst)) return worst;
  return std::isnan(e) || e > worst ? e : worst;
}

}  // namespace zrtest
