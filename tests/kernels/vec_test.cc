// Error bounds of the SIMD math behind the cpu kernels (kernels/cpu/vec.h): the polynomial exp over
// its whole range, and GELU/SiLU built on it, against <cmath> in double, on every ISA path.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernel_test_util.h"
#include "tests/common/nan_max.h"
#include "zerorun/kernels/cpu/vec.h"

namespace zerorun::kernels::test {
namespace {

TEST_SUITE("unit") {

TEST_CASE("vectorised exp: relative error below 3 ulp on [-87, 88]; NaN propagates") {
  std::vector<float> x, y;
  for (double v = -87.0; v <= 88.0; v += 0.001) x.push_back(static_cast<float>(v));
  y.resize(x.size());
  ForEachIsa([&](Isa) {
    cpu::Vec().exp_shift_sum(y.data(), x.data(), static_cast<int64_t>(x.size()), 0.0f);
    double worst = 0.0;
    for (size_t i = 0; i < x.size(); ++i) {
      double want = std::exp(static_cast<double>(x[i]));
      worst = zrtest::MaxKeepNan(worst, std::fabs(y[i] - want) / want);
    }
    INFO("max relative error of exp: " << worst);
    CHECK(worst < 3 * 5.97e-8);  // 3 ulp of fp32 at the top of a binade
    float nan_in[17], out[17];
    for (int i = 0; i < 17; ++i) nan_in[i] = i == 9 ? std::nanf("") : 0.5f;
    float sum = cpu::Vec().exp_shift_sum(out, nan_in, 17, 0.0f);
    CHECK(std::isnan(out[9]));
    CHECK(std::isnan(sum));
  });
}

TEST_CASE("vectorised GELU and SiLU: absolute error bounds against double") {
  std::vector<float> x, y, dx, ones;
  for (double v = -12.0; v <= 12.0; v += 0.0005) x.push_back(static_cast<float>(v));
  // Far out, where x^2 overflows fp32 and exp(2u) overflows: a NaN or infinite output makes its error
  // NaN or inf, which MaxKeepNan keeps and the checks below fail on.
  for (float v : {-3e38f, -1e20f, -2e19f, -1e6f, -30.0f, -15.0f, 15.0f, 30.0f, 1e6f, 2e19f, 1e20f, 3e38f}) x.push_back(v);
  size_t n = x.size();
  y.resize(n);
  dx.resize(n);
  ones.assign(n, 1.0f);
  auto phi = [](double v) { return 0.5 * std::erfc(-v / std::sqrt(2.0)); };
  ForEachIsa([&](Isa) {
    const cpu::VecOps& v = cpu::Vec();
    double e_tanh = 0, e_exact = 0, e_exact_grad = 0, e_silu = 0, e_tanh_grad = 0;
    v.gelu(y.data(), x.data(), static_cast<int64_t>(n), GeluApprox::kTanh);
    v.gelu_grad(dx.data(), ones.data(), x.data(), static_cast<int64_t>(n), GeluApprox::kTanh);
    for (size_t i = 0; i < n; ++i) {
      double a = x[i], u = 0.7978845608028654 * (a + 0.044715 * a * a * a), t = std::tanh(u);
      e_tanh = zrtest::MaxKeepNan(e_tanh, std::fabs(y[i] - 0.5 * a * (1 + t)) / std::max(1.0, std::fabs(a)));
      double g = 0.5 * (1 + t) + 0.5 * a * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * a * a);
      e_tanh_grad = zrtest::MaxKeepNan(e_tanh_grad, std::fabs(dx[i] - g));
    }
    v.gelu(y.data(), x.data(), static_cast<int64_t>(n), GeluApprox::kNone);
    v.gelu_grad(dx.data(), ones.data(), x.data(), static_cast<int64_t>(n), GeluApprox::kNone);
    for (size_t i = 0; i < n; ++i) {
      double a = x[i];
      e_exact = zrtest::MaxKeepNan(e_exact, std::fabs(y[i] - a * phi(a)) / std::max(1.0, std::fabs(a)));
      double g = phi(a) + a * std::exp(-0.5 * a * a) / 2.5066282746310002;
      e_exact_grad = zrtest::MaxKeepNan(e_exact_grad, std::fabs(dx[i] - g));
    }
    v.silu(y.data(), x.data(), static_cast<int64_t>(n));
    for (size_t i = 0; i < n; ++i) {
      double a = x[i];
      e_silu = zrtest::MaxKeepNan(e_silu, std::fabs(y[i] - a / (1 + std::exp(-a))) / std::max(1.0, std::fabs(a)));
    }
    INFO("gelu tanh " << e_tanh << " grad " << e_tanh_grad << "; gelu exact " << e_exact << " grad "
                         << e_exact_grad << "; silu " << e_silu << " (error / max(1, |x|))");
    CHECK(e_tanh < 5e-7);
    CHECK(e_tanh_grad < 1e-6);
    CHECK(e_exact < 5e-7);  // Abramowitz-Stegun erf: |error| < 1.5e-7
    CHECK(e_exact_grad < 1e-6);
    CHECK(e_silu < 5e-7);
  });
}

TEST_CASE("vectorised add and divide equal the scalar IEEE operations bit for bit, at every length and alignment") {
  // The communicators' fp32 reductions run on these; ranks must agree to the bit with the oracle.
  std::vector<float> a(1031), b(1031), y(1031), z(1031);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)) * 1e3);
    b[i] = static_cast<float>(std::cos(1.3 * static_cast<double>(i)) / 7.0);
  }
  a[5] = std::nanf("");
  b[6] = std::numeric_limits<float>::infinity();
  b[7] = 1e-40f;  // subnormal
  ForEachIsa([&](Isa) {
    for (int64_t off : {0, 1, 3}) {
      for (int64_t n : {0, 1, 7, 15, 16, 17, 33, 1000}) {
        const cpu::VecOps& v = cpu::Vec();
        v.add(y.data() + off, a.data() + off, b.data() + off, n);
        v.divide(z.data() + off, a.data() + off, 3.0f, n);
        for (int64_t i = off; i < off + n; ++i) {
          const float sum = a[static_cast<size_t>(i)] + b[static_cast<size_t>(i)];
          const float quo = a[static_cast<size_t>(i)] / 3.0f;
          CHECK(std::memcmp(&y[static_cast<size_t>(i)], &sum, 4) == 0);
          CHECK(std::memcmp(&z[static_cast<size_t>(i)], &quo, 4) == 0);
        }
        v.divide(y.data() + off, y.data() + off, 2.0f, n);  // in place
        for (int64_t i = off; i < off + n; ++i) {
          const float want = (a[static_cast<size_t>(i)] + b[static_cast<size_t>(i)]) / 2.0f;
          CHECK(std::memcmp(&y[static_cast<size_t>(i)], &want, 4) == 0);
        }
      }
    }
  });
}

}  // TEST_SUITE
}  // namespace
}  // namespace zerorun::kernels::test
