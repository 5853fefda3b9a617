// runtime::Optimizer: groups, step counts, partition sub-ranges, schedulers driving it, Lamb across
// split tensors, memory accounting and state save/restore.
#include <doctest/doctest.h>

#include <barrier>
#include <thread>
#include <vector>

#include "zerorun/core/memory.h"
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

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("optimizer: Adam groups follow the reference and sub-ranges equal one call") {
    const int64_t n0 = 1000, n1 = 37;
    zr::ParamGroupSpec g0, g1;
    g0.name = "decay";
    g0.numel = n0;
    g0.hyper.lr = 1e-2;
    g0.hyper.weight_decay = 0.1;
    g1.name = "no_decay";
    g1.numel = n1;
    g1.hyper.lr = 3e-3;
    zr::Optimizer whole({zr::OptimizerType::kAdam}, {g0, g1});
    zr::Optimizer ranges({zr::OptimizerType::kAdam}, {g0, g1});
    std::vector<float> pa = Rand(n0, 1), pb = pa, pr = pa;
    std::vector<float> qa = Rand(n1, 2), qb = qa, qr = qa;
    std::vector<float> m(n0, 0), v(n0, 0), mq(n1, 0), vq(n1, 0);
    for (int step = 1; step <= 3; ++step) {
      std::vector<float> g = Rand(n0, 10 + step), gq = Rand(n1, 20 + step);
      whole.BeginStep();
      whole.Step(0, Span(pa, g));
      whole.Step(1, Span(qa, gq));
      ranges.BeginStep();
      ranges.StepRange(0, 600, Span(pb, g, 600, 400));  // any order
      ranges.StepRange(0, 0, Span(pb, g, 0, 600));
      ranges.StepRange(1, 0, Span(qb, gq));
      zk::AdamHyper h;
      h.lr = 1e-2f;
      h.weight_decay = 0.1f;
      h.step = step;
      zk::ref::AdamStep(h, Span(pr, g), m.data(), v.data());
      h.lr = 3e-3f;
      h.weight_decay = 0.0f;
      zk::ref::AdamStep(h, Span(qr, gq), mq.data(), vq.data());
    }
    CHECK(whole.step_count(0) == 3);
    CHECK(pa == pb);
    CHECK(qa == qb);
    for (int64_t i = 0; i < n0; ++i) CHECK(pa[i] == doctest::Approx(pr[i]).epsilon(1e-6));
    for (int64_t i = 0; i < n1; ++i) CHECK(qa[i] == doctest::Approx(qr[i]).epsilon(1e-6));
    CHECK(whole.Momentum(0) == std::vector<double>{0.9, 0.999});
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
    zr::ParamGroupSpec g;
    g.name = "decay";
    g.numel = 4;
    g.hyper.beta1 = 1.0;
    CHECK_THROWS_WITH_AS(zr::Optimizer({zr::OptimizerType::kAdam}, {g}), doctest::Contains("group 0 'decay': betas[0]"),
                         zerorun::InvalidArgument);
    g.hyper = {};
    g.hyper.nesterov = true;
    CHECK_THROWS_AS(zr::Optimizer({zr::OptimizerType::kSgd}, {g}), zerorun::InvalidArgument);
  }

  TEST_CASE("optimizer: state is charged to the optimizer category and Adagrad starts at its accumulator") {
    zerorun::MemoryAccount account("optim-test");
    zr::ParamGroupSpec g;
    g.numel = 1000;
    g.hyper.initial_accumulator_value = 0.5;
    {
      zr::Optimizer a({zr::OptimizerType::kAdam, nullptr, &account}, {g});
      CHECK(account.Current(zerorun::MemCategory::kOptimizer) == 8000);
      CHECK(a.state_bytes() == 8000);
      zr::Optimizer ada({zr::OptimizerType::kAdagrad, nullptr, &account}, {g});
      CHECK(ada.state(0, "sum").ToVector()[999] == 0.5f);
      zr::ParamGroupSpec plain;
      plain.numel = 10;
      zr::Optimizer sgd({zr::OptimizerType::kSgd, nullptr, &account}, {plain});
      CHECK(sgd.state_bytes() == 0);  // no momentum: no buffer
    }
    CHECK(account.Current(zerorun::MemCategory::kOptimizer) == 0);
  }

  TEST_CASE("optimizer: schedulers drive lr and OneCycle betas") {
    zr::ParamGroupSpec g;
    g.numel = 8;
    g.hyper.lr = 0.01;
    zr::Optimizer opt({zr::OptimizerType::kAdam}, {g, g});
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

  TEST_CASE("optimizer: save and restore continues bit-identically") {
    for (zr::OptimizerType t : {zr::OptimizerType::kAdam, zr::OptimizerType::kLion, zr::OptimizerType::kSgd,
                                zr::OptimizerType::kAdagrad, zr::OptimizerType::kLamb}) {
      CAPTURE(zr::OptimizerTypeName(t));
      zr::ParamGroupSpec g;
      g.numel = 300;
      g.hyper.momentum = 0.9;
      g.hyper.weight_decay = 0.01;
      zr::Optimizer a({t}, {g});
      std::vector<float> p = Rand(300, 5);
      for (int s = 0; s < 2; ++s) {
        std::vector<float> gr = Rand(300, 50 + s);
        a.BeginStep();
        a.Step(0, Span(p, gr));
      }
      a.SetLr(0, 0.123);
      // Snapshot (deep copies, as a checkpoint writer would make).
      zr::Optimizer::State saved = a.SaveState();
      for (auto& [name, tensor] : saved.tensors) tensor = tensor.Clone();
      std::vector<float> p_saved = p;
      zr::Optimizer b({t}, {g});
      b.LoadState(saved);
      CHECK(b.step_count(0) == 2);
      CHECK(b.GetLr(0) == 0.123);
      std::vector<float> q = p_saved;
      for (int s = 2; s < 4; ++s) {
        std::vector<float> gr = Rand(300, 50 + s);
        a.BeginStep();
        a.Step(0, Span(p, gr));
        b.BeginStep();
        b.Step(0, Span(q, gr));
      }
      CHECK(p == q);
    }
  }

  TEST_CASE("optimizer: a bad saved state is refused and changes nothing") {
    zr::ParamGroupSpec g;
    g.numel = 16;
    zr::Optimizer a({zr::OptimizerType::kAdam}, {g});
    zr::Optimizer::State s = a.SaveState();
    zr::Optimizer::State missing = s;
    missing.tensors.pop_back();
    CHECK_THROWS_WITH_AS(a.LoadState(missing), doctest::Contains("group0.exp_avg_sq"), zerorun::CheckpointError);
    zr::Optimizer::State wrong = s;
    wrong.tensors[0].second = zerorun::Tensor::Zeros({15}, DType::kF32);
    wrong.scalars[0].second = 99;
    CHECK_THROWS_WITH_AS(a.LoadState(wrong), doctest::Contains("15 elements saved"), zerorun::CheckpointError);
    CHECK(a.step_count(0) == 0);
  }

  TEST_CASE("optimizer: Lamb over a tensor split across two ranks equals the whole tensor") {
    // Tensor 0 has 500 elements, tensor 1 has 300; rank 0 holds [0, 400), rank 1 [400, 800).
    const int64_t n = 800;
    std::vector<float> p = Rand(n, 3), g = Rand(n, 4);
    zr::ParamGroupSpec whole;
    whole.numel = n;
    whole.hyper.weight_decay = 0.01;
    whole.pieces = {{0, 500, 0}, {500, 300, 1}};
    whole.num_tensors = 2;
    zr::Optimizer ref({zr::OptimizerType::kLamb}, {whole});
    std::vector<float> pw = p;
    ref.BeginStep();
    ref.Step(0, Span(pw, g));

    zr::ParamGroupSpec r0 = whole, r1 = whole;
    r0.numel = 400;
    r0.pieces = {{0, 400, 0}};
    r1.numel = 400;
    r1.pieces = {{0, 100, 0}, {100, 300, 1}};
    zr::Optimizer o0({zr::OptimizerType::kLamb}, {r0}), o1({zr::OptimizerType::kLamb}, {r1});
    std::vector<double> sums0, sums1;
    std::barrier sync(2);
    std::vector<double>* slots[2] = {&sums0, &sums1};
    auto reducer = [&](int rank) {
      return [&, rank](std::vector<double>& sums) {
        *slots[rank] = sums;
        sync.arrive_and_wait();
        for (size_t i = 0; i < sums.size(); ++i) sums[i] = (*slots[0])[i] + (*slots[1])[i];
        sync.arrive_and_wait();
      };
    };
    o0.set_norm_reducer(reducer(0));
    o1.set_norm_reducer(reducer(1));
    std::vector<float> pd = p;
    std::thread t1([&] {
      o1.BeginStep();
      zk::OptimSpan s = Span(pd, g, 400, 400);
      o1.Step(0, s);
    });
    o0.BeginStep();
    o0.Step(0, Span(pd, g, 0, 400));
    t1.join();
    CHECK(o0.lamb_trust_ratios(0)[0] == doctest::Approx(ref.lamb_trust_ratios(0)[0]).epsilon(1e-6));
    CHECK(o1.lamb_trust_ratios(0)[1] == doctest::Approx(ref.lamb_trust_ratios(0)[1]).epsilon(1e-6));
    CHECK(ref.lamb_trust_ratios(0)[0] != ref.lamb_trust_ratios(0)[1]);
    for (int64_t i = 0; i < n; ++i) CHECK(pd[i] == doctest::Approx(pw[i]).epsilon(1e-6));
  }
}
