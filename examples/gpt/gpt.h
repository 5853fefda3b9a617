// A GPT-2 style language model written only against zerorun's public module API, the way a user
// writes theirs: token + learned position embeddings, n_layer pre-LN transformer blocks, a final
// LayerNorm and an LM head tied to the token embedding, trained with softmax cross-entropy.
//
// Parameter names follow the tree: wte.weight, wpe.weight, h.<i>.ln_1.weight, h.<i>.attn.qkv.weight,
// h.<i>.attn.proj.weight, h.<i>.mlp.fc.weight, h.<i>.mlp.proj.weight, ln_f.weight, (lm_head.weight when
// untied). Header-only so tests, tools and benchmarks can use it without another library.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "zerorun/core/format.h"
#include "zerorun/runtime/nn/dropout.h"
#include "zerorun/runtime/nn/embedding.h"
#include "zerorun/runtime/nn/linear.h"
#include "zerorun/runtime/nn/loss.h"
#include "zerorun/runtime/nn/mlp.h"
#include "zerorun/runtime/nn/norm.h"
#include "zerorun/runtime/nn/sequential.h"

namespace zerorun::gpt {

struct GptConfig {
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t d_model = 256;
  int64_t vocab_size = 256;
  int64_t seq_len = 128;          // maximum T (positions)
  float dropout = 0.0f;           // embedding, attention-output and MLP-output dropout
  bool tied_embeddings = true;    // LM head shares wte.weight
  bool bias = true;               // biases in Linear layers
  DType dtype = DType::kF32;      // parameters and activations (fp32 accumulation everywhere)
  int32_t ignore_index = -100;    // targets equal to this do not count
  nn::MlpActivation activation = nn::MlpActivation::kGeluTanh;
  // The attention kernel op (kernels::AttentionForward/Backward), the layer's default core; false: the
  // composed per-head GEMM path on the CPU (its cross-check). Device tensors always take the op (the
  // composed path loops over host memory).
  bool fused_attention = true;

  std::string ToString() const {
    return Format("GPT(n_layer={}, n_head={}, d_model={}, vocab={}, seq_len={}, dropout={}, tied={}, {})", n_layer,
                  n_head, d_model, vocab_size, seq_len, dropout, tied_embeddings, DTypeName(dtype));
  }
};

class Gpt final : public nn::LossModule {
 public:
  explicit Gpt(const GptConfig& config) : LossModule("GPT"), config_(config) {
    const GptConfig& c = config_;
    if (c.n_layer <= 0 || c.vocab_size <= 0 || c.seq_len <= 0) {
      ZR_THROW(InvalidArgument, "GPT: n_layer, vocab_size and seq_len must be positive ({})", c.ToString());
    }
    nn::EmbeddingOptions eo;
    eo.dtype = c.dtype;
    eo.init = nn::Init::Gpt2();
    wte_ = AddModule("wte", std::make_unique<nn::Embedding>(c.vocab_size, c.d_model, eo));
    eo.init = nn::Init::Normal(0.0f, 0.01f);
    wpe_ = AddModule("wpe", std::make_unique<nn::PositionalEmbedding>(c.seq_len, c.d_model, eo));
    drop_ = AddModule("drop", std::make_unique<nn::Dropout>(c.dropout));
    h_ = AddModule("h", std::make_unique<nn::Sequential>());
    nn::BlockOptions bo;
    bo.n_head = c.n_head;
    bo.attention.bias = c.bias;
    bo.attention.dropout = c.dropout;
    bo.attention.dtype = c.dtype;
    bo.attention.fused_kernel = c.fused_attention;
    bo.attention.weight_init = nn::Init::Gpt2();
    bo.attention.proj_init = nn::Init::Gpt2Residual(static_cast<int>(c.n_layer));
    bo.mlp.activation = c.activation;
    bo.mlp.bias = c.bias;
    bo.mlp.dropout = c.dropout;
    bo.mlp.weight_init = nn::Init::Gpt2();
    bo.mlp.proj_init = nn::Init::Gpt2Residual(static_cast<int>(c.n_layer));
    for (int64_t i = 0; i < c.n_layer; ++i) h_->Append(std::make_unique<nn::TransformerBlock>(c.d_model, bo));
    nn::NormOptions no;
    no.dtype = c.dtype;
    ln_f_ = AddModule("ln_f", std::make_unique<nn::LayerNorm>(c.d_model, no));
    nn::LinearOptions lo;
    lo.bias = false;
    lo.dtype = c.dtype;
    lo.weight_init = nn::Init::Gpt2();
    if (c.tied_embeddings) lo.tied_weight = wte_->SharedParameter(wte_->weight());
    lm_head_ = AddModule("lm_head", std::make_unique<nn::Linear>(c.d_model, c.vocab_size, lo));
    loss_ = AddModule("loss", std::make_unique<nn::CrossEntropyLoss>(c.ignore_index));
  }

  const GptConfig& config() const { return config_; }
  nn::Embedding* wte() const { return wte_; }
  nn::Sequential* blocks() const { return h_; }
  nn::Linear* lm_head() const { return lm_head_; }

  // Logits (B, T, V) for tokens (B, T) int32, T <= seq_len. Use in eval mode for inference.
  Tensor Logits(const Tensor& tokens) {
    ForwardScope scope(*this);
    return Trunk(tokens);
  }

 protected:
  // tokens, targets: (B, T) int32. Returns the mean cross-entropy over non-ignored targets.
  float OnForwardLoss(const Tensor& tokens, const Tensor& targets) override {
    if (targets.numel() != tokens.numel()) {
      ZR_THROW(InvalidArgument, "GPT: targets {} do not match tokens {}", ShapeToString(targets.shape()),
               ShapeToString(tokens.shape()));
    }
    Tensor logits = Trunk(tokens);  // (B, T, V)
    return loss_->Forward(logits, targets);
  }

  void OnBackwardLoss(float grad_scale) override {
    Tensor d = loss_->Backward(grad_scale);  // (B, T, V)
    d = lm_head_->Backward(d);
    d = ln_f_->Backward(d);
    d = h_->Backward(d);
    d = drop_->Backward(d);
    d = wpe_->Backward(d);
    wte_->Backward(d);
  }

 private:
  Tensor Trunk(const Tensor& tokens) {
    Tensor x = wte_->Forward(tokens);  // (B, T, C)
    x = wpe_->Forward(x);
    x = drop_->Forward(x);
    x = h_->Forward(x);
    x = ln_f_->Forward(x);
    return lm_head_->Forward(x);       // (B, T, V)
  }

  GptConfig config_;
  nn::Embedding* wte_;
  nn::PositionalEmbedding* wpe_;
  nn::Dropout* drop_;
  nn::Sequential* h_;
  nn::LayerNorm* ln_f_;
  nn::Linear* lm_head_;
  nn::CrossEntropyLoss* loss_;
};

}  // namespace zerorun::gpt
