// Causal attention of one (batch, head) in fp32 on AVX-512, fused (internal; attention.cc drives it).
// The products run on a register-tiled micro-kernel (6 rows x 64 columns of C in 24 zmm accumulators)
// instead of one library sgemm per causal block: at the benchmark GPT's head shapes (T 128, HS 64) one
// oneDNN call took 3.4-6.0 us for 0.5-1 MFLOP (117-182 GFLOP/s, 1 thread). The causal triangle is skipped
// per 6-row tile, and each tile's softmax (or softmax backward) runs while the tile is in L1.
// Uses the calling thread's kScratchD and kScratchE; callers keep to kScratchA..C. The bf16 form
// (below) runs the same tiles on vdpbf16ps.
#pragma once

#include <cstdint>

namespace zerorun::kernels::cpu::detail {

// q, k, v: (T, HS) slices of element type E with rows ld_qkv apart.
template <class E>
struct AttentionUnitOf {
  const E* q;
  const E* k;
  const E* v;
  int64_t ld_qkv;
  int64_t T;
  int64_t HS;
  float scale;
};
using AttentionUnit = AttentionUnitOf<float>;

// out (T, HS) rows ld_out apart = P v, with P (T, T) = the causal softmax of q k^T * scale, stored
// with zeros above the diagonal.
void AttentionUnitForwardAvx512(const AttentionUnit& u, float* out, int64_t ld_out, float* P);

// From dy (T, HS) rows ld_dy apart and the forward's P: dq, dk, dv (T, HS), rows ld_d apart,
// overwritten.
void AttentionUnitBackwardAvx512(const AttentionUnit& u, const float* dy, int64_t ld_dy, const float* P, float* dq,
                                 float* dk, float* dv, int64_t ld_d);

// The same in bf16 with AVX512_BF16 (attention_bf16_avx512bf16.cc): q, k, v (T, HS) bf16 slices rows
// ld_qkv apart, HS and ld_qkv even and the slices 4-byte aligned. Products in bf16 pairs with fp32
// accumulation; out, P, dq, dk, dv fp32 as above.
using AttentionUnitBf16 = AttentionUnitOf<uint16_t>;

void AttentionUnitForwardBf16(const AttentionUnitBf16& u, float* out, int64_t ld_out, float* P);

// dy: bf16 (T, HS) rows ld_dy apart (even).
void AttentionUnitBackwardBf16(const AttentionUnitBf16& u, const uint16_t* dy, int64_t ld_dy, const float* P,
                               float* dq, float* dk, float* dv, int64_t ld_d);

}  // namespace zerorun::kernels::cpu::detail
