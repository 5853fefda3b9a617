// The sweep's pieces in-process: spec parsing and its errors, derived values, JSON paths, the grid,
// random and TPE strategies on known functions, and the early stoppers.
#include <doctest/doctest.h>

#include <cmath>
#include <set>

#include "zerorun/core/error.h"
#include "zerorun/experiments/early_stop.h"
#include "zerorun/experiments/expr.h"
#include "zerorun/experiments/json_path.h"
#include "zerorun/experiments/search.h"
#include "zerorun/experiments/spec.h"
#include "zerorun/experiments/sweep.h"

namespace ze = zerorun::experiments;

namespace {

std::string ErrorOf(const std::string& spec) {
  try {
    ze::ParseSweepSpec(spec, "t.json");
  } catch (const zerorun::InvalidArgument& e) {
    return e.what();
  }
  return "";
}

// The 2-D function the strategies are compared on: smooth, minimum 0 at (0.3, -0.2) on [-1, 1]^2.
double Bowl(double x, double y) { return (x - 0.3) * (x - 0.3) + (y + 0.2) * (y + 0.2); }

// Trials the strategy needs until its best point is within `target` of the minimum (capped at `cap`).
int64_t TrialsToReach(const std::string& strategy, uint64_t seed, double target, int64_t cap) {
  ze::SweepSpec s = ze::ParseSweepSpec("{\"strategy\": \"" + strategy + "\", \"trials\": " + std::to_string(cap) +
                                           ", \"seed\": " + std::to_string(seed) + R"(,
      "params": {"x": {"path": "x", "uniform": [-1, 1]}, "y": {"path": "y", "uniform": [-1, 1]}}})",
                                       "bowl.json");
  auto st = ze::MakeSearchStrategy(s);
  std::vector<ze::Observation> history;
  for (int64_t i = 0; i < cap; ++i) {
    ze::Point p = st->Suggest(i, history);
    double v = Bowl(p[0].number, p[1].number);
    if (v < target) return i + 1;
    history.push_back({p, v});
  }
  return cap;
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE("experiments: derived values evaluate, errors name the place") {
  std::map<std::string, double> n = {{"base_lr", 0.001}, {"train_batch_size", 1024}};
  CHECK(ze::EvalExpr("base_lr * sqrt(train_batch_size / 256)", n, "w") == doctest::Approx(0.002));
  CHECK(ze::EvalExpr("2^3^2", n, "w") == doctest::Approx(512));
  CHECK(ze::EvalExpr("-min(1, 2) + max(3, 4) * 2", n, "w") == doctest::Approx(7));
  CHECK(ze::EvalExpr("round(2.6) + floor(-0.5) + log(exp(1))", n, "w") == doctest::Approx(3));
  auto err = [&](const std::string& e) {
    try {
      ze::EvalExpr(e, n, "s.json: params.lr.expr");
    } catch (const zerorun::InvalidArgument& x) {
      return std::string(x.what());
    }
    return std::string();
  };
  CHECK(err("base_lr * batch").find("unknown name 'batch' (known: base_lr, train_batch_size)") != std::string::npos);
  CHECK(err("base_lr * batch").find("s.json: params.lr.expr") == 0);
  CHECK(err("sqrt(1, 2)").find("sqrt() takes 1 argument(s), got 2") != std::string::npos);
  CHECK(err("1 / (base_lr - base_lr)").find("division by zero") != std::string::npos);
  CHECK(err("(1 + 2").find("expected ')'") != std::string::npos);
  CHECK(err("1 + ").find("character 5") != std::string::npos);
  CHECK(err("foo(1)").find("unknown function 'foo'") != std::string::npos);
}

