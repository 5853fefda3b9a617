// CPU LayerNorm and RMSNorm: rows in parallel with VecOps bodies. The backward's parameter gradients
// are summed per fixed block of rows (the block size depends only on N) and the block partials are
// added in block order, so results do not depend on the thread count; a 16-bit gradient is read,
// added to in fp32 and rounded once.
#include <cmath>
#include <vector>

#include "zerorun/kernels/cpu/blocks.h"
#include "zerorun/kernels/cpu/cpu.h"
#include "zerorun/kernels/cpu/vec.h"

namespace zerorun::kernels::cpu {
namespace {

int64_t RowGrain(int64_t C) { return std::max<int64_t>(1, kElemGrain / std::max<int64_t>(1, C)); }

// fp32 copy of a (C) parameter vector, or null when absent; held in the caller's `slot`.
const float* ParamF32(const void* p, DType t, int64_t C, ScratchSlot slot) {
  if (p == nullptr) return nullptr;
  return RowAsF32(p, t, 0, C, slot);
}

// mean == nullptr: RMSNorm.
void NormForward(void* out, float* mean, float* rstd, const void* x, const void* weight, const void* bias, int64_t N,
                 int64_t C, float eps, DType act_type, DType param_type) {
  const float* w = ParamF32(weight, param_type, C, kShared0);
  const float* b = ParamF32(bias, param_type, C, kShared1);
  ParallelFor(0, N, RowGrain(C), [&](int64_t r0, int64_t r1) {
    const VecOps& v = Vec();
    for (int64_t i = r0; i < r1; ++i) {
      const float* xs = RowAsF32(x, act_type, i * C, C, kScratchA);
      float m = 0.0f, var;
      if (mean != nullptr) {
        m = v.sum(xs, C) / static_cast<float>(C);
        var = v.sum_sq_centered(xs, C, m) / static_cast<float>(C);
        mean[i] = m;
      } else {
        var = v.dot(xs, xs, C) / static_cast<float>(C);
      }
      float r = 1.0f / std::sqrt(var + eps);
      rstd[i] = r;
      float* o = OutRowF32(out, act_type, i * C, C, kScratchB);
      v.norm_apply(o, xs, C, m, r, w, b);
      StoreRowIfNeeded(o, out, act_type, i * C, C);
    }
  });
}

void NormBackward(void* dx, void* dweight, void* dbias, const void* dout, const void* x, const void* weight,
                  const float* mean, const float* rstd, int64_t N, int64_t C, DType act_type, DType param_type,
                  DType grad_type) {
  const float* w = ParamF32(weight, param_type, C, kShared0);
  int64_t block_rows = std::max<int64_t>(16, (N + 255) / 256);
  int64_t blocks = (N + block_rows - 1) / block_rows;
  bool want_dw = dweight != nullptr, want_db = dbias != nullptr;
  std::vector<float> dw_part(want_dw ? static_cast<size_t>(blocks * C) : 0, 0.0f);
  std::vector<float> db_part(want_db ? static_cast<size_t>(blocks * C) : 0, 0.0f);
  ParallelFor(0, blocks, std::max<int64_t>(1, RowGrain(C) / block_rows), [&](int64_t b0, int64_t b1) {
    const VecOps& v = Vec();
    for (int64_t blk = b0; blk < b1; ++blk) {
      float* dw = want_dw ? dw_part.data() + blk * C : nullptr;
      float* db = want_db ? db_part.data() + blk * C : nullptr;
      for (int64_t i = blk * block_rows; i < std::min(N, (blk + 1) * block_rows); ++i) {
        const float* xs = RowAsF32(x, act_type, i * C, C, kScratchA);
        const float* dy = RowAsF32(dout, act_type, i * C, C, kScratchB);
        float m = mean != nullptr ? mean[i] : 0.0f;
        float sg, sgx;
        v.norm_backward_stats(xs, dy, w, C, m, rstd[i], dw, db, &sg, &sgx);
        if (dx == nullptr) continue;
        float c1 = mean != nullptr ? sg / static_cast<float>(C) : 0.0f;
        float c2 = sgx / static_cast<float>(C);
        float* d = OutRowF32(dx, act_type, i * C, C, kScratchC);
        v.norm_backward_dx(d, xs, dy, w, C, m, rstd[i], c1, c2);
        StoreRowIfNeeded(d, dx, act_type, i * C, C);
      }
    }
  });
  // Reduce the partials column-wise, in block order, and add to the gradients once.
  ParallelFor(0, C, 256, [&](int64_t c0, int64_t c1) {
    int64_t len = c1 - c0;
    for (auto [part, grad] : {std::pair{&dw_part, dweight}, std::pair{&db_part, dbias}}) {
      if (grad == nullptr) continue;
      float* acc = Scratch(kScratchA, static_cast<size_t>(len));
      LoadRow(grad, grad_type, c0, acc, len);
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const float* p = part->data() + blk * C + c0;
        for (int64_t j = 0; j < len; ++j) acc[j] += p[j];
      }
      StoreRow(acc, grad, grad_type, c0, len);
    }
  });
}

void LayerNormForward(void* out, float* mean, float* rstd, const void* x, const void* weight, const void* bias,
                      int64_t N, int64_t C, float eps, DType act_type, DType param_type) {
  NormForward(out, mean, rstd, x, weight, bias, N, C, eps, act_type, param_type);
}

void LayerNormBackward(void* dx, void* dweight, void* dbias, const void* dout, const void* x, const void* weight,
                       const float* mean, const float* rstd, int64_t N, int64_t C, DType act_type,
                       DType param_type, DType grad_type) {
  NormBackward(dx, dweight, dbias, dout, x, weight, mean, rstd, N, C, act_type, param_type, grad_type);
}

void RMSNormForward(void* out, float* rstd, const void* x, const void* weight, int64_t N, int64_t C, float eps,
                    DType act_type, DType param_type) {
  NormForward(out, nullptr, rstd, x, weight, nullptr, N, C, eps, act_type, param_type);
}

void RMSNormBackward(void* dx, void* dweight, const void* dout, const void* x, const void* weight, const float* rstd,
                     int64_t N, int64_t C, DType act_type, DType param_type, DType grad_type) {
  NormBackward(dx, dweight, nullptr, dout, x, weight, nullptr, rstd, N, C, act_type, param_type, grad_type);
}

}  // namespace

void FillNorm(KernelTable& t) {
  t.layernorm_forward = &LayerNormForward;
  t.layernorm_backward = &LayerNormBackward;
  t.rmsnorm_forward = &RMSNormForward;
  t.rmsnorm_backward = &RMSNormBackward;
}

}  // namespace zerorun::kernels::cpu
