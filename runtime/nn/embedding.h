// Token embedding (ids -> vectors) and learned positional embedding (adds a row per position).
#pragma once

#include "zerorun/runtime/nn/module.h"

namespace zerorun::nn {

struct EmbeddingOptions {
  DType dtype = DType::kF32;
  Init init = Init::Normal(0.0f, 1.0f);  // PyTorch's nn.Embedding default
};

// Forward: tokens (B, T) int32 in [0, V) -> (B, T, C). Backward returns an undefined tensor (ids have
// no gradient) and adds into the weight's gradient.
class Embedding final : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t dim, EmbeddingOptions options = {});
  Parameter* weight() const { return weight_; }  // (V, C)

 protected:
  Tensor OnForward(const Tensor& tokens) override;
  Tensor OnBackward(const Tensor& dy) override;
  void OnReleaseActivations() override { tokens_ = Tensor(); }

 private:
  int64_t V_, C_;
  DType dtype_;
  Parameter* weight_;
  Tensor tokens_;  // (B, T) int32
};

// Forward: x (B, T, C) -> x + weight[t] for t < T <= max_positions. Backward: dx = dy.
class PositionalEmbedding final : public Module {
 public:
  PositionalEmbedding(int64_t max_positions, int64_t dim, EmbeddingOptions options = {});
  Parameter* weight() const { return weight_; }  // (maxT, C)

 protected:
  Tensor OnForward(const Tensor& x) override;
  Tensor OnBackward(const Tensor& dy) override;

 private:
  int64_t maxT_, C_;
  DType dtype_;
  Parameter* weight_;
};

}  // namespace zerorun::nn
