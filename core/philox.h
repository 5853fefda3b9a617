// Philox4x32-10 (Salmon et al., SC'11), written once for host and device code: core's Philox4x32
// (rng.h), the reference and CPU dropout masks and the CUDA kernels all call Philox4x32Block, so a
// (key, counter) gives the same four words on every backend. Header-only, no standard library, so
// nvcc can compile it into device code (core/host_device.h).
#pragma once

#include <cstdint>

#include "zerorun/core/host_device.h"

namespace zerorun {

struct PhiloxWords {
  uint32_t w[4];
};

// The block for the 128-bit counter (counter_hi, counter_lo) under the 64-bit key. Word layout as in
// Random123: ctr = {lo.low, lo.high, hi.low, hi.high}, key = {key.low, key.high}.
ZR_HOST_DEVICE inline PhiloxWords Philox4x32Block(uint64_t key, uint64_t counter_hi, uint64_t counter_lo) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // multipliers
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // Weyl key increments
  uint32_t c0 = static_cast<uint32_t>(counter_lo), c1 = static_cast<uint32_t>(counter_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(counter_hi), c3 = static_cast<uint32_t>(counter_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kW0;
    k1 += kW1;
  }
  return {{c0, c1, c2, c3}};
}

// Word `index` of the stream (seed, stream): word index % 4 of block index / 4.
ZR_HOST_DEVICE inline uint32_t PhiloxWordAt(uint64_t seed, uint64_t stream, uint64_t index) {
  return Philox4x32Block(seed, stream, index >> 2).w[index & 3];
}

}  // namespace zerorun
