// The example GPT: whole-model gradient check, weight tying, determinism, init independence, 16-bit
// agreement, and the observer seam driven the way ZeRO-3 drives it (gather/release per module).
#include <doctest/doctest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/nn/gradcheck.h"
#include "zerorun/examples/gpt/gpt.h"

namespace zerorun::nn {
namespace {

using gpt::Gpt;
using gpt::GptConfig;

GptConfig Tiny() {
  GptConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.d_model = 8;
  c.vocab_size = 11;
  c.seq_len = 6;
  return c;
}

Tensor Ids(int64_t B, int64_t T, int64_t V, uint64_t seed, int32_t ignore_every = 0) {
  Tensor t = Tensor::Empty({B, T}, DType::kI32);
  for (int64_t i = 0; i < B * T; ++i) {
    t.data_as<int32_t>()[i] = static_cast<int32_t>(Philox4x32(seed, 0, static_cast<uint64_t>(i))[0] % V);
    if (ignore_every && i % ignore_every == ignore_every - 1) t.data_as<int32_t>()[i] = -100;
  }
  return t;
}

std::vector<float> AllGrads(Module& m) {
  std::vector<float> out;
  for (Parameter* p : m.Parameters()) {
    auto g = p->engine_grad().ToVector();
    out.insert(out.end(), g.begin(), g.end());
  }
  return out;
}

// Drives the seam as ZeRO-3 does: a parameter is available only between its module's Pre* and Post*.
class GatherReleaseObserver final : public ModuleObserver {
 public:
  explicit GatherReleaseObserver(Module& root) {
    for (Parameter* p : root.Parameters()) p->SetAvailable(false);
  }
  void PreForward(Module& m, bool recompute) override {
    Gather(m);
    recomputes += recompute;
  }
  void PostForward(Module& m, bool) override { Release(m); }
  void PreBackward(Module& m) override { Gather(m); }
  void PostBackward(Module& m) override { Release(m); }
  void GradsReady(Module& m, const std::vector<Parameter*>& params) override {
    for (Parameter* p : params) {
      ready_count[p->name()]++;
      ready_order.push_back(p->name());
      CHECK(std::find(m.DirectParameters().begin(), m.DirectParameters().end(), p) != m.DirectParameters().end());
    }
  }
  std::map<std::string, int> ready_count;
  std::vector<std::string> ready_order;
  int recomputes = 0;

