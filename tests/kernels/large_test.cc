// Larger shapes than the unit tests afford (label "slow"): GEMM panels beyond one 16-bit panel,
// attention with several causal blocks and an odd T, norms and cross-entropy on wide rows.
#include <doctest/doctest.h>

#include <cmath>

#include "kernel_test_util.h"
#include "zerorun/kernels/ops.h"

namespace zerorun::kernels::test {
namespace {

TEST_SUITE("slow") {

TEST_CASE("cpu matches ref on large shapes") {
  for (DType t : StorageTypes()) {
    CAPTURE(std::string(DTypeName(t)));
    // GEMM: a large product, and one whose wide C (n = 20000) makes 16-bit panels of 256 rows.
    struct Dims { int64_t m, n, k; };
    for (Dims d : {Dims{1100, 300, 290}, Dims{700, 20000, 3}}) {
      Buffer a = Buffer::Random(t, d.m * d.k, 1), b = Buffer::Random(t, d.n * d.k, 2);
      Buffer c1 = Buffer::Random(t, d.m * d.n, 3), bias = Buffer::Random(t, d.n, 4), c2 = c1;
      GemmParams p;
      p.trans_b = Trans::kT, p.m = d.m, p.n = d.n, p.k = d.k, p.beta = 0.5f;
      p.a = a.data(), p.a_type = t, p.lda = d.k, p.b = b.data(), p.b_type = t, p.ldb = d.k;
      p.c_type = t, p.ldc = d.n, p.bias = bias.data(), p.bias_type = t;
      p.c = c1.data();
      Ref().gemm(p);
      p.c = c2.data();
      Cpu().gemm(p);
      CheckOp(c2, c1, "large gemm", 1e-5);
    }
    // Attention: T = 257 spans five causal blocks of 64, the last one row long.
    int64_t B = 1, T = 257, C = 96, NH = 3;
    Buffer qkv = Buffer::Random(t, B * T * 3 * C, 5, -2, 2), dout = Buffer::Random(t, B * T * C, 6);
    Buffer o1(t, B * T * C), o2(t, B * T * C), a1(DType::kF32, B * NH * T * T), a2(DType::kF32, B * NH * T * T);
    Buffer g1(t, B * T * 3 * C), g2(t, B * T * 3 * C);
    // With 16-bit products run natively (oneDNN on AVX512-BF16/AMX) P and dS are rounded to the dtype
    // before their products: the bound of attention_test.cc, 2^-7 of the output's scale.
    const bool native = DefaultGemmBackend() == GemmBackend::kOnednn && cpu::OnednnNative16(t);
    const auto check = [&](const Buffer& got, const Buffer& want, const char* what) {
      if (native) {
        CheckClose(got, want, 1.0, std::ldexp(want.MaxAbs(), -7), what);
      } else {
        CheckOp(got, want, what, 1e-5);
      }
    };
    Ref().attention_forward(o1.data(), a1.f32(), qkv.data(), B, T, C, NH, t);
    Cpu().attention_forward(o2.data(), a2.f32(), qkv.data(), B, T, C, NH, t);
    check(o2, o1, "large attention out");
    CheckOp(a2, a1, "large attention probabilities", 1e-5);
    Ref().attention_backward(g1.data(), dout.data(), qkv.data(), a1.f32(), B, T, C, NH, t);
    Cpu().attention_backward(g2.data(), dout.data(), qkv.data(), a1.f32(), B, T, C, NH, t);
    check(g2, g1, "large attention dqkv");
    // LayerNorm on wide rows and cross-entropy over a GPT-2 sized vocabulary.
    int64_t N = 64, W = 8192, V = 50257;
    Buffer x = Buffer::Random(t, N * W, 7, -3, 5), y1(t, N * W), y2(t, N * W);
    Buffer m1(DType::kF32, N), r1(DType::kF32, N), m2(DType::kF32, N), r2(DType::kF32, N);
    Ref().layernorm_forward(y1.data(), m1.f32(), r1.f32(), x.data(), nullptr, nullptr, N, W, 1e-5f, t, t);
    Cpu().layernorm_forward(y2.data(), m2.f32(), r2.f32(), x.data(), nullptr, nullptr, N, W, 1e-5f, t, t);
    CheckOp(y2, y1, "wide layernorm");
    Buffer logits = Buffer::Random(t, 16 * V, 8, -20, 20), d1(t, 16 * V), d2(t, 16 * V);
    std::vector<int32_t> targets(16);
    for (int i = 0; i < 16; ++i) targets[i] = i * 3137;
    auto l1 = Ref().cross_entropy(d1.data(), nullptr, logits.data(), targets.data(), 16, V, t, -1, 1.0f);
    auto l2 = Cpu().cross_entropy(d2.data(), nullptr, logits.data(), targets.data(), 16, V, t, -1, 1.0f);
    CHECK(l2.loss == doctest::Approx(l1.loss).epsilon(1e-6));
    CheckOp(d2, d1, "large vocabulary dlogits", 1e-6);
  }
}

}  // TEST_SUITE
}  // namespace
}  // namespace zerorun::kernels::test