TEST_CASE("experiments: JSON paths set and create config keys") {
  rapidjson::Document d;
  d.Parse(R"({"optimizer": {"params": {"betas": [0.9, 0.999]}}, "x": 1})");
  ze::SetJsonPath(d, "optimizer.params.betas[1]", "0.95");
  ze::SetJsonPath(d, "optimizer.params.lr", "0.003");
  ze::SetJsonPath(d, "scheduler.params.warmup_num_steps", "20");
  CHECK(d["optimizer"]["params"]["betas"][1].GetDouble() == 0.95);
  CHECK(d["optimizer"]["params"]["lr"].GetDouble() == 0.003);
  CHECK(d["scheduler"]["params"]["warmup_num_steps"].GetInt() == 20);
  CHECK_THROWS_WITH_AS(ze::SetJsonPath(d, "optimizer.params.betas[2]", "1"),
                       doctest::Contains("index 2 is past the end of 'optimizer.params.betas' (2 element(s))"),
                       zerorun::InvalidArgument);
  CHECK_THROWS_WITH_AS(ze::SetJsonPath(d, "x.y", "1"), doctest::Contains("'x' is not an object"), zerorun::InvalidArgument);
  CHECK_THROWS_AS(ze::ParseJsonPath("a..b"), zerorun::InvalidArgument);
  CHECK_THROWS_AS(ze::ParseJsonPath("a[x]"), zerorun::InvalidArgument);
  CHECK(ze::ParseJsonPath("a[3].b").size() == 3);
}

TEST_CASE("experiments: spec errors name the key and the place") {
  const std::string p = R"("params": {"lr": {"path": "optimizer.params.lr", "log_uniform": [1e-4, 1e-2]}})";
  CHECK(ErrorOf("{" + p + ", \"trials\": 3, \"stratgy\": \"grid\"}").find("t.json: stratgy: unknown key (did you mean 'strategy'?)") != std::string::npos);
  CHECK(ErrorOf("{" + p + "}").find("t.json: trials: a random search needs \"trials\": N") != std::string::npos);
  CHECK(ErrorOf("{" + p + ", \"strategy\": \"grid\"}").find("params.lr: a continuous range in a grid search needs \"grid\": N") != std::string::npos);
  CHECK(ErrorOf(R"({"trials": 2, "params": {"lr": {"path": "a", "log_uniform": [0, 1]}}})").find("params.lr.log_uniform: bounds must be > 0") != std::string::npos);
  CHECK(ErrorOf(R"({"trials": 2, "params": {"lr": {"path": "a", "uniform": [2, 1]}}})").find("params.lr.uniform: low 2 must be <= high 1") != std::string::npos);
  CHECK(ErrorOf(R"({"trials": 2, "params": {"lr": {"path": "a", "flag": "--b", "uniform": [0, 1]}}})").find("exactly one of \"path\"") != std::string::npos);
  CHECK(ErrorOf(R"({"trials": 2, "params": {"lr": {"path": "a", "unifrom": [0, 1]}}})").find("params.lr") != std::string::npos);
  CHECK(ErrorOf(R"({"trials": 2, "params": {"lr": {"path": "a", "uniform": [0, 1], "grid": 3, "lg": 1}}})").find("params.lr.lg: unknown key (did you mean 'log'?)") != std::string::npos);
  CHECK(ErrorOf(R"({"trials": 2, "params": {"lr": {"flag": "n_layer", "choices": [1]}}})").find("params.lr.flag: 'n_layer' does not start with --") != std::string::npos);
  CHECK(ErrorOf(R"({"trials": 2, "objective": {"metric": "loss"}, "params": {"a": {"path": "a", "choices": [1]}}})").find("objective.metric: 'loss' is not one of") != std::string::npos);
  CHECK(ErrorOf(R"({"trials": 2, "early_stopping": {"rule": "hyperband"}, "params": {"a": {"path": "a", "choices": [1]}}})").find("early_stopping.rule: 'hyperband'") != std::string::npos);
  CHECK(ErrorOf(R"({"trials": 2, "params": {"a": {"path": "a[", "choices": [1]}}})").find("params.a.path: JSON path 'a['") != std::string::npos);
  CHECK(ErrorOf(R"({"trials": 2, "params": {"a": {"path": "a", "expr": "1"}}})").find("every parameter is derived") != std::string::npos);
  CHECK(ErrorOf("{\"trials\": 2,").find("t.json: not valid JSON at offset") == 0);
  CHECK(ErrorOf(R"({"trials": 2, "params": {"a b": {"path": "a", "choices": [1]}}})").find("params.a b: a parameter's name") != std::string::npos);
  CHECK(ErrorOf(R"({"trials": 2, "base_config": "/nonexistent/x.json", "params": {"a": {"path": "a", "choices": [1]}}})").find("cannot read") != std::string::npos);
}

TEST_CASE("experiments: grid enumerates the product exactly, last parameter fastest") {
  ze::SweepSpec s = ze::ParseSweepSpec(R"J({"strategy": "grid", "params": {
      "lr": {"path": "optimizer.params.lr", "log_uniform": [1e-4, 1e-2], "grid": 3},
      "stage": {"path": "zero_optimization.stage", "choices": [0, 1, 2, 3]},
      "layers": {"flag": "--n_layer", "int": [2, 4]},
      "scaled": {"path": "scheduler.params.warmup_max_lr", "expr": "lr * sqrt(train_batch_size / 256)"}},
      "base_config": {"train_batch_size": 1024}})J", "g.json");
  auto st = ze::MakeSearchStrategy(s);
  REQUIRE(st->NumTrials() == 3 * 4 * 3);
  std::set<std::string> seen;
  for (int64_t i = 0; i < st->NumTrials(); ++i) {
    ze::Point p = st->Suggest(i, {});
    seen.insert(p[0].json + "/" + p[1].json + "/" + p[2].json);
    if (i == 0) {
      CHECK(p[0].json == "0.0001");
      CHECK(p[1].json == "0");
      CHECK(p[2].json == "2");
    }
    if (i == 1) CHECK(p[2].json == "3");
    if (i == 3) CHECK(p[1].json == "1");
    if (i == 12) CHECK(p[0].json == "0.001");
    ze::TrialSetup t = ze::MakeTrialSetup(s, p);
    CHECK(t.flags == std::vector<std::string>{"--n_layer", p[2].json});
    CHECK(t.point[3].number == doctest::Approx(p[0].number * 2));
    rapidjson::Document cfg;
    cfg.Parse(t.config_json.c_str());
    CHECK(cfg["scheduler"]["params"]["warmup_max_lr"].GetDouble() == doctest::Approx(t.point[3].number).epsilon(1e-12));
  }
  CHECK(seen.size() == 36);
  // "trials" caps a grid.
  ze::SweepSpec capped = ze::ParseSweepSpec(R"({"strategy": "grid", "trials": 5, "params": {"a": {"path": "a", "int": [1, 100]}}})", "c.json");
  CHECK(ze::MakeSearchStrategy(capped)->NumTrials() == 5);
}

