// Reference activations in double: GELU (tanh approximation and exact erf form), SiLU, SwiGLU.
//   gelu_tanh(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//     d/dx = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
//   gelu(x) = x Phi(x),  d/dx = Phi(x) + x phi(x)
//   silu(x) = x s(x),  s = sigmoid,  d/dx = s(x) (1 + x (1 - s(x)))
//   swiglu(g, u) = silu(g) u
#include <cmath>

#include "zerorun/kernels/access.h"
#include "zerorun/kernels/ref/ref.h"

namespace zerorun::kernels::ref {
namespace {

constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

double Gelu(double x, GeluApprox a) {
  if (a == GeluApprox::kTanh) return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x)));
  return 0.5 * x * (1.0 + std::erf(x * kInvSqrt2));
}

double GeluGrad(double x, GeluApprox a) {
  if (a == GeluApprox::kTanh) {
    double th = std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * kSqrt2OverPi * (1.0 + 3.0 * 0.044715 * x * x);
  }
  return 0.5 * (1.0 + std::erf(x * kInvSqrt2)) + x * kInvSqrt2Pi * std::exp(-0.5 * x * x);
}

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

void GeluForward(void* out, const void* x, int64_t n, DType type, GeluApprox approx) {
  for (int64_t i = 0; i < n; ++i) StoreD(out, type, i, Gelu(LoadD(x, type, i), approx));
}

void GeluBackward(void* dx, const void* dout, const void* x, int64_t n, DType type, GeluApprox approx) {
  for (int64_t i = 0; i < n; ++i) StoreD(dx, type, i, LoadD(dout, type, i) * GeluGrad(LoadD(x, type, i), approx));
}

void SiluForward(void* out, const void* x, int64_t n, DType type) {
  for (int64_t i = 0; i < n; ++i) {
    double v = LoadD(x, type, i);
    StoreD(out, type, i, v * Sigmoid(v));
  }
}

void SiluBackward(void* dx, const void* dout, const void* x, int64_t n, DType type) {
  for (int64_t i = 0; i < n; ++i) {
    double v = LoadD(x, type, i), s = Sigmoid(v);
    StoreD(dx, type, i, LoadD(dout, type, i) * s * (1.0 + v * (1.0 - s)));
  }
}

void SwiGluForward(void* out, const void* in, int64_t N, int64_t H, DType type) {
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t j = 0; j < H; ++j) {
      double g = LoadD(in, type, r * 2 * H + j), u = LoadD(in, type, r * 2 * H + H + j);
      StoreD(out, type, r * H + j, g * Sigmoid(g) * u);
    }
  }
}

void SwiGluBackward(void* din, const void* dout, const void* in, int64_t N, int64_t H, DType type) {
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t j = 0; j < H; ++j) {
      double g = LoadD(in, type, r * 2 * H + j), u = LoadD(in, type, r * 2 * H + H + j);
      double dy = LoadD(dout, type, r * H + j), s = Sigmoid(g);
      StoreD(din, type, r * 2 * H + j, dy * u * s * (1.0 + g * (1.0 - s)));
      StoreD(din, type, r * 2 * H + H + j, dy * g * s);
    }
  }
}

}  // namespace

void FillActivation(KernelTable& t) {
  t.gelu_forward = &GeluForward;
  t.gelu_backward = &GeluBackward;
  t.silu_forward = &SiluForward;
  t.silu_backward = &SiluBackward;
  t.swiglu_forward = &SwiGluForward;
  t.swiglu_backward = &SwiGluBackward;
}

}  // namespace zerorun::kernels::ref
