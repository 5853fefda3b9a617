// LayerNorm and RMSNorm over the last dimension, statistics in fp32 (saved for backward).
#pragma once

#include "zerorun/runtime/nn/module.h"

namespace zerorun::nn {

struct NormOptions {
  float eps = 1e-5f;
  bool affine = true;  // learnable weight (ones) and, for LayerNorm, bias (zeros); no weight decay
  bool bias = true;    // LayerNorm only
  DType dtype = DType::kF32;
};

// y = (x - mean) / sqrt(var + eps) * weight + bias, per row of x (..., C).
class LayerNorm final : public Module {
 public:
  LayerNorm(int64_t dim, NormOptions options = {});
  Parameter* weight() const { return weight_; }
  Parameter* bias() const { return bias_; }

 protected:
  Tensor OnForward(const Tensor& x) override;
  Tensor OnBackward(const Tensor& dy) override;
  void OnReleaseActivations() override { x_ = mean_ = rstd_ = Tensor(); }

 private:
  int64_t C_;
  NormOptions opt_;
  Parameter* weight_ = nullptr;
  Parameter* bias_ = nullptr;
  Tensor x_, mean_, rstd_;  // (N, C), (N) fp32, (N) fp32
};

// y = x / sqrt(mean(x^2) + eps) * weight, per row of x (..., C).
class RMSNorm final : public Module {
 public:
  RMSNorm(int64_t dim, NormOptions options = {});
  Parameter* weight() const { return weight_; }

 protected:
  Tensor OnForward(const Tensor& x) override;
  Tensor OnBackward(const Tensor& dy) override;
  void OnReleaseActivations() override { x_ = rstd_ = Tensor(); }

 private:
  int64_t C_;
  NormOptions opt_;
  Parameter* weight_ = nullptr;
  Tensor x_, rstd_;
};

}  // namespace zerorun::nn
