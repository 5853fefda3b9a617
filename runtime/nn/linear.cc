// Linear forward/backward through the GEMM kernel: fp32 accumulation, one rounding per output.
#include "zerorun/runtime/nn/linear.h"

#include "zerorun/runtime/nn/flops.h"

#include "zerorun/kernels/ops.h"

namespace zerorun::nn {

using kernels::Trans;

void CheckInput(const Module& m, const Tensor& x, DType dtype, int64_t last) {
  if (!x.defined() || x.ndim() < 1 || x.dtype() != dtype || x.size(-1) != last ||
      x.device() != kernels::KernelDevice()) {
    ZR_THROW(InvalidArgument, "{}: expected a {} tensor (..., {}) on {}, got {}", m.Describe(), DTypeName(dtype), last,
             kernels::KernelDevice().ToString(),
             x.defined() ? x.ToString() + " " + ShapeToString(x.shape()) : std::string("an undefined tensor"));
  }
}

Linear::Linear(int64_t in_features, int64_t out_features, LinearOptions options)
    : Module("Linear"), in_(in_features), out_(out_features), dtype_(options.dtype) {
  if (in_ <= 0 || out_ <= 0) ZR_THROW(InvalidArgument, "Linear({}, {}): sizes must be positive", in_, out_);
  if (options.tied_weight) {
    if (options.tied_weight->shape() != Shape{out_, in_} || options.tied_weight->dtype() != dtype_) {
      ZR_THROW(InvalidArgument, "Linear({}, {}): tied weight '{}' is {} {}, need {} [{}, {}]", in_, out_,
               options.tied_weight->name(), DTypeName(options.tied_weight->dtype()),
               ShapeToString(options.tied_weight->shape()), DTypeName(dtype_), out_, in_);
    }
    weight_ = AddParameter("weight", options.tied_weight);
  } else {
    weight_ = AddParameter("weight", {out_, in_}, dtype_, options.weight_init);
  }
  if (options.bias) bias_ = AddParameter("bias", {out_}, dtype_, options.bias_init, ParamOptions::NoDecay());
}

Tensor Linear::OnForward(const Tensor& x) {
  CheckInput(*this, x, dtype_, in_);
  const int64_t N = x.numel() / in_;
  Shape out_shape = x.shape();
  out_shape.back() = out_;
  Tensor y = NewActivation(out_shape, dtype_);
  kernels::GemmParams p;
  p.trans_a = Trans::kN;
  p.trans_b = Trans::kT;
  p.m = N, p.n = out_, p.k = in_;
  p.a = x.data(), p.a_type = dtype_, p.lda = in_;
  p.b = weight_->data().data(), p.b_type = dtype_, p.ldb = in_;
  p.c = y.data(), p.c_type = dtype_, p.ldc = out_;
  if (bias_ != nullptr) p.bias = bias_->data().data(), p.bias_type = dtype_;
  kernels::Gemm(p);
  CountForwardMacs(N * in_ * out_);
  if (training()) x_ = x;
  return y;
}

Tensor Linear::OnBackward(const Tensor& dy) {
  CheckInput(*this, dy, dtype_, out_);
  const int64_t N = dy.numel() / out_;
  ZR_CHECK(x_.defined() && x_.numel() == N * in_, "{}: backward without a saved input", Describe());
  Shape in_shape = dy.shape();
  in_shape.back() = in_;
  Tensor dx = NewActivation(in_shape, dtype_);
  const void* w = weight_->data().data();
  // dx (N, in) = dy (N, out) . W (out, in)
  kernels::Gemm(Trans::kN, Trans::kN, N, in_, out_, 1.0f, dy.data(), dtype_, out_, w, dtype_, in_, 0.0f, dx.data(),
                dtype_, in_);
  if (weight_->requires_grad()) {
    // dW (out, in) += dy^T (out, N) . x (N, in)
    const Tensor& dw = weight_->grad();
    kernels::Gemm(Trans::kT, Trans::kN, out_, in_, N, 1.0f, dy.data(), dtype_, out_, x_.data(), dtype_, in_, 1.0f,
                  dw.data(), dw.dtype(), in_);
  }
  if (bias_ != nullptr && bias_->requires_grad()) {
    const Tensor& db = bias_->grad();
    kernels::BiasBackward(db.data(), db.dtype(), dy.data(), dtype_, N, out_);
  }
  x_ = Tensor();
  return dx;
}

}  // namespace zerorun::nn
