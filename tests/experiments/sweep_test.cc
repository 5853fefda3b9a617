// Sweeps end to end with zr_fake_trainer (a known function of its config and flags): the grid runs
// every point once, resume re-runs nothing finished, crashing / diverging trials are recorded and
// the sweep goes on, ASHA stops the worst trials, the report draws every trial.
#include <doctest/doctest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "zerorun/core/error.h"
#include "zerorun/experiments/report.h"
#include "zerorun/experiments/results.h"
#include "zerorun/experiments/sweep.h"

namespace ze = zerorun::experiments;
namespace fs = std::filesystem;

namespace {

std::string BinDir() {
  const char* dir = std::getenv("ZERORUN_TEST_BINARY_DIR");
  return std::string(dir ? dir : ".") + "/bin";
}

struct TempDir {
  std::string path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "zr_sweep_XXXXXX").string();
    path = mkdtemp(t.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string Slurp(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Ran {
  ze::SweepOutcome outcome;
  std::vector<std::string> log;
};

Ran Sweep(const std::string& spec_text, const std::string& out, int64_t cores = 2) {
  ze::SweepSpec spec = ze::ParseSweepSpec(spec_text, "spec.json");
  ze::SweepOptions o;
  o.out_dir = out;
  o.default_trainer = BinDir() + "/zr_fake_trainer";
  o.cores = cores;
  Ran r;
  o.log = [&](const std::string& l) { r.log.push_back(l); };
  r.outcome = ze::RunSweep(spec, o);
  return r;
}

const ze::TrialRecord& ById(const ze::SweepOutcome& o, int64_t id) {
  for (const auto& t : o.trials) {
    if (t.id == id) return t;
  }
  FAIL("no trial " << id);
  return o.trials.front();
}

const char* kGrid = R"({
  "strategy": "grid", "seed": 5, "trial_timeout_s": 120,
  "base_config": {"train_micro_batch_size_per_gpu": 2, "fake": {}},
  "params": {"x": {"flag": "--x", "choices": [0, 0.3, 0.6]},
             "y": {"path": "fake.y", "uniform": [-0.2, 0.4], "grid": 3}}})";

}  // namespace

