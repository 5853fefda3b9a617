// Linear: y = x W^T + b over the last dimension, W (out, in) as in PyTorch. Optionally ties its weight
// to another module's parameter of shape (out, in) (a GPT's LM head reuses the token embedding).
#pragma once

#include "zerorun/runtime/nn/module.h"

namespace zerorun::nn {

struct LinearOptions {
  bool bias = true;
  DType dtype = DType::kF32;  // parameters and activations
  // PyTorch's nn.Linear weight default, U(+-1/sqrt(in)).
  Init weight_init = Init::KaimingUniform(0.57735026f);
  Init bias_init = Init::Zeros();
  ParameterPtr tied_weight;   // non-null: use this (out, in) parameter as the weight
};

class Linear final : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, LinearOptions options = {});
  Parameter* weight() const { return weight_; }  // (out, in)
  Parameter* bias() const { return bias_; }      // (out) or nullptr
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

 protected:
  Tensor OnForward(const Tensor& x) override;    // x (..., in) -> (..., out)
  Tensor OnBackward(const Tensor& dy) override;  // dy (..., out) -> dx (..., in)
  void OnReleaseActivations() override { x_ = Tensor(); }

 private:
  int64_t in_, out_;
  DType dtype_;
  Parameter* weight_;
  Parameter* bias_ = nullptr;
  Tensor x_;  // (N, in) saved input
};

// Shape checks shared by the layers: `x` has dtype `dtype` and last dimension `last`.
void CheckInput(const Module& m, const Tensor& x, DType dtype, int64_t last);

}  // namespace zerorun::nn
