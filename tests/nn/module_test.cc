// Module API: names, tree walks, observer order, grads-final for tied parameters, accumulation,
// access-window checks (death tests), train/eval, activation checkpointing replay.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/nn/test_util.h"
#include "zerorun/runtime/nn/dropout.h"
#include "zerorun/runtime/nn/module.h"
#include "zerorun/runtime/nn/sequential.h"

namespace zerorun::nn {
namespace {

// y[r, i] = x[r, i] * w[i] + b[i] for x (R, N): a minimal layer written against the public API.
class Affine final : public Module {
 public:
  explicit Affine(int64_t n, ParameterPtr tied_weight = nullptr) : Module("Affine") {
    weight_ = tied_weight ? AddParameter("weight", tied_weight)
                          : AddParameter("weight", {n}, DType::kF32, Init::Normal(1.0f, 0.5f));
    bias_ = AddParameter("bias", {n}, DType::kF32, Init::Uniform(-0.1f, 0.1f), ParamOptions::NoDecay());
  }
  Parameter* weight() const { return weight_; }
  Parameter* bias() const { return bias_; }

 protected:
  Tensor OnForward(const Tensor& x) override {
    if (training()) x_ = x;
    const int64_t n = weight_->numel(), rows = x.numel() / n;
    const float* w = weight_->data().data_as<float>();
    const float* b = bias_->data().data_as<float>();
    Tensor y = NewActivation(x.shape(), DType::kF32);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < n; ++i)
        y.data_as<float>()[r * n + i] = x.data_as<float>()[r * n + i] * w[i] + b[i];
    return y;
  }
  Tensor OnBackward(const Tensor& dy) override {
    const int64_t n = weight_->numel(), rows = dy.numel() / n;
    const float* w = weight_->data().data_as<float>();
    float* dw = weight_->grad().data_as<float>();
    float* db = bias_->grad().data_as<float>();
    Tensor dx = NewActivation(dy.shape(), DType::kF32);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < n; ++i) {
        const float g = dy.data_as<float>()[r * n + i];
        dw[i] += g * x_.data_as<float>()[r * n + i];
        db[i] += g;
        dx.data_as<float>()[r * n + i] = g * w[i];
      }
    return dx;
  }
  void OnReleaseActivations() override { x_ = Tensor(); }

 private:
  Parameter* weight_;
  Parameter* bias_;
  Tensor x_;
};

// Two Affines sharing one weight, a dropout between them: tied parameters and RNG replay.
class TiedPair final : public Module {
 public:
  TiedPair(int64_t n, float p) : Module("TiedPair") {
    first_ = AddModule("first", std::make_unique<Affine>(n));
    drop_ = AddModule("drop", std::make_unique<Dropout>(p));
    second_ = AddModule("second", std::make_unique<Affine>(n, first_->SharedParameter(first_->weight())));
  }
  Affine* first_;
  Dropout* drop_;
  Affine* second_;

 protected:
  Tensor OnForward(const Tensor& x) override { return second_->Forward(drop_->Forward(first_->Forward(x))); }
  Tensor OnBackward(const Tensor& dy) override {
    return first_->Backward(drop_->Backward(second_->Backward(dy)));
  }
};

// Touches its child's parameter directly: the access check must catch it.
class Peeker final : public Module {
 public:
  Peeker() : Module("Peeker") { child_ = AddModule("child", std::make_unique<Affine>(3)); }
  Affine* child_;

 protected:
  Tensor OnForward(const Tensor& x) override {
    (void)child_->weight()->data();
    return x;
  }
};

class Recorder final : public ModuleObserver {
 public:
  std::vector<std::string> events;
  void PreForward(Module& m, bool recompute) override { events.push_back((recompute ? "re+" : "f+") + m.path()); }
  void PostForward(Module& m, bool recompute) override { events.push_back((recompute ? "re-" : "f-") + m.path()); }
  void PreBackward(Module& m) override { events.push_back("b+" + m.path()); }
  void PostBackward(Module& m) override { events.push_back("b-" + m.path()); }
  void GradsReady(Module& m, const std::vector<Parameter*>& params) override {
    std::string s = "ready@" + m.path() + ":";
    for (Parameter* p : params) s += p->name() + ",";
    events.push_back(s);
  }
};

