// Causal self-attention: two Linear children around the attention kernel.
#include "zerorun/runtime/nn/attention.h"

#include "zerorun/kernels/ops.h"

namespace zerorun::nn {

CausalSelfAttention::CausalSelfAttention(int64_t dim, int64_t n_head, AttentionOptions options)
    : Module("CausalSelfAttention"), C_(dim), NH_(n_head), dtype_(options.dtype) {
  if (C_ <= 0 || NH_ <= 0 || C_ % NH_ != 0) {
    ZR_THROW(InvalidArgument, "CausalSelfAttention: dim {} must be a positive multiple of n_head {}", C_, NH_);
  }
  LinearOptions lo;
  lo.bias = options.bias;
  lo.dtype = dtype_;
  lo.weight_init = options.weight_init;
  qkv_ = AddModule("qkv", std::make_unique<Linear>(C_, 3 * C_, lo));
  lo.weight_init = options.proj_init;
  proj_ = AddModule("proj", std::make_unique<Linear>(C_, C_, lo));
  drop_ = AddModule("drop", std::make_unique<Dropout>(options.dropout));
}

Tensor CausalSelfAttention::OnForward(const Tensor& x) {
  CheckInput(*this, x, dtype_, C_);
  if (x.ndim() != 3) ZR_THROW(InvalidArgument, "{}: expected (B, T, C), got {}", Describe(), ShapeToString(x.shape()));
  const int64_t B = x.size(0), T = x.size(1);
  Tensor qkv = qkv_->Forward(x);  // (B, T, 3C)
  Tensor y = NewActivation({B, T, C_}, dtype_);
  Tensor att = NewActivation({kernels::AttentionSavedElems(B, T, NH_)}, DType::kF32);
  kernels::AttentionForward(y.data(), att.data_as<float>(), qkv.data(), B, T, C_, NH_, dtype_);
  if (training()) qkv_out_ = qkv, att_ = att;
  return drop_->Forward(proj_->Forward(y));
}

Tensor CausalSelfAttention::OnBackward(const Tensor& dy) {
  ZR_CHECK(qkv_out_.defined(), "{}: backward without saved activations", Describe());
  const int64_t B = qkv_out_.size(0), T = qkv_out_.size(1);
  Tensor dattn = proj_->Backward(drop_->Backward(dy));  // (B, T, C)
  Tensor dqkv = NewActivation({B, T, 3 * C_}, dtype_);
  kernels::AttentionBackward(dqkv.data(), dattn.data(), qkv_out_.data(), att_.data_as<float>(), B, T, C_, NH_, dtype_);
  OnReleaseActivations();
  return qkv_->Backward(dqkv);
}

}  // namespace zerorun::nn
