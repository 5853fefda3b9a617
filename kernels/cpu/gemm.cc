// CPU GEMM on oneDNN matmul primitives or OpenBLAS sgemm (ActiveGemmBackend), threaded by the core pool.
//
// Threading: the library runs one thread per call (OpenBLAS set once, oneDNN's OpenMP held to one
// thread per calling thread) and the core pool splits C into row blocks (or column blocks when C is
// short and wide), one library call per block. That keeps a single pool of threads in the process
// (the libraries' own threads would oversubscribe the cores the pool already uses, and spin between
// calls), and lets several ranks-as-threads call GEMM concurrently.
// Direct path (oneDNN; A and B of one dtype that oneDNN multiplies natively here: fp32 always, bf16
// with AVX512-BF16 or AMX): each block is one matmul on the operands as stored, bias fused, C written
// in its own dtype once.
// Widened path (OpenBLAS, mixed dtypes, 16-bit without native support): B is converted to an fp32 copy
// once per call; each A row panel is converted by the thread that owns it; a 16-bit C is computed into
// an fp32 panel (loaded first when beta != 0), the bias added, and rounded once on the way out.
#include <algorithm>

#include "zerorun/core/thread_pool.h"
#include "zerorun/kernels/access.h"
#include "zerorun/kernels/cpu/blas.h"
#include "zerorun/kernels/cpu/cpu.h"
#include "zerorun/kernels/cpu/onednn.h"
#include "zerorun/kernels/cpu/scratch.h"
#include "zerorun/kernels/cpu/vec.h"
#include "zerorun/kernels/gemm_backend.h"

namespace zerorun::kernels::cpu {
namespace {

// Rows of A / C converted at a time on the 16-bit paths: as many as fit kPanelElems fp32 values, but
// at least kMinPanelRows (each panel is one sgemm call, which re-packs B).
constexpr int64_t kPanelElems = int64_t{4} << 20;
constexpr int64_t kMinPanelRows = 256;
constexpr double kMinFlopsPerChunk = 2.0e6;   // below this a chunk is not worth a thread
constexpr double kMaxFlopsPerBatchItem = 3.2e7;  // smaller batched items run one per thread

// fp32 copy of a (rows, cols) matrix with leading dim ld into `dst` (leading dim cols), threaded.
void ConvertMatrix(const void* src, DType t, int64_t rows, int64_t cols, int64_t ld, float* dst) {
  ParallelFor(0, rows, std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(1, cols)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) LoadRow(src, t, r * ld, dst + r * cols, cols);
  });
}

// One sgemm over rows [i0, i1) x columns [j0, j1) of C; `a`/`b` are fp32 (already converted if needed).
void GemmBlock(const GemmParams& p, const float* a, int64_t lda, const float* b, int64_t ldb, void* c,
               const float* bias, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  int64_t rows = i1 - i0, cols = j1 - j0;
  const float* b_blk = p.trans_b == Trans::kN ? b + j0 : b + j0 * ldb;
  int64_t panel = rows;
  if (p.c_type != DType::kF32 || p.a_type != DType::kF32) {
    panel = std::max(kMinPanelRows, kPanelElems / std::max<int64_t>(1, std::max(p.k, cols)));
  }
  for (int64_t r0 = i0; r0 < i1; r0 += panel) {
    int64_t r1 = std::min(i1, r0 + panel);
    int64_t pr = r1 - r0;
    // A panel: rows [r0, r1) of op(A).
    const float* a_blk;
    int64_t a_ld;
    if (p.a_type == DType::kF32) {
      a_blk = p.trans_a == Trans::kN ? a + r0 * lda : a + r0;
      a_ld = lda;
    } else if (p.trans_a == Trans::kN) {
      float* s = Scratch(kScratchA, static_cast<size_t>(pr * p.k));
      for (int64_t r = 0; r < pr; ++r) LoadRow(p.a, p.a_type, (r0 + r) * p.lda, s + r * p.k, p.k);
      a_blk = s;
      a_ld = p.k;
    } else {  // A is (k, m): columns [r0, r1) of each of its k rows
      float* s = Scratch(kScratchA, static_cast<size_t>(pr * p.k));
      for (int64_t l = 0; l < p.k; ++l) LoadRow(p.a, p.a_type, l * p.lda + r0, s + l * pr, pr);
      a_blk = s;
      a_ld = pr;
    }
    // C panel.
    float* c_blk;
    int64_t c_ld;
    float beta = p.beta;
    if (p.c_type == DType::kF32) {
      c_blk = static_cast<float*>(c) + r0 * p.ldc + j0;
      c_ld = p.ldc;
    } else {
      c_blk = Scratch(kScratchC, static_cast<size_t>(pr * cols));
      c_ld = cols;
      if (beta != 0.0f) {
        for (int64_t r = 0; r < pr; ++r) LoadRow(c, p.c_type, (r0 + r) * p.ldc + j0, c_blk + r * cols, cols);
      }
    }
    Sgemm(p.trans_a == Trans::kT, p.trans_b == Trans::kT, pr, cols, p.k, p.alpha, a_blk, a_ld, b_blk, ldb, beta, c_blk,
          c_ld);
    if (bias != nullptr) {
      for (int64_t r = 0; r < pr; ++r) {
        float* row = c_blk + r * c_ld;
        Vec().add(row, row, bias + j0, cols);
      }
    }
    if (p.c_type != DType::kF32) {
      for (int64_t r = 0; r < pr; ++r) StoreRow(c_blk + r * cols, c, p.c_type, (r0 + r) * p.ldc + j0, cols);
    }
  }
}

