// Activations through the elementwise kernels; each saves its input for backward.
#include "zerorun/runtime/nn/activation.h"

#include "zerorun/kernels/ops.h"

namespace zerorun::nn {

namespace {
void CheckFloat(const Module& m, const Tensor& x) {
  if (!x.defined() || !IsFloating(x.dtype()) || x.dtype() == DType::kF64 ||
      x.device() != kernels::KernelDevice()) {
    ZR_THROW(InvalidArgument, "{}: expected a fp32/fp16/bf16 tensor on {}, got {}", m.Describe(),
             kernels::KernelDevice().ToString(),
             x.defined() ? x.ToString() : std::string("an undefined tensor"));
  }
}
void CheckSaved(const Module& m, const Tensor& saved, const Tensor& dy, int64_t factor) {
  ZR_CHECK(saved.defined(), "{}: backward without saved input", m.Describe());
  if (dy.dtype() != saved.dtype() || dy.numel() * factor != saved.numel()) {
    ZR_THROW(InvalidArgument, "{}: gradient {} {} does not match the forward input {} {}", m.Describe(),
             dy.ToString(), ShapeToString(dy.shape()), saved.ToString(), ShapeToString(saved.shape()));
  }
}
kernels::GeluApprox Approx(GeluKind k) { return k == GeluKind::kTanh ? kernels::GeluApprox::kTanh : kernels::GeluApprox::kNone; }
}  // namespace

Tensor Gelu::OnForward(const Tensor& x) {
  CheckFloat(*this, x);
  Tensor y = NewActivation(x.shape(), x.dtype());
  kernels::GeluForward(y.data(), x.data(), x.numel(), x.dtype(), Approx(kind_));
  if (training()) x_ = x;
  return y;
}

Tensor Gelu::OnBackward(const Tensor& dy) {
  CheckSaved(*this, x_, dy, 1);
  Tensor dx = NewActivation(dy.shape(), dy.dtype());
  kernels::GeluBackward(dx.data(), dy.data(), x_.data(), dy.numel(), dy.dtype(), Approx(kind_));
  x_ = Tensor();
  return dx;
}

Tensor Silu::OnForward(const Tensor& x) {
  CheckFloat(*this, x);
  Tensor y = NewActivation(x.shape(), x.dtype());
  kernels::SiluForward(y.data(), x.data(), x.numel(), x.dtype());
  if (training()) x_ = x;
  return y;
}

Tensor Silu::OnBackward(const Tensor& dy) {
  CheckSaved(*this, x_, dy, 1);
  Tensor dx = NewActivation(dy.shape(), dy.dtype());
  kernels::SiluBackward(dx.data(), dy.data(), x_.data(), dy.numel(), dy.dtype());
  x_ = Tensor();
  return dx;
}

Tensor SwiGlu::OnForward(const Tensor& x) {
  CheckFloat(*this, x);
  if (x.ndim() < 1 || x.size(-1) % 2 != 0) {
    ZR_THROW(InvalidArgument, "{}: last dimension must be even ([gate | up]), got {}", Describe(), ShapeToString(x.shape()));
  }
  const int64_t H = x.size(-1) / 2, N = x.numel() / (2 * H);
  Shape out = x.shape();
  out.back() = H;
  Tensor y = NewActivation(out, x.dtype());
  kernels::SwiGluForward(y.data(), x.data(), N, H, x.dtype());
  if (training()) x_ = x;
  return y;
}

Tensor SwiGlu::OnBackward(const Tensor& dy) {
  CheckSaved(*this, x_, dy, 2);
  const int64_t H = x_.size(-1) / 2, N = x_.numel() / (2 * H);
  Tensor dx = NewActivation(x_.shape(), dy.dtype());
  kernels::SwiGluBackward(dx.data(), dy.data(), x_.data(), N, H, dy.dtype());
  x_ = Tensor();
  return dx;
}

}  // namespace zerorun::nn
