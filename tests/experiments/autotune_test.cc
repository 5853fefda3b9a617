// DeepSpeed's autotuning section run as a sweep (experiments/autotune.h) with zr_fake_trainer, whose
// tokens/s is 1000 + 10 micro_batch - 50 zero_stage and which runs out of memory above micro batch 8.
#include <algorithm>
#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>

#include "zerorun/core/error.h"
#include "zerorun/experiments/autotune.h"
#include "zerorun/experiments/sweep.h"

namespace ze = zerorun::experiments;
namespace fs = std::filesystem;

namespace {

const char* kConfig = R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": true},
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "fake": {"oom_above": 8},
  "autotuning": {"enabled": true, "tuner_type": "gridsearch", "tuner_early_stopping": 2, "end_profile_step": 4,
                 "min_train_micro_batch_size_per_gpu": 1, "max_train_micro_batch_size_per_gpu": 16,
                 "num_tuning_micro_batch_sizes": 5, "model_info": {"num_params": 1e9}}})";

std::string ErrorOf(const std::string& section) {
  try {
    ze::PlanAutotuning(R"({"train_micro_batch_size_per_gpu": 1, "autotuning": )" + section + "}", "ds.json", {});
  } catch (const zerorun::InvalidArgument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE("autotuning: the plan prunes the stages the estimator says do not fit; errors name the key") {
  ze::AutotuneOptions o;
  o.world_size = 4;
  o.budget_bytes = 10LL << 30;  // 1e9 bf16 Adam on 4 ranks: stage 0 peaks at 14.9 GiB, stage 3 (whole model live) 9.3
  ze::AutotunePlan plan = ze::PlanAutotuning(kConfig, "ds.json", o);
  REQUIRE(plan.spec.params.size() == 3);

  CHECK(plan.spec.params[0].choices == std::vector<std::string>{"1", "2", "3"});
  CHECK(plan.spec.params[1].choices == std::vector<std::string>{"1", "2", "4", "8", "16"});
  CHECK(plan.spec.strategy == ze::Strategy::kGrid);
  CHECK(plan.spec.objective.metric == "summary.window_tokens_per_second");
  CHECK(plan.spec.extra_args == std::vector<std::string>{"--steps", "4", "--profile_window", "3:4"});
  CHECK(plan.spec.objective.maximize);
  CHECK(plan.spec.stop_after_no_improvement == 2);
  CHECK(plan.results_dir == "autotuning_results");
  CHECK(plan.exps_dir == "autotuning_exps");
  REQUIRE(!plan.notes.empty());
  CHECK(plan.notes[0].find("stage 0 pruned") == 0);
  CHECK(plan.spec.base_config.find("autotuning") == std::string::npos);
  CHECK(plan.spec.base_config.find("train_batch_size") == std::string::npos);

  CHECK(ErrorOf(R"({"tuner_type": "bayes"})").find("ds.json: autotuning.tuner_type: 'bayes' is not one of") == 0);
  CHECK(ErrorOf(R"({"mp_size": 2})").find("autotuning.mp_size: zerorun has no model parallelism") != std::string::npos);
  CHECK(ErrorOf(R"({"metric": "flops"})").find("autotuning.metric: not measured per experiment") != std::string::npos);
  CHECK(ErrorOf(R"({"tuner_num_trial": 3})").find("autotuning.tuner_num_trial: not one of DeepSpeed's autotuning keys") !=
        std::string::npos);
  CHECK(ErrorOf(R"({"start_profile_step": 9, "end_profile_step": 5})").find("autotuning.end_profile_step") != std::string::npos);
  CHECK(ErrorOf(R"({"model_info": {"num_params": 1e12}})").find("no ZeRO stage fits") != std::string::npos);
}
TEST_CASE("autotuning: on a device job each stage 1-3 is tried with the optimizer offloaded to the CPU where that fits") {
  ze::AutotuneOptions o;
  o.world_size = 4;
  o.budget_bytes = 10LL << 30;
  o.trainer_args = {"--device", "cuda"};
  ze::AutotunePlan plan = ze::PlanAutotuning(kConfig, "ds.json", o);
  REQUIRE(plan.spec.params.size() == 3);
  CHECK(plan.spec.params[0].path == "zero_optimization");
  // without offload stages 1-3 fit (stage 0 pruned, as above); with it 1-3 fit too; never stage 0 + offload
  std::vector<std::string> want;
  for (const char* c : {R"({"stage":1,"offload_optimizer":{"device":"none"}})", R"({"stage":2,"offload_optimizer":{"device":"none"}})",
                        R"({"stage":3,"offload_optimizer":{"device":"none"}})", R"({"stage":1,"offload_optimizer":{"device":"cpu"}})",
                        R"({"stage":2,"offload_optimizer":{"device":"cpu"}})", R"({"stage":3,"offload_optimizer":{"device":"cpu"}})"}) {
    want.push_back(c);
  }
  CHECK(plan.spec.params[0].choices == want);
  // A budget stage 3 meets only with offload (its 9.3 GiB peak above holds 2.8 GiB of optimizer state):
  o.budget_bytes = 8LL << 30;
  ze::AutotunePlan tight = ze::PlanAutotuning(kConfig, "ds.json", o);
  const std::vector<std::string>& c = tight.spec.params[0].choices;
  auto has = [&](const char* x) { return std::find(c.begin(), c.end(), std::string(x)) != c.end(); };
  CHECK(has(R"({"stage":3,"offload_optimizer":{"device":"cpu"}})"));
  CHECK_FALSE(has(R"({"stage":3,"offload_optimizer":{"device":"none"}})"));
  for (const std::string& x : c) CHECK(x.find("\"stage\":0") == std::string::npos);
  // A CPU job: no offload axis, and the plan says why.
  o.trainer_args.clear();
  ze::AutotunePlan cpu = ze::PlanAutotuning(kConfig, "ds.json", o);
  CHECK(cpu.spec.params[0].path == "zero_optimization.stage");
  bool said = false;
  for (const std::string& n : cpu.notes) said = said || n.find("offload is not searched") != std::string::npos;
  CHECK(said);
}
}  // TEST_SUITE

TEST_SUITE("multiproc") {
TEST_CASE("autotuning: the fastest stage x micro batch that runs wins; OOM runs are recorded; early stop after no gain") {
  std::string t = (fs::temp_directory_path() / "zr_autotune_XXXXXX").string();
  const std::string dir = mkdtemp(t.data());
  ze::AutotuneOptions o;
  o.world_size = 4;
  o.budget_bytes = 10LL << 30;
  ze::AutotunePlan plan = ze::PlanAutotuning(kConfig, "ds.json", o);
  ze::SweepOptions so;
  so.out_dir = dir + "/results";
  so.trials_dir = dir + "/exps";
  so.default_trainer = std::string(std::getenv("ZERORUN_TEST_BINARY_DIR") ? std::getenv("ZERORUN_TEST_BINARY_DIR") : ".") +
                       "/bin/zr_fake_trainer";
  so.log = [](const std::string&) {};
  so.cores = 1;  // one run at a time: the early stop then sees the trials in order
  ze::SweepOutcome out = ze::RunSweep(plan.spec, so);
  // Grid order: stage 1 with micro 1, 2, 4, 8 (each bucket size twice) improves up to (1, 8, 5e7); the
  // next two ((1, 8, 5e8) ties, (1, 16, 5e7) runs out of memory) bring nothing new, so
  // tuner_early_stopping 2 ends the search after 9 of the 30 experiments.
  CHECK(out.trials.size() == 9);
  REQUIRE(out.best == 0);
  const ze::TrialRecord& b = out.trials[0];
  CHECK(b.point[0].json == "1");
  CHECK(b.point[1].json == "8");
  CHECK(b.objective == doctest::Approx(1000 + 80 - 50));  // the window's figure, not the whole run's
  int failed = 0;
  for (const auto& tr : out.trials) {
    if (tr.status != ze::RunStatus::kFailed) continue;
    ++failed;
    CHECK(tr.reason.find("out of memory at micro batch 16") != std::string::npos);
  }
  CHECK(failed == 1);
  CHECK(fs::exists(dir + "/exps/0000/config.json"));
  CHECK(fs::exists(dir + "/results/best_config.json"));
  std::error_code ec;
  fs::remove_all(dir, ec);
}
}  // TEST_SUITE
