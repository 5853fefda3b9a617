// Embedding lookups and their scatter-add gradients through the embedding kernels.
#include "zerorun/runtime/nn/embedding.h"

#include "zerorun/kernels/ops.h"
#include "zerorun/runtime/nn/linear.h"

namespace zerorun::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t dim, EmbeddingOptions options)
    : Module("Embedding"), V_(num_embeddings), C_(dim), dtype_(options.dtype) {
  if (V_ <= 0 || C_ <= 0) ZR_THROW(InvalidArgument, "Embedding({}, {}): sizes must be positive", V_, C_);
  weight_ = AddParameter("weight", {V_, C_}, dtype_, options.init);
}

Tensor Embedding::OnForward(const Tensor& tokens) {
  if (!tokens.defined() || tokens.dtype() != DType::kI32 || tokens.ndim() != 2) {
    ZR_THROW(InvalidArgument, "{}: expected int32 token ids (B, T), got {}", Describe(),
             tokens.defined() ? tokens.ToString() : std::string("an undefined tensor"));
  }
  const int64_t B = tokens.size(0), T = tokens.size(1);
  Tensor y = NewActivation({B, T, C_}, dtype_);
  kernels::EmbeddingForward(y.data(), dtype_, tokens.data_as<int32_t>(), weight_->data().data(), nullptr, dtype_, B,
                            T, C_, V_);
  if (training()) tokens_ = tokens;
  return y;
}

Tensor Embedding::OnBackward(const Tensor& dy) {
  ZR_CHECK(tokens_.defined(), "{}: backward without saved tokens", Describe());
  const int64_t B = tokens_.size(0), T = tokens_.size(1);
  if (dy.numel() != B * T * C_ || dy.dtype() != dtype_) {
    ZR_THROW(InvalidArgument, "{}: gradient {} does not match (B, T, C) = ({}, {}, {})", Describe(), dy.ToString(), B,
             T, C_);
  }
  if (weight_->requires_grad()) {
    const Tensor& dw = weight_->grad();
    kernels::EmbeddingBackward(dw.data(), nullptr, dw.dtype(), dy.data(), dtype_, tokens_.data_as<int32_t>(), B, T,
                               C_, V_);
  }
  tokens_ = Tensor();
  return Tensor();
}

PositionalEmbedding::PositionalEmbedding(int64_t max_positions, int64_t dim, EmbeddingOptions options)
    : Module("PositionalEmbedding"), maxT_(max_positions), C_(dim), dtype_(options.dtype) {
  if (maxT_ <= 0 || C_ <= 0) ZR_THROW(InvalidArgument, "PositionalEmbedding({}, {}): sizes must be positive", maxT_, C_);
  weight_ = AddParameter("weight", {maxT_, C_}, dtype_, options.init);
}

Tensor PositionalEmbedding::OnForward(const Tensor& x) {
  CheckInput(*this, x, dtype_, C_);
  if (x.ndim() != 3 || x.size(1) > maxT_) {
    ZR_THROW(InvalidArgument, "{}: expected (B, T <= {}, {}), got {}", Describe(), maxT_, C_, ShapeToString(x.shape()));
  }
  const int64_t B = x.size(0), T = x.size(1);
  Tensor y = NewActivation(x.shape(), dtype_);
  const void* wpe = weight_->data().data();
  for (int64_t b = 0; b < B; ++b) {
    kernels::Add(y.View(b * T * C_, {T * C_}).data(), x.View(b * T * C_, {T * C_}).data(), wpe, T * C_, dtype_);
  }
  return y;
}

Tensor PositionalEmbedding::OnBackward(const Tensor& dy) {
  CheckInput(*this, dy, dtype_, C_);
  const int64_t B = dy.size(0), T = dy.size(1);
  if (weight_->requires_grad()) {
    // Sum over the batch in fp32, then one rounding into the (maybe 16-bit) gradient.
    const Tensor& dw = weight_->grad();
    Tensor sum = NewActivationZeros({T * C_}, DType::kF32);
    for (int64_t b = 0; b < B; ++b) {
      kernels::Axpy(sum.data(), DType::kF32, dy.View(b * T * C_, {T * C_}).data(), dtype_, 1.0f, T * C_);
    }
    kernels::Axpy(dw.data(), dw.dtype(), sum.data(), DType::kF32, 1.0f, T * C_);
  }
  return dy;
}

}  // namespace zerorun::nn