// Whether Gemm takes the direct path (see the top of this file).
bool Direct(const GemmParams& p) {
  if (ActiveGemmBackend() != GemmBackend::kOnednn || p.m <= 0 || p.n <= 0 || p.k <= 0 || p.a_type != p.b_type) {
    return false;
  }
  if (p.bias != nullptr && p.alpha != 1.0f) return false;  // oneDNN would scale the bias too
  return p.a_type == DType::kF32 || OnednnNative16(p.a_type);
}

// Rows [i0, i1) x columns [j0, j1) of one item on the direct path; `a`, `b`, `c` are the item's. When
// oneDNN turns the block down (no fast implementation for these strides), the block is widened.
void DirectBlock(const GemmParams& p, const void* a, const void* b, void* c, const float* bias32, int64_t i0,
                 int64_t i1, int64_t j0, int64_t j1) {
  GemmParams q = p;
  q.batch = 1;
  q.m = i1 - i0;
  q.n = j1 - j0;
  q.a = At(a, p.a_type, p.trans_a == Trans::kN ? i0 * p.lda : i0);
  q.b = At(b, p.b_type, p.trans_b == Trans::kN ? j0 : j0 * p.ldb);
  q.c = At(c, p.c_type, i0 * p.ldc + j0);
  if (OnednnGemm(q, bias32 != nullptr ? bias32 + j0 : nullptr)) return;
  int64_t b_rows = p.trans_b == Trans::kN ? p.k : p.n;
  int64_t b_cols = p.trans_b == Trans::kN ? p.n : p.k;
  const float* b32 = static_cast<const float*>(b);
  int64_t ldb = p.ldb;
  if (p.b_type != DType::kF32) {
    float* s = Scratch(kScratchD, static_cast<size_t>(b_rows * b_cols));
    for (int64_t r = 0; r < b_rows; ++r) LoadRow(b, p.b_type, r * p.ldb, s + r * b_cols, b_cols);
    b32 = s;
    ldb = b_cols;
  }
  GemmParams w = p;
  w.a = a;
  GemmBlock(w, static_cast<const float*>(a), p.lda, b32, ldb, c, bias32, i0, i1, j0, j1);
}

void Gemm(const GemmParams& p) {
  EnsureBlasSingleThreaded();
  const bool direct = Direct(p);
  // Shared fp32 copies (caller's thread_local scratch, read by every chunk).
  int64_t b_rows = p.trans_b == Trans::kN ? p.k : p.n;
  int64_t b_cols = p.trans_b == Trans::kN ? p.n : p.k;
  float* bias32 = nullptr;
  if (p.bias != nullptr) {
    bias32 = Scratch(kShared0, static_cast<size_t>(p.n));
    LoadRow(p.bias, p.bias_type, 0, bias32, p.n);
  }
  int threads = ThreadPool::Default().num_threads();
  double flops = 2.0 * static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(std::max<int64_t>(1, p.k));
  if (p.batch > 1 && flops < kMaxFlopsPerBatchItem) {
    // Many small products (e.g. attention heads): whole items per chunk, each on one thread.
    ParallelFor(0, p.batch, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t bi = i0; bi < i1; ++bi) {
        if (direct) {
          DirectBlock(p, At(p.a, p.a_type, bi * p.stride_a), At(p.b, p.b_type, bi * p.stride_b),
                      At(p.c, p.c_type, bi * p.stride_c), bias32, 0, p.m, 0, p.n);
          continue;
        }
        GemmParams q = p;
        q.a = At(p.a, p.a_type, bi * p.stride_a);
        const void* b_raw = At(p.b, p.b_type, bi * p.stride_b);
        const float* b32 = static_cast<const float*>(b_raw);
        int64_t ldb = p.ldb;
        if (p.b_type != DType::kF32) {
          float* s = Scratch(kScratchB, static_cast<size_t>(b_rows * b_cols));
          for (int64_t r = 0; r < b_rows; ++r) LoadRow(b_raw, p.b_type, r * p.ldb, s + r * b_cols, b_cols);
          b32 = s;
          ldb = b_cols;
        }
        GemmBlock(q, static_cast<const float*>(q.a), p.lda, b32, ldb, At(p.c, p.c_type, bi * p.stride_c), bias32, 0,
                  p.m, 0, p.n);
      }
    });
    return;
  }
  for (int64_t bi = 0; bi < p.batch; ++bi) {
    const void* a_raw = At(p.a, p.a_type, bi * p.stride_a);
    const void* b_raw = At(p.b, p.b_type, bi * p.stride_b);
    void* c = At(p.c, p.c_type, bi * p.stride_c);
    const float* b32 = static_cast<const float*>(b_raw);
    int64_t ldb = p.ldb;
    if (p.b_type != DType::kF32 && !direct) {
      float* s = Scratch(kShared1, static_cast<size_t>(b_rows * b_cols));
      ConvertMatrix(b_raw, p.b_type, b_rows, b_cols, p.ldb, s);
      b32 = s;
      ldb = b_cols;
    }
    const float* a32 = static_cast<const float*>(a_raw);  // only used when a_type is fp32
    GemmParams q = p;
    q.a = a_raw;
    // Split rows when there are enough of them, else columns.
    bool split_rows = p.m >= 32 * threads || p.m >= p.n;
    int64_t extent = split_rows ? p.m : p.n;
    // One chunk per thread: every chunk is one sgemm that packs B again, and bigger calls run faster.
    int64_t grain = std::max<int64_t>({split_rows ? 8 : 64, (extent + threads - 1) / threads,
                                       static_cast<int64_t>(kMinFlopsPerChunk / (flops / static_cast<double>(extent)))});
    ParallelFor(0, extent, grain, [&](int64_t b, int64_t e) {
      if (direct) {
        if (split_rows) {
          DirectBlock(p, a_raw, b_raw, c, bias32, b, e, 0, p.n);
        } else {
          DirectBlock(p, a_raw, b_raw, c, bias32, 0, p.m, b, e);
        }
      } else if (split_rows) {
        GemmBlock(q, a32, p.lda, b32, ldb, c, bias32, b, e, 0, p.n);
      } else {
        GemmBlock(q, a32, p.lda, b32, ldb, c, bias32, 0, p.m, b, e);
      }
    });
  }
}

