// CPU causal self-attention: one (batch, head) per pool chunk. For a head with q, k, v (T, HS) and P
// the masked softmax of q k^T / sqrt(HS):
//   forward:  S = q k^T * scale,  P = softmax over s <= t,  out = P v
//   backward: dP = dout v^T,  dS = P * (dP - rowsum(P * dP)) * scale,
//             dv = P^T dout,  dq = dS k,  dk = dS^T q
// Four forms (Bf16Units and FusedUnits pick):
//  - bf16 on AVX512_BF16 where its products may run natively: the bf16 units of attention_units.h
//    (the fused units' tiles with every product on vdpbf16ps, from the bf16 slices in place).
//  - AVX-512: the fused units of attention_units.h (register-tiled products, 6-row causal tiles, each
//    tile's softmax while it is in L1). fp32 slices are read and written in place through their
//    leading dimensions (3C for qkv, C for out); 16-bit slices are widened into per-thread scratch
//    and the results rounded once.
//  - Native 16-bit (bf16 where oneDNN multiplies it natively and the units do not run: on AMX, or
//    with the ISA capped below AVX-512): the four products of 16-bit operands (q k^T, P v; dout v^T, and with P and dS rounded to
//    the dtype, dS k, dS^T q, P^T dout) run on the slices in place with fp32 accumulation, as
//    autocast frameworks do; scores, softmax, P as saved and dS stay fp32.
//  - Otherwise single-threaded sgemms over the (T, HS) slices (16-bit widened), cut into row blocks
//    of kBlock so the causal upper triangle is mostly skipped.
#include <cmath>
#include <algorithm>
#include <cstring>

#include "zerorun/core/cpu_features.h"
#include "zerorun/kernels/cpu/attention_units.h"
#include "zerorun/kernels/cpu/blas.h"
#include "zerorun/kernels/cpu/blocks.h"
#include "zerorun/kernels/cpu/cpu.h"
#include "zerorun/kernels/cpu/onednn.h"
#include "zerorun/kernels/cpu/scratch.h"
#include "zerorun/kernels/cpu/vec.h"
#include "zerorun/kernels/gemm_backend.h"

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

// Whether the 16-bit products run natively (see the top of this file).
bool Native16(DType type) {
  return type != DType::kF32 && ActiveGemmBackend() == GemmBackend::kOnednn && OnednnNative16(type);
}

// One product of the native path: C (m, n) = alpha op(A) op(B), A and B of `ab`, C of `ct`, all by
// leading dimension. Falls back to widened operands if oneDNN turns the shape down.
void Gemm16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const void* a, int64_t lda, const void* b,
            int64_t ldb, DType ab, void* c, int64_t ldc, DType ct) {
  GemmParams p;
  p.trans_a = ta ? Trans::kT : Trans::kN;
  p.trans_b = tb ? Trans::kT : Trans::kN;
  p.m = m, p.n = n, p.k = k, p.alpha = alpha;
  p.a = a, p.a_type = ab, p.lda = lda, p.b = b, p.b_type = ab, p.ldb = ldb, p.c = c, p.c_type = ct, p.ldc = ldc;
  if (m <= 0 || n <= 0 || OnednnGemm(p, nullptr)) return;
  const int64_t a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
  float* a32 = Scratch(kScratchD, static_cast<size_t>(a_rows * a_cols + b_rows * b_cols + m * n));
  float* b32 = a32 + a_rows * a_cols;
  float* c32 = b32 + b_rows * b_cols;
  for (int64_t r = 0; r < a_rows; ++r) LoadRow(a, ab, r * lda, a32 + r * a_cols, a_cols);
  for (int64_t r = 0; r < b_rows; ++r) LoadRow(b, ab, r * ldb, b32 + r * b_cols, b_cols);
  float* dst = ct == DType::kF32 ? static_cast<float*>(c) : c32;
  int64_t ldd = ct == DType::kF32 ? ldc : n;
  Sgemm(ta, tb, m, n, k, alpha, a32, a_cols, b32, b_cols, 0.0f, dst, ldd);
  if (ct != DType::kF32) {
    for (int64_t r = 0; r < m; ++r) StoreRow(c32 + r * n, c, ct, r * ldc, n);
  }
}

// Rows [r0, r1), columns [0, cols) of an fp32 (.., ld) matrix rounded to `t` into `dst` (same ld).
void RoundRows(const float* src, int64_t ld, int64_t r0, int64_t r1, int64_t cols, DType t, void* dst) {
  for (int64_t r = r0; r < r1; ++r) StoreRow(src + r * ld, dst, t, r * ld, cols);
}

