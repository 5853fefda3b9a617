#include "zerorun/experiments/autotune.h"

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>

#include "zerorun/core/error.h"
#include "zerorun/experiments/json_path.h"
#include "zerorun/experiments/search.h"
#include "zerorun/zero/estimate.h"

namespace zerorun::experiments {
namespace {

using rapidjson::Value;

std::string ToJson(const Value& v) {
  rapidjson::StringBuffer sb;
  rapidjson::Writer<rapidjson::StringBuffer> w(sb);
  v.Accept(w);
  return sb.GetString();
}

std::string Quote(const std::string& s) {
  rapidjson::StringBuffer sb;
  rapidjson::Writer<rapidjson::StringBuffer> w(sb);
  w.String(s.c_str());
  return sb.GetString();
}

int64_t AvailableMemoryBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

// Micro-batch candidates: powers of two in [lo, hi] (and hi), thinned to `n` spread evenly (ends kept).
std::vector<int64_t> MicroBatches(int64_t lo, int64_t hi, int64_t n) {
  std::vector<int64_t> all;
  for (int64_t m = 1; m <= hi; m *= 2) {
    if (m >= lo) all.push_back(m);
  }
  if (all.empty() || all.front() != lo) all.insert(all.begin(), lo);
  if (all.back() != hi) all.push_back(hi);
  if (static_cast<int64_t>(all.size()) <= n) return all;
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i) {
    size_t idx = n == 1 ? all.size() - 1 : static_cast<size_t>(std::llround(static_cast<double>(i) * static_cast<double>(all.size() - 1) / static_cast<double>(n - 1)));
    if (out.empty() || out.back() != all[idx]) out.push_back(all[idx]);
  }
  return out;
}

}  // namespace

