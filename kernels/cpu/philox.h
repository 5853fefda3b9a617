// Philox4x32-10 words in bulk for the CPU dropout kernel (internal): the same words as core's
// Philox4x32 (core/rng.h), computed 8 (AVX2) or 16 (AVX-512) counters at a time.
#pragma once

#include <cstdint>

namespace zerorun::kernels::cpu {

// words[4 * i + j] = Philox4x32(seed, stream, first_block + i)[j] for i in [0, nblocks).
void PhiloxWords(uint64_t seed, uint64_t stream, uint64_t first_block, int64_t nblocks, uint32_t* words);

namespace detail {
// Each handles a prefix of the blocks and returns how many it did (a multiple of its width).
int64_t PhiloxWordsAvx2(uint64_t seed, uint64_t stream, uint64_t first_block, int64_t nblocks, uint32_t* words);
int64_t PhiloxWordsAvx512(uint64_t seed, uint64_t stream, uint64_t first_block, int64_t nblocks, uint32_t* words);
}  // namespace detail

}  // namespace zerorun::kernels::cpu
