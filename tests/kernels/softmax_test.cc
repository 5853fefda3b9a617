// Row softmax and fused softmax cross-entropy: closed forms, finite differences (fp64 ref),
// ignore_index, extreme logits, cpu against ref for every dtype and ISA.
#include <doctest/doctest.h>

#include "kernel_test_util.h"
#include "zerorun/core/error.h"
#include "zerorun/kernels/ops.h"

namespace zerorun::kernels::test {
namespace {

constexpr DType kF64 = DType::kF64;

TEST_SUITE("unit") {

TEST_CASE("softmax and cross-entropy: closed form") {
  float x[] = {0.0f, std::log(3.0f)}, y[2];  // softmax = [1/4, 3/4]
  SoftmaxForward(y, x, 1, 2, DType::kF32);
  CHECK(y[0] == doctest::Approx(0.25));
  CHECK(y[1] == doctest::Approx(0.75));
  // Two rows, V = 2; row 1 ignored. loss = -log(3/4).
  float logits[] = {0.0f, std::log(3.0f), 5.0f, -5.0f}, dl[4], losses[2];
  int32_t targets[] = {1, -100};
  auto r = CrossEntropy(dl, losses, logits, targets, 2, 2, DType::kF32, -100, 2.0f);
  CHECK(r.count == 1);
  CHECK(r.loss == doctest::Approx(-std::log(0.75)));
  CHECK(losses[1] == 0.0f);
  CHECK(dl[0] == doctest::Approx(2.0 * 0.25));
  CHECK(dl[1] == doctest::Approx(2.0 * (0.75 - 1.0)));
  CHECK(dl[2] == 0.0f);
  CHECK(dl[3] == 0.0f);
  // Every row ignored: loss 0, count 0, gradient 0.
  int32_t all_ignored[] = {-100, -100};
  r = CrossEntropy(dl, nullptr, logits, all_ignored, 2, 2, DType::kF32, -100, 1.0f);
  CHECK(r.count == 0);
  CHECK(r.loss == 0.0f);
  CHECK(dl[1] == 0.0f);
  int32_t bad[] = {1, 2};
  CHECK_THROWS_WITH_AS(CrossEntropy(dl, nullptr, logits, bad, 2, 2, DType::kF32, -100, 1.0f),
                       doctest::Contains("targets[1] = 2"), InvalidArgument);
}

TEST_CASE("softmax and cross-entropy backward match finite differences (fp64 ref)") {
  int64_t N = 3, C = 7;
  Buffer x = Buffer::Random(kF64, N * C, 1, -3, 3), dout = Buffer::Random(kF64, N * C, 2), y(kF64, N * C);
  auto loss = [&] {
    Ref().softmax_forward(y.data(), x.data(), N, C, kF64);
    return Dot(y, dout);
  };
  loss();
  Buffer dx(kF64, N * C);
  Ref().softmax_backward(dx.data(), dout.data(), y.data(), N, C, kF64);
  CheckGrad(dx, NumericGrad(x, loss), 1e-7, "softmax");
  int32_t targets[] = {2, -1, 6};
  auto ce = [&] { return static_cast<double>(Ref().cross_entropy(nullptr, nullptr, x.data(), targets, N, C, kF64, -1, 1.0f).loss); };
  Ref().cross_entropy(dx.data(), nullptr, x.data(), targets, N, C, kF64, -1, 1.0f);
  // The loss is returned as fp32: a larger step keeps the quotient's rounding small.
  CheckGrad(dx, NumericGrad(x, ce, 1e-3), 1e-4, "cross-entropy");
}

TEST_CASE("cross-entropy with extreme logits stays finite and exact") {
  for (DType t : StorageTypes()) {
    CAPTURE(std::string(DTypeName(t)));
    double eps = t == DType::kF32 ? 1e-6 : 1e-2;
    Buffer logits(t, 3 * 4);
    // Row 0: one huge logit on the target; row 1: huge on another class; row 2: all very negative.
    // Row 2's logits are equal, so its loss is log 4 whatever their size (here exact in every dtype).
    double big = t == DType::kF16 ? 60000.0 : 1e30;
    double v[] = {big, 0, -big, 0, 0, big, 0, -big, -1000, -1000, -1000, -1000};
    for (int i = 0; i < 12; ++i) logits.Set(i, v[i]);
    int32_t targets[] = {0, 0, 3};
    for (const KernelTable* k : {&Ref(), &Cpu()}) {
      Buffer dl(t, 12);
      float losses[3];
      auto r = k->cross_entropy(dl.data(), losses, logits.data(), targets, 3, 4, t, -100, 1.0f);
      CHECK(losses[0] == 0.0f);
      CHECK(losses[1] == doctest::Approx(big).epsilon(1e-3));
      CHECK(losses[2] == doctest::Approx(std::log(4.0)).epsilon(1e-6));
      CHECK(std::isfinite(r.loss));
      CHECK(dl.Get(0) == 0.0);
      CHECK(dl.Get(4) == doctest::Approx(-1.0 / 3).epsilon(eps));
      CHECK(dl.Get(5) == doctest::Approx(1.0 / 3).epsilon(eps));
      CHECK(dl.Get(11) == doctest::Approx((0.25 - 1) / 3).epsilon(eps));
    }
  }
}

TEST_CASE("cpu softmax and cross-entropy match ref for every dtype and ISA") {
  std::vector<std::pair<int64_t, int64_t>> shapes = {{0, 5}, {1, 1}, {7, 7}, {3, 4099}, {6, 50257}};
  for (auto [N, C] : shapes) {
    for (DType t : StorageTypes()) {
      CAPTURE(N);
      CAPTURE(C);
      CAPTURE(std::string(DTypeName(t)));
      Buffer x = Buffer::Random(t, N * C, 1, -10, 10), dout = Buffer::Random(t, N * C, 2);
      Buffer y1(t, N * C), y2(t, N * C), d1(t, N * C), d2(t, N * C);
      Ref().softmax_forward(y1.data(), x.data(), N, C, t);
      Ref().softmax_backward(d1.data(), dout.data(), y1.data(), N, C, t);
      ForEachIsa([&](Isa) {
        Cpu().softmax_forward(y2.data(), x.data(), N, C, t);
        CheckOp(y2, y1, "softmax", 1e-6);
        Cpu().softmax_backward(d2.data(), dout.data(), y1.data(), N, C, t);
        CheckOp(d2, d1, "softmax backward", 1e-6);
      });
      std::vector<int32_t> targets(static_cast<size_t>(N));
      for (int64_t i = 0; i < N; ++i) targets[i] = i % 5 == 3 ? -100 : static_cast<int32_t>((i * 7919) % C);
      Buffer l1(DType::kF32, N), l2(DType::kF32, N);
      auto r1 = Ref().cross_entropy(d1.data(), l1.f32(), x.data(), targets.data(), N, C, t, -100, 0.5f);
      ForEachIsa([&](Isa) {
        auto r2 = Cpu().cross_entropy(d2.data(), l2.f32(), x.data(), targets.data(), N, C, t, -100, 0.5f);
        CHECK(r1.count == r2.count);
        CHECK(r2.loss == doctest::Approx(r1.loss).epsilon(1e-6));
        CheckOp(l2, l1, "ce losses", 1e-6);
        CheckOp(d2, d1, "ce dlogits", 1e-6);
        // dlogits may alias logits.
        Buffer x2 = x;
        auto r3 = Cpu().cross_entropy(x2.data(), nullptr, x2.data(), targets.data(), N, C, t, -100, 0.5f);
        CHECK(r3.loss == r2.loss);
        CHECK(x2.BitEqual(d2));
      });
    }
  }
}

}  // TEST_SUITE
}  // namespace
}  // namespace zerorun::kernels::test
