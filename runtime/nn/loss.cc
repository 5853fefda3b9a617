// Cross-entropy through the fused kernel (loss in forward, gradient recomputed in place in backward).
#include "zerorun/runtime/nn/loss.h"

#include "zerorun/kernels/ops.h"

namespace zerorun::nn {

float CrossEntropyLoss::Forward(const Tensor& logits, const Tensor& targets) {
  ForwardScope scope(*this);
  if (!logits.defined() || logits.ndim() < 2 || !IsFloating(logits.dtype()) || logits.dtype() == DType::kF64) {
    ZR_THROW(InvalidArgument, "{}: logits must be fp32/fp16/bf16 (N, V), got {}", Describe(),
             logits.defined() ? logits.ToString() : std::string("an undefined tensor"));
  }
  const int64_t V = logits.size(-1), N = logits.numel() / V;
  if (!targets.defined() || targets.dtype() != DType::kI32 || targets.numel() != N) {
    ZR_THROW(InvalidArgument, "{}: targets must be int32 with {} entries, got {}", Describe(), N,
             targets.defined() ? targets.ToString() + " " + ShapeToString(targets.shape()) : std::string("undefined"));
  }
  auto r = kernels::CrossEntropy(nullptr, nullptr, logits.data(), targets.data_as<int32_t>(), N, V, logits.dtype(),
                                 ignore_index_, 1.0f);
  count_ = r.count;
  if (training()) logits_ = logits, targets_ = targets;
  return r.loss;
}

Tensor CrossEntropyLoss::Backward(float grad_scale) {
  BackwardScope scope(*this);
  ZR_CHECK(logits_.defined(), "{}: backward without saved logits", Describe());
  const int64_t V = logits_.size(-1), N = logits_.numel() / V;
  kernels::CrossEntropy(logits_.data(), nullptr, logits_.data(), targets_.data_as<int32_t>(), N, V, logits_.dtype(),
                        ignore_index_, grad_scale);
  Tensor d = logits_;
  OnReleaseActivations();
  return d;
}

float LossModule::ForwardLoss(const Tensor& inputs, const Tensor& targets) {
  ForwardScope scope(*this);
  return OnForwardLoss(inputs, targets);
}

void LossModule::BackwardLoss(float grad_scale) {
  BackwardScope scope(*this);
  OnBackwardLoss(grad_scale);
}

}  // namespace zerorun::nn