AutotunePlan PlanAutotuning(const std::string& config_text, const std::string& source, const AutotuneOptions& opts) {
  rapidjson::Document d;
  d.Parse<rapidjson::kParseCommentsFlag | rapidjson::kParseTrailingCommasFlag>(config_text.c_str(), config_text.size());
  auto fail = [&](const std::string& place, const std::string& what) {
    ZR_THROW(InvalidArgument, "{}: {}: {}", source, place, what);
  };
  if (d.HasParseError()) {
    ZR_THROW(InvalidArgument, "{}: not valid JSON at offset {}: {}", source, d.GetErrorOffset(),
             rapidjson::GetParseError_En(d.GetParseError()));
  }
  if (!d.IsObject()) fail("(top level)", "expected an object");
  if (!d.HasMember("autotuning") || !d["autotuning"].IsObject()) fail("autotuning", "the config has no autotuning section");
  const Value& a = d["autotuning"];
  static const std::set<std::string> kKnown = {
      "enabled", "fast", "results_dir", "exps_dir", "overwrite", "start_profile_step", "end_profile_step", "metric",
      "metric_path", "tuner_type", "tuner_early_stopping", "tuner_num_trials", "max_train_micro_batch_size_per_gpu",
      "min_train_micro_batch_size_per_gpu", "num_tuning_micro_batch_sizes", "max_train_batch_size", "mp_size",
      "arg_mappings", "model_info", "model_info_path"};
  for (auto it = a.MemberBegin(); it != a.MemberEnd(); ++it) {
    if (!kKnown.count(it->name.GetString())) {
      fail(Format("autotuning.{}", it->name.GetString()), "not one of DeepSpeed's autotuning keys");
    }
  }
  auto str = [&](const char* k, const char* def) -> std::string {
    if (!a.HasMember(k)) return def;
    if (!a[k].IsString()) fail(Format("autotuning.{}", k), "expected a string");
    return a[k].GetString();
  };
  auto integer = [&](const char* k, int64_t def, int64_t min) -> int64_t {
    if (!a.HasMember(k) || a[k].IsNull()) return def;
    if (!a[k].IsInt64() || a[k].GetInt64() < min) fail(Format("autotuning.{}", k), Format("expected an integer >= {}", min));
    return a[k].GetInt64();
  };
  AutotunePlan plan;
  plan.results_dir = str("results_dir", "autotuning_results");
  plan.exps_dir = str("exps_dir", "autotuning_exps");
  const std::string metric = str("metric", "throughput");
  const std::string tuner = str("tuner_type", "gridsearch");
  const int64_t start_step = integer("start_profile_step", 3, 1);
  const int64_t end_step = integer("end_profile_step", 5, 1);
  const int64_t early = integer("tuner_early_stopping", 5, 0);
  const int64_t num_trials = integer("tuner_num_trials", 50, 1);
  const int64_t mb_max = integer("max_train_micro_batch_size_per_gpu", 1024, 1);
  const int64_t mb_min = integer("min_train_micro_batch_size_per_gpu", 1, 1);
  const int64_t mb_n = integer("num_tuning_micro_batch_sizes", 3, 1);
  const int64_t mp = integer("mp_size", 1, 1);
  if (end_step < start_step) fail("autotuning.end_profile_step", Format("{} is before start_profile_step {}", end_step, start_step));
  if (mb_min > mb_max) fail("autotuning.min_train_micro_batch_size_per_gpu", "is above max_train_micro_batch_size_per_gpu");
  if (mp != 1) fail("autotuning.mp_size", "zerorun has no model parallelism (every rank is data-parallel): expected 1");
  if (metric != "throughput" && metric != "latency") {
    fail("autotuning.metric", metric == "flops" ? "not measured per experiment (zerorun's FLOPs profiler reports one "
                                                  "profile_step of a run); use throughput or latency"
                                                : Format("'{}' is not one of throughput, latency, flops", metric));
  }
  std::string strategy;
  if (tuner == "gridsearch") strategy = "grid";
  else if (tuner == "random") strategy = "random";
  else if (tuner == "model_based") strategy = "tpe";
  else fail("autotuning.tuner_type", Format("'{}' is not one of gridsearch, random, model_based", tuner));
  int64_t psi = opts.num_params;
  if (psi == 0 && a.HasMember("model_info") && a["model_info"].IsObject() && a["model_info"].HasMember("num_params")) {
    if (!a["model_info"]["num_params"].IsNumber()) fail("autotuning.model_info.num_params", "expected a number");
    psi = static_cast<int64_t>(a["model_info"]["num_params"].GetDouble());
  }

  // A job on a GPU (--device cuda among the trainer's flags) can move optimizer state to host memory;
  // on a CPU job it is in host memory either way, so offload is no axis there.
  bool device_job = false;
  for (size_t i = 0; i < opts.trainer_args.size(); ++i) {
    const std::string& x = opts.trainer_args[i];
    if (x == "--device=cuda" || (x == "--device" && i + 1 < opts.trainer_args.size() && opts.trainer_args[i + 1] == "cuda")) {
      device_job = true;
    }
  }
  // The stages that fit: model states + transient buckets per rank against the budget; on a device
  // job also each stage 1-3 with the optimizer offloaded to the CPU that fits so.
  std::vector<int> stages;
  std::vector<int> offload_stages;
  const int64_t budget = opts.budget_bytes > 0 ? opts.budget_bytes : AvailableMemoryBytes() / std::max<int64_t>(1, opts.world_size);
  const bool bf16 = d.HasMember("bf16") && d["bf16"].IsObject() && d["bf16"].HasMember("enabled") && d["bf16"]["enabled"].IsTrue();
  const bool fp16 = d.HasMember("fp16") && d["fp16"].IsObject() && d["fp16"].HasMember("enabled") && d["fp16"]["enabled"].IsTrue();
  for (int stage = 0; stage <= 3; ++stage) {
    if (psi <= 0 || budget <= 0) {
      stages.push_back(stage);
      if (device_job && stage > 0) offload_stages.push_back(stage);
      continue;
    }
    zero::EstimateInput in;
    in.groups = zero::ModelOfParams(psi);
    in.world_size = static_cast<int>(opts.world_size);
    in.param_bytes = in.grad_bytes = in.comm_bytes = (bf16 || fp16) ? 2 : 4;
    if (device_job && stage > 0) {
      zero::StageEstimate off = zero::EstimateStage(in, stage, zero::OffloadTarget::kCpu);
      if (off.DevicePeakBytes() <= budget) {
        offload_stages.push_back(stage);
      } else {
        plan.notes.push_back(Format("stage {} with the optimizer on the CPU pruned: the estimator puts its per-rank device "
                                    "peak at {} over the budget {}", stage,
                                    FormatBytes(static_cast<double>(off.DevicePeakBytes())),
                                    FormatBytes(static_cast<double>(budget))));
      }
    }
    zero::StageEstimate e = zero::EstimateStage(in, stage);
    if (e.DevicePeakBytes() <= budget) {
      stages.push_back(stage);
    } else {
      plan.notes.push_back(Format("stage {} pruned: the estimator puts its per-rank peak at {} over the budget {}",
                                  stage, FormatBytes(static_cast<double>(e.DevicePeakBytes())), FormatBytes(static_cast<double>(budget))));
    }
  }
  if (psi <= 0) plan.notes.push_back("no model size (autotuning.model_info.num_params or --params): no stage pruned by memory");
  if (!device_job) plan.notes.push_back("offload is not searched: without --device cuda the optimizer state is in host memory either way");
  if (stages.empty() && offload_stages.empty()) fail("autotuning", Format("no ZeRO stage fits the memory budget {} (see the estimate: zerorun-config estimate)", FormatBytes(static_cast<double>(budget))));
  plan.notes.push_back(Format("{} is measured over steps {}..{} (start_profile_step..end_profile_step) of each trial's {}",
                              metric == "throughput" ? "throughput" : "latency", start_step, end_step, end_step));

  // The trials' base: the config without the autotuning section and with the micro batch free.
  rapidjson::Document base;
  base.CopyFrom(d, base.GetAllocator());
  base.RemoveMember("autotuning");
  base.RemoveMember("train_batch_size");
  std::string stage_choices, mb_choices;
  for (int s : stages) stage_choices += (stage_choices.empty() ? "" : ", ") + std::to_string(s);
  // One axis: the stage, or on a device job the user's zero_optimization section with each (stage,
  // optimizer offload) that fits, so that no experiment asks for offload at stage 0.
  std::string zero_axis = "\"zero_stage\": {\"path\": \"zero_optimization.stage\", \"choices\": [" + stage_choices + "]}, ";
  if (device_job) {
    std::string choices;
    auto add = [&](int stage, bool offload) {
      rapidjson::Document z;
      z.SetObject();
      if (base.HasMember("zero_optimization") && base["zero_optimization"].IsObject()) {
        z.CopyFrom(base["zero_optimization"], z.GetAllocator());
      }
      auto set = [&](const char* key, rapidjson::Value v) {
        if (z.HasMember(key)) z.RemoveMember(key);
        z.AddMember(rapidjson::Value(key, z.GetAllocator()), v, z.GetAllocator());
      };
      set("stage", rapidjson::Value(stage));
      rapidjson::Value off(rapidjson::kObjectType);  // the user's offload_optimizer keys, device set
      if (z.HasMember("offload_optimizer") && z["offload_optimizer"].IsObject()) off.CopyFrom(z["offload_optimizer"], z.GetAllocator());
      if (off.HasMember("device")) off.RemoveMember("device");
      off.AddMember("device", rapidjson::StringRef(offload ? "cpu" : "none"), z.GetAllocator());
      set("offload_optimizer", std::move(off));
      choices += (choices.empty() ? "" : ", ") + ToJson(z);
    };
    for (int s : stages) add(s, false);
    for (int s : offload_stages) add(s, true);
    zero_axis = "\"zero\": {\"path\": \"zero_optimization\", \"choices\": [" + choices + "]}, ";
  }
  for (int64_t m : MicroBatches(mb_min, mb_max, mb_n)) mb_choices += (mb_choices.empty() ? "" : ", ") + std::to_string(m);
  std::string args = Quote("--steps") + ", " + Quote(std::to_string(end_step)) + ", " + Quote("--profile_window") + ", " +
                     Quote(Format("{}:{}", start_step, end_step));
  for (const std::string& x : opts.trainer_args) args += ", " + Quote(x);
  // One experiment at a time: throughput is only comparable on an otherwise idle machine. Built by
  // concatenation: Format reads "}}" as a literal brace.
  const std::string objective = metric == "throughput" ? R"({"metric": "summary.window_tokens_per_second", "mode": "max"})"
                                                       : R"({"metric": "summary.window_step_ms", "mode": "min"})";
  const std::string spec =
      "{\"base_config\": " + ToJson(base) + ", \"strategy\": " + Quote(strategy) +
      ", \"trials\": " + std::to_string(num_trials) + ", \"parallel\": 1" + ", \"args\": [" + args + "], \"world_size\": " +
      std::to_string(opts.world_size) + ", \"stop_after_no_improvement\": " + std::to_string(early) +
      ", \"objective\": " + objective + ", \"params\": {" +
      zero_axis +
      "\"micro_batch\": {\"path\": \"train_micro_batch_size_per_gpu\", \"choices\": [" + mb_choices + "]}, " +
      "\"reduce_bucket_size\": {\"path\": \"zero_optimization.reduce_bucket_size\", \"choices\": [50000000, 500000000]}}}";
  plan.spec = ParseSweepSpec(spec, source + " (autotuning)");
  return plan;
}

}  // namespace zerorun::experiments
