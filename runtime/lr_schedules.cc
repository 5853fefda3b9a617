// DeepSpeed's LR schedulers; formulas in lr_schedules.h and reference §1.3.
#include "zerorun/runtime/lr_schedules.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "zerorun/core/error.h"
#include "zerorun/core/log.h"

namespace zerorun::runtime {

void LrScheduler::Step() { Step(last_batch_iteration_ + 1); }

void LrScheduler::Step(int64_t iteration) {
  last_batch_iteration_ = iteration;
  Apply();
}

std::vector<double> LrScheduler::GetLr() const {
  std::vector<double> out;
  for (int g = 0; g < target_.NumGroups(); ++g) out.push_back(LrAt(g, last_batch_iteration_));
  return out;
}

void LrScheduler::Apply() {
  for (int g = 0; g < target_.NumGroups(); ++g) target_.SetLr(g, LrAt(g, last_batch_iteration_));
}

double WarmupGamma(const std::string& warmup_type, int64_t k, int64_t n) {
  if (warmup_type == "linear") return static_cast<double>(k) / static_cast<double>(n);
  return std::log(static_cast<double>(k + 1)) * (1.0 / std::log(static_cast<double>(n)));
}

namespace {

// One value per group from a list of one (broadcast) or NumGroups() entries.
std::vector<double> PerGroup(const std::string& sched, const char* name, const std::vector<double>& values,
                             const HyperTarget& target) {
  const size_t groups = static_cast<size_t>(target.NumGroups());
  if (values.size() == 1) return std::vector<double>(groups, values[0]);
  if (values.size() != groups) {
    ZR_THROW(InvalidArgument, "{}: expected 1 or {} values for {} (one per parameter group), got {}", sched, groups,
             name, values.size());
  }
  return values;
}

std::string CheckWarmupType(const std::string& sched, const std::string& t) {
  if (t == "log" || t == "linear") return t;
  ZR_WARN("{}: unknown warmup_type '{}', using 'log' (expected 'log' or 'linear')", sched, t);
  return "log";
}

void CheckWarmupSteps(const std::string& sched, int64_t n) {
  if (n <= 0) ZR_THROW(InvalidArgument, "{}: warmup_num_steps must be a positive integer, got {}", sched, n);
}

class WarmupLr : public LrScheduler {
 public:
  // `decay` selects WarmupDecayLR (linear decay to min over [N, total)).
  WarmupLr(const LrScheduleOptions& o, HyperTarget& t, bool decay)
      : LrScheduler(decay ? "WarmupDecayLR" : "WarmupLR", t, o.last_batch_iteration), decay_(decay) {
    CheckWarmupSteps(type_, o.warmup_num_steps);
    warmup_type_ = CheckWarmupType(type_, o.warmup_type);
    num_steps_ = std::max<int64_t>(2, o.warmup_num_steps);
    min_lrs_ = PerGroup(type_, "warmup_min_lr", o.warmup_min_lr, t);
    if (!o.warmup_max_lr.empty()) {
      max_lrs_ = PerGroup(type_, "warmup_max_lr", o.warmup_max_lr, t);
    } else if (decay) {
      max_lrs_.assign(static_cast<size_t>(t.NumGroups()), 0.001);
    } else {
      for (int g = 0; g < t.NumGroups(); ++g) max_lrs_.push_back(t.GetLr(g));
    }
    if (decay) {
      if (o.total_num_steps <= 0) {
        ZR_THROW(InvalidArgument, "WarmupDecayLR: total_num_steps is required and must be positive, got {}",
                 o.total_num_steps);
      }
      total_ = o.total_num_steps;
      if (total_ < num_steps_) {
        ZR_WARN("WarmupDecayLR: total_num_steps {} is less than warmup_num_steps {}", total_, num_steps_);
      }
    }
    Apply();
  }

 protected:
  double LrAt(int g, int64_t k) const override {
    const double lo = min_lrs_[static_cast<size_t>(g)], hi = max_lrs_[static_cast<size_t>(g)];
    if (k < 0) return lo;
    double gamma;
    if (k < num_steps_) {
      gamma = WarmupGamma(warmup_type_, k, num_steps_);
    } else if (!decay_) {
      gamma = 1.0;
    } else {
      gamma = std::max(0.0, static_cast<double>(total_ - k) / static_cast<double>(std::max<int64_t>(1, total_ - num_steps_)));
    }
    return lo + (hi - lo) * gamma;
  }

