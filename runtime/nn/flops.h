// Forward FLOP accounting by the layers themselves: a layer that multiplies matrices reports the
// multiply-accumulates of its forward (nn::Linear: rows × in × out; CausalSelfAttention: 2·B·T²·C for
// Q·Kᵀ and A·V over all heads, the full T×T as computed). One MAC is two FLOPs. Elementwise work
// (norms, activations, softmax, bias adds) is not counted, as in the usual MFU convention (PaLM's
// 6N + 12·L·T·d per token). The counter is per thread and only ever grows; a profiler reads it around
// a window (runtime/observe/flops_profiler.h). Recomputed forwards count too (they are real work).
#pragma once

#include <cstdint>

namespace zerorun::nn {

void CountForwardMacs(int64_t macs);
// MACs counted on this thread so far.
int64_t ForwardMacsCounter();

}  // namespace zerorun::nn
