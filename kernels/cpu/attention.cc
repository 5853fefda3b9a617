// CPU causal self-attention: one (batch, head) per pool chunk, each as a few single-threaded sgemms
// over the head's (T, HS) slices, cut into row blocks of kBlock so the causal upper triangle is
// mostly skipped. For a head with q, k, v (T, HS) and P the masked softmax of q k^T / sqrt(HS):
//   forward:  S = q k^T * scale,  P = softmax over s <= t,  out = P v
//   backward: dP = dout v^T,  dS = P * (dP - rowsum(P * dP)) * scale,
//             dv = P^T dout,  dq = dS k,  dk = dS^T q
// fp32 slices are read and written in place through their leading dimensions (3C for qkv, C for
// out); 16-bit slices are widened into per-thread scratch and the results rounded once.
#include <cmath>
#include <algorithm>
#include <cstring>

#include "zerorun/kernels/cpu/blas.h"
#include "zerorun/kernels/cpu/blocks.h"
#include "zerorun/kernels/cpu/cpu.h"
#include "zerorun/kernels/cpu/vec.h"

namespace zerorun::kernels::cpu {
namespace {

constexpr int64_t kBlock = 64;  // rows per causal block

// A (T, HS) slice of a (B, T, row_elems) buffer starting at column `col`, as fp32 with leading dim.
struct Slice {
  const float* p;
  int64_t ld;
};

// fp32 slices are used in place unless `contiguous` (the backward's sgemms run faster on packed
// (T, HS) operands than on rows 3C apart; the forward's do not care).
Slice LoadSlice(const void* base, DType type, int64_t row0, int64_t T, int64_t row_elems, int64_t col, int64_t HS,
                float* scratch, bool contiguous) {
  if (type == DType::kF32) {
    const float* src = static_cast<const float*>(base) + row0 * row_elems + col;
    if (!contiguous) return {src, row_elems};
    for (int64_t t = 0; t < T; ++t) std::copy(src + t * row_elems, src + t * row_elems + HS, scratch + t * HS);
    return {scratch, HS};
  }
  for (int64_t t = 0; t < T; ++t) LoadRow(base, type, (row0 + t) * row_elems + col, scratch + t * HS, HS);
  return {scratch, HS};
}

// Where to write a (T, HS) result slice: in place when fp32, else `scratch` (then StoreSlice).
float* OutSlice(void* base, DType type, int64_t row0, int64_t row_elems, int64_t col, float* scratch, int64_t* ld,
                int64_t HS) {
  if (type == DType::kF32) {
    *ld = row_elems;
    return static_cast<float*>(base) + row0 * row_elems + col;
  }
  *ld = HS;
  return scratch;
}

void StoreSlice(const float* src, void* base, DType type, int64_t row0, int64_t T, int64_t row_elems, int64_t col,
                int64_t HS) {
  if (type == DType::kF32) return;
  for (int64_t t = 0; t < T; ++t) StoreRow(src + t * HS, base, type, (row0 + t) * row_elems + col, HS);
}

void AttentionForward(void* out, float* att, const void* qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                      DType type) {
  EnsureBlasSingleThreaded();
  int64_t HS = C / NH;
  float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  ParallelFor(0, B * NH, 1, [&](int64_t u0, int64_t u1) {
    const VecOps& v = Vec();
    for (int64_t unit = u0; unit < u1; ++unit) {
      int64_t b = unit / NH, h = unit % NH;
      float* gathered = Scratch(kScratchA, static_cast<size_t>(3 * T * HS));
      Slice q = LoadSlice(qkv, type, b * T, T, 3 * C, h * HS, HS, gathered, false);
      Slice k = LoadSlice(qkv, type, b * T, T, 3 * C, C + h * HS, HS, gathered + T * HS, false);
      Slice vv = LoadSlice(qkv, type, b * T, T, 3 * C, 2 * C + h * HS, HS, gathered + 2 * T * HS, false);
      float* P = att + unit * T * T;  // (T, T) of this head
      int64_t ldo;
      float* o = OutSlice(out, type, b * T, C, h * HS, Scratch(kScratchB, static_cast<size_t>(T * HS)), &ldo, HS);
      for (int64_t t0 = 0; t0 < T; t0 += kBlock) {
        int64_t t1 = std::min(T, t0 + kBlock);
        // Scores of rows [t0, t1) against keys [0, t1): the block's causal reach.
        Sgemm(false, true, t1 - t0, t1, HS, scale, q.p + t0 * q.ld, q.ld, k.p, k.ld, 0.0f, P + t0 * T, T);
        for (int64_t t = t0; t < t1; ++t) {
          float* row = P + t * T;
          float sum = v.exp_shift_sum(row, row, t + 1, v.max(row, t + 1));
          v.scale(row, row, 1.0f / sum, t + 1);
          std::memset(row + t + 1, 0, static_cast<size_t>(T - t - 1) * sizeof(float));
        }
        Sgemm(false, false, t1 - t0, HS, t1, 1.0f, P + t0 * T, T, vv.p, vv.ld, 0.0f, o + t0 * ldo, ldo);
      }
      StoreSlice(o, out, type, b * T, T, C, h * HS, HS);
    }
  });
}

void AttentionBackward(void* dqkv, const void* dout, const void* qkv, const float* att, int64_t B, int64_t T,
                       int64_t C, int64_t NH, DType type) {
  EnsureBlasSingleThreaded();
  int64_t HS = C / NH;
  float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  ParallelFor(0, B * NH, 1, [&](int64_t u0, int64_t u1) {
    const VecOps& v = Vec();
    for (int64_t unit = u0; unit < u1; ++unit) {
      int64_t b = unit / NH, h = unit % NH;
      float* gathered = Scratch(kScratchA, static_cast<size_t>(4 * T * HS));
      Slice q = LoadSlice(qkv, type, b * T, T, 3 * C, h * HS, HS, gathered, true);
      Slice k = LoadSlice(qkv, type, b * T, T, 3 * C, C + h * HS, HS, gathered + T * HS, true);
      Slice vv = LoadSlice(qkv, type, b * T, T, 3 * C, 2 * C + h * HS, HS, gathered + 2 * T * HS, true);
      Slice dy = LoadSlice(dout, type, b * T, T, C, h * HS, HS, gathered + 3 * T * HS, true);
      const float* P = att + unit * T * T;
      float* dS = Scratch(kScratchB, static_cast<size_t>(T * T));
      float* results = Scratch(kScratchC, static_cast<size_t>(3 * T * HS));
      int64_t ldq, ldk, ldv;
      float* dq = OutSlice(dqkv, type, b * T, 3 * C, h * HS, results, &ldq, HS);
      float* dk = OutSlice(dqkv, type, b * T, 3 * C, C + h * HS, results + T * HS, &ldk, HS);
      float* dv = OutSlice(dqkv, type, b * T, 3 * C, 2 * C + h * HS, results + 2 * T * HS, &ldv, HS);
      // dP for rows [t0, t1) and keys [0, t1), turned into dS in place; entries s > t are zero.
      for (int64_t t0 = 0; t0 < T; t0 += kBlock) {
        int64_t t1 = std::min(T, t0 + kBlock);
        Sgemm(false, true, t1 - t0, t1, HS, 1.0f, dy.p + t0 * dy.ld, dy.ld, vv.p, vv.ld, 0.0f, dS + t0 * T, T);
        for (int64_t t = t0; t < t1; ++t) {
          float* row = dS + t * T;
          const float* p = P + t * T;
          float dot = v.dot(p, row, t + 1);
          v.softmax_backward(row, row, p, dot, t + 1);
          v.scale(row, row, scale, t + 1);
          std::memset(row + t + 1, 0, static_cast<size_t>(t1 - t - 1) * sizeof(float));
        }
        // dq rows [t0, t1) = dS[t0:t1, 0:t1] k[0:t1].
        Sgemm(false, false, t1 - t0, HS, t1, 1.0f, dS + t0 * T, T, k.p, k.ld, 0.0f, dq + t0 * ldq, ldq);
      }
      // dv and dk for keys [s0, s1): only queries t >= s0 attend to them.
      for (int64_t s0 = 0; s0 < T; s0 += kBlock) {
        int64_t s1 = std::min(T, s0 + kBlock);
        Sgemm(true, false, s1 - s0, HS, T - s0, 1.0f, P + s0 * T + s0, T, dy.p + s0 * dy.ld, dy.ld, 0.0f,
              dv + s0 * ldv, ldv);
        Sgemm(true, false, s1 - s0, HS, T - s0, 1.0f, dS + s0 * T + s0, T, q.p + s0 * q.ld, q.ld, 0.0f,
              dk + s0 * ldk, ldk);
      }
      StoreSlice(dq, dqkv, type, b * T, T, 3 * C, h * HS, HS);
      StoreSlice(dk, dqkv, type, b * T, T, 3 * C, C + h * HS, HS);
      StoreSlice(dv, dqkv, type, b * T, T, 3 * C, 2 * C + h * HS, HS);
    }
  });
}

}  // namespace

void FillAttention(KernelTable& t) {
  t.attention_forward = &AttentionForward;
  t.attention_backward = &AttentionBackward;
}

}  // namespace zerorun::kernels::cpu
