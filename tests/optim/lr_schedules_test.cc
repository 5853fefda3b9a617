// LR schedulers: the reference's worked values (§1.3) and DeepSpeed's scheduler tests (§10.5).
#include <doctest/doctest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "zerorun/core/error.h"
#include "zerorun/runtime/lr_schedules.h"

using zerorun::runtime::LrScheduleOptions;
using zerorun::runtime::MakeLrScheduler;

namespace {

// A fake optimizer: per-group lr and betas.
class FakeGroups final : public zerorun::runtime::HyperTarget {
 public:
  explicit FakeGroups(std::vector<double> lrs, bool betas = true) : lr_(std::move(lrs)), has_betas_(betas) {
    betas_.assign(lr_.size(), {0.9, 0.999});
  }
  int NumGroups() const override { return static_cast<int>(lr_.size()); }
  double GetLr(int g) const override { return lr_[g]; }
  void SetLr(int g, double lr) override { lr_[g] = lr; }
  bool HasBetas() const override { return has_betas_; }
  std::pair<double, double> GetBetas(int g) const override { return betas_[g]; }
  void SetBetas(int g, double b1, double b2) override { betas_[g] = {b1, b2}; }
  std::vector<double> lr_;
  std::vector<std::pair<double, double>> betas_;
  bool has_betas_;
};

// LR written into group 0 at iteration k (stepping from construction).
double LrAtIteration(const LrScheduleOptions& o, int64_t k, double group_lr = 1e-3) {
  FakeGroups g({group_lr});
  auto s = MakeLrScheduler(o, g);
  s->Step(k);
  return g.lr_[0];
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("lr schedules: WarmupLR worked values") {
    LrScheduleOptions o;
    o.type = "WarmupLR";
    o.warmup_min_lr = {0.0};
    o.warmup_max_lr = {1e-3};
    o.warmup_num_steps = 1000;
    CHECK(LrAtIteration(o, 0) == 0.0);
    CHECK(LrAtIteration(o, 9) == doctest::Approx(3.333333e-4));
    CHECK(LrAtIteration(o, 99) == doctest::Approx(6.666667e-4));
    CHECK(LrAtIteration(o, 999) == doctest::Approx(1e-3));
    o.warmup_type = "linear";
    CHECK(LrAtIteration(o, 500) == doctest::Approx(5e-4));
    CHECK(LrAtIteration(o, 999) == doctest::Approx(9.99e-4));
    CHECK(LrAtIteration(o, 1000) == doctest::Approx(1e-3));
    CHECK(LrAtIteration(o, 5000) == doctest::Approx(1e-3));
    // Construction writes the iteration -1 LR (the minimum).
    FakeGroups g({0.5});
    auto s = MakeLrScheduler(o, g);
    CHECK(g.lr_[0] == 0.0);
    CHECK(s->last_batch_iteration() == -1);
  }

  TEST_CASE("lr schedules: WarmupLR recorded after each step (DeepSpeed test 46) and group lr as max") {
    for (int64_t n : {10, 15, 19, 33}) {
      for (const char* type : {"log", "linear"}) {
        LrScheduleOptions o;
        o.warmup_min_lr = {0.1};
        o.warmup_max_lr = {0.2};
        o.warmup_num_steps = n;
        o.warmup_type = type;
        FakeGroups g({1.0});
        auto s = MakeLrScheduler(o, g);
        std::vector<double> seen;
        for (int i = 0; i < n + 5; ++i) {
          s->Step();
          seen.push_back(g.lr_[0]);
        }
        CHECK(seen[0] == doctest::Approx(0.1));
        CHECK(seen[n] == doctest::Approx(0.2));
        for (size_t i = n; i < seen.size(); ++i) CHECK(seen[i] == doctest::Approx(0.2));
        for (int i = 1; i < n; ++i) CHECK(seen[i] > seen[i - 1]);
      }
    }
    // No warmup_max_lr: each group's own lr is the peak.
    LrScheduleOptions o;
    o.warmup_num_steps = 10;
    FakeGroups g({0.1, 0.2});
    auto s = MakeLrScheduler(o, g);
    s->Step(20);
    CHECK(g.lr_ == std::vector<double>{0.1, 0.2});
    // Lists must have one entry per group.
    o.warmup_min_lr = {0.0, 0.0, 0.0};
    CHECK_THROWS_AS(MakeLrScheduler(o, g), zerorun::InvalidArgument);
    o.warmup_min_lr = {0.0, 0.01};
    s = MakeLrScheduler(o, g);
    CHECK(g.lr_ == std::vector<double>{0.0, 0.01});
  }

  TEST_CASE("lr schedules: WarmupDecayLR worked values") {
    LrScheduleOptions o;
    o.type = "WarmupDecayLR";
    o.total_num_steps = 2000;
    o.warmup_num_steps = 1000;
    CHECK(LrAtIteration(o, 1000) == doctest::Approx(1e-3));  // warmup_max_lr defaults to 0.001
    CHECK(LrAtIteration(o, 1500) == doctest::Approx(5e-4));
    CHECK(LrAtIteration(o, 1999) == doctest::Approx(1e-6));
    CHECK(LrAtIteration(o, 2000) == 0.0);
    CHECK(LrAtIteration(o, 2500) == 0.0);
    // Strictly decreasing after the warm-up (test 47).
    FakeGroups g({1.0});
    auto s = MakeLrScheduler(o, g);
    s->Step(1000);
    double prev = g.lr_[0];
    for (int i = 0; i < 50; ++i) {
      s->Step();
      CHECK(g.lr_[0] < prev);
      prev = g.lr_[0];
    }
    o.total_num_steps = -1;
    CHECK_THROWS_AS(MakeLrScheduler(o, g), zerorun::InvalidArgument);
  }

  TEST_CASE("lr schedules: WarmupCosineLR worked values") {
    LrScheduleOptions o;
    o.type = "WarmupCosineLR";
    o.total_num_steps = 100;
    o.warmup_num_steps = 10;
    o.cos_min_ratio = 1e-4;
    // Ratios (group lr 1.0).
    CHECK(LrAtIteration(o, 0, 1.0) == 0.0);
    CHECK(LrAtIteration(o, 1, 1.0) == doctest::Approx(0.30103).epsilon(1e-5));
    CHECK(LrAtIteration(o, 9, 1.0) == doctest::Approx(1.0));
    CHECK(LrAtIteration(o, 10, 1.0) == doctest::Approx(0.99970).epsilon(1e-5));
    CHECK(LrAtIteration(o, 54, 1.0) == doctest::Approx(0.50005).epsilon(1e-5));
    CHECK(LrAtIteration(o, 99, 1.0) == doctest::Approx(1e-4));
    CHECK(LrAtIteration(o, 150, 1.0) == doctest::Approx(1e-4));
    // Construction writes 0 into every group; the ratio applies to each group's original lr.
    FakeGroups g({0.5, 2.0});
    auto s = MakeLrScheduler(o, g);
    CHECK(g.lr_ == std::vector<double>{0.0, 0.0});
    CHECK(s->GetLr() == std::vector<double>{0.0, 0.0});
    s->Step(1);
    CHECK(g.lr_[0] == doctest::Approx(0.5 * std::log(2.0) / std::log(10.0)));
    CHECK(g.lr_[1] == doctest::Approx(2.0 * std::log(2.0) / std::log(10.0)));
    // Linear warm-up: ratio k/N, never exactly 1.
    o.warmup_type = "linear";
    CHECK(LrAtIteration(o, 9, 1.0) == doctest::Approx(0.9));
    // T == N: ratio is cos_min_ratio right after the warm-up.
    o.total_num_steps = 10;
    CHECK(LrAtIteration(o, 10, 1.0) == doctest::Approx(1e-4));
  }

  TEST_CASE("lr schedules: WarmupCosineLR DeepSpeed test 48") {
    LrScheduleOptions o;
    o.type = "WarmupCosineLR";
    o.total_num_steps = 100;
    o.warmup_num_steps = 10;
    o.cos_min_ratio = 0.1;
    o.warmup_min_ratio = 0.2;
    FakeGroups g({0.0015});
    auto s = MakeLrScheduler(o, g);
    std::vector<double> seen;
    for (int i = 0; i < 100; ++i) {
      s->Step();
      seen.push_back(g.lr_[0]);
    }
    CHECK(seen[0] == doctest::Approx(0.0015 * 0.2));
    CHECK(seen[9] == doctest::Approx(0.0015));
    CHECK(seen[99] == doctest::Approx(0.0015 * 0.1));
    for (int i = 1; i < 10; ++i) CHECK(seen[i] > seen[i - 1]);
    for (int i = 11; i < 100; ++i) CHECK(seen[i] < seen[i - 1]);
  }

  TEST_CASE("lr schedules: OneCycle worked values and momentum cycling") {
    LrScheduleOptions o;
    o.type = "OneCycle";
    o.cycle_min_lr = 1e-3;
    o.cycle_max_lr = 1e-2;
    o.cycle_first_step_size = 10;
    FakeGroups g({0.5});
    auto s = MakeLrScheduler(o, g);
    CHECK(g.lr_[0] == doctest::Approx(1e-3));            // iteration -1
    CHECK(g.betas_[0].first == doctest::Approx(0.9));    // max momentum
    CHECK(g.betas_[0].second == doctest::Approx(0.99));  // DeepSpeed forces beta2 = 0.99
    const std::pair<int64_t, double> expect[] = {{0, 1.9e-3}, {4, 5.5e-3}, {9, 1e-2}, {10, 9.1e-3}, {19, 1e-3}};
    for (auto [k, lr] : expect) {
      s->Step(k);
      CHECK(g.lr_[0] == doctest::Approx(lr));
    }
    s->Step(9);
    CHECK(g.betas_[0].first == doctest::Approx(0.8));  // min momentum at the peak
    REQUIRE(s->GetMomentum().size() == 1);
    CHECK(s->GetMomentum()[0] == doctest::Approx(0.8));
    // After the cycle without decay: min lr, max momentum.
    s->Step(40);
    CHECK(g.lr_[0] == doctest::Approx(1e-3));
    CHECK(g.betas_[0].first == doctest::Approx(0.9));
    // With decay: lr = min / (1 + rate*d/size), d = k - total + 1.
    o.decay_lr_rate = 0.5;
    o.decay_step_size = 5;
    o.decay_mom_rate = 0.1;
    FakeGroups h({0.5});
    auto d = MakeLrScheduler(o, h);
    d->Step(24);  // d = 5
    CHECK(h.lr_[0] == doctest::Approx(1e-3 / 1.5));
    CHECK(h.betas_[0].first == doctest::Approx(0.9 * 1.1));
    // Validation (test 50): second step size 0 is allowed.
    o.cycle_second_step_size = 0;
    CHECK_NOTHROW(MakeLrScheduler(o, h));
    o.cycle_second_step_size = -2;
    CHECK_THROWS_AS(MakeLrScheduler(o, h), zerorun::InvalidArgument);
    o.cycle_first_step_size = 0;
    CHECK_THROWS_AS(MakeLrScheduler(o, h), zerorun::InvalidArgument);
    // No betas: momentum cycling is off, betas untouched.
    LrScheduleOptions p;
    p.type = "OneCycle";
    p.cycle_min_lr = 1e-3;
    p.cycle_max_lr = 1e-2;
    FakeGroups sgd({0.1}, /*betas=*/false);
    auto q = MakeLrScheduler(p, sgd);
    CHECK(q->GetMomentum().empty());
    CHECK(sgd.betas_[0].second == 0.999);
  }

  TEST_CASE("lr schedules: OneCycle shape (DeepSpeed test 52)") {
    LrScheduleOptions o;
    o.type = "OneCycle";
    o.cycle_min_lr = 1e-5;
    o.cycle_max_lr = 1e-2;
    o.cycle_first_step_size = 10;
    FakeGroups g({0.1});
    auto s = MakeLrScheduler(o, g);
    std::vector<double> lr, mom;
    for (int n = 0; n < 20; ++n) {  // read before step n
      lr.push_back(g.lr_[0]);
      mom.push_back(g.betas_[0].first);
      s->Step();
    }
    CHECK(lr[0] == doctest::Approx(1e-5));
    CHECK(lr[10] == doctest::Approx(1e-2));
    CHECK(mom[0] == doctest::Approx(0.9));
    CHECK(mom[10] == doctest::Approx(0.8));
    for (int n = 1; n <= 10; ++n) CHECK(lr[n] > lr[n - 1]);
    for (int n = 11; n < 20; ++n) CHECK(lr[n] < lr[n - 1]);
    for (int n = 1; n <= 10; ++n) CHECK(mom[n] < mom[n - 1]);
    for (int n = 11; n < 20; ++n) CHECK(mom[n] > mom[n - 1]);
  }

  TEST_CASE("lr schedules: LRRangeTest continuous and staircase") {
    LrScheduleOptions o;
    o.type = "LRRangeTest";
    o.lr_range_test_min_lr = 1e-3;
    o.lr_range_test_step_size = 10;
    o.lr_range_test_step_rate = 2.0;
    FakeGroups g({0.5});
    auto s = MakeLrScheduler(o, g);
    CHECK(g.lr_[0] == doctest::Approx(1e-3));  // before the first step: min lr
    s->Step();                                   // k = 0: interval 0.1
    CHECK(g.lr_[0] == doctest::Approx(1e-3 * 1.2));
    o.lr_range_test_staircase = true;
    FakeGroups h({0.5});
    auto t = MakeLrScheduler(o, h);
    for (int k = 0; k < 9; ++k) {
      t->Step();
      CHECK(h.lr_[0] == doctest::Approx(1e-3));  // constant for step_size steps
    }
    t->Step();  // k = 9: interval 1
    CHECK(h.lr_[0] == doctest::Approx(3e-3));
    o.lr_range_test_step_size = 0;
    CHECK_THROWS_AS(MakeLrScheduler(o, h), zerorun::InvalidArgument);
  }

  TEST_CASE("lr schedules: validation and state restore") {
    FakeGroups g({0.1});
    for (const char* type : {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR"}) {
      LrScheduleOptions o;
      o.type = type;
      o.total_num_steps = 100;
      o.warmup_num_steps = -5;
      CHECK_THROWS_AS(MakeLrScheduler(o, g), zerorun::InvalidArgument);
    }
    LrScheduleOptions bad;
    bad.type = "Cosine";
    CHECK_THROWS_AS(MakeLrScheduler(bad, g), zerorun::InvalidArgument);

    // Save after 37 steps, restore into a fresh scheduler: identical LRs from then on.
    LrScheduleOptions o;
    o.type = "WarmupCosineLR";
    o.total_num_steps = 100;
    o.warmup_num_steps = 10;
    FakeGroups a({0.1}), b({0.1});
    auto sa = MakeLrScheduler(o, a);
    auto sb = MakeLrScheduler(o, b);
    for (int i = 0; i < 37; ++i) sa->Step();
    sb->LoadState(sa->SaveState());
    CHECK(b.lr_[0] == a.lr_[0]);
    for (int i = 0; i < 20; ++i) {
      sa->Step();
      sb->Step();
      CHECK(a.lr_[0] == b.lr_[0]);
    }
    // Starting from an explicit last_batch_iteration writes that iteration's LR.
    o.last_batch_iteration = 54;
    FakeGroups c({1.0});
    auto sc = MakeLrScheduler(o, c);
    CHECK(c.lr_[0] == doctest::Approx(0.50005).epsilon(1e-5));
  }
}