TEST_SUITE("multiproc") {
TEST_CASE("sweep: a grid runs each point once, with its own seed; best config and results files") {
  TempDir tmp;
  Ran r = Sweep(kGrid, tmp.path);
  const ze::SweepOutcome& o = r.outcome;
  REQUIRE(o.trials.size() == 9);
  CHECK(o.ran == 9);
  REQUIRE(o.best == 0);
  const ze::TrialRecord& best = o.trials[0];
  CHECK(best.status == ze::RunStatus::kOk);
  CHECK(best.point[0].json == "0.3");
  CHECK(best.point[1].json == "-0.2");
  CHECK(best.objective == doctest::Approx(1 + 2 * std::exp(-30.0 / 8)).epsilon(1e-5));
  CHECK(best.flags == std::vector<std::string>{"--x", "0.3"});
  std::set<uint64_t> seeds;
  for (const auto& t : o.trials) {
    CHECK(t.status == ze::RunStatus::kOk);
    REQUIRE(t.runs.size() == 1);
    seeds.insert(t.runs[0].seed);
    CHECK(t.runs[0].curve.size() == 30);
    char dir[64];
    std::snprintf(dir, sizeof dir, "/trials/%04lld/run0/summary.0.json", static_cast<long long>(t.id));
    std::string summary = Slurp(tmp.path + dir);  // the trainer got the recorded seed
    CHECK(summary.find(zerorun::Format("\"seed\": {},", t.runs[0].seed)) != std::string::npos);
  }
  CHECK(seeds.size() == 9);
  for (size_t i = 1; i < o.trials.size(); ++i) CHECK(o.trials[i - 1].objective <= o.trials[i].objective);
  std::string best_cfg = Slurp(tmp.path + "/best_config.json");
  CHECK(best_cfg.find("\"y\": -0.2") != std::string::npos);
  CHECK(best_cfg.find("\"train_micro_batch_size_per_gpu\": 2") != std::string::npos);
  std::string csv = Slurp(tmp.path + "/results.csv");
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 10);
  CHECK(csv.rfind("rank,trial,status,objective,x,y,", 0) == 0);
  CHECK(csv.find("\n1,") != std::string::npos);
  std::string jsonl = Slurp(tmp.path + "/results.jsonl");
  CHECK(jsonl.rfind(zerorun::Format("{\"trial\":{},", best.id), 0) == 0);
  CHECK(fs::exists(tmp.path + "/trials/0000/config.json"));
  CHECK(fs::exists(tmp.path + "/trials/0000/run0/log.txt"));

  {  // resume re-runs nothing finished, and only what did not finish
    Ran again = Sweep(kGrid, tmp.path);
    CHECK(again.outcome.ran == 0);
    CHECK(again.outcome.trials.size() == 9);
    CHECK(again.outcome.trials[0].id == best.id);
    fs::remove(tmp.path + "/trials/0004/result.json");  // as if the sweep stopped during trial 4
    Ran third = Sweep(kGrid, tmp.path);
    CHECK(third.outcome.ran == 1);
    CHECK(third.outcome.trials.size() == 9);
    CHECK(ById(third.outcome, 4).point[1].json == ById(o, 4).point[1].json);
    CHECK(ById(third.outcome, 4).runs[0].seed == ById(o, 4).runs[0].seed);
    // Another spec in the same directory is refused.
    std::string other = kGrid;
    other.replace(other.find("0.6]"), 4, "0.9]");
    CHECK_THROWS_WITH_AS(Sweep(other, tmp.path), doctest::Contains("holds a sweep of a different spec"), zerorun::InvalidArgument);
  }
  {  // the report draws every trial
    ze::SweepSpec spec = ze::ParseSweepSpec(kGrid, "spec.json");
    std::string html = ze::ReportHtml(spec, ze::LoadSweepResults(spec, tmp.path));
    auto count = [&](const std::string& what) {
      size_t n = 0;
      for (size_t p = html.find(what); p != std::string::npos; p = html.find(what, p + 1)) ++n;
      return n;
    };
    CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
    CHECK(count("<polyline") == 9 + 9);  // loss curves and parallel coordinates
    CHECK(count("<circle") == 9 * 2);    // one scatter per parameter
    CHECK(count("<svg") == 1 + 2 + 1 + 1);
    CHECK(count("<tr>") == 10);
    CHECK(html.find("<script") == std::string::npos);
    std::vector<double> imp = ze::ParamImportance(spec, ze::LoadSweepResults(spec, tmp.path));
    // f is additive: x adds {0.09, 0, 0.09}, y adds {0, 0.09, 0.36}; their shares of the variance are
    // 0.0162 / 0.2268 and 0.2106 / 0.2268.
    CHECK(imp[0] == doctest::Approx(0.0162 / 0.2268).epsilon(1e-3));
    CHECK(imp[1] == doctest::Approx(0.2106 / 0.2268).epsilon(1e-3));
  }
}

TEST_CASE("sweep: crashing and diverging trials are recorded with the reason; the sweep goes on") {
  TempDir tmp;
  Ran r = Sweep(R"({"strategy": "grid", "trial_timeout_s": 120,
      "base_config": {"fp16": {"enabled": true, "min_loss_scale": 1}, "fake": {"crash_above": 0.5, "nan_below": -0.4}},
      "params": {"x": {"path": "fake.x", "choices": [0.1, 0.9]}, "y": {"path": "fake.y", "choices": [-0.5, 0.5]},
                 "stuck": {"path": "fake.fp16_stuck", "choices": [false, true]}}})",
                tmp.path);
  const ze::SweepOutcome& o = r.outcome;
  REQUIRE(o.trials.size() == 8);
  // Trial order: x slowest, then y, then stuck.
  CHECK(ById(o, 0).status == ze::RunStatus::kDiverged);
  CHECK(ById(o, 0).reason == "loss is not finite at step 3");
  CHECK(ById(o, 2).status == ze::RunStatus::kOk);
  CHECK(ById(o, 3).status == ze::RunStatus::kDiverged);
  CHECK(ById(o, 3).reason.find("loss scale at its minimum (1)") != std::string::npos);
  for (int id = 4; id < 8; ++id) {
    CHECK(ById(o, id).status == ze::RunStatus::kFailed);
    CHECK(ById(o, id).reason.find("exit status 3: zr_fake_trainer: crashing as asked") != std::string::npos);
    CHECK(std::isnan(ById(o, id).objective));
  }
  REQUIRE(o.best == 0);
  CHECK(o.trials[0].id == 2);
  CHECK(o.trials.back().status == ze::RunStatus::kFailed);
  std::string csv = Slurp(tmp.path + "/results.csv");
  CHECK(csv.find(",failed,,") != std::string::npos);
}

