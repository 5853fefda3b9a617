// DeepSpeed's LR schedulers (reference §1.3): WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle
// (with momentum cycling) and LRRangeTest, with the reference's formulas.
//
// Semantics shared by all: a counter last_batch_iteration starts at -1 (or the given value);
// construction writes the LR for that iteration into every group; Step() adds one and writes the new
// LRs. The engine steps a scheduler once per *applied* optimizer step, after the update (never on an
// overflow-skipped step), so the update of global step s uses the LR of iteration s-1. The saved state
// is last_batch_iteration alone, as DeepSpeed's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "zerorun/runtime/optim/hyper_target.h"

namespace zerorun::runtime {

// Every scheduler parameter, with DeepSpeed's names and defaults. Per-group values are lists: one
// entry broadcasts to every group, otherwise there must be exactly one per group.
struct LrScheduleOptions {
  // "WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle" or "LRRangeTest".
  std::string type = "WarmupLR";
  int64_t last_batch_iteration = -1;

  // WarmupLR / WarmupDecayLR / WarmupCosineLR
  std::vector<double> warmup_min_lr = {0.0};
  std::vector<double> warmup_max_lr = {};  // empty: WarmupLR uses each group's lr, WarmupDecayLR 0.001
  int64_t warmup_num_steps = 1000;         // > 0; the warm-up uses max(2, warmup_num_steps)
  std::string warmup_type = "log";         // "log" or "linear" (anything else: warning, log)
  int64_t total_num_steps = -1;            // WarmupDecayLR, WarmupCosineLR: required
  double warmup_min_ratio = 0.0;           // WarmupCosineLR
  double cos_min_ratio = 0.0001;           // WarmupCosineLR

  // OneCycle
  double cycle_min_lr = -1.0;  // required
  double cycle_max_lr = -1.0;  // required
  double decay_lr_rate = 0.0;
  int64_t cycle_first_step_size = 2000;
  int64_t cycle_second_step_size = -1;  // -1: same as the first
  int64_t cycle_first_stair_count = 0;
  int64_t cycle_second_stair_count = -1;  // -1: same as the first
  int64_t decay_step_size = 0;
  bool cycle_momentum = true;
  double cycle_min_mom = 0.8;
  double cycle_max_mom = 0.9;
  double decay_mom_rate = 0.0;

  // LRRangeTest
  double lr_range_test_min_lr = 1e-3;
  int64_t lr_range_test_step_size = 2000;
  double lr_range_test_step_rate = 1.0;
  bool lr_range_test_staircase = false;
};

class LrScheduler {
 public:
  virtual ~LrScheduler() = default;

  // last_batch_iteration += 1, then writes the LRs (and momenta) of the new iteration.
  void Step();
  // Sets last_batch_iteration to `iteration` and writes its LRs.
  void Step(int64_t iteration);

  // The LR per group for the current last_batch_iteration (what was last written).
  std::vector<double> GetLr() const;
  // beta1 per group (OneCycle with momentum cycling; empty otherwise).
  virtual std::vector<double> GetMomentum() const { return {}; }

  int64_t last_batch_iteration() const { return last_batch_iteration_; }
  const std::string& type() const { return type_; }

  // State: last_batch_iteration. Restoring writes that iteration's LRs into the optimizer.
  int64_t SaveState() const { return last_batch_iteration_; }
  void LoadState(int64_t last_batch_iteration) { Step(last_batch_iteration); }

 protected:
  LrScheduler(std::string type, HyperTarget& target, int64_t last_batch_iteration)
      : type_(std::move(type)), target_(target), last_batch_iteration_(last_batch_iteration) {}
  // The LR of `group` at iteration k (k may be negative).
  virtual double LrAt(int group, int64_t k) const = 0;
  // Writes LRs (and momenta) for the current iteration into the target.
  virtual void Apply();

  std::string type_;
  HyperTarget& target_;
  int64_t last_batch_iteration_;
};

// Builds the scheduler `options.type` over `target` and writes the LR of the starting iteration.
// Throws InvalidArgument naming the scheduler and the parameter for invalid values.
std::unique_ptr<LrScheduler> MakeLrScheduler(const LrScheduleOptions& options, HyperTarget& target);

// The warm-up fraction of WarmupLR/WarmupDecayLR/WarmupCosineLR at iteration k of n warm-up steps
// (n already clamped to >= 2): ln(k+1)/ln(n) ("log") or k/n ("linear").
double WarmupGamma(const std::string& warmup_type, int64_t k, int64_t n);

}  // namespace zerorun::runtime
