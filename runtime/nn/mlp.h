// MLP and the pre-LN transformer block.
//   MLP:   fc (C -> H) -> GELU -> proj (H -> C) -> dropout; with SwiGLU: fc (C -> 2H) -> SwiGLU -> proj.
//   Block: x + attn(ln_1(x)), then + mlp(ln_2(x)) (GPT-2's pre-LN arrangement).
#pragma once

#include "zerorun/runtime/nn/activation.h"
#include "zerorun/runtime/nn/attention.h"
#include "zerorun/runtime/nn/dropout.h"
#include "zerorun/runtime/nn/linear.h"
#include "zerorun/runtime/nn/norm.h"

namespace zerorun::nn {

enum class MlpActivation : uint8_t { kGeluTanh, kGeluExact, kSwiGlu };

struct MlpOptions {
  int64_t hidden = 0;  // 0: 4 * dim
  MlpActivation activation = MlpActivation::kGeluTanh;
  bool bias = true;
  float dropout = 0.0f;
  DType dtype = DType::kF32;
  Init weight_init = Init::Gpt2();
  Init proj_init = Init::Gpt2();
};

// x (..., C) -> (..., C). Children: fc, act, proj, drop.
class Mlp final : public Module {
 public:
  Mlp(int64_t dim, MlpOptions options = {});
  Linear* fc() const { return fc_; }
  Linear* proj() const { return proj_; }

 protected:
  Tensor OnForward(const Tensor& x) override;
  Tensor OnBackward(const Tensor& dy) override;

 private:
  Linear* fc_;
  Module* act_;
  Linear* proj_;
  Dropout* drop_;
};

struct BlockOptions {
  int64_t n_head = 1;
  bool rms_norm = false;  // RMSNorm instead of LayerNorm
  float norm_eps = 1e-5f;
  AttentionOptions attention;  // dtype/bias/dropout/init are taken from here for the whole block
  MlpOptions mlp;
};

// x (B, T, C) -> (B, T, C). Children: ln_1, attn, ln_2, mlp.
class TransformerBlock final : public Module {
 public:
  TransformerBlock(int64_t dim, BlockOptions options);
  CausalSelfAttention* attn() const { return attn_; }
  Mlp* mlp() const { return mlp_; }

 protected:
  Tensor OnForward(const Tensor& x) override;
  Tensor OnBackward(const Tensor& dy) override;

 private:
  DType dtype_;
  Module* ln_1_;
  CausalSelfAttention* attn_;
  Module* ln_2_;
  Mlp* mlp_;
};

// out = a + b (same shape and dtype), a new activation.
Tensor AddTensors(const Tensor& a, const Tensor& b);

}  // namespace zerorun::nn