 private:
  void Gather(Module& m) {
    for (Parameter* p : m.DirectParameters()) {
      CHECK(live_[p] >= 0);
      if (live_[p]++ == 0) p->SetAvailable(true);
    }
  }
  void Release(Module& m) {
    for (Parameter* p : m.DirectParameters()) {
      if (--live_[p] == 0) p->SetAvailable(false);
    }
  }
  std::map<Parameter*, int> live_;
};

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("gpt: names, counts, tying") {
  Gpt m(Tiny());
  m.Initialize(1);
  std::vector<std::string> names;
  for (Parameter* p : m.Parameters()) names.push_back(p->name());
  CHECK(names.front() == "wte.weight");
  CHECK(names[1] == "wpe.weight");
  CHECK(m.FindParameter("h.1.attn.qkv.weight") != nullptr);
  CHECK(m.FindParameter("h.1.mlp.proj.bias") != nullptr);
  CHECK(m.FindParameter("lm_head.weight") == nullptr);  // tied: one parameter
  CHECK(m.lm_head()->weight() == m.wte()->weight());
  // wte 11*8 + wpe 6*8 + 2 blocks * (ln 16 + qkv 8*24+24 + proj 64+8 + ln 16 + fc 8*32+32 + proj 32*8+8) + ln_f 16
  const int64_t block = 16 + (192 + 24) + (64 + 8) + 16 + (256 + 32) + (256 + 8);
  CHECK(m.NumParameterElements() == 88 + 48 + 2 * block + 16);
  GptConfig untied = Tiny();
  untied.tied_embeddings = false;
  Gpt u(untied);
  CHECK(u.FindParameter("lm_head.weight") != nullptr);
  CHECK(u.NumParameterElements() == m.NumParameterElements() + 88);
  // No weight decay on biases and norm gains.
  CHECK_FALSE(m.FindParameter("h.0.ln_1.weight")->options().weight_decay);
  CHECK_FALSE(m.FindParameter("h.0.attn.qkv.bias")->options().weight_decay);
  CHECK(m.FindParameter("h.0.attn.qkv.weight")->options().weight_decay);
}

TEST_CASE("gpt: whole-model gradient check on a tiny config, dropout and ignore_index included") {
  GptConfig c = Tiny();
  c.dropout = 0.1f;
  Gpt m(c);
  m.Initialize(2);
  testing::RandomizeParameters(m, 3, 0.3f);
  Tensor tokens = Ids(2, 5, c.vocab_size, 4), targets = Ids(2, 5, c.vocab_size, 5, 4);
  testing::RngRewind rewind(m);
  const float scale = 3.0f;
  m.ZeroGrad();
  m.ForwardLoss(tokens, targets);
  m.BackwardLoss(scale);
  auto loss = [&] {
    rewind();
    return static_cast<double>(scale) * m.ForwardLoss(tokens, targets);
  };
  testing::GradCheckOptions o{.h = 1e-2f, .rtol = 1e-2, .atol = 3e-4, .probes = 8};
  for (Parameter* p : m.Parameters()) {
    Tensor g = p->engine_grad().Clone();
    for (int64_t i : testing::Probes(p->numel(), o.probes)) {
      testing::CheckClose(testing::GetElem(g, i), testing::NumericalDerivative(p->engine_data(), i, o.h, loss), o,
                          p->name() + "[" + std::to_string(i) + "]");
    }
  }
}

TEST_CASE("gpt: the tied gradient is the sum of the embedding's and the head's gradients") {
  GptConfig tied = Tiny(), untied = Tiny();
  untied.tied_embeddings = false;
  Gpt a(tied), b(untied);
  a.Initialize(6);
  b.Initialize(6);
  b.FindParameter("lm_head.weight")->engine_data().CopyFrom(b.FindParameter("wte.weight")->engine_data());
  Tensor tokens = Ids(2, 6, 11, 7), targets = Ids(2, 6, 11, 8);
  CHECK(a.ForwardLoss(tokens, targets) == b.ForwardLoss(tokens, targets));
  a.BackwardLoss(1.0f);
  b.BackwardLoss(1.0f);
  auto ga = a.FindParameter("wte.weight")->engine_grad().ToVector();
  auto ge = b.FindParameter("wte.weight")->engine_grad().ToVector();
  auto gh = b.FindParameter("lm_head.weight")->engine_grad().ToVector();
  for (size_t i = 0; i < ga.size(); ++i) CHECK(ga[i] == doctest::Approx(ge[i] + gh[i]).epsilon(1e-5).scale(1e-6));
}

TEST_CASE("gpt: same seed gives bitwise the same loss and gradients; initial values do not depend on depth") {
  auto run = [](uint64_t seed) {
    GptConfig c = Tiny();
    c.dropout = 0.2f;
    Gpt m(c);
    m.Initialize(seed);
    std::vector<float> out;
    for (int step = 0; step < 2; ++step) {
      out.push_back(m.ForwardLoss(Ids(3, 6, 11, 9 + step), Ids(3, 6, 11, 19 + step)));
      m.BackwardLoss(0.5f);
    }
    auto g = AllGrads(m);
    out.insert(out.end(), g.begin(), g.end());
    return out;
  };
  CHECK(run(10) == run(10));
  CHECK(run(10) != run(11));
  GptConfig deep = Tiny();
  deep.n_layer = 3;
  Gpt two(Tiny()), three(deep);
  two.Initialize(12);
  three.Initialize(12);
  int compared = 0;
  for (Parameter* p : two.Parameters()) {
    if (p->name().find(".proj.weight") != std::string::npos) {
      continue;  // GPT-2's residual init scales with 1/sqrt(2 n_layer) on purpose
    }
    CHECK(p->engine_data().ToVector() == three.FindParameter(p->name())->engine_data().ToVector());
    ++compared;
  }
  CHECK(compared == static_cast<int>(two.Parameters().size()) - 4);
}

TEST_CASE("gpt: runs under a gather/release observer; grads-final once per parameter, wte last") {
  for (bool checkpointing : {false, true}) {
    GptConfig c = Tiny();
    c.dropout = 0.1f;
    Gpt plain(c), gated(c);
    plain.Initialize(13);
    gated.Initialize(13);
    GatherReleaseObserver obs(gated);
    gated.SetObserver(&obs);
    if (checkpointing) {
      for (const auto& [name, block] : gated.blocks()->children()) block->SetActivationCheckpointing(true);
    }
    Tensor tokens = Ids(2, 6, 11, 14), targets = Ids(2, 6, 11, 15);
    CHECK(plain.ForwardLoss(tokens, targets) == gated.ForwardLoss(tokens, targets));
    plain.BackwardLoss(1.0f);
    gated.BackwardLoss(1.0f);
    CHECK(AllGrads(plain) == AllGrads(gated));
    for (Parameter* p : gated.Parameters()) CHECK(obs.ready_count[p->name()] == 1);
    CHECK(obs.ready_order.back() == "wte.weight");
    CHECK(obs.recomputes == (checkpointing ? 2 * 12 : 0));  // per block: itself + 11 descendants
  }
}

TEST_CASE("gpt: bf16 and fp16 models track fp32") {
  for (auto [dt, tol] : {std::pair{DType::kBF16, 2e-2}, std::pair{DType::kF16, 3e-3}}) {
    GptConfig c = Tiny();
    c.d_model = 16;
    Gpt ref(c);
    c.dtype = dt;
    Gpt low(c);
    ref.Initialize(16);
    low.Initialize(16);  // same names, same seed: the 16-bit values are the rounded fp32 values
    for (Parameter* p : ref.Parameters()) p->engine_data().CopyFrom(low.FindParameter(p->name())->engine_data());
    Tensor tokens = Ids(2, 6, 11, 17), targets = Ids(2, 6, 11, 18);
    const float lr = ref.ForwardLoss(tokens, targets), ll = low.ForwardLoss(tokens, targets);
    CHECK(ll == doctest::Approx(lr).epsilon(tol));
    ref.BackwardLoss(1.0f);
    low.BackwardLoss(1.0f);
    auto gr = AllGrads(ref), gl = AllGrads(low);
    double d = 0, n = 0;
    for (size_t i = 0; i < gr.size(); ++i) d += (gr[i] - gl[i]) * (gr[i] - gl[i]), n += gr[i] * gr[i];
    INFO(DTypeName(dt));
    CHECK(std::sqrt(d / n) < 5 * tol);
  }
}

}  // TEST_SUITE
}  // namespace zerorun::nn

