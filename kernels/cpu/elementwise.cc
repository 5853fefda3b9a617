// CPU elementwise ops, activations, dropout and buffer reductions: blocked and threaded (blocks.h),
// fp32 bodies from VecOps.
#include <atomic>
#include <cstring>
#include <vector>

#include "zerorun/kernels/cpu/blocks.h"
#include "zerorun/kernels/cpu/cpu.h"
#include "zerorun/kernels/cpu/philox.h"
#include "zerorun/kernels/cpu/vec.h"
#include "zerorun/kernels/dropout_mask.h"

namespace zerorun::kernels::cpu {
namespace {

void Add(void* out, const void* a, const void* b, int64_t n, DType type) {
  MapBlocks<2>(n, type, out, {a, b}, [](const float* const* in, float* o, int64_t len, int64_t) {
    Vec().add(o, in[0], in[1], len);
  });
}

void Scale(void* out, const void* x, float alpha, int64_t n, DType type) {
  MapBlocks<1>(n, type, out, {x}, [alpha](const float* const* in, float* o, int64_t len, int64_t) {
    Vec().scale(o, in[0], alpha, len);
  });
}

void Axpy(void* y, DType y_type, const void* x, DType x_type, float alpha, int64_t n) {
  int64_t blocks = (n + kBlockElems - 1) / kBlockElems;
  ParallelFor(0, blocks, kElemGrain / kBlockElems, [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      int64_t i = blk * kBlockElems, len = std::min(kBlockElems, n - i);
      const float* xs = RowAsF32(x, x_type, i, len, kScratchA);
      float* ys = OutRowF32(y, y_type, i, len, kScratchB);
      if (y_type != DType::kF32) LoadRow(y, y_type, i, ys, len);
      Vec().axpy(ys, xs, alpha, len);
      StoreRowIfNeeded(ys, y, y_type, i, len);
    }
  });
}

void Fill(void* out, float value, int64_t n, DType type) {
  ParallelFor(0, n, 1 << 16, [&](int64_t b, int64_t e) {
    if (type == DType::kF32) {
      std::fill(static_cast<float*>(out) + b, static_cast<float*>(out) + e, value);
    } else if (type == DType::kF64) {
      std::fill(static_cast<double*>(out) + b, static_cast<double*>(out) + e, static_cast<double>(value));
    } else {
      uint16_t bits = type == DType::kF16 ? FloatToHalfBits(value) : FloatToBF16Bits(value);
      std::fill(static_cast<uint16_t*>(out) + b, static_cast<uint16_t*>(out) + e, bits);
    }
  });
}

void Copy(void* dst, DType dst_type, const void* src, DType src_type, int64_t n) {
  ParallelFor(0, n, 1 << 16, [&](int64_t b, int64_t e) {
    Convert(At(src, src_type, b), src_type, At(dst, dst_type, b), dst_type, static_cast<size_t>(e - b));
  });
}

void GeluForward(void* out, const void* x, int64_t n, DType type, GeluApprox approx) {
  MapBlocks<1>(n, type, out, {x}, [approx](const float* const* in, float* o, int64_t len, int64_t) {
    Vec().gelu(o, in[0], len, approx);
  });
}

void GeluBackward(void* dx, const void* dout, const void* x, int64_t n, DType type, GeluApprox approx) {
  MapBlocks<2>(n, type, dx, {dout, x}, [approx](const float* const* in, float* o, int64_t len, int64_t) {
    Vec().gelu_grad(o, in[0], in[1], len, approx);
  });
}

void SiluForward(void* out, const void* x, int64_t n, DType type) {
  MapBlocks<1>(n, type, out, {x}, [](const float* const* in, float* o, int64_t len, int64_t) {
    Vec().silu(o, in[0], len);
  });
}

void SiluBackward(void* dx, const void* dout, const void* x, int64_t n, DType type) {
  MapBlocks<2>(n, type, dx, {dout, x}, [](const float* const* in, float* o, int64_t len, int64_t) {
    Vec().silu_grad(o, in[0], in[1], len);
  });
}

// Rows of (N, 2H) in, pieces of at most kBlockElems columns.
template <class F>
void ForEachSwiGluPiece(int64_t N, int64_t H, F&& fn) {
  int64_t pieces = (H + kBlockElems - 1) / kBlockElems;
  ParallelFor(0, N * pieces, std::max<int64_t>(1, kElemGrain / std::min(H, kBlockElems)), [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      int64_t r = k / pieces, j0 = (k % pieces) * kBlockElems, len = std::min(kBlockElems, H - j0);
      fn(r, j0, len);
    }
  });
}

void SwiGluForward(void* out, const void* in, int64_t N, int64_t H, DType type) {
  ForEachSwiGluPiece(N, H, [&](int64_t r, int64_t j0, int64_t len) {
    const float* g = RowAsF32(in, type, r * 2 * H + j0, len, kScratchA);
    const float* u = RowAsF32(in, type, r * 2 * H + H + j0, len, kScratchB);
    float* y = OutRowF32(out, type, r * H + j0, len, kScratchC);
    Vec().swiglu(y, g, u, len);
    StoreRowIfNeeded(y, out, type, r * H + j0, len);
  });
}