// The native path of the forward for one (b, h): q, k, v and out in place (bf16), P (T, T) fp32.
void ForwardNative16(void* out, float* P, const void* qkv, int64_t b, int64_t h, int64_t T, int64_t C, int64_t HS,
                     float scale, DType type, const VecOps& v) {
  const int64_t ld = 3 * C;
  const void* q = At(qkv, type, b * T * ld + h * HS);
  const void* k = At(qkv, type, b * T * ld + C + h * HS);
  const void* vv = At(qkv, type, b * T * ld + 2 * C + h * HS);
  void* o = At(out, type, b * T * C + h * HS);
  // P rounded to the dtype for P v (same layout as P).
  void* P16 = Scratch(kScratchA, static_cast<size_t>(T * T / 2 + 1));
  for (int64_t t0 = 0; t0 < T; t0 += kBlock) {
    int64_t t1 = std::min(T, t0 + kBlock);
    Gemm16(false, true, t1 - t0, t1, HS, scale, At(q, type, t0 * ld), ld, k, ld, type, P + t0 * T, T, DType::kF32);
    for (int64_t t = t0; t < t1; ++t) {
      float* row = P + t * T;
      float sum = v.exp_shift_sum(row, row, t + 1, v.max(row, t + 1));
      v.scale(row, row, 1.0f / sum, t + 1);
      std::memset(row + t + 1, 0, static_cast<size_t>(T - t - 1) * sizeof(float));
    }
    RoundRows(P, T, t0, t1, t1, type, P16);
    Gemm16(false, false, t1 - t0, HS, t1, 1.0f, At(P16, type, t0 * T), T, vv, ld, type, At(o, type, t0 * C), C, type);
  }
}

// Rows [t0, t1) of dS (T, T), holding dP, turned into dS = P (dP - rowsum(P dP)) * scale over s <= t,
// zeros after it up to t1 (the block's reach).
void SoftmaxBackwardRows(float* dS, const float* P, int64_t T, int64_t t0, int64_t t1, float scale, const VecOps& v) {
  for (int64_t t = t0; t < t1; ++t) {
    float* row = dS + t * T;
    const float* p = P + t * T;
    float dot = v.dot(p, row, t + 1);
    v.softmax_backward(row, row, p, dot, t + 1);
    v.scale(row, row, scale, t + 1);
    std::memset(row + t + 1, 0, static_cast<size_t>(t1 - t - 1) * sizeof(float));
  }
}

// The native path of the backward for one (b, h).
void BackwardNative16(void* dqkv, const void* dout, const void* qkv, const float* P, int64_t b, int64_t h, int64_t T,
                      int64_t C, int64_t HS, float scale, DType type, const VecOps& v) {
  const int64_t ld = 3 * C;
  const void* q = At(qkv, type, b * T * ld + h * HS);
  const void* k = At(qkv, type, b * T * ld + C + h * HS);
  const void* vv = At(qkv, type, b * T * ld + 2 * C + h * HS);
  const void* dy = At(dout, type, b * T * C + h * HS);
  void* dq = At(dqkv, type, b * T * ld + h * HS);
  void* dk = At(dqkv, type, b * T * ld + C + h * HS);
  void* dv = At(dqkv, type, b * T * ld + 2 * C + h * HS);
  float* dS = Scratch(kScratchB, static_cast<size_t>(T * T));
  // dS and P rounded to the dtype (halves of one scratch buffer, each (T, T)).
  void* dS16 = Scratch(kScratchA, static_cast<size_t>(T * T));
  void* P16 = At(dS16, type, T * T);
  for (int64_t t0 = 0; t0 < T; t0 += kBlock) {
    int64_t t1 = std::min(T, t0 + kBlock);
    Gemm16(false, true, t1 - t0, t1, HS, 1.0f, At(dy, type, t0 * C), C, vv, ld, type, dS + t0 * T, T, DType::kF32);
    SoftmaxBackwardRows(dS, P, T, t0, t1, scale, v);
    RoundRows(dS, T, t0, t1, t1, type, dS16);
    RoundRows(P, T, t0, t1, t1, type, P16);
    Gemm16(false, false, t1 - t0, HS, t1, 1.0f, At(dS16, type, t0 * T), T, k, ld, type, At(dq, type, t0 * ld), ld, type);
  }
  // dv and dk for keys [s0, s1): only queries t >= s0 attend to them (rows of P16/dS16 below the
  // diagonal block hold zeros from the causal mask where s > t).
  for (int64_t s0 = 0; s0 < T; s0 += kBlock) {
    int64_t s1 = std::min(T, s0 + kBlock);
    Gemm16(true, false, s1 - s0, HS, T - s0, 1.0f, At(P16, type, s0 * T + s0), T, At(dy, type, s0 * C), C, type,
           At(dv, type, s0 * ld), ld, type);
    Gemm16(true, false, s1 - s0, HS, T - s0, 1.0f, At(dS16, type, s0 * T + s0), T, At(q, type, s0 * ld), ld, type,
           At(dk, type, s0 * ld), ld, type);
  }
}