 private:
  bool decay_;
  std::string warmup_type_;
  int64_t num_steps_ = 2;
  int64_t total_ = 0;
  std::vector<double> min_lrs_, max_lrs_;
};

class WarmupCosineLr : public LrScheduler {
 public:
  WarmupCosineLr(const LrScheduleOptions& o, HyperTarget& t)
      : LrScheduler("WarmupCosineLR", t, o.last_batch_iteration) {
    CheckWarmupSteps(type_, o.warmup_num_steps);
    if (o.total_num_steps <= 0) {
      ZR_THROW(InvalidArgument, "WarmupCosineLR: total_num_steps is required and must be positive, got {}",
               o.total_num_steps);
    }
    warmup_type_ = CheckWarmupType(type_, o.warmup_type);
    num_steps_ = std::max<int64_t>(2, o.warmup_num_steps);
    total_ = o.total_num_steps;
    if (total_ < num_steps_) {
      ZR_WARN("WarmupCosineLR: total_num_steps {} is less than warmup_num_steps {}", total_, num_steps_);
    }
    min_ratio_ = o.warmup_min_ratio;
    cos_min_ratio_ = o.cos_min_ratio;
    for (int g = 0; g < t.NumGroups(); ++g) org_lrs_.push_back(t.GetLr(g));
    Apply();
  }

  double Ratio(int64_t k) const {
    if (k < 0) return 0.0;
    if (k < num_steps_) {
      const double r = WarmupGamma(warmup_type_, k, num_steps_);
      return min_ratio_ + r * (1.0 - min_ratio_);
    }
    const double p = std::min(1.0, static_cast<double>(k - num_steps_ + 1) /
                                       static_cast<double>(std::max<int64_t>(1, total_ - num_steps_)));
    return std::max(0.0, cos_min_ratio_ + (1.0 - cos_min_ratio_) * (1.0 + std::cos(std::numbers::pi * p)) / 2.0);
  }

 protected:
  double LrAt(int g, int64_t k) const override { return org_lrs_[static_cast<size_t>(g)] * Ratio(k); }

 private:
  std::string warmup_type_;
  int64_t num_steps_ = 2, total_ = 0;
  double min_ratio_ = 0.0, cos_min_ratio_ = 0.0;
  std::vector<double> org_lrs_;
};

class OneCycle : public LrScheduler {
 public:
  OneCycle(const LrScheduleOptions& o, HyperTarget& t) : LrScheduler("OneCycle", t, o.last_batch_iteration), o_(o) {
    if (o.cycle_min_lr < 0.0 || o.cycle_max_lr < 0.0) {
      ZR_THROW(InvalidArgument, "OneCycle: cycle_min_lr and cycle_max_lr are required (got {} and {})", o.cycle_min_lr,
               o.cycle_max_lr);
    }
    if (o.cycle_first_step_size <= 0) {
      ZR_THROW(InvalidArgument, "OneCycle: cycle_first_step_size must be > 0, got {}", o.cycle_first_step_size);
    }
    const int64_t second = o.cycle_second_step_size == -1 ? o.cycle_first_step_size : o.cycle_second_step_size;
    if (second < 0) ZR_THROW(InvalidArgument, "OneCycle: cycle_second_step_size must be >= 0, got {}", second);
    if (o.decay_step_size < 0) ZR_THROW(InvalidArgument, "OneCycle: decay_step_size must be >= 0, got {}", o.decay_step_size);
    total_ = o.cycle_first_step_size + second;
    step_ratio_ = static_cast<double>(o.cycle_first_step_size) / static_cast<double>(total_);
    first_stairs_ = o.cycle_first_stair_count;
    second_stairs_ = o.cycle_second_stair_count == -1 ? first_stairs_ : o.cycle_second_stair_count;
    cycle_momentum_ = o.cycle_momentum;
    if (cycle_momentum_ && !t.HasBetas()) {
      ZR_WARN("OneCycle: cycle_momentum is disabled because the optimizer has no betas");
      cycle_momentum_ = false;
    }
    Apply();
  }