TEST_CASE("experiments: random respects bounds and is a function of (seed, trial)") {
  const char* text = R"({"trials": 200, "seed": SEED, "params": {
      "lr": {"path": "lr", "log_uniform": [1e-5, 1e-1]}, "w": {"path": "w", "uniform": [-2, 3]},
      "n": {"path": "n", "int": [4, 64], "log": true}, "m": {"path": "m", "int": [0, 3]},
      "b": {"path": "b", "choices": [0.9, 0.95, "x"]}}})";
  auto make = [&](int seed) {
    std::string t = text;
    t.replace(t.find("SEED"), 4, std::to_string(seed));
    return ze::ParseSweepSpec(t, "r.json");
  };
  ze::SweepSpec s1 = make(7), s2 = make(7), s3 = make(8);
  auto a = ze::MakeSearchStrategy(s1), b = ze::MakeSearchStrategy(s2), c = ze::MakeSearchStrategy(s3);
  int below_1e3 = 0, m_seen[4] = {0, 0, 0, 0}, choice_seen[3] = {0, 0, 0}, differ = 0;
  for (int64_t i = 0; i < 200; ++i) {
    ze::Point p = a->Suggest(i, {});
    CHECK(p[0].number >= 1e-5);
    CHECK(p[0].number <= 1e-1);
    CHECK(p[1].number >= -2);
    CHECK(p[1].number <= 3);
    CHECK(p[2].number >= 4);
    CHECK(p[2].number <= 64);
    CHECK(p[2].number == std::round(p[2].number));
    below_1e3 += p[0].number < 1e-3 ? 1 : 0;
    m_seen[static_cast<int>(p[3].number)]++;
    choice_seen[static_cast<int>(p[4].internal)]++;
    b->Suggest(199 - i, {});  // the same trial gives the same point, whatever was asked before
    ze::Point q = b->Suggest(i, {});
    for (size_t k = 0; k < p.size(); ++k) CHECK(p[k].json == q[k].json);
    differ += c->Suggest(i, {})[0].json != p[0].json ? 1 : 0;
  }
  // log-uniform over 4 decades: about half below 1e-3.
  CHECK(below_1e3 > 70);
  CHECK(below_1e3 < 130);
  for (int k = 0; k < 4; ++k) CHECK(m_seen[k] > 20);
  for (int k = 0; k < 3; ++k) CHECK(choice_seen[k] > 30);
  CHECK(differ > 190);
}

