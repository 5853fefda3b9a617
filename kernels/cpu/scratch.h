// Per-thread scratch buffers for CPU kernels (internal). A buffer grows to the largest size asked of
// it on that thread and is reused, so steady-state steps allocate (and page-fault) nothing.
#pragma once

#include <cstddef>
#include <vector>

namespace zerorun::kernels::cpu {

// Slots let one thread hold several buffers at once (e.g. a converted A panel and a C panel).
// Convention: kScratchA..E belong to the body of a pool chunk; kShared0..2 are held by the calling
// thread across a ParallelFor (e.g. fp32 weights every chunk reads) and are never used in chunks.
enum ScratchSlot : int {
  kScratchA = 0, kScratchB, kScratchC, kScratchD, kScratchE,
  kShared0, kShared1, kShared2,
  kNumScratchSlots
};

inline float* Scratch(ScratchSlot slot, size_t elems) {
  thread_local std::vector<float> buffers[kNumScratchSlots];
  auto& buf = buffers[slot];
  if (buf.size() < elems) buf.resize(elems);
  return buf.data();
}

}  // namespace zerorun::kernels::cpu