  std::vector<double> GetMomentum() const override {
    if (!cycle_momentum_) return {};
    return std::vector<double>(static_cast<size_t>(target_.NumGroups()), MomAt(last_batch_iteration_));
  }

 protected:
  double Scale(int64_t k) const {
    const double b = static_cast<double>(k + 1) / static_cast<double>(total_);
    const double cycle = std::floor(1.0 + b);
    const double x = 1.0 + b - cycle;
    if (x <= step_ratio_) {
      double s = x / step_ratio_;
      if (first_stairs_ > 0) s = std::floor(s * first_stairs_) / static_cast<double>(first_stairs_);
      return s;
    }
    double s = (x - 1.0) / (step_ratio_ - 1.0);
    if (second_stairs_ > 0) s = std::floor(s * second_stairs_) / static_cast<double>(second_stairs_);
    return s;
  }
  bool Decaying(double rate) const { return o_.decay_step_size != 0 && rate != 0.0; }

  double LrAt(int, int64_t k) const override {
    if (k < total_) return o_.cycle_min_lr + (o_.cycle_max_lr - o_.cycle_min_lr) * Scale(k);
    if (!Decaying(o_.decay_lr_rate)) return o_.cycle_min_lr;
    const double d = static_cast<double>(k - total_ + 1);
    return o_.cycle_min_lr / (1.0 + o_.decay_lr_rate * d / static_cast<double>(o_.decay_step_size));
  }
  double MomAt(int64_t k) const {
    if (k < total_) return o_.cycle_max_mom - (o_.cycle_max_mom - o_.cycle_min_mom) * Scale(k);
    if (!Decaying(o_.decay_mom_rate)) return o_.cycle_max_mom;
    const double d = static_cast<double>(k - total_ + 1);
    return o_.cycle_max_mom * (1.0 + o_.decay_mom_rate * d / static_cast<double>(o_.decay_step_size));
  }
  void Apply() override {
    LrScheduler::Apply();
    if (!cycle_momentum_) return;
    // DeepSpeed writes betas = (momentum, 0.99): beta2 is forced to 0.99 (reference §11.19).
    const double mom = MomAt(last_batch_iteration_);
    for (int g = 0; g < target_.NumGroups(); ++g) target_.SetBetas(g, mom, 0.99);
  }

 private:
  LrScheduleOptions o_;
  int64_t total_ = 1;
  double step_ratio_ = 0.5;
  int64_t first_stairs_ = 0, second_stairs_ = 0;
  bool cycle_momentum_ = true;
};

class LrRangeTest : public LrScheduler {
 public:
  LrRangeTest(const LrScheduleOptions& o, HyperTarget& t) : LrScheduler("LRRangeTest", t, o.last_batch_iteration), o_(o) {
    if (o.lr_range_test_step_size <= 0) {
      ZR_THROW(InvalidArgument, "LRRangeTest: lr_range_test_step_size must be a positive integer, got {}",
               o.lr_range_test_step_size);
    }
    Apply();
  }

 protected:
  double LrAt(int, int64_t k) const override {
    double interval = static_cast<double>(k + 1) / static_cast<double>(o_.lr_range_test_step_size);
    if (o_.lr_range_test_staircase) interval = std::floor(interval);
    return o_.lr_range_test_min_lr * (1.0 + o_.lr_range_test_step_rate * interval);
  }

 private:
  LrScheduleOptions o_;
};

}  // namespace

std::unique_ptr<LrScheduler> MakeLrScheduler(const LrScheduleOptions& o, HyperTarget& target) {
  if (o.type == "WarmupLR") return std::make_unique<WarmupLr>(o, target, false);
  if (o.type == "WarmupDecayLR") return std::make_unique<WarmupLr>(o, target, true);
  if (o.type == "WarmupCosineLR") return std::make_unique<WarmupCosineLr>(o, target);
  if (o.type == "OneCycle") return std::make_unique<OneCycle>(o, target);
  if (o.type == "LRRangeTest") return std::make_unique<LrRangeTest>(o, target);
  ZR_THROW(InvalidArgument,
           "unknown LR scheduler '{}' (supported: WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest)",
           o.type);
}

}  // namespace zerorun::runtime
