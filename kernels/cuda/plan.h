// Host-side plans for the CUDA kernels: launch geometry, GEMM staging (which dtypes cuBLAS can take
// directly, and what is converted, pre-filled or finished by an epilogue), multi-tensor chunking for the
// optimizers, scratch layouts and the attention head permutation. Pure C++ with no CUDA dependency, so
// everything that decides *what* the kernels do is unit-tested on any machine
// (tests/kernels/cuda_plan_test.cc); the .cu files only carry the plans out.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "zerorun/core/dtype.h"
#include "zerorun/core/error.h"
#include "zerorun/core/host_device.h"
#include "zerorun/kernels/ops.h"

namespace zerorun::kernels::cuda {

// ---- launch geometry -------------------------------------------------------------------------------

inline constexpr int kThreads = 256;              // threads per block of the 1-D kernels
inline constexpr int64_t kMaxElementwiseBlocks = 8192;  // grid-stride loops cover the rest
inline constexpr int64_t kMaxGridX = 2147483647;  // CUDA's gridDim.x limit
inline constexpr int64_t kMaxGridY = 65535;       // CUDA's gridDim.y limit

struct Launch {
  int64_t blocks = 1;
  int threads = kThreads;
};

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// n elements, one per thread per grid-stride iteration: at least one block, at most `max_blocks`.
inline Launch ElementwiseLaunch(int64_t n, int threads = kThreads, int64_t max_blocks = kMaxElementwiseBlocks) {
  return {std::clamp<int64_t>(CeilDiv(n, threads), 1, max_blocks), threads};
}

// One warp per row, `rows_per_block` warps per block (norms, rows of cross-entropy use a block each).
inline Launch WarpPerRowLaunch(int64_t rows, int rows_per_block = 8) {
  int64_t blocks = std::max<int64_t>(1, CeilDiv(rows, rows_per_block));
  ZR_CHECK(blocks <= kMaxGridX, "WarpPerRowLaunch: {} rows need {} blocks, over the grid limit", rows, blocks);
  return {blocks, 32 * rows_per_block};
}

// Deterministic column sums of an (N, C) matrix (bias, norm weight gradients): rows are cut into
// `chunks` of `rows_per_chunk`; a block of 32 columns x 8 row lanes writes each chunk's partial sums to
// scratch (chunks, C), and a second pass adds a column's partials in chunk order. Nothing depends on
// timing, so the result is the same on every run.
struct ColumnSumPlan {
  int64_t rows_per_chunk = 0;
  int64_t chunks = 0;      // gridDim.y of the first pass (<= kMaxGridY)
  int64_t col_blocks = 0;  // gridDim.x: 32 columns each
};
inline constexpr int64_t kColumnSumRows = 64;
inline ColumnSumPlan PlanColumnSums(int64_t N, int64_t C) {
  ColumnSumPlan p;
  p.rows_per_chunk = std::max(kColumnSumRows, CeilDiv(N, kMaxGridY));
  p.chunks = std::max<int64_t>(1, CeilDiv(N, p.rows_per_chunk));
  p.col_blocks = std::max<int64_t>(1, CeilDiv(C, 32));
  return p;
}

// Blocks of a deterministic two-pass reduction over n values (sum of squares, finite check): a fixed
// function of n, so partial sums are added in the same order on every run.
inline constexpr int64_t kMaxReduceBlocks = 1024;
inline int64_t ReduceBlocks(int64_t n) { return std::clamp<int64_t>(CeilDiv(n, kThreads * 8), 1, kMaxReduceBlocks); }

// ---- scratch layouts -------------------------------------------------------------------------------

// Carves one scratch allocation into aligned pieces.
class ScratchLayout {
 public:
  static constexpr size_t kAlign = 256;
  // Offset of a new piece of `bytes` (0 bytes gives a valid, empty piece).
  size_t Add(size_t bytes) {
    size_t at = (bytes_ + kAlign - 1) / kAlign * kAlign;
    bytes_ = at + bytes;
    return at;
  }
  size_t bytes() const { return bytes_; }

