// Bulk Philox words: the widest ISA path for full vectors of counters, core's scalar Philox4x32 for
// the rest (and for the portable path).
#include "zerorun/kernels/cpu/philox.h"

#include "zerorun/core/cpu_features.h"
#include "zerorun/core/rng.h"

namespace zerorun::kernels::cpu {

void PhiloxWords(uint64_t seed, uint64_t stream, uint64_t first_block, int64_t nblocks, uint32_t* words) {
  int64_t done = 0;
  switch (ActiveIsa()) {
    case Isa::kAvx512: done = detail::PhiloxWordsAvx512(seed, stream, first_block, nblocks, words); break;
    case Isa::kAvx2: done = detail::PhiloxWordsAvx2(seed, stream, first_block, nblocks, words); break;
    default: break;
  }
  for (int64_t i = done; i < nblocks; ++i) {
    auto w = Philox4x32(seed, stream, first_block + static_cast<uint64_t>(i));
    for (int j = 0; j < 4; ++j) words[4 * i + j] = w[j];
  }
}

}  // namespace zerorun::kernels::cpu
