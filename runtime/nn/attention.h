// Causal multi-head self-attention: qkv = x W_qkv^T + b (one fused projection), per-head softmax of
// q.k/sqrt(HS) with the causal mask (in fp32), y = att . v, out = y W_proj^T + b, then residual dropout.
// Attention-probability dropout is not implemented (nanoGPT's attn_dropout); see docs/nn.md.
#pragma once

#include "zerorun/runtime/nn/dropout.h"
#include "zerorun/runtime/nn/linear.h"
#include "zerorun/runtime/nn/module.h"

namespace zerorun::nn {

struct AttentionOptions {
  bool bias = true;
  float dropout = 0.0f;   // on the output projection
  DType dtype = DType::kF32;
  Init weight_init = Init::Gpt2();
  Init proj_init = Init::Gpt2();  // GPT-2 uses Init::Gpt2Residual(n_layer) here
  // true: the fused kernels::AttentionForward/Backward op (causal blocks skipped, SIMD softmax, bf16
  // products native where oneDNN has them); false: the GEMM kernel + causal softmax composed in the
  // layer (the fused op's cross-check in the tests). Measured on the benchmark GPT (Zen 5, 1 thread,
  // CPU time): fused = composed in fp32, 1.27-1.35x the step rate in bf16.
  bool fused_kernel = true;
};

// x (B, T, C) -> (B, T, C). Children: qkv (Linear C -> 3C), proj (Linear C -> C), drop (Dropout).
class CausalSelfAttention final : public Module {
 public:
  CausalSelfAttention(int64_t dim, int64_t n_head, AttentionOptions options = {});
  Linear* qkv() const { return qkv_; }
  Linear* proj() const { return proj_; }

 protected:
  Tensor OnForward(const Tensor& x) override;
  Tensor OnBackward(const Tensor& dy) override;
  void OnReleaseActivations() override { qkv_out_ = att_ = Tensor(); }

 private:
  int64_t C_, NH_;
  DType dtype_;
  bool fused_;
  Linear* qkv_;
  Linear* proj_;
  Dropout* drop_;
  Tensor qkv_out_;  // (B, T, 3C)
  Tensor att_;      // (B, NH, T, T) fp32 softmax probabilities
};

}  // namespace zerorun::nn
