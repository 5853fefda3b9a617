// Fused CPU optimizer updates: one pass over memory per step that reads the gradient (any of
// fp32/fp16/bf16, times grad_scale), updates fp32 state and weights, and writes the 16-bit copy.
// SIMD through runtime dispatch (AVX-512, AVX2+FMA/F16C, or portable code) and split across a
// thread pool. The arithmetic follows kernels/ref/optim.h operation for operation; the portable path
// equals the reference bit for bit, the AVX2/AVX-512 paths differ only where the compiler fused a
// multiply-add (last-bit differences). Results never depend on the thread count: every element is
// computed alone, and the Lamb norm sums are added up in a fixed block order.
#pragma once

#include "zerorun/core/thread_pool.h"
#include "zerorun/kernels/ref/optim.h"

namespace zerorun::kernels::cpu {

// `pool` == nullptr uses ThreadPool::Default(). Spans may be of any size, including 0.
void AdamStep(const AdamHyper& h, const OptimSpan& s, float* exp_avg, float* exp_avg_sq,
              ThreadPool* pool = nullptr);
void LionStep(const LionHyper& h, const OptimSpan& s, float* exp_avg, ThreadPool* pool = nullptr);
void SgdStep(const SgdHyper& h, const OptimSpan& s, float* momentum_buffer, ThreadPool* pool = nullptr);
void AdagradStep(const AdagradHyper& h, const OptimSpan& s, float* sum, ThreadPool* pool = nullptr);
LambNorms LambMoments(const LambHyper& h, const OptimSpan& s, float* exp_avg, float* exp_avg_sq,
                      ThreadPool* pool = nullptr);
void LambApply(const LambHyper& h, const OptimSpan& s, const float* exp_avg, const float* exp_avg_sq,
               float trust_ratio, ThreadPool* pool = nullptr);
float LambStep(const LambHyper& h, const OptimSpan& s, float* exp_avg, float* exp_avg_sq,
               ThreadPool* pool = nullptr);

}  // namespace zerorun::kernels::cpu
