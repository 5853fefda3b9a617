// CPU row softmax and fused softmax cross-entropy: rows in parallel, fp32 bodies from VecOps. The
// mean loss sums the per-row losses in row order in double, independent of the thread count.
#include <cmath>
#include <vector>

#include "zerorun/kernels/cpu/blocks.h"
#include "zerorun/kernels/cpu/cpu.h"
#include "zerorun/kernels/cpu/vec.h"

namespace zerorun::kernels::cpu {
namespace {

int64_t RowGrain(int64_t C) { return std::max<int64_t>(1, kElemGrain / std::max<int64_t>(1, C)); }

void SoftmaxForward(void* out, const void* x, int64_t N, int64_t C, DType type) {
  ParallelFor(0, N, RowGrain(C), [&](int64_t r0, int64_t r1) {
    const VecOps& v = Vec();
    for (int64_t i = r0; i < r1; ++i) {
      const float* xs = RowAsF32(x, type, i * C, C, kScratchA);
      float* o = OutRowF32(out, type, i * C, C, kScratchB);
      float sum = v.exp_shift_sum(o, xs, C, v.max(xs, C));
      v.scale(o, o, 1.0f / sum, C);
      StoreRowIfNeeded(o, out, type, i * C, C);
    }
  });
}

void SoftmaxBackward(void* dx, const void* dout, const void* y, int64_t N, int64_t C, DType type) {
  ParallelFor(0, N, RowGrain(C), [&](int64_t r0, int64_t r1) {
    const VecOps& v = Vec();
    for (int64_t i = r0; i < r1; ++i) {
      const float* dy = RowAsF32(dout, type, i * C, C, kScratchA);
      const float* ys = RowAsF32(y, type, i * C, C, kScratchB);
      float dot = v.dot(dy, ys, C);
      float* d = OutRowF32(dx, type, i * C, C, kScratchC);
      v.softmax_backward(d, dy, ys, dot, C);
      StoreRowIfNeeded(d, dx, type, i * C, C);
    }
  });
}

// Row i: m = max, s = sum exp(x - m), lse = m + log s, loss = lse - x[target];
// dlogits = exp(x - m) * (g / s) - g * onehot(target), g = grad_scale / count.
CrossEntropyResult CrossEntropy(void* dlogits, float* losses, const void* logits, const int32_t* targets, int64_t N,
                                int64_t V, DType type, int32_t ignore_index, float grad_scale) {
  int64_t count = 0;
  for (int64_t i = 0; i < N; ++i) count += targets[i] != ignore_index;
  float g = count > 0 ? static_cast<float>(static_cast<double>(grad_scale) / static_cast<double>(count)) : 0.0f;
  std::vector<float> row_loss(static_cast<size_t>(N));
  ParallelFor(0, N, RowGrain(V), [&](int64_t r0, int64_t r1) {
    const VecOps& v = Vec();
    for (int64_t i = r0; i < r1; ++i) {
      bool ignored = targets[i] == ignore_index;
      if (ignored) {
        row_loss[i] = 0.0f;
        if (dlogits != nullptr) {
          float* d = OutRowF32(dlogits, type, i * V, V, kScratchC);
          std::fill(d, d + V, 0.0f);
          StoreRowIfNeeded(d, dlogits, type, i * V, V);
        }
        continue;
      }
      const float* xs = RowAsF32(logits, type, i * V, V, kScratchA);
      float* e = Scratch(kScratchB, static_cast<size_t>(V));
      float m = v.max(xs, V);
      float s = v.exp_shift_sum(e, xs, V, m);
      float loss = std::log(s) + (m - xs[targets[i]]);  // read before dlogits (which may alias logits)
      row_loss[i] = loss;
      if (dlogits != nullptr) {
        float* d = OutRowF32(dlogits, type, i * V, V, kScratchC);
        v.scale(d, e, g / s, V);
        d[targets[i]] -= g;
        StoreRowIfNeeded(d, dlogits, type, i * V, V);
      }
    }
  });
  double total = 0.0;
  for (int64_t i = 0; i < N; ++i) {
    total += row_loss[i];
    if (losses != nullptr) losses[i] = row_loss[i];
  }
  CrossEntropyResult r;
  r.count = count;
  r.loss = count > 0 ? static_cast<float>(total / static_cast<double>(count)) : 0.0f;
  return r;
}

}  // namespace

void FillSoftmax(KernelTable& t) {
  t.softmax_forward = &SoftmaxForward;
  t.softmax_backward = &SoftmaxBackward;
  t.cross_entropy = &CrossEntropy;
}

}  // namespace zerorun::kernels::cpu
