// lr_scaling (zerorun's own key): the config's absolute lrs follow the resolved global batch, linearly
// or by square root, relative to reference_batch_size; the effective config does not scale twice.
#include <cmath>

#include "config_test_util.h"

using namespace zr_config_test;

TEST_SUITE("unit") {
  TEST_CASE("lr_scaling: linear and sqrt follow world size and accumulation") {
    const std::string base = R"({"train_micro_batch_size_per_gpu": 32, "gradient_accumulation_steps": GAS,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
        "lr_scaling": {"rule": "RULE", "reference_batch_size": 64}})";
    auto cfg = [&](const std::string& rule, int gas) {
      std::string s = base;
      s.replace(s.find("GAS"), 3, std::to_string(gas));
      s.replace(s.find("RULE"), 4, rule);
      return s;
    };
    // B = 32 x gas x world.
    CHECK(Load(cfg("linear", 1), 1).optimizer.Lr() == doctest::Approx(0.5e-3));
    CHECK(Load(cfg("linear", 1), 2).optimizer.Lr() == doctest::Approx(1e-3));
    CHECK(Load(cfg("linear", 2), 4).optimizer.Lr() == doctest::Approx(4e-3));
    CHECK(Load(cfg("sqrt", 1), 8).optimizer.Lr() == doctest::Approx(2e-3));
    CHECK(Load(cfg("sqrt", 4), 2).optimizer.Lr() == doctest::Approx(1e-3 * std::sqrt(4.0)));
    CHECK(Load(cfg("sqrt", 4), 2).lr_scaling.factor == doctest::Approx(2));
    CHECK(Load(cfg("none", 4), 8).optimizer.Lr() == doctest::Approx(1e-3));
    // Without the section nothing is scaled.
    CHECK(Load(R"({"train_batch_size": 1024, "optimizer": {"type": "Adam", "params": {"lr": 1e-3}}})", 1).optimizer.Lr() ==
          1e-3);
  }

  TEST_CASE("lr_scaling: the schedule's absolute lrs are scaled, ratios are not; provenance says how") {
    const rt::Config c = Load(R"({"train_batch_size": 1024,
        "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
        "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 100, "warmup_min_lr": 1e-5, "warmup_max_lr": 2e-3}},
        "lr_scaling": {"rule": "sqrt"}})", 4);
    CHECK(c.scheduler.warmup_decay_lr.warmup_max_lr == doctest::Approx(4e-3));  // sqrt(1024 / 256) = 2
    CHECK(c.scheduler.warmup_decay_lr.warmup_min_lr == doctest::Approx(2e-5));
    CHECK(c.provenance().at("optimizer.params.lr").ToString().find("sqrt rule: train_batch_size 1024 / reference_batch_size 256") !=
          std::string::npos);
    const rt::Config cyc = Load(R"({"train_batch_size": 16, "optimizer": {"type": "SGD", "params": {"lr": 0.1}},
        "zero_optimization": {"stage": 0},
        "scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0.01, "cycle_max_lr": 0.1}},
        "lr_scaling": {"rule": "linear", "reference_batch_size": 64}})", 1);
    CHECK(cyc.scheduler.one_cycle.cycle_max_lr.value() == doctest::Approx(0.025));
    CHECK(cyc.optimizer.Lr() == doctest::Approx(0.025));
    const rt::Config cos = Load(R"({"train_batch_size": 512, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
        "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 100, "warmup_min_ratio": 0.1}},
        "lr_scaling": {"rule": "linear"}})", 2);
    CHECK(cos.optimizer.Lr() == doctest::Approx(2e-3));
    CHECK(cos.scheduler.warmup_cosine_lr.warmup_min_ratio == 0.1);
    // The effective config carries the scaled lr and rule none: loading it again gives the same lr.
    const rt::Config again = rt::LoadConfigString(rt::EffectiveConfigJson(cos), Opts(2));
    CHECK(again.optimizer.Lr() == doctest::Approx(2e-3));
  }

  TEST_CASE("lr_scaling: bad values are refused by name") {
    CHECK(Has(Errors(R"({"train_batch_size": 8, "lr_scaling": {"rule": "cubic"}})"), "lr_scaling.rule"));
    CHECK(Has(Errors(R"({"train_batch_size": 8, "lr_scaling": {"rule": "linear", "reference_batch_size": 0}})"),
              "lr_scaling.reference_batch_size"));
    CHECK(Has(Errors(R"({"train_batch_size": 8, "lr_scaling": {"rul": "linear"}})"), "lr_scaling.rul"));
  }
}
