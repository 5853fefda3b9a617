// Drivers of the fused CPU optimizer updates: split a span into blocks of kOptimBlock elements,
// spread the blocks over the thread pool, convert 16-bit gradients block by block into an L1-resident
// buffer, run the ISA's loop, and write the 16-bit parameter copy of the block while it is still in
// cache. Also the portable (no -m flags) instantiation of the loops.
#define ZR_OPTIM_DEFINE_LOOPS
#include "zerorun/kernels/cpu/optim.h"

#include <algorithm>
#include <vector>

#include "zerorun/core/cpu_features.h"
#include "zerorun/core/error.h"
#include "zerorun/kernels/cpu/optim_impl.h"

namespace zerorun::kernels::cpu {
namespace detail {
const OptimBlockFns& OptimBlockFnsPortable() { return kOptimBlockFns; }
}  // namespace detail

namespace {

using detail::kOptimBlock;

// Blocks per ParallelFor chunk: 64K elements, large enough to amortise the hand-off.
constexpr int64_t kBlocksPerChunk = 256;

const detail::OptimBlockFns& Fns() {
  switch (ActiveIsa()) {
    case Isa::kAvx512: return detail::OptimBlockFnsAvx512();
    case Isa::kAvx2: return detail::OptimBlockFnsAvx2();
    default: return detail::OptimBlockFnsPortable();
  }
}

void CheckSpan(const OptimSpan& s) {
  ZR_CHECK(s.n >= 0, "optimizer span of negative size {}", s.n);
  ZR_CHECK(s.n == 0 || s.params != nullptr, "optimizer span without params");
  ZR_CHECK(s.grad_dtype == DType::kF32 || s.grad_dtype == DType::kF16 || s.grad_dtype == DType::kBF16,
           "optimizer gradients must be fp32, fp16 or bf16, got {}", DTypeName(s.grad_dtype));
  ZR_CHECK(s.param_copy == nullptr || s.copy_dtype == DType::kF32 || s.copy_dtype == DType::kF16 ||
               s.copy_dtype == DType::kBF16,
           "optimizer param copy must be fp32, fp16 or bf16, got {}", DTypeName(s.copy_dtype));
}

// Runs body(begin, count, grads_f32) for every block of the span, in parallel over blocks, then
// writes the block's param copy. `needs_grads` false skips the gradient conversion.
template <typename Body>
void ForEachBlock(const OptimSpan& s, ThreadPool* pool, bool needs_grads, const Body& body) {
  CheckSpan(s);
  if (s.n == 0) return;
  ZR_CHECK(!needs_grads || s.grads != nullptr, "optimizer span without gradients");
  const int64_t num_blocks = (s.n + kOptimBlock - 1) / kOptimBlock;
  ThreadPool& tp = pool ? *pool : ThreadPool::Default();
  tp.ParallelFor(0, num_blocks, kBlocksPerChunk, [&](int64_t b0, int64_t b1) {
    alignas(64) float gbuf[kOptimBlock];
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t begin = b * kOptimBlock;
      const int64_t count = std::min(kOptimBlock, s.n - begin);
      const float* g = nullptr;
      if (needs_grads) {
        if (s.grad_dtype == DType::kF32) {
          g = static_cast<const float*>(s.grads) + begin;
        } else {
          Convert(static_cast<const uint16_t*>(s.grads) + begin, s.grad_dtype, gbuf, DType::kF32,
                  static_cast<size_t>(count));
          g = gbuf;
        }
      }
      body(begin, count, g);
      if (s.param_copy != nullptr) {
        Convert(s.params + begin, DType::kF32, static_cast<char*>(s.param_copy) + begin * DTypeSize(s.copy_dtype),
                s.copy_dtype, static_cast<size_t>(count));
      }
    }
  });
}

}  // namespace

void AdamStep(const AdamHyper& h, const OptimSpan& s, float* m, float* v, ThreadPool* pool) {
  const AdamConstants c = MakeAdamConstants(h);
  const auto& fns = Fns();
  ForEachBlock(s, pool, true, [&](int64_t i, int64_t n, const float* g) {
    fns.adam(h, c, s.grad_scale, s.params + i, g, m + i, v + i, n);
  });
}

void LionStep(const LionHyper& h, const OptimSpan& s, float* m, ThreadPool* pool) {
  const auto& fns = Fns();
  ForEachBlock(s, pool, true, [&](int64_t i, int64_t n, const float* g) {
    fns.lion(h, s.grad_scale, s.params + i, g, m + i, n);
  });
}

void SgdStep(const SgdHyper& h, const OptimSpan& s, float* buf, ThreadPool* pool) {
  ZR_CHECK(h.momentum == 0.0f || buf != nullptr || s.n == 0, "SGD with momentum needs a momentum buffer");
  const auto& fns = Fns();
  ForEachBlock(s, pool, true, [&](int64_t i, int64_t n, const float* g) {
    fns.sgd(h, s.grad_scale, s.params + i, g, buf ? buf + i : nullptr, n);
  });
}

void AdagradStep(const AdagradHyper& h, const OptimSpan& s, float* sum, ThreadPool* pool) {
  const float clr = h.lr / (1.0f + static_cast<float>(h.step - 1) * h.lr_decay);
  const auto& fns = Fns();
  ForEachBlock(s, pool, true, [&](int64_t i, int64_t n, const float* g) {
    fns.adagrad(h, clr, s.grad_scale, s.params + i, g, sum + i, n);
  });
}

LambNorms LambMoments(const LambHyper& h, const OptimSpan& s, float* m, float* v, ThreadPool* pool) {
  const auto& fns = Fns();
  const int64_t num_blocks = (s.n + kOptimBlock - 1) / kOptimBlock;
  // Per-block partial sums, added up in block order afterwards: the result does not depend on how
  // the pool split the work.
  std::vector<LambNorms> partial(static_cast<size_t>(num_blocks));
  OptimSpan no_copy = s;
  no_copy.param_copy = nullptr;
  ForEachBlock(no_copy, pool, true, [&](int64_t i, int64_t n, const float* g) {
    alignas(64) float u[kOptimBlock];
    fns.lamb_moments(h, s.grad_scale, s.params + i, g, m + i, v + i, u, n);
    LambNorms& out = partial[static_cast<size_t>(i / kOptimBlock)];
    for (int64_t k = 0; k < n; ++k) {
      const double p = s.params[i + k];
      out.param_sq += p * p;
      out.update_sq += static_cast<double>(u[k]) * u[k];
    }
  });
  LambNorms total;
  for (const LambNorms& p : partial) {
    total.param_sq += p.param_sq;
    total.update_sq += p.update_sq;
  }
  return total;
}

void LambApply(const LambHyper& h, const OptimSpan& s, const float* m, const float* v, float trust_ratio,
               ThreadPool* pool) {
  const float step = LambStepSize(h) * trust_ratio;
  const auto& fns = Fns();
  ForEachBlock(s, pool, false, [&](int64_t i, int64_t n, const float*) {
    fns.lamb_apply(h, step, s.params + i, m + i, v + i, n);
  });
}

float LambStep(const LambHyper& h, const OptimSpan& s, float* m, float* v, ThreadPool* pool) {
  float trust = LambTrustRatio(h, LambMoments(h, s, m, v, pool));
  LambApply(h, s, m, v, trust, pool);
  return trust;
}

}  // namespace zerorun::kernels::cpu