Tensor Ramp(int64_t rows, int64_t n, float scale = 0.1f) {
  std::vector<float> v(static_cast<size_t>(rows * n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * static_cast<float>(static_cast<int>(i % 7) - 3);
  return Tensor::FromVector(v, {rows, n});
}

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& e : v) s += e + " ";
  return s;
}

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("nn.module: dotted names follow the tree, also when a subtree is attached later") {
  auto inner = std::make_unique<Sequential>();
  inner->Append(std::make_unique<Affine>(4));
  inner->Append(std::make_unique<TiedPair>(4, 0.0f));
  CHECK(inner->FindParameter("1.first.weight") != nullptr);  // named before attaching
  Sequential root;
  auto* outer = root.Append(std::make_unique<Sequential>());
  (void)outer;
  auto* h = root.Append(std::move(inner));
  std::vector<std::string> names;
  for (Parameter* p : root.Parameters()) names.push_back(p->name());
  // The tied weight appears once, named by its creator.
  CHECK(names == std::vector<std::string>{"1.0.weight", "1.0.bias", "1.1.first.weight", "1.1.first.bias",
                                          "1.1.second.bias"});
  auto* pair = static_cast<TiedPair*>(h->at(1));
  CHECK(pair->path() == "1.1");
  CHECK(pair->second_->DirectParameters().size() == 2);
  CHECK(pair->second_->DirectParameters()[0] == pair->first_->weight());
  CHECK(pair->second_->weight()->name() == "1.1.first.weight");
  CHECK(root.NumParameterElements() == 5 * 4);
  CHECK(root.Modules().size() == 8);  // root, 0, 1, 1.0, 1.1, first, drop, second
  CHECK(root.FindParameter("1.1.second.bias") == pair->second_->bias());
  CHECK(root.FindParameter("nope") == nullptr);
}

TEST_CASE("nn.module: bad names and double registration are refused") {
  Sequential s;
  auto* a = s.Append(std::make_unique<Affine>(2));
  struct Bad final : Module {
    Bad() : Module("Bad") {}
    void Try(std::string n) { AddParameter(std::move(n), {1}, DType::kF32, Init::Zeros()); }
    void Tie(ParameterPtr p) { AddParameter("t", p); AddParameter("u", p); }
  } bad;
  CHECK_THROWS_AS(bad.Try("a.b"), InvalidArgument);
  CHECK_THROWS_AS(bad.Try(""), InvalidArgument);
  bad.Try("x");
  CHECK_THROWS_AS(bad.Try("x"), InvalidArgument);
  CHECK_THROWS_AS(bad.Tie(a->SharedParameter(a->weight())), InvalidArgument);
  CHECK_THROWS_AS(a->SharedParameter(nullptr), InvalidArgument);
  CHECK_THROWS_AS(Dropout(1.0f), InvalidArgument);
  CHECK_THROWS_AS(Dropout(-0.1f), InvalidArgument);
}

TEST_CASE("nn.module: observer order and grads-final fire once for a tied parameter, after its last use") {
  TiedPair m(3, 0.0f);
  m.Initialize(7);
  Recorder rec;
  m.SetObserver(&rec);
  Tensor y = m.Forward(Ramp(2, 3));
  m.Backward(Ramp(2, 3, 1.0f));
  const std::string expected =
      "f+ f+first f-first f+drop f-drop f+second f-second f- "
      "b+ b+second ready@second:second.bias, b-second b+drop b-drop "
      "b+first ready@first:first.weight,first.bias, b-first b- ";
  CHECK(Join(rec.events) == expected);
  CHECK(m.first_->weight()->pending_backward_uses() == 0);
  CHECK(m.pending_backward() == 0);
}

