// Fused, multi-tensor optimizer updates on a CUDA device (CUDA builds only): the rules of
// kernels/ref/optim.h over many tensors per launch, one block per 64 Ki-element chunk (plan.h:
// PlanMultiTensor), each element read and written once. Every pointer is device memory; the work is
// enqueued on the calling thread's kernel stream (KernelDeviceScope, kernels/ops.h) and the call
// returns before it completes, except LambMoments, which returns norms to the host.
//
// Numerics: every multiply, add, divide and square root is an explicitly rounded fp32 operation
// (__fmul_rn, __fadd_rn, __fdiv_rn, __fsqrt_rn: never contracted into FMAs), in the reference's order,
// with the reference's per-step constants (MakeAdamConstants, LambStepSize): the updated weights,
// states and 16-bit copies are meant to equal kernels::ref bit for bit (checked by the gpu tests).
#pragma once

#include <cstdint>

#include "zerorun/kernels/ref/optim.h"

namespace zerorun::kernels::cuda {

// One tensor's update: its span (params, grads, optional 16-bit copy) and state buffers, all (n).
struct OptimTensor {
  OptimSpan span;
  float* state0 = nullptr;  // exp_avg (Adam, Lion, Lamb), momentum buffer (SGD; may be null when
                            // momentum == 0), sum (Adagrad)
  float* state1 = nullptr;  // exp_avg_sq (Adam, Lamb)
};

void AdamStep(const AdamHyper& h, const OptimTensor* tensors, int64_t count);
void LionStep(const LionHyper& h, const OptimTensor* tensors, int64_t count);
void SgdStep(const SgdHyper& h, const OptimTensor* tensors, int64_t count);
void AdagradStep(const AdagradHyper& h, const OptimTensor* tensors, int64_t count);
// Lamb's two passes (see ref/optim.h): moments, returning each tensor's partial sums in norms[count]
// (host memory; the stream is synchronised), then the update with one trust ratio per tensor
// (host memory, count values).
void LambMoments(const LambHyper& h, const OptimTensor* tensors, int64_t count, LambNorms* norms);
void LambApply(const LambHyper& h, const OptimTensor* tensors, int64_t count, const float* trust_ratios);

}  // namespace zerorun::kernels::cuda
