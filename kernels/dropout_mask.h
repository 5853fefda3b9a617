// The dropout mask as a pure function of (seed, stream, index): element i is kept when the 24 high
// bits of Philox word i, read as a uniform in [0, 1) (core's U32ToUniform), are >= p. Shared by every
// backend, device code included (core/philox.h), so masks agree bit for bit (internal header).
#pragma once

#include <cmath>
#include <cstdint>

#include "zerorun/core/philox.h"

namespace zerorun::kernels {

// U32ToUniform(w) >= p  <=>  (w >> 8) >= ceil(p * 2^24): an integer test, exact for every float p.
// Computed on the host; device kernels receive the threshold.
inline uint32_t DropoutThreshold(float p) {
  return static_cast<uint32_t>(std::ceil(static_cast<double>(p) * 16777216.0));
}

// Keep flags of elements [4 * block, 4 * block + 4) of the word stream.
ZR_HOST_DEVICE inline void DropoutKeepBlock(uint64_t seed, uint64_t stream, uint64_t block, uint32_t threshold,
                                            bool keep[4]) {
  PhiloxWords w = Philox4x32Block(seed, stream, block);
  for (int j = 0; j < 4; ++j) keep[j] = (w.w[j] >> 8) >= threshold;
}

ZR_HOST_DEVICE inline bool DropoutKeep(uint64_t seed, uint64_t stream, uint64_t index, uint32_t threshold) {
  return (PhiloxWordAt(seed, stream, index) >> 8) >= threshold;
}

}  // namespace zerorun::kernels
