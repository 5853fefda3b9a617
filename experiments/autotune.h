// DeepSpeed's autotuning, run by zerorun-sweep --autotune CONFIG: the config's "autotuning" section
// (DeepSpeed's keys) becomes a throughput sweep over ZeRO stage x micro batch x reduce_bucket_size,
// with the stages whose model states cannot fit the memory budget pruned by the estimator
// (zero/estimate.h) before anything runs. docs/experiments.md "Autotuning".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "zerorun/experiments/spec.h"

namespace zerorun::experiments {

struct AutotuneOptions {
  std::vector<std::string> trainer_args;  // passed to every trial (after the sweep's own flags)
  int64_t num_params = 0;                 // Ψ for pruning (0: autotuning.model_info.num_params, else no pruning)
  int64_t budget_bytes = 0;               // per-rank memory budget (0: this machine's available memory / world)
  int64_t world_size = 1;                 // ranks per trial
};

struct AutotunePlan {
  SweepSpec spec;                 // the sweep to run
  std::string results_dir;        // autotuning.results_dir
  std::string exps_dir;           // autotuning.exps_dir: where the trials go
  std::vector<std::string> notes; // what was pruned and why, what is approximated
};

// Throws InvalidArgument naming `source` and the key ("ds.json: autotuning.tuner_type: ...").
AutotunePlan PlanAutotuning(const std::string& config_text, const std::string& source, const AutotuneOptions& opts);

}  // namespace zerorun::experiments
