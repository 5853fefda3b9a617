// The engine end to end on the local backend: learning, gradient-accumulation and data-parallel
// equivalence for ZeRO stages 0-2, identical parameters on every rank, determinism, fp16 overflow
// handling, and clear errors for configs that do not fit.
#include <doctest/doctest.h>

#include <cmath>
#include <mutex>

#include "tests/common/nan_max.h"
#include "engine_test_util.h"
#include "zerorun/core/error.h"

using namespace zrtest;

namespace {

// Both return NaN once a difference is NaN (a NaN loss or weight on one side), which fails every
// `< tol` and `== 0` check.
double MaxRelDiff(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = MaxKeepNan(worst, std::fabs(a[i] - b[i]) / std::max(1e-6, std::fabs(a[i])));
  return worst;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = MaxKeepNan(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
  return worst;
}

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("engine: a single rank learns (loss falls well below log V)") {
  RunSpec s;
  s.steps = 30;
  RunResult r = Train(s);
  CHECK(r.losses.front() > 2.3);  // about log(16) = 2.77 at the start
  CHECK(r.losses.back() < r.losses.front() - 0.7);
  CHECK(r.skipped == 0);
}

TEST_CASE("engine: micro 2 x gas 4 and worlds 2-4 follow the single-rank curve (fp32, stages 0-2)") {
  RunSpec ref;
  ref.micro = 12;
  RunResult base = Train(ref);
  struct Case {
    int world, stage;
    int64_t micro, gas;
  };
  for (Case c : {Case{1, 0, 3, 4}, Case{2, 0, 6, 1}, Case{2, 1, 3, 2}, Case{3, 1, 4, 1}, Case{2, 2, 2, 3},
                 Case{3, 2, 2, 2}, Case{4, 2, 3, 1}, Case{4, 1, 1, 3}, Case{3, 0, 2, 2}, Case{1, 3, 12, 1},
                 Case{2, 3, 6, 1}, Case{3, 3, 2, 2}, Case{4, 3, 3, 1}}) {
    RunSpec s;
    s.world = c.world;
    s.stage = c.stage;
    s.micro = c.micro;
    s.gas = c.gas;
    // Small parameters stay resident at stage 3 (param_persistence_threshold); 64 partitions most.
    s.zero_json = R"(, "stage3_param_persistence_threshold": 64, "stage3_prefetch_bucket_size": 600)";
    CAPTURE(c.world);
    CAPTURE(c.stage);
    CAPTURE(c.micro);
    CAPTURE(c.gas);
    RunResult r = Train(s);
    CHECK(MaxRelDiff(base.losses, r.losses) < 2e-4);
    for (int rank = 0; rank < c.world; ++rank) {
      // Every rank holds the same parameters, close to the single-rank run's.
      CHECK(MaxAbsDiff(r.final_params[0], r.final_params[static_cast<size_t>(rank)]) == 0.0);
      CHECK(MaxAbsDiff(base.final_params[0], r.final_params[static_cast<size_t>(rank)]) < 2e-4);
    }
  }
}

TEST_CASE("engine: bf16 and fp16 runs at every stage follow their single-rank curve") {
  for (DType dt : {DType::kBF16, DType::kF16}) {
    RunSpec ref;
    ref.dtype = dt;
    ref.micro = 8;
    RunResult base = Train(ref);
    CHECK(base.losses.back() < base.losses.front() - 0.3);
    for (int stage = 0; stage <= 3; ++stage) {
      RunSpec s = ref;
      s.world = 2;
      s.micro = 2;
      s.gas = 2;
      s.stage = stage;
      CAPTURE(DTypeName(dt));
      CAPTURE(stage);
      RunResult r = Train(s);
      CHECK(MaxRelDiff(base.losses, r.losses) < 3e-2);
      CHECK(MaxAbsDiff(r.final_params[0], r.final_params[1]) == 0.0);
    }
  }
}

TEST_CASE("engine: the same run twice is bitwise identical") {
  RunSpec s;
  s.world = 2;
  s.stage = 2;
  s.micro = 2;
  s.gas = 2;
  s.dtype = DType::kBF16;
  RunResult a = Train(s), b = Train(s);
  CHECK(a.losses == b.losses);
  CHECK(a.final_params == b.final_params);
}

TEST_CASE("engine: fp16 with a huge initial scale overflows, backs off and then trains") {
  RunSpec s;
  s.dtype = DType::kF16;
  s.steps = 25;
  s.world = 2;
  s.stage = 1;
  s.micro = 4;
  s.precision_json = R"("fp16": {"enabled": true, "initial_scale_power": 30, "hysteresis": 1, "loss_scale_window": 100},)";
  RunResult r = Train(s);
  CHECK(r.skipped > 0);
  CHECK(r.scales.front() < std::ldexp(1.0, 30));
  CHECK(r.scales.back() == r.scales[r.scales.size() - 2]);  // settled
  CHECK(r.losses.back() < r.losses.front() - 0.2);
}

TEST_CASE("engine: configs that do not fit the model or the world are refused clearly") {
  comm::RunLocalRanks(1, [&](comm::Communicator& comm) {
    gpt::Gpt model(TinyGpt(DType::kF32));
    model.Initialize(1);
    runtime::LoadOptions lo;
    lo.world_size = 2;
    lo.log_warnings = false;
    RunSpec s;
    auto two = runtime::LoadConfigString(ConfigJson(s), lo);
    CHECK_THROWS_WITH_AS(runtime::Engine(model, two, comm), doctest::Contains("world_size = 1"), ConfigError);
    lo.world_size = 1;
    s.dtype = DType::kBF16;
    auto bf16 = runtime::LoadConfigString(ConfigJson(s), lo);
    CHECK_THROWS_WITH_AS(runtime::Engine(model, bf16, comm), doctest::Contains("build the model with dtype bf16"),
                         ConfigError);
  });
}

}  // TEST_SUITE

TEST_SUITE("slow") {

TEST_CASE("engine: stages 0-3 x worlds 1-4 x fp32/bf16/fp16 x accumulation 1 and 3 match single-rank stage 0") {
  // Global batch 36 = micro x accumulation x world for every combination.
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    RunSpec ref;
    ref.dtype = dt;
    ref.micro = 36;
    ref.steps = 20;
    RunResult base = Train(ref);
    const double tol = dt == DType::kF32 ? 2e-4 : 3e-2;
    for (int stage = 0; stage <= 3; ++stage) {
      for (int world = 1; world <= 4; ++world) {
        for (int64_t gas : {1, 3}) {
          if (stage == 0 && world == 1 && gas == 1) continue;
          RunSpec s = ref;
          s.stage = stage;
          s.world = world;
          s.gas = gas;
          s.micro = 36 / (world * gas);
          s.zero_json = R"(, "stage3_param_persistence_threshold": 32, "stage3_prefetch_bucket_size": 1000)";
          CAPTURE(DTypeName(dt));
          CAPTURE(stage);
          CAPTURE(world);
          CAPTURE(gas);
          RunResult r = Train(s);
          CHECK(MaxRelDiff(base.losses, r.losses) < tol);
          for (int rank = 1; rank < world; ++rank) {
            CHECK(MaxAbsDiff(r.final_params[0], r.final_params[static_cast<size_t>(rank)]) == 0.0);
          }
          if (dt == DType::kF32) CHECK(MaxAbsDiff(base.final_params[0], r.final_params[0]) < 2e-4);
        }
      }
    }
  }
}

}  // TEST_SUITE

