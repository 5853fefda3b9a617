// Loss scaler: every worked example of reference §2.4, DeepSpeed's own unit-test expectations
// (§10.2), the min-scale error, static scaling and state save/restore; clipping math (§4).
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "zerorun/runtime/clip.h"
#include "zerorun/runtime/loss_scaler.h"

using zerorun::runtime::ComputeUnscaleClip;
using zerorun::runtime::GlobalNormFromSumSquares;
using zerorun::runtime::LossScaleError;
using zerorun::runtime::LossScaler;
using zerorun::runtime::LossScalerOptions;

namespace {

LossScalerOptions Opts(int power, int64_t window, int hysteresis, bool consecutive = false, double min_scale = 1.0) {
  LossScalerOptions o;
  o.initial_scale_power = power;
  o.scale_window = window;
  o.hysteresis = hysteresis;
  o.consecutive_hysteresis = consecutive;
  o.min_scale = min_scale;
  return o;
}

// Scale after each update for an overflow pattern.
std::vector<double> Run(LossScaler& s, const std::vector<int>& pattern, std::vector<int>* hyst = nullptr) {
  std::vector<double> out;
  for (int o : pattern) {
    CHECK(s.Update(o != 0) == (o != 0));
    out.push_back(s.scale());
    if (hyst) hyst->push_back(s.hysteresis_left());
  }
  return out;
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("loss scaler: example A (window 2 hysteresis 2)") {
    LossScaler s(Opts(16, 2, 2));
    std::vector<int> h;
    CHECK(Run(s, {1, 1, 0, 0, 0, 1, 1}, &h) == std::vector<double>{65536, 32768, 32768, 32768, 65536, 65536, 32768});
    CHECK(h == std::vector<int>{1, 1, 1, 1, 2, 1, 1});
    CHECK(s.iteration() == 7);
  }

  TEST_CASE("loss scaler: example B (consecutive hysteresis or not)") {
    LossScaler a(Opts(16, 1000, 2, false));
    CHECK(Run(a, {1, 0, 1, 0, 1}) == std::vector<double>{65536, 65536, 32768, 32768, 16384});
    LossScaler b(Opts(16, 1000, 2, true));
    std::vector<int> h;
    CHECK(Run(b, {1, 0, 1, 0, 1}, &h) == std::vector<double>{65536, 65536, 65536, 65536, 65536});
    CHECK(h == std::vector<int>{1, 2, 1, 2, 1});
  }

  TEST_CASE("loss scaler: example C (error at the minimum with the history and bf16 advice)") {
    LossScaler s(Opts(3, 1000, 1, false, 1.0));
    CHECK(Run(s, {1, 1, 1}) == std::vector<double>{4, 2, 1});
    std::string msg;
    try {
      s.Update(true);
    } catch (const LossScaleError& e) {
      msg = e.what();
    }
    CHECK(msg.find("Current loss scale already at minimum") != std::string::npos);
    CHECK(msg.find("bf16") != std::string::npos);
    CHECK(msg.find("step 0: scale 8 -> 4 (overflow)") != std::string::npos);
    CHECK(msg.find("step 3: scale 1 -> 1 (overflow)") != std::string::npos);
    // Reaching the minimum alone does not raise; a clean step at the minimum does not either.
    LossScaler t(Opts(1, 1000, 1, false, 1.0));
    CHECK(Run(t, {1, 0}) == std::vector<double>{1, 1});
    CHECK_THROWS_AS(t.Update(true), LossScaleError);
  }

  TEST_CASE("loss scaler: example D (no overflow, DeepSpeed test_no_overflow)") {
    LossScaler s(Opts(8, 2, 2));
    CHECK(Run(s, {0, 0, 0, 0, 0, 0, 0}) == std::vector<double>{256, 256, 512, 512, 1024, 1024, 2048});
    for (int i = 7; i < 10; ++i) {
      s.Update(false);
      CHECK(s.scale() == 256.0 * std::pow(2.0, std::floor(i / 2.0)));
    }
  }

  TEST_CASE("loss scaler: example E (hysteresis 1)") {
    LossScaler s(Opts(8, 2, 1));
    CHECK(Run(s, {1, 0, 0, 0, 0, 0}) == std::vector<double>{128, 128, 128, 256, 256, 512});
  }

  TEST_CASE("loss scaler: example F (DeepSpeed's non-ZeRO FP16_Optimizer flavour)") {
    LossScalerOptions o = Opts(8, 2, 2);
    o.flavour = LossScalerOptions::Flavour::kLegacyFp16Optimizer;
    LossScaler s(o);
    // inf, nan -> 128 -> 64 (hysteresis ignored); 3 clean steps -> 128; inf -> 64.
    CHECK(Run(s, {1, 1, 0, 0, 0, 1}) == std::vector<double>{128, 64, 64, 64, 128, 64});
    LossScalerOptions all = Opts(4, 2, 2);
    all.flavour = LossScalerOptions::Flavour::kLegacyFp16Optimizer;
    LossScaler a(all);
    CHECK(Run(a, {1, 1, 1, 1, 1, 1, 1, 1}) == std::vector<double>{8, 4, 2, 1, 1, 1, 1, 1});  // clamps, no error
    all.min_scale = 2;  // TestUnfused with min_loss_scale 2
    LossScaler b(all);
    CHECK(Run(b, {1, 1, 1, 1, 1}) == std::vector<double>{8, 4, 2, 2, 2});
  }

  TEST_CASE("loss scaler: ZeRO hysteresis 1 all-overflow halves to 1 then errors (DeepSpeed test 25)") {
    LossScaler s(Opts(8, 2, 1));
    CHECK(Run(s, {1, 1, 1, 1, 1, 1, 1, 1}) == std::vector<double>{128, 64, 32, 16, 8, 4, 2, 1});
    CHECK_THROWS_AS(s.Update(true), LossScaleError);
    // some-overflow: 2 overflows -> /4, window+1 clean -> x2, 1 overflow -> /2
    LossScaler t(Opts(8, 2, 1));
    CHECK(Run(t, {1, 1, 0, 0, 0, 1}) == std::vector<double>{128, 64, 64, 64, 128, 64});
  }

  TEST_CASE("loss scaler: static scale and overflow skipping") {
    LossScaler s = LossScaler::Static(138.0);
    CHECK_FALSE(s.dynamic());
    CHECK(s.scale() == 138.0);
    CHECK(s.Update(true));  // skip, scale unchanged
    CHECK_FALSE(s.Update(false));
    CHECK(s.scale() == 138.0);
    CHECK_THROWS_AS(LossScaler::Static(0.0), zerorun::InvalidArgument);
    CHECK_THROWS_AS(LossScaler(Opts(16, 0, 2)), zerorun::InvalidArgument);
    CHECK_THROWS_AS(LossScaler(Opts(16, 10, 0)), zerorun::InvalidArgument);
  }

  TEST_CASE("loss scaler: state save and restore continues identically") {
    const std::vector<int> pattern = {1, 0, 0, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0};
    for (int cut = 0; cut <= static_cast<int>(pattern.size()); cut += 3) {
      LossScaler a(Opts(10, 3, 2));
      LossScaler b(Opts(10, 3, 2));
      for (int i = 0; i < cut; ++i) a.Update(pattern[i] != 0);
      b.SetState(a.GetState());
      for (size_t i = cut; i < pattern.size(); ++i) {
        a.Update(pattern[i] != 0);
        b.Update(pattern[i] != 0);
        CHECK(a.scale() == b.scale());
        CHECK(a.hysteresis_left() == b.hysteresis_left());
      }
    }
    LossScaler c;
    LossScaler::State bad{-1.0, 0, -1, 2};
    CHECK_THROWS_AS(c.SetState(bad), zerorun::InvalidArgument);
  }

  TEST_CASE("clip: global norm and the combined unscale+clip factor") {
    // Partitions with sums of squares 9 and 16 -> norm 5.
    const double sums[] = {9.0, 16.0};
    CHECK(GlobalNormFromSumSquares(sums) == 5.0);
    CHECK(GlobalNormFromSumSquares(INFINITY) == -1.0);
    CHECK(GlobalNormFromSumSquares(NAN) == -1.0);

    // Scaled norm 5*1024 with scale 1024: unscaled 5; clip 1 -> c = 5.000001, factor 1/(c*1024).
    auto r = ComputeUnscaleClip(5.0 * 1024, 1024, 1.0);
    CHECK(r.unscaled_norm == doctest::Approx(5.0));
    CHECK(r.clipped);
    CHECK(r.grad_scale == doctest::Approx(1.0 / (5.000001 * 1024)).epsilon(1e-7));
    CHECK(r.clip_coef * r.unscaled_norm == doctest::Approx(1.0).epsilon(1e-6));

    // Below the threshold: only unscaling.
    auto u = ComputeUnscaleClip(0.5 * 64, 64, 1.0);
    CHECK_FALSE(u.clipped);
    CHECK(u.grad_scale == 1.0f / 64);
    // Clipping disabled.
    auto d = ComputeUnscaleClip(1e6, 2, 0.0);
    CHECK_FALSE(d.clipped);
    CHECK(d.grad_scale == 0.5f);
    // Non-finite norm (-1 from GlobalNormFromSumSquares): no clipping, as DeepSpeed.
    auto n = ComputeUnscaleClip(-1.0, 8, 1.0);
    CHECK_FALSE(n.clipped);
    CHECK(n.grad_scale == 0.125f);
    // Exactly at max: (1 + 1e-6)/1 > 1 clips by a hair, as DeepSpeed's formula does.
    auto e = ComputeUnscaleClip(1.0, 1.0, 1.0);
    CHECK(e.clipped);
    CHECK(e.grad_scale == doctest::Approx(1.0 / 1.000001));
    CHECK_THROWS_AS(ComputeUnscaleClip(1.0, 0.0, 1.0), zerorun::InvalidArgument);
  }
}
