// Blocked, threaded traversal of elementwise buffers for the CPU kernels (internal). A buffer of n
// elements is cut into blocks of kBlockElems; the core pool takes blocks in chunks; each block's
// 16-bit operands are widened into per-thread fp32 scratch, the fp32 body runs, and a 16-bit result
// is rounded once on the way back. fp32 operands are used in place (so out may alias an input).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "zerorun/core/thread_pool.h"
#include "zerorun/kernels/access.h"
#include "zerorun/kernels/cpu/scratch.h"

namespace zerorun::kernels::cpu {

constexpr int64_t kBlockElems = 2048;
constexpr int64_t kElemGrain = 16384;  // elements per pool chunk, at least

// fn(const float* in[NIn], float* out, int64_t len, int64_t first_elem) for every block.
template <int NIn, class F>
void MapBlocks(int64_t n, DType type, void* out, std::array<const void*, NIn> in, F&& fn) {
  int64_t blocks = (n + kBlockElems - 1) / kBlockElems;
  ParallelFor(0, blocks, std::max<int64_t>(1, kElemGrain / kBlockElems), [&](int64_t b0, int64_t b1) {
    std::array<const float*, NIn> src;
    for (int64_t blk = b0; blk < b1; ++blk) {
      int64_t i = blk * kBlockElems, len = std::min(kBlockElems, n - i);
      float* dst;
      if (type == DType::kF32) {
        for (int k = 0; k < NIn; ++k) src[k] = static_cast<const float*>(in[k]) + i;
        dst = static_cast<float*>(out) + i;
      } else {
        for (int k = 0; k < NIn; ++k) {
          float* s = Scratch(static_cast<ScratchSlot>(k), kBlockElems);
          LoadRow(in[k], type, i, s, len);
          src[k] = s;
        }
        dst = Scratch(static_cast<ScratchSlot>(NIn), kBlockElems);
      }
      fn(src.data(), dst, len, i);
      if (type != DType::kF32) StoreRow(dst, out, type, i, len);
    }
  });
}

// A row of `type` as fp32: the row itself when fp32, else widened into scratch `slot`.
inline const float* RowAsF32(const void* base, DType type, int64_t first, int64_t n, ScratchSlot slot) {
  if (type == DType::kF32) return static_cast<const float*>(base) + first;
  float* s = Scratch(slot, static_cast<size_t>(n));
  LoadRow(base, type, first, s, n);
  return s;
}

// Where to compute an output row: in place when fp32, else scratch `slot` (then StoreRowIfNeeded).
inline float* OutRowF32(void* base, DType type, int64_t first, int64_t n, ScratchSlot slot) {
  if (type == DType::kF32) return static_cast<float*>(base) + first;
  return Scratch(slot, static_cast<size_t>(n));
}
inline void StoreRowIfNeeded(const float* row, void* base, DType type, int64_t first, int64_t n) {
  if (type != DType::kF32) StoreRow(row, base, type, first, n);
}

}  // namespace zerorun::kernels::cpu
