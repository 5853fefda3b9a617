// Every layer's backward against finite differences (odd shapes, dropout included), 16-bit layers
// against fp32, and the loss's closed forms.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "tests/nn/gradcheck.h"
#include "zerorun/runtime/nn/activation.h"
#include "zerorun/runtime/nn/attention.h"
#include "zerorun/runtime/nn/dropout.h"
#include "zerorun/runtime/nn/embedding.h"
#include "zerorun/runtime/nn/linear.h"
#include "zerorun/runtime/nn/loss.h"
#include "zerorun/runtime/nn/mlp.h"
#include "zerorun/runtime/nn/norm.h"
#include "zerorun/runtime/nn/sequential.h"

namespace zerorun::nn {
namespace {

using testing::GradCheckUnary;
using testing::RandomizeParameters;
using testing::RandomTensor;

template <typename M>
void Check(std::unique_ptr<M> m, const Shape& x_shape, uint64_t seed, testing::GradCheckOptions o = {}) {
  m->Initialize(seed);
  RandomizeParameters(*m, seed);
  GradCheckUnary(*m, RandomTensor(x_shape, seed + 7), seed, o);
}

Tensor Tokens(const std::vector<int32_t>& ids, const Shape& shape) {
  Tensor t = Tensor::Empty(shape, DType::kI32);
  for (size_t i = 0; i < ids.size(); ++i) t.data_as<int32_t>()[i] = ids[i];
  return t;
}

// ||a - b|| / ||b||
double RelErr(const Tensor& a, const Tensor& b) {
  auto av = a.ToVector(), bv = b.ToVector();
  double d = 0, n = 0;
  for (size_t i = 0; i < av.size(); ++i) d += (av[i] - bv[i]) * (av[i] - bv[i]), n += bv[i] * bv[i];
  return std::sqrt(d / std::max(n, 1e-30));
}

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("nn.layers: Linear backward matches finite differences (with and without bias)") {
  Check(std::make_unique<Linear>(5, 7), {2, 3, 5}, 1);
  LinearOptions nb;
  nb.bias = false;
  Check(std::make_unique<Linear>(1, 3, nb), {4, 1}, 2);
  Check(std::make_unique<Linear>(9, 1), {3, 9}, 3);
}

TEST_CASE("nn.layers: LayerNorm and RMSNorm backward match finite differences") {
  Check(std::make_unique<LayerNorm>(7), {3, 7}, 4);
  Check(std::make_unique<LayerNorm>(1), {2, 1}, 5);  // var 0: output is the bias
  NormOptions no_affine;
  no_affine.affine = false;
  Check(std::make_unique<LayerNorm>(5, no_affine), {2, 2, 5}, 6);
  Check(std::make_unique<RMSNorm>(6), {5, 6}, 7);
}

TEST_CASE("nn.layers: activations backward match finite differences") {
  Check(std::make_unique<Gelu>(GeluKind::kTanh), {3, 7}, 8);
  Check(std::make_unique<Gelu>(GeluKind::kExact), {3, 7}, 9);
  Check(std::make_unique<Silu>(), {11}, 10);
  Check(std::make_unique<SwiGlu>(), {3, 2, 6}, 11);
}

TEST_CASE("nn.layers: dropout backward matches finite differences of the replayed mask") {
  Check(std::make_unique<Dropout>(0.3f), {5, 9}, 12);
}

TEST_CASE("nn.layers: embeddings") {
  Embedding e(11, 5);
  e.Initialize(13);
  Tensor tok = Tokens({3, 0, 10, 3, 7, 3}, {2, 3});
  Tensor y = e.Forward(tok);
  auto w = e.weight()->engine_data().ToVector();
  auto yv = y.ToVector();
  for (int c = 0; c < 5; ++c) CHECK(yv[2 * 5 + c] == w[10 * 5 + c]);
  Tensor dy = RandomTensor({2, 3, 5}, 14);
  CHECK_FALSE(e.Backward(dy).defined());
  // Row 3 was used three times: its gradient is the sum of the three output gradients.
  auto g = e.weight()->engine_grad().ToVector();
  auto dv = dy.ToVector();
  for (int c = 0; c < 5; ++c) CHECK(g[3 * 5 + c] == doctest::Approx(dv[0 * 5 + c] + dv[3 * 5 + c] + dv[5 * 5 + c]));
  for (int c = 0; c < 5; ++c) CHECK(g[1 * 5 + c] == 0.0f);
  CHECK_THROWS_AS(e.Forward(Tokens({11}, {1, 1})), InvalidArgument);
  CHECK_THROWS_AS(e.Forward(RandomTensor({1, 1}, 1)), InvalidArgument);
  Check(std::make_unique<PositionalEmbedding>(5, 4), {2, 3, 4}, 15);
  PositionalEmbedding pe(2, 4);
  pe.Initialize(1);
  CHECK_THROWS_AS(pe.Forward(RandomTensor({1, 3, 4}, 1)), InvalidArgument);
}

TEST_CASE("nn.layers: causal self-attention backward matches finite differences, output is causal") {
  AttentionOptions ao;
  ao.dropout = 0.2f;
  Check(std::make_unique<CausalSelfAttention>(6, 2, ao), {2, 5, 6}, 16, {.h = 1e-2f, .rtol = 3e-3, .atol = 3e-4});
  Check(std::make_unique<CausalSelfAttention>(4, 4), {1, 3, 4}, 17);
  // Changing a later position does not change earlier outputs.
  CausalSelfAttention a(8, 2);
  a.Initialize(18);
  Tensor x = RandomTensor({1, 4, 8}, 19);
  auto y1 = a.Forward(x).ToVector();
  x.data_as<float>()[3 * 8 + 1] += 1.0f;
  auto y2 = a.Forward(x).ToVector();
  for (int i = 0; i < 3 * 8; ++i) CHECK(y1[i] == y2[i]);
  CHECK(y1[3 * 8] != y2[3 * 8]);
  CHECK_THROWS_AS(CausalSelfAttention(6, 4), InvalidArgument);
}

TEST_CASE("nn.layers: the composed attention core agrees with the fused kernel") {
  AttentionOptions fo, co;
  fo.fused_kernel = true;  // the default
  co.fused_kernel = false;
  Check(std::make_unique<CausalSelfAttention>(6, 3, co), {2, 4, 6}, 26);
  for (DType dt : {DType::kF32, DType::kBF16}) {
    AttentionOptions ao;
    ao.fused_kernel = false;
    ao.dtype = dt;
    fo.dtype = dt;
    CausalSelfAttention composed(12, 3, ao), fused(12, 3, fo);
    composed.Initialize(27);
    fused.Initialize(27);
    Tensor x = RandomTensor({3, 7, 12}, 28, 1.0f, dt), dy = RandomTensor({3, 7, 12}, 29, 1.0f, dt);
    CHECK(RelErr(composed.Forward(x), fused.Forward(x)) < (dt == DType::kF32 ? 1e-6 : 1e-2));
    CHECK(RelErr(composed.Backward(dy), fused.Backward(dy)) < (dt == DType::kF32 ? 1e-6 : 1e-2));
    auto pc = composed.Parameters(), pf = fused.Parameters();
    for (size_t i = 0; i < pc.size(); ++i) {
      CHECK(RelErr(pc[i]->engine_grad(), pf[i]->engine_grad()) < (dt == DType::kF32 ? 1e-6 : 1e-2));
    }
  }
}

TEST_CASE("nn.layers: MLP, transformer blocks and Sequential match finite differences") {
  MlpOptions mo;
  mo.hidden = 6;
  Check(std::make_unique<Mlp>(4, mo), {2, 3, 4}, 20);
  mo.activation = MlpActivation::kSwiGlu;
  mo.dropout = 0.25f;
  Check(std::make_unique<Mlp>(4, mo), {2, 3, 4}, 21);
  BlockOptions bo;
  bo.n_head = 3;
  bo.attention.dropout = 0.1f;
  bo.mlp.dropout = 0.1f;
  Check(std::make_unique<TransformerBlock>(6, bo), {2, 4, 6}, 22, {.h = 1e-2f, .rtol = 5e-3, .atol = 5e-4});
  bo.rms_norm = true;
  bo.mlp.activation = MlpActivation::kGeluExact;
  Check(std::make_unique<TransformerBlock>(6, bo), {1, 3, 6}, 23, {.h = 1e-2f, .rtol = 5e-3, .atol = 5e-4});
  auto seq = std::make_unique<Sequential>();
  seq->Append(std::make_unique<Linear>(3, 5));
  seq->Append(std::make_unique<Gelu>());
  seq->Append(std::make_unique<Linear>(5, 2));
  Check(std::move(seq), {4, 3}, 24);
}

TEST_CASE("nn.layers: cross-entropy closed forms, ignore_index and gradient") {
  CrossEntropyLoss ce(-1);
  const int64_t N = 5, V = 7;
  // Uniform logits: loss = ln V for every counted row.
  Tensor zeros = Tensor::Zeros({N, V}, DType::kF32);
  Tensor targets = Tokens({0, 6, -1, 3, 2}, {N});
  CHECK(ce.Forward(zeros, targets) == doctest::Approx(std::log(7.0)));
  CHECK(ce.count() == 4);
  Tensor d = ce.Backward(2.0f);
  auto dv = d.ToVector();
  // (softmax - onehot) * scale / count
  CHECK(dv[0] == doctest::Approx((1.0 / 7 - 1) * 2.0 / 4));
  CHECK(dv[1] == doctest::Approx(1.0 / 7 * 2.0 / 4));
  for (int v = 0; v < V; ++v) CHECK(dv[2 * V + v] == 0.0f);  // ignored row
  // Finite differences of scale * loss.
  Tensor logits = RandomTensor({N, V}, 25, 2.0f);
  const float scale = 0.75f;
  ce.Forward(logits.Clone(), targets);
  auto grad = ce.Backward(scale).ToVector();
  for (int64_t i = 0; i < N * V; i += 3) {
    double num = testing::NumericalDerivative(logits, i, 1e-2f, [&] { return scale * ce.Forward(logits, targets); });
    CHECK(grad[i] == doctest::Approx(num).epsilon(2e-3).scale(1.0));
  }
  CHECK_THROWS_AS(ce.Forward(logits, Tokens({0, 1, 7, 0, 0}, {N})), InvalidArgument);
  CHECK_THROWS_AS(ce.Forward(logits, Tokens({0, 1}, {2})), InvalidArgument);
  // Every target ignored: loss 0, gradient 0.
  CHECK(ce.Forward(logits.Clone(), Tokens({-1, -1, -1, -1, -1}, {N})) == 0.0f);
  for (float v : ce.Backward(1.0f).ToVector()) CHECK(v == 0.0f);
}

TEST_CASE("nn.layers: bf16 and fp16 blocks track fp32 within dtype tolerances") {
  struct Tol {
    DType dtype;
    double rel;
  };
  for (bool variant : {false, true})
  for (Tol t : {Tol{DType::kBF16, 3e-2}, Tol{DType::kF16, 5e-3}}) {
    auto make = [variant](DType dt) {
      BlockOptions bo;
      bo.n_head = 2;
      bo.attention.dtype = dt;
      if (variant) {  // RMSNorm and SwiGLU
        bo.rms_norm = true;
        bo.mlp.activation = MlpActivation::kSwiGlu;
      }
      return std::make_unique<TransformerBlock>(16, bo);
    };
    auto ref = make(DType::kF32);
    auto low = make(t.dtype);
    ref->Initialize(30);
    low->Initialize(30);
    RandomizeParameters(*ref, 31, 0.3f);
    // Same values in both: the fp32 model gets the 16-bit-rounded parameters and input.
    auto rp = ref->Parameters(), lp = low->Parameters();
    for (size_t i = 0; i < rp.size(); ++i) {
      lp[i]->engine_data().CopyFrom(rp[i]->engine_data());
      rp[i]->engine_data().CopyFrom(lp[i]->engine_data());
    }
    Tensor x_low = RandomTensor({2, 9, 16}, 32, 1.0f, t.dtype);
    Tensor x_ref = x_low.To(DType::kF32);
    Tensor y_ref = ref->Forward(x_ref), y_low = low->Forward(x_low);
    CHECK(RelErr(y_low, y_ref) < t.rel);
    Tensor dy_low = RandomTensor({2, 9, 16}, 33, 1.0f, t.dtype);
    Tensor dx_ref = ref->Backward(dy_low.To(DType::kF32)), dx_low = low->Backward(dy_low);
    CHECK(RelErr(dx_low, dx_ref) < t.rel);
    for (size_t i = 0; i < rp.size(); ++i) {
      INFO(rp[i]->name() << " " << DTypeName(t.dtype));
      CHECK(RelErr(lp[i]->engine_grad(), rp[i]->engine_grad()) < 2 * t.rel);
    }
  }
}

}  // TEST_SUITE
}  // namespace zerorun::nn
