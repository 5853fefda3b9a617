// Elementwise ops, dropout (mask replay, statistics, position stability) and buffer reductions.
#include <doctest/doctest.h>

#include <limits>

#include "kernel_test_util.h"
#include "zerorun/core/error.h"
#include "zerorun/kernels/cpu/philox.h"
#include "zerorun/kernels/ops.h"

namespace zerorun::kernels::test {
namespace {

const std::vector<int64_t> kSizes = {0, 1, 7, 4099, 1 << 17};

TEST_SUITE("unit") {

TEST_CASE("cpu elementwise ops match ref for every dtype and ISA") {
  for (int64_t n : kSizes) {
    for (DType t : StorageTypes()) {
      CAPTURE(n);
      CAPTURE(std::string(DTypeName(t)));
      Buffer a = Buffer::Random(t, n, 1, -4, 4), b = Buffer::Random(t, n, 2, -4, 4);
      Buffer add(t, n), scale(t, n), fill(t, n), o(t, n);
      Ref().add(add.data(), a.data(), b.data(), n, t);
      Ref().scale(scale.data(), a.data(), -0.37f, n, t);
      Ref().fill(fill.data(), 1.2345f, n, t);
      ForEachIsa([&](Isa) {
        Cpu().add(o.data(), a.data(), b.data(), n, t);
        CheckOp(o, add, "add");
        Buffer a2 = a;  // in place: out aliases a
        Cpu().add(a2.data(), a2.data(), b.data(), n, t);
        CheckOp(a2, add, "add in place");
        Cpu().scale(o.data(), a.data(), -0.37f, n, t);
        CheckOp(o, scale, "scale");
        Cpu().fill(o.data(), 1.2345f, n, t);
        CHECK(o.BitEqual(fill));
      });
      for (DType yt : StorageTypes()) {
        CAPTURE(std::string(DTypeName(yt)));
        Buffer y0 = Buffer::Random(yt, n, 3), y1 = y0, c1(yt, n);
        Ref().axpy(y1.data(), yt, a.data(), t, 0.5f, n);
        Ref().copy(c1.data(), yt, a.data(), t, n);
        ForEachIsa([&](Isa) {
          Buffer y2 = y0, c2(yt, n);
          Cpu().axpy(y2.data(), yt, a.data(), t, 0.5f, n);
          CheckOp(y2, y1, "axpy");
          Cpu().copy(c2.data(), yt, a.data(), t, n);
          CHECK(c2.BitEqual(c1));
        });
      }
    }
  }
}

TEST_CASE("dropout: replay, backward mask, position stability, statistics") {
  for (int64_t n : kSizes) {
    for (DType t : StorageTypes()) {
      CAPTURE(n);
      CAPTURE(std::string(DTypeName(t)));
      Buffer x = Buffer::Random(t, n, 1, 0.5, 1.5);  // nonzero, so a zero output means dropped
      Buffer o1(t, n);
      float p = 0.3f;
      Ref().dropout_forward(o1.data(), x.data(), n, t, p, 42, 9, 1000);
      ForEachIsa([&](Isa) {
        Buffer o2(t, n), o3(t, n);
        Cpu().dropout_forward(o2.data(), x.data(), n, t, p, 42, 9, 1000);
        CHECK(o2.BitEqual(o1));
        Cpu().dropout_forward(o3.data(), x.data(), n, t, p, 42, 9, 1000);  // replay
        CHECK(o3.BitEqual(o2));
        // Backward applies the same mask: dx is zero exactly where the forward dropped.
        Buffer dx(t, n);
        Cpu().dropout_backward(dx.data(), x.data(), n, t, p, 42, 9, 1000);
        CHECK(dx.BitEqual(o2));
        if (n >= 7) {
          // Position stable: elements [3, n) with offset 1003 equal elements 3.. of the first call.
          Buffer tail(t, n - 3), o4(t, n - 3);
          for (int64_t i = 3; i < n; ++i) tail.Set(i - 3, x.Get(i));
          Cpu().dropout_forward(o4.data(), tail.data(), n - 3, t, p, 42, 9, 1003);
          int64_t same = 0;
          for (int64_t i = 3; i < n; ++i) same += o4.Get(i - 3) == o2.Get(i);
          CHECK(same == n - 3);
          // Another stream gives another mask.
          Cpu().dropout_forward(o3.data(), x.data(), n, t, p, 42, 10, 1000);
          if (n > 100) CHECK_FALSE(o3.BitEqual(o2));
        }
        if (n >= 4099) {
          int64_t dropped = 0, bad_scale = 0;
          for (int64_t i = 0; i < n; ++i) {
            dropped += o2.Get(i) == 0.0;
            if (o2.Get(i) != 0.0) {  // kept: x * (1 / (1 - p)) in fp32, rounded once
              Buffer want(t, 1);
              want.Set(0, static_cast<float>(x.Get(i)) * (1.0f / (1.0f - p)));
              if (o2.Get(i) != want.Get(0)) ++bad_scale;
            }
          }
          CHECK(bad_scale == 0);
          double frac = static_cast<double>(dropped) / static_cast<double>(n);
          CHECK(std::fabs(frac - p) < 5 * std::sqrt(p * (1 - p) / static_cast<double>(n)));
        }
      });
    }
  }
}

TEST_CASE("bulk Philox words equal core's Philox4x32 on every ISA path") {
  // Blocks straddling 2^32 exercise the carry into the counter's high word.
  for (uint64_t first : {uint64_t{0}, uint64_t{5}, (uint64_t{1} << 32) - 20}) {
    ForEachIsa([&](Isa) {
      std::vector<uint32_t> words(4 * 45);
      cpu::PhiloxWords(0x0123456789abcdefull, 0xfedcba9876543210ull, first, 45, words.data());
      int64_t bad = 0;
      for (int64_t i = 0; i < 45; ++i) {
        auto w = Philox4x32(0x0123456789abcdefull, 0xfedcba9876543210ull, first + static_cast<uint64_t>(i));
        for (int j = 0; j < 4; ++j) bad += words[4 * i + j] != w[j];
      }
      CHECK(bad == 0);
    });
  }
}

TEST_CASE("dropout p = 0 keeps everything unscaled") {
  float x[] = {1, 2, 3, 4, 5}, y[5];
  DropoutForward(y, x, 5, DType::kF32, 0.0f, 1, 2, 3);
  for (int i = 0; i < 5; ++i) CHECK(y[i] == x[i]);
  CHECK_THROWS_AS(DropoutForward(y, x, 5, DType::kF32, 1.0f, 1, 2, 3), InvalidArgument);
}

TEST_CASE("SumSquares and AllFinite: closed form, cpu matches ref, NaN/Inf detected") {
  ForEachIsa([&](Isa) {
    for (int64_t n : kSizes) {
      for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}) {
        CAPTURE(n);
        CAPTURE(std::string(DTypeName(t)));
        // Values i % 5 - 2 in {-2..2}: exact in every dtype; sum of squares is closed form.
        Buffer x(t, n);
        double want = 0.0;
        for (int64_t i = 0; i < n; ++i) {
          double v = static_cast<double>(i % 5) - 2.0;
          x.Set(i, v);
          want += v * v;
        }
        CHECK(Ref().sum_squares(x.data(), n, t) == want);
        CHECK(Cpu().sum_squares(x.data(), n, t) == want);
        CHECK(Cpu().all_finite(x.data(), n, t));
        if (n == 0) continue;
        for (double bad : {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                           std::numeric_limits<double>::quiet_NaN()}) {
          Buffer y = x;
          y.Set(n - 1, bad);  // the last element: the scalar tail on every path
          CHECK_FALSE(Cpu().all_finite(y.data(), n, t));
          CHECK_FALSE(Ref().all_finite(y.data(), n, t));
          CHECK_FALSE(std::isfinite(Cpu().sum_squares(y.data(), n, t)));
          Buffer z = x;
          z.Set(0, bad);
          CHECK_FALSE(Cpu().all_finite(z.data(), n, t));
        }
      }
    }
  });
}

}  // TEST_SUITE
}  // namespace
}  // namespace zerorun::kernels::test