void BiasAdd(void* out, DType out_type, const void* bias, DType bias_type, int64_t N, int64_t C) {
  float* b32 = Scratch(kShared0, static_cast<size_t>(C));
  LoadRow(bias, bias_type, 0, b32, C);
  ParallelFor(0, N, std::max<int64_t>(1, (1 << 15) / C), [&](int64_t b, int64_t e) {
    float* row = out_type == DType::kF32 ? nullptr : Scratch(kScratchA, static_cast<size_t>(C));
    for (int64_t i = b; i < e; ++i) {
      float* r = out_type == DType::kF32 ? static_cast<float*>(out) + i * C : row;
      if (out_type != DType::kF32) LoadRow(out, out_type, i * C, r, C);
      Vec().add(r, r, b32, C);
      if (out_type != DType::kF32) StoreRow(r, out, out_type, i * C, C);
    }
  });
}

// Column blocks, each summed over all rows in fp32 in row order: deterministic for any thread count
// and block width. One block per pool thread (up to kMaxCols wide, so the sums stay in L1), so each
// row is read in long contiguous pieces.
void BiasBackward(void* dbias, DType dbias_type, const void* dout, DType dout_type, int64_t N, int64_t C) {
  constexpr int64_t kMinCols = 64, kMaxCols = 2048;
  const int64_t threads = ThreadPool::Default().num_threads();
  const int64_t cols = std::clamp<int64_t>(((C + threads - 1) / threads + 15) / 16 * 16, kMinCols, kMaxCols);
  const VecOps& vec = Vec();
  ParallelFor(0, (C + cols - 1) / cols, 1, [&](int64_t b, int64_t e) {
    float* acc = Scratch(kScratchC, static_cast<size_t>(cols));
    float* row = Scratch(kScratchA, static_cast<size_t>(cols));
    for (int64_t blk = b; blk < e; ++blk) {
      int64_t j0 = blk * cols, w = std::min(cols, C - j0);
      std::fill(acc, acc + w, 0.0f);
      for (int64_t i = 0; i < N; ++i) {
        const float* r = row;
        if (dout_type == DType::kF32) {
          r = static_cast<const float*>(dout) + i * C + j0;
        } else {
          LoadRow(dout, dout_type, i * C + j0, row, w);
        }
        vec.add(acc, acc, r, w);  // the ISA's vector add (this file is compiled for the base ISA)
      }
      float* old = Scratch(kScratchB, static_cast<size_t>(cols));
      LoadRow(dbias, dbias_type, j0, old, w);
      for (int64_t j = 0; j < w; ++j) old[j] += acc[j];
      StoreRow(old, dbias, dbias_type, j0, w);
    }
  });
}

}  // namespace

void FillGemm(KernelTable& t) {
  t.gemm = &Gemm;
  t.bias_add = &BiasAdd;
  t.bias_backward = &BiasBackward;
}

}  // namespace zerorun::kernels::cpu