TEST_CASE("sweep: ASHA stops the worst trials, keeps the best; a run past its timeout fails") {
  TempDir tmp;
  // One run at a time, so the decisions are the same every time. f grows with |x - 0.3|.
  Ran r = Sweep(R"({"strategy": "grid", "parallel": 1, "trial_timeout_s": 120,
      "base_config": {"fake": {}},
      "early_stopping": {"rule": "asha", "grace_steps": 3, "reduction_factor": 3},
      "params": {"x": {"path": "fake.x", "choices": [0.5, 0.3, 1.1, 0.9, 0.7, 1.3, 0.4, 1.5, 1.2]}}})",
                tmp.path);
  const ze::SweepOutcome& o = r.outcome;
  REQUIRE(o.trials.size() == 9);
  CHECK(o.trials[0].id == 1);  // x = 0.3, the optimum
  CHECK(o.trials[0].status == ze::RunStatus::kOk);
  int stopped = 0;
  for (const auto& t : o.trials) {
    if (t.status != ze::RunStatus::kStopped) continue;
    ++stopped;
    CHECK(t.reason.find("ASHA at rung") != std::string::npos);
    CHECK(t.runs[0].curve.size() < 30);
  }
  CHECK(stopped >= 4);
  for (int id : {2, 5, 7, 8}) CHECK(ById(o, id).status == ze::RunStatus::kStopped);  // the worst ones
  CHECK(ById(o, 1).status == ze::RunStatus::kOk);

  TempDir tmp2;
  Ran slow = Sweep(R"({"strategy": "grid", "trial_timeout_s": 1, "base_config": {"fake": {"sleep_ms": 1000}},
      "params": {"x": {"path": "fake.x", "choices": [0.3]}}})",
                   tmp2.path);
  REQUIRE(slow.outcome.trials.size() == 1);
  CHECK(slow.outcome.trials[0].status == ze::RunStatus::kFailed);
  CHECK(slow.outcome.trials[0].reason.find("ran past trial_timeout_s (1 s)") != std::string::npos);
}

TEST_CASE("sweep: repeats average seeds; a TPE sweep runs through the trainer; the CLI refuses a bad spec") {
  TempDir tmp;
  Ran r = Sweep(R"({"strategy": "tpe", "trials": 10, "repeats": 2, "tpe": {"startup_trials": 4},
      "base_config": {"fake": {"noise": true}},
      "params": {"x": {"path": "fake.x", "uniform": [-1, 1]}, "y": {"path": "fake.y", "uniform": [-1, 1]}}})",
                tmp.path);
  REQUIRE(r.outcome.trials.size() == 10);
  CHECK(r.outcome.ran == 20);
  for (const auto& t : r.outcome.trials) {
    REQUIRE(t.runs.size() == 2);
    CHECK(t.runs[0].seed != t.runs[1].seed);
    CHECK(t.objective == doctest::Approx((t.runs[0].objective + t.runs[1].objective) / 2));
  }
  std::ofstream(tmp.path + "/bad.json") << R"({"strategy": "grid", "params": {"lr": {"path": "lr", "uniform": [0, 1]}}})";
  std::string cmd = BinDir() + "/zerorun-sweep " + tmp.path + "/bad.json 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[512];
  std::string out;
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  int status = pclose(p);
  CHECK(WEXITSTATUS(status) == 2);
  CHECK(out.find("bad.json: params.lr: a continuous range in a grid search needs \"grid\": N") != std::string::npos);
}
}  // TEST_SUITE
