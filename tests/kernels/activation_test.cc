// GELU (tanh, exact), SiLU, SwiGLU: closed-form values, ref backward against finite differences in
// fp64, cpu against ref for every dtype and ISA (the cpu path uses vectorised exp/tanh approximations
// whose error the fp32 tolerance bounds).
#include <doctest/doctest.h>

#include "kernel_test_util.h"
#include "zerorun/kernels/ops.h"

namespace zerorun::kernels::test {
namespace {

constexpr DType kF64 = DType::kF64;

TEST_SUITE("unit") {

TEST_CASE("activations: closed-form values") {
  float x[] = {0.0f, 1.0f, -1.0f, 3.0f}, y[4];
  GeluForward(y, x, 4, DType::kF32, GeluApprox::kNone);
  CHECK(y[0] == 0.0f);
  CHECK(y[1] == doctest::Approx(0.8413447460685429));   // Phi(1)
  CHECK(y[2] == doctest::Approx(-0.15865525393145707));  // -(1 - Phi(1))
  GeluForward(y, x, 4, DType::kF32, GeluApprox::kTanh);
  CHECK(y[1] == doctest::Approx(0.5 * (1 + std::tanh(0.7978845608028654 * 1.044715))));
  SiluForward(y, x, 4, DType::kF32);
  CHECK(y[1] == doctest::Approx(1.0 / (1.0 + std::exp(-1.0))));
  CHECK(y[3] == doctest::Approx(3.0 / (1.0 + std::exp(-3.0))));
  float in[] = {1.0f, 2.0f, 2.0f, 5.0f}, out[2];  // N = 2, H = 1: silu(1) * 2, silu(2) * 5
  SwiGluForward(out, in, 2, 1, DType::kF32);
  CHECK(out[0] == doctest::Approx(2.0 / (1.0 + std::exp(-1.0))));
  CHECK(out[1] == doctest::Approx(10.0 / (1.0 + std::exp(-2.0))));
}

TEST_CASE("activation backward matches finite differences (fp64 ref)") {
  int64_t n = 13;
  Buffer x = Buffer::Random(kF64, n, 1, -4, 4), dout = Buffer::Random(kF64, n, 2), y(kF64, n), dx(kF64, n);
  for (GeluApprox a : {GeluApprox::kTanh, GeluApprox::kNone}) {
    auto loss = [&] {
      Ref().gelu_forward(y.data(), x.data(), n, kF64, a);
      return Dot(y, dout);
    };
    Ref().gelu_backward(dx.data(), dout.data(), x.data(), n, kF64, a);
    CheckGrad(dx, NumericGrad(x, loss), 1e-7, "gelu");
  }
  auto silu_loss = [&] {
    Ref().silu_forward(y.data(), x.data(), n, kF64);
    return Dot(y, dout);
  };
  Ref().silu_backward(dx.data(), dout.data(), x.data(), n, kF64);
  CheckGrad(dx, NumericGrad(x, silu_loss), 1e-7, "silu");
  int64_t N = 3, H = 5;
  Buffer in = Buffer::Random(kF64, N * 2 * H, 3, -3, 3), o(kF64, N * H), dy = Buffer::Random(kF64, N * H, 4);
  Buffer din(kF64, N * 2 * H);
  auto swi_loss = [&] {
    Ref().swiglu_forward(o.data(), in.data(), N, H, kF64);
    return Dot(o, dy);
  };
  Ref().swiglu_backward(din.data(), dy.data(), in.data(), N, H, kF64);
  CheckGrad(din, NumericGrad(in, swi_loss), 1e-7, "swiglu");
}

TEST_CASE("cpu activations match ref for every dtype and ISA") {
  for (int64_t n : {0, 1, 7, 4099, 1 << 17}) {
    for (DType t : StorageTypes()) {
      CAPTURE(n);
      CAPTURE(std::string(DTypeName(t)));
      Buffer x = Buffer::Random(t, n, 1, -8, 8), dout = Buffer::Random(t, n, 2);
      Buffer want(t, n), got(t, n);
      for (GeluApprox a : {GeluApprox::kTanh, GeluApprox::kNone}) {
        CAPTURE(static_cast<int>(a));
        Ref().gelu_forward(want.data(), x.data(), n, t, a);
        ForEachIsa([&](Isa) {
          Cpu().gelu_forward(got.data(), x.data(), n, t, a);
          CheckOp(got, want, "gelu", 1e-6, 1.0);
          Buffer x2 = x;  // in place: out aliases x
          Cpu().gelu_forward(x2.data(), x2.data(), n, t, a);
          CheckOp(x2, want, "gelu in place", 1e-6, 1.0);
        });
        Ref().gelu_backward(want.data(), dout.data(), x.data(), n, t, a);
        ForEachIsa([&](Isa) {
          Cpu().gelu_backward(got.data(), dout.data(), x.data(), n, t, a);
          CheckOp(got, want, "gelu backward", 1e-6, 1.0);
        });
      }
      Ref().silu_forward(want.data(), x.data(), n, t);
      ForEachIsa([&](Isa) {
        Cpu().silu_forward(got.data(), x.data(), n, t);
        CheckOp(got, want, "silu", 1e-6, 1.0);
      });
      Ref().silu_backward(want.data(), dout.data(), x.data(), n, t);
      ForEachIsa([&](Isa) {
        Cpu().silu_backward(got.data(), dout.data(), x.data(), n, t);
        CheckOp(got, want, "silu backward", 1e-6, 1.0);
      });
      // SwiGLU over 3 rows of 2H.
      int64_t H = n / 6 + 1, N = n == 0 ? 0 : 3;
      Buffer in = Buffer::Random(t, N * 2 * H, 3, -6, 6), dy = Buffer::Random(t, N * H, 4);
      Buffer s1(t, N * H), s2(t, N * H), d1(t, N * 2 * H), d2(t, N * 2 * H);
      Ref().swiglu_forward(s1.data(), in.data(), N, H, t);
      Ref().swiglu_backward(d1.data(), dy.data(), in.data(), N, H, t);
      ForEachIsa([&](Isa) {
        Cpu().swiglu_forward(s2.data(), in.data(), N, H, t);
        CheckOp(s2, s1, "swiglu", 1e-6, 1.0);
        Cpu().swiglu_backward(d2.data(), dy.data(), in.data(), N, H, t);
        CheckOp(d2, d1, "swiglu backward", 1e-6, 1.0);
      });
    }
  }
}

}  // TEST_SUITE
}  // namespace
}  // namespace zerorun::kernels::test
