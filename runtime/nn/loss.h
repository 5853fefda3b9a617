// Losses and the model shape the engine trains.
//
// CrossEntropyLoss: fused softmax + negative log-likelihood over logits (N, V), computed in fp32
// (max-subtracted), mean over rows whose target != ignore_index.
//
// LossModule: a Module whose forward maps (inputs, targets) to a scalar loss and whose backward starts
// from a gradient scale: the engine calls BackwardLoss(loss_scale / gradient_accumulation_steps), so
// parameter gradients come out as d(scale * loss)/dparam and add to what is already there.
#pragma once

#include "zerorun/runtime/nn/module.h"

namespace zerorun::nn {

class CrossEntropyLoss final : public Module {
 public:
  explicit CrossEntropyLoss(int32_t ignore_index = -100) : Module("CrossEntropyLoss"), ignore_index_(ignore_index) {}

  // logits (N, V) or (B, T, V) of any floating dtype; targets int32 with N (= B*T) entries in [0, V) or
  // ignore_index (else InvalidArgument). Returns the mean loss (0 if every target is ignored).
  float Forward(const Tensor& logits, const Tensor& targets);
  // Gradient of grad_scale * loss with respect to the logits, written IN PLACE over the logits tensor
  // passed to Forward (which is returned): at LM vocabulary sizes a second (N, V) buffer is the largest
  // activation of the step.
  Tensor Backward(float grad_scale);
  // Rows counted by the last Forward.
  int64_t count() const { return count_; }

 protected:
  void OnReleaseActivations() override { logits_ = targets_ = Tensor(); }

 private:
  int32_t ignore_index_;
  int64_t count_ = 0;
  Tensor logits_, targets_;
};

class LossModule : public Module {
 public:
  using Module::Module;
  // Runs the observer windows around OnForwardLoss / OnBackwardLoss.
  float ForwardLoss(const Tensor& inputs, const Tensor& targets);
  void BackwardLoss(float grad_scale);

 protected:
  virtual float OnForwardLoss(const Tensor& inputs, const Tensor& targets) = 0;
  virtual void OnBackwardLoss(float grad_scale) = 0;
};

}  // namespace zerorun::nn