TEST_SUITE("unit") {

TEST_CASE("engine: stage 3 built from recipes never materialises the full model and equals Initialize()") {
  for (int world : {1, 3}) {
    std::vector<std::vector<double>> losses(2);
    for (int from_recipe = 0; from_recipe < 2; ++from_recipe) {
      std::mutex mu;
      comm::RunLocalRanks(world, [&](comm::Communicator& c) {
        RunSpec s;
        s.world = world;
        s.stage = 3;
        s.micro = 6 / world;
        s.dtype = DType::kBF16;
        s.zero_json = R"(, "stage3_param_persistence_threshold": 0)";
        runtime::Config cfg = LoadSpecConfig(s);
        MemoryAccount before("model");
        gpt::Gpt model(TinyGpt(DType::kBF16));
        runtime::EngineOptions eo;
        if (from_recipe) {
          eo.init_seed = 9;
        } else {
          model.Initialize(9);
        }
        runtime::Engine engine(model, cfg, c, eo);
        if (from_recipe) {
          // Only this rank's shards (and nothing full-size) were ever allocated for the parameters.
          CHECK(engine.memory().Peak(MemCategory::kParams) ==
                engine.memory().Current(MemCategory::kParams));
          CHECK(engine.memory().Current(MemCategory::kParams) * world < 2 * engine.num_parameters() + 64 * world);
        }
        std::vector<double> mine;
        for (int step = 0; step < 4; ++step) {
          auto [x, y] = MicroBatch(step, 0, c.rank(), world, s.micro, 1, 8, 16);
          mine.push_back(engine.Forward(x, y));
          engine.Backward();
          engine.Step();
        }
        std::lock_guard<std::mutex> lock(mu);
        if (c.rank() == 0) losses[static_cast<size_t>(from_recipe)] = mine;
      });
    }
    CHECK(losses[0] == losses[1]);
  }
}

}  // TEST_SUITE

TEST_SUITE("unit") {

TEST_CASE("engine: a stage-3 gather on some ranks only fails at once, naming each rank (with and without sanity checks)") {
 for (bool sanity : {true, false}) {
  CAPTURE(sanity);
  std::mutex mu;
  std::vector<std::string> errors(2);
  comm::CommOptions co;
  co.timeout = comm::Millis(20000);
  comm::RunLocalRanks(2, [&](comm::Communicator& c) {
    RunSpec s;
    s.world = 2;
    s.stage = 3;
    s.micro = 2;
    s.zero_json = Format(R"(, "stage3_param_persistence_threshold": 0, "enable_sanity_checks": {})",
                         sanity ? "true" : "false");
    runtime::Config cfg = LoadSpecConfig(s);
    gpt::Gpt model(TinyGpt(DType::kF32));
    runtime::EngineOptions eo;
    eo.init_seed = 5;
    runtime::Engine engine(model, cfg, c, eo);
    // One full step together works.
    auto [x, y] = MicroBatch(0, 0, c.rank(), 2, 2, 1, 8, 16);
    engine.Forward(x, y);
    engine.Backward();
    engine.Step();
    // Then rank 0 "saves" alone while rank 1 trains on.
    Stopwatch watch;
    try {
      if (c.rank() == 0) {
        engine.GatherParameters();
      } else {
        engine.Forward(x, y);
      }
    } catch (const CommError& e) {
      std::lock_guard<std::mutex> lock(mu);
      errors[static_cast<size_t>(c.rank())] = e.what();
    }
    CHECK(watch.ElapsedSeconds() < 10);  // not the 20 s timeout
  }, co);
  for (const std::string& e : errors) {
    INFO(e);
    CHECK(e.find("rank 0 gathers wte.weight for GatherParameters()") != std::string::npos);
    CHECK(e.find("for a module's forward") != std::string::npos);
    CHECK(e.find("rank 1 gathers ") != std::string::npos);
  }
 }
}

}  // TEST_SUITE