void SwiGluBackward(void* din, const void* dout, const void* in, int64_t N, int64_t H, DType type) {
  ForEachSwiGluPiece(N, H, [&](int64_t r, int64_t j0, int64_t len) {
    const float* g = RowAsF32(in, type, r * 2 * H + j0, len, kScratchA);
    const float* u = RowAsF32(in, type, r * 2 * H + H + j0, len, kScratchB);
    const float* dy = RowAsF32(dout, type, r * H + j0, len, kScratchC);
    float* dg = OutRowF32(din, type, r * 2 * H + j0, len, kScratchD);
    float* du = OutRowF32(din, type, r * 2 * H + H + j0, len, kScratchE);
    Vec().swiglu_grad(dg, du, dy, g, u, len);
    StoreRowIfNeeded(dg, din, type, r * 2 * H + j0, len);
    StoreRowIfNeeded(du, din, type, r * 2 * H + H + j0, len);
  });
}

// y = x * keep / (1 - p); element i's keep flag comes from Philox word offset + i (dropout_mask.h),
// the words of a block generated in bulk (philox.h) and applied by VecOps.
void DropoutApply(void* out, const void* x, int64_t n, DType type, float p, uint64_t seed, uint64_t stream,
                  uint64_t offset) {
  uint32_t threshold = DropoutThreshold(p);
  float scale = 1.0f / (1.0f - p);
  MapBlocks<1>(n, type, out, {x}, [&](const float* const* in, float* o, int64_t len, int64_t first) {
    thread_local std::vector<uint32_t> words;
    uint64_t word0 = offset + static_cast<uint64_t>(first);
    uint64_t block0 = word0 >> 2, blocks = ((word0 + static_cast<uint64_t>(len) + 3) >> 2) - block0;
    words.resize(4 * blocks);
    PhiloxWords(seed, stream, block0, static_cast<int64_t>(blocks), words.data());
    Vec().dropout_apply(o, in[0], words.data() + (word0 & 3), len, threshold, scale);
  });
}

void DropoutForward(void* out, const void* x, int64_t n, DType type, float p, uint64_t seed, uint64_t stream,
                    uint64_t offset) {
  DropoutApply(out, x, n, type, p, seed, stream, offset);
}

void DropoutBackward(void* dx, const void* dout, int64_t n, DType type, float p, uint64_t seed, uint64_t stream,
                     uint64_t offset) {
  DropoutApply(dx, dout, n, type, p, seed, stream, offset);
}

// Fixed blocks, each summed in fp32 (fp64 input: double), the block sums added in order in double:
// the result does not depend on the thread count.
double SumSquares(const void* x, int64_t n, DType type) {
  int64_t blocks = (n + kBlockElems - 1) / kBlockElems;
  std::vector<double> partial(static_cast<size_t>(blocks));
  ParallelFor(0, blocks, kElemGrain / kBlockElems, [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      int64_t i = blk * kBlockElems, len = std::min(kBlockElems, n - i);
      if (type == DType::kF64) {
        const double* d = static_cast<const double*>(x) + i;
        double s = 0.0;
        for (int64_t j = 0; j < len; ++j) s += d[j] * d[j];
        partial[blk] = s;
      } else {
        const float* v = RowAsF32(x, type, i, len, kScratchA);
        partial[blk] = static_cast<double>(Vec().dot(v, v, len));
      }
    }
  });
  double s = 0.0;
  for (double v : partial) s += v;
  return s;
}

template <class T, T kExpMask>
bool NoneAllOnesExponent(const T* bits, int64_t n) {
  T any = 0;  // OR of (bits & mask) == mask, branch-free so the loop vectorises
  for (int64_t i = 0; i < n; ++i) any |= static_cast<T>((bits[i] & kExpMask) == kExpMask);
  return any == 0;
}

bool AllFinite(const void* x, int64_t n, DType type) {
  std::atomic<bool> finite{true};
  ParallelFor(0, n, 1 << 16, [&](int64_t b, int64_t e) {
    if (!finite.load(std::memory_order_relaxed)) return;
    bool ok;
    switch (type) {
      case DType::kF32: ok = NoneAllOnesExponent<uint32_t, 0x7f800000u>(static_cast<const uint32_t*>(x) + b, e - b); break;
      case DType::kF64:
        ok = NoneAllOnesExponent<uint64_t, 0x7ff0000000000000ull>(static_cast<const uint64_t*>(x) + b, e - b);
        break;
      case DType::kF16: ok = NoneAllOnesExponent<uint16_t, 0x7c00u>(static_cast<const uint16_t*>(x) + b, e - b); break;
      default: ok = NoneAllOnesExponent<uint16_t, 0x7f80u>(static_cast<const uint16_t*>(x) + b, e - b); break;
    }
    if (!ok) finite.store(false, std::memory_order_relaxed);
  });
  return finite.load();
}

}  // namespace

void FillElementwise(KernelTable& t) {
  t.add = &Add;
  t.axpy = &Axpy;
  t.scale = &Scale;
  t.fill = &Fill;
  t.copy = &Copy;
  t.dropout_forward = &DropoutForward;
  t.dropout_backward = &DropoutBackward;
  t.sum_squares = &SumSquares;
  t.all_finite = &AllFinite;
}

void FillActivation(KernelTable& t) {
  t.gelu_forward = &GeluForward;
  t.gelu_backward = &GeluBackward;
  t.silu_forward = &SiluForward;
  t.silu_backward = &SiluBackward;
  t.swiglu_forward = &SwiGluForward;
  t.swiglu_backward = &SwiGluBackward;
}

}  // namespace zerorun::kernels::cpu
