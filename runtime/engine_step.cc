// The accumulation-boundary step: the strategy finishes the reductions and agrees overflow across
// ranks; the loss scale is updated; the global norm from the strategy's agreed sums of squares gives
// one combined unscale+clip factor, applied inside the optimizer's pass over this rank's partition
// (zero/strategy.h: Step, which also refreshes the parameters); LR schedule, counters, progress line
// and monitor events.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "zerorun/core/error.h"
#include "zerorun/core/log.h"
#include "zerorun/core/timer.h"
#include "zerorun/runtime/clip.h"
#include "zerorun/runtime/engine.h"
#include "zerorun/runtime/engine_internal.h"

namespace zerorun::runtime {

StepResult Engine::BoundaryStep() {
  StepResult r;
  r.boundary = true;
  zero::Strategy& strategy = *impl_->strategy;
  strategy.FinishReductions();
  const bool fp16 = config_.fp16.enabled;
  // fp16 and checked bf16 skip a step with non-finite gradients; numerics.enabled makes fp32 and
  // unchecked bf16 look too (and name them), without skipping.
  const bool skips = fp16 || (config_.bf16.enabled && config_.bf16.check_grad_overflow);
  const bool check = skips || config_.numerics.enabled;
  r.loss_scale = impl_->scaler.scale();
  // Where overflow is checked, the norm's sums of squares come first: a non-finite gradient makes its
  // group's sum non-finite, so a finite sum (the same on every rank) proves every gradient finite and
  // the element-by-element scan is skipped. A non-finite sum can also come from large finite values
  // overflowing the sum's fp32 lanes, so then the scan decides.
  std::vector<double> sums;
  if (check) {
    sums = strategy.GroupSumSquares();
    const bool all_sums_finite = std::all_of(sums.begin(), sums.end(), [](double v) { return std::isfinite(v); });
    r.overflow = strategy.AnyNonFinite(/*scan=*/!all_sums_finite);
  }
  if (r.overflow) ReportNonFiniteGradients(&r);  // a collective only when some rank had a bad gradient
  ComputeGradNumerics(&r);
  bool skip = skips && r.overflow;
  if (fp16) {
    try {
      skip = impl_->scaler.Update(r.overflow);  // throws LossScaleError at the minimum scale
    } catch (const Error&) {
      if (rank() == 0) ZR_WARN("step {}: gradients not finite{}", global_steps_ + 1, NonFiniteText(r));
      throw;
    }
  }
  if (r.overflow && rank() == 0) {
    ZR_WARN("step {}: gradients not finite{}; {}", global_steps_ + 1, NonFiniteText(r),
            !skip ? std::string("applying the update anyway (fp32, or bf16 without check_grad_overflow)")
            : fp16 ? Format("skipping the update, loss scale {} -> {}", r.loss_scale, impl_->scaler.scale())
                   : std::string("skipping the update"));
  }
  if (skip) {
    ++skipped_steps_;
  } else {
    if (!check) sums = strategy.GroupSumSquares();
    UnscaleClip uc = ComputeUnscaleClip(GlobalNormFromSumSquares(sums), r.loss_scale, config_.gradient_clipping);
    r.grad_norm = uc.unscaled_norm;
    last_grad_norm_ = uc.unscaled_norm;
    // Every group's step count goes up once per boundary, whatever the strategy's sub-groups.
    impl_->optimizer->BeginStep();
    strategy.Step(uc.grad_scale);
    if (impl_->scheduler) impl_->scheduler->Step();
    r.applied = true;
  }
  ZeroGrad();
  ++global_steps_;
  global_samples_ += config_.train_batch_size();
  WriteMonitorEvents(r);
  LogProgress();
  return r;
}

void Engine::LogProgress() {
  if (!options_.log_progress || rank() != 0 || !config_.steps_per_print) return;
  int64_t every = *config_.steps_per_print;
  if (every <= 0 || global_steps_ % every != 0) return;
  std::string lrs, moms;
  for (double lr : GetLr()) lrs += (lrs.empty() ? "" : ", ") + Format("{}", lr);
  for (auto [a, b] : GetMomentum()) moms += (moms.empty() ? "" : ", ") + Format("({}, {})", a, b);
  ZR_INFO("[Rank 0] step={}, skipped={}, lr=[{}], mom=[{}]", global_steps_, skipped_steps_, lrs, moms);
  // Throughput since the previous progress line (DeepSpeed's throughput timer line).
  const double now = NowSeconds();
  if (config_.timers_throughput_enabled && impl_->last_print_time > 0 && now > impl_->last_print_time) {
    const double seconds = now - impl_->last_print_time;
    const double samples = static_cast<double>(global_samples_ - impl_->last_print_samples);
    char buf[160];
    std::snprintf(buf, sizeof buf, "samples/s=%.1f, tokens/s=%.0f", samples / seconds,
                  samples * static_cast<double>(impl_->tokens_per_sample) / seconds);
    ZR_INFO("[Rank 0] global_step={}, {}", global_steps_, buf);
  }
  impl_->last_print_time = now;
  impl_->last_print_samples = global_samples_;
  if (config_.wall_clock_breakdown) {
    ZR_INFO("time (ms) | {}", timers_.Format({"forward", "backward", "backward_allreduce", "step", "allgather"}));
    timers_.Reset();
  }
}

}  // namespace zerorun::runtime
