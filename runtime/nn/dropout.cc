// Dropout: Philox masks keyed by (seed, module path, call counter), saved as bytes for backward.
#include "zerorun/runtime/nn/dropout.h"

#include <algorithm>
#include <vector>

#include "zerorun/core/rng.h"
#include "zerorun/core/thread_pool.h"

namespace zerorun::nn {

namespace {
constexpr int64_t kGrain = 1 << 15;

template <typename T>
void ApplyTyped(const T* in, const uint8_t* mask, float scale, T* out, int64_t n) {
  ParallelFor(0, n, kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[i] = FromFloat<T>(mask[i] ? ToFloat(in[i]) * scale : 0.0f);
  });
}
}  // namespace

void DropoutMask(uint8_t* mask, int64_t n, float p, uint64_t seed, uint64_t stream, uint64_t offset) {
  ParallelFor(0, n, kGrain, [&](int64_t b, int64_t e) {
    constexpr int64_t kChunk = 4096;
    float u[kChunk];
    for (int64_t s = b; s < e; s += kChunk) {
      const int64_t m = std::min(kChunk, e - s);
      FillUniform(u, static_cast<size_t>(m), seed, stream, offset + static_cast<uint64_t>(s), 0.0f, 1.0f);
      for (int64_t i = 0; i < m; ++i) mask[s + i] = u[i] >= p ? 1 : 0;
    }
  });
}

void DropoutApply(const Tensor& in, const uint8_t* mask, float scale, const Tensor& out) {
  ZR_CHECK(in.numel() == out.numel() && in.dtype() == out.dtype(), "DropoutApply: mismatched tensors");
  switch (in.dtype()) {
    case DType::kF32: ApplyTyped(in.data_as<float>(), mask, scale, out.data_as<float>(), in.numel()); break;
    case DType::kBF16: ApplyTyped(in.data_as<BFloat16>(), mask, scale, out.data_as<BFloat16>(), in.numel()); break;
    case DType::kF16: ApplyTyped(in.data_as<Half>(), mask, scale, out.data_as<Half>(), in.numel()); break;
    default: ZR_THROW(InvalidArgument, "Dropout: unsupported dtype {}", DTypeName(in.dtype()));
  }
}

Dropout::Dropout(float p) : Module("Dropout"), p_(p) {
  if (!(p >= 0.0f && p < 1.0f)) ZR_THROW(InvalidArgument, "Dropout: p must be in [0, 1), got {}", p);
}

Tensor Dropout::OnForward(const Tensor& x) {
  identity_ = !training() || p_ == 0.0f;
  if (identity_) return x;
  if (x.numel() >= (int64_t{1} << 32)) ZR_THROW(InvalidArgument, "{}: input of {} elements too large", Describe(), x.numel());
  const uint64_t offset = NextRngOffset();
  mask_ = NewActivation({x.numel()}, DType::kU8);
  DropoutMask(mask_.data_as<uint8_t>(), x.numel(), p_, rng_seed(), rng_stream(), offset);
  Tensor y = NewActivation(x.shape(), x.dtype());
  DropoutApply(x, mask_.data_as<uint8_t>(), 1.0f / (1.0f - p_), y);
  return y;
}

Tensor Dropout::OnBackward(const Tensor& dy) {
  if (identity_) return dy;
  ZR_CHECK(mask_.defined() && mask_.numel() == dy.numel(), "{}: backward without the saved mask", Describe());
  Tensor dx = NewActivation(dy.shape(), dy.dtype());
  DropoutApply(dy, mask_.data_as<uint8_t>(), 1.0f / (1.0f - p_), dx);
  return dx;
}

}  // namespace zerorun::nn
