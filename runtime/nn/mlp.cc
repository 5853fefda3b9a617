// MLP and pre-LN transformer block: composition of children plus residual adds.
#include "zerorun/runtime/nn/mlp.h"

#include "zerorun/kernels/ops.h"

namespace zerorun::nn {

Tensor AddTensors(const Tensor& a, const Tensor& b) {
  ZR_CHECK(a.numel() == b.numel() && a.dtype() == b.dtype() && a.device() == b.device(), "AddTensors: {} vs {}", a.ToString(), b.ToString());
  Tensor out = Tensor::Empty(a.shape(), a.dtype(), a.device(), MemCategory::kActivations);
  kernels::Add(out.data(), a.data(), b.data(), a.numel(), a.dtype());
  return out;
}

Mlp::Mlp(int64_t dim, MlpOptions options) : Module("Mlp") {
  const int64_t H = options.hidden > 0 ? options.hidden : 4 * dim;
  const bool glu = options.activation == MlpActivation::kSwiGlu;
  LinearOptions lo;
  lo.bias = options.bias;
  lo.dtype = options.dtype;
  lo.weight_init = options.weight_init;
  fc_ = AddModule("fc", std::make_unique<Linear>(dim, glu ? 2 * H : H, lo));
  if (glu) {
    act_ = AddModule("act", std::make_unique<SwiGlu>());
  } else {
    act_ = AddModule("act", std::make_unique<Gelu>(options.activation == MlpActivation::kGeluTanh ? GeluKind::kTanh
                                                                                                  : GeluKind::kExact));
  }
  lo.weight_init = options.proj_init;
  proj_ = AddModule("proj", std::make_unique<Linear>(H, dim, lo));
  drop_ = AddModule("drop", std::make_unique<Dropout>(options.dropout));
}

Tensor Mlp::OnForward(const Tensor& x) { return drop_->Forward(proj_->Forward(act_->Forward(fc_->Forward(x)))); }

Tensor Mlp::OnBackward(const Tensor& dy) {
  return fc_->Backward(act_->Backward(proj_->Backward(drop_->Backward(dy))));
}

TransformerBlock::TransformerBlock(int64_t dim, BlockOptions options)
    : Module("TransformerBlock"), dtype_(options.attention.dtype) {
  NormOptions no;
  no.eps = options.norm_eps;
  no.dtype = dtype_;
  auto norm = [&]() -> std::unique_ptr<Module> {
    if (options.rms_norm) return std::make_unique<RMSNorm>(dim, no);
    return std::make_unique<LayerNorm>(dim, no);
  };
  ln_1_ = AddModule("ln_1", norm());
  attn_ = AddModule("attn", std::make_unique<CausalSelfAttention>(dim, options.n_head, options.attention));
  ln_2_ = AddModule("ln_2", norm());
  options.mlp.dtype = dtype_;
  mlp_ = AddModule("mlp", std::make_unique<Mlp>(dim, options.mlp));
}

Tensor TransformerBlock::OnForward(const Tensor& x) {
  Tensor h = AddTensors(x, attn_->Forward(ln_1_->Forward(x)));
  return AddTensors(h, mlp_->Forward(ln_2_->Forward(h)));
}

Tensor TransformerBlock::OnBackward(const Tensor& dy) {
  // out = h + mlp(ln_2(h)): dh = dy + ln_2'(mlp'(dy)); h = x + attn(ln_1(x)): dx = dh + ln_1'(attn'(dh)).
  // The residual gradient is added in place into the branch's input gradient (a fresh tensor).
  Tensor dh = ln_2_->Backward(mlp_->Backward(dy));
  kernels::Add(dh.data(), dh.data(), dy.data(), dh.numel(), dh.dtype());
  Tensor dx = ln_1_->Backward(attn_->Backward(dh));
  kernels::Add(dx.data(), dx.data(), dh.data(), dx.numel(), dx.dtype());
  return dx;
}

}  // namespace zerorun::nn
