// Initializers: recipes turned into values with counter-based RNG keyed by (seed, HashName(name)).
#include "zerorun/runtime/nn/init.h"

#include <cmath>
#include <vector>

#include "zerorun/core/format.h"
#include "zerorun/core/rng.h"

namespace zerorun::nn {

Init Init::Gpt2Residual(int n_layer) {
  if (n_layer <= 0) ZR_THROW(InvalidArgument, "Init::Gpt2Residual: n_layer must be positive, got {}", n_layer);
  return Normal(0.0f, 0.02f / std::sqrt(2.0f * static_cast<float>(n_layer)));
}

std::string Init::ToString() const {
  switch (kind) {
    case Kind::kZeros: return "zeros";
    case Kind::kOnes: return "ones";
    case Kind::kConstant: return Format("constant({})", a);
    case Kind::kNormal: return Format("normal({}, {})", a, b);
    case Kind::kUniform: return Format("uniform({}, {})", a, b);
    case Kind::kXavierUniform: return Format("xavier_uniform(gain={})", a);
    case Kind::kXavierNormal: return Format("xavier_normal(gain={})", a);
    case Kind::kKaimingUniform: return Format("kaiming_uniform(gain={})", a);
    case Kind::kKaimingNormal: return Format("kaiming_normal(gain={})", a);
  }
  return "?";
}

int64_t FanIn(const Shape& shape) {
  if (shape.empty()) return 1;
  if (shape.size() == 1) return shape[0];
  int64_t receptive = 1;
  for (size_t i = 2; i < shape.size(); ++i) receptive *= shape[i];
  return shape[1] * receptive;
}

int64_t FanOut(const Shape& shape) {
  if (shape.empty()) return 1;
  if (shape.size() == 1) return shape[0];
  int64_t receptive = 1;
  for (size_t i = 2; i < shape.size(); ++i) receptive *= shape[i];
  return shape[0] * receptive;
}

void FillInit(const Init& init, const Shape& shape, uint64_t seed, std::string_view name, int64_t offset_elems,
              float* dst, int64_t n) {
  if (n <= 0) return;
  if (offset_elems < 0 || offset_elems + n > NumElements(shape)) {
    ZR_THROW(InvalidArgument, "FillInit '{}': range [{}, {}) outside shape {}", name, offset_elems,
             offset_elems + n, ShapeToString(shape));
  }
  const uint64_t stream = HashName(name);
  const double fan_in = static_cast<double>(std::max<int64_t>(1, FanIn(shape)));
  const double fan_out = static_cast<double>(std::max<int64_t>(1, FanOut(shape)));
  const size_t count = static_cast<size_t>(n);
  const uint64_t off = static_cast<uint64_t>(offset_elems);
  auto fill_const = [&](float v) {
    for (size_t i = 0; i < count; ++i) dst[i] = v;
  };
  auto uniform = [&](double bound) {
    FillUniform(dst, count, seed, stream, off, static_cast<float>(-bound), static_cast<float>(bound));
  };
  auto normal = [&](double stddev) { FillNormal(dst, count, seed, stream, off, 0.0f, static_cast<float>(stddev)); };
  switch (init.kind) {
    case Init::Kind::kZeros: fill_const(0.0f); break;
    case Init::Kind::kOnes: fill_const(1.0f); break;
    case Init::Kind::kConstant: fill_const(init.a); break;
    case Init::Kind::kNormal: FillNormal(dst, count, seed, stream, off, init.a, init.b); break;
    case Init::Kind::kUniform: FillUniform(dst, count, seed, stream, off, init.a, init.b); break;
    case Init::Kind::kXavierUniform: uniform(init.a * std::sqrt(6.0 / (fan_in + fan_out))); break;
    case Init::Kind::kXavierNormal: normal(init.a * std::sqrt(2.0 / (fan_in + fan_out))); break;
    case Init::Kind::kKaimingUniform: uniform(init.a * std::sqrt(3.0 / fan_in)); break;
    case Init::Kind::kKaimingNormal: normal(init.a / std::sqrt(fan_in)); break;
  }
}

void FillInitTensor(const Init& init, uint64_t seed, std::string_view name, const Tensor& t) {
  if (!t.defined() || !IsFloating(t.dtype())) {
    ZR_THROW(InvalidArgument, "FillInitTensor '{}': needs a floating tensor, got {}", name,
             t.defined() ? t.ToString() : std::string("undefined"));
  }
  if (!t.device().is_cpu()) {  // computed on the host, copied once
    Tensor host = Tensor::Empty(t.shape(), t.dtype(), Device::CPU(), MemCategory::kOther);
    FillInitTensor(init, seed, name, host);
    t.CopyFrom(host);
    return;
  }
  if (t.dtype() == DType::kF32) {
    FillInit(init, t.shape(), seed, name, 0, t.data_as<float>(), t.numel());
    return;
  }
  std::vector<float> tmp(static_cast<size_t>(t.numel()));
  FillInit(init, t.shape(), seed, name, 0, tmp.data(), t.numel());
  Convert(tmp.data(), DType::kF32, t.data(), t.dtype(), tmp.size());
}

}  // namespace zerorun::nn
