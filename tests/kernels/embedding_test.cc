// Token + position embedding: closed form, finite differences (fp64 ref), repeated tokens, cpu
// against ref for every dtype and ISA, token range errors.
#include <doctest/doctest.h>

#include "kernel_test_util.h"
#include "zerorun/core/error.h"
#include "zerorun/kernels/ops.h"

namespace zerorun::kernels::test {
namespace {

TEST_SUITE("unit") {

TEST_CASE("embedding: closed form forward and backward, range check") {
  // V = 3, C = 2, B = 1, T = 3, tokens [2, 0, 2].
  float wte[] = {1, 2, 3, 4, 5, 6}, wpe[] = {10, 20, 30, 40, 50, 60}, out[6];
  int32_t tok[] = {2, 0, 2};
  EmbeddingForward(out, DType::kF32, tok, wte, wpe, DType::kF32, 1, 3, 2, 3);
  float want[] = {15, 26, 31, 42, 55, 66};
  for (int i = 0; i < 6; ++i) CHECK(out[i] == want[i]);
  float dout[] = {1, 2, 3, 4, 5, 6}, dwte[6] = {}, dwpe[6] = {};
  EmbeddingBackward(dwte, dwpe, DType::kF32, dout, DType::kF32, tok, 1, 3, 2, 3);
  float want_te[] = {3, 4, 0, 0, 6, 8};  // token 2 gets rows 0 and 2
  for (int i = 0; i < 6; ++i) CHECK(dwte[i] == want_te[i]);
  for (int i = 0; i < 6; ++i) CHECK(dwpe[i] == dout[i]);
  int32_t bad[] = {2, 3, 0};
  CHECK_THROWS_WITH_AS(EmbeddingForward(out, DType::kF32, bad, wte, wpe, DType::kF32, 1, 3, 2, 3),
                       doctest::Contains("tokens[1] = 3"), InvalidArgument);
}

TEST_CASE("cpu embedding matches ref for every dtype and ISA") {
  struct Dims { int64_t B, T, C, V; };
  std::vector<Dims> dims = {{0, 3, 4, 5}, {1, 1, 1, 1}, {3, 7, 7, 5}, {2, 5, 4099, 3}, {4, 128, 256, 1000}};
  for (auto d : dims) {
    for (DType t : StorageTypes()) {
      CAPTURE(d.C);
      CAPTURE(std::string(DTypeName(t)));
      std::vector<int32_t> tok(static_cast<size_t>(d.B * d.T));
      for (size_t i = 0; i < tok.size(); ++i) tok[i] = static_cast<int32_t>((i * i * 31 + 7) % d.V);
      Buffer wte = Buffer::Random(t, d.V * d.C, 1), wpe = Buffer::Random(t, d.T * d.C, 2);
      Buffer dout = Buffer::Random(t, d.B * d.T * d.C, 3);
      for (bool pos : {true, false}) {
        Buffer o1(t, d.B * d.T * d.C), o2(t, d.B * d.T * d.C);
        const void* pe = pos ? wpe.data() : nullptr;
        Ref().embedding_forward(o1.data(), t, tok.data(), wte.data(), pe, t, d.B, d.T, d.C, d.V);
        ForEachIsa([&](Isa) {
          Cpu().embedding_forward(o2.data(), t, tok.data(), wte.data(), pe, t, d.B, d.T, d.C, d.V);
          CheckOp(o2, o1, "embedding out");
        });
      }
      for (DType gt : {DType::kF32, t}) {
        Buffer te0 = Buffer::Random(gt, d.V * d.C, 4), pe0 = Buffer::Random(gt, d.T * d.C, 5);
        Buffer te1 = te0, pe1 = pe0;
        Ref().embedding_backward(te1.data(), pe1.data(), gt, dout.data(), t, tok.data(), d.B, d.T, d.C, d.V);
        ForEachIsa([&](Isa) {
          Buffer te2 = te0, pe2 = pe0;
          Cpu().embedding_backward(te2.data(), pe2.data(), gt, dout.data(), t, tok.data(), d.B, d.T, d.C, d.V);
          CheckOp(te2, te1, "dwte", 1e-5);
          CheckOp(pe2, pe1, "dwpe", 1e-5);
        });
      }
    }
  }
}

}  // TEST_SUITE
}  // namespace
}  // namespace zerorun::kernels::test