TEST_CASE("nn.module: tied weight gradient is the sum of both uses; backward accumulates") {
  const int64_t n = 3;
  TiedPair m(n, 0.0f);
  m.Initialize(11);
  Tensor x = Ramp(2, n);
  Tensor dy = Ramp(2, n, 1.0f);
  m.Forward(x);
  m.Backward(dy);
  // Closed form: h = x*w + b1, y = h*w + b2. dL/dw = sum_r dy*h + (dy*w)*x.
  auto w = m.first_->weight()->engine_data().ToVector();
  auto b1 = m.first_->bias()->engine_data().ToVector();
  auto xv = x.ToVector(), dyv = dy.ToVector();
  std::vector<double> dw(n, 0.0);
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t i = 0; i < n; ++i) {
      double h = xv[r * n + i] * w[i] + b1[i];
      dw[i] += dyv[r * n + i] * h + dyv[r * n + i] * w[i] * xv[r * n + i];
    }
  auto g = m.first_->weight()->engine_grad().ToVector();
  for (int64_t i = 0; i < n; ++i) CHECK(g[i] == doctest::Approx(dw[i]).epsilon(1e-5));
  // A second pass adds the same amount again; ZeroGrad clears.
  m.Forward(x);
  m.Backward(dy);
  auto g2 = m.first_->weight()->engine_grad().ToVector();
  for (int64_t i = 0; i < n; ++i) CHECK(g2[i] == doctest::Approx(2 * dw[i]).epsilon(1e-5));
  m.ZeroGrad();
  for (float v : m.first_->weight()->engine_grad().ToVector()) CHECK(v == 0.0f);
}

TEST_CASE("nn.module: backward needs a matching training forward; eval saves nothing") {
  Affine a(2);
  a.Initialize(1);
  CHECK_THROWS_AS(a.Backward(Ramp(1, 2)), InvalidArgument);
  a.Forward(Ramp(1, 2));
  a.Backward(Ramp(1, 2));
  CHECK_THROWS_AS(a.Backward(Ramp(1, 2)), InvalidArgument);
  a.Eval();
  CHECK_FALSE(a.training());
  a.Forward(Ramp(1, 2));
  CHECK(a.pending_backward() == 0);
  CHECK_THROWS_AS(a.Backward(Ramp(1, 2)), InvalidArgument);
  // A training forward whose backward never ran is forgotten by the next outermost forward.
  a.Train();
  a.Forward(Ramp(1, 2));
  a.Forward(Ramp(1, 2));
  CHECK(a.pending_backward() == 1);
}

TEST_CASE("nn.module: bound views are what layers read and write") {
  Affine a(3);
  std::shared_ptr<Storage> flat = Storage::Allocate(64 * sizeof(float), Device::CPU(), MemCategory::kParams);
  Tensor buf = Tensor::FromStorage(flat, 0, {64}, DType::kF32);
  buf.Zero();
  a.weight()->BindData(buf.View(10, {3}));
  a.bias()->BindData(buf.View(13, {3}));
  a.weight()->BindGrad(buf.View(32, {3}));
  a.bias()->BindGrad(buf.View(35, {3}));
  a.Initialize(5);  // fills the views, allocates nothing new
  CHECK(a.weight()->engine_data().data() == buf.View(10, {3}).data());
  a.Forward(Ramp(1, 3));
  a.Backward(Tensor::FromVector({1, 1, 1}, {1, 3}));
  auto all = buf.ToVector();
  CHECK(all[35] == 1.0f);
  CHECK(all[36] == 1.0f);
  CHECK(all[37] == 1.0f);
  CHECK_THROWS_AS(a.weight()->BindData(buf.View(0, {4})), InvalidArgument);
  CHECK_THROWS_AS(a.weight()->BindData(Tensor::Zeros({3}, DType::kBF16)), InvalidArgument);
}

TEST_CASE("nn.module: touching a released parameter or another module's parameter aborts, naming it") {
  auto released = testing::RunExpectingAbort([] {
    Affine a(3);
    a.Initialize(1);
    a.weight()->SetAvailable(false);
    a.Forward(Ramp(1, 3));
  });
  CHECK(released.aborted);
  CHECK(released.stderr_text.find("'weight' accessed while released") != std::string::npos);

  auto outside = testing::RunExpectingAbort([] {
    Affine a(3);
    a.Initialize(1);
    (void)a.weight()->data();
  });
  CHECK(outside.aborted);
  CHECK(outside.stderr_text.find("outside the forward/backward") != std::string::npos);

  auto foreign = testing::RunExpectingAbort([] {
    Peeker p;
    p.Initialize(1);
    p.Forward(Ramp(1, 3));
  });
  CHECK(foreign.aborted);
  CHECK(foreign.stderr_text.find("'child.weight'") != std::string::npos);

  // Available again: the same forward runs.
  Affine a(3);
  a.Initialize(1);
  a.weight()->SetAvailable(false);
  a.weight()->SetAvailable(true);
  CHECK(a.Forward(Ramp(1, 3)).numel() == 3);
}