 private:
  size_t bytes_ = 0;
};

// ---- GEMM ------------------------------------------------------------------------------------------

// What cuBLAS is asked, in its column-major terms. A row-major C (m, n) = op(A) op(B) is, read
// column-major, C^T (n, m) = op(B)^T op(A)^T: so cuBLAS's first operand is our B, its second our A,
// its (m, n) our (n, m), and the leading dimensions stay as they are.
struct CublasCall {
  bool trans_first = false, trans_second = false;  // CUBLAS_OP_T when true
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f, beta = 0.0f;
  const void* first = nullptr;
  DType first_type = DType::kF32;
  int64_t ld_first = 0, stride_first = 0;
  const void* second = nullptr;
  DType second_type = DType::kF32;
  int64_t ld_second = 0, stride_second = 0;
  void* c = nullptr;
  DType c_type = DType::kF32;
  int64_t ldc = 0, stride_c = 0;
  int64_t batch = 1;
};

// How one Gemm runs. cuBLAS (CUBLAS_COMPUTE_32F) takes A and B of one dtype and C of that dtype or
// fp32; everything else is staged through fp32 scratch so every operand is still read exactly and C is
// rounded once, as ops.h promises:
//  - A or B of a different dtype than the other: that operand's whole extent is converted to fp32;
//  - C of a dtype cuBLAS cannot write for the inputs (fp32 inputs, 16-bit C; bf16 inputs, fp16 C):
//    cuBLAS writes fp32 scratch (loaded from C first when beta != 0), an epilogue rounds into C;
//  - a bias: when beta == 0 and the bias is exact in C's dtype, C's rows are pre-filled with it and
//    cuBLAS runs with beta 1 (one rounding); otherwise the epilogue adds it before rounding.
//  - k == 0: no cuBLAS call; the epilogue writes beta * C (+ bias).
struct GemmPlan {
  DType in_type = DType::kF32;  // the dtype cuBLAS reads both inputs in
  bool stage_a = false, stage_b = false;
  bool stage_c = false;         // cuBLAS (if any) writes fp32 scratch; the epilogue writes C
  bool load_c = false;          // stage_c and beta != 0: C's extent converted into the scratch first
  bool prefill_bias = false;
  bool epilogue_bias = false;
  bool k_zero = false;
  float cublas_beta = 0.0f;
  int64_t a_extent = 0, b_extent = 0, c_extent = 0;  // elements each operand spans, all batches
};

// Elements spanned by `batch` (rows, cols) matrices with leading dimension ld, `stride` apart.
inline int64_t MatrixExtent(int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
  if (rows == 0 || cols == 0 || batch == 0) return 0;
  return (batch - 1) * stride + (rows - 1) * ld + cols;
}

// True when cuBLAS's GemmEx with fp32 compute accepts inputs `in` and output `c`.
inline bool CublasTakes(DType in, DType c) {
  if (in == DType::kF32) return c == DType::kF32;
  return Is16Bit(in) && (c == in || c == DType::kF32);
}

inline GemmPlan PlanGemm(const GemmParams& p) {
  GemmPlan g;
  g.a_extent = p.trans_a == Trans::kN ? MatrixExtent(p.m, p.k, p.lda, p.batch, p.stride_a)
                                      : MatrixExtent(p.k, p.m, p.lda, p.batch, p.stride_a);
  g.b_extent = p.trans_b == Trans::kN ? MatrixExtent(p.k, p.n, p.ldb, p.batch, p.stride_b)
                                      : MatrixExtent(p.n, p.k, p.ldb, p.batch, p.stride_b);
  g.c_extent = MatrixExtent(p.m, p.n, p.ldc, p.batch, p.stride_c);
  g.k_zero = p.k == 0;
  if (p.a_type == p.b_type) {
    g.in_type = p.a_type;
  } else {
    g.in_type = DType::kF32;
    g.stage_a = p.a_type != DType::kF32;
    g.stage_b = p.b_type != DType::kF32;
  }
  g.stage_c = g.k_zero || !CublasTakes(g.in_type, p.c_type);
  const bool has_bias = p.bias != nullptr;
  if (has_bias) {
    const bool bias_exact_in_c = p.bias_type == p.c_type || p.c_type == DType::kF32;
    if (!g.stage_c && p.beta == 0.0f && bias_exact_in_c) {
      g.prefill_bias = true;
    } else {
      g.stage_c = true;
      g.epilogue_bias = true;
    }
  }
  g.load_c = g.stage_c && p.beta != 0.0f;
  g.cublas_beta = g.prefill_bias ? 1.0f : p.beta;
  if (g.k_zero) g.stage_a = g.stage_b = false;
  return g;
}

// The cuBLAS call for `p` once the plan has put the operands at a, b (dtype in_type) and c (fp32 when
// staged).
inline CublasCall MakeCublasCall(const GemmParams& p, const GemmPlan& g, const void* a, const void* b, void* c) {
  CublasCall k;
  k.trans_first = p.trans_b == Trans::kT;
  k.trans_second = p.trans_a == Trans::kT;
  k.m = p.n;
  k.n = p.m;
  k.k = p.k;
  k.alpha = p.alpha;
  k.beta = g.cublas_beta;
  k.first = b;
  k.first_type = g.in_type;
  k.ld_first = p.ldb;
  k.stride_first = p.stride_b;
  k.second = a;
  k.second_type = g.in_type;
  k.ld_second = p.lda;
  k.stride_second = p.stride_a;
  k.c = c;
  k.c_type = g.stage_c ? DType::kF32 : p.c_type;
  k.ldc = p.ldc;
  k.stride_c = p.stride_c;
  k.batch = p.batch;
  return k;
}

// Carries a plan out through `ops`, which provides (all asynchronous, in call order):
//   void* Scratch(size_t bytes)                                   device memory until ops is destroyed
//   void Convert(const void* src, DType st, void* dst, DType dt, int64_t n)
//   void FillBiasRows(void* c, DType ct, int64_t ldc, int64_t stride_c, int64_t batch, int64_t m, int64_t n,
//                     const void* bias, DType bias_type)           C[b][i][j] = bias[j]
//   void Cublas(const CublasCall& call)
//   void Epilogue(const float* w, void* c, DType ct, int64_t ldc, int64_t stride_c, int64_t batch, int64_t m,
//                 int64_t n, float w_scale, const void* bias, DType bias_type)
//        C[b][i][j] = round(w_scale * W[b][i][j] + bias[j]), W laid out like C; w == nullptr reads 0.
// The CUDA backend implements them with kernels and cuBLAS; the unit test with plain loops.
template <typename Ops>
void ExecuteGemmPlan(const GemmParams& p, const GemmPlan& g, Ops& ops) {
  const void* a = p.a;
  const void* b = p.b;
  if (g.stage_a) {
    void* s = ops.Scratch(static_cast<size_t>(g.a_extent) * sizeof(float));
    ops.Convert(p.a, p.a_type, s, DType::kF32, g.a_extent);
    a = s;
  }
  if (g.stage_b) {
    void* s = ops.Scratch(static_cast<size_t>(g.b_extent) * sizeof(float));
    ops.Convert(p.b, p.b_type, s, DType::kF32, g.b_extent);
    b = s;
  }
  void* c = p.c;
  float* w = nullptr;
  if (g.stage_c && (g.load_c || !g.k_zero)) {
    w = static_cast<float*>(ops.Scratch(static_cast<size_t>(g.c_extent) * sizeof(float)));
    if (g.load_c) ops.Convert(p.c, p.c_type, w, DType::kF32, g.c_extent);
    c = w;
  }
  if (g.prefill_bias) ops.FillBiasRows(p.c, p.c_type, p.ldc, p.stride_c, p.batch, p.m, p.n, p.bias, p.bias_type);
  if (!g.k_zero) ops.Cublas(MakeCublasCall(p, g, a, b, c));
  if (g.stage_c) {
    // cuBLAS already applied beta to the loaded C; with k == 0 the epilogue applies it.
    const float w_scale = g.k_zero ? p.beta : 1.0f;
    ops.Epilogue(w, p.c, p.c_type, p.ldc, p.stride_c, p.batch, p.m, p.n, w_scale,
                 g.epilogue_bias ? p.bias : nullptr, p.bias_type);
  }
}

// ---- multi-tensor optimizer launches ---------------------------------------------------------------

// One block per (tensor, chunk of kOptimChunk elements); a launch carries at most kMaxTensors tensors and
// kMaxBlocks blocks in its by-value argument (under CUDA's 4 KiB parameter limit); a tensor may
// continue into the next launch.
inline constexpr int64_t kOptimChunk = 65536;
inline constexpr int kOptimMaxTensors = 24;
inline constexpr int kOptimMaxBlocks = 320;

struct MultiTensorBlock {
  int32_t tensor = 0;  // index into the launch's `tensors`
  int64_t chunk = 0;   // elements [chunk * chunk_elems, min(n, (chunk + 1) * chunk_elems)) of that tensor
};
struct MultiTensorLaunch {
  std::vector<int32_t> tensors;  // indexes into the caller's list, increasing
  std::vector<MultiTensorBlock> blocks;
};

// Tensors of size 0 get no block. Every element of every tensor is covered by exactly one block.
inline std::vector<MultiTensorLaunch> PlanMultiTensor(const std::vector<int64_t>& sizes, int64_t chunk_elems,
                                                      int max_tensors, int max_blocks) {
  ZR_CHECK(chunk_elems > 0 && max_tensors > 0 && max_blocks > 0, "PlanMultiTensor: bad limits");
  std::vector<MultiTensorLaunch> launches;
  for (size_t t = 0; t < sizes.size(); ++t) {
    const int64_t chunks = CeilDiv(sizes[t], chunk_elems);
    for (int64_t c = 0; c < chunks; ++c) {
      bool have = !launches.empty();
      bool tensor_present = have && !launches.back().tensors.empty() &&
                            launches.back().tensors.back() == static_cast<int32_t>(t);
      if (!have || static_cast<int>(launches.back().blocks.size()) == max_blocks ||
          (!tensor_present && static_cast<int>(launches.back().tensors.size()) == max_tensors)) {
        launches.emplace_back();
        tensor_present = false;
      }
      MultiTensorLaunch& l = launches.back();
      if (!tensor_present) l.tensors.push_back(static_cast<int32_t>(t));
      l.blocks.push_back({static_cast<int32_t>(l.tensors.size() - 1), c});
    }
  }
  return launches;
}

// ---- attention ---------------------------------------------------------------------------------------

// Element offsets of the head layouts. qkv (B, T, 3C) holds per position [q | k | v], each (NH, HS);
// the batched GEMMs want each of q, k, v as (B, NH, T, HS): head-major, contiguous (T, HS) per head.
ZR_HOST_DEVICE inline int64_t QkvOffset(int64_t b, int64_t t, int64_t which, int64_t h, int64_t d, int64_t T,
                                        int64_t C, int64_t HS) {
  return (b * T + t) * 3 * C + which * C + h * HS + d;
}
ZR_HOST_DEVICE inline int64_t HeadOffset(int64_t b, int64_t h, int64_t t, int64_t d, int64_t T, int64_t NH,
                                         int64_t HS) {
  return ((b * NH + h) * T + t) * HS + d;
}

// The batched GEMM over B * NH heads of packed (T, HS) / (T, T) operands, row-major:
// C[h] (m, n) = alpha op(A[h]) op(B[h]), A[h] stored (m, k) or, transposed, (k, m); C fp32.
inline GemmParams HeadGemmParams(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, float alpha, const void* a,
                                 DType a_type, const void* b, DType b_type, float* c, int64_t heads) {
  GemmParams g;
  g.trans_a = ta;
  g.trans_b = tb;
  g.m = m;
  g.n = n;
  g.k = k;
  g.alpha = alpha;
  g.a = a;
  g.a_type = a_type;
  g.lda = ta == Trans::kN ? k : m;
  g.b = b;
  g.b_type = b_type;
  g.ldb = tb == Trans::kN ? n : k;
  g.c = c;
  g.c_type = DType::kF32;
  g.ldc = n;
  g.batch = heads;
  g.stride_a = m * k;
  g.stride_b = k * n;
  g.stride_c = m * n;
  return g;
}

// Scratch for the cuBLAS attention path. `gemm` is the dtype the batched GEMMs read (the storage dtype;
// probabilities and dS are rounded to it for 16-bit storage, as FlashAttention and PyTorch's math
// attention do), fp32 results are rounded once into the output.
struct AttentionScratch {
  size_t q = 0, k = 0, v = 0;    // (B, NH, T, HS) in `gemm`
  size_t dout = 0;               // backward: (B, NH, T, HS) in `gemm`
  size_t p16 = 0;                // 16-bit storage: the probabilities (B, NH, T, T) in `gemm`
  size_t dp = 0;                 // backward: dP (B, NH, T, T) fp32 (dS in place for fp32 storage)
  size_t ds16 = 0;               // backward, 16-bit storage: dS (B, NH, T, T) in `gemm`
  size_t out = 0;                // forward: (B, NH, T, HS) fp32
  size_t dq = 0, dk = 0, dv = 0;  // backward: (B, NH, T, HS) fp32 each
  size_t bytes = 0;
};
inline AttentionScratch PlanAttentionScratch(int64_t B, int64_t T, int64_t C, int64_t NH, DType type, bool backward) {
  const size_t es = DTypeSize(type);
  const size_t heads = static_cast<size_t>(B * T * C);         // B * NH * T * HS
  const size_t probs = static_cast<size_t>(B * NH * T * T);
  const bool half = Is16Bit(type);
  ScratchLayout l;
  AttentionScratch s;
  s.q = l.Add(heads * es);
  s.k = l.Add(heads * es);
  s.v = l.Add(heads * es);
  if (half) s.p16 = l.Add(probs * es);
  if (backward) {
    s.dout = l.Add(heads * es);
    s.dp = l.Add(probs * sizeof(float));
    if (half) s.ds16 = l.Add(probs * es);
    s.dq = l.Add(heads * sizeof(float));
    s.dk = l.Add(heads * sizeof(float));
    s.dv = l.Add(heads * sizeof(float));
  } else {
    s.out = l.Add(heads * sizeof(float));
  }
  s.bytes = l.bytes();
  return s;
}

// The attention steps in order, carried out through `ops` (the CUDA kernels, or loops in the unit
// test), over a scratch allocation laid out by PlanAttentionScratch at `scratch`. Ops provides:
//   PermuteQkv(qkv, q, k, v)        (B, T, 3C) -> three (B, NH, T, HS), storage dtype
//   Permute(x, y)                   (B, T, C)  -> (B, NH, T, HS), storage dtype
//   Unpermute(const float* x, out)  fp32 (B, NH, T, HS) -> (B, T, C) storage dtype, rounded once
//   UnpermuteQkv(dq, dk, dv, dqkv)  three fp32 (B, NH, T, HS) -> (B, T, 3C), rounded once
//   CausalSoftmax(float* att, p16)  rows of att: softmax over s <= t in place, 0 above; p16 (may be
//                                   null) gets the probabilities rounded to the storage dtype
//   SoftmaxGrad(att, dp, ds16, scale)  dS = P (dP - rowsum(P dP)) scale, into ds16 or (null) dp
//   Round(const float* src, void* dst, int64_t n)   fp32 -> storage dtype
//   Gemm(const GemmParams&)
struct AttentionDims {
  int64_t B = 0, T = 0, C = 0, NH = 0;
  DType type = DType::kF32;
  int64_t HS() const { return C / NH; }
  int64_t heads() const { return B * NH; }
};

template <typename Ops>
void RunAttentionForward(Ops& ops, const AttentionDims& d, void* out, float* att, const void* qkv, char* scratch) {
  const AttentionScratch s = PlanAttentionScratch(d.B, d.T, d.C, d.NH, d.type, false);
  const int64_t T = d.T, HS = d.HS(), heads = d.heads();
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  void* q = scratch + s.q;
  void* k = scratch + s.k;
  void* v = scratch + s.v;
  void* p16 = Is16Bit(d.type) ? scratch + s.p16 : nullptr;
  auto* o = reinterpret_cast<float*>(scratch + s.out);
  ops.PermuteQkv(qkv, q, k, v);
  ops.Gemm(HeadGemmParams(Trans::kN, Trans::kT, T, T, HS, scale, q, d.type, k, d.type, att, heads));  // S = q k^T
  ops.CausalSoftmax(att, p16);
  if (p16 != nullptr) {
    ops.Gemm(HeadGemmParams(Trans::kN, Trans::kN, T, HS, T, 1.0f, p16, d.type, v, d.type, o, heads));  // P v
  } else {
    ops.Gemm(HeadGemmParams(Trans::kN, Trans::kN, T, HS, T, 1.0f, att, DType::kF32, v, d.type, o, heads));
  }
  ops.Unpermute(o, out);
}

template <typename Ops>
void RunAttentionBackward(Ops& ops, const AttentionDims& d, void* dqkv, const void* dout, const void* qkv,
                          const float* att, char* scratch) {
  const AttentionScratch s = PlanAttentionScratch(d.B, d.T, d.C, d.NH, d.type, true);
  const int64_t T = d.T, HS = d.HS(), heads = d.heads();
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const bool half = Is16Bit(d.type);
  void* q = scratch + s.q;
  void* k = scratch + s.k;
  void* v = scratch + s.v;
  void* dO = scratch + s.dout;
  auto* dp = reinterpret_cast<float*>(scratch + s.dp);
  auto* dq = reinterpret_cast<float*>(scratch + s.dq);
  auto* dk = reinterpret_cast<float*>(scratch + s.dk);
  auto* dv = reinterpret_cast<float*>(scratch + s.dv);
  ops.PermuteQkv(qkv, q, k, v);
  ops.Permute(dout, dO);
  const void* P = att;
  DType p_type = DType::kF32;
  if (half) {
    ops.Round(att, scratch + s.p16, heads * T * T);
    P = scratch + s.p16;
    p_type = d.type;
  }
  ops.Gemm(HeadGemmParams(Trans::kT, Trans::kN, T, HS, T, 1.0f, P, p_type, dO, d.type, dv, heads));  // P^T dout
  ops.Gemm(HeadGemmParams(Trans::kN, Trans::kT, T, T, HS, 1.0f, dO, d.type, v, d.type, dp, heads));  // dout v^T
  void* ds16 = half ? scratch + s.ds16 : nullptr;
  ops.SoftmaxGrad(att, dp, ds16, scale);
  const void* dS = half ? ds16 : static_cast<const void*>(dp);
  const DType ds_type = half ? d.type : DType::kF32;
  ops.Gemm(HeadGemmParams(Trans::kN, Trans::kN, T, HS, T, 1.0f, dS, ds_type, k, d.type, dq, heads));  // dS k
  ops.Gemm(HeadGemmParams(Trans::kT, Trans::kN, T, HS, T, 1.0f, dS, ds_type, q, d.type, dk, heads));  // dS^T q
  ops.UnpermuteQkv(dq, dk, dv, dqkv);
}

}  // namespace zerorun::kernels::cuda
