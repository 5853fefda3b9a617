// Dropout: Philox masks keyed by (seed, module path, call counter), regenerated in backward.
#include "zerorun/runtime/nn/dropout.h"

#include "zerorun/kernels/ops.h"

namespace zerorun::nn {

Dropout::Dropout(float p) : Module("Dropout"), p_(p) {
  if (!(p >= 0.0f && p < 1.0f)) ZR_THROW(InvalidArgument, "Dropout: p must be in [0, 1), got {}", p);
}

Tensor Dropout::OnForward(const Tensor& x) {
  identity_ = !training() || p_ == 0.0f;
  if (identity_) return x;
  if (!x.defined() || !IsFloating(x.dtype()) || x.dtype() == DType::kF64) {
    ZR_THROW(InvalidArgument, "{}: expected a fp32/fp16/bf16 tensor, got {}", Describe(),
             x.defined() ? x.ToString() : std::string("an undefined tensor"));
  }
  if (x.numel() >= (int64_t{1} << 32)) ZR_THROW(InvalidArgument, "{}: input of {} elements too large", Describe(), x.numel());
  offset_ = NextRngOffset();
  numel_ = x.numel();
  Tensor y = NewActivation(x.shape(), x.dtype());
  kernels::DropoutForward(y.data(), x.data(), x.numel(), x.dtype(), p_, rng_seed(), rng_stream(), offset_);
  return y;
}

Tensor Dropout::OnBackward(const Tensor& dy) {
  if (identity_) return dy;
  if (dy.numel() != numel_) ZR_THROW(InvalidArgument, "{}: gradient of {} elements, forward had {}", Describe(), dy.numel(), numel_);
  Tensor dx = NewActivation(dy.shape(), dy.dtype());
  kernels::DropoutBackward(dx.data(), dy.data(), dy.numel(), dy.dtype(), p_, rng_seed(), rng_stream(), offset_);
  return dx;
}

}  // namespace zerorun::nn
