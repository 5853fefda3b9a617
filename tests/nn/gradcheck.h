// Finite-difference gradient checks for unary modules and LossModules. The scalar is
// L = sum(r * f(x)) for a fixed random r (accumulated in double); derivatives use the fourth-order
// central stencil (8(f(+h) - f(-h)) - (f(+2h) - f(-2h))) / 12h on fp32 values.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "zerorun/core/rng.h"
#include "zerorun/runtime/nn/loss.h"
#include "zerorun/runtime/nn/module.h"

namespace zerorun::nn::testing {

inline Tensor RandomTensor(const Shape& shape, uint64_t seed, float scale = 1.0f, DType dtype = DType::kF32) {
  std::vector<float> v(static_cast<size_t>(NumElements(shape)));
  FillNormal(v.data(), v.size(), seed, 99, 0, 0.0f, scale);
  return Tensor::FromVector(v, shape, dtype);
}

inline double Dot(const Tensor& a, const Tensor& b) {
  auto av = a.ToVector(), bv = b.ToVector();
  double s = 0;
  for (size_t i = 0; i < av.size(); ++i) s += static_cast<double>(av[i]) * bv[i];
  return s;
}

// Indices to probe: all of [0, n) when small, else `k` spread over it (first and last included).
inline std::vector<int64_t> Probes(int64_t n, int64_t k = 24) {
  std::vector<int64_t> out;
  if (n <= k) {
    for (int64_t i = 0; i < n; ++i) out.push_back(i);
  } else {
    for (int64_t j = 0; j < k; ++j) out.push_back(j * (n - 1) / (k - 1));
  }
  return out;
}

inline float GetElem(const Tensor& t, int64_t i) { return t.ToVector()[static_cast<size_t>(i)]; }
inline void SetElem(const Tensor& t, int64_t i, float v) {
  ZR_CHECK(t.dtype() == DType::kF32, "SetElem needs fp32");
  t.data_as<float>()[i] = v;
}

// Numerical derivative of `f` with respect to element i of the fp32 tensor `t`.
inline double NumericalDerivative(const Tensor& t, int64_t i, float h, const std::function<double()>& f) {
  const float orig = GetElem(t, i);
  auto at = [&](float d) {
    SetElem(t, i, orig + d);
    return f();
  };
  const double v = (8.0 * (at(h) - at(-h)) - (at(2 * h) - at(-2 * h))) / (12.0 * h);
  SetElem(t, i, orig);
  return v;
}

struct GradCheckOptions {
  float h = 1e-2f;
  double rtol = 2e-3;
  double atol = 2e-4;
  int64_t probes = 24;
};

inline void CheckClose(double analytic, double numeric, const GradCheckOptions& o, const std::string& what) {
  const double tol = o.atol + o.rtol * std::max(std::abs(analytic), std::abs(numeric));
  if (std::abs(analytic - numeric) > tol) {
    FAIL_CHECK(what << ": analytic " << analytic << " vs numerical " << numeric);
  }
}

// Checks dx and every trainable parameter's gradient of the unary module `m` (fp32) at x.
// Dropout masks repeat: every forward starts from the same RNG counters.
class RngRewind {
 public:
  explicit RngRewind(Module& m) : mods_(m.Modules()) {
    for (Module* q : mods_) calls_.push_back(q->rng_calls());
  }
  void operator()() const {
    for (size_t i = 0; i < mods_.size(); ++i) mods_[i]->set_rng_calls(calls_[i]);
  }

 private:
  std::vector<Module*> mods_;
  std::vector<uint64_t> calls_;
};

// Replaces every parameter's values by N(0, scale) (so norm gains and biases are not trivially 1/0).
inline void RandomizeParameters(Module& m, uint64_t seed, float scale = 0.5f) {
  for (Parameter* p : m.Parameters()) {
    Tensor v = RandomTensor(p->shape(), seed ^ HashName(p->name()), scale, p->dtype());
    p->engine_data().CopyFrom(v);
  }
}

inline void GradCheckUnary(Module& m, const Tensor& x, uint64_t seed, GradCheckOptions o = {},
                           bool input_has_grad = true) {
  RngRewind rewind(m);
  Tensor y = m.Forward(x);
  Tensor r = RandomTensor(y.shape(), seed + 1);
  m.ZeroGrad();
  Tensor dx = m.Backward(r);
  auto loss = [&]() {
    rewind();
    return Dot(m.Forward(x), r);
  };
  if (input_has_grad) {
    REQUIRE(dx.defined());
    for (int64_t i : Probes(x.numel(), o.probes)) {
      CheckClose(GetElem(dx, i), NumericalDerivative(x, i, o.h, loss), o, "dx[" + std::to_string(i) + "]");
    }
  }
  for (Parameter* p : m.Parameters()) {
    if (!p->requires_grad()) continue;
    Tensor g = p->engine_grad().Clone();
    for (int64_t i : Probes(p->numel(), o.probes)) {
      CheckClose(GetElem(g, i), NumericalDerivative(p->engine_data(), i, o.h, loss), o,
                 p->name() + "[" + std::to_string(i) + "]");
    }
  }
}

}  // namespace zerorun::nn::testing