namespace zerorun::nn {
TEST_SUITE("unit") {

TEST_CASE("gpt: activations are freed by backward; checkpointing lowers the activation peak") {
  auto peak = [](bool checkpointing) {
    MemoryAccount acct("gpt");
    ScopedMemoryAccount scope(&acct);
    GptConfig c = Tiny();
    c.n_layer = 4;
    c.d_model = 32;
    c.seq_len = 16;
    c.dropout = 0.1f;
    Gpt m(c);
    m.Initialize(40);
    if (checkpointing) {
      for (const auto& [name, block] : m.blocks()->children()) block->SetActivationCheckpointing(true);
    }
    Tensor tokens = Ids(4, 16, 11, 41), targets = Ids(4, 16, 11, 42);
    acct.ResetPeaks();
    const int64_t before = acct.Current(MemCategory::kActivations);
    m.ForwardLoss(tokens, targets);
    m.BackwardLoss(1.0f);
    CHECK(acct.Current(MemCategory::kActivations) == before);  // nothing saved survives backward
    return acct.Peak(MemCategory::kActivations) - before;
  };
  const int64_t plain = peak(false), ckpt = peak(true);
  CHECK(plain > 0);
  CHECK(ckpt < plain * 3 / 4);
}

TEST_CASE("gpt: eval-mode logits equal the training forward without dropout") {
  Gpt m(Tiny());
  m.Initialize(43);
  Tensor tokens = Ids(2, 6, 11, 44), targets = Ids(2, 6, 11, 45);
  const float loss = m.ForwardLoss(tokens, targets);
  m.BackwardLoss(1.0f);
  m.Eval();
  Tensor logits = m.Logits(tokens);
  CHECK(logits.shape() == Shape{2, 6, 11});
  CrossEntropyLoss ce;
  ce.Eval();
  CHECK(ce.Forward(logits, targets) == loss);
  CHECK_THROWS_AS(m.BackwardLoss(1.0f), InvalidArgument);
}

}  // TEST_SUITE
}  // namespace zerorun::nn
