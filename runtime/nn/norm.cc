// LayerNorm / RMSNorm through the norm kernels.
#include "zerorun/runtime/nn/norm.h"

#include "zerorun/kernels/ops.h"
#include "zerorun/runtime/nn/linear.h"

namespace zerorun::nn {

namespace {
const void* DataOrNull(Parameter* p) { return p ? p->data().data() : nullptr; }
void* GradOrNull(Parameter* p) { return p && p->requires_grad() ? p->grad().data() : nullptr; }
// Grad dtype of the affine parameters (they share one: both bound by the same engine).
DType GradType(Parameter* p, DType fallback) { return p && p->requires_grad() ? p->grad().dtype() : fallback; }
}  // namespace

LayerNorm::LayerNorm(int64_t dim, NormOptions options) : Module("LayerNorm"), C_(dim), opt_(options) {
  if (C_ <= 0) ZR_THROW(InvalidArgument, "LayerNorm({}): size must be positive", C_);
  if (opt_.affine) {
    weight_ = AddParameter("weight", {C_}, opt_.dtype, Init::Ones(), ParamOptions::NoDecay());
    if (opt_.bias) bias_ = AddParameter("bias", {C_}, opt_.dtype, Init::Zeros(), ParamOptions::NoDecay());
  }
}

Tensor LayerNorm::OnForward(const Tensor& x) {
  CheckInput(*this, x, opt_.dtype, C_);
  const int64_t N = x.numel() / C_;
  Tensor y = NewActivation(x.shape(), opt_.dtype);
  Tensor mean = NewActivation({N}, DType::kF32), rstd = NewActivation({N}, DType::kF32);
  kernels::LayerNormForward(y.data(), mean.data_as<float>(), rstd.data_as<float>(), x.data(), DataOrNull(weight_),
                            DataOrNull(bias_), N, C_, opt_.eps, opt_.dtype, opt_.dtype);
  if (training()) x_ = x, mean_ = mean, rstd_ = rstd;
  return y;
}

Tensor LayerNorm::OnBackward(const Tensor& dy) {
  CheckInput(*this, dy, opt_.dtype, C_);
  const int64_t N = dy.numel() / C_;
  ZR_CHECK(x_.defined() && x_.numel() == N * C_, "{}: backward without saved input", Describe());
  Tensor dx = NewActivation(dy.shape(), opt_.dtype);
  void* dw = GradOrNull(weight_);
  void* db = GradOrNull(bias_);
  DType gt = GradType(weight_, GradType(bias_, opt_.dtype));
  if (dw && db) ZR_CHECK(weight_->grad().dtype() == bias_->grad().dtype(), "{}: weight/bias grads differ in dtype", Describe());
  kernels::LayerNormBackward(dx.data(), dw, db, dy.data(), x_.data(), DataOrNull(weight_), mean_.data_as<float>(),
                             rstd_.data_as<float>(), N, C_, opt_.dtype, opt_.dtype, gt);
  OnReleaseActivations();
  return dx;
}

RMSNorm::RMSNorm(int64_t dim, NormOptions options) : Module("RMSNorm"), C_(dim), opt_(options) {
  if (C_ <= 0) ZR_THROW(InvalidArgument, "RMSNorm({}): size must be positive", C_);
  if (opt_.affine) weight_ = AddParameter("weight", {C_}, opt_.dtype, Init::Ones(), ParamOptions::NoDecay());
}

Tensor RMSNorm::OnForward(const Tensor& x) {
  CheckInput(*this, x, opt_.dtype, C_);
  const int64_t N = x.numel() / C_;
  Tensor y = NewActivation(x.shape(), opt_.dtype);
  Tensor rstd = NewActivation({N}, DType::kF32);
  kernels::RMSNormForward(y.data(), rstd.data_as<float>(), x.data(), DataOrNull(weight_), N, C_, opt_.eps, opt_.dtype,
                          opt_.dtype);
  if (training()) x_ = x, rstd_ = rstd;
  return y;
}

Tensor RMSNorm::OnBackward(const Tensor& dy) {
  CheckInput(*this, dy, opt_.dtype, C_);
  const int64_t N = dy.numel() / C_;
  ZR_CHECK(x_.defined() && x_.numel() == N * C_, "{}: backward without saved input", Describe());
  Tensor dx = NewActivation(dy.shape(), opt_.dtype);
  kernels::RMSNormBackward(dx.data(), GradOrNull(weight_), dy.data(), x_.data(), DataOrNull(weight_),
                           rstd_.data_as<float>(), N, C_, opt_.dtype, opt_.dtype, GradType(weight_, opt_.dtype));
  OnReleaseActivations();
  return dx;
}

}  // namespace zerorun::nn