TEST_CASE("nn.module: activations are charged to the activations category") {
  MemoryAccount acct("t");
  ScopedMemoryAccount scope(&acct);
  Affine a(256);
  a.Initialize(1);
  CHECK(acct.Current(MemCategory::kParams) >= 2 * 256 * 4);
  CHECK(acct.Current(MemCategory::kGrads) >= 2 * 256 * 4);
  Tensor y = a.Forward(Ramp(4, 256));
  CHECK(acct.Current(MemCategory::kActivations) >= 4 * 256 * 4);
  y = Tensor();
  a.ReleaseActivations();
}

TEST_CASE("nn.dropout: masks are replayable, differ per call, keep ~1-p, scale by 1/(1-p)") {
  Dropout d(0.25f);
  d.SetRngSeed(3);
  const int64_t n = 20000;
  Tensor x = Tensor::FromVector(std::vector<float>(n, 1.0f), {n});
  Tensor y1 = d.Forward(x);
  d.Backward(x);
  Tensor y2 = d.Forward(x);
  d.Backward(x);
  auto v1 = y1.ToVector(), v2 = y2.ToVector();
  int64_t kept = 0, same = 0;
  for (int64_t i = 0; i < n; ++i) {
    CHECK((v1[i] == 0.0f || v1[i] == doctest::Approx(1.0f / 0.75f)));
    kept += v1[i] != 0.0f;
    same += (v1[i] != 0.0f) == (v2[i] != 0.0f);
  }
  CHECK(std::abs(static_cast<double>(kept) / n - 0.75) < 0.02);
  CHECK(same < n * 0.7);  // independent masks agree on ~62.5%
  // Rewinding the counter replays call 1 exactly; the gradient uses the same mask.
  d.set_rng_calls(0);
  Tensor y3 = d.Forward(x);
  CHECK(y3.ToVector() == v1);
  Tensor dx = d.Backward(x);
  CHECK(dx.ToVector() == v1);
  // Eval: identity.
  d.Eval();
  CHECK(d.Forward(x).data() == x.data());
  // Same seed, same path -> same mask; another seed -> another mask.
  Dropout e(0.25f);
  e.SetRngSeed(3);
  CHECK(e.Forward(x).ToVector() == v1);
  Dropout f(0.25f);
  f.SetRngSeed(4);
  CHECK(f.Forward(x).ToVector() != v1);
}

TEST_CASE("nn.dropout: bf16 and fp16 inputs use the same mask") {
  const int64_t n = 999;
  std::vector<float> ones(n, 1.0f);
  std::vector<float> ref;
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    Dropout d(0.5f);
    d.SetRngSeed(9);
    auto y = d.Forward(Tensor::FromVector(ones, {n}, t)).ToVector();
    if (ref.empty()) ref = y;
    CHECK(y == ref);
  }
}

TEST_CASE("nn.checkpoint: a checkpointed subtree gives the same output and gradients, dropout included") {
  auto run = [](bool ckpt, std::vector<std::string>* events) {
    Sequential root;
    auto* pair = root.Append(std::make_unique<TiedPair>(5, 0.4f));
    root.Append(std::make_unique<Affine>(5));
    root.Initialize(21);
    pair->SetActivationCheckpointing(ckpt);
    Recorder rec;
    root.SetObserver(&rec);
    std::vector<float> out;
    for (int step = 0; step < 2; ++step) {  // two steps: the RNG counters advance identically
      Tensor y = root.Forward(Ramp(3, 5));
      root.Backward(Ramp(3, 5, 1.0f));
      out = y.ToVector();
    }
    for (Parameter* p : root.Parameters()) {
      auto g = p->engine_grad().ToVector();
      out.insert(out.end(), g.begin(), g.end());
    }
    if (events) *events = rec.events;
    return out;
  };
  std::vector<std::string> events;
  auto plain = run(false, nullptr);
  auto ckpt = run(true, &events);
  CHECK(plain == ckpt);
  // The replay is announced as a recompute, before the block's backward, and each grads-final once.
  std::string s = Join(events);
  CHECK(s.find("re+0 re+0.first re-0.first re+0.drop re-0.drop re+0.second re-0.second re-0 b+0 ") !=
        std::string::npos);
  int ready_first = 0;
  for (const auto& e : events) ready_first += e.rfind("ready@0.first:", 0) == 0;
  CHECK(ready_first == 2);  // once per step
}

}  // TEST_SUITE
}  // namespace zerorun::nn