TEST_CASE("experiments: TPE finds the optimum of a smooth 2-D function in fewer trials than random") {
  const int64_t cap = 120;
  double tpe = 0, random = 0;
  const int seeds = 12;
  for (int seed = 0; seed < seeds; ++seed) {
    tpe += static_cast<double>(TrialsToReach("tpe", static_cast<uint64_t>(seed), 0.01, cap));
    random += static_cast<double>(TrialsToReach("random", static_cast<uint64_t>(seed), 0.01, cap));
  }
  tpe /= seeds;
  random /= seeds;
  MESSAGE("mean trials to reach f < 0.01: TPE " << tpe << ", random " << random);
  CHECK(tpe < 0.6 * random);
}

TEST_CASE("experiments: ASHA keeps the best 1/eta at each rung") {
  ze::EarlyStopSpec s;
  s.rule = ze::StopRule::kAsha;
  s.grace_steps = 2;
  s.reduction_factor = 3;
  auto st = ze::MakeEarlyStopper(s);
  // Runs report losses equal to their rank (0 best) at every step; run order 2, 1, 0, 5, 4, 3.
  std::vector<int> order = {2, 1, 0, 5, 4, 3};
  std::map<int, int64_t> stopped_at;
  for (int r : order) {
    for (int64_t step = 1; step <= 20; ++step) {
      if (!st->Report(std::to_string(r), step, r).empty()) {
        stopped_at[r] = step;
        break;
      }
    }
  }
  // Rung 0 (step 2): 2 and 1 pass (fewer than eta records), 0 is the best of three, 5 and 4 are not among
  // the best floor(4/3) = 1 / floor(5/3) = 1, 3 is not among the best 2 of 6. Rung 1 (step 6): 2 passes,
  // 1 passes, 0 is the best of three. Rung 2 (step 18): 2, 1 pass, 0 best.
  CHECK(stopped_at.count(0) == 0);
  CHECK(stopped_at.count(1) == 0);
  CHECK(stopped_at.count(2) == 0);
  CHECK(stopped_at[5] == 2);
  CHECK(stopped_at[4] == 2);
  CHECK(stopped_at[3] == 2);
}

TEST_CASE("experiments: median stopping compares with the completed runs' running means") {
  ze::EarlyStopSpec s;
  s.rule = ze::StopRule::kMedian;
  s.grace_steps = 3;
  s.min_trials = 3;
  auto st = ze::MakeEarlyStopper(s);
  for (int r = 0; r < 3; ++r) {
    ze::Curve c;
    for (int64_t step = 1; step <= 10; ++step) {
      c.emplace_back(step, 1.0 + r);
      CHECK(st->Report(std::to_string(r), step, 1.0 + r).empty());  // fewer than min_trials completed
    }
    st->Completed(std::to_string(r), c);
  }
  // Median of the running means is 2: a run at 1.5 continues, one at 2.5 stops at the grace step.
  for (int64_t step = 1; step <= 10; ++step) CHECK(st->Report("good", step, 1.5).empty());
  std::string why;
  int64_t at = 0;
  for (int64_t step = 1; step <= 10; ++step) {
    why = st->Report("bad", step, 2.5);
    if (!why.empty()) {
      at = step;
      break;
    }
  }
  CHECK(at == 3);
  CHECK(why.find("worse than the median 2") != std::string::npos);
}
}  // TEST_SUITE