// The backward of one (b, h) as single-threaded sgemms per causal block (the form below AVX-512):
// dq, dk, dv (T, HS) with leading dimension ld.
void BackwardSgemm(const Slice& q, const Slice& k, const Slice& vv, const Slice& dy, const float* P, int64_t T,
                   int64_t HS, float scale, float* dq, float* dk, float* dv, int64_t ld, const VecOps& v) {
  float* dS = Scratch(kScratchB, static_cast<size_t>(T * T));
  // dP for rows [t0, t1) and keys [0, t1), turned into dS in place; entries s > t are zero.
  for (int64_t t0 = 0; t0 < T; t0 += kBlock) {
    int64_t t1 = std::min(T, t0 + kBlock);
    Sgemm(false, true, t1 - t0, t1, HS, 1.0f, dy.p + t0 * dy.ld, dy.ld, vv.p, vv.ld, 0.0f, dS + t0 * T, T);
    SoftmaxBackwardRows(dS, P, T, t0, t1, scale, v);
    // dq rows [t0, t1) = dS[t0:t1, 0:t1] k[0:t1].
    Sgemm(false, false, t1 - t0, HS, t1, 1.0f, dS + t0 * T, T, k.p, k.ld, 0.0f, dq + t0 * ld, ld);
  }
  // dv and dk for keys [s0, s1): only queries t >= s0 attend to them.
  for (int64_t s0 = 0; s0 < T; s0 += kBlock) {
    int64_t s1 = std::min(T, s0 + kBlock);
    Sgemm(true, false, s1 - s0, HS, T - s0, 1.0f, P + s0 * T + s0, T, dy.p + s0 * dy.ld, dy.ld, 0.0f, dv + s0 * ld,
          ld);
    Sgemm(true, false, s1 - s0, HS, T - s0, 1.0f, dS + s0 * T + s0, T, q.p + s0 * q.ld, q.ld, 0.0f, dk + s0 * ld, ld);
  }
}

// Whether the fp32 path (16-bit slices widened) runs the fused units of attention_units.h: on
// AVX-512 for fp32, for 16-bit oneDNN cannot multiply natively, and for bf16 it can unless the CPU
// has AMX. Measured on AVX512-BF16 without AMX (Zen 5,
// AVX512_BF16, zr_bench_kernels --only attn, B 8 T 128 C 256 NH 4), bf16 forward + backward took
// 1.62-1.68 ms widened through the units against 1.80-1.81 ms native at 1 thread, 0.88-0.95 against
// 1.02-1.03 ms at 2. AMX keeps the native products (not measured).
bool FusedUnits(DType type) {
  if (ActiveIsa() != Isa::kAvx512) return false;
  return type == DType::kF32 || !Native16(type) || OnednnIsa() != "avx512_core_amx";
}

// Whether bf16 runs the bf16 units (attention_bf16_avx512bf16.cc): where the 16-bit products may run
// natively (oneDNN multiplies bf16 natively and is the GEMM backend) and the units would otherwise
// widen them, on a CPU with AVX512_BF16, for an even head size (products take pairs of elements).
bool Bf16Units(DType type, int64_t HS) {
  return type == DType::kBF16 && Native16(type) && FusedUnits(type) && GetCpuFeatures().avx512_bf16 && HS % 2 == 0;
}

const uint16_t* Bf16At(const void* base, int64_t elem) { return static_cast<const uint16_t*>(base) + elem; }

// fn(b, h, unit) for every (batch row, head), one head per pool chunk.
template <class F>
void ForEachHead(int64_t B, int64_t NH, F&& fn) {
  ParallelFor(0, B * NH, 1, [&](int64_t u0, int64_t u1) {
    for (int64_t unit = u0; unit < u1; ++unit) fn(unit / NH, unit % NH, unit);
  });
}

// Head h of batch row b of a bf16 qkv (B, T, 3C) as a bf16 unit.
detail::AttentionUnitBf16 Bf16Unit(const void* qkv, int64_t b, int64_t h, int64_t T, int64_t C, int64_t HS) {
  const int64_t row0 = b * T * 3 * C;
  return {Bf16At(qkv, row0 + h * HS), Bf16At(qkv, row0 + C + h * HS), Bf16At(qkv, row0 + 2 * C + h * HS), 3 * C, T, HS,
          1.0f / std::sqrt(static_cast<float>(HS))};
}

