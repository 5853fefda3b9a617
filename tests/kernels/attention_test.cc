// Causal self-attention: finite differences (fp64 ref), causality, probabilities, cpu against ref.
#include <doctest/doctest.h>

#include "kernel_test_util.h"
#include "zerorun/kernels/cpu/onednn.h"
#include "zerorun/kernels/gemm_backend.h"
#include "zerorun/kernels/ops.h"

namespace zerorun::kernels::test {
namespace {

constexpr DType kF64 = DType::kF64;

TEST_SUITE("unit") {

TEST_CASE("attention backward matches finite differences (fp64 ref)") {
  int64_t B = 2, T = 5, C = 6, NH = 3;
  Buffer qkv = Buffer::Random(kF64, B * T * 3 * C, 1, -2, 2), dout = Buffer::Random(kF64, B * T * C, 2);
  Buffer out(kF64, B * T * C), att(DType::kF32, B * NH * T * T), dqkv(kF64, B * T * 3 * C);
  auto loss = [&] {
    Ref().attention_forward(out.data(), att.f32(), qkv.data(), B, T, C, NH, kF64);
    return Dot(out, dout);
  };
  loss();
  Ref().attention_backward(dqkv.data(), dout.data(), qkv.data(), att.f32(), B, T, C, NH, kF64);
  // The saved probabilities are fp32, so the analytic gradient carries ~1e-7 relative error.
  CheckGrad(dqkv, NumericGrad(qkv, loss), 1e-6, "dqkv");
}

TEST_CASE("attention is causal and its probabilities are a masked softmax") {
  int64_t B = 2, T = 9, C = 8, NH = 2;
  for (const KernelTable* k : {&Ref(), &Cpu()}) {
    CAPTURE(k->name);
    Buffer qkv = Buffer::Random(DType::kF32, B * T * 3 * C, 1), out(DType::kF32, B * T * C);
    Buffer att(DType::kF32, B * NH * T * T);
    k->attention_forward(out.data(), att.f32(), qkv.data(), B, T, C, NH, DType::kF32);
    for (int64_t r = 0; r < B * NH * T; ++r) {
      int64_t t = r % T;
      double sum = 0.0;
      for (int64_t s = 0; s < T; ++s) {
        double p = att.Get(r * T + s);
        if (s > t) CHECK(p == 0.0);
        sum += p;
      }
      CHECK(sum == doctest::Approx(1.0).epsilon(1e-6));
    }
    // t = 0 attends only to itself: out equals v at position 0.
    for (int64_t c = 0; c < C; ++c) CHECK(out.Get(c) == doctest::Approx(qkv.Get(2 * C + c)).epsilon(1e-6));
    // Changing position 6 of batch 1 (q, k and v) leaves every earlier output unchanged.
    Buffer qkv2 = qkv, out2(DType::kF32, B * T * C);
    for (int64_t c = 0; c < 3 * C; ++c) qkv2.Set((1 * T + 6) * 3 * C + c, 5.0);
    k->attention_forward(out2.data(), att.f32(), qkv2.data(), B, T, C, NH, DType::kF32);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = 0; t < T; ++t) {
        bool same = true;
        for (int64_t c = 0; c < C; ++c) same &= out.Get((b * T + t) * C + c) == out2.Get((b * T + t) * C + c);
        CHECK(same == (b == 0 || t < 6));
      }
    }
  }
}

TEST_CASE("cpu attention matches ref for every dtype and ISA") {
  struct Dims { int64_t B, T, C, NH; };
  // Beside the small ones: the benchmark GPT's head (HS 64), and HS 128 with T 70 (two column tiles of
  // the fused AVX-512 units, rows neither a multiple of their 6-row tiles nor of the 16 x 16 transposes).
  std::vector<Dims> dims = {{0, 4, 8, 2},      {1, 1, 4, 1},     {2, 7, 12, 3}, {1, 33, 64, 4},
                            {2, 128, 64, 2},   {1, 128, 256, 4}, {1, 70, 256, 2}};
  for (auto d : dims) {
    for (DType t : StorageTypes()) {
      CAPTURE(d.T);
      CAPTURE(d.C);
      CAPTURE(std::string(DTypeName(t)));
      int64_t n_qkv = d.B * d.T * 3 * d.C, n_out = d.B * d.T * d.C, n_att = d.B * d.NH * d.T * d.T;
      Buffer qkv = Buffer::Random(t, n_qkv, 1, -2, 2), dout = Buffer::Random(t, n_out, 2);
      Buffer o1(t, n_out), o2(t, n_out), a1(DType::kF32, n_att), a2(DType::kF32, n_att);
      Buffer g1(t, n_qkv), g2(t, n_qkv);
      Ref().attention_forward(o1.data(), a1.f32(), qkv.data(), d.B, d.T, d.C, d.NH, t);
      Ref().attention_backward(g1.data(), dout.data(), qkv.data(), a1.f32(), d.B, d.T, d.C, d.NH, t);
      for (GemmBackend backend : GemmBackends()) {
        SetGemmBackend(backend);
        CAPTURE(std::string(GemmBackendName(backend)));
        // 16-bit products run natively here: P and dS are rounded to the dtype before their products
        // (8 mantissa bits for bf16: up to 2^-9 relative per term), so outputs get a bound of 2^-7 of
        // their scale instead of one ulp.
        const bool native = backend == GemmBackend::kOnednn && cpu::OnednnNative16(t);
        const auto check = [&](const Buffer& got, const Buffer& want, const char* what) {
          if (native) {
            CheckClose(got, want, 1.0, std::ldexp(want.MaxAbs(), -7), what);
          } else {
            CheckOp(got, want, what, 1e-5);
          }
        };
        ForEachIsa([&](Isa) {
          Cpu().attention_forward(o2.data(), a2.f32(), qkv.data(), d.B, d.T, d.C, d.NH, t);
          check(o2, o1, "attention out");
          CheckOp(a2, a1, "attention probabilities", 1e-5);  // fp32 from 16-bit q, k: exact products
          Cpu().attention_backward(g2.data(), dout.data(), qkv.data(), a1.f32(), d.B, d.T, d.C, d.NH, t);
          check(g2, g1, "attention dqkv");
        });
      }
      SetGemmBackend(DefaultGemmBackend());
    }
  }
}

}  // TEST_SUITE
}  // namespace
}  // namespace zerorun::kernels::test
