// runtime::Optimizer as an update rule (zero::UpdateRule): groups, step counts, sub-ranges of a span
// equal one call, state names and initial values, schedulers driving it, Lamb's two passes over a
// tensor split in pieces, and save/restore of its scalars. The state itself lives in ZeRO's state
// store (tests/zero/partition_optimizer_test.cc); here the test holds it in plain vectors.
#include <doctest/doctest.h>

#include <vector>

#include "zerorun/core/rng.h"
#include "zerorun/kernels/ref/optim.h"
#include "zerorun/runtime/lr_schedules.h"
#include "zerorun/runtime/optim/optimizer.h"

namespace zr = zerorun::runtime;
namespace zk = zerorun::kernels;
using zerorun::DType;

namespace {

std::vector<float> Rand(int64_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  if (n) zerorun::FillUniform(v.data(), v.size(), seed, 0, 0, lo, hi);
  return v;
}

zk::OptimSpan Span(std::vector<float>& p, const std::vector<float>& g, int64_t off = 0, int64_t n = -1) {
  zk::OptimSpan s;
  s.params = p.data() + off;
  s.grads = g.data() + off;
  s.n = n < 0 ? static_cast<int64_t>(p.size()) - off : n;
  return s;
}

// A span's state as the store would hand it over: slot k of element `off` onwards.
struct State {
  State(const zr::Optimizer& opt, int group, int64_t n) {
    const std::vector<std::string> names = opt.StateNames();
    for (size_t k = 0; k < names.size(); ++k) slots.emplace_back(static_cast<size_t>(n), opt.InitialState(group, static_cast<int>(k)));
  }
  std::vector<float*> At(int64_t off) {
    std::vector<float*> p;
    for (auto& s : slots) p.push_back(s.data() + off);
    return p;
  }
  std::vector<std::vector<float>> slots;
};

zr::ParamGroupSpec Group(const char* name, double lr, double wd = 0.0) {
  zr::ParamGroupSpec g;
  g.name = name;
  g.hyper.lr = lr;
  g.hyper.weight_decay = wd;
  return g;
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("optimizer: Adam groups follow the reference and sub-ranges equal one call") {
    const int64_t n0 = 1000, n1 = 37;
    zr::Optimizer opt({zr::OptimizerType::kAdam}, {Group("decay", 1e-2, 0.1), Group("no_decay", 3e-3)});
    CHECK(opt.StateNames() == std::vector<std::string>{"exp_avg", "exp_avg_sq"});
    CHECK_FALSE(opt.NeedsTensorNorms());
    std::vector<float> pa = Rand(n0, 1), pb = pa, pr = pa;
    std::vector<float> qa = Rand(n1, 2), qb = qa, qr = qa;
    State sa(opt, 0, n0), sb(opt, 0, n0), ta(opt, 1, n1), tb(opt, 1, n1);
    std::vector<float> m(n0, 0), v(n0, 0), mq(n1, 0), vq(n1, 0);
    for (int step = 1; step <= 3; ++step) {
      std::vector<float> g = Rand(n0, 10 + step), gq = Rand(n1, 20 + step);
      opt.BeginStep();
      opt.Update(0, Span(pa, g), sa.At(0).data());
      opt.Update(1, Span(qa, gq), ta.At(0).data());
      opt.Update(0, Span(pb, g, 601, 399), sb.At(601).data());  // any order, odd offsets
      opt.Update(0, Span(pb, g, 0, 601), sb.At(0).data());
      opt.Update(1, Span(qb, gq, 0, 5), tb.At(0).data());
      opt.Update(1, Span(qb, gq, 5, 32), tb.At(5).data());
      zk::AdamHyper h;
      h.lr = 1e-2f;
      h.weight_decay = 0.1f;
      h.step = step;
      zk::ref::AdamStep(h, Span(pr, g), m.data(), v.data());
      h.lr = 3e-3f;
      h.weight_decay = 0.0f;
      zk::ref::AdamStep(h, Span(qr, gq), mq.data(), vq.data());
    }
    CHECK(opt.step_count(0) == 3);
    CHECK(pa == pb);
    CHECK(qa == qb);
    CHECK(sa.slots == sb.slots);
    for (int64_t i = 0; i < n0; ++i) CHECK(pa[i] == doctest::Approx(pr[i]).epsilon(1e-6));
    for (int64_t i = 0; i < n1; ++i) CHECK(qa[i] == doctest::Approx(qr[i]).epsilon(1e-6));
    CHECK(opt.Momentum(0) == std::vector<double>{0.9, 0.999});
  }

  TEST_CASE("optimizer: validation and type names") {
    bool adamw = false;
    CHECK(zr::ParseOptimizerType("AdamW", &adamw) == zr::OptimizerType::kAdam);
    CHECK(adamw);
    CHECK(zr::ParseOptimizerType("adam", &adamw) == zr::OptimizerType::kAdam);
    CHECK_FALSE(adamw);
    CHECK(zr::ParseOptimizerType("LAMB") == zr::OptimizerType::kLamb);
    CHECK(zr::ParseOptimizerType("SGD") == zr::OptimizerType::kSgd);
    CHECK_THROWS_WITH_AS(zr::ParseOptimizerType("sgd"), doctest::Contains("case-sensitive"), zerorun::InvalidArgument);
    CHECK_THROWS_AS(zr::ParseOptimizerType("RMSprop"), zerorun::InvalidArgument);
    zr::ParamGroupSpec g = Group("decay", 1e-3);
    g.hyper.beta1 = 1.0;
    CHECK_THROWS_WITH_AS(zr::Optimizer({zr::OptimizerType::kAdam}, {g}), doctest::Contains("group 0 'decay': betas[0]"),
                         zerorun::InvalidArgument);
    g.hyper = {};
    g.hyper.nesterov = true;
    CHECK_THROWS_AS(zr::Optimizer({zr::OptimizerType::kSgd}, {g}), zerorun::InvalidArgument);
  }

  TEST_CASE("optimizer: state names per type, and Adagrad starts at its accumulator") {
    zr::ParamGroupSpec g;
    g.hyper.initial_accumulator_value = 0.5;
    zr::Optimizer ada({zr::OptimizerType::kAdagrad}, {g});
    CHECK(ada.StateNames() == std::vector<std::string>{"sum"});
    CHECK(ada.InitialState(0, 0) == 0.5f);
    CHECK(zr::Optimizer({zr::OptimizerType::kLion}, {g}).StateNames() == std::vector<std::string>{"exp_avg"});
    zr::Optimizer lamb({zr::OptimizerType::kLamb}, {g});
    CHECK(lamb.StateNames() == std::vector<std::string>{"exp_avg", "exp_avg_sq"});
    CHECK(lamb.NeedsTensorNorms());
    CHECK(lamb.InitialState(0, 1) == 0.0f);
    zr::ParamGroupSpec plain;
    CHECK(zr::Optimizer({zr::OptimizerType::kSgd}, {plain}).StateNames().empty());  // no momentum: no buffer
    plain.hyper.momentum = 0.9;
    CHECK(zr::Optimizer({zr::OptimizerType::kSgd}, {plain}).StateNames() == std::vector<std::string>{"momentum_buffer"});
  }

  TEST_CASE("optimizer: schedulers drive lr and OneCycle betas") {
    zr::Optimizer opt({zr::OptimizerType::kAdam}, {Group("a", 0.01), Group("b", 0.01)});
    zr::LrScheduleOptions o;
    o.type = "WarmupCosineLR";
    o.total_num_steps = 10;
    o.warmup_num_steps = 2;
    auto s = zr::MakeLrScheduler(o, opt);
    CHECK(opt.GetLr(0) == 0.0);
    CHECK(opt.GetLr(1) == 0.0);
    s->Step();
    CHECK(opt.GetLr(1) == doctest::Approx(0.0));  // k=0: ln(1)/ln(2) = 0
    s->Step();
    CHECK(opt.GetLr(1) == doctest::Approx(0.01));  // k=1: ln 2 / ln 2
    zr::LrScheduleOptions c;
    c.type = "OneCycle";
    c.cycle_min_lr = 0.001;
    c.cycle_max_lr = 0.01;
    c.cycle_first_step_size = 4;
    auto oc = zr::MakeLrScheduler(c, opt);
    oc->Step(3);
    CHECK(opt.hyper(0).beta1 == doctest::Approx(0.8));
    CHECK(opt.hyper(0).beta2 == doctest::Approx(0.99));
    CHECK(opt.GetLr(0) == doctest::Approx(0.01));
  }

  TEST_CASE("optimizer: restored scalars and state continue bit-identically") {
    for (zr::OptimizerType t : {zr::OptimizerType::kAdam, zr::OptimizerType::kLion, zr::OptimizerType::kSgd,
                                zr::OptimizerType::kAdagrad}) {
      CAPTURE(zr::OptimizerTypeName(t));
      zr::ParamGroupSpec g = Group("g", 1e-3, 0.01);
      g.hyper.momentum = 0.9;
      zr::Optimizer a({t}, {g});
      State sa(a, 0, 300);
      std::vector<float> p = Rand(300, 5);
      for (int s = 0; s < 2; ++s) {
        std::vector<float> gr = Rand(300, 50 + s);
        a.BeginStep();
        a.Update(0, Span(p, gr), sa.At(0).data());
      }
      a.SetLr(0, 0.123);
      // Snapshot, as a checkpoint makes: the scalars here, the state from the store (copied).
      const auto scalars = a.SaveScalars();
      State sb = sa;
      std::vector<float> q = p;
      zr::Optimizer b({t}, {g});
      b.LoadScalars(scalars);
      CHECK(b.step_count(0) == 2);
      CHECK(b.GetLr(0) == 0.123);
      for (int s = 2; s < 4; ++s) {
        std::vector<float> gr = Rand(300, 50 + s);
        a.BeginStep();
        a.Update(0, Span(p, gr), sa.At(0).data());
        b.BeginStep();
        b.Update(0, Span(q, gr), sb.At(0).data());
      }
      CHECK(p == q);
    }
  }

  TEST_CASE("optimizer: bad saved scalars are refused and change nothing") {
    zr::Optimizer a({zr::OptimizerType::kAdam}, {Group("g", 1e-3)});
    auto s = a.SaveScalars();
    auto missing = s;
    missing.pop_back();
    CHECK_THROWS_WITH_AS(a.LoadScalars(missing), doctest::Contains("group0.eps"), zerorun::CheckpointError);
    auto wrong = s;
    wrong[0].second = 2.5;  // group0.step
    wrong[1].second = 99;   // group0.lr
    CHECK_THROWS_WITH_AS(a.LoadScalars(wrong), doctest::Contains("invalid step count 2.5"), zerorun::CheckpointError);
    CHECK(a.step_count(0) == 0);
    CHECK(a.GetLr(0) == 1e-3);
  }

  TEST_CASE("optimizer: Lamb over a tensor in two pieces with summed norms equals the whole tensor") {
    // Tensor 0 has 500 elements, tensor 1 has 300; piece A = [0, 400), piece B = [400, 800).
    const int64_t n = 800;
    std::vector<float> p = Rand(n, 3), g = Rand(n, 4);
    zr::Optimizer opt({zr::OptimizerType::kLamb}, {Group("g", 1e-3, 0.01)});
    opt.BeginStep();
    // Whole: each tensor's moments, its trust ratio, the update.
    std::vector<float> pw = p;
    State sw(opt, 0, n);
    const zk::LambNorms n0 = opt.Moments(0, Span(pw, g, 0, 500), sw.At(0).data());
    const zk::LambNorms n1 = opt.Moments(0, Span(pw, g, 500, 300), sw.At(500).data());
    const float t0 = opt.TrustRatio(0, n0), t1 = opt.TrustRatio(0, n1);
    CHECK(t0 != t1);
    opt.Apply(0, Span(pw, g, 0, 500), sw.At(0).data(), t0);
    opt.Apply(0, Span(pw, g, 500, 300), sw.At(500).data(), t1);
    // Split: tensor 0 in two pieces whose sums are added (as ranks all-reduce them).
    std::vector<float> pd = p;
    State sd(opt, 0, n);
    zk::LambNorms a = opt.Moments(0, Span(pd, g, 0, 400), sd.At(0).data());
    const zk::LambNorms b = opt.Moments(0, Span(pd, g, 400, 100), sd.At(400).data());
    const zk::LambNorms c = opt.Moments(0, Span(pd, g, 500, 300), sd.At(500).data());
    a.param_sq += b.param_sq;
    a.update_sq += b.update_sq;
    CHECK(opt.TrustRatio(0, a) == doctest::Approx(t0).epsilon(1e-6));
    opt.Apply(0, Span(pd, g, 0, 400), sd.At(0).data(), opt.TrustRatio(0, a));
    opt.Apply(0, Span(pd, g, 400, 100), sd.At(400).data(), opt.TrustRatio(0, a));
    opt.Apply(0, Span(pd, g, 500, 300), sd.At(500).data(), opt.TrustRatio(0, c));
    for (int64_t i = 0; i < n; ++i) CHECK(pd[i] == doctest::Approx(pw[i]).epsilon(1e-6));
  }
}
