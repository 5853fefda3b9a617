// CPU token + position embedding. The backward groups positions by token (a stable sort), so each
// gradient row is owned by one chunk: no atomics, the sum order is position order whatever the
// thread count, and a 16-bit gradient row is rounded once per call.
#include <algorithm>
#include <numeric>
#include <vector>

#include "zerorun/kernels/cpu/blocks.h"
#include "zerorun/kernels/cpu/cpu.h"
#include "zerorun/kernels/cpu/vec.h"

namespace zerorun::kernels::cpu {
namespace {

int64_t RowGrain(int64_t C) { return std::max<int64_t>(1, kElemGrain / std::max<int64_t>(1, C)); }

void EmbeddingForward(void* out, DType out_type, const int32_t* tokens, const void* wte, const void* wpe,
                      DType param_type, int64_t B, int64_t T, int64_t C, int64_t V) {
  ParallelFor(0, B * T, RowGrain(C), [&](int64_t r0, int64_t r1) {
    const VecOps& v = Vec();
    for (int64_t row = r0; row < r1; ++row) {
      int64_t t = row % T;
      const float* te = RowAsF32(wte, param_type, tokens[row] * C, C, kScratchA);
      float* o = OutRowF32(out, out_type, row * C, C, kScratchC);
      if (wpe != nullptr) {
        v.add(o, te, RowAsF32(wpe, param_type, t * C, C, kScratchB), C);
      } else if (o != te) {
        std::copy(te, te + C, o);
      }
      StoreRowIfNeeded(o, out, out_type, row * C, C);
    }
  });
}

// grad row (C) += acc, with one rounding for 16-bit gradients.
void AddToGradRow(void* grad, DType grad_type, int64_t first, const float* acc, int64_t C) {
  if (grad_type == DType::kF32) {
    Vec().add(static_cast<float*>(grad) + first, static_cast<const float*>(grad) + first, acc, C);
    return;
  }
  float* g = Scratch(kScratchB, static_cast<size_t>(C));
  LoadRow(grad, grad_type, first, g, C);
  Vec().add(g, g, acc, C);
  StoreRow(g, grad, grad_type, first, C);
}

void EmbeddingBackward(void* dwte, void* dwpe, DType grad_type, const void* dout, DType dout_type,
                       const int32_t* tokens, int64_t B, int64_t T, int64_t C, int64_t V) {
  int64_t rows = B * T;
  if (dwte != nullptr) {
    std::vector<int64_t> order(static_cast<size_t>(rows));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return tokens[x] < tokens[y]; });
    std::vector<int64_t> group_start;  // into `order`, one per distinct token, plus the end
    for (int64_t i = 0; i < rows; ++i) {
      if (i == 0 || tokens[order[i]] != tokens[order[i - 1]]) group_start.push_back(i);
    }
    group_start.push_back(rows);
    int64_t groups = static_cast<int64_t>(group_start.size()) - 1;
    ParallelFor(0, groups, RowGrain(C), [&](int64_t g0, int64_t g1) {
      const VecOps& v = Vec();
      float* acc = Scratch(kScratchC, static_cast<size_t>(C));
      for (int64_t g = g0; g < g1; ++g) {
        std::fill(acc, acc + C, 0.0f);
        for (int64_t i = group_start[g]; i < group_start[g + 1]; ++i) {
          v.add(acc, acc, RowAsF32(dout, dout_type, order[i] * C, C, kScratchA), C);
        }
        AddToGradRow(dwte, grad_type, tokens[order[group_start[g]]] * C, acc, C);
      }
    });
  }
  if (dwpe != nullptr) {
    ParallelFor(0, T, RowGrain(C * B), [&](int64_t t0, int64_t t1) {
      const VecOps& v = Vec();
      float* acc = Scratch(kScratchC, static_cast<size_t>(C));
      for (int64_t t = t0; t < t1; ++t) {
        std::fill(acc, acc + C, 0.0f);
        for (int64_t b = 0; b < B; ++b) v.add(acc, acc, RowAsF32(dout, dout_type, (b * T + t) * C, C, kScratchA), C);
        AddToGradRow(dwpe, grad_type, t * C, acc, C);
      }
    });
  }
}

}  // namespace

void FillEmbedding(KernelTable& t) {
  t.embedding_forward = &EmbeddingForward;
  t.embedding_backward = &EmbeddingBackward;
}

}  // namespace zerorun::kernels::cpu