void AttentionForward(void* out, float* att, const void* qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                      DType type) {
  EnsureBlasSingleThreaded();
  if (Bf16Units(type, C / NH)) {
    const int64_t HS = C / NH;
    ForEachHead(B, NH, [&](int64_t b, int64_t h, int64_t unit) {
      float* o = Scratch(kScratchB, static_cast<size_t>(T * HS));
      detail::AttentionUnitForwardBf16(Bf16Unit(qkv, b, h, T, C, HS), o, HS, att + unit * T * T);
      StoreSlice(o, out, type, b * T, T, C, h * HS, HS);
    });
    return;
  }
  if (Native16(type) && !FusedUnits(type)) {
    int64_t HS = C / NH;
    float scale = 1.0f / std::sqrt(static_cast<float>(HS));
    ParallelFor(0, B * NH, 1, [&](int64_t u0, int64_t u1) {
      for (int64_t unit = u0; unit < u1; ++unit) {
        ForwardNative16(out, att + unit * T * T, qkv, unit / NH, unit % NH, T, C, HS, scale, type, Vec());
      }
    });
    return;
  }
  int64_t HS = C / NH;
  float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const bool fused = FusedUnits(type);
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
      if (fused) {
        detail::AttentionUnitForwardAvx512({q.p, k.p, vv.p, q.ld, T, HS, scale}, o, ldo, P);
        StoreSlice(o, out, type, b * T, T, C, h * HS, HS);
        continue;
      }
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
  if (Bf16Units(type, C / NH)) {
    const int64_t HS = C / NH;
    ForEachHead(B, NH, [&](int64_t b, int64_t h, int64_t unit) {
      float* results = Scratch(kScratchC, static_cast<size_t>(3 * T * HS));
      float *dq = results, *dk = results + T * HS, *dv = results + 2 * T * HS;
      detail::AttentionUnitBackwardBf16(Bf16Unit(qkv, b, h, T, C, HS), Bf16At(dout, b * T * C + h * HS), C,
                                        att + unit * T * T, dq, dk, dv, HS);
      StoreSlice(dq, dqkv, type, b * T, T, 3 * C, h * HS, HS);
      StoreSlice(dk, dqkv, type, b * T, T, 3 * C, C + h * HS, HS);
      StoreSlice(dv, dqkv, type, b * T, T, 3 * C, 2 * C + h * HS, HS);
    });
    return;
  }
  if (Native16(type) && !FusedUnits(type)) {
    int64_t HS = C / NH;
    float scale = 1.0f / std::sqrt(static_cast<float>(HS));
    ParallelFor(0, B * NH, 1, [&](int64_t u0, int64_t u1) {
      for (int64_t unit = u0; unit < u1; ++unit) {
        BackwardNative16(dqkv, dout, qkv, att + unit * T * T, unit / NH, unit % NH, T, C, HS, scale, type, Vec());
      }
    });
    return;
  }
  int64_t HS = C / NH;
  float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const bool fused = FusedUnits(type);
  ParallelFor(0, B * NH, 1, [&](int64_t u0, int64_t u1) {
    const VecOps& v = Vec();
    for (int64_t unit = u0; unit < u1; ++unit) {
      int64_t b = unit / NH, h = unit % NH;
      float* gathered = Scratch(kScratchA, static_cast<size_t>(4 * T * HS));
      // The sgemm form runs faster on packed operands; the fused units read fp32 rows in place.
      Slice q = LoadSlice(qkv, type, b * T, T, 3 * C, h * HS, HS, gathered, !fused);
      Slice k = LoadSlice(qkv, type, b * T, T, 3 * C, C + h * HS, HS, gathered + T * HS, !fused);
      Slice vv = LoadSlice(qkv, type, b * T, T, 3 * C, 2 * C + h * HS, HS, gathered + 2 * T * HS, !fused);
      Slice dy = LoadSlice(dout, type, b * T, T, C, h * HS, HS, gathered + 3 * T * HS, !fused);
      const float* P = att + unit * T * T;
      float* results = Scratch(kScratchC, static_cast<size_t>(3 * T * HS));
      int64_t ldq, ldk, ldv;  // all three the same: 3C in place, HS in scratch
      float* dq = OutSlice(dqkv, type, b * T, 3 * C, h * HS, results, &ldq, HS);
      float* dk = OutSlice(dqkv, type, b * T, 3 * C, C + h * HS, results + T * HS, &ldk, HS);
      float* dv = OutSlice(dqkv, type, b * T, 3 * C, 2 * C + h * HS, results + 2 * T * HS, &ldv, HS);
      if (fused) {
        detail::AttentionUnitBackwardAvx512({q.p, k.p, vv.p, q.ld, T, HS, scale}, dy.p, dy.ld, P, dq, dk, dv, ldq);
      } else {
        BackwardSgemm(q, k, vv, dy, P, T, HS, scale, dq, dk, dv, ldq, v);
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
